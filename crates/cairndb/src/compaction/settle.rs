//! Settling: moving values still in journals into values files in key
//! order — beside scans that read them at random, riding on the
//! compactions writes bring about (`SettleDue`) or, while writes are few,
//! a step at a time that the scans' reads pay for (`ReadDue`), and while
//! the database is idle, one step at a time (`settle_step`).

use super::gc::Moving;
use super::merge::compact;
use super::pick::{Compaction, level0_of, user_range};
use super::quiet::{Quiet, activity};
use crate::engine::Inner;
use crate::error::Result;
use crate::format::key::{self, Kind};
use crate::format::vptr::ValuePtr;
use crate::read::cursor::{Dir, table_cursor};
use crate::sync;
use crate::version::{TableFile, Version};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// How many value bytes still in journals background compactions may
/// settle (`Options::settle_for_scans`) for one look of the compaction
/// thread that saw scans read `scattered` bytes at random from journals
/// and `appended` journal bytes written since the look before: that
/// ratio of the smaller, at most `SETTLE_PER_COMPACTION_MAX`. Looks add
/// up until a compaction spends them, only while both scans and writes go
/// on (`SettleDue`). Settling rides on the compactions that writes bring
/// about anyway, so it goes on while writes do and scans need it; once
/// scans or writes stop, it stops (an idle database settles by itself,
/// `Options::settle_after_idle`).
pub(super) fn settle_allowance(opts: &crate::Options, scattered: u64, appended: u64) -> u64 {
    let due = (scattered.min(appended) as f64 * opts.settle_for_scans) as u64;
    due.min(SETTLE_PER_COMPACTION_MAX)
}

/// Most value bytes one background compaction settles: each is a read at
/// random from a journal, and writers may be waiting for a level-0
/// merge. After a long stretch without a compaction (level 0 waiting
/// while its merges met only new keys), the first one settled 1 GiB at
/// once in a test run; in steady state one settled about 256 MiB.
pub(super) const SETTLE_PER_COMPACTION_MAX: u64 = 256 << 20;

/// What background compactions may settle beside scans, gathered look by
/// look of the compaction thread (it looks at least every 200 ms while
/// no compaction runs).
pub(super) struct SettleDue {
    /// Journal bytes appended and value bytes scans read at random at
    /// the look before.
    seen: (u64, u64),
    /// Whether that look saw both grow.
    both: bool,
    /// Bytes the next compaction may settle.
    due: u64,
}

impl SettleDue {
    pub(super) fn new(inner: &Inner) -> Self {
        SettleDue {
            seen: (
                inner.counters.journal_bytes.load(Ordering::Relaxed),
                inner.policy.scattered(),
            ),
            both: false,
            due: 0,
        }
    }

    /// One look. The bytes since the look before count only if that look
    /// too saw scans and writes both go on: a stretch of scans that ends
    /// as writes begin (the contest's fresh-range scan, then its
    /// overwrite) must not make the first compactions of the writes
    /// settle values nobody scans any more — a first version, counting
    /// everything since the compaction before while both were seen in
    /// the last second, settled 256 MiB at the start of the overwrite
    /// (overwrite wamp 1.53 against 1.42).
    pub(super) fn look(&mut self, inner: &Inner) {
        let now = (
            inner.counters.journal_bytes.load(Ordering::Relaxed),
            inner.policy.scattered(),
        );
        let (appended, scattered) = (now.0 - self.seen.0, now.1 - self.seen.1);
        let both = appended > 0 && scattered > 0;
        if both && self.both {
            self.due = (self.due + settle_allowance(&inner.opts, scattered, appended))
                .min(SETTLE_PER_COMPACTION_MAX);
        }
        self.both = both;
        self.seen = now;
    }

    /// What a compaction starting now may settle; it starts over.
    pub(super) fn take(&mut self) -> u64 {
        std::mem::take(&mut self.due)
    }
}

/// Fewest value bytes short scans must have read at random from journals
/// (times `Options::settle_for_scans`) before a settling step runs beside
/// them: one step rewrites at least a table.
pub(super) const READ_SETTLE_MIN: i64 = 16 << 20;

