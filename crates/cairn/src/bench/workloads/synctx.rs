//! `synctx`: atomic batches of 100 random keys with 100-byte values, each
//! synced on commit — from one committer, then from 8 at once; each as a
//! `WriteBatch` and as a transaction (begin, 100 puts, synced commit). The
//! device's fdatasync rate is the bar: one committer can at best match it,
//! concurrent committers beat it only if commits share syncs (group
//! commit). The transaction rows carry the project's targets
//! (`TXN_TARGET_ONE`, `TXN_TARGET_MANY`).
//!
//! Each batch and transaction phase runs once more with `sync: false`
//! ("…, no sync", "…, txn, no sync"): the same work without a single
//! fdatasync, so its rate is what the CPU allows. Where that is below a
//! target, no sync strategy can meet it on this machine; the batch rows
//! give it for every engine, peers without transactions too (a
//! transaction does at least a batch's work). One committer also runs
//! "1 committer, client alone": the bench making the same keys and values
//! and handing them to no engine, the part of each transaction no engine
//! can take away.
//!
//! Both bound the targets, and the transaction rows say by how much:
//! - no committer count gets past `C`, the rate of the same work without
//!   syncs;
//! - one committer makes its next transaction only after its commit's
//!   fdatasync, so with `C'` the client's own rate and `F` the device's
//!   fdatasync rate it reaches at most `1 / (1/C' + 1/F)`, in any engine.
//!   (An engine's own work may overlap the sync, so `1 / (1/C + 1/F)` is
//!   no bound: this engine inserts into its memtable meanwhile.)
//!
//! One more row, "device: fdatasync beside table writes", runs no engine:
//! the device's sync rate while another file takes the user bytes that
//! transactions at `TXN_TARGET_ONE` of the sync rate carry. A store that
//! keeps its data anywhere but its journal writes those bytes again, in
//! the background, once a load outlasts its memtables; on a disk where
//! such writes slow the syncs beside them (this VM's), that row bounds
//! the one-committer target for any such store, and the transaction row
//! says by how much.
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
/// The device row measured after the one-committer phases.
const DEVICE_BESIDE: &str = "device: fdatasync beside table writes";
/// Seconds of that measurement.
const BESIDE_SECS: f64 = 2.0;
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
    /// A batch written without sync: the CPU ceiling of plain batches.
    BatchNoSync,
    Txn,
    /// A transaction committed without sync: the CPU ceiling.
    TxnNoSync,
    /// The keys and values made and dropped, no engine called: the
    /// client's own share of each transaction.
    ClientAlone,
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
    let counts: &[usize] = if most == 1 { &[1] } else { &[1, most] };
    for &committers in counts {
        // The batch and transaction phases of one committer count run
        // back to back: the device's sync rate drifts over a run.
        let vias: &[Via] = if committers == 1 {
            &[
                Via::Batch,
                Via::BatchNoSync,
                Via::Txn,
                Via::TxnNoSync,
                Via::ClientAlone,
            ]
        } else {
            &[Via::Batch, Via::BatchNoSync, Via::Txn, Via::TxnNoSync]
        };
        for &via in vias {
            let phase = format!(
                "{committers} committer{}{}",
                if committers == 1 { "" } else { "s" },
                match via {
                    Via::Batch => "",
                    Via::BatchNoSync => ", no sync",
                    Via::Txn => ", txn",
                    Via::TxnNoSync => ", txn, no sync",
                    Via::ClientAlone => ", client alone",
                }
            );
            if matches!(via, Via::Txn | Via::TxnNoSync) && !has_txn {
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
                            Via::BatchNoSync => db.write_batch(&ops, false)?,
                            Via::Txn => conflicts += commit_txn(db.as_ref(), &ops, true)?,
                            Via::TxnNoSync => {
                                conflicts += commit_txn(db.as_ref(), &ops, false)?;
                            }
                            Via::ClientAlone => drop(std::hint::black_box(ops)),
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
                        Via::BatchNoSync => {
                            Some("CPU ceiling of batches (no fdatasync)".to_owned())
                        }
                        Via::Txn => Some(format!("{conflicts} conflicts (retried)")),
                        Via::TxnNoSync => Some(format!(
                            "CPU ceiling (no fdatasync); {conflicts} conflicts (retried)"
                        )),
                        Via::ClientAlone => Some(
                            "the bench's own work per transaction (keys and values made, \
                             no engine called)"
                                .to_owned(),
                        ),
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
        if committers == 1 && best > 0.0 {
            device_beside(ctx, cfg, best, entry, &limit);
        }
    }
    note_bounds(ctx, best);
    Ok(())
}

/// Measures the device's sync rate while another file takes the user
/// bytes of transactions at `TXN_TARGET_ONE` of the sync rate: the table
/// writes any store that keeps its data in more than its journal makes
/// beside its commits, once the load lasts longer than its memory holds.
fn device_beside(
    ctx: &mut Ctx,
    cfg: &Config,
    fdatasync: f64,
    entry: u64,
    limit: &Option<(String, f64)>,
) {
    let beside = TXN_TARGET_ONE * fdatasync * (cfg.keys_per_batch as u64 * entry) as f64;
    match crate::bench::device::sync_rate_beside(&ctx.root, beside, BESIDE_SECS) {
        Ok((syncs, secs, reached)) => ctx.measured(
            "synctx",
            DEVICE_BESIDE,
            (syncs, secs),
            limit.clone(),
            format!(
                "no engine: 4 KiB overwrite + fdatasync while another file takes \
                 {:.1} MB/s in 1 MiB writes (asked {:.1}: the user bytes of \
                 transactions at {TXN_TARGET_ONE:.2} fdatasync/s)",
                reached / 1e6,
                beside / 1e6
            ),
        ),
        Err(e) => ctx.skip("synctx", DEVICE_BESIDE, &format!("probe failed: {e}")),
    }
}

/// Adds to each transaction row with a target the most its committers
/// could reach with this run's CPU figures (module comment): the
/// engine's no-sync rate and, for one committer, the client's own rate
/// plus one fdatasync each, which bounds any engine.
fn note_bounds(ctx: &mut Ctx, fdatasync: f64) {
    let rate = |ctx: &Ctx, phase: &str| {
        ctx.rows
            .iter()
            .rev()
            .find(|r| r.workload == "synctx" && r.phase == phase && r.failure.is_none())
            .filter(|r| r.skipped.is_none() && r.secs > 0.0)
            .map(|r| r.ops as f64 / r.secs)
    };
    let serial = |cpu: f64| {
        if fdatasync > 0.0 {
            1.0 / (1.0 / cpu + 1.0 / fdatasync)
        } else {
            cpu
        }
    };
    let ratio = |r: f64| {
        if fdatasync > 0.0 {
            format!(" ({:.2} fdatasync/s)", r / fdatasync)
        } else {
            String::new()
        }
    };
    let mut notes = Vec::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        if row.workload != "synctx" || row.target.is_none() || !row.phase.ends_with(", txn") {
            continue;
        }
        let Some(cpu) = rate(ctx, &format!("{}, no sync", row.phase)) else {
            continue;
        };
        let one = row.phase.starts_with("1 committer,");
        let mut note = format!("bound {cpu:.0} tx/s{} from its CPU ceiling", ratio(cpu));
        if one && let Some(client) = rate(ctx, "1 committer, client alone") {
            let most = serial(client);
            note.push_str(&format!(
                "; any engine: {most:.0} tx/s{} from the client's own work plus one fdatasync each",
                ratio(most)
            ));
            if let Some(loaded) = rate(ctx, DEVICE_BESIDE) {
                let most = 1.0 / (1.0 / client + 1.0 / loaded);
                note.push_str(&format!(
                    "; {most:.0} tx/s{} with its tables written beside (the device row)",
                    ratio(most)
                ));
            }
        }
        notes.push((i, note));
    }
    for (i, note) in notes {
        if let Some(row) = ctx.rows.get_mut(i) {
            row.add_note(note);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::EngineConfig;

    /// Every phase runs, in order, for batches and transactions, synced
    /// and not; the transaction rows carry the targets and the bounds
    /// taken from their no-sync rows.
    #[test]
    fn a_tiny_run_has_every_phase_and_bound() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut ctx = Ctx::new(
            "cairndb",
            EngineConfig::default(),
            root.path().join("s"),
            None,
            true,
        );
        let cfg = Config {
            batches: 40,
            keys_per_batch: 10,
            value_len: 100,
            key_space: 1000,
            committers: 8,
            seed: 5,
        };
        // No device figures: the device row is left out.
        run(&mut ctx, &cfg, &DeviceLimits::default()).expect("runs");
        let phases: Vec<&str> = ctx.rows.iter().map(|r| r.phase.as_str()).collect();
        assert_eq!(
            phases,
            [
                "1 committer",
                "1 committer, no sync",
                "1 committer, txn",
                "1 committer, txn, no sync",
                "1 committer, client alone",
                "8 committers",
                "8 committers, no sync",
                "8 committers, txn",
                "8 committers, txn, no sync",
            ]
        );
        for r in &ctx.rows {
            assert!(r.failure.is_none() && r.skipped.is_none(), "{r:?}");
            assert_eq!(r.ops, 40, "{r:?}");
        }
        assert_eq!(ctx.rows[2].target, Some(TXN_TARGET_ONE));
        assert_eq!(ctx.rows[7].target, Some(TXN_TARGET_MANY));
        for (i, says) in [
            (1, "CPU ceiling of batches"),
            (6, "CPU ceiling of batches"),
            (2, "from its CPU ceiling"),
            (7, "from its CPU ceiling"),
        ] {
            let row = &ctx.rows[i];
            assert!(
                row.note.as_deref().is_some_and(|n| n.contains(says)),
                "{row:?}"
            );
        }
    }
}
