//! Crash-state enumeration: power is cut at every IO operation of seeded
//! workloads on the simulated storage (`MemFs`), with several damage
//! variants each, and every resulting image is recovered and checked
//! against an oracle of what was acknowledged.
//!
//! A workload is a plan of steps fixed by its seed: write batches (mixed
//! sync, some large values), flushes, compactions, settling steps
//! (`Db::settle_now`, the steps idle settling takes), reopens (each reopen
//! writes a fresh manifest). Before every mutating IO operation the
//! file system's hook takes crash images of the device as it is at that
//! moment: `Clean` (only synced data), `All` (everything pending) and
//! several `Torn` variants (pending pages kept, lost or damaged per
//! sector, a prefix of pending renames/creates/removes). Each image is
//! opened and checked:
//! - it opens (a power cut must never leave a database that fails to open);
//! - batches are all-or-nothing (each batch writes keys no other batch
//!   touches, so its presence is visible), present batches form a prefix
//!   of the issued ones (no holes), and that prefix covers every batch
//!   acknowledged as durable (a synced write, or any write before a
//!   completed flush or close);
//! - the whole content equals the model after that prefix (nothing
//!   never-written, no resurrected deletes, no stale versions).
//!
//! Recovery itself is also cut: some images are opened with a second crash
//! at a random IO operation of recovery, or with an injected `EIO`, and the
//! result must pass the same checks. Another share gets a bit flipped at
//! rest in a synced file: then `Error::Corruption` is also acceptable, but
//! never wrong data.
//!
//! `cargo test` explores at least 50,000 states. More:
//! `CAIRNDB_CRASH_SEEDS=2000 cargo test --release -p cairndb --test crash_states -- --nocapture`
//! (`CAIRNDB_CRASH_SEED0` picks the first seed). The sabotage tests run the
//! same checkers on deliberately broken engines and require each to fail.

use cairndb::io::{Crash, Fault, FaultKind, Fs, MemFs, OpInfo, OpKind};
use cairndb::{Db, Error, Sabotage, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

mod common;

use common::env_u64;
use common::plan::{
    KEYSPACES, Plan, Step, dir, drop_and_remake, first_difference, get, hot_key, mkey, model_of,
    open_keyspaces, options, plan, present_batches, read_all,
};

/// What the workload had acknowledged when an image was taken.
#[derive(Clone, Copy, Debug)]
struct Acked {
    /// Batches acknowledged (they were issued in plan order).
    acked: usize,
    /// Batches that must survive a power cut: up to the last synced one,
    /// or all acknowledged before a completed flush or close.
    durable: usize,
}

/// How an image was made.
#[derive(Clone, Copy, Debug)]
enum Variant {
    Clean,
    All,
    Torn(u64),
}

#[derive(Clone, Copy, Debug)]
enum Extra {
    None,
    /// Cut power again at this IO operation of recovery, then recover.
    CrashInRecovery(u64),
    /// Fail this IO operation of recovery with EIO, then retry the open.
    EioInRecovery(u64),
    /// Flip a bit at rest in a synced file (Corruption is then allowed).
    BitRot(u64),
}

struct State {
    fs: MemFs,
    at: Acked,
    op: u64,
    variant: Variant,
    extra: Extra,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    OpenFailed,
    PartialBatch,
    Hole,
    LostDurable,
    WrongData,
    Panic,
}

struct Violation {
    kind: Kind,
    detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.detail)
    }
}