/// Fewest value bytes a settling step short scans paid for may settle,
/// as a multiple of the bytes of the tables it rewrites (at most
/// `SETTLE_PER_COMPACTION_MAX`). A step rewrites its tables whole however
/// little it settles, so steps that settle only what was due (16 MiB)
/// rewrite the same table again and again: YCSB E's 500,000 values of
/// 1 KiB, pointed to by one 14 MiB table, took 17 steps that way, and
/// the scans beside them ran at two thirds of their rate once settled.
/// What a step settles past what was due is owed (`ReadDue::spent`), so
/// reads still pay for all that settles, bar one step.
pub(super) const SETTLE_PER_REWRITTEN_BYTE: u64 = 16;

/// The most a settling step paid for by short scans (`due`, from
/// `ReadDue`) settles when it rewrites `rewritten` bytes of tables:
/// `due`, or `SETTLE_PER_REWRITTEN_BYTE` times `rewritten` if that is
/// more, up to `SETTLE_PER_COMPACTION_MAX` (never below `due`).
pub(super) fn read_step_bound(due: u64, rewritten: u64) -> u64 {
    let amortized = rewritten
        .saturating_mul(SETTLE_PER_REWRITTEN_BYTE)
        .min(SETTLE_PER_COMPACTION_MAX);
    due.max(amortized)
}

/// What settling steps short scans have paid for while writes bring no
/// compaction to ride on: a scan that meets values in write order reads
/// each at random, where settled values come in sequential runs (a YCSB E
/// scan of 50 values of 1 KiB: 23 reads of the page cache, against one
/// or two). Like LevelDB's seek-triggered compaction, reads buy the
/// rewrite: every byte short scans read at random from journals, times
/// `Options::settle_for_scans`, adds to `due`, every byte a step settles
/// takes from it (below zero after a step larger than what paid for it),
/// and a step runs once `due` reaches `READ_SETTLE_MIN`. So a database
/// only read settles at most `settle_for_scans` times the bytes its short
/// scans read at random, plus one step, and nothing while only long scans
/// (which read value streams whole, `stream_share.rs`) or point reads run.
pub(super) struct ReadDue {
    /// `ReadPolicy::scattered_short` at the look before.
    seen: u64,
    due: i64,
}

impl ReadDue {
    pub(super) fn new(inner: &Inner) -> Self {
        ReadDue {
            seen: inner.policy.scattered_short(),
            due: 0,
        }
    }

    pub(super) fn look(&mut self, inner: &Inner) {
        let now = inner.policy.scattered_short();
        let read = now.saturating_sub(self.seen) as f64 * inner.opts.settle_for_scans;
        self.seen = now;
        self.due = self
            .due
            .saturating_add(read as i64)
            .min(SETTLE_PER_COMPACTION_MAX as i64);
    }

    /// Whether a step is due, and there is something to settle.
    pub(super) fn ready(&self, inner: &Inner, v: &Version) -> bool {
        self.due >= READ_SETTLE_MIN
            && inner.opts.value_gc_live_ratio > 0.0
            && v.value_bytes_unsettled() > 0
    }

    /// A step settled `bytes`: taken from what is due; a step that
    /// settled nothing (every table left is known settled, or a write
    /// cut it short) spends it all, so the thread does not try again
    /// until scans pay anew.
    fn spent(&mut self, bytes: u64) {
        self.due = if bytes == 0 {
            0
        } else {
            self.due
                .saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX))
        };
    }
}

/// One settling step beside short scans (`ReadDue`): as `settle_step`,
/// except that it goes on beside reads and writes and settles at most
/// what is due, or what makes its rewrite worth it if that is more
/// (`read_step_bound`, `Moving::Bounded`).
pub(super) fn settle_step_for_reads(
    inner: &Inner,
    v: &Version,
    idle: &mut Idle,
    due: &mut ReadDue,
) -> Result<()> {
    let before = inner.counters.value_bytes_settled.load(Ordering::Relaxed);
    let bound = u64::try_from(due.due).unwrap_or(0);
    let result = step(inner, v, idle, Quiet::until_close(inner), Some(bound));
    let after = inner.counters.value_bytes_settled.load(Ordering::Relaxed);
    due.spent(after.saturating_sub(before));
    result
}

