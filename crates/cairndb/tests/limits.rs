//! Input limits and argument checks: oversized keys and values are refused
//! with `LimitExceeded` before anything is written, the empty key is a
//! normal key, bad options are `InvalidArgument`, and a closed handle
//! refuses writes through every clone with `Closed`.

mod common;

use cairndb::io::{Fs, MemFs};
use cairndb::limits::{KEY_LEN_MAX, VALUE_LEN_MAX};
use cairndb::{Db, Error, Options, WriteBatch, WriteOptions};
use common::{mem_opts, scan};
use std::path::Path;

fn is_limit(r: cairndb::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(Error::LimitExceeded { actual, max, .. }) => assert!(actual > max, "{what}"),
        other => panic!("{what}: expected LimitExceeded, got {other:?}"),
    }
}

#[test]
fn oversized_key_is_refused_everywhere() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("open");
    let big = vec![b'k'; KEY_LEN_MAX + 1];
    is_limit(db.put(&big, b"v"), "put");
    is_limit(db.put_opt(&big, b"v", &WriteOptions::synced()), "put_opt");
    is_limit(db.delete(&big), "delete");
    is_limit(db.get(&big), "get");
    is_limit(db.snapshot().get(&big), "snapshot get");
    is_limit(db.begin().get(&big), "transaction get");
    is_limit(
        db.begin().get_for_update(&big),
        "transaction get_for_update",
    );
    // A bound longer than any key is refused as the key would be, from
    // either end: it is not an empty range.
    db.put(b"zz", b"in range").expect("put");
    is_limit(db.range(&big[..]..).next().expect("an item"), "range start");
    is_limit(db.range(..&big[..]).next().expect("an item"), "range end");
    is_limit(
        db.range(&big[..]..).next_back().expect("an item"),
        "range start, reversed",
    );
    is_limit(
        db.snapshot().range(&big[..]..).next().expect("an item"),
        "snapshot range",
    );
    let mut txn = db.begin();
    is_limit(
        txn.range(&big[..]..)
            .expect("txn range")
            .next()
            .expect("an item"),
        "transaction range",
    );
    drop(txn);
    db.delete(b"zz").expect("delete");
    let mut b = WriteBatch::new();
    b.put(b"ok", b"1").expect("small put");
    is_limit(b.put(&big, b"v"), "batch put");
    is_limit(b.delete(&big), "batch delete");
    // A refused op leaves the batch as it was.
    assert_eq!(b.len(), 1);
    db.write(b, &WriteOptions::default()).expect("write");
    assert_eq!(
        scan(&db).expect("scan"),
        vec![(b"ok".to_vec(), b"1".to_vec())]
    );
    assert_eq!(db.stats().last_seqno, 3, "a refused write consumed a seqno");

    // The largest key is accepted, and survives flush and reopen.
    let max = vec![0xa5u8; KEY_LEN_MAX];
    db.put(&max, b"max").expect("put of a maximal key");
    db.flush().expect("flush");
    drop(db);
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("reopen");
    assert_eq!(db.get(&max).expect("get"), Some(b"max".to_vec()));
    assert_eq!(scan(&db).expect("scan").len(), 2);
}

#[test]
fn oversized_value_is_refused_by_the_batch() {
    // A zeroed allocation is mapped lazily, so this costs address space,
    // not memory: the length check must come before any byte is read.
    let huge = vec![0u8; VALUE_LEN_MAX + 1];
    let mut b = WriteBatch::new();
    is_limit(b.put(b"k", &huge), "batch put of a huge value");
    assert!(b.is_empty());
    assert_eq!(b.size_bytes(), WriteBatch::new().size_bytes());
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("open");
    is_limit(db.put(b"k", &huge), "put of a huge value");
    drop(huge);
    assert_eq!(db.get(b"k").expect("get"), None);
}

#[test]
fn empty_key_and_empty_value_round_trip() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("open");
    db.put(b"", b"empty key").expect("put empty key");
    db.put(b"a", b"").expect("put empty value");
    assert_eq!(db.get(b"").expect("get"), Some(b"empty key".to_vec()));
    assert_eq!(db.get(b"a").expect("get"), Some(Vec::new()));
    let want = vec![
        (Vec::new(), b"empty key".to_vec()),
        (b"a".to_vec(), Vec::new()),
    ];
    assert_eq!(scan(&db).expect("scan"), want);
    assert_eq!(db.prefix(b"").count(), 2);
    db.flush().expect("flush");
    drop(db);
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("reopen");
    assert_eq!(scan(&db).expect("scan after reopen"), want);
    let mut rev: Vec<_> = db
        .iter()
        .rev()
        .collect::<cairndb::Result<_>>()
        .expect("rev");
    rev.reverse();
    assert_eq!(rev, want);
    db.delete(b"").expect("delete empty key");
    assert_eq!(db.get(b"").expect("get"), None);
    db.compact().expect("compact");
    assert_eq!(scan(&db).expect("scan"), vec![(b"a".to_vec(), Vec::new())]);
}

