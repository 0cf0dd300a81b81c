//! `ycsb`: the YCSB core workloads A, B, C, E, F over `records` keys with
//! 1 KiB values, keys chosen by a scrambled zipfian (theta 0.99).
//!
//! | workload | mix                                   |
//! |----------|---------------------------------------|
//! | A        | 50 % read, 50 % update                |
//! | B        | 95 % read, 5 % update                 |
//! | C        | 100 % read                            |
//! | E        | 95 % scan (1-100 keys), 5 % insert    |
//! | F        | 50 % read, 50 % read-modify-write     |
//!
//! Every read and scanned value is verified; a loaded key that is missing
//! fails the phase. Values are incompressible unless `--compressible`
//! asks for values that compress to a ratio (`Fill`).

use super::{
    Ctx, Fill, Outcome, Rng, Share, Zipf, check_value, checked_scan, make_key, parallel,
    percentiles,
};
use crate::bench::BenchResult;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Config {
    pub records: u64,
    /// Operations per workload (all threads together).
    pub ops: u64,
    pub threads: usize,
    pub value_len: usize,
    /// How values are filled: incompressible, or compressible
    /// (`--compressible`).
    pub fill: Fill,
    pub seed: u64,
}

#[derive(Clone, Copy)]
enum Op {
    Read,
    Update,
    Scan,
    Insert,
    ReadModifyWrite,
}

fn mix(workload: char, rng: &mut Rng) -> Op {
    let x = rng.below(100);
    match workload {
        'A' => {
            if x < 50 {
                Op::Read
            } else {
                Op::Update
            }
        }
        'B' => {
            if x < 95 {
                Op::Read
            } else {
                Op::Update
            }
        }
        'C' => Op::Read,
        'E' => {
            if x < 95 {
                Op::Scan
            } else {
                Op::Insert
            }
        }
        _ => {
            if x < 50 {
                Op::Read
            } else {
                Op::ReadModifyWrite
            }
        }
    }
}

pub fn run(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    let n = cfg.records.max(1);
    let vl = cfg.value_len;
    let entry = (16 + vl) as u64;
    ctx.fresh()?;
    ctx.phase("ycsb", "load", "ops/s", None, |db, p| {
        let per = n.div_ceil(ctx_threads(cfg) as u64);
        parallel(ctx_threads(cfg), |t| {
            let lo = t as u64 * per;
            for i in lo..(lo + per).min(n) {
                db.put(&make_key(i, 16), &cfg.fill.value(i, 0, vl))?;
                p.add(1, entry);
            }
            Ok(())
        })?;
        Ok(Outcome {
            ops: n,
            user_bytes: n * entry,
            written_bytes: n * entry,
            ..Outcome::default()
        })
    });
    ctx.flush_and_measure_space(n * entry)?;

    let zipf = Zipf::new(n, 0.99);
    let next_insert = AtomicU64::new(n);
    for w in ['A', 'B', 'C', 'E', 'F'] {
        let name = format!("{w}");
        ctx.phase("ycsb", &name, "ops/s", None, |db, p| {
            let threads = ctx_threads(cfg);
            let per = cfg.ops / threads as u64;
            let lat = parallel(threads, |t| {
                let mut rng = Rng::new(cfg.seed ^ (u64::from(w as u32) << 32) ^ t as u64);
                let mut lat = Vec::with_capacity(per as usize);
                for _ in 0..per {
                    let op = mix(w, &mut rng);
                    let i = zipf.next(&mut rng);
                    let start = Instant::now();
                    let mut bytes = entry;
                    match op {
                        Op::Read | Op::ReadModifyWrite => {
                            let v = db
                                .get(&make_key(i, 16))?
                                .ok_or_else(|| format!("key {i} is missing"))?;
                            check_value(i, &v)?;
                            if matches!(op, Op::ReadModifyWrite) {
                                db.put(&make_key(i, 16), &cfg.fill.value(i, 1, vl))?;
                                bytes *= 2;
                            }
                        }
                        Op::Update => db.put(&make_key(i, 16), &cfg.fill.value(i, 1, vl))?,
                        Op::Insert => {
                            let j = next_insert.fetch_add(1, Ordering::Relaxed);
                            db.put(&make_key(j, 16), &cfg.fill.value(j, 0, vl))?;
                        }
                        Op::Scan => {
                            let len = 1 + rng.below(100) as usize;
                            let seen = checked_scan(
                                db.as_ref(),
                                &make_key(i, 16),
                                len,
                                Share::ALL,
                                |_| {},
                            )?;
                            bytes = seen as u64 * entry;
                        }
                    }
                    lat.push(start.elapsed().as_nanos() as u64);
                    p.add(1, bytes);
                }
                Ok(lat)
            })?;
            let ops = per * threads as u64;
            Ok(Outcome {
                ops,
                latency_us: percentiles(lat.into_iter().flatten().collect()),
                ..Outcome::default()
            })
        });
    }
    Ok(())
}

fn ctx_threads(cfg: &Config) -> usize {
    cfg.threads.max(1)
}