/// When the database went idle, and which tables are not to be taken
/// again: known to need no settling, or a step over them failed (kept by
/// number: a table never changes).
pub(super) struct Idle {
    seen: u64,
    since: Instant,
    settled: HashSet<u64>,
}

impl Idle {
    pub(super) fn new(inner: &Inner) -> Self {
        Idle {
            seen: activity(inner),
            since: Instant::now(),
            settled: HashSet::new(),
        }
    }

    /// True if the database has been idle for `settle_after_idle` and
    /// values tables point to still lie in journals.
    pub(super) fn due(&mut self, inner: &Inner, v: &Version) -> bool {
        let Some(after) = inner.opts.settle_after_idle else {
            return false;
        };
        let now = activity(inner);
        if now != self.seen {
            self.seen = now;
            self.since = Instant::now();
            return false;
        }
        self.since.elapsed() >= after
            && inner.opts.value_gc_live_ratio > 0.0
            && v.value_bytes_unsettled() > 0
    }

    /// After a step: tables no longer in `v` are forgotten. A step that
    /// found nothing to settle, or was cut short, waits for a new idle
    /// period; after one that settled what it took on, the next starts at
    /// once (foreground work since then is seen by `due`).
    fn after_step(&mut self, v: &Version, ran_through: bool) {
        if !ran_through {
            self.since = Instant::now();
        }
        let live: HashSet<u64> = v.levels.iter().flatten().map(|f| f.number).collect();
        self.settled.retain(|n| live.contains(n));
    }
}

/// One step of settling while idle: level 0 merged into level 1, else the
/// first deeper table still pointing into a journal rewritten in place.
/// Values move only while no foreground work is seen (`Quiet`).
///
/// A step that fails leaves the database as it was (its files are
/// deleted, no edit is logged) and is counted in `settle_failures`; its
/// tables are not taken again while the thread lives. Only a failed
/// manifest write, which poisons the database anyway, is reported as a
/// background failure.
pub(super) fn settle_step(inner: &Inner, v: &Version, idle: &mut Idle) -> Result<()> {
    step(inner, v, idle, Quiet::new(inner), None)
}

/// A settling step that gives way once `quiet` breaks, and settles at
/// most `bound` bytes if given (`Moving::Bounded`), else all it can
/// (`Moving::WhileQuiet`).
fn step(
    inner: &Inner,
    v: &Version,
    idle: &mut Idle,
    quiet: Quiet,
    bound: Option<u64>,
) -> Result<()> {
    let mut taken = Vec::new();
    let result = settle_one(inner, v, idle, &quiet, bound, &mut taken);
    let ran_through = matches!(result, Ok(true)) && quiet.holds();
    let after = inner.state.read().version.clone();
    idle.after_step(&after, ran_through);
    match result {
        Ok(_) => Ok(()),
        Err(e) if inner.manifest.lock().poisoned => Err(e),
        Err(_) => {
            inner
                .counters
                .settle_failures
                .fetch_add(1, Ordering::Relaxed);
            idle.settled.extend(taken);
            Ok(())
        }
    }
}

/// `Db::settle_now`: settling steps run here, one after the other, as the
/// compaction thread runs them once the database is idle, until a step
/// finds nothing to settle or leaves as much unsettled as before (one
/// that failed, counted as in the background, or gave way to foreground
/// work). Returns the steps taken. For tests that cut power inside a
/// step; nothing but the wait for idleness differs from the background's
/// steps.
pub(crate) fn settle_now(inner: &Inner) -> Result<u64> {
    let _guard = inner.compaction_lock.lock();
    inner.check_writable()?;
    if inner.opts.value_gc_live_ratio <= 0.0 {
        return Ok(0);
    }
    let mut idle = Idle::new(inner);
    let mut steps = 0;
    loop {
        let v = inner.state.read().version.clone();
        let left = v.value_bytes_unsettled();
        let before = inner.counters.settle_steps.load(Ordering::Relaxed);
        if left == 0 {
            return Ok(steps);
        }
        settle_step(inner, &v, &mut idle)?;
        if inner.counters.settle_steps.load(Ordering::Relaxed) == before {
            return Ok(steps);
        }
        steps += 1;
        if inner.state.read().version.value_bytes_unsettled() >= left {
            return Ok(steps);
        }
        // The step wrote and installed files: as after `compact_all`, a
        // pause it may have made needless is lifted.
        inner.background_succeeded();
    }
}