/// The checks on one recovered database.
fn check_db(db: &Db, plan: &Plan, at: Acked) -> Result<(), (Kind, String)> {
    let got = read_all(db).map_err(|e| (Kind::OpenFailed, format!("scan failed: {e}")))?;
    let issued = at.acked + 1;
    let present = present_batches(plan, &got).map_err(|d| (Kind::PartialBatch, d))?;
    if let Some(b) = present.iter().find(|&&b| b >= issued) {
        return Err((Kind::WrongData, format!("batch {b} was never issued")));
    }
    // The writes (drops have no keys of their own) present must be the
    // first ones. A drop does not sync the journal, so unsynced writes
    // before it may be lost while it survives: every drop before the last
    // write present is there (that write was issued after the drop was
    // durable), and of the drops after it, any first few.
    let writes: Vec<usize> = (0..plan.batches.len())
        .filter(|&b| plan.batches[b].drop.is_none())
        .collect();
    if present.iter().zip(&writes).any(|(p, w)| p != w) {
        return Err((Kind::Hole, format!("present batches {present:?}")));
    }
    let upto = present.last().map_or(0, |&b| b + 1);
    let drops_after: Vec<usize> = (upto..issued.min(plan.batches.len()))
        .filter(|&b| plan.batches[b].drop.is_some())
        .collect();
    // The most batches that match (a drop of an empty keyspace changes
    // nothing), which must hold every durable one.
    let mut mismatch = None;
    for k in (0..=drops_after.len()).rev() {
        let mut which: Vec<usize> = (0..upto)
            .filter(|&b| plan.batches[b].drop.is_some())
            .chain(present.iter().copied())
            .chain(drops_after[..k].iter().copied())
            .collect();
        which.sort_unstable();
        let want = model_of(plan, &which);
        if got != want {
            mismatch.get_or_insert((which.len(), first_difference(&want, &got)));
            continue;
        }
        if let Some(lost) = (0..at.durable).find(|b| !which.contains(b)) {
            return Err((
                Kind::LostDurable,
                format!("batch {lost} lost; {} were durable", at.durable),
            ));
        }
        mismatch = None;
        break;
    }
    if let Some((j, d)) = mismatch {
        return Err((Kind::WrongData, format!("after {j} batches, {d}")));
    }
    for k in (0..48).map(hot_key) {
        for slot in 0..=KEYSPACES.len() as u8 {
            let k = mkey(slot, &k);
            let g = get(db, &k).map_err(|e| (Kind::WrongData, format!("get: {e}")))?;
            if g.as_ref() != got.get(&k) {
                return Err((Kind::WrongData, format!("get {k:?} disagrees with scan")));
            }
        }
    }
    Ok(())
}

fn is_corruption(e: &Error) -> bool {
    e.is_corruption()
}

/// Opens a crash image (applying its extra fault) and checks it.
fn check_state(plan: &Plan, sabotage: Sabotage, state: &State) -> Result<(), Violation> {
    let viol = |kind, detail: String| Violation {
        kind,
        detail: format!(
            "seed {} op {} {:?} {:?} (acked {}, durable {}): {detail}",
            plan.seed, state.op, state.variant, state.extra, state.at.acked, state.at.durable
        ),
    };
    let fs = state.fs.clone();
    let mut rot = Rot::None;
    match state.extra {
        Extra::None => {}
        Extra::BitRot(r) => {
            rot = Rot::Table;
            let mut rng = StdRng::seed_from_u64(r);
            let names = fs.list(dir()).unwrap_or_default();
            let files: Vec<_> = names
                .iter()
                .filter(|n| fs.file_len(&dir().join(n)).unwrap_or(0) > 0)
                .collect();
            if !files.is_empty() {
                let path = dir().join(files[rng.random_range(0..files.len())]);
                let len = fs.file_len(&path).unwrap_or(1) as usize;
                let at = rng.random_range(0..len);
                let bit = rng.random_range(0..8);
                fs.mutate_byte(&path, at, |b| b ^ (1 << bit));
                if path
                    .extension()
                    .is_some_and(|e| e == "journal" || e == "stream")
                {
                    rot = Rot::Journal;
                }
            }
        }
        Extra::CrashInRecovery(k) => {
            // Recover with power cut again at recovery's k-th operation:
            // check the image of that second crash instead.
            let nested: Arc<Mutex<Option<MemFs>>> = Arc::new(Mutex::new(None));
            let (n2, fs2) = (nested.clone(), fs.clone());
            let start = fs.op_count();
            fs.set_hook(Some(Arc::new(move |op: &OpInfo| {
                if op.index == start + k && op.op.is_mutation() {
                    *n2.lock().expect("lock") = Some(fs2.crash_image(Crash::Torn, k));
                }
            })));
            let first = Db::open(dir(), options(plan, &fs, sabotage));
            fs.set_hook(None);
            drop(first);
            if let Some(image) = nested.lock().expect("lock").take() {
                return check_open(plan, sabotage, &image, state.at, Rot::None)
                    .map_err(|(k, d)| viol(k, format!("after a crash in recovery: {d}")));
            }
        }
        Extra::EioInRecovery(k) => {
            fs.inject(Fault {
                nth: k,
                ..Fault::once(OpKind::Any, FaultKind::Eio)
            });
            let first = Db::open(dir(), options(plan, &fs, sabotage));
            fs.clear_faults();
            match first {
                Ok(db) => {
                    let r = check_db(&db, plan, state.at);
                    drop(db);
                    r.map_err(|(k, d)| viol(k, d))?;
                }
                Err(Error::Io { .. }) => {}
                Err(e) => {
                    return Err(viol(
                        Kind::OpenFailed,
                        format!("injected EIO gave a non-IO error: {e}"),
                    ));
                }
            }
        }
    }
    check_open(plan, sabotage, &fs, state.at, rot).map_err(|(k, d)| viol(k, d))
}

