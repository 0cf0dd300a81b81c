//! `keyspaces`: writes spread over many keyspaces of one database, and a
//! large keyspace dropped while writes to the others go on (issue 37).
//!
//! Phases, in order:
//! 1. `write xN keyspaces` for N = 1, 8, 64: `threads` writers commit
//!    unsynced batches of `BATCH` puts (16-byte keys, `value_len`-byte
//!    values), each batch to one of the first N keyspaces, drawn at
//!    random. The points run in `ROUNDS` slices that cycle through N on
//!    one database, each round starting at another point, so machine
//!    drift and the database's growth spread over all of them; a row's
//!    rate is its median slice's. The target:
//!    throughput at N over throughput at 1 keyspace at least
//!    `COUNT_TARGET` (throughput does not fall with the count).
//! 2. `drop keyspace`: a fresh database, `drop_bytes` of 1 KiB values
//!    written to keyspace `big` and flushed, then writers commit to
//!    keyspace `other` while `big` is dropped. The row's operation is the
//!    drop: its rate is 1 / the call's time, against `DROP_LIMIT_MS`
//!    (target 1.0: the call returns within it). The note gives the
//!    writes to `other` while the call ran and their rate before and
//!    after it, and the directory's bytes before the drop and once the
//!    dropped keyspace's files are gone (or after `REMOVAL_WAIT`).
//!
//! Engines whose adapter has no keyspaces get one SKIP row.

use super::{Ctx, Outcome, Rng, WriterLoad, check_value, make_key, make_value, spawn_writers};
use crate::bench::engine::{BatchOp, Engine};
use crate::bench::{BenchResult, Row};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WORKLOAD: &str = "keyspaces";
const KEY_LEN: usize = 16;
/// Puts per committed batch.
const BATCH: u64 = 16;
/// Slices per point of phase 1.
const ROUNDS: usize = 3;
/// Keyspace counts of phase 1.
pub const COUNTS: [usize; 3] = [1, 8, 64];
/// Throughput at N keyspaces over throughput at one.
pub const COUNT_TARGET: f64 = 0.90;
/// The drop must return within this many milliseconds.
pub const DROP_LIMIT_MS: f64 = 10.0;
/// Value size of the dropped keyspace's data.
const DROP_VALUE_LEN: usize = 1024;
/// Longest wait for the dropped keyspace's files to leave.
const REMOVAL_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Config {
    /// Puts per point of phase 1, all slices together.
    pub ops: u64,
    pub threads: usize,
    pub value_len: usize,
    /// Bytes of values in the keyspace phase 2 drops.
    pub drop_bytes: u64,
    pub seed: u64,
}

pub fn run(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    ctx.fresh()?;
    if ctx.db()?.keyspaces().is_none() {
        ctx.skip(
            WORKLOAD,
            "all phases",
            "no keyspaces in this engine's adapter",
        );
        return Ok(());
    }
    counts(ctx, cfg)?;
    drop_while_writing(ctx, cfg)
}