/// `settle_step`'s work; true if it found something to settle. The
/// numbers of the tables it takes go to `taken`.
pub(super) fn settle_one(
    inner: &Inner,
    v: &Version,
    idle: &mut Idle,
    quiet: &Quiet,
    bound: Option<u64>,
    taken: &mut Vec<u64>,
) -> Result<bool> {
    // A bounded step settles enough to be worth its rewrite.
    let moving = |c: &Compaction| match bound {
        None => Moving::WhileQuiet(quiet),
        Some(due) => {
            let rewritten = c.inputs.iter().chain(&c.below).map(|f| f.size).sum();
            Moving::Bounded(read_step_bound(due, rewritten))
        }
    };
    let unsettled = v.levels[0]
        .iter()
        .find(|f| !idle.settled.contains(&f.number) && v.keyspaces.exists(f.keyspace));
    if let Some(first) = unsettled {
        let level0 = level0_of(v, first.keyspace);
        if let Some((lo, hi)) = user_range(&level0) {
            let c = Compaction {
                keyspace: first.keyspace,
                level: 0,
                below: v.overlapping(1, first.keyspace, &lo, &hi),
                inputs: level0,
                warm: false,
            };
            taken.extend(c.inputs.iter().chain(&c.below).map(|f| f.number));
            inner.counters.settle_steps.fetch_add(1, Ordering::Relaxed);
            let moving = moving(&c);
            return compact(inner, v, c, moving).map(|()| true);
        }
    }
    for (level, files) in v.levels.iter().enumerate().skip(1) {
        for f in files {
            if idle.settled.contains(&f.number) || !v.keyspaces.exists(f.keyspace) {
                continue;
            }
            taken.push(f.number);
            let points = points_into_journal(inner, v, f, quiet)?;
            taken.pop();
            match points {
                Some(false) => {
                    idle.settled.insert(f.number);
                }
                Some(true) => {
                    let c = Compaction {
                        keyspace: f.keyspace,
                        level,
                        inputs: vec![f.clone()],
                        below: Vec::new(),
                        warm: false,
                    };
                    taken.push(f.number);
                    inner.counters.settle_steps.fetch_add(1, Ordering::Relaxed);
                    let moving = moving(&c);
                    return compact(inner, v, c, moving).map(|()| true);
                }
                // Foreground work began: check again when idle.
                None => return Ok(false),
            }
        }
    }
    Ok(false)
}

/// Whether table `f` holds a pointer into a journal; `None` if foreground
/// work began before the answer was known.
pub(super) fn points_into_journal(
    inner: &Inner,
    v: &Version,
    f: &sync::Arc<TableFile>,
    quiet: &Quiet,
) -> Result<Option<bool>> {
    let table = inner.tables.get(f)?;
    let mut cursor = table_cursor(&table, Dir::Forward, None);
    let mut seen = 0u64;
    while cursor.advance()? {
        seen += 1;
        if seen.is_multiple_of(4096) && !quiet.holds() {
            return Ok(None);
        }
        let Some((_, tag)) = key::split(cursor.key()) else {
            continue;
        };
        if key::tag_kind(tag) != Kind::Pointer as u8 {
            continue;
        }
        let in_journal = ValuePtr::decode(cursor.value())
            .and_then(|p| v.segments.get(&p.segment))
            .is_some_and(|s| s.file.in_write_order());
        if in_journal {
            return Ok(Some(true));
        }
    }
    Ok(Some(false))
}
