//! Settling: moving values still in journals into values files in key
//! order — beside scans that read them at random (`SettleDue`), and while
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
    let quiet = Quiet::new(inner);
    let mut taken = Vec::new();
    let result = settle_one(inner, v, idle, &quiet, &mut taken);
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
    taken: &mut Vec<u64>,
) -> Result<bool> {
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
            };
            taken.extend(c.inputs.iter().chain(&c.below).map(|f| f.number));
            inner.counters.settle_steps.fetch_add(1, Ordering::Relaxed);
            return compact(inner, v, c, Moving::WhileQuiet(quiet)).map(|()| true);
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
                    };
                    taken.push(f.number);
                    inner.counters.settle_steps.fetch_add(1, Ordering::Relaxed);
                    return compact(inner, v, c, Moving::WhileQuiet(quiet)).map(|()| true);
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
