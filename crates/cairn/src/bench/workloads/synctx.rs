//! `synctx`: atomic batches of 100 random keys with 100-byte values, each
//! synced on commit — from one committer, then from 8 at once; each as a
//! `WriteBatch` and as a transaction (begin, 100 puts, synced commit). The
//! device's fdatasync rate is the bar: one committer can at best match it,
//! concurrent committers beat it only if commits share syncs (group
//! commit). The transaction rows carry the project's targets
//! (`TXN_TARGET_ONE`, `TXN_TARGET_MANY`).
//!
//! Last, the transaction phase with the most committers runs once more
//! with `sync: false` ("…, txn, no sync"): the same work without a single
//! fdatasync, so its rate is what the CPU allows. Where that is below a
//! target, no sync strategy can meet it on this machine.
//!
//! A transaction whose commit meets a conflict (another committer wrote
//! one of its keys after it began: with 8 committers × 100 keys over a
//! million keys, a few per cent of commits) is retried from a new begin;
//! the row's note counts the conflicts. Engines whose adapter has no
//! transactions get SKIP rows for those phases.

use super::{Ctx, Outcome, Rng, make_key, make_value, parallel, percentiles};
use crate::bench::BenchResult;
use crate::bench::device::DeviceLimits;
use crate::bench::engine::{BatchOp, Engine};
use std::time::Instant;

/// Synced transactions/s from one committer over fdatasync/s: at least.
pub const TXN_TARGET_ONE: f64 = 0.90;
/// Synced transactions/s from 8 committers over fdatasync/s: at least
/// (group commit shares syncs).
pub const TXN_TARGET_MANY: f64 = 3.0;
/// Committers `TXN_TARGET_MANY` is set for.
const TXN_TARGET_MANY_COMMITTERS: usize = 8;
/// Attempts per transaction before the phase gives up.
const TXN_ATTEMPTS_MAX: u32 = 100;

#[derive(Debug, Clone)]
pub struct Config {
    /// Batches per phase.
    pub batches: u64,
    pub keys_per_batch: usize,
    pub value_len: usize,
    /// Key space the random keys come from.
    pub key_space: u64,
    pub committers: usize,
    pub seed: u64,
}

/// How a batch is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Batch,
    Txn,
    /// A transaction committed without sync: the CPU ceiling.
    TxnNoSync,
}

pub fn run(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) -> BenchResult<()> {
    ctx.fresh()?;
    // The device's best sync rate: a 4 KiB write over a pre-written file
    // then fdatasync (data alone), which the engine's journal reaches by
    // pre-writing; the append rate, which also commits a new size, where
    // the overwrite probe did not run.
    let best = dev.fdatasync_per_sec.max(dev.fdatasync_overwrite_per_sec);
    let limit = Some(("fdatasync/s".to_owned(), best));
    let entry = (16 + cfg.value_len) as u64;
    let has_txn = ctx.db()?.begin().is_some();
    let most = cfg.committers.max(1);
    for committers in [1, most] {
        // The batch and transaction phases of one committer count run
        // back to back: the device's sync rate drifts over a run.
        let vias: &[Via] = if committers == most {
            &[Via::Batch, Via::Txn, Via::TxnNoSync]
        } else {
            &[Via::Batch, Via::Txn]
        };
        for &via in vias {
            let phase = format!(
                "{committers} committer{}{}",
                if committers == 1 { "" } else { "s" },
                match via {
                    Via::Batch => "",
                    Via::Txn => ", txn",
                    Via::TxnNoSync => ", txn, no sync",
                }
            );
            if via != Via::Batch && !has_txn {
                ctx.skip("synctx", &phase, "no transactions in this engine's adapter");
                continue;
            }
            ctx.phase("synctx", &phase, "ops/s", limit.clone(), |db, p| {
                let per = cfg.batches / committers as u64;
                let per_thread = parallel(committers, |t| {
                    let mut rng = Rng::new(cfg.seed + t as u64 * 7919 + committers as u64);
                    let mut lat = Vec::with_capacity(per as usize);
                    let mut conflicts = 0u64;
                    for _ in 0..per {
                        let ops: Vec<BatchOp> = (0..cfg.keys_per_batch)
                            .map(|_| {
                                let i = rng.below(cfg.key_space);
                                (make_key(i, 16), Some(make_value(i, 0, cfg.value_len)))
                            })
                            .collect();
                        let start = Instant::now();
                        match via {
                            Via::Batch => db.write_batch(&ops, true)?,
                            Via::Txn => conflicts += commit_txn(db.as_ref(), &ops, true)?,
                            Via::TxnNoSync => {
                                conflicts += commit_txn(db.as_ref(), &ops, false)?;
                            }
                        }
                        lat.push(start.elapsed().as_nanos() as u64);
                        p.add(1, cfg.keys_per_batch as u64 * entry);
                    }
                    Ok((lat, conflicts))
                })?;
                let ops = per * committers as u64;
                let bytes = ops * cfg.keys_per_batch as u64 * entry;
                let conflicts: u64 = per_thread.iter().map(|(_, c)| c).sum();
                Ok(Outcome {
                    ops,
                    user_bytes: bytes,
                    written_bytes: bytes,
                    latency_us: percentiles(per_thread.into_iter().flat_map(|(l, _)| l).collect()),
                    note: match via {
                        Via::Batch => None,
                        Via::Txn => Some(format!("{conflicts} conflicts (retried)")),
                        Via::TxnNoSync => Some(format!(
                            "CPU ceiling (no fdatasync); {conflicts} conflicts (retried)"
                        )),
                    },
                    ..Outcome::default()
                })
            });
            if via == Via::Txn
                && let Some(row) = ctx.rows.last_mut()
            {
                row.target = if committers == 1 {
                    Some(TXN_TARGET_ONE)
                } else if committers == TXN_TARGET_MANY_COMMITTERS {
                    Some(TXN_TARGET_MANY)
                } else {
                    None
                };
            }
        }
    }
    Ok(())
}

/// Commits `ops` as one transaction (synced if `sync`), retrying from a
/// new begin after a conflict; returns the number of conflicts met.
fn commit_txn(db: &dyn Engine, ops: &[BatchOp], sync: bool) -> BenchResult<u64> {
    for attempt in 0..TXN_ATTEMPTS_MAX {
        let mut txn = db
            .begin()
            .ok_or("the engine stopped offering transactions")?;
        for (k, v) in ops {
            txn.put(k, v.as_deref().ok_or("synctx writes only puts")?)?;
        }
        if txn.commit(sync)? {
            return Ok(u64::from(attempt));
        }
    }
    Err(format!("a transaction met a conflict {TXN_ATTEMPTS_MAX} times in a row").into())
}
