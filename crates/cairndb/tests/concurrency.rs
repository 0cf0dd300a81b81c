//! Concurrency contracts: batches are atomic to concurrent readers (point
//! reads, snapshot scans and plain iterators), readers only see written
//! values, nothing is lost while flushes and compactions run underneath,
//! and the handle types can cross threads.

mod common;

use cairndb::io::MemFs;
use cairndb::{Db, Iter, Options, Snapshot, WriteBatch, WriteOptions};
use common::mem_opts;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

const WRITERS: usize = 4;
const READERS: usize = 2;
const ROUNDS: i64 = 3000;
/// Keys every batch of a writer overwrites together.
const GROUP: usize = 5;

fn group_key(w: usize, j: usize) -> String {
    format!("w{w}-k{j}")
}
fn log_key(w: usize, r: i64) -> String {
    format!("w{w}-log-{r:06}")
}
fn round_value(w: usize, r: i64) -> Vec<u8> {
    format!("w{w}-r{r:06}-{}", "p".repeat(40)).into_bytes()
}
fn parse_round(w: usize, v: &[u8]) -> i64 {
    let s = std::str::from_utf8(v).expect("utf8 value");
    let prefix = format!("w{w}-r");
    assert!(
        s.starts_with(&prefix),
        "value {s:?} was never written by writer {w}"
    );
    s[prefix.len()..prefix.len() + 6].parse().expect("round")
}

/// Checks the state of writer `w` as one consistent view shows it: the
/// group keys all hold the same round `r` (or are all absent, r = -1) and
/// the log holds exactly rounds `0..=r`. Returns `r`.
fn check_view(
    w: usize,
    group: Vec<(Vec<u8>, Vec<u8>)>,
    log: Option<Vec<(Vec<u8>, Vec<u8>)>>,
) -> i64 {
    let r = match group.first() {
        None => -1,
        Some((_, v)) => parse_round(w, v),
    };
    if r >= 0 {
        assert_eq!(
            group.len(),
            GROUP,
            "writer {w}: batch {r} seen partially: {group:?}"
        );
        for (j, (k, v)) in group.iter().enumerate() {
            assert_eq!(k, group_key(w, j).as_bytes());
            assert_eq!(
                v,
                &round_value(w, r),
                "writer {w}: keys of different batches mixed"
            );
        }
    }
    if let Some(log) = log {
        assert_eq!(
            log.len() as i64,
            r + 1,
            "writer {w}: log length vs round {r}"
        );
        if let Some((k, _)) = log.last() {
            assert_eq!(k, log_key(w, r).as_bytes());
        }
    }
    r
}

fn collect(
    it: impl Iterator<Item = cairndb::Result<(Vec<u8>, Vec<u8>)>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.collect::<cairndb::Result<_>>().expect("scan")
}

