//! `Db::repair`: a database whose manifest is lost or damaged is rebuilt
//! from its tables and journals. After a repair, open succeeds, every
//! acknowledged write held by an intact table or journal record reads
//! back, and `verify` finds nothing wrong; damaged or foreign tables are
//! moved into `lost/` and reported, never deleted, and repair never
//! panics on garbage.

mod common;

use cairndb::io::{Fs, MemFs};
use cairndb::{Db, KeyspaceOptions, Options, RepairProgress, WriteOptions};
use common::{Image, files_with, mem_opts, restore, snapshot};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";

fn opts(fs: &MemFs) -> Options {
    Options {
        value_separation_min: 200,
        background_compaction: false,
        ..mem_opts(fs, 32 << 10)
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(3) { 600 } else { 30 };
    (0..len)
        .map(|j| (i * 7 + j * 13 + round * 101) as u8)
        .collect()
}

/// Tables on two levels (a compaction, then flushes), separated values
/// in values files and journals, overwrites, deletes, and synced writes
/// left in the journal; closed cleanly. Returns the image and its data.
fn canonical() -> (Image, Model) {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let mut model = Model::new();
    for i in 0..600 {
        db.put(key(i), value(i, 0)).expect("put");
        model.insert(key(i), value(i, 0));
    }
    db.flush().expect("flush");
    for i in (0..600).step_by(3) {
        db.put(key(i), value(i, 1)).expect("put");
        model.insert(key(i), value(i, 1));
    }
    for i in (1..600).step_by(11) {
        db.delete(key(i)).expect("delete");
        model.remove(&key(i));
    }
    db.compact().expect("compact");
    for i in 550..700 {
        db.put(key(i), value(i, 2)).expect("put");
        model.insert(key(i), value(i, 2));
    }
    db.flush().expect("flush");
    for i in 680..720 {
        db.put_opt(key(i), value(i, 3), &WriteOptions::synced())
            .expect("put");
        model.insert(key(i), value(i, 3));
    }
    db.close().expect("close");
    (snapshot(&fs, Path::new(DIR)), model)
}

fn check(fs: &MemFs, want: &Model, what: &str) {
    let db = Db::open(DIR, opts(fs)).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    for (k, v) in want {
        assert_eq!(
            db.get(k)
                .unwrap_or_else(|e| panic!("{what}: get: {e}"))
                .as_deref(),
            Some(v.as_slice()),
            "{what}: {}",
            String::from_utf8_lossy(k)
        );
    }
    let rows: Model = common::scan(&db)
        .unwrap_or_else(|e| panic!("{what}: scan: {e}"))
        .into_iter()
        .collect();
    assert!(rows == *want, "{what}: scan differs ({} rows)", rows.len());
    let report = db.verify().expect("verify");
    assert!(report.is_ok(), "{what}: verify: {:?}", report.problems);
    db.close().expect("close");
}

fn manifests(fs: &MemFs) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(Path::new(DIR))
        .expect("list")
        .into_iter()
        .filter(|n| n.starts_with("MANIFEST-"))
        .collect();
    v.sort();
    v
}

fn path(name: &str) -> PathBuf {
    Path::new(DIR).join(name)
}

fn read(fs: &MemFs, name: &str) -> Vec<u8> {
    cairndb::io::read_all(fs, &path(name)).expect("read")
}

fn write(fs: &MemFs, name: &str, bytes: &[u8]) {
    let _ = fs.remove(&path(name));
    let mut f = fs.create(&path(name)).expect("create");
    f.append(bytes).expect("append");
    f.sync().expect("sync");
}

