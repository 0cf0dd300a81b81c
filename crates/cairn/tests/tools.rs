//! The operator's subcommands, end to end through the built `cairn`
//! binary: put/get/delete/scan with each encoding, stats and verify as
//! JSON, dump and load round-tripping every keyspace, compact, repair of
//! a lost manifest and of a damaged table, and the exit statuses scripts
//! rely on.

#![allow(clippy::unwrap_used, reason = "test code")]

use cairndb::{Db, Options};
use std::path::Path;
use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .unwrap()
}

/// `cairn args`, again for up to 10 s while it finds the database locked:
/// the tests of this binary run in parallel, and a child one of them
/// spawns while another's handle of a directory is open shares that
/// handle's lock until the child's exec closes it (long enough to matter
/// on a loaded machine). For the runs that expect no lock; the test of a
/// lock held on purpose calls `cairn`.
fn cairn_unlocked(args: &[&str]) -> Output {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let out = cairn(args);
        let locked = String::from_utf8_lossy(&out.stderr).contains("database is locked");
        if !locked || std::time::Instant::now() >= until {
            return out;
        }
        eprintln!("retrying cairn {args:?}: locked");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `Db::open` of `dir`, again for up to 10 s while the directory is
/// locked: a child another test spawns just after a handle of `dir` was
/// closed still shares that handle's lock until its exec (as for
/// `cairn_unlocked`).
fn open_unlocked(dir: &Path) -> Db {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Db::open(dir, Options::default()) {
            Err(cairndb::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < until =>
            {
                eprintln!("retrying open of {}: locked", dir.display());
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            opened => return opened.unwrap(),
        }
    }
}

/// Runs `cairn args`, expecting exit status `code`; returns stdout.
fn run(args: &[&str], code: i32) -> String {
    let out = cairn_unlocked(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "cairn {args:?}: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A database with two keyspaces, inline and separated values, binary keys.
fn make(dir: &Path) {
    let db = Db::open(dir, Options::default()).unwrap();
    for i in 0..3000u32 {
        let len = if i % 3 == 0 { 3000 } else { 50 };
        db.put(format!("k{i:05}"), vec![(i % 200) as u8 + 1; len])
            .unwrap();
    }
    db.put(b"\x00\xffbin", b"\x01\x02").unwrap();
    let users = db.keyspace("users").unwrap();
    for i in 0..100u32 {
        users.put(format!("u{i:03}"), format!("name{i}")).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
}

fn all(dir: &Path) -> Vec<(String, Vec<cairndb::KeyValue>)> {
    let db = open_unlocked(dir);
    let out = db
        .keyspaces()
        .iter()
        .map(|name| {
            let ks = db.keyspace(name).unwrap();
            (
                name.clone(),
                ks.iter().collect::<cairndb::Result<Vec<_>>>().unwrap(),
            )
        })
        .collect();
    db.close().unwrap();
    out
}

#[test]
fn put_get_delete_scan_with_each_encoding() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    make(&db);
    let d = s(&db);
    assert_eq!(
        run(&["get", d, "k00001"], 0),
        format!("{}\n", "\\x02".repeat(50))
    );
    run(&["put", d, "greeting", "hello world"], 0);
    assert_eq!(run(&["get", d, "greeting"], 0), "hello world\n");
    assert_eq!(
        run(&["get", d, "--value-encoding", "hex", "greeting"], 0),
        "68656c6c6f20776f726c64\n"
    );
    assert_eq!(
        run(
            &[
                "get",
                d,
                "--key-encoding",
                "hex",
                "--value-encoding",
                "base64",
                "00ff62696e"
            ],
            0
        ),
        "AQI=\n"
    );
    assert_eq!(
        run(&["get", d, "\\x00\\xffbin", "--value-encoding", "hex"], 0),
        "0102\n"
    );
    run(&["delete", d, "greeting"], 0);
    assert_eq!(
        run(&["get", d, "greeting"], 1),
        "",
        "absent: exit 1, nothing printed"
    );
    let json: serde_json::Value =
        serde_json::from_str(&run(&["get", d, "greeting", "--json"], 1)).unwrap();
    assert!(json["value"].is_null());
    // Keyspaces.
    assert_eq!(run(&["get", d, "-k", "users", "u007"], 0), "name7\n");
    assert_eq!(
        run(&["get", d, "u007"], 1),
        "",
        "not in the default keyspace"
    );
    let e = cairn(&["get", d, "-k", "nosuch", "x"]);
    assert_eq!(e.status.code(), Some(2), "a missing keyspace is an error");
    assert!(String::from_utf8_lossy(&e.stderr).contains("no keyspace"));
    // Scans: a range, a prefix, reverse, limit, JSON lines.
    let range = run(
        &[
            "scan",
            d,
            "--from",
            "k00010",
            "--to",
            "k00013",
            "--keys-only",
        ],
        0,
    );
    assert_eq!(range, "k00010\nk00011\nk00012\n");
    let prefix = run(&["scan", d, "-k", "users", "--prefix", "u09"], 0);
    assert_eq!(prefix.lines().count(), 10);
    assert!(prefix.starts_with("u090\tname90\n"));
    let rev = run(&["scan", d, "--reverse", "--limit", "2", "--keys-only"], 0);
    assert_eq!(rev, "k02999\nk02998\n");
    let lines = run(&["scan", d, "-k", "users", "--json", "--limit", "3"], 0);
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["key"], "u000");
    assert_eq!(first["value"], "name0");
    // Writes of the tools are durable: the library reads them.
    let reopened = open_unlocked(&db);
    assert_eq!(reopened.get("greeting").unwrap(), None);
    reopened.close().unwrap();
}

#[test]
fn stats_verify_compact_and_a_damaged_table() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    make(&db);
    let d = s(&db);
    let stats: serde_json::Value = serde_json::from_str(&run(&["stats", d, "--json"], 0)).unwrap();
    assert_eq!(stats["keyspaces"], serde_json::json!(["default", "users"]));
    assert!(stats["table_entries"].as_u64().unwrap() >= 3101);
    let live = stats["value_bytes_live"].as_u64().unwrap();
    assert!(live >= 1000 * 3000);
    // The values files hold the live bytes; what else they hold is dead.
    let files = stats["value_file_bytes"].as_u64().unwrap();
    assert!(files >= live, "value files {files} < live {live}");
    assert_eq!(stats["value_bytes_dead"].as_u64().unwrap(), files - live);
    assert!(
        stats["write_amplification"].is_null(),
        "nothing written by this open"
    );
    let text = run(&["stats", d], 0);
    assert!(text.contains("space amplification") && text.contains("dead or not yet reclaimed"));
    assert!(text.contains("since created"), "{text}");
    // Since the database was created: `make`'s writes, flushed.
    let lifetime = stats["lifetime_write_amplification"].as_f64().unwrap();
    assert!(
        (1.0..10.0).contains(&lifetime),
        "lifetime write amplification {lifetime}"
    );
    let v: serde_json::Value = serde_json::from_str(&run(&["verify", d, "--json"], 0)).unwrap();
    assert_eq!(v["ok"], true);
    assert!(
        v["values"].as_u64().unwrap() >= 1000,
        "separated values read: {v}"
    );
    let c: serde_json::Value = serde_json::from_str(&run(&["compact", d, "--json"], 0)).unwrap();
    assert!(c["bytes_after"].as_u64().unwrap() > 0);
    assert_eq!(
        run(&["get", d, "k00003", "--value-encoding", "hex"], 0).len(),
        6001
    );
    // Damage a data block of a table: verify exits 1 and names the file.
    let table = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "table"))
        .unwrap();
    let mut bytes = std::fs::read(&table).unwrap();
    bytes[20] ^= 0x55;
    std::fs::write(&table, bytes).unwrap();
    let out = run(&["verify", d], 1);
    let name = table.file_name().unwrap().to_str().unwrap();
    assert!(out.contains("problem:") && out.contains(name), "{out}");
}

