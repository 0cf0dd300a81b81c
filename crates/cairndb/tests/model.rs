//! Model-based tests: seeded random operations against a `BTreeMap` oracle,
//! with flushes, compactions, snapshots and reopen in between, over an
//! options matrix. A failure prints the seed and the options case.

use cairndb::io::MemFs;
use cairndb::{Db, Options, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn options_case(case: usize, fs: &MemFs) -> Options {
    let mut o = Options {
        fs: Arc::new(fs.clone()),
        ..Options::default()
    };
    match case % 3 {
        // tiny memtable and tables: many flushes and compactions
        0 => {
            o.memtable_bytes = 8 << 10;
            o.table_bytes = 4 << 10;
            o.level1_bytes = 16 << 10;
            o.block_bytes = 256;
            o.block_restart_interval = 2;
        }
        // no cache, no filter, odd restart interval
        1 => {
            o.memtable_bytes = 32 << 10;
            o.block_cache_bytes = 0;
            o.filter = false;
            o.block_restart_interval = 1;
            o.level1_bytes = 64 << 10;
        }
        // defaults with a small memtable, manual compaction only
        _ => {
            o.memtable_bytes = 64 << 10;
            o.background_compaction = false;
        }
    }
    o
}

fn key(rng: &mut StdRng, space: u32) -> Vec<u8> {
    let n = rng.random_range(0..space);
    // mixed lengths and shared prefixes
    match n % 3 {
        0 => format!("k{n:05}").into_bytes(),
        1 => format!("k{n:05}-long-suffix").into_bytes(),
        _ => vec![b'k', (n % 251) as u8, (n / 251) as u8],
    }
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.random_range(0..10) {
        0 => 0,
        1 => rng.random_range(500..3000),
        _ => rng.random_range(1..40),
    };
    (0..len).map(|_| rng.random()).collect()
}

fn random_bound(rng: &mut StdRng, space: u32) -> Bound<Vec<u8>> {
    match rng.random_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng, space)),
        _ => Bound::Excluded(key(rng, space)),
    }
}