#[test]
fn a_lost_manifest_is_rebuilt_from_the_tables_and_journals() {
    let (image, model) = canonical();
    let fs = restore(&image, Path::new(DIR));
    for m in manifests(&fs) {
        fs.remove(&path(&m)).expect("remove");
    }
    fs.remove(&path("CURRENT")).expect("remove CURRENT");
    assert!(
        Db::open(DIR, opts(&fs)).is_err(),
        "open refuses a database whose CURRENT is gone"
    );
    let mut seen = Vec::new();
    let report = Db::repair_with(DIR, &opts(&fs), |p| seen.push(p)).expect("repair");
    println!("{report}");
    // Progress: table bytes only grow, reach their total, then the
    // journals, then the merge.
    let tables: Vec<(usize, usize, u64, u64)> = seen
        .iter()
        .filter_map(|p| match *p {
            RepairProgress::Tables {
                done,
                total,
                bytes_done,
                bytes_total,
            } => Some((done, total, bytes_done, bytes_total)),
            _ => None,
        })
        .collect();
    assert!(
        tables
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].2 <= w[1].2),
        "{seen:?}"
    );
    let last = tables.last().expect("table progress");
    assert!(
        last.0 == last.1 && last.2 == last.3 && last.3 > 0,
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().rev().take(2).collect::<Vec<_>>(),
        [&RepairProgress::Merging, &RepairProgress::Journals],
        "{seen:?}"
    );
    assert!(report.manifest.is_none());
    assert!(report.tables_lost.is_empty(), "{report}");
    assert!(report.tables_kept.len() >= 2, "{report}");
    assert!(report.compacted, "levels were lost: merged");
    assert!(
        report.journals.iter().any(|j| j.batches_replayed > 0),
        "the synced writes left in the journal are replayed: {report}"
    );
    assert!(report.last_seqno > 0);
    check(&fs, &model, "manifest deleted");
    // A second repair of the repaired database loses nothing.
    let again = Db::repair(DIR, &opts(&fs)).expect("repair again");
    assert!(again.lost_nothing(), "{again}");
    check(&fs, &model, "repaired twice");
}

#[test]
fn a_healthy_database_loses_nothing() {
    let (image, model) = canonical();
    let fs = restore(&image, Path::new(DIR));
    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    assert!(report.lost_nothing(), "{report}");
    let m = report.manifest.as_ref().expect("the manifest is read");
    assert!(m.damaged_at.is_none(), "{report}");
    assert!(!report.compacted, "levels kept: {report}");
    assert!(
        report.tables_kept.iter().any(|t| t.level > 0),
        "the salvaged levels are kept: {report}"
    );
    check(&fs, &model, "healthy");
}

/// The manifest damaged at many places, or cut short: every time repair
/// salvages what it can and the tables and journals give back the rest.
#[test]
fn a_damaged_manifest_is_repaired_wherever_the_damage_is() {
    let (image, model) = canonical();
    let name = image
        .keys()
        .find(|n| n.starts_with("MANIFEST-"))
        .expect("a manifest")
        .clone();
    let len = image[&name].len();
    let mut mutations: Vec<(String, Vec<u8>)> = Vec::new();
    for at in (0..len).step_by((len / 12).max(1)) {
        let mut b = image[&name].clone();
        b[at] ^= 0x41;
        mutations.push((format!("byte {at} flipped"), b));
    }
    for cut in [0, 10, len / 3, len / 2, len - 1] {
        mutations.push((format!("cut at {cut}"), image[&name][..cut].to_vec()));
    }
    let mut garbage = image[&name].clone();
    for (i, b) in garbage.iter_mut().enumerate().skip(len / 2) {
        *b = (i * 131 % 251) as u8;
    }
    mutations.push(("second half overwritten".into(), garbage));
    for (what, bytes) in mutations {
        let fs = restore(&image, Path::new(DIR));
        write(&fs, &name, &bytes);
        let report = Db::repair(DIR, &opts(&fs)).unwrap_or_else(|e| panic!("{what}: repair: {e}"));
        assert!(report.tables_lost.is_empty(), "{what}: {report}");
        check(&fs, &model, &what);
    }
}

