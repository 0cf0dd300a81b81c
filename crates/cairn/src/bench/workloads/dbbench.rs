//! `dbbench`: LevelDB/RocksDB db_bench's classic phases with 16-byte keys
//! and 100-byte values (both sizes are flags).
//!
//! Phases, in order: fillseq (fresh database, keys in order), fillrandom
//! (fresh database, every key once in random order), overwrite (random
//! keys with replacement), readrandom, readseq, seekrandom (seek + next
//! 100), readwhilewriting (readers while one writer overwrites),
//! scanwhilewriting (scanners of 1,000 keys from random places while one
//! writer overwrites at 10,000 puts/s), deleterandom. Reads verify every value (`check_value`); readrandom and
//! readseq also require every key to be present. Then, for bytes on disk
//! (`space`): load (fillrandom again on a fresh database, flushed) and
//! compact (the engine's full compaction), each row with what the
//! directory takes on disk after it.
//!
//! Values are incompressible unless `--compressible` asks for values
//! that compress to a ratio (`Fill`); `--compression` sets the engines'
//! table compression.

use super::{
    Ctx, Fill, Outcome, Rng, Share, check_value, checked_scan, key_index, make_key, parallel,
    percentiles,
};
use crate::bench::device::DeviceLimits;
use crate::bench::engine::Engine;
use crate::bench::{BenchResult, Progress};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Config {
    pub num: u64,
    pub threads: usize,
    pub key_len: usize,
    pub value_len: usize,
    /// How values are filled: incompressible, or compressible
    /// (`--compressible`).
    pub fill: Fill,
    pub seed: u64,
}

/// Progress is published every this many operations.
const TICK: u64 = 64;
/// Entries each scan of `scanwhilewriting` reads.
const SCAN_WHILE_WRITING_LEN: usize = 1000;
/// Puts per second of `scanwhilewriting`'s writer.
const SCAN_WHILE_WRITING_PUTS: f64 = 10_000.0;