#[test]
fn batches_are_atomic_to_concurrent_readers_under_flush_and_compaction() {
    let seed: u64 = std::env::var("CAIRNDB_CONCURRENCY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    println!("concurrency seed {seed} (CAIRNDB_CONCURRENCY_SEED)");
    let fs = MemFs::new();
    let opts = Options {
        table_bytes: 16 << 10,
        level1_bytes: 64 << 10,
        block_bytes: 1024,
        l0_compaction_trigger: 2,
        ..mem_opts(&fs, 16 << 10)
    };
    let dir = Path::new("/db");
    let db = Db::open(dir, opts.clone()).expect("open");
    // started[w]: the newest round writer w has begun writing.
    let started: Arc<Vec<AtomicI64>> = Arc::new((0..WRITERS).map(|_| AtomicI64::new(-1)).collect());
    let done = Arc::new(AtomicBool::new(false));

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (db, started) = (db.clone(), started.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 100 + w as u64);
                for r in 0..ROUNDS {
                    let mut b = WriteBatch::new();
                    for j in 0..GROUP {
                        b.put(group_key(w, j), round_value(w, r))
                            .expect("batch put");
                    }
                    b.put(log_key(w, r), vec![w as u8; 150]).expect("batch put");
                    started[w].store(r, Ordering::SeqCst);
                    let sync = rng.random_ratio(1, 20);
                    db.write(b, &WriteOptions { sync }).expect("write");
                }
            })
        })
        .collect();

    let readers: Vec<_> = (0..READERS)
        .map(|id| {
            let (db, started, done) = (db.clone(), started.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed * 1000 + id as u64);
                let mut last_seen = [-1i64; WRITERS];
                let mut checks = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let w = rng.random_range(0..WRITERS);
                    let full_log = rng.random_ratio(1, 8);
                    let r = match rng.random_range(0..3) {
                        // A snapshot: group keys and log read separately
                        // must agree.
                        0 => {
                            let snap: Snapshot = db.snapshot();
                            let group = collect(snap.prefix(format!("w{w}-k")));
                            let log = full_log.then(|| collect(snap.prefix(format!("w{w}-log-"))));
                            let r = check_view(w, group, log);
                            for j in 0..GROUP {
                                let got = snap.get(group_key(w, j)).expect("snapshot get");
                                assert_eq!(
                                    got,
                                    (r >= 0).then(|| round_value(w, r)),
                                    "snapshot get"
                                );
                            }
                            assert_eq!(snap.get(log_key(w, r + 1)).expect("get"), None);
                            r
                        }
                        // A plain iterator is a consistent view too: scan the
                        // writer's whole range in one pass (reverse at times).
                        1 => {
                            let all = if rng.random_bool(0.5) {
                                collect(db.prefix(format!("w{w}-")))
                            } else {
                                let mut v = collect(db.prefix(format!("w{w}-")).rev());
                                v.reverse();
                                v
                            };
                            let mark = format!("w{w}-k");
                            let (group, log): (Vec<_>, Vec<_>) = all
                                .into_iter()
                                .partition(|(k, _)| k.starts_with(mark.as_bytes()));
                            check_view(w, group, Some(log))
                        }
                        // Point reads without a snapshot: each value is a
                        // written one and rounds never go back.
                        _ => {
                            let v = db
                                .get(group_key(w, rng.random_range(0..GROUP)))
                                .expect("get");
                            v.map_or(-1, |v| parse_round(w, &v))
                        }
                    };
                    assert!(
                        r >= last_seen[w],
                        "writer {w}: round went back from {} to {r}",
                        last_seen[w]
                    );
                    assert!(
                        r <= started[w].load(Ordering::SeqCst),
                        "writer {w}: round {r} seen before it was written"
                    );
                    last_seen[w] = r;
                    checks += 1;
                }
                checks
            })
        })
        .collect();

    for t in writers {
        t.join().expect("writer panicked");
    }
    done.store(true, Ordering::SeqCst);
    let checks: u64 = readers
        .into_iter()
        .map(|t| t.join().expect("reader panicked"))
        .sum();
    let stats = db.stats();
    println!("reader checks: {checks}; stats: {stats:?}");
    assert!(checks > 100, "readers barely ran: {checks}");
    assert!(
        stats.flushes > 5,
        "no flushes ran during the test: {stats:?}"
    );
    assert!(
        stats.compactions > 0,
        "no compaction ran during the test: {stats:?}"
    );

    let final_check = |db: &Db| {
        for w in 0..WRITERS {
            let group = collect(db.prefix(format!("w{w}-k")));
            let log = collect(db.prefix(format!("w{w}-log-")));
            assert_eq!(
                check_view(w, group, Some(log)),
                ROUNDS - 1,
                "writer {w} final state"
            );
        }
    };
    final_check(&db);
    drop(db);
    let db = Db::open(dir, opts).expect("reopen");
    final_check(&db);
}

#[test]
fn handle_types_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    fn clone<T: Clone>() {}
    send_sync::<Db>();
    clone::<Db>();
    send::<Snapshot>();
    send::<Iter>();
    send::<WriteBatch>();
    send_sync::<cairndb::Error>();
    send_sync::<MemFs>();

    // And they work when moved: an iterator and a snapshot consumed on
    // other threads while the owner keeps writing.
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs, 1 << 20)).expect("open");
    for i in 0..100 {
        db.put(format!("k{i:03}"), "v1").expect("put");
    }
    let snap = db.snapshot();
    let it = db.iter();
    for i in 0..100 {
        db.put(format!("k{i:03}"), "v2").expect("put");
    }
    let a = std::thread::spawn(move || it.map(|kv| kv.expect("scan").1).collect::<Vec<_>>());
    let b = std::thread::spawn(move || snap.get("k050").expect("get"));
    assert!(a.join().expect("iter thread").iter().all(|v| v == b"v1"));
    assert_eq!(b.join().expect("snapshot thread"), Some(b"v1".to_vec()));
}

/// Every batch written from several threads is counted once in the
/// group-commit statistics, and groups never outnumber batches.
#[test]
fn group_commit_counts_every_batch_once() {
    let fs = MemFs::new();
    let db = Arc::new(Db::open(Path::new("/db"), mem_opts(&fs, 1 << 20)).expect("open"));
    let (threads, puts) = (4usize, 500usize);
    let before = db.stats();
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = db.clone();
            s.spawn(move || {
                for i in 0..puts {
                    db.put(format!("t{t}-{i}"), "v").expect("put");
                }
            });
        }
    });
    // An empty batch is no journal record and no batch of a group.
    db.write(WriteBatch::new(), &WriteOptions::default())
        .expect("empty batch");
    let after = db.stats();
    let batches = after.write_group_batches - before.write_group_batches;
    let groups = after.write_groups - before.write_groups;
    assert_eq!(batches, (threads * puts) as u64, "{after:?}");
    assert!(groups >= 1 && groups <= batches, "{groups} groups");
}