/// One table damaged: it is moved into `lost/` and reported; everything
/// the other tables hold reads back.
#[test]
fn a_damaged_table_is_moved_aside_and_the_rest_kept() {
    let fs = MemFs::new();
    let o = Options {
        value_separation_min: 1 << 20,
        ..opts(&fs)
    };
    let db = Db::open(DIR, o.clone()).expect("open");
    // Three tables of disjoint keys.
    let mut parts: Vec<Model> = Vec::new();
    for part in 0..3u32 {
        let mut m = Model::new();
        for i in part * 100..part * 100 + 100 {
            db.put(key(i), value(i, 0)).expect("put");
            m.insert(key(i), value(i, 0));
        }
        db.flush().expect("flush");
        parts.push(m);
    }
    db.close().expect("close");
    let tables = files_with(&fs, Path::new(DIR), ".table");
    assert_eq!(tables.len(), 3, "{tables:?}");
    // The second table's first data block.
    let mut bytes = read(&fs, &tables[1]);
    bytes[20] ^= 0xff;
    write(&fs, &tables[1], &bytes);
    let report = Db::repair(DIR, &o).expect("repair");
    println!("{report}");
    assert_eq!(report.tables_lost.len(), 1, "{report}");
    let lost = &report.tables_lost[0];
    assert_eq!(format!("{:06}.table", lost.number), tables[1]);
    assert!(lost.reason.contains("checksum"), "{}", lost.reason);
    assert!(fs.exists(&lost.moved_to), "moved, not deleted");
    assert_eq!(lost.moved_to, path("lost").join(&tables[1]));
    assert_eq!(read(&fs, &format!("lost/{}", tables[1])), bytes);
    assert!(report.bytes_lost >= bytes.len() as u64);
    let mut want = parts[0].clone();
    want.extend(parts[2].clone());
    check(&fs, &want, "one table damaged");
}

/// Keyspaces and their data survive the loss of the manifest: version-5
/// tables name their keyspace, with its options.
#[test]
fn keyspaces_survive_a_lost_manifest() {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let users = db
        .keyspace_with(
            "users",
            KeyspaceOptions {
                value_separation_min: 64,
                ..KeyspaceOptions::default()
            },
        )
        .expect("users");
    let orders = db.keyspace("orders").expect("orders");
    let unflushed = db.keyspace("unflushed").expect("unflushed");
    for i in 0..200u32 {
        db.put(key(i), b"default").expect("put");
        users.put(key(i), value(i, 1)).expect("put");
        orders.put(key(i), format!("order {i}")).expect("put");
    }
    db.flush().expect("flush");
    users.delete(key(7)).expect("delete");
    unflushed
        .put_opt(b"k", b"only in the journal", &WriteOptions::synced())
        .expect("put");
    db.close().expect("close");
    for m in manifests(&fs) {
        fs.remove(&path(&m)).expect("remove");
    }
    fs.remove(&path("CURRENT")).expect("remove CURRENT");

    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    println!("{report}");
    assert!(report.keyspaces.contains(&"users".to_string()), "{report}");
    assert!(report.keyspaces.contains(&"orders".to_string()), "{report}");
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let names = db.keyspaces();
    assert!(names.contains(&"users".to_string()), "{names:?}");
    assert!(names.contains(&"orders".to_string()), "{names:?}");
    let users = db.keyspace("users").expect("users");
    let orders = db.keyspace("orders").expect("orders");
    for i in 0..200u32 {
        assert_eq!(
            db.get(key(i)).expect("get").as_deref(),
            Some(&b"default"[..])
        );
        let want = (i != 7).then(|| value(i, 1));
        assert_eq!(users.get(key(i)).expect("get"), want, "users {i}");
        assert_eq!(
            orders.get(key(i)).expect("get"),
            Some(format!("order {i}").into_bytes())
        );
    }
    // A keyspace that only the journal knew of comes back under a made-up
    // name, with its data.
    let recovered: Vec<String> = names
        .iter()
        .filter(|n| n.starts_with("recovered-"))
        .cloned()
        .collect();
    assert_eq!(recovered.len(), 1, "{names:?}");
    let ks = db.keyspace(&recovered[0]).expect("recovered");
    assert_eq!(
        ks.get(b"k").expect("get").as_deref(),
        Some(&b"only in the journal"[..])
    );
    assert!(db.verify().expect("verify").is_ok());
}

