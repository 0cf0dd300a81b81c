//! Transactions: own-write visibility, rollback, write-write conflicts,
//! write skew (possible under snapshot isolation, impossible when
//! serializable), phantoms, lost updates, a concurrent model test checked
//! against a serial replay in commit order, crashes during commit, and
//! snapshots pinning versions across compactions.

mod common;

use cairndb::io::{Crash, Fs, MemFs, OpInfo};
use cairndb::{Db, Error, Isolation, Options, Sabotage, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

fn mem_db() -> (MemFs, Db) {
    let fs = MemFs::new();
    let db = Db::open("/db", common::mem_opts(&fs, 1 << 20)).expect("open");
    (fs, db)
}

fn isolation(serializable: bool) -> Isolation {
    if serializable {
        Isolation::Serializable
    } else {
        Isolation::Snapshot
    }
}

fn conflict<T: std::fmt::Debug>(r: cairndb::Result<T>) -> bool {
    match r {
        Err(Error::Conflict(_)) => true,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[test]
fn own_writes_rollback_and_iteration() {
    let (_fs, db) = mem_db();
    db.put("a", "1").expect("put");
    db.put("c", "3").expect("put");
    let mut t = db.begin();
    t.put("b", "2").expect("put");
    t.delete("c").expect("delete");
    assert_eq!(t.get("b").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(t.get("c").expect("get"), None);
    assert_eq!(db.get("b").expect("get"), None, "uncommitted write leaked");
    let rows: Vec<_> = t.iter().expect("iter").map(|r| r.expect("row")).collect();
    assert_eq!(
        rows,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec())
        ]
    );
    t.rollback();
    assert_eq!(db.get("b").expect("get"), None);
    assert_eq!(db.get("c").expect("get").as_deref(), Some(&b"3"[..]));

    let mut t = db.begin();
    t.put("b", "2").expect("put");
    drop(t);
    assert_eq!(db.get("b").expect("get"), None, "drop must roll back");

    let mut t = db.begin();
    t.put("b", "2").expect("put");
    t.delete("a").expect("delete");
    t.commit().expect("commit");
    assert_eq!(db.get("b").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get("a").expect("get"), None);
    assert_eq!(db.stats().pinned, 0, "transactions left pins behind");
}

#[test]
fn snapshot_reads_ignore_later_commits() {
    let (_fs, db) = mem_db();
    db.put("k", "old").expect("put");
    let mut t = db.begin();
    db.put("k", "new").expect("put");
    db.put("j", "new").expect("put");
    assert_eq!(t.get("k").expect("get").as_deref(), Some(&b"old"[..]));
    assert_eq!(t.get("j").expect("get"), None);
    // Read-only: commits without a check.
    t.commit().expect("read-only commit");
}

#[test]
fn write_write_conflicts_fail_and_write_nothing() {
    for serializable in [false, true] {
        let (_fs, db) = mem_db();
        let begin = || db.begin_with(isolation(serializable));
        let mut t1 = begin();
        let mut t2 = begin();
        t1.put("k", "t1").expect("put");
        t2.put("k", "t2").expect("put");
        t2.put("other", "t2").expect("put");
        t1.commit().expect("first commit");
        assert!(conflict(t2.commit()));
        assert_eq!(db.get("k").expect("get").as_deref(), Some(&b"t1"[..]));
        assert_eq!(db.get("other").expect("get"), None, "a failed commit wrote");

        // A plain put after begin conflicts too.
        let mut t = begin();
        db.put("k", "plain").expect("put");
        t.put("k", "txn").expect("put");
        assert!(conflict(t.commit()));

        // Disjoint writes both commit.
        let mut a = begin();
        let mut b = begin();
        a.put("x", "1").expect("put");
        b.put("y", "1").expect("put");
        a.commit().expect("commit a");
        b.commit().expect("commit b");
    }
}

/// Two on-call doctors: each transaction checks that the other is on call
/// and then goes off call. Under snapshot isolation both commit (write
/// skew); serializable refuses the second.
#[test]
fn write_skew_under_snapshot_isolation_only() {
    for serializable in [false, true] {
        let (_fs, db) = mem_db();
        db.put("alice", "on").expect("put");
        db.put("bob", "on").expect("put");
        let begin = || db.begin_with(isolation(serializable));
        let mut t1 = begin();
        let mut t2 = begin();
        assert_eq!(t1.get("bob").expect("get").as_deref(), Some(&b"on"[..]));
        assert_eq!(t2.get("alice").expect("get").as_deref(), Some(&b"on"[..]));
        t1.put("alice", "off").expect("put");
        t2.put("bob", "off").expect("put");
        t1.commit().expect("first commit");
        let second = t2.commit();
        if serializable {
            assert!(conflict(second));
            assert_eq!(db.get("bob").expect("get").as_deref(), Some(&b"on"[..]));
        } else {
            second.expect("snapshot isolation allows write skew");
            assert_eq!(db.get("alice").expect("get").as_deref(), Some(&b"off"[..]));
            assert_eq!(db.get("bob").expect("get").as_deref(), Some(&b"off"[..]));
        }
    }
    // get_for_update prevents it under snapshot isolation too.
    let (_fs, db) = mem_db();
    db.put("alice", "on").expect("put");
    db.put("bob", "on").expect("put");
    let mut t1 = db.begin();
    let mut t2 = db.begin();
    t1.get_for_update("bob").expect("get");
    t2.get_for_update("alice").expect("get");
    t1.put("alice", "off").expect("put");
    t2.put("bob", "off").expect("put");
    t1.commit().expect("first commit");
    assert!(conflict(t2.commit()));
}

#[test]
fn phantoms_fail_serializable_commits() {
    for serializable in [false, true] {
        let (_fs, db) = mem_db();
        db.put("item/1", "x").expect("put");
        let begin = || db.begin_with(isolation(serializable));
        let mut t = begin();
        let n = t.range("item/".."item0").expect("range").count();
        assert_eq!(n, 1);
        // Another commit inserts into the scanned range.
        db.put("item/2", "y").expect("put");
        t.put("count", n.to_string()).expect("put");
        let r = t.commit();
        if serializable {
            assert!(conflict(r));
        } else {
            r.expect("snapshot isolation does not check scans");
        }
        // A delete inside the range is a change as well.
        let mut t = begin();
        let _ = t.range("item/".."item0").expect("range").count();
        db.delete("item/1").expect("delete");
        t.put("count", "0").expect("put");
        let r = t.commit();
        if serializable {
            assert!(conflict(r));
        } else {
            r.expect("snapshot isolation");
        }
        // A change outside the range is not.
        let mut t = begin();
        let _ = t.range("item/".."item0").expect("range").count();
        db.put("zzz", "1").expect("put");
        t.put("count", "0").expect("put");
        t.commit().expect("no phantom");
    }
}

/// Counter increments from several threads, retried on conflict: no update
/// is lost in either mode, through memtable seals and flushes.
#[test]
fn no_lost_updates() {
    for serializable in [false, true] {
        let fs = MemFs::new();
        let db = Db::open("/db", common::mem_opts(&fs, 32 << 10)).expect("open");
        let threads = 4;
        let per = 150;
        let conflicts = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (db, conflicts) = (db.clone(), conflicts.clone());
                std::thread::spawn(move || {
                    for _ in 0..per {
                        loop {
                            let mut t = db.begin_with(isolation(serializable));
                            let n: u64 = t
                                .get("counter")
                                .expect("get")
                                .map(|v| String::from_utf8(v).expect("utf8").parse().expect("n"))
                                .unwrap_or(0);
                            t.put("counter", (n + 1).to_string()).expect("put");
                            t.put(format!("pad{n}"), vec![0u8; 200]).expect("put");
                            match t.commit() {
                                Ok(()) => break,
                                Err(Error::Conflict(_)) => {
                                    conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                Err(e) => panic!("commit: {e}"),
                            }
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
        let n = db.get("counter").expect("get").expect("counter");
        assert_eq!(n, (threads * per).to_string().into_bytes());
        println!(
            "serializable {serializable}: {} increments, {} conflicts retried",
            threads * per,
            conflicts.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
}

type Reads = Vec<(Vec<u8>, Option<Vec<u8>>)>;
/// A scan: its bounds and the rows it returned.
type Scan = (Vec<u8>, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

/// One committed transaction, for the serial replay.
struct Committed {
    seqno: u64,
    reads: Reads,
    scans: Vec<Scan>,
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Concurrent random serializable transactions; the committed ones,
/// replayed one at a time in commit-seqno order, must each have read
/// exactly what the serial state held at that point.
fn serial_replay(seed: u64, sabotage: Sabotage) -> Result<(usize, u64), String> {
    let fs = MemFs::new();
    let opts = Options {
        sabotage,
        ..common::mem_opts(&fs, 64 << 10)
    };
    let db = Db::open("/db", opts).expect("open");
    let key = |i: u32| format!("k{i:02}").into_bytes();
    let log: Arc<Mutex<Vec<Committed>>> = Arc::default();
    let aborted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let (db, log, aborted) = (db.clone(), log.clone(), aborted.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 100 + t);
                for n in 0..250 {
                    let mut txn = db.begin_serializable();
                    let mut reads = Vec::new();
                    let mut scans = Vec::new();
                    let mut writes = Vec::new();
                    for _ in 0..rng.random_range(1..4) {
                        let k = key(rng.random_range(0..12));
                        let v = txn.get(&k).expect("get");
                        if !writes.iter().any(|(w, _): &(Vec<u8>, _)| w == &k) {
                            reads.push((k, v));
                        }
                    }
                    if rng.random_ratio(1, 4) {
                        let a = rng.random_range(0..12);
                        let (lo, hi) = (key(a), key(a + 3));
                        let rows: Vec<_> = txn
                            .range(lo.clone()..hi.clone())
                            .expect("range")
                            .map(|r| r.expect("row"))
                            .collect();
                        scans.push((lo, hi, rows));
                    }
                    for _ in 0..rng.random_range(0..3) {
                        let k = key(rng.random_range(0..12));
                        let v = if rng.random_ratio(1, 5) {
                            None
                        } else {
                            Some(format!("t{t}n{n}").into_bytes())
                        };
                        match &v {
                            Some(v) => txn.put(&k, v).expect("put"),
                            None => txn.delete(&k).expect("delete"),
                        }
                        writes.retain(|(w, _): &(Vec<u8>, Option<Vec<u8>>)| w != &k);
                        writes.push((k, v));
                    }
                    // Let other transactions commit in between.
                    std::thread::sleep(std::time::Duration::from_micros(rng.random_range(0..300)));
                    // Scans saw own writes made before them only; keep the
                    // replay simple by dropping scans of written keys.
                    if !writes.is_empty() {
                        scans.clear();
                    }
                    match txn.commit_opt(&WriteOptions::default()) {
                        Ok(Some(seqno)) => log.lock().expect("log").push(Committed {
                            seqno,
                            reads,
                            scans,
                            writes,
                        }),
                        Ok(None) => {}
                        Err(Error::Conflict(_)) => {
                            aborted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        Err(e) => panic!("commit: {e}"),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let mut log = std::mem::take(&mut *log.lock().expect("log"));
    log.sort_by_key(|c| c.seqno);
    let mut state: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for c in &log {
        for (k, v) in &c.reads {
            if state.get(k) != v.as_ref() {
                return Err(format!(
                    "seed {seed}: commit {} read {:?} = {v:?}, the serial state holds {:?}",
                    c.seqno,
                    String::from_utf8_lossy(k),
                    state.get(k)
                ));
            }
        }
        for (lo, hi, rows) in &c.scans {
            let want: Vec<_> = state
                .range(lo.clone()..hi.clone())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if &want != rows {
                return Err(format!("seed {seed}: commit {} scan differs", c.seqno));
            }
        }
        for (k, v) in &c.writes {
            match v {
                Some(v) => state.insert(k.clone(), v.clone()),
                None => state.remove(k),
            };
        }
    }
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().map(|r| r.expect("row")).collect();
    if got != state {
        return Err(format!("seed {seed}: final state differs from the replay"));
    }
    Ok((
        log.len(),
        aborted.load(std::sync::atomic::Ordering::Relaxed),
    ))
}

#[test]
fn serializable_histories_replay_serially() {
    let seeds: u64 = std::env::var("CAIRNDB_TXN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    for seed in 0..seeds {
        let (commits, conflicts) =
            serial_replay(seed, Sabotage::default()).unwrap_or_else(|e| panic!("{e}"));
        println!(
            "serializable model, seed {seed}: {commits} commits replayed serially, {conflicts} conflicts"
        );
        assert!(
            commits > 100 && conflicts > 10,
            "too little contention to mean anything"
        );
    }
}

/// The replay catches an engine that skips the conflict checks.
#[test]
fn serial_replay_catches_missing_conflict_checks() {
    let broken = Sabotage {
        skip_conflict_checks: true,
        ..Sabotage::default()
    };
    let caught = (0..3).find_map(|seed| serial_replay(seed, broken).err());
    let caught = caught.expect("the replay missed a broken engine");
    println!("broken engine caught: {caught}");
}

/// Power cut at every IO operation of a synced multi-key commit: after
/// reopen the transaction is entirely there or entirely absent.
#[test]
fn crash_during_commit_is_atomic() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::mem_opts(&fs, 1 << 20)).expect("open");
    for i in 0..20 {
        db.put(format!("base{i}"), "v").expect("put");
    }
    let images: Arc<Mutex<Vec<MemFs>>> = Arc::default();
    let (im, fs2) = (images.clone(), fs.clone());
    let mut t = db.begin();
    for i in 0..30 {
        t.put(format!("txn{i:02}"), vec![i as u8; 300])
            .expect("put");
    }
    fs.set_hook(Some(Arc::new(move |op: &OpInfo| {
        if op.op.is_mutation() {
            let mut im = im.lock().expect("images");
            for seed in 0..4 {
                im.push(fs2.crash_image(Crash::Torn, op.index * 8 + seed));
            }
            im.push(fs2.crash_image(Crash::Clean, 0));
        }
    })));
    t.commit_opt(&WriteOptions::synced()).expect("commit");
    fs.set_hook(None);
    images
        .lock()
        .expect("images")
        .push(fs.crash_image(Crash::Clean, 0));
    let images = std::mem::take(&mut *images.lock().expect("images"));
    assert!(images.len() >= 5, "the commit did no IO");
    let last = images.len() - 1;
    for (n, image) in images.into_iter().enumerate() {
        let db = Db::open("/db", common::mem_opts(&image, 1 << 20)).expect("reopen");
        let present = (0..30)
            .filter(|i| db.get(format!("txn{i:02}")).expect("get").is_some())
            .count();
        assert!(
            present == 0 || present == 30,
            "image {n}: {present} of 30 keys"
        );
        if n == last {
            assert_eq!(present, 30, "the synced commit was lost");
        }
    }
    let _ = fs.list(std::path::Path::new("/db"));
}

/// A transaction pins the versions it can see across flushes and
/// compactions; once it ends, compaction drops them.
#[test]
fn long_transactions_pin_versions_until_they_end() {
    let fs = MemFs::new();
    let opts = Options {
        background_compaction: false,
        ..common::mem_opts(&fs, 1 << 20)
    };
    let db = Db::open("/db", opts).expect("open");
    db.put("k", "v0").expect("put");
    let mut t = db.begin();
    for i in 1..=20 {
        db.put("k", format!("v{i}")).expect("put");
        db.flush().expect("flush");
    }
    db.compact().expect("compact");
    assert_eq!(t.get("k").expect("get").as_deref(), Some(&b"v0"[..]));
    let pinned = db.stats().table_entries;
    assert!(
        pinned >= 2,
        "the pinned version was dropped ({pinned} entries)"
    );
    t.rollback();
    db.compact().expect("compact");
    assert_eq!(
        db.stats().table_entries,
        1,
        "old versions outlived the transaction"
    );
    assert_eq!(db.get("k").expect("get").as_deref(), Some(&b"v20"[..]));
}

/// A conflicting write that was flushed (and compacted) into tables before
/// the commit is still found: the check reads tables when a flush moved
/// seqnos above the snapshot into them.
#[test]
fn conflicts_are_found_in_tables_too() {
    for serializable in [false, true] {
        let (_fs, db) = mem_db();
        db.put("k", "0").expect("put");
        db.put("r/1", "0").expect("put");
        let begin = || db.begin_with(isolation(serializable));
        let mut t = begin();
        let mut scan = begin();
        let _ = scan.range("r/".."r0").expect("range").count();
        db.put("k", "1").expect("put");
        db.put("r/2", "1").expect("put");
        db.flush().expect("flush");
        db.compact().expect("compact");
        assert_eq!(db.stats().memtable_bytes, 0, "the write must be in a table");
        t.put("k", "2").expect("put");
        assert!(conflict(t.commit()));
        scan.put("count", "1").expect("put");
        let r = scan.commit();
        if serializable {
            assert!(conflict(r));
        } else {
            r.expect("snapshot isolation does not check scans");
        }
    }
}

/// Commit checks use a bounded log of recently written keys and fall back
/// to exact lookups for snapshots it no longer reaches back to: here an
/// old transaction outlives more writes than the log holds (300,000 keys
/// against its 262,144), and its conflicts, also on a key written first,
/// are still found; a key nobody wrote still commits.
#[test]
fn conflicts_are_found_after_the_recent_write_log_overflows() {
    let fs = MemFs::new();
    let db = Db::open("/db", common::mem_opts(&fs, 64 << 20)).expect("open");
    db.put("early", "0").expect("put");
    let mut old = db.begin();
    let mut quiet = db.begin();
    db.put("early", "1").expect("put");
    for b in 0..300u32 {
        let mut batch = cairndb::WriteBatch::new();
        for i in 0..1000u32 {
            batch
                .put(format!("k{:06}", b * 1000 + i), "v")
                .expect("put");
        }
        db.write(batch, &WriteOptions::default()).expect("write");
    }
    old.put("early", "2").expect("put");
    assert!(conflict(old.commit()), "a write before the overflow");
    let mut late = db.begin();
    db.put("k000007", "w").expect("put");
    late.put("k000007", "x").expect("put");
    assert!(conflict(late.commit()), "a write after the overflow");
    quiet.put("untouched", "1").expect("put");
    quiet.commit().expect("no conflict on an unwritten key");
}
