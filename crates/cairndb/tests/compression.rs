//! Compressed tables (`Options::compression`): data read back whole
//! through flushes, compactions and reopens under each codec, with less
//! on disk for compressible data, and a database moving between codecs.

use cairndb::{Compression, Db, Error, Options};
use std::path::Path;

fn opts(compression: Compression) -> Options {
    Options {
        compression,
        // Values stay in the tables, where compression applies.
        value_separation_min: 1 << 20,
        memtable_bytes: 256 << 10,
        background_compaction: false,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("user/{i:08}").into_bytes()
}

/// A value that compresses about 4:1: words from a small vocabulary.
fn value(i: u32) -> Vec<u8> {
    let words = ["alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta "];
    (0..40)
        .flat_map(|j| words[((i as usize) * 7 + j * 3) % words.len()].bytes())
        .collect()
}

const N: u32 = 20_000;

fn table_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "table"))
        .map(|e| e.metadata().expect("stat").len())
        .sum()
}

fn check(db: &Db, what: &str) {
    for i in (0..N).step_by(97) {
        assert_eq!(
            db.get(key(i)).expect("get").as_deref(),
            Some(&value(i)[..]),
            "{what}: key {i}"
        );
    }
    let mut n = 0;
    for kv in db.iter() {
        let (k, v) = kv.expect("scan");
        let i: u32 = std::str::from_utf8(&k[5..])
            .expect("utf8")
            .parse()
            .expect("num");
        assert_eq!(v, value(i), "{what}: scanned key {i}");
        n += 1;
    }
    assert_eq!(n, N, "{what}: every key scanned");
}

/// Writes every key, flushes and compacts; returns the tables' bytes.
fn load(dir: &Path, compression: Compression) -> u64 {
    let db = Db::open(dir, opts(compression)).expect("open");
    for i in 0..N {
        db.put(key(i), value(i)).expect("put");
    }
    db.flush().expect("flush");
    check(&db, "after flush");
    db.compact().expect("compact");
    check(&db, "after compaction");
    db.close().expect("close");
    let db = Db::open(dir, opts(compression)).expect("reopen");
    check(&db, "after reopen");
    db.close().expect("close");
    table_bytes(dir)
}

#[test]
fn each_codec_reads_back_whole_and_compressible_tables_shrink() {
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let plain = load(plain_dir.path(), Compression::None);
    for codec in [Compression::Lz4, Compression::Zstd(3)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let packed = load(dir.path(), codec);
        assert!(
            packed * 2 < plain,
            "{codec:?}: {packed} bytes of tables against {plain} uncompressed"
        );
    }
}

#[test]
fn a_database_changes_codec_between_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    load(dir.path(), Compression::None);
    // Tables written raw are read under LZ4; new ones are compressed; a
    // full compaction rewrites all of them compressed, then back.
    for codec in [Compression::Lz4, Compression::Zstd(1), Compression::None] {
        let db = Db::open(dir.path(), opts(codec)).expect("open");
        check(&db, "before rewriting");
        for i in (0..N).step_by(3) {
            db.put(key(i), value(i)).expect("put");
        }
        db.flush().expect("flush");
        db.compact().expect("compact");
        check(&db, "after rewriting");
        db.close().expect("close");
    }
}

#[test]
fn a_bad_zstd_level_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for level in [0, 23, -1] {
        match Db::open(dir.path(), opts(Compression::Zstd(level))) {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("level {level}: {other:?}"),
        }
    }
}