/// Random bytes under table and journal names, and an empty table file:
/// repair moves the tables aside, never panics, keeps the real data.
#[test]
fn garbage_files_never_make_repair_panic() {
    let (image, model) = canonical();
    let fs = restore(&image, Path::new(DIR));
    let mut x = 0x1234_5678_u64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    write(&fs, "009990.table", &noise(5000));
    write(&fs, "009991.table", &[]);
    write(&fs, "009992.table", &noise(70));
    write(&fs, "009993.journal", &noise(3000));
    write(&fs, "009994.values", &noise(100));
    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    println!("{report}");
    let lost: Vec<u64> = report.tables_lost.iter().map(|t| t.number).collect();
    assert_eq!(lost, vec![9990, 9991, 9992], "{report}");
    check(&fs, &model, "garbage files");
}

/// A table of another database is not taken in.
#[test]
fn a_table_of_another_database_is_moved_aside() {
    let (image, model) = canonical();
    let (other, _) = canonical();
    let fs = restore(&image, Path::new(DIR));
    let foreign = other
        .keys()
        .find(|n| n.ends_with(".table"))
        .expect("a table");
    write(&fs, "009000.table", &other[foreign]);
    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    assert_eq!(report.tables_lost.len(), 1, "{report}");
    assert!(
        report.tables_lost[0].reason.contains("another database")
            || report.tables_lost[0].reason.contains("written as"),
        "{report}"
    );
    check(&fs, &model, "foreign table");
}

/// Repair takes the writer lock: an open handle makes it fail, clearly.
#[test]
fn repair_refuses_a_database_in_use() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let db = Db::open(&dir, Options::default()).expect("open");
    db.put(b"a", b"b").expect("put");
    let err = Db::repair(&dir, &Options::default()).expect_err("locked");
    assert!(err.to_string().contains("LOCK"), "{err}");
    db.close().expect("close");
    let report = Db::repair(&dir, &Options::default()).expect("repair");
    assert!(report.lost_nothing(), "{report}");
    let db = Db::open(&dir, Options::default()).expect("open");
    assert_eq!(db.get(b"a").expect("get").as_deref(), Some(&b"b"[..]));
    assert!(
        Db::repair(tmp.path().join("missing"), &Options::default()).is_err(),
        "nothing to repair"
    );
}

/// Tables written before version 5 name no keyspace: a database of the
/// build before (testdata/format7) loses its manifest and repair gives its
/// tables to the default keyspace, saying so.
#[test]
fn tables_of_an_older_version_are_repaired_into_the_default_keyspace() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/format7");
    let copy = |to: &Path| {
        std::fs::create_dir_all(to).expect("mkdir");
        for e in std::fs::read_dir(&src).expect("image") {
            let e = e.expect("entry");
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    };
    let o = || Options {
        journal_direct: false,
        background_compaction: false,
        ..Options::default()
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    copy(&a);
    copy(&b);
    let rows = |dir: &Path| -> Vec<(Vec<u8>, Vec<u8>)> {
        let db = Db::open(dir, o()).expect("open");
        let rows = common::scan(&db).expect("scan");
        assert!(db.verify().expect("verify").is_ok());
        db.close().expect("close");
        rows
    };
    let want = rows(&a);
    assert!(want.len() > 300);
    for e in std::fs::read_dir(&b).expect("dir") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("MANIFEST-") || name == "CURRENT" {
            std::fs::remove_file(e.path()).expect("remove");
        }
    }
    let report = Db::repair(&b, &o()).expect("repair");
    println!("{report}");
    assert!(report.tables_lost.is_empty(), "{report}");
    assert!(
        report.notes.iter().any(|n| n.contains("default keyspace")),
        "{report}"
    );
    assert!(rows(&b) == want, "the image's data, whole");
}

