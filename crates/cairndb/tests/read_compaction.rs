//! Level-0 merges that reads pay for (compaction/pick.rs `ProbeDue`):
//! point reads through several level-0 tables merge them into level 1
//! before level 0 reaches its trigger; writes alone never do.
// A test: a failed unwrap is a failed check.
#![allow(clippy::unwrap_used)]

use cairndb::{Db, Options};
use std::time::{Duration, Instant};

const KEYS: u64 = 2000;

fn opts() -> Options {
    Options {
        // Idle settling would merge level 0 too.
        settle_after_idle: None,
        l0_compaction_trigger: 4,
        ..Options::default()
    }
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn value(i: u64) -> Vec<u8> {
    format!("value {i}").into_bytes()
}

/// Three level-0 tables over the same key range, table `r` holding the
/// keys `i` with `i % 3 == r`: a read of a key of an older table consults
/// the newer ones first.
fn three_level0_tables(db: &Db) {
    for round in 0..3 {
        for i in (round..KEYS).step_by(3) {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().tables_per_level[0], 3);
}

#[test]
fn point_reads_through_level0_tables_merge_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    three_level0_tables(&db);
    let compactions = db.stats().compactions;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0u64;
    while db.stats().tables_per_level[0] > 0 {
        assert!(
            Instant::now() < deadline,
            "level 0 still holds {} tables after {i} reads",
            db.stats().tables_per_level[0]
        );
        for _ in 0..500 {
            let k = (i * 7919) % KEYS;
            assert_eq!(db.get(key(k)).unwrap(), Some(value(k)));
            i += 1;
        }
    }
    let s = db.stats();
    assert!(s.tables_per_level[1] >= 1, "{:?}", s.tables_per_level);
    assert!(s.compactions > compactions);
    for k in 0..KEYS {
        assert_eq!(db.get(key(k)).unwrap(), Some(value(k)));
    }
    // The merge put its outputs' blocks into the cache: reading every
    // key again misses no block.
    let misses = db.stats().block_cache_misses;
    for k in 0..KEYS {
        db.get(key(k)).unwrap();
    }
    assert_eq!(db.stats().block_cache_misses, misses);
}

#[test]
fn seeks_through_level0_tables_merge_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    three_level0_tables(&db);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0u64;
    while db.stats().tables_per_level[0] > 0 {
        assert!(
            Instant::now() < deadline,
            "level 0 unmerged after {i} seeks"
        );
        for _ in 0..50 {
            let from = (i * 7919) % KEYS;
            let got: Vec<_> = db
                .range(key(from)..)
                .take(10)
                .map(|kv| kv.unwrap())
                .collect();
            let want = (from..(from + 10).min(KEYS)).collect::<Vec<_>>();
            assert_eq!(got.len(), want.len());
            for (kv, k) in got.iter().zip(want) {
                assert_eq!(&kv.0[..], &key(k)[..]);
                assert_eq!(&kv.1[..], &value(k)[..]);
            }
            i += 1;
        }
    }
    assert!(db.stats().tables_per_level[1] >= 1);
}

#[test]
fn writes_alone_leave_level0_below_its_trigger() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    three_level0_tables(&db);
    // The compaction thread looks at least every 200 ms.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(db.stats().tables_per_level[0], 3);
}

#[test]
fn reads_that_consult_one_table_each_leave_level0_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    three_level0_tables(&db);
    // Keys of the newest table: each read consults that table alone.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        for k in (2..KEYS).step_by(3) {
            assert_eq!(db.get(key(k)).unwrap(), Some(value(k)));
        }
    }
    assert_eq!(db.stats().tables_per_level[0], 3);
}

#[test]
fn reads_over_level0_tables_of_disjoint_ranges_leave_them_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    // Sequential keys: each table holds a range of its own.
    for round in 0..3 {
        for i in round * KEYS..(round + 1) * KEYS {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().tables_per_level[0], 3);
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(1) {
        let k = (i * 7919) % (3 * KEYS);
        assert_eq!(db.get(key(k)).unwrap(), Some(value(k)));
        let first = db.range(key(k)..).next().unwrap().unwrap();
        assert_eq!(&first.0[..], &key(k)[..]);
        i += 1;
    }
    assert_eq!(
        db.stats().tables_per_level[0],
        3,
        "after {i} reads and seeks"
    );
}
