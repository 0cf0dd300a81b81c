//! `txn-scaling`: optimistic transactions at thread counts far above the
//! core count, over a preloaded key set (16-byte keys, 100-byte values).
//!
//! Phases, in order:
//! 1. `read-only xT` for each thread count T (1, 2, 4, ... 64): begin, get
//!    of a random existing key (verified), commit. The largest T is
//!    compared with T = the core count (2 on the project's VM): past the
//!    cores, more threads must not cost throughput; begin pins a snapshot
//!    and a shared lock there would show up here first. Target:
//!    `READ_ONLY_SCALING_TARGET`.
//! 2. `put, no txn` and `put, txn open`: plain unsynced puts from one
//!    thread, without and with a read-only transaction held open by
//!    another thread (so the snapshot registry is not empty), measured in
//!    alternating slices (`put_pair`). Target: `PUT_WITH_TXN_TARGET`.
//! 3. `read-write xT` for each T: begin, get of a random existing key,
//!    put of the same key with the version read plus one, commit unsynced.
//!    Keys are drawn from the whole key set, so conflicts are rare; a
//!    conflicting commit is counted (the row's note) and not retried.
//!    Afterwards the versions of all keys must add up to the number of
//!    committed transactions: a lost update (two commits of the same key
//!    from one snapshot) fails the last row.
//!
//! How the sweeps are timed, for ratios that hold on a shared 2-core VM:
//! every point runs for a time, not a count, so no thread runs alone at
//! the end; the time is cut into `Config::rounds` slices that cycle
//! through the thread counts, and a row's rate is its median slice's, so
//! a burst of load from another process moves one slice of each point,
//! not one whole point.
//!
//! Engines whose adapter has no transactions (`Engine::begin` is `None`)
//! get one SKIP row.

use super::{Ctx, Outcome, Rng, check_value, key_index, make_key, make_value, parallel_for};
use crate::bench::engine::{self, Engine, EngineConfig, Txn};
use crate::bench::{BenchResult, Progress, Row};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Throughput at the largest thread count over throughput at the core
/// count, read-only: the project's bar (issue 7).
pub const READ_ONLY_SCALING_TARGET: f64 = 0.90;
/// Plain puts with a transaction open over plain puts without: within 5 %.
pub const PUT_WITH_TXN_TARGET: f64 = 0.95;

const WORKLOAD: &str = "txn-scaling";
const KEY_LEN: usize = 16;
/// Progress is published every this many operations per thread.
const TICK: u64 = 64;
/// Keys per batch while preloading.
const LOAD_BATCH: u64 = 1000;

#[derive(Debug, Clone)]
pub struct Config {
    /// Keys preloaded; transactions read (and write) these.
    pub keys: u64,
    pub value_len: usize,
    /// Thread counts, each a read-only and a read-write point.
    pub threads: Vec<usize>,
    /// Time per point, all rounds together.
    pub secs: f64,
    /// Slices each point is measured in, cycling through the points (and
    /// through the two put phases), so that drift on a shared machine
    /// spreads over all of them.
    pub rounds: usize,
    /// Puts in each of the two plain-put phases.
    pub puts: u64,
    pub seed: u64,
}

/// What one kind of transaction does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// begin, get, commit.
    ReadOnly,
    /// begin, get, put of the same key, commit (unsynced).
    ReadWrite,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ReadOnly => "read-only",
            Kind::ReadWrite => "read-write",
        }
    }
}

pub fn run(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    ctx.fresh()?;
    let db = ctx.db()?;
    if db.begin().is_none() {
        ctx.skip(
            WORKLOAD,
            "all phases",
            "no transactions in this engine's adapter",
        );
        return Ok(());
    }
    load(db.as_ref(), cfg.keys, cfg.value_len)?;
    db.flush()?;
    drop(db);

    sweep(ctx, cfg, Kind::ReadOnly);
    put_pair(ctx, cfg)?;
    // A failed slice loses its count of commits: nothing to check then.
    if let Some(committed) = sweep(ctx, cfg, Kind::ReadWrite)
        && let Err(e) = check_versions(ctx.db()?.as_ref(), cfg.keys, committed)
        && let Some(row) = ctx.rows.last_mut()
    {
        row.failure = Some(e.to_string());
    }
    Ok(())
}