/// Phase 1: one row per keyspace count.
fn counts(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    let db = ctx.db()?;
    let spaces = db.keyspaces().ok_or("no keyspaces")?;
    let max = COUNTS.iter().copied().max().unwrap_or(1);
    let ids: Vec<usize> = (0..max)
        .map(|i| spaces.open_keyspace(&format!("ks{i}")))
        .collect::<BenchResult<_>>()?;
    drop(db);
    let first = ctx.rows.len();
    let per_slice = (cfg.ops / ROUNDS as u64).max(BATCH);
    let mut rates = vec![Vec::new(); COUNTS.len()];
    let next = AtomicU64::new(0);
    for round in 0..ROUNDS {
        // Each round starts at another point, so that no count always
        // runs on the fullest database of its round.
        for step in 0..COUNTS.len() {
            let point = (round + step) % COUNTS.len();
            let n = COUNTS[point];
            let seed = cfg.seed ^ ((round * COUNTS.len() + point) as u64).rotate_left(40);
            let row = ctx.phase(
                WORKLOAD,
                &format!("write x{n} keyspaces"),
                "ops/s",
                None,
                |db, p| {
                    let start = Instant::now();
                    let ops = write_slice(db.as_ref(), &ids[..n], cfg, per_slice, seed, &next, p)?;
                    let secs = start.elapsed().as_secs_f64().max(1e-9);
                    Ok(Outcome {
                        ops,
                        user_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                        written_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                        note: Some(format!("{:.0} ops/s", ops as f64 / secs)),
                        ..Outcome::default()
                    })
                },
            );
            if row.failure.is_none() {
                rates[point].push(row.rate());
            }
        }
    }
    ctx.merge_since(first);
    // Every key written is read back from its keyspace.
    let verified = verify_sample(ctx.db()?.as_ref(), &ids, next.load(Ordering::Relaxed), cfg);
    let rows = &mut ctx.rows[first..];
    for (row, r) in rows.iter_mut().zip(rates.iter_mut()) {
        r.sort_by(f64::total_cmp);
        if let Some(&median) = r.get(r.len() / 2) {
            row.secs = row.ops as f64 / median.max(1e-9);
        }
        row.note = Some(format!(
            "median of {} slices, batches of {BATCH} puts",
            r.len()
        ));
    }
    let base = rows.first().filter(|r| r.failure.is_none()).map(Row::rate);
    for row in rows.iter_mut().skip(1) {
        if let Some(base) = base {
            row.limit = Some(("1 keyspace".into(), base));
            row.target = Some(COUNT_TARGET);
        }
    }
    if let (Err(e), Some(last)) = (verified, rows.last_mut()) {
        last.failure = Some(e);
    }
    Ok(())
}

