//! `checkpoint`: the time of a checkpoint of a large database while
//! writers go on (issue 38).
//!
//! A fresh database gets `mib` MiB of `value_len`-byte values (16-byte
//! keys, unsynced batches of `BATCH`), then is flushed. Then, in one
//! phase, `threads` writers commit unsynced batches of new keys without
//! pause; after `WINDOW` the checkpoint is taken into a directory beside
//! the database (same file system: unchanging files are hard-linked),
//! then writers run `WINDOW` more. The row's operation is the checkpoint
//! call: its rate is 1 / the call's time, and the note gives the bytes
//! linked and copied, the database's size, and the writers' rate before,
//! during and after the call. The row fails if the checkpoint's seqno is
//! below the writes acknowledged before the call.
//!
//! Engines whose adapter has no checkpoint get one SKIP row.

use super::{Ctx, Outcome, WriterLoad, make_key, make_value, spawn_writers};
use crate::bench::BenchResult;
use crate::bench::engine::BatchOp;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WORKLOAD: &str = "checkpoint";
const KEY_LEN: usize = 16;
/// Puts per committed batch.
const BATCH: u64 = 16;
/// Writes measured before and after the call.
const WINDOW: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub struct Config {
    /// MiB of values in the database before the checkpoint.
    pub mib: u64,
    pub threads: usize,
    pub value_len: usize,
    pub seed: u64,
}

pub fn run(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    ctx.fresh()?;
    let target = ctx.root.join("checkpoint");
    let _ = std::fs::remove_dir_all(&target);
    if ctx.db()?.checkpoint(&target).is_none() {
        ctx.skip(
            WORKLOAD,
            "all phases",
            "no checkpoint in this engine's adapter",
        );
        return Ok(());
    }
    // The probe above made an (empty) checkpoint: start again.
    std::fs::remove_dir_all(&target)?;
    let db = ctx.db()?;
    let values = ((cfg.mib << 20) / cfg.value_len.max(1) as u64).max(1);
    let mut i = 0;
    while i < values {
        let end = (i + BATCH).min(values);
        let batch: Vec<BatchOp> = (i..end)
            .map(|j| (make_key(j, KEY_LEN), Some(make_value(j, 0, cfg.value_len))))
            .collect();
        db.write_batch(&batch, false)?;
        i = end;
    }
    db.flush()?;
    drop(db);
    let dir = ctx.dir.clone();
    ctx.phase(WORKLOAD, "checkpoint while writing", "ops/s", None, |db, _| {
        let db_bytes = crate::bench::monitor::dir_bytes(&dir);
        let stop = AtomicBool::new(false);
        let written = AtomicU64::new(0);
        let write = |batch: &[BatchOp]| db.write_batch(batch, false);
        let (took, made, counts) = std::thread::scope(|s| -> BenchResult<_> {
            let writers = spawn_writers(
                s,
                &WriterLoad {
                    threads: cfg.threads,
                    seed: cfg.seed ^ 0xc4,
                    key_base: values,
                    value_len: cfg.value_len,
                },
                &stop,
                &written,
                &write,
            );
            std::thread::sleep(WINDOW);
            let w0 = written.load(Ordering::Relaxed);
            let start = Instant::now();
            let made = db.checkpoint(&target).ok_or("no checkpoint")?;
            let took = start.elapsed();
            let w1 = written.load(Ordering::Relaxed);
            std::thread::sleep(WINDOW);
            let w2 = written.load(Ordering::Relaxed);
            stop.store(true, Ordering::Relaxed);
            for w in writers {
                w.join().map_err(|_| "a writer panicked")??;
            }
            Ok((took, made?, [w0, w1 - w0, w2 - w1]))
        })?;
        let secs = took.as_secs_f64().max(1e-9);
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let note = format!(
            "checkpoint took {:.1} ms (flush {:.1} ms, files {:.1} ms) at seqno {}: {:.1} MiB linked, {:.1} MiB copied, database \
             {:.1} MiB; writes {:.0} ops/s before, {} during the call ({:.0} ops/s), {:.0} ops/s \
             after",
            secs * 1e3,
            made.flush_time.as_secs_f64() * 1e3,
            made.files_time.as_secs_f64() * 1e3,
            made.seqno,
            mib(made.bytes_linked),
            mib(made.bytes_copied),
            mib(db_bytes),
            counts[0] as f64 / WINDOW.as_secs_f64(),
            counts[1],
            counts[1] as f64 / secs,
            counts[2] as f64 / WINDOW.as_secs_f64(),
        );
        // Every fill write and those acknowledged before the call.
        let failure = (made.seqno < values + counts[0])
            .then(|| format!("seqno {} misses acknowledged writes", made.seqno));
        let _ = std::fs::remove_dir_all(&target);
        Ok(Outcome {
            ops: 1,
            note: Some(note),
            failure,
            latency_us: Some((secs * 1e6, secs * 1e6)),
            ..Outcome::default()
        })
    });
    if let Some(row) = ctx.rows.last_mut() {
        // The phase's time includes the writes around the call; its
        // operation is the call alone.
        if let Some((lat, _)) = row.latency_us {
            row.secs = lat / 1e6;
        }
    }
    Ok(())
}
