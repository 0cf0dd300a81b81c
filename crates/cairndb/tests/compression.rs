//! Compressed tables and separated values (`Options::compression`,
//! `KeyspaceOptions::compression`): data read back whole through flushes,
//! compactions and reopens under each codec and every way of reading
//! values, with less on disk for compressible data, incompressible values
//! stored as they are, damage reported, and a database moving between
//! codecs.

use cairndb::{Compression, Db, Error, KeyspaceOptions, Options, ValueReads};
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
    bytes_of(dir, "table")
}

/// Bytes of the files in `dir` named `*.ext`.
fn bytes_of(dir: &Path, ext: &str) -> u64 {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == ext))
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

/// Separated values: options separating values of 1 KiB and more, read as
/// `reads` says.
fn separating(compression: Compression, reads: ValueReads) -> Options {
    Options {
        compression,
        value_separation_min: 1024,
        value_reads: reads,
        memtable_bytes: 256 << 10,
        background_compaction: false,
        ..Options::default()
    }
}

/// Keys with separated values.
const SEPARATED: u32 = 2_000;

/// A 4 KiB value of words (about 4:1), naming its key first.
fn big(i: u32) -> Vec<u8> {
    let mut v = format!("{i}:").into_bytes();
    while v.len() < 4096 {
        v.extend_from_slice(&value(i + v.len() as u32));
    }
    v.truncate(4096);
    v
}

/// A 4 KiB value no codec shrinks.
fn noise(i: u32) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(i);
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every separated value read back by point reads, `multi_get`, forward
/// and reverse scans and short ranges.
fn check_separated(db: &Db, of: fn(u32) -> Vec<u8>, what: &str) {
    for i in (0..SEPARATED).step_by(7) {
        assert_eq!(
            db.get(key(i)).expect("get").as_deref(),
            Some(&of(i)[..]),
            "{what}: key {i}"
        );
    }
    let keys: Vec<_> = (0..SEPARATED).step_by(13).map(key).collect();
    for (k, got) in keys.iter().zip(db.multi_get(&keys)) {
        let i: u32 = std::str::from_utf8(&k[5..])
            .expect("utf8")
            .parse()
            .expect("num");
        assert_eq!(
            got.expect("multi_get"),
            Some(of(i)),
            "{what}: multi_get {i}"
        );
    }
    let want: Vec<_> = (0..SEPARATED).map(|i| (key(i), of(i))).collect();
    let all: Vec<_> = db.iter().collect::<cairndb::Result<_>>().expect("scan");
    assert!(all == want, "{what}: forward scan");
    let mut back: Vec<_> = db
        .iter()
        .rev()
        .collect::<cairndb::Result<_>>()
        .expect("scan back");
    back.reverse();
    assert!(back == want, "{what}: reverse scan");
    for start in (0..SEPARATED).step_by(191) {
        let short: Vec<_> = db
            .range(key(start)..)
            .take(20)
            .collect::<cairndb::Result<_>>()
            .expect("range");
        let end = (start as usize + 20).min(want.len());
        assert!(
            short == want[start as usize..end],
            "{what}: range from {start}"
        );
    }
}

