//! `cairn checkpoint` and `cairn backup ...`, end to end: the built binary
//! run on a real directory, its JSON read back, the results opened with
//! the library.

use cairndb::{Db, Options};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn cairn(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

/// Runs `cairn` with `args`, expects success, and parses stdout as JSON.
fn cairn_json(args: &[&str]) -> Value {
    let paths: Vec<&Path> = args.iter().map(Path::new).collect();
    let out = cairn(&paths);
    assert!(
        out.status.success(),
        "cairn {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn fill(dir: &Path, from: u32, to: u32) {
    let db = Db::open(dir, Options::default()).expect("open");
    for i in from..to {
        db.put(format!("k{i:06}"), vec![(i % 251) as u8; 1500])
            .expect("put");
    }
    db.close().expect("close");
}

fn count(dir: &Path) -> usize {
    let db = Db::open(dir, Options::default()).expect("open");
    let n = db.iter().count();
    db.close().expect("close");
    n
}

#[test]
fn checkpoint_and_backup_commands_round_trip() {
    let root = tempfile::tempdir().expect("tempdir");
    let p = |name: &str| root.path().join(name).to_str().expect("utf-8").to_owned();
    let (db, ck, backups) = (p("db"), p("ck"), p("backups"));
    fill(Path::new(&db), 0, 2000);

    let made = cairn_json(&["checkpoint", &db, &ck, "--json"]);
    assert_eq!(made["seqno"], 2000);
    assert_eq!(count(Path::new(&ck)), 2000);

    let first = cairn_json(&["backup", "create", &db, &backups, "--json"]);
    assert_eq!(first["id"], 1);
    assert_eq!(first["bytes_copied"], first["bytes"]);
    fill(Path::new(&db), 2000, 2050);
    let second = cairn_json(&["backup", "create", &db, &backups, "--json"]);
    assert_eq!(second["id"], 2);
    let (copied, bytes) = (
        second["bytes_copied"].as_u64().expect("n"),
        second["bytes"].as_u64().expect("n"),
    );
    assert!(copied * 5 < bytes, "incremental: {second}");

    let list = cairn_json(&["backup", "list", &backups, "--json"]);
    assert_eq!(list.as_array().expect("array").len(), 2);
    let verified = cairn_json(&["backup", "verify", &backups, "--json"]);
    assert_eq!(verified.as_array().expect("array").len(), 2);

    let restored = p("restored");
    let r = cairn_json(&["backup", "restore", &backups, "1", &restored, "--json"]);
    assert_eq!(r["seqno"], first["seqno"]);
    assert_eq!(count(Path::new(&restored)), 2000);

    // Damage one stored file: verify fails, naming it.
    let store = root.path().join("backups/files");
    let victim = std::fs::read_dir(&store)
        .expect("store")
        .map(|e| e.expect("entry").path())
        .find(|f| f.to_string_lossy().contains(".table-"))
        .expect("a stored table");
    let mut bytes = std::fs::read(&victim).expect("read");
    bytes[10] ^= 0xff;
    std::fs::write(&victim, bytes).expect("write");
    let out = cairn(&[
        Path::new("backup"),
        Path::new("verify"),
        Path::new(&backups),
    ]);
    assert!(!out.status.success(), "verify must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    let name = victim.file_name().expect("name").to_string_lossy();
    assert!(err.contains(&*name), "stderr names the file: {err}");

    let out = cairn(&[
        Path::new("backup"),
        Path::new("delete"),
        Path::new(&backups),
        Path::new("1"),
    ]);
    assert!(out.status.success());
    let list = cairn_json(&["backup", "list", &backups, "--json"]);
    assert_eq!(list[0]["id"], 2);
    assert_eq!(list.as_array().expect("array").len(), 1);
}