/// Bit rot added to a crash image, and what it excuses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rot {
    None,
    /// A flip in a table, manifest or CURRENT: `Corruption` is allowed.
    Table,
    /// A flip in a journal or a value stream: `Corruption` is allowed,
    /// and so is losing durable batches as a suffix — a damaged last
    /// synced record (or its value in a stream) that no later record
    /// vouches for reads as a torn tail (docs/durability.md).
    Journal,
}

/// Opens `fs`, checks it, and for a clean result writes once more and
/// reopens, so a recovered database is shown to be usable.
fn check_open(
    plan: &Plan,
    sabotage: Sabotage,
    fs: &MemFs,
    at: Acked,
    rot: Rot,
) -> Result<(), (Kind, String)> {
    let db = match Db::open(dir(), options(plan, fs, sabotage)) {
        Ok(db) => db,
        Err(e) if rot != Rot::None && is_corruption(&e) => return Ok(()),
        Err(e) => return Err((Kind::OpenFailed, e.to_string())),
    };
    match check_db(&db, plan, at) {
        Ok(()) => Ok(()),
        Err((Kind::OpenFailed, d)) if rot != Rot::None && d.contains("orrupt") => Ok(()),
        Err((Kind::LostDurable, _)) if rot == Rot::Journal => Ok(()),
        Err(e) => Err(e),
    }
}

#[derive(Default)]
struct Totals {
    states: AtomicUsize,
    workload_ops: AtomicUsize,
    nested: AtomicUsize,
    eio: AtomicUsize,
    rot: AtomicUsize,
    /// Settling steps the workloads ran (each under power cuts).
    settle_steps: AtomicUsize,
}