/// A compaction's inputs left beside its outputs (what a crash between
/// the compaction's tables and its manifest edit, or the loss of that
/// edit, leaves): two tables would hold one (key, seqno). With the
/// manifest naming the outputs, the leftover inputs go aside; with the
/// manifest lost, the newer (the outputs) go, since the inputs hold all
/// they hold. Either way every key reads back and compaction works.
#[test]
fn a_compactions_inputs_beside_its_outputs_are_not_both_kept() {
    // Values inline: the inputs' journals are gone after the compaction.
    let inline = |fs: &MemFs| Options {
        value_separation_min: 1 << 20,
        ..opts(fs)
    };
    let fs = MemFs::new();
    let o = inline(&fs);
    let db = Db::open(DIR, o.clone()).expect("open");
    let mut model = Model::new();
    for round in 0..3u32 {
        for i in (round..400).step_by(2) {
            db.put(key(i), value(i, round)).expect("put");
            model.insert(key(i), value(i, round));
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
    let inputs: Vec<(String, Vec<u8>)> = files_with(&fs, Path::new(DIR), ".table")
        .into_iter()
        .map(|n| {
            let b = read(&fs, &n);
            (n, b)
        })
        .collect();
    assert!(inputs.len() >= 2, "{}", inputs.len());
    let db = Db::open(DIR, o.clone()).expect("open");
    db.compact().expect("compact");
    db.close().expect("close");
    let compacted = snapshot(&fs, Path::new(DIR));
    for lose_manifest in [false, true] {
        let fs = restore(&compacted, Path::new(DIR));
        for (n, b) in &inputs {
            write(&fs, n, b);
        }
        if lose_manifest {
            for m in manifests(&fs) {
                fs.remove(&path(&m)).expect("remove");
            }
        }
        let o = inline(&fs);
        let report = Db::repair(DIR, &o).expect("repair");
        println!("{report}");
        let input_numbers: Vec<String> = inputs.iter().map(|(n, _)| n.clone()).collect();
        let lost: Vec<String> = report
            .tables_lost
            .iter()
            .map(|t| format!("{:06}.table", t.number))
            .collect();
        if lose_manifest {
            assert!(
                !lost.is_empty() && lost.iter().all(|n| !input_numbers.contains(n)),
                "the outputs go: {report}"
            );
        } else {
            // (An input whose every entry the compaction dropped shares
            // none with the outputs: it stays, and the merge after the
            // repair drops its entries again.)
            assert!(
                !lost.is_empty() && lost.iter().all(|n| input_numbers.contains(n)),
                "the leftover inputs go: {report}"
            );
        }
        assert!(
            report
                .tables_lost
                .iter()
                .all(|t| t.reason.contains("holds too")),
            "{report}"
        );
        check(
            &fs,
            &model,
            &format!("inputs and outputs, manifest lost: {lose_manifest}"),
        );
        let db = Db::open(DIR, o).expect("open");
        db.compact().expect("compaction meets no duplicate");
        db.close().expect("close");
    }
}

/// A journal damaged in its middle: the records before the damage are
/// replayed, the journal is copied into `lost/` and the bytes from the
/// damage on are reported lost. A torn tail of the newest journal (an
/// interrupted append) is not a loss.
#[test]
fn a_damaged_journal_is_replayed_up_to_its_damage() {
    let (image, model) = canonical();
    let journal = image
        .iter()
        .filter(|(n, b)| n.ends_with(".journal") && !b.is_empty())
        .map(|(n, _)| n.clone())
        .next_back()
        .expect("a journal with records");
    // A torn tail: half a record appended.
    let fs = restore(&image, Path::new(DIR));
    let mut torn = image[&journal].clone();
    torn.extend_from_slice(&image[&journal][..40]);
    write(&fs, &journal, &torn);
    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    assert!(report.lost_nothing(), "{report}");
    assert!(
        report.journals.iter().any(|j| j.torn_tail == 40),
        "{report}"
    );
    check(&fs, &model, "torn journal tail");
    // Damage in the middle.
    let fs = restore(&image, Path::new(DIR));
    let mut bytes = image[&journal].clone();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    write(&fs, &journal, &bytes);
    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    println!("{report}");
    let j = report
        .journals
        .iter()
        .find(|j| format!("{:06}.journal", j.number) == journal)
        .expect("the journal in the report");
    let lost_at = j.lost_at.expect("damage found") as usize;
    assert!(lost_at <= at && j.batches_replayed > 0, "{report}");
    assert_eq!(j.bytes_lost, (bytes.len() - lost_at) as u64);
    assert!(!report.lost_nothing());
    assert_eq!(
        read(&fs, &format!("lost/{journal}")),
        bytes,
        "kept in lost/"
    );
    let db = Db::open(DIR, opts(&fs)).expect("open");
    // The writes before the journal (in tables) and its first batches.
    for i in 0..680u32 {
        assert_eq!(db.get(key(i)).expect("get"), model.get(&key(i)).cloned());
    }
    assert_eq!(db.get(key(680)).expect("get"), Some(value(680, 3)));
    assert!(db.verify().expect("verify").is_ok());
}

/// A database that never flushed has no table to give its identity, and
/// its journals' framing is salted with it: repair finds a seed the
/// records' checksums accept, and the synced writes come back.
#[test]
fn a_database_that_never_flushed_is_repaired_from_its_journal() {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let ks = db.keyspace("ks").expect("keyspace");
    let mut model = Model::new();
    for i in 0..40u32 {
        let v = format!("v{i}").into_bytes();
        db.put_opt(key(i), &v, &WriteOptions::synced())
            .expect("put");
        model.insert(key(i), v);
    }
    ks.put_opt(b"k", b"in ks", &WriteOptions::synced())
        .expect("put");
    db.close().expect("close");
    assert!(files_with(&fs, Path::new(DIR), ".table").is_empty());
    for m in manifests(&fs) {
        fs.remove(&path(&m)).expect("remove");
    }
    fs.remove(&path("CURRENT")).expect("remove CURRENT");
    let report = Db::repair(DIR, &opts(&fs)).expect("repair");
    println!("{report}");
    assert!(report.lost_nothing(), "{report}");
    assert!(
        report.journals.iter().any(|j| j.batches_replayed == 41),
        "{report}"
    );
    check(&fs, &model, "never flushed");
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let names = db.keyspaces();
    let rec = names
        .iter()
        .find(|n| n.starts_with("recovered-"))
        .expect("the keyspace, under a made-up name");
    let ks = db.keyspace(rec).expect("keyspace");
    assert_eq!(ks.get(b"k").expect("get").as_deref(), Some(&b"in ks"[..]));
}

/// A power cut at any point of a repair (synced bytes kept, or also
/// random parts of the unsynced ones, damaged): repairing the image again
/// gives back everything. The cut between the new manifest and the
/// merge leaves tables of several levels on level 0, out of flush order;
/// the second repair sees it and merges.
#[test]
fn a_power_cut_during_repair_is_repaired_by_repairing_again() {
    use cairndb::io::{Crash, OpInfo};
    use std::sync::{Arc, Mutex};
    let (image, model) = canonical();
    let mut lost = image.clone();
    lost.retain(|n, _| !n.starts_with("MANIFEST-") && n != "CURRENT");
    // The repair's operations, counted on a run without a cut.
    let fs = restore(&lost, Path::new(DIR));
    let start = fs.op_count();
    Db::repair(DIR, &opts(&fs)).expect("repair");
    let ops = fs.op_count() - start;
    assert!(ops > 20, "{ops}");
    let mut cut = 0;
    for k in 0..ops {
        for crash in [Crash::Clean, Crash::Torn] {
            let fs = restore(&lost, Path::new(DIR));
            let image: Arc<Mutex<Option<MemFs>>> = Arc::new(Mutex::new(None));
            let (slot, fs2) = (image.clone(), fs.clone());
            let start = fs.op_count();
            fs.set_hook(Some(Arc::new(move |op: &OpInfo| {
                if op.index == start + k && op.op.is_mutation() {
                    *slot.lock().expect("lock") = Some(fs2.crash_image(crash, k));
                }
            })));
            let _ = Db::repair(DIR, &opts(&fs));
            fs.set_hook(None);
            let Some(after) = image.lock().expect("lock").take() else {
                continue;
            };
            cut += 1;
            let what = format!("power cut ({crash:?}) at operation {k} of {ops}");
            let report = Db::repair(DIR, &opts(&after))
                .unwrap_or_else(|e| panic!("{what}: repair again: {e}"));
            assert!(report.tables_missing.is_empty(), "{what}: {report}");
            check(&after, &model, &what);
        }
    }
    assert!(cut > 20, "{cut} cuts");
}