/// Writes keys `0..keys`, version 0, in batches.
fn load(db: &dyn Engine, keys: u64, value_len: usize) -> BenchResult<()> {
    let mut next = 0;
    while next < keys {
        let end = (next + LOAD_BATCH).min(keys);
        let ops: Vec<_> = (next..end)
            .map(|i| (make_key(i, KEY_LEN), Some(make_value(i, 0, value_len))))
            .collect();
        db.write_batch(&ops, false)?;
        next = end;
    }
    Ok(())
}

/// The thread count the largest one is compared with: the largest count
/// that does not exceed the cores (one thread per core).
fn base_threads(threads: &[usize]) -> Option<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    threads
        .iter()
        .copied()
        .filter(|&t| t <= cores)
        .max()
        .or_else(|| threads.iter().copied().min())
}

/// One row per thread count, each measured in `cfg.rounds` slices that
/// cycle through the thread counts; a row's rate is its median slice's.
/// Returns the transactions committed in all, or `None` if a slice failed.
fn sweep(ctx: &mut Ctx, cfg: &Config, kind: Kind) -> Option<u64> {
    let first = ctx.rows.len();
    let rounds = cfg.rounds.max(1);
    let slice = cfg.secs / rounds as f64;
    let entry = (KEY_LEN + cfg.value_len) as u64;
    // (committed, conflicts, slice rates) per thread count.
    let mut counts = vec![(0u64, 0u64, Vec::new()); cfg.threads.len()];
    for round in 0..rounds {
        for (&t, count) in cfg.threads.iter().zip(counts.iter_mut()) {
            ctx.phase(
                WORKLOAD,
                &format!("{} x{t}", kind.name()),
                "ops/s",
                None,
                |db, p| {
                    let seed = cfg.seed ^ (round as u64).rotate_left(48);
                    let start = Instant::now();
                    let (o, c) = txn_loop(db, p, cfg, kind, t, slice, seed)?;
                    count.0 += o;
                    count.1 += c;
                    count
                        .2
                        .push(o as f64 / start.elapsed().as_secs_f64().max(1e-9));
                    Ok(Outcome {
                        ops: o,
                        user_bytes: o * entry,
                        written_bytes: if kind == Kind::ReadWrite {
                            o * entry
                        } else {
                            0
                        },
                        ..Outcome::default()
                    })
                },
            );
        }
    }
    ctx.merge_since(first);

    let rows = &mut ctx.rows[first..];
    for (row, (_, _, rates)) in rows.iter_mut().zip(counts.iter_mut()) {
        rates.sort_by(f64::total_cmp);
        if let Some(&median) = rates.get(rates.len() / 2) {
            row.secs = row.ops as f64 / median.max(1e-9);
        }
    }
    let base = base_threads(&cfg.threads)
        .and_then(|b| cfg.threads.iter().position(|&t| t == b))
        .filter(|&i| rows.get(i).is_some_and(|r| r.failure.is_none()))
        .map(|i| (cfg.threads[i], rows[i].rate()));
    let top = (0..cfg.threads.len()).max_by_key(|&i| cfg.threads[i]);
    for (i, row) in rows.iter_mut().enumerate() {
        if kind == Kind::ReadWrite {
            let (o, c) = counts.get(i).map_or((0, 0), |(o, c, _)| (*o, *c));
            row.note = Some(conflicts_note(c, o + c));
        }
        if let (Some((b, rate)), Some(top)) = (base, top)
            && i == top
            && cfg.threads[i] != b
        {
            row.limit = Some((format!("{} x{b}", kind.name()), rate));
            if kind == Kind::ReadOnly {
                row.target = Some(READ_ONLY_SCALING_TARGET);
            }
        }
    }
    let failed = rows.iter().any(|r| r.failure.is_some());
    (!failed).then(|| counts.iter().map(|(o, _, _)| o).sum())
}

fn conflicts_note(conflicts: u64, attempts: u64) -> String {
    format!(
        "{conflicts} conflicts ({:.3} %)",
        100.0 * conflicts as f64 / attempts.max(1) as f64
    )
}