/// Runs one plan on a fresh `MemFs`, taking crash images before every
/// mutating IO operation, and checks them on `checkers` threads. Returns
/// the violations found (at most a few per kind).
fn explore(plan: &Plan, sabotage: Sabotage, torn_variants: u64, totals: &Totals) -> Vec<Violation> {
    let fs = MemFs::with_seed(plan.seed);
    let acked = Arc::new(AtomicUsize::new(0));
    let durable = Arc::new(AtomicUsize::new(0));
    let (tx, rx): (SyncSender<State>, Receiver<State>) = sync_channel(64);
    let rx = Mutex::new(rx);
    let violations: Mutex<Vec<Violation>> = Mutex::new(Vec::new());
    let hook_tx = Mutex::new(tx.clone());
    let hook_fs = fs.clone();
    let (a2, d2) = (acked.clone(), durable.clone());
    let seed = plan.seed;
    // One hook at a time: every mutation passes through the hook before it
    // takes effect, so while one hook reads the counters and takes its
    // images, no other operation can start (at most one that already
    // passed its hook is landing, which the oracle allows for).
    let serial = Mutex::new(());
    let hook = move |op: &OpInfo| {
        if !op.op.is_mutation() {
            return;
        }
        let _one_at_a_time = serial.lock().expect("lock");
        let at = Acked {
            acked: a2.load(Ordering::SeqCst),
            durable: d2.load(Ordering::SeqCst),
        };
        let mut variants = vec![Variant::Clean, Variant::All];
        variants.extend((0..torn_variants).map(|t| Variant::Torn(op.index * 16 + t)));
        let tx = hook_tx.lock().expect("lock").clone();
        for (i, variant) in variants.into_iter().enumerate() {
            let image = match variant {
                Variant::Clean => hook_fs.crash_image(Crash::Clean, 0),
                Variant::All => hook_fs.crash_image(Crash::All, 0),
                Variant::Torn(s) => hook_fs.crash_image(Crash::Torn, s ^ seed),
            };
            let r = op.index.wrapping_mul(31).wrapping_add(i as u64 * 7 + seed);
            let extra = match (r % 16, variant) {
                (0, Variant::Torn(_)) => Extra::CrashInRecovery(r % 40),
                (1, Variant::Torn(_)) => Extra::EioInRecovery(r % 40),
                (2, Variant::Clean) => Extra::BitRot(r),
                _ => Extra::None,
            };
            let _ = tx.send(State {
                fs: image,
                at,
                op: op.index,
                variant,
                extra,
            });
        }
    };
    fs.set_hook(Some(Arc::new(hook)));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let next = rx.lock().expect("lock").recv();
                    let Ok(state) = next else { break };
                    totals.states.fetch_add(1, Ordering::Relaxed);
                    match state.extra {
                        Extra::CrashInRecovery(_) => totals.nested.fetch_add(1, Ordering::Relaxed),
                        Extra::EioInRecovery(_) => totals.eio.fetch_add(1, Ordering::Relaxed),
                        Extra::BitRot(_) => totals.rot.fetch_add(1, Ordering::Relaxed),
                        Extra::None => 0,
                    };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check_state(plan, sabotage, &state)
                    }));
                    let r = r.unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_default();
                        Err(Violation {
                            kind: Kind::Panic,
                            detail: format!("seed {} op {}: panic: {msg}", plan.seed, state.op),
                        })
                    });
                    if let Err(v) = r {
                        let mut vs = violations.lock().expect("lock");
                        if vs.iter().filter(|x| x.kind == v.kind).count() < 3 {
                            vs.push(v);
                        }
                    }
                }
            });
        }
        // A panicking workload must still end the checkers (the hook
        // holds a sender), or the scope would wait for them for ever.
        let settled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_plan(plan, &fs, sabotage, &acked, &durable)
        }));
        fs.set_hook(None);
        let settled = match settled {
            Ok(n) => n,
            Err(p) => {
                drop(tx);
                std::panic::resume_unwind(p)
            }
        };
        totals.settle_steps.fetch_add(settled, Ordering::Relaxed);
        totals
            .workload_ops
            .fetch_add(fs.op_count() as usize, Ordering::Relaxed);
        drop(tx);
    });
    violations.into_inner().expect("lock")
}

/// Runs the plan's steps, publishing what is acknowledged and durable.
/// Returns the settling steps that ran.
fn run_plan(
    plan: &Plan,
    fs: &MemFs,
    sabotage: Sabotage,
    acked: &AtomicUsize,
    durable: &AtomicUsize,
) -> usize {
    let open = || {
        let db = Db::open(dir(), options(plan, fs, sabotage)).expect("workload open");
        let spaces = if plan.keyspaces {
            open_keyspaces(&db).expect("workload keyspaces")
        } else {
            Vec::new()
        };
        (db, spaces)
    };
    let (d, mut spaces) = open();
    let mut db = Some(d);
    let mut settled = 0;
    for step in &plan.steps {
        let Some(d) = db.as_ref() else { break };
        match step {
            Step::Write(b) => {
                let batch = &plan.batches[*b];
                let wo = WriteOptions { sync: batch.sync };
                d.write(batch.to_write_batch(&spaces), &wo)
                    .expect("workload write");
                acked.store(b + 1, Ordering::SeqCst);
                if batch.sync {
                    durable.store(b + 1, Ordering::SeqCst);
                }
            }
            Step::Drop(b) => {
                let slot = plan.batches[*b].drop.expect("a drop");
                spaces[usize::from(slot) - 1] = drop_and_remake(d, slot).expect("workload drop");
                // Durable itself, but it makes no earlier write durable.
                acked.store(b + 1, Ordering::SeqCst);
            }
            Step::Flush => {
                let before = acked.load(Ordering::SeqCst);
                d.flush().expect("workload flush");
                durable.fetch_max(before, Ordering::SeqCst);
            }
            Step::Compact => {
                let before = acked.load(Ordering::SeqCst);
                d.compact().expect("workload compact");
                durable.fetch_max(before, Ordering::SeqCst);
            }
            // Settling neither flushes nor syncs a write: what is durable
            // stays as it was.
            Step::Settle => {
                let steps = d.settle_now().expect("workload settle");
                settled += usize::try_from(steps).unwrap_or(usize::MAX);
            }
            Step::Reopen => {
                let before = acked.load(Ordering::SeqCst);
                if let Some(d) = db.take() {
                    d.close().expect("workload close");
                }
                durable.fetch_max(before, Ordering::SeqCst);
                let (d, s) = open();
                db = Some(d);
                spaces = s;
            }
            Step::Read(k) => {
                d.get(k).expect("workload get");
            }
        }
    }
    if let Some(d) = db.take() {
        d.close().expect("workload close");
    }
    settled
}