pub fn run(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) -> BenchResult<()> {
    let n = cfg.num.max(1);
    let (kl, vl) = (cfg.key_len, cfg.value_len);
    let entry = (kl + vl) as u64;
    let write_limit = Some(("seq write".to_owned(), dev.seq_write / 1e6));
    let read_limit = Some((
        format!("4K rand read IOPS x{}", cfg.threads),
        dev.rand_read_4k / 4096.0,
    ));
    let scan_limit = Some(("seq read".to_owned(), dev.seq_read / 1e6));

    ctx.fresh()?;
    ctx.phase(
        "dbbench",
        "fillseq",
        "MB/s",
        write_limit.clone(),
        |db, p| fill(db, p, (0..n).map(|i| (i, 0)), cfg),
    );

    ctx.fresh()?;
    let order = random_order(n, cfg.seed);
    ctx.phase(
        "dbbench",
        "fillrandom",
        "MB/s",
        write_limit.clone(),
        |db, p| fill(db, p, order.iter().map(|&i| (i, 0)), cfg),
    );
    drop(order);

    ctx.phase(
        "dbbench",
        "overwrite",
        "MB/s",
        write_limit.clone(),
        |db, p| {
            let mut rng = Rng::new(cfg.seed + 1);
            fill(db, p, (0..n).map(|_| (rng.below(n), 1)), cfg)
        },
    );
    ctx.flush_and_measure_space(n * entry)?;

    let threads = cfg.threads.max(1);
    ctx.phase(
        "dbbench",
        "readrandom",
        "ops/s",
        read_limit.clone(),
        |db, p| {
            let per = n / threads as u64;
            let results = parallel(threads, |t| {
                let mut rng = Rng::new(cfg.seed + 100 + t as u64);
                let mut lat = Vec::with_capacity(per as usize);
                for j in 0..per {
                    let i = rng.below(n);
                    let start = Instant::now();
                    let v = db.get(&make_key(i, kl))?;
                    lat.push(start.elapsed().as_nanos() as u64);
                    match v {
                        Some(v) => check_value(i, &v)?,
                        None => return Err(format!("key {i} is missing").into()),
                    }
                    if j % TICK == TICK - 1 {
                        p.add(TICK, TICK * entry);
                    }
                }
                Ok(lat)
            })?;
            let ops = per * threads as u64;
            let lat: Vec<u64> = results.into_iter().flatten().collect();
            Ok(Outcome {
                ops,
                user_bytes: ops * entry,
                latency_us: percentiles(lat),
                ..Outcome::default()
            })
        },
    );

    ctx.phase("dbbench", "readseq", "MB/s", scan_limit.clone(), |db, p| {
        let mut seen = 0u64;
        let mut failure = None;
        db.scan(&[], usize::MAX, &mut |k, v| {
            let ok = key_index(k)
                .filter(|&i| i == seen)
                .ok_or_else(|| format!("scan out of order or incomplete at position {seen}"))
                .and_then(|i| check_value(i, v));
            if let Err(e) = ok {
                failure = Some(e);
                return false;
            }
            seen += 1;
            if seen.is_multiple_of(TICK) {
                p.add(TICK, TICK * entry);
            }
            true
        })?;
        if failure.is_none() && seen != n {
            failure = Some(format!("scan saw {seen} of {n} keys"));
        }
        Ok(Outcome {
            ops: seen,
            user_bytes: seen * entry,
            failure,
            ..Outcome::default()
        })
    });

    ctx.phase(
        "dbbench",
        "seekrandom",
        "ops/s",
        read_limit.clone(),
        |db, p| {
            let seeks = (n / 10).max(1) / threads as u64;
            parallel(threads, |t| {
                let mut rng = Rng::new(cfg.seed + 200 + t as u64);
                for _ in 0..seeks {
                    let from = rng.below(n);
                    let mut first = None;
                    checked_scan(db.as_ref(), &make_key(from, kl), 100, Share::ALL, |i| {
                        first.get_or_insert(i);
                    })?;
                    if first.is_some_and(|i| i < from) {
                        return Err(format!("seek to {from} began at {first:?}").into());
                    }
                    p.add(1, 0);
                }
                Ok(())
            })?;
            let ops = seeks * threads as u64;
            Ok(Outcome {
                ops,
                ..Outcome::default()
            })
        },
    );

    ctx.phase(
        "dbbench",
        "readwhilewriting",
        "ops/s",
        read_limit,
        |db, p| {
            let per = n / threads as u64;
            // The readers' rate depends on how much of the machine the
            // writer took: engines whose writer runs faster leave less.
            let (ops, writes, secs) = beside_writer(db, cfg, 300, 2, None, || {
                let reads = parallel(threads, |t| {
                    let mut rng = Rng::new(cfg.seed + 400 + t as u64);
                    for j in 0..per {
                        let i = rng.below(n);
                        match db.get(&make_key(i, kl))? {
                            Some(v) => check_value(i, &v)?,
                            None => return Err(format!("key {i} is missing").into()),
                        }
                        if j % TICK == TICK - 1 {
                            p.add(TICK, TICK * entry);
                        }
                    }
                    Ok(per)
                })?;
                Ok(reads.iter().sum())
            })?;
            Ok(Outcome {
                ops,
                user_bytes: ops * entry,
                written_bytes: writes * entry,
                note: Some(writer_note(writes, secs)),
                ..Outcome::default()
            })
        },
    );

    // Scans beside a writer: what a store written without pause gives
    // scans. Each scanner reads as many entries as the database holds,
    // 1,000 from each random place, while one writer overwrites random
    // keys at a steady rate, so that the scans' rate tells how the data
    // lies, not how much of the machine the writer took.
    ctx.phase(
        "dbbench",
        "scanwhilewriting",
        "MB/s",
        scan_limit,
        |db, p| {
            let settled_before = db.settled();
            let pace = Some(SCAN_WHILE_WRITING_PUTS);
            let (ops, writes, secs) = beside_writer(db, cfg, 600, 3, pace, || {
                let scanned = parallel(threads, |t| {
                    let mut rng = Rng::new(cfg.seed + 700 + t as u64);
                    let mut seen = 0u64;
                    while seen < n {
                        let from = rng.below(n);
                        let got = checked_scan(
                            db.as_ref(),
                            &make_key(from, kl),
                            SCAN_WHILE_WRITING_LEN,
                            Share::ALL,
                            |_| {},
                        )? as u64;
                        p.add(got, got * entry);
                        // A scan from near the end meets few keys; count
                        // at least one so the loop ends.
                        seen += got.max(1);
                    }
                    Ok(seen)
                })?;
                Ok(scanned.iter().sum())
            })?;
            let settled = match (settled_before, db.settled()) {
                (Some((s0, r0)), Some((s1, r1))) => format!(
                    "; {:.0} MiB settled into key order beside {:.0} MiB scans read at random from write order",
                    (s1 - s0) as f64 / (1 << 20) as f64,
                    (r1 - r0) as f64 / (1 << 20) as f64
                ),
                _ => String::new(),
            };
            Ok(Outcome {
                ops,
                user_bytes: ops * entry,
                written_bytes: writes * entry,
                note: Some(format!("{}{settled}", writer_note(writes, secs))),
                ..Outcome::default()
            })
        },
    );

    ctx.phase("dbbench", "deleterandom", "ops/s", None, |db, p| {
        let mut rng = Rng::new(cfg.seed + 500);
        for j in 0..n {
            db.delete(&make_key(rng.below(n), kl))?;
            if j % TICK == TICK - 1 {
                p.add(TICK, TICK * kl as u64);
            }
        }
        Ok(Outcome {
            ops: n,
            user_bytes: n * kl as u64,
            written_bytes: n * kl as u64,
            ..Outcome::default()
        })
    });

    space(ctx, cfg, write_limit)
}