/// Writes `ops` puts in batches of `BATCH` from `cfg.threads` threads,
/// each batch to one keyspace of `ids` drawn at random. Key numbers come
/// from `next`, shared across slices: each key is written once.
fn write_slice(
    db: &dyn Engine,
    ids: &[usize],
    cfg: &Config,
    ops: u64,
    seed: u64,
    next: &AtomicU64,
    p: &crate::bench::Progress,
) -> BenchResult<u64> {
    let spaces = db.keyspaces().ok_or("no keyspaces")?;
    let done = AtomicU64::new(0);
    std::thread::scope(|s| -> BenchResult<()> {
        let handles: Vec<_> = (0..cfg.threads.max(1))
            .map(|t| {
                let done = &done;
                s.spawn(move || -> BenchResult<()> {
                    let mut rng = Rng::new(seed ^ t as u64);
                    while done.fetch_add(BATCH, Ordering::Relaxed) < ops {
                        let ks = rng.below(ids.len() as u64) as usize;
                        let batch: Vec<BatchOp> = (0..BATCH)
                            .map(|_| {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                (make_key(i, KEY_LEN), Some(make_value(i, 0, cfg.value_len)))
                            })
                            .collect();
                        spaces.write_in(ids[ks], &batch, false)?;
                        p.add(BATCH, BATCH * (KEY_LEN + cfg.value_len) as u64);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "a writer panicked")??;
        }
        Ok(())
    })?;
    Ok(done.load(Ordering::Relaxed).min(ops))
}

/// Reads back a sample of the keys phase 1 wrote: each is in exactly one
/// keyspace, with its value.
fn verify_sample(db: &dyn Engine, ids: &[usize], written: u64, cfg: &Config) -> Result<(), String> {
    let spaces = db.keyspaces().ok_or("no keyspaces")?;
    let mut rng = Rng::new(cfg.seed ^ 0x5eed);
    for _ in 0..written.min(500) {
        let i = rng.below(written.max(1));
        let mut found = 0;
        for &ks in ids {
            match spaces.get_in(ks, &make_key(i, KEY_LEN)) {
                Ok(Some(v)) => {
                    check_value(i, &v)?;
                    found += 1;
                }
                Ok(None) => {}
                Err(e) => return Err(format!("key {i}: {e}")),
            }
        }
        if found != 1 {
            return Err(format!("key {i} is in {found} keyspaces, not one"));
        }
    }
    Ok(())
}

/// Phase 2: the drop of a large keyspace while writes go on.
fn drop_while_writing(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    ctx.fresh()?;
    let db = ctx.db()?;
    let spaces = db.keyspaces().ok_or("no keyspaces")?;
    let big = spaces.open_keyspace("big")?;
    let other = spaces.open_keyspace("other")?;
    let values = (cfg.drop_bytes / DROP_VALUE_LEN as u64).max(1);
    let mut i = 0;
    while i < values {
        let end = (i + 256).min(values);
        let batch: Vec<BatchOp> = (i..end)
            .map(|j| (make_key(j, KEY_LEN), Some(make_value(j, 0, DROP_VALUE_LEN))))
            .collect();
        spaces.write_in(big, &batch, false)?;
        i = end;
    }
    db.flush()?;
    drop(db);
    let dir = ctx.dir.clone();
    let row = ctx.phase(WORKLOAD, "drop keyspace", "ops/s", None, |db, _| {
        let spaces = db.keyspaces().ok_or("no keyspaces")?;
        let before_bytes = crate::bench::monitor::dir_bytes(&dir);
        let stop = AtomicBool::new(false);
        let written = AtomicU64::new(0);
        let write = |batch: &[BatchOp]| spaces.write_in(other, batch, false);
        let (took, counts) = std::thread::scope(|s| -> BenchResult<(Duration, [u64; 3])> {
            let writers = spawn_writers(
                s,
                &WriterLoad {
                    threads: cfg.threads,
                    seed: cfg.seed ^ 0xd0,
                    key_base: 0,
                    value_len: cfg.value_len,
                },
                &stop,
                &written,
                &write,
            );
            let window = Duration::from_millis(500);
            std::thread::sleep(window);
            let w0 = written.load(Ordering::Relaxed);
            let start = Instant::now();
            let dropped = spaces.drop_keyspace("big");
            let took = start.elapsed();
            let w1 = written.load(Ordering::Relaxed);
            std::thread::sleep(window);
            let w2 = written.load(Ordering::Relaxed);
            stop.store(true, Ordering::Relaxed);
            for w in writers {
                w.join().map_err(|_| "a writer panicked")??;
            }
            dropped?;
            Ok((took, [w0, w1 - w0, w2 - w1]))
        })?;
        // The dropped keyspace's files leave in the background: the
        // directory is measured once its size has held for a second.
        db.flush()?;
        let wait = Instant::now();
        let mut after_bytes = crate::bench::monitor::dir_bytes(&dir);
        let mut held = Instant::now();
        while held.elapsed() < Duration::from_secs(1) && wait.elapsed() < REMOVAL_WAIT {
            std::thread::sleep(Duration::from_millis(100));
            let now = crate::bench::monitor::dir_bytes(&dir);
            if now != after_bytes {
                after_bytes = now;
                held = Instant::now();
            }
        }
        let other_bytes = (counts[0] + counts[1] + counts[2]) * (KEY_LEN + cfg.value_len) as u64;
        let secs = took.as_secs_f64().max(1e-9);
        let mut note = format!(
            "drop took {:.2} ms; writes to another keyspace: {:.0} ops/s before, {} during the \
             call, {:.0} ops/s after; directory {} MiB before, {} MiB after ({} MiB written to \
             the other keyspace meanwhile)",
            secs * 1e3,
            counts[0] as f64 / 0.5,
            counts[1],
            counts[2] as f64 / 0.5,
            before_bytes >> 20,
            after_bytes >> 20,
            other_bytes >> 20,
        );
        if let Some(space) = db.space_note() {
            note.push_str(&format!("; {space}"));
        }
        let mut failure = None;
        if spaces
            .get_in(big, &make_key(0, KEY_LEN))
            .is_ok_and(|v| v.is_some())
        {
            failure = Some("the dropped keyspace still answers".to_owned());
        }
        if counts[2] == 0 {
            failure = Some("writes to the other keyspace stopped after the drop".to_owned());
        }
        Ok(Outcome {
            ops: 1,
            note: Some(note),
            failure,
            latency_us: Some((secs * 1e6, secs * 1e6)),
            ..Outcome::default()
        })
    });
    let _ = row;
    if let Some(row) = ctx.rows.last_mut() {
        // The phase's time includes the writes around the call; its
        // operation is the call alone.
        if let Some((lat, _)) = row.latency_us {
            row.secs = lat / 1e6;
        }
        row.limit = Some((format!("{DROP_LIMIT_MS} ms"), 1e3 / DROP_LIMIT_MS));
        row.target = Some(1.0);
    }
    Ok(())
}
