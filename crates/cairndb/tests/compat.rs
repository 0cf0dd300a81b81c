//! Databases written by earlier builds still open. `testdata/` holds small
//! database images, each written by the build named in its `ORIGIN` file,
//! with the data of `model` below: tables on two levels, separated values
//! in a values file and in journals, deletes, and journal records left to
//! replay. Each test opens a copy, checks every key, writes, and reopens.
//!
//! `write_image` (ignored) writes a new image with the build at hand, for
//! the next format change: `CAIRNDB_IMAGE=format10 cargo test -p cairndb
//! --test compat write_image -- --ignored`.

use cairndb::{Db, Options, WriteOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

fn opts() -> Options {
    Options {
        memtable_bytes: 16 << 10,
        value_separation_min: 100,
        value_partitions: 4,
        journal_direct: false,
        background_compaction: false,
        // Images from format 10 on hold compressed values; older images
        // are opened under it too, their raw values beside new ones.
        compression: cairndb::Compression::Lz4,
        ..Options::default()
    }
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(3) { 300 } else { 20 };
    (0..len)
        .map(|j| (i * 7 + j * 13 + round * 101) as u8)
        .collect()
}

/// Writes the image's data into `db` step by step, returning what it holds.
fn fill(db: &Db) -> Model {
    let mut model = Model::new();
    let key = |i: u32| format!("key{i:05}").into_bytes();
    for i in 0..400 {
        db.put(key(i), value(i, 0)).expect("put");
        model.insert(key(i), value(i, 0));
    }
    db.flush().expect("flush");
    for i in (0..400).step_by(2) {
        db.put(key(i), value(i, 1)).expect("put");
        model.insert(key(i), value(i, 1));
    }
    for i in (1..400).step_by(7) {
        db.delete(key(i)).expect("delete");
        model.remove(&key(i));
    }
    // Merges into level 1 and moves live values into a values file.
    db.compact().expect("compact");
    for i in 400..440 {
        db.put(key(i), value(i, 2)).expect("put");
        model.insert(key(i), value(i, 2));
    }
    db.flush().expect("flush");
    // Left in the journal, to be replayed: synced and unsynced.
    for i in 440..470u32 {
        let sync = i.is_multiple_of(4);
        db.put_opt(key(i), value(i, 3), &WriteOptions { sync })
            .expect("put");
        model.insert(key(i), value(i, 3));
    }
    db.delete(key(2)).expect("delete");
    model.remove(&key(2));
    model
}

/// The data every image holds (the same steps on an in-memory database).
fn model() -> Model {
    let fs = cairndb::io::MemFs::new();
    let db = Db::open(
        "/m",
        Options {
            fs: std::sync::Arc::new(fs),
            ..opts()
        },
    )
    .expect("open");
    fill(&db)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_name() == "ORIGIN" {
            continue;
        }
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

fn check(db: &Db, want: &Model, what: &str) {
    for (k, v) in want {
        assert_eq!(
            db.get(k).expect("get").as_deref(),
            Some(v.as_slice()),
            "{what}: {}",
            String::from_utf8_lossy(k)
        );
    }
    let rows: Model = db
        .iter()
        .collect::<cairndb::Result<Vec<_>>>()
        .expect("scan")
        .into_iter()
        .collect();
    assert!(rows == *want, "{what}: scan differs ({} rows)", rows.len());
}

fn opens(image: &str) {
    let src = testdata().join(image);
    assert!(src.is_dir(), "missing image {}", src.display());
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&src, tmp.path());
    let mut want = model();
    let db = Db::open(tmp.path(), opts()).unwrap_or_else(|e| panic!("{image}: open: {e}"));
    check(&db, &want, image);
    db.put_opt(b"new", b"write", &WriteOptions::synced())
        .expect("put");
    want.insert(b"new".to_vec(), b"write".to_vec());
    // Unsynced separated values go to value streams (manifest format 5).
    for i in 0..20u32 {
        let (k, v) = (format!("streamed{i:02}").into_bytes(), value(i * 3, 9));
        db.put(&k, &v).expect("put");
        want.insert(k, v);
    }
    db.compact().expect("compact");
    db.close().expect("close");
    let db = Db::open(tmp.path(), opts()).expect("reopen");
    check(&db, &want, image);
}

#[test]
fn a_format_3_database_opens() {
    opens("format3");
}

#[test]
fn a_format_4_database_opens() {
    opens("format4");
}

/// Format 5, written with value streams on (the default since 78f1db9):
/// unsynced separated values in `.stream` files, by the build before the
/// engine core was restructured (30cb6c3).
#[test]
fn a_format_5_database_with_value_streams_opens() {
    let streams = std::fs::read_dir(testdata().join("format5"))
        .expect("the image")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "stream"))
        })
        .count();
    assert!(streams > 0, "the image holds value streams");
    opens("format5");
}

/// Format 6, written with LZ4-compressed tables by the build before
/// keyspaces (b73fb3a).
#[test]
fn a_format_6_database_with_compressed_tables_opens() {
    opens("format6");
}

#[test]
#[ignore = "writes a new image under testdata/"]
fn write_image() {
    let name = std::env::var("CAIRNDB_IMAGE").expect("CAIRNDB_IMAGE names the image");
    let dir = testdata().join(&name);
    assert!(!dir.exists(), "{} exists", dir.display());
    let db = Db::open(&dir, opts()).expect("open");
    let model = fill(&db);
    db.close().expect("close");
    let db = Db::open(&dir, opts()).expect("reopen");
    check(&db, &model, &name);
    // Leave the image as the first close left it: reopening rewrote
    // nothing the image needs, but replayed the journal; write it again.
    drop(db);
    std::fs::remove_dir_all(&dir).expect("clear");
    let db = Db::open(&dir, opts()).expect("open");
    fill(&db);
    db.close().expect("close");
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    std::fs::write(
        dir.join("ORIGIN"),
        format!("written by `write_image` in tests/compat.rs at commit {commit}\n"),
    )
    .expect("ORIGIN");
}

/// Format 7 (keyspaces), written by the build before table version 5
/// (c92ec94): tables of version 4, which do not name their keyspace.
#[test]
fn a_format_7_database_opens() {
    opens("format7");
}

/// Format 8 (comparator names, lifetime write totals, tables of version 5
/// naming their keyspace), written by the build before manifest format 9
/// (16-bit filter fingerprints).
#[test]
fn a_format_8_database_opens() {
    opens("format8");
}

/// Format 9 (16-bit filter fingerprints), written by the build before
/// manifest format 10 (compressed separated values).
#[test]
fn a_format_9_database_opens() {
    opens("format9");
}