/// Writes `of`'s values for every key, out of key order, flushes and
/// compacts (which moves every value into a values file); checks them
/// through every way of reading values after the compaction and after a
/// reopen; returns the values files' bytes.
fn load_separated(dir: &Path, compression: Compression, of: fn(u32) -> Vec<u8>) -> u64 {
    let db = Db::open(dir, separating(compression, ValueReads::Auto)).expect("open");
    for i in (0..SEPARATED).rev() {
        db.put(key(i), of(i)).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    let stats = db.stats();
    assert_eq!(
        stats.value_bytes_unsettled, 0,
        "{compression:?}: a full compaction moves every value"
    );
    check_separated(&db, of, "after compaction");
    db.close().expect("close");
    for reads in [
        ValueReads::PageCache,
        ValueReads::Direct,
        ValueReads::CachedElseDirect,
    ] {
        let db = Db::open(dir, separating(compression, reads)).expect("reopen");
        check_separated(&db, of, &format!("{compression:?} after reopen, {reads:?}"));
        db.close().expect("close");
    }
    bytes_of(dir, "values")
}

#[test]
fn moved_values_are_compressed_and_read_back_by_every_path() {
    let raw = u64::from(SEPARATED) * 4096;
    let plain_dir = tempfile::tempdir().expect("tempdir");
    let plain = load_separated(plain_dir.path(), Compression::None, big);
    assert!(
        plain >= raw,
        "uncompressed: {plain} bytes of values files for {raw} of values"
    );
    for codec in [Compression::Lz4, Compression::Zstd(3)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let packed = load_separated(dir.path(), codec, big);
        assert!(
            packed * 3 < plain,
            "{codec:?}: {packed} bytes of values files against {plain} uncompressed"
        );
    }
}

#[test]
fn incompressible_values_are_moved_as_they_are() {
    let raw = u64::from(SEPARATED) * 4096;
    let dir = tempfile::tempdir().expect("tempdir");
    let stored = load_separated(dir.path(), Compression::Lz4, noise);
    assert!(
        stored >= raw,
        "LZ4 on noise: {stored} bytes of values files for {raw} of values"
    );
}

/// Compressible values after a long run of incompressible ones (which
/// compactions try only now and then) are still compressed.
#[test]
fn compressible_values_after_incompressible_ones_still_shrink() {
    fn mixed(i: u32) -> Vec<u8> {
        if i < SEPARATED / 2 { noise(i) } else { big(i) }
    }
    let half = u64::from(SEPARATED / 2) * 4096;
    let dir = tempfile::tempdir().expect("tempdir");
    let stored = load_separated(dir.path(), Compression::Lz4, mixed);
    assert!(
        stored >= half && stored < half + half / 2,
        "{stored} bytes of values files for {half} of noise and {half} of words"
    );
}

/// Named keyspaces compress their moved values by default; the default
/// keyspace, as its `Options::compression` says, does not.
#[test]
fn a_named_keyspace_compresses_moved_values_by_default() {
    let raw = u64::from(SEPARATED) * 4096;
    for named in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db =
            Db::open(dir.path(), separating(Compression::None, ValueReads::Auto)).expect("open");
        let ks = db
            .keyspace_with(
                if named { "docs" } else { "other" },
                KeyspaceOptions {
                    value_separation_min: 1024,
                    ..KeyspaceOptions::default()
                },
            )
            .expect("keyspace");
        for i in 0..SEPARATED {
            if named {
                ks.put(key(i), big(i)).expect("put");
            } else {
                db.put(key(i), big(i)).expect("put");
            }
        }
        db.flush().expect("flush");
        db.compact().expect("compact");
        for i in (0..SEPARATED).step_by(11) {
            let got = if named {
                ks.get(key(i))
            } else {
                db.get(key(i))
            };
            assert_eq!(got.expect("get"), Some(big(i)), "named {named}: key {i}");
        }
        db.close().expect("close");
        let stored = bytes_of(dir.path(), "values");
        if named {
            assert!(stored * 3 < raw, "named keyspace: {stored} bytes for {raw}");
        } else {
            assert!(stored >= raw, "default keyspace: {stored} bytes for {raw}");
        }
    }
}

/// A flipped bit in a compressed value is `Corruption` naming its values
/// file, for that value alone: the others still read, and nothing panics.
#[test]
fn a_damaged_compressed_value_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    load_separated(dir.path(), Compression::Lz4, big);
    let values: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "values"))
        .collect();
    let victim = &values[0];
    let mut bytes = std::fs::read(victim).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(victim, &bytes).expect("write");
    let db = Db::open(
        dir.path(),
        separating(Compression::Lz4, ValueReads::PageCache),
    )
    .expect("open");
    let mut damaged = 0;
    for i in 0..SEPARATED {
        match db.get(key(i)) {
            Ok(v) => assert_eq!(v, Some(big(i)), "key {i}"),
            Err(Error::Corruption { file, detail, .. }) => {
                assert_eq!(&file, victim, "{detail}");
                assert!(detail.contains("checksum"), "{detail}");
                damaged += 1;
            }
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert_eq!(damaged, 1, "one value holds the flipped bit");
    assert!(
        db.iter().any(|kv| kv.is_err()),
        "a scan over the damage fails"
    );
}

/// Raw and compressed values live side by side as the codec changes
/// between opens.
#[test]
fn separated_values_change_codec_between_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    load_separated(dir.path(), Compression::None, big);
    for (round, codec) in [Compression::Lz4, Compression::Zstd(1), Compression::None]
        .into_iter()
        .enumerate()
    {
        let db = Db::open(dir.path(), separating(codec, ValueReads::Auto)).expect("open");
        for i in (round as u32..SEPARATED).step_by(3) {
            db.put(key(i), big(i)).expect("put");
        }
        db.flush().expect("flush");
        db.compact().expect("compact");
        check_separated(&db, big, &format!("{codec:?}"));
        db.close().expect("close");
    }
}