/// Runs `kind` transactions on `threads` threads for `secs`; returns
/// (committed, conflicts).
fn txn_loop(
    db: &Arc<dyn Engine>,
    p: &Progress,
    cfg: &Config,
    kind: Kind,
    threads: usize,
    secs: f64,
    seed: u64,
) -> BenchResult<(u64, u64)> {
    let entry = (KEY_LEN + cfg.value_len) as u64;
    let per_thread = parallel_for(
        threads,
        Duration::from_secs_f64(secs),
        |t, stop: &AtomicBool| {
            let mut rng = Rng::new(seed ^ ((threads as u64) << 32) ^ (t as u64 * 7919));
            let (mut done, mut conflicts, mut tick) = (0u64, 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                if one_txn(db.as_ref(), &mut rng, cfg, kind)? {
                    done += 1;
                } else {
                    conflicts += 1;
                }
                tick += 1;
                if tick == TICK {
                    p.add(tick, tick * entry);
                    tick = 0;
                }
            }
            p.add(tick, tick * entry);
            Ok((done, conflicts))
        },
    )?;
    Ok(per_thread
        .into_iter()
        .fold((0, 0), |(a, b), (x, y)| (a + x, b + y)))
}

/// One transaction; `Ok(false)` if its commit met a conflict.
fn one_txn(db: &dyn Engine, rng: &mut Rng, cfg: &Config, kind: Kind) -> BenchResult<bool> {
    let i = rng.below(cfg.keys);
    let key = make_key(i, KEY_LEN);
    let mut txn = db
        .begin()
        .ok_or("the engine stopped offering transactions")?;
    let value = txn
        .get(&key)?
        .ok_or_else(|| format!("key {i} is missing"))?;
    check_value(i, &value)?;
    if kind == Kind::ReadWrite {
        txn.put(&key, &make_value(i, version(&value) + 1, cfg.value_len))?;
    }
    txn.commit(false)
}

