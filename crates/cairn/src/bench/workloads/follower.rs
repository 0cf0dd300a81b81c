//! `follower`: how long a follower (a second handle reading what the
//! writer writes, catching up on a timer) takes to see an acknowledged
//! write, under a steady write load (issue 38: p99 under 1 s).
//!
//! In one phase, `threads` writers commit unsynced batches of new keys
//! without pause (`spawn_writers`), and one marker thread commits a synced put of
//! a counter under one key every `MARK_EVERY`, noting when each put was
//! acknowledged. A follower opened on the same directory catches up
//! every `every` (its own timer); a poller reads the marker key through
//! it every `POLL_EVERY` and notes when it first sees each counter. A
//! counter's delay is first seen minus acknowledged (0 if the follower
//! saw it before the put returned). The row's operations are the markers
//! seen; its latency columns are the delay's p50 and p99; the note gives
//! the maximum, the writers' rate and the target.
//!
//! The row fails if the follower ever sees the counter go back, sees a
//! counter never written, or has not seen the last counter within
//! `FINAL_WAIT` after the writers stop.
//!
//! Engines whose adapter has no follower get one SKIP row.

use super::{Ctx, Outcome, WriterLoad, spawn_writers};
use crate::bench::BenchResult;
use crate::bench::engine::BatchOp;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WORKLOAD: &str = "follower";
/// Time between two synced marker puts.
const MARK_EVERY: Duration = Duration::from_millis(10);
/// Time between two reads of the marker through the follower.
const POLL_EVERY: Duration = Duration::from_millis(1);
/// Longest wait for the follower to see the last marker once writes stop.
const FINAL_WAIT: Duration = Duration::from_secs(5);
/// The marker's key: outside the writers' keys (`make_key` of an index).
const MARKER: &[u8] = b"~follower-marker";
/// The target for the delay's p99.
const TARGET_P99: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct Config {
    /// How long the writers write.
    pub secs: f64,
    pub threads: usize,
    pub value_len: usize,
    /// The follower's catch-up period.
    pub every: Duration,
    pub seed: u64,
}

pub fn run(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    ctx.fresh()?;
    let Some(follower) = ctx.db()?.follower(cfg.every) else {
        ctx.skip(
            WORKLOAD,
            "all phases",
            "no follower in this engine's adapter",
        );
        return Ok(());
    };
    let follower = follower?;
    let phase = format!("seen after a synced put (catch-up every {:?})", cfg.every);
    ctx.phase(WORKLOAD, &phase, "ops/s", None, |db, _| {
        let stop = AtomicBool::new(false);
        let written = AtomicU64::new(0);
        let write = |batch: &[BatchOp]| db.write_batch(batch, false);
        // acked[c - 1]: when marker c was acknowledged.
        let acked: Mutex<Vec<Instant>> = Mutex::new(Vec::new());
        let run_for = Duration::from_secs_f64(cfg.secs.max(0.0));
        let (seen, failure, writes) = std::thread::scope(|s| -> BenchResult<_> {
            let writers = spawn_writers(
                s,
                &WriterLoad {
                    threads: cfg.threads,
                    seed: cfg.seed ^ 0xf0,
                    key_base: 0,
                    value_len: cfg.value_len,
                },
                &stop,
                &written,
                &write,
            );
            let marker = {
                let (stop, acked, db) = (&stop, &acked, &db);
                s.spawn(move || -> BenchResult<u64> {
                    let mut c = 0u64;
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        c += 1;
                        let op: BatchOp = (MARKER.to_vec(), Some(c.to_le_bytes().to_vec()));
                        db.write_batch(&[op], true)?;
                        acked.lock().map_err(|_| "poisoned")?.push(Instant::now());
                        next += MARK_EVERY;
                        std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    }
                    Ok(c)
                })
            };
            // The poller: this thread. seen[c - 1]: when the follower
            // first showed marker c.
            let mut seen: Vec<Instant> = Vec::new();
            let mut failure = None;
            let start = Instant::now();
            let mut stopped_at = None;
            loop {
                if stopped_at.is_none() && start.elapsed() >= run_for {
                    stop.store(true, Ordering::Relaxed);
                    stopped_at = Some(Instant::now());
                }
                // Read before the count, so that a finished marker thread
                // means the count is final.
                let done = marker.is_finished();
                let written_now = acked.lock().map_err(|_| "poisoned")?.len() as u64;
                let c = match follower.get(MARKER)? {
                    Some(v) => {
                        u64::from_le_bytes(v.try_into().map_err(|_| "the marker is not 8 bytes")?)
                    }
                    None => 0,
                };
                let now = Instant::now();
                if c < seen.len() as u64 {
                    failure = Some(format!(
                        "the follower went back from marker {} to {c}",
                        seen.len()
                    ));
                    break;
                }
                // A put may be seen before it returns: at most one ahead
                // (one marker put is in flight at a time).
                if c > written_now + 1 {
                    failure = Some(format!(
                        "the follower saw marker {c}, only {written_now} written"
                    ));
                    break;
                }
                while (seen.len() as u64) < c {
                    seen.push(now);
                }
                if let Some(at) = stopped_at {
                    if done && c >= written_now {
                        break;
                    }
                    if now - at >= FINAL_WAIT {
                        failure = Some(format!(
                            "the follower showed marker {c} of {written_now} {FINAL_WAIT:?} \
                             after writes stopped"
                        ));
                        break;
                    }
                }
                std::thread::sleep(POLL_EVERY);
            }
            stop.store(true, Ordering::Relaxed);
            for w in writers {
                w.join().map_err(|_| "a writer panicked")??;
            }
            marker.join().map_err(|_| "the marker thread panicked")??;
            Ok((seen, failure, written.load(Ordering::Relaxed)))
        })?;
        let acked = acked.into_inner().map_err(|_| "poisoned")?;
        let mut delays: Vec<Duration> = seen
            .iter()
            .zip(&acked)
            .map(|(s, a)| s.saturating_duration_since(*a))
            .collect();
        delays.sort();
        let pct = |p: f64| -> Duration {
            if delays.is_empty() {
                return Duration::ZERO;
            }
            let i = ((delays.len() - 1) as f64 * p).round() as usize;
            delays[i.min(delays.len() - 1)]
        };
        let (p50, p99) = (pct(0.50), pct(0.99));
        let max = delays.last().copied().unwrap_or_default();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let note = format!(
            "{} synced markers seen: delay p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 < \
             {:.0} ms: {}); writers {:.0} ops/s beside",
            delays.len(),
            ms(p50),
            ms(p99),
            ms(max),
            ms(TARGET_P99),
            if p99 < TARGET_P99 { "met" } else { "missed" },
            writes as f64 / run_for.as_secs_f64().max(1e-9),
        );
        Ok(Outcome {
            ops: delays.len() as u64,
            note: Some(note),
            failure,
            latency_us: Some((p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6)),
            ..Outcome::default()
        })
    });
    Ok(())
}