/// Unsynced writes' values go to value streams compressed, as the
/// keyspace says; they read back from the memtable, after a kill and
/// after a power cut that tears what was not synced (each key then holds
/// its value or nothing, and the database opens).
#[test]
fn unsynced_values_are_compressed_in_streams_and_survive_crashes() {
    use cairndb::io::{Crash, Fs, MemFs};
    use std::sync::Arc;
    let dir = Path::new("/db");
    let opts = |fs: &MemFs| Options {
        fs: Arc::new(fs.clone()),
        value_partitions: 4,
        settle_after_idle: None,
        ..separating(Compression::Lz4, ValueReads::Auto)
    };
    let fs = MemFs::new();
    let db = Db::open(dir, opts(&fs)).expect("open");
    let n = 300u32;
    for i in (0..n).rev() {
        db.put(key(i), big(i)).expect("put");
    }
    let streams: u64 = fs
        .list(dir)
        .expect("list")
        .iter()
        .filter(|name| name.ends_with(".stream"))
        .map(|name| {
            cairndb::io::read_all(&fs, &dir.join(name))
                .expect("read")
                .len() as u64
        })
        .sum();
    let raw = u64::from(n) * 4096;
    assert!(
        streams > 0 && streams * 3 < raw,
        "{streams} bytes of value streams for {raw} of values"
    );
    let read_back = |db: &Db, what: &str, all: bool| {
        let mut held = 0;
        for i in 0..n {
            match db.get(key(i)).expect("get") {
                Some(v) => {
                    assert_eq!(v, big(i), "{what}: key {i}");
                    held += 1;
                }
                None => assert!(!all, "{what}: key {i} missing"),
            }
        }
        let rows: Vec<_> = db.iter().collect::<cairndb::Result<_>>().expect("scan");
        assert_eq!(rows.len(), held, "{what}: rows");
        for (k, v) in rows {
            let i: u32 = std::str::from_utf8(&k[5..])
                .expect("utf8")
                .parse()
                .expect("num");
            assert_eq!(v, big(i), "{what}: scanned key {i}");
        }
    };
    read_back(&db, "memtable", true);
    for (crash, all) in [(Crash::All, true), (Crash::Torn, false)] {
        for seed in 0..4 {
            let image = fs.crash_image(crash, seed);
            let reopened = Db::open(dir, opts(&image)).expect("reopen after a crash");
            read_back(&reopened, &format!("{crash:?} {seed}"), all);
            reopened.flush().expect("flush");
            read_back(&reopened, &format!("{crash:?} {seed}, flushed"), all);
        }
    }
    db.close().expect("close");
    let db = Db::open(dir, opts(&fs)).expect("reopen");
    read_back(&db, "after a clean close", true);
}

/// A follower reads a live writer's unsynced records by putting their
/// values back inline from the value streams: compressed ones come back
/// decompressed.
#[test]
fn a_follower_reads_compressed_values_from_value_streams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || Options {
        value_partitions: 4,
        settle_after_idle: None,
        // Unsynced records of a direct journal reach a follower only
        // with their chunk.
        journal_direct: false,
        ..separating(Compression::Lz4, ValueReads::Auto)
    };
    let db = Db::open(dir.path(), opts()).expect("open");
    let n = 200u32;
    for i in 0..n {
        db.put(key(i), big(i)).expect("put");
    }
    let follower = Db::open_follower(dir.path(), opts()).expect("follower");
    follower.catch_up().expect("catch up");
    for i in 0..n {
        let got = follower.get(key(i)).expect("get");
        assert!(
            got == Some(big(i)),
            "key {i}: {:?} bytes",
            got.map(|v| v.len())
        );
    }
    drop(follower);
    db.close().expect("close");
}