/// Records bytes on disk in the last row, and what the engine says of
/// them (`Engine::space_note`).
fn measure(ctx: &mut Ctx, live: u64) -> BenchResult<()> {
    ctx.measure_disk(live);
    if let Some(note) = ctx.db()?.space_note()
        && let Some(row) = ctx.rows.last_mut()
    {
        row.add_note(note);
    }
    Ok(())
}

/// `0..n` shuffled by `seed`: fillrandom's order.
fn random_order(n: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = Rng::new(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// Bytes on disk after fillrandom's load and after a full compaction: a
/// fresh database loaded as fillrandom loaded its own (row `load`),
/// flushed and measured, then compacted with the engine's own call (row
/// `compact`, SKIP if the adapter has none) and measured again. Apart
/// from the phases above so that they run as they always have (no
/// compaction between fillrandom and overwrite). The rows' `disk` holds
/// the figures; their notes say what compression the engine applied.
fn space(ctx: &mut Ctx, cfg: &Config, limit: Option<(String, f64)>) -> BenchResult<()> {
    let n = cfg.num.max(1);
    let live = n * (cfg.key_len + cfg.value_len) as u64;
    ctx.fresh()?;
    let compression = ctx.db()?.compression();
    let order = random_order(n, cfg.seed);
    ctx.phase("dbbench", "load", "MB/s", limit, |db, p| {
        let mut out = fill(db, p, order.iter().map(|&i| (i, 0)), cfg)?;
        out.note = Some(format!(
            "fillrandom again, on a fresh database; disk after a flush; compression {compression}"
        ));
        Ok(out)
    });
    drop(order);
    ctx.db()?.flush()?;
    measure(ctx, live)?;

    let mut compacted = false;
    ctx.phase("dbbench", "compact", "MB/s", None, |db, _| {
        compacted = db.compact()?;
        Ok(Outcome {
            ops: n,
            user_bytes: live,
            note: Some(format!(
                "full compaction of the load; compression {compression}"
            )),
            ..Outcome::default()
        })
    });
    if compacted {
        ctx.db()?.flush()?;
        measure(ctx, live)?;
    } else if ctx.rows.last().is_some_and(|r| r.failure.is_none()) {
        ctx.rows.pop();
        ctx.timelines.pop();
        ctx.skip(
            "dbbench",
            "compact",
            "the adapter has no compaction call: disk as after the load",
        );
    }
    Ok(())
}

/// Runs `work` (a phase's readers; it returns their operations) beside
/// one writer overwriting random keys with `version`'s values, as fast as
/// it can or at `pace` puts/s, until `work` returns. Returns the
/// operations, the writer's puts and the seconds it all took.
fn beside_writer(
    db: &Arc<dyn Engine>,
    cfg: &Config,
    seed: u64,
    version: u32,
    pace: Option<f64>,
    work: impl FnOnce() -> BenchResult<u64>,
) -> BenchResult<(u64, u64, f64)> {
    let n = cfg.num.max(1);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let (ops, writes) = std::thread::scope(|s| {
        let writer = s.spawn(|| -> BenchResult<u64> {
            let mut rng = Rng::new(cfg.seed + seed);
            let mut w = 0u64;
            while !done.load(Ordering::Relaxed) {
                if pace.is_some_and(|rate| w as f64 >= start.elapsed().as_secs_f64() * rate) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                let i = rng.below(n);
                db.put(
                    &make_key(i, cfg.key_len),
                    &cfg.fill.value(i, version, cfg.value_len),
                )?;
                w += 1;
            }
            Ok(w)
        });
        let ops = work();
        done.store(true, Ordering::Relaxed);
        let writes = writer.join().map_err(|_| "writer panicked");
        (ops, writes)
    });
    Ok((ops?, writes??, start.elapsed().as_secs_f64()))
}

/// What a writer beside a phase did, for its note.
fn writer_note(writes: u64, secs: f64) -> String {
    format!(
        "the writer put {writes} values meanwhile ({:.0} puts/s)",
        writes as f64 / secs.max(1e-9)
    )
}

/// Puts `(key index, version)` pairs one by one: the write phases differ
/// only in which keys they write.
fn fill(
    db: &Arc<dyn Engine>,
    p: &Arc<Progress>,
    keys: impl Iterator<Item = (u64, u32)>,
    cfg: &Config,
) -> BenchResult<Outcome> {
    let (kl, vl) = (cfg.key_len, cfg.value_len);
    let entry = (kl + vl) as u64;
    let mut n = 0u64;
    for (i, version) in keys {
        db.put(&make_key(i, kl), &cfg.fill.value(i, version, vl))?;
        n += 1;
        if n.is_multiple_of(TICK) {
            p.add(TICK, TICK * entry);
        }
    }
    Ok(Outcome {
        ops: n,
        user_bytes: n * entry,
        written_bytes: n * entry,
        ..Outcome::default()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::bench::engine::{Compression, EngineConfig};

    /// A tiny run on compressible values, without and with LZ4: every
    /// phase verifies, the load and compact rows carry bytes on disk and
    /// say what compression the engine applied, and LZ4 takes less disk.
    #[test]
    fn the_space_rows_show_what_compression_saves() {
        let mut after_compaction = Vec::new();
        for compression in [Compression::None, Compression::Lz4] {
            let root = tempfile::tempdir().unwrap();
            let mut ctx = Ctx::new(
                "cairndb",
                EngineConfig {
                    compression,
                    ..EngineConfig::default()
                },
                root.path().join("d"),
                None,
                true,
            );
            let cfg = Config {
                num: 20_000,
                threads: 2,
                key_len: 16,
                value_len: 100,
                fill: Fill::compressible(Some(0.5), 3).unwrap(),
                seed: 3,
            };
            run(&mut ctx, &cfg, &DeviceLimits::default()).unwrap();
            for r in &ctx.rows {
                assert!(r.failure.is_none() && r.skipped.is_none(), "{r:?}");
            }
            let phases: Vec<&str> = ctx.rows.iter().map(|r| r.phase.as_str()).collect();
            assert_eq!(
                phases[phases.len() - 3..],
                ["deleterandom", "load", "compact"]
            );
            let [.., load, compact] = &ctx.rows[..] else {
                unreachable!()
            };
            for r in [load, compact] {
                let note = r.note.as_deref().unwrap();
                assert!(
                    note.contains(&format!("compression {}", compression.name())),
                    "{note}"
                );
                let disk = r.disk.unwrap();
                assert!(disk.bytes > 0 && disk.allocated > 0, "{r:?}");
                assert!(r.space_amp.is_some());
            }
            after_compaction.push(compact.disk.unwrap().bytes);
            assert!(compact.note.as_deref().unwrap().contains("tables "));
        }
        let [none, lz4] = after_compaction[..] else {
            unreachable!()
        };
        // Tables of 2.3 MB and 1.4 MB beside the same 19 MB of journal
        // files when written.
        assert!(lz4 + (600 << 10) < none, "none {none}, lz4 {lz4}");
    }
}