#[test]
fn dump_and_load_round_trip_every_keyspace() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, copy, file) = (
        tmp.path().join("db"),
        tmp.path().join("copy"),
        tmp.path().join("db.dump"),
    );
    make(&db);
    run(&["dump", s(&db), s(&file)], 0);
    run(&["load", s(&file), s(&copy)], 0);
    assert_eq!(all(&copy), all(&db));
    // Loading again into the now full copy is refused.
    let again = cairn(&["load", s(&file), s(&copy)]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    // A damaged dump is refused with the frame's offset, and a cut one.
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    let bad = tmp.path().join("bad.dump");
    std::fs::write(&bad, &bytes).unwrap();
    let e = cairn(&["load", s(&bad), s(&tmp.path().join("bad"))]);
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("checksum"));
    bytes[mid] ^= 1;
    std::fs::write(&bad, &bytes[..bytes.len() - 10]).unwrap();
    let e = cairn(&["load", s(&bad), s(&tmp.path().join("cut"))]);
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("cut short"));
}

#[test]
fn repair_rebuilds_a_lost_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    make(&db);
    let before = all(&db);
    let d = s(&db);
    // A healthy database: nothing lost, exit status 0.
    let v: serde_json::Value = serde_json::from_str(&run(&["repair", d, "--json"], 0)).unwrap();
    assert_eq!(v["lost_nothing"], true, "{v}");
    // The manifest and CURRENT deleted: open fails, repair brings it back.
    for e in std::fs::read_dir(&db).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        if name.starts_with("MANIFEST-") || name == "CURRENT" {
            std::fs::remove_file(p).unwrap();
        }
    }
    assert_eq!(cairn(&["get", d, "k00001"]).status.code(), Some(2));
    let out = run(&["repair", d], 0);
    assert!(out.contains("tables kept"), "{out}");
    assert!(out.contains("users"), "{out}");
    assert!(all(&db) == before, "every keyspace's data back");
    let v: serde_json::Value = serde_json::from_str(&run(&["verify", d, "--json"], 0)).unwrap();
    assert_eq!(v["ok"], true);
    // A damaged table: moved aside, exit status 1, JSON names it.
    let table = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "table"))
        .unwrap();
    let mut bytes = std::fs::read(&table).unwrap();
    bytes[20] ^= 0x55;
    std::fs::write(&table, bytes).unwrap();
    let v: serde_json::Value = serde_json::from_str(&run(&["repair", d, "--json"], 1)).unwrap();
    assert_eq!(v["lost_nothing"], false);
    let lost = v["tables_lost"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "{v}");
    assert!(
        lost[0]["reason"].as_str().unwrap().contains("checksum"),
        "{v}"
    );
    assert!(db.join("lost").join(table.file_name().unwrap()).exists());
    assert!(run(&["repair", "--help"], 0).contains("lost"));
    // Another process holding the database: exit status 2, the lock named.
    let open = open_unlocked(&db);
    let out = cairn(&["repair", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LOCK"));
    open.close().unwrap();
}