fn model_range(m: &Model, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let valid = match (lo, hi) {
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a < b || (a == b && matches!((lo, hi), (Bound::Included(_), Bound::Included(_))))
        }
        _ => true,
    };
    if !valid {
        return Vec::new();
    }
    m.range((lo.clone(), hi.clone()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn collect(
    it: impl Iterator<Item = cairndb::Result<(Vec<u8>, Vec<u8>)>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.collect::<cairndb::Result<Vec<_>>>().expect("scan")
}

fn run(seed: u64, case: usize, ops: usize) {
    let ctx = format!("seed {seed} case {case}");
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut db = Db::open(dir, options_case(case, &fs)).expect("open");
    let mut model = Model::new();
    let space = 400;
    let mut snapshots: Vec<(cairndb::Snapshot, Model)> = Vec::new();
    for step in 0..ops {
        match rng.random_range(0..100) {
            0..=39 => {
                let (k, v) = (key(&mut rng, space), value(&mut rng));
                db.put(&k, &v).expect("put");
                model.insert(k, v);
            }
            40..=49 => {
                let k = key(&mut rng, space);
                db.delete(&k).expect("delete");
                model.remove(&k);
            }
            50..=59 => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.random_range(1..20) {
                    let k = key(&mut rng, space);
                    if rng.random_bool(0.7) {
                        let v = value(&mut rng);
                        b.put(&k, &v).expect("batch put");
                        model.insert(k, v);
                    } else {
                        b.delete(&k).expect("batch delete");
                        model.remove(&k);
                    }
                }
                let sync = rng.random_bool(0.2);
                db.write(b, &WriteOptions { sync }).expect("write");
            }
            60..=74 => {
                let k = key(&mut rng, space);
                assert_eq!(
                    db.get(&k).expect("get"),
                    model.get(&k).cloned(),
                    "{ctx} step {step} get"
                );
            }
            75..=82 => {
                let (lo, hi) = (random_bound(&mut rng, space), random_bound(&mut rng, space));
                let want = model_range(&model, &lo, &hi);
                let mut got = collect(db.range((lo.clone(), hi.clone())));
                assert_eq!(got, want, "{ctx} step {step} forward range {lo:?}..{hi:?}");
                got = collect(db.range((lo.clone(), hi.clone())).rev());
                got.reverse();
                assert_eq!(got, want, "{ctx} step {step} reverse range");
                // interleaved ends meet exactly once
                let mut it = db.range((lo, hi));
                let (mut front, mut back) = (Vec::new(), Vec::new());
                loop {
                    // The front both owned (`next`) and lent (`next_ref`).
                    let step = rng.random_range(0..4);
                    let from_front = step < 2;
                    let x = match step {
                        0 => it.next(),
                        1 => it
                            .next_ref()
                            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))),
                        _ => it.next_back(),
                    };
                    match x {
                        None => break,
                        Some(r) if from_front => front.push(r.expect("scan")),
                        Some(r) => back.push(r.expect("scan")),
                    }
                }
                back.reverse();
                front.extend(back);
                assert_eq!(front, want, "{ctx} step {step} interleaved");
                // Seeks on the spent iterator read its snapshot, not a
                // write made since.
                let (k, v) = (key(&mut rng, space), value(&mut rng));
                db.put(&k, &v).expect("put");
                model.insert(k, v);
                for _ in 0..3 {
                    let t = key(&mut rng, space);
                    it.seek(&t);
                    let after: Vec<_> = want
                        .iter()
                        .filter(|(k, _)| *k >= t)
                        .take(5)
                        .cloned()
                        .collect();
                    assert_eq!(
                        collect(it.by_ref().take(5)),
                        after,
                        "{ctx} step {step} seek {t:?}"
                    );
                    it.seek_for_prev(&t);
                    let before: Vec<_> = want
                        .iter()
                        .rev()
                        .filter(|(k, _)| *k <= t)
                        .take(5)
                        .cloned()
                        .collect();
                    assert_eq!(
                        collect(it.by_ref().rev().take(5)),
                        before,
                        "{ctx} step {step} seek_for_prev {t:?}"
                    );
                }
            }
            83..=85 => {
                let p = vec![b'k', rng.random_range(0..4) as u8 + b'0'];
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| k.starts_with(&p))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(collect(db.prefix(&p)), want, "{ctx} step {step} prefix");
            }
            86..=88 => {
                if snapshots.len() < 4 {
                    snapshots.push((db.snapshot(), model.clone()));
                } else {
                    snapshots.remove(rng.random_range(0..snapshots.len()));
                }
            }
            89..=92 => {
                if let Some((snap, m)) = snapshots.get(rng.random_range(0..snapshots.len().max(1)))
                {
                    let k = key(&mut rng, space);
                    assert_eq!(
                        snap.get(&k).expect("snap get"),
                        m.get(&k).cloned(),
                        "{ctx} step {step} snapshot get"
                    );
                    let all: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    assert_eq!(collect(snap.iter()), all, "{ctx} step {step} snapshot scan");
                    let mut rev = collect(snap.iter().rev());
                    rev.reverse();
                    assert_eq!(rev, all, "{ctx} step {step} snapshot reverse scan");
                }
            }
            93..=95 => db.flush().expect("flush"),
            96..=97 => db.compact().expect("compact"),
            _ => {
                snapshots.clear();
                let opts = options_case(case, &fs);
                drop(db);
                db = Db::open(dir, opts).expect("reopen");
            }
        }
    }
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(collect(db.iter()), all, "{ctx} final scan");
    let stats = db.stats();
    // The workload must have reached the shapes it is meant to test.
    let tables: usize = stats.tables_per_level.iter().sum();
    assert!(tables > 0, "{ctx}: nothing was ever flushed: {stats:?}");
    if case.is_multiple_of(3) {
        let deeper: usize = stats.tables_per_level[1..].iter().sum();
        assert!(deeper > 0, "{ctx}: nothing was ever compacted: {stats:?}");
    }
    snapshots.clear();
    drop(db);
    let db = Db::open(dir, options_case(case, &fs)).expect("final reopen");
    assert_eq!(collect(db.iter()), all, "{ctx} scan after reopen");
}

#[test]
fn model_many_seeds() {
    let seeds: u64 = std::env::var("CAIRNDB_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    for seed in 0..seeds {
        run(seed, seed as usize, 1500);
    }
}

#[test]
fn model_on_real_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = StdRng::seed_from_u64(7);
    let o = Options {
        memtable_bytes: 16 << 10,
        table_bytes: 8 << 10,
        level1_bytes: 32 << 10,
        ..Options::default()
    };
    let mut db = Db::open(tmp.path(), o.clone()).expect("open");
    let mut model = Model::new();
    for i in 0..6000 {
        let k = key(&mut rng, 2000);
        if rng.random_bool(0.8) {
            let v = value(&mut rng);
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        } else {
            db.delete(&k).expect("delete");
            model.remove(&k);
        }
        if i % 2000 == 1999 {
            drop(db);
            db = Db::open(tmp.path(), o.clone()).expect("reopen");
        }
    }
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(collect(db.iter()), all);
    let mut rev = collect(db.iter().rev());
    rev.reverse();
    assert_eq!(rev, all);
    for (k, v) in &model {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v));
    }
}