/// The version `make_value` wrote into a value (checked before).
fn version(value: &[u8]) -> u32 {
    value
        .get(8..12)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Every committed read-write transaction added one to one key's version,
/// so the versions add up to the commits unless an update was lost.
fn check_versions(db: &dyn Engine, keys: u64, committed: u64) -> BenchResult<()> {
    let (mut sum, mut seen, mut bad) = (0u64, 0u64, None);
    db.scan(
        &make_key(0, KEY_LEN),
        keys as usize,
        &mut |k, v| match key_index(k).map(|i| (i, check_value(i, v))) {
            Some((i, Ok(()))) if i < keys => {
                sum += u64::from(version(v));
                seen += 1;
                true
            }
            Some((_, Err(e))) => {
                bad = Some(e);
                false
            }
            _ => true,
        },
    )?;
    if let Some(e) = bad {
        return Err(e.into());
    }
    if seen != keys {
        return Err(format!("after the read-write phases {seen} of {keys} keys are left").into());
    }
    if sum != committed {
        return Err(format!(
            "versions add up to {sum} but {committed} read-write transactions committed \
             (lost or phantom updates)"
        )
        .into());
    }
    Ok(())
}

/// Puts per slice of the put pair: small enough (tens of milliseconds)
/// that load from other processes falls on both phases alike.
const PUT_SLICE: u64 = 5_000;
/// The put pair flushes the memtable (untimed) every this many slice
/// pairs, an even number so that it falls between ABBA groups: a memtable
/// switch inside a slice costs tens of milliseconds, and the same slice
/// would get it in every run.
const PUT_FLUSH_EVERY: u64 = 8;

/// The two plain-put phases, measured together: slices of `PUT_SLICE`
/// puts alternate between "no transaction open" and "a transaction held
/// open by another thread" (ABBA order), timed separately and reported as
/// two rows; the second is compared with the first. A transaction is held
/// only during its own slices. The memtable is flushed between slices
/// (`PUT_FLUSH_EVERY`), and an untimed slice runs first and after each
/// flush, so that one-off costs (a memtable switch, a fresh memtable's
/// first pages) do not land on one side.
fn put_pair(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    const PLAIN: &str = "put, no txn";
    const HELD: &str = "put, txn open";
    ctx.db()?.flush()?;
    let entry = (KEY_LEN + cfg.value_len) as u64;
    // Puts, and seconds per put of each slice, without and with a
    // transaction open.
    let mut split: [(u64, Vec<f64>); 2] = Default::default();
    // Untimed puts (after the start and after each flush).
    let mut warm = 0;
    let combined = ctx
        .phase(WORKLOAD, "put, alternating", "ops/s", None, |db, p| {
            let mut rng = Rng::new(cfg.seed.wrapping_mul(31));
            let slices = cfg.puts.div_ceil(PUT_SLICE);
            with_holder(db.as_ref(), |hold| {
                let mut warm_up = |rng: &mut Rng| -> BenchResult<()> {
                    puts(db.as_ref(), p, cfg, PUT_SLICE.min(cfg.puts), rng)?;
                    warm += PUT_SLICE.min(cfg.puts);
                    Ok(())
                };
                warm_up(&mut rng)?;
                for slice in 0..slices {
                    if slice > 0 && slice % PUT_FLUSH_EVERY == 0 {
                        db.flush()?;
                        warm_up(&mut rng)?;
                    }
                    let n = PUT_SLICE.min(cfg.puts - slice * PUT_SLICE);
                    let order = if slice % 2 == 0 { [0, 1] } else { [1, 0] };
                    for held in order {
                        // The same round trips to the holder around every
                        // slice (for "no txn" they do nothing), so that
                        // both sides pay for them alike.
                        hold(held == 1)?;
                        let start = Instant::now();
                        puts(db.as_ref(), p, cfg, n, &mut rng)?;
                        split[held].0 += n;
                        split[held].1.push(start.elapsed().as_secs_f64() / n as f64);
                        hold(false)?;
                    }
                }
                Ok(())
            })?;
            let ops = split[0].0 + split[1].0 + warm;
            Ok(Outcome {
                ops,
                user_bytes: ops * entry,
                written_bytes: ops * entry,
                ..Outcome::default()
            })
        })
        .clone();
    ctx.rows.pop();
    for (name, (ops, mut per_put)) in [PLAIN, HELD].into_iter().zip(split) {
        per_put.sort_by(f64::total_cmp);
        let median = per_put.get(per_put.len() / 2).copied().unwrap_or(0.0);
        ctx.rows.push(Row {
            phase: name.to_owned(),
            ops,
            secs: ops as f64 * median,
            user_bytes: ops * entry,
            ..combined.clone()
        });
    }
    let n = ctx.rows.len();
    let base = &ctx.rows[n - 2];
    let limit = (base.failure.is_none() && base.ops > 0).then(|| (PLAIN.to_owned(), base.rate()));
    let held = &mut ctx.rows[n - 1];
    held.limit = limit;
    held.target = Some(PUT_WITH_TXN_TARGET);
    Ok(())
}

/// Runs `f` with a function that makes another thread open (`true`: begin
/// and read one key) or commit (`false`) a read-only transaction, and
/// returns once it has.
fn with_holder(
    db: &dyn Engine,
    f: impl FnOnce(&mut dyn FnMut(bool) -> BenchResult<()>) -> BenchResult<()>,
) -> BenchResult<()> {
    std::thread::scope(|s| {
        let (order, orders) = std::sync::mpsc::channel::<bool>();
        let (done, dones) = std::sync::mpsc::channel::<BenchResult<()>>();
        let holder = s.spawn(move || {
            let mut txn: Option<Box<dyn Txn + '_>> = None;
            for open in orders {
                let r = if open {
                    db.begin()
                        .ok_or_else(|| "no transactions".into())
                        .and_then(|mut t| {
                            t.get(&make_key(0, KEY_LEN))?;
                            txn = Some(t);
                            Ok(())
                        })
                } else {
                    txn.take().map_or(Ok(()), |t| t.commit(false).map(drop))
                };
                if done.send(r).is_err() {
                    break;
                }
            }
        });
        let mut hold = |open: bool| -> BenchResult<()> {
            order
                .send(open)
                .map_err(|_| "the transaction holder quit")?;
            dones.recv().map_err(|_| "the transaction holder quit")?
        };
        let result = f(&mut hold);
        drop(order);
        holder
            .join()
            .map_err(|_| "the transaction holder panicked")?;
        result
    })
}

/// `n` unsynced puts of fresh random keys (above the loaded set) from
/// this thread.
fn puts(db: &dyn Engine, p: &Progress, cfg: &Config, n: u64, rng: &mut Rng) -> BenchResult<()> {
    let entry = (KEY_LEN + cfg.value_len) as u64;
    let mut tick = 0;
    for _ in 0..n {
        let i = cfg.keys + rng.below(1 << 40);
        db.put(&make_key(i, KEY_LEN), &make_value(i, 0, cfg.value_len))?;
        tick += 1;
        if tick == TICK {
            p.add(tick, tick * entry);
            tick = 0;
        }
    }
    p.add(tick, tick * entry);
    Ok(())
}

/// `cairn txn-probe`: one txn-scaling point alone, for a profiler.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Threads running transactions.
    #[arg(long, default_value_t = 64)]
    pub threads: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub secs: f64,
    /// Keys preloaded (16-byte keys, 100-byte values).
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Read-write transactions instead of read-only ones.
    #[arg(long)]
    pub read_write: bool,
    /// Parent of the scratch database (removed afterwards).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

/// Preloads a scratch CairnDB database, prints "loaded" (attach a
/// profiler then), runs one point and prints its rate.
pub fn probe(args: &ProbeArgs) -> BenchResult<()> {
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = parent.join(format!("cairn-txn-probe-{}", std::process::id()));
    let result = (|| {
        let db: Arc<dyn Engine> =
            Arc::from(engine::open("cairndb", &dir, &EngineConfig::default())?);
        let cfg = Config {
            keys: args.keys.max(1),
            value_len: 100,
            threads: vec![args.threads],
            secs: args.secs,
            rounds: 1,
            puts: 0,
            seed: 1,
        };
        load(db.as_ref(), cfg.keys, cfg.value_len)?;
        db.flush()?;
        let kind = if args.read_write {
            Kind::ReadWrite
        } else {
            Kind::ReadOnly
        };
        println!("loaded {} keys; pid {}", cfg.keys, std::process::id());
        let start = Instant::now();
        let (done, conflicts) = txn_loop(
            &db,
            &Progress::default(),
            &cfg,
            kind,
            args.threads,
            args.secs,
            cfg.seed,
        )?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{} x{}: {:.0} txn/s ({done} in {secs:.2} s, {conflicts} conflicts)",
            kind.name(),
            args.threads,
            done as f64 / secs
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engine::EngineConfig;

    #[test]
    fn a_tiny_run_verifies_and_scores_its_rows() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut ctx = Ctx::new(
            "cairndb",
            EngineConfig::default(),
            root.path().join("t"),
            None,
            true,
        );
        // The top count exceeds the cores, so it is compared with a lower one.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let top = cores.max(2) + 1;
        let cfg = Config {
            keys: 500,
            value_len: 100,
            threads: vec![1, 2, top],
            secs: 0.1,
            rounds: 2,
            puts: 500,
            seed: 3,
        };
        run(&mut ctx, &cfg).expect("runs");
        let phases: Vec<&str> = ctx.rows.iter().map(|r| r.phase.as_str()).collect();
        let expected = [
            "read-only x1".to_owned(),
            "read-only x2".to_owned(),
            format!("read-only x{top}"),
            "put, no txn".to_owned(),
            "put, txn open".to_owned(),
            "read-write x1".to_owned(),
            "read-write x2".to_owned(),
            format!("read-write x{top}"),
        ];
        assert_eq!(phases, expected);
        for r in &ctx.rows {
            assert!(r.failure.is_none(), "{r:?}");
            assert!(r.ops > 0, "{r:?}");
        }
        let top = &ctx.rows[2];
        assert_eq!(top.target, Some(READ_ONLY_SCALING_TARGET));
        assert!(
            top.limit
                .as_ref()
                .is_some_and(|(n, _)| n.starts_with("read-only x"))
        );
        assert_eq!(ctx.rows[4].target, Some(PUT_WITH_TXN_TARGET));
        assert!(ctx.rows[4].ratio().is_some());
        assert!(ctx.rows[7].target.is_none() && ctx.rows[7].ratio().is_some());
        assert!(
            ctx.rows[5]
                .note
                .as_deref()
                .is_some_and(|n| n.contains("conflicts"))
        );
    }

    #[test]
    fn lost_updates_are_caught() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = engine::open("cairndb", dir.path(), &EngineConfig::default()).expect("open");
        load(db.as_ref(), 10, 100).expect("load");
        assert!(check_versions(db.as_ref(), 10, 0).is_ok());
        db.put(&make_key(3, KEY_LEN), &make_value(3, 2, 100))
            .expect("put");
        assert!(check_versions(db.as_ref(), 10, 2).is_ok());
        assert!(check_versions(db.as_ref(), 10, 3).is_err());
        assert!(check_versions(db.as_ref(), 11, 2).is_err());
    }
}