#[test]
fn invalid_options_are_refused_before_touching_the_disk() {
    let fs = MemFs::new();
    let base = mem_opts(&fs, 1 << 20);
    let cases: Vec<(&str, Options)> = vec![
        (
            "memtable_bytes 0",
            Options {
                memtable_bytes: 0,
                ..base.clone()
            },
        ),
        (
            "memtables_sealed_max 0",
            Options {
                memtables_sealed_max: 0,
                ..base.clone()
            },
        ),
        (
            "block_bytes 10",
            Options {
                block_bytes: 10,
                ..base.clone()
            },
        ),
        (
            "block_bytes 1 GiB",
            Options {
                block_bytes: 1 << 30,
                ..base.clone()
            },
        ),
        (
            "restart interval 0",
            Options {
                block_restart_interval: 0,
                ..base.clone()
            },
        ),
        (
            "open_tables_max 0",
            Options {
                open_tables_max: 0,
                ..base.clone()
            },
        ),
        (
            "table_bytes 0",
            Options {
                table_bytes: 0,
                ..base.clone()
            },
        ),
        (
            "level1_bytes 0",
            Options {
                level1_bytes: 0,
                ..base.clone()
            },
        ),
        (
            "level_multiplier 1",
            Options {
                level_multiplier: 1,
                ..base.clone()
            },
        ),
        (
            "l0 compaction trigger 0",
            Options {
                l0_compaction_trigger: 0,
                ..base.clone()
            },
        ),
        (
            "compaction trigger above slowdown",
            Options {
                l0_compaction_trigger: 9,
                l0_slowdown_trigger: 8,
                ..base.clone()
            },
        ),
        (
            "slowdown equal to stop",
            Options {
                l0_slowdown_trigger: 12,
                l0_stop_trigger: 12,
                ..base.clone()
            },
        ),
        (
            "stop below slowdown",
            Options {
                l0_slowdown_trigger: 8,
                l0_stop_trigger: 4,
                ..base.clone()
            },
        ),
        (
            "new-keys trigger below the compaction trigger",
            Options {
                l0_compaction_trigger: 4,
                l0_compaction_trigger_new_keys: 3,
                ..base.clone()
            },
        ),
    ];
    for (what, opts) in cases {
        match Db::open("/db", opts) {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("{what}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(
        !fs.exists(Path::new("/db")),
        "a refused open created the directory"
    );
    assert!(fs.list(Path::new("/db")).expect("list").is_empty());
    // The boundary values are fine.
    let ok = Options {
        block_bytes: 64,
        l0_compaction_trigger: 1,
        l0_slowdown_trigger: 1,
        l0_stop_trigger: 2,
        level_multiplier: 2,
        ..base
    };
    let db = Db::open("/db", ok).expect("open with boundary options");
    for i in 0..2000 {
        db.put(format!("k{i:05}"), [7u8; 30]).expect("put");
    }
    db.compact().expect("compact");
    assert_eq!(scan(&db).expect("scan").len(), 2000);
}

#[test]
fn writes_after_close_fail_with_closed_through_every_clone() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("open");
    let clone = db.clone();
    let other = db.clone();
    db.put(b"before", b"1").expect("put");
    db.close().expect("close");
    let closed = |r: cairndb::Result<()>, what: &str| match r {
        Err(Error::Closed) => {}
        other => panic!("{what} after close: expected Closed, got {other:?}"),
    };
    closed(clone.put(b"k", b"v"), "put");
    closed(
        clone.put_opt(b"k", b"v", &WriteOptions::synced()),
        "synced put",
    );
    closed(clone.delete(b"k"), "delete");
    let mut b = WriteBatch::new();
    b.put(b"k", b"v").expect("batch put");
    closed(clone.write(b, &WriteOptions::default()), "write");
    closed(other.flush(), "flush");
    closed(other.compact(), "compact");
    // Concurrent writers on a closing handle all get an answer.
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let c = clone.clone();
            std::thread::spawn(move || c.put(format!("t{i}"), b"v"))
        })
        .collect();
    for t in threads {
        closed(t.join().expect("writer thread"), "threaded put");
    }
    drop((clone, other));
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("reopen");
    assert_eq!(
        scan(&db).expect("scan"),
        vec![(b"before".to_vec(), b"1".to_vec())]
    );
}

/// `close` ends what the handle owns, whatever is left over: snapshots,
/// iterators and transactions that outlive it answer `Closed`, and the
/// directory can be opened again at once (before, a leftover snapshot kept
/// the lock until it was dropped). Files that leftovers let go of later
/// are not deleted under the new handle.
#[test]
fn close_ends_leftover_snapshots_iterators_and_transactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || Options {
        memtable_bytes: 64 << 10,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts()).expect("open");
    for i in 0..2000u32 {
        db.put(format!("k{i:05}"), vec![i as u8; 200]).expect("put");
    }
    db.flush().expect("flush");
    let snap = db.snapshot();
    let mut it = db.iter();
    assert!(it.next().expect("first").is_ok());
    let mut txn = db.begin();
    assert!(txn.get(b"k00001").expect("txn get").is_some());
    // Compacted away while the leftovers still hold the old tables.
    db.compact().expect("compact");
    let clone = db.clone();
    db.close().expect("close");

    let closed = |r: cairndb::Result<()>, what: &str| match r {
        Err(Error::Closed) => {}
        other => panic!("{what} after close: expected Closed, got {other:?}"),
    };
    closed(snap.get(b"k00002").map(drop), "snapshot get");
    closed(
        snap.iter().next().expect("an item").map(drop),
        "snapshot iter",
    );
    closed(it.next().expect("an item").map(drop), "iterator next");
    assert!(it.next().is_none(), "an iterator yields its error once");
    closed(txn.get(b"k00003").map(drop), "transaction get");
    closed(clone.get(b"k00004").map(drop), "get through a clone");

    let db = Db::open(dir.path(), opts()).expect("reopen beside leftovers");
    drop((snap, it, txn, clone));
    for i in (0..2000u32).step_by(97) {
        assert_eq!(
            db.get(format!("k{i:05}")).expect("get"),
            Some(vec![i as u8; 200]),
            "key {i} after the leftovers let go"
        );
    }
    assert_eq!(scan(&db).expect("scan").len(), 2000);
    db.close().expect("close");
    let db = Db::open(dir.path(), opts()).expect("reopen");
    assert_eq!(scan(&db).expect("scan").len(), 2000);
}