#[test]
fn every_crash_state_recovers_what_was_acknowledged() {
    let seeds = env_u64("CAIRNDB_CRASH_SEEDS", 48);
    let seed0 = env_u64("CAIRNDB_CRASH_SEED0", 0);
    let totals = Totals::default();
    let mut all = Vec::new();
    let start = std::time::Instant::now();
    for seed in seed0..seed0 + seeds {
        let p = plan(seed);
        let v = explore(&p, Sabotage::default(), 4, &totals);
        all.extend(v);
    }
    let states = totals.states.load(Ordering::Relaxed);
    println!(
        "crash states: {states} from {seeds} workloads ({} IO ops, {} settling steps; {} with \
         a crash in recovery, {} with EIO in recovery, {} with bit rot), {} violations, {:.1}s",
        totals.workload_ops.load(Ordering::Relaxed),
        totals.settle_steps.load(Ordering::Relaxed),
        totals.nested.load(Ordering::Relaxed),
        totals.eio.load(Ordering::Relaxed),
        totals.rot.load(Ordering::Relaxed),
        all.len(),
        start.elapsed().as_secs_f64()
    );
    for v in &all {
        println!("  {v}");
    }
    assert!(
        all.is_empty(),
        "{} violations; first: {}",
        all.len(),
        all[0]
    );
    if seeds >= 48 {
        assert!(states >= 50_000, "only {states} crash states explored");
        assert!(
            totals.settle_steps.load(Ordering::Relaxed) > 0,
            "no workload ran a settling step"
        );
    }
}

/// Runs a few workloads on a broken engine and returns the violation kinds
/// found.
fn kinds_found(sabotage: Sabotage, seeds: std::ops::Range<u64>) -> Vec<Kind> {
    let totals = Totals::default();
    let mut kinds: Vec<Kind> = seeds
        .flat_map(|seed| explore(&plan(seed), sabotage, 3, &totals))
        .map(|v| v.kind)
        .collect();
    kinds.sort();
    kinds.dedup();
    println!("{sabotage:?}: violations of kinds {kinds:?}");
    kinds
}

#[test]
fn checkers_catch_a_skipped_journal_sync() {
    let kinds = kinds_found(
        Sabotage {
            skip_journal_sync: true,
            ..Sabotage::default()
        },
        0..4,
    );
    assert!(kinds.contains(&Kind::LostDurable), "found only {kinds:?}");
}

#[test]
fn checkers_catch_a_skipped_directory_sync() {
    let kinds = kinds_found(
        Sabotage {
            skip_dir_sync: true,
            ..Sabotage::default()
        },
        0..6,
    );
    assert!(
        kinds.contains(&Kind::LostDurable) || kinds.contains(&Kind::OpenFailed),
        "found only {kinds:?}"
    );
}

#[test]
fn checkers_catch_split_batches() {
    let kinds = kinds_found(
        Sabotage {
            split_batches: true,
            ..Sabotage::default()
        },
        0..6,
    );
    assert!(kinds.contains(&Kind::PartialBatch), "found only {kinds:?}");
}

#[test]
fn checkers_catch_replay_past_damage() {
    let kinds = kinds_found(
        Sabotage {
            replay_past_damage: true,
            ..Sabotage::default()
        },
        0..6,
    );
    assert!(kinds.contains(&Kind::Hole), "found only {kinds:?}");
}

#[test]
fn checkers_catch_stale_seqnos_after_open() {
    let kinds = kinds_found(
        Sabotage {
            stale_seqno_after_open: true,
            ..Sabotage::default()
        },
        0..6,
    );
    assert!(kinds.contains(&Kind::WrongData), "found only {kinds:?}");
}
