//! Leveled compaction: merging tables into the next level.
//!
//! Picking: level 0 is scored by table count against
//! `l0_compaction_trigger`, or `l0_compaction_trigger_new_keys` while
//! level-0 merges drop under `L0_DROPS_MIN` of the entries they read from
//! level 0 (a load of new keys: the merge's rewrite of level 1 buys
//! nothing but fewer tables to search; `L0Triggers`), level i >= 1 by
//! bytes against
//! `level1_bytes * level_multiplier^(i-1)`; the highest score >= 1 is
//! compacted. Level 0 compacts all its tables with the overlapping level-1
//! tables; a deeper level compacts one table (round robin through its key
//! range) with the overlapping tables of the next level. A single table
//! with nothing below it is moved by a manifest edit alone.
//!
//! Merging keeps, per user key, the newest version and every older version
//! some snapshot may still read; a tombstone is dropped once no snapshot
//! needs it and no deeper level holds the key. Outputs are cut at
//! `table_bytes`, only between user keys, so the tables of a level never
//! share a user key.
//!
//! Only one compaction runs at a time (`compaction_lock`), in the
//! background thread or in `Db::compact`.
//!
//! Settling while idle: once no write and no value read has been seen for
//! `Options::settle_after_idle`, the background thread settles values
//! still in journals, one step at a time (`settle_step`): level 0 merges
//! into level 1, or one deeper table whose pointers still name a journal
//! is rewritten in place, its values moved into values files in key
//! order. At the first sign of foreground work, a `Db::compact` call or
//! close, a step that has not yet moved as many value bytes as its input
//! tables hold gives up and deletes what it wrote; one that has finishes
//! by copying the rest of its keys. A step that fails (a damaged value,
//! a full device) is skipped, never stops writes: settling is optional.

use crate::db::Inner;
use crate::error::{Error, Result};
use crate::flush;
use crate::format::key::{self, Kind};
use crate::format::manifest::{Edit, TableRecord};
use crate::format::table::TableWriter;
use crate::format::vptr::{ValuePtr, padding};
use crate::limits::LEVELS;
use crate::options::Options;
use crate::read::cursor::{Cursor, Dir, MergeCursor, table_cursor};
use crate::sync;
use crate::version::segments::SegmentFile;
use crate::version::{TableFile, Version, files};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Tables chosen for one compaction.
struct Compaction {
    level: usize,
    inputs: Vec<sync::Arc<TableFile>>,
    /// Overlapping tables of `level + 1`.
    below: Vec<sync::Arc<TableFile>>,
}

fn level_target(opts: &Options, level: usize) -> u64 {
    let mut t = opts.level1_bytes;
    for _ in 1..level {
        t = t.saturating_mul(opts.level_multiplier);
    }
    t
}

/// A level-0 merge that drops fewer entries than this share of those it
/// read from level 0 finds the keys new: the next waits for
/// `l0_compaction_trigger_new_keys` tables.
const L0_DROPS_MIN: f64 = 0.125;

/// Level-0 table counts that start a compaction, slow writers and stop
/// them: the options', or while level-0 merges meet only new keys
/// (`Inner::l0_new_keys`) each moved up to start compactions at
/// `l0_compaction_trigger_new_keys`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct L0Triggers {
    pub compact: usize,
    pub slowdown: usize,
    pub stop: usize,
}

impl L0Triggers {
    pub fn new(opts: &Options, new_keys: bool) -> Self {
        let up = if new_keys {
            opts.l0_compaction_trigger_new_keys
                .saturating_sub(opts.l0_compaction_trigger)
        } else {
            0
        };
        L0Triggers {
            compact: opts.l0_compaction_trigger.saturating_add(up),
            slowdown: opts.l0_slowdown_trigger.saturating_add(up),
            stop: opts.l0_stop_trigger.saturating_add(up),
        }
    }

    pub fn now(inner: &Inner) -> Self {
        Self::new(&inner.opts, inner.l0_new_keys.load(Ordering::Relaxed))
    }
}

/// Score of each level that can be compacted (the last cannot), level 0
/// against `l0_trigger` tables.
fn scores(v: &Version, opts: &Options, l0_trigger: usize) -> Vec<f64> {
    (0..LEVELS - 1)
        .map(|l| {
            if l == 0 {
                v.levels[0].len() as f64 / l0_trigger as f64
            } else {
                v.level_bytes(l) as f64 / level_target(opts, l) as f64
            }
        })
        .collect()
}

/// How far compaction is behind, from 0 (writers run free) to 1 (writers
/// are about to stop). Level 0 pressure grows linearly from the slowdown
/// trigger to the stop trigger; byte debt of deeper levels adds pressure
/// once a level is more than twice its target.
pub(crate) fn write_pressure(v: &Version, opts: &Options, l0: L0Triggers) -> f64 {
    let tables = v.levels[0].len();
    let l0_pressure = if tables >= l0.slowdown {
        (tables - l0.slowdown + 1) as f64 / (l0.stop - l0.slowdown + 1) as f64
    } else {
        0.0
    };
    let bytes_pressure = scores(v, opts, l0.compact)
        .iter()
        .skip(1)
        .map(|s| ((s - 2.0) / 8.0).clamp(0.0, 1.0))
        .fold(0.0, f64::max);
    l0_pressure.max(bytes_pressure).min(1.0)
}

fn user_range(files: &[sync::Arc<TableFile>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = files.iter().map(|f| f.smallest_user()).min()?;
    let hi = files.iter().map(|f| f.largest_user()).max()?;
    Some((lo.to_vec(), hi.to_vec()))
}

fn pick(
    v: &Version,
    opts: &Options,
    l0_trigger: usize,
    pointer: &mut [Vec<u8>; LEVELS],
) -> Option<Compaction> {
    let (level, score) = scores(v, opts, l0_trigger)
        .into_iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if score < 1.0 {
        return None;
    }
    let inputs = if level == 0 {
        v.levels[0].clone()
    } else {
        let files = &v.levels[level];
        let after = files
            .iter()
            .find(|f| key::compare(&f.smallest, &pointer[level]).is_gt())
            .or(files.first())?;
        pointer[level] = after.largest.clone();
        vec![after.clone()]
    };
    let (lo, hi) = user_range(&inputs)?;
    let below = v.overlapping(level + 1, &lo, &hi);
    Some(Compaction {
        level,
        inputs,
        below,
    })
}

/// Value bytes a background compaction may move: the floor
/// `value_gc_bytes_per_compaction`, or `value_gc_pace` times the journal
/// bytes appended since the compaction before it, whichever is more.
fn gc_allowance(opts: &crate::Options, appended: u64) -> u64 {
    let paced = (appended as f64 * opts.value_gc_pace) as u64;
    opts.value_gc_bytes_per_compaction.max(paced)
}

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
fn settle_allowance(opts: &crate::Options, scattered: u64, appended: u64) -> u64 {
    let due = (scattered.min(appended) as f64 * opts.settle_for_scans) as u64;
    due.min(SETTLE_PER_COMPACTION_MAX)
}

/// Most value bytes one background compaction settles: each is a read at
/// random from a journal, and writers may be waiting for a level-0
/// merge. After a long stretch without a compaction (level 0 waiting
/// while its merges met only new keys), the first one settled 1 GiB at
/// once in a test run; in steady state one settled about 256 MiB.
const SETTLE_PER_COMPACTION_MAX: u64 = 256 << 20;

/// What background compactions may settle beside scans, gathered look by
/// look of the compaction thread (it looks at least every 200 ms while
/// no compaction runs).
struct SettleDue {
    /// Journal bytes appended and value bytes scans read at random at
    /// the look before.
    seen: (u64, u64),
    /// Whether that look saw both grow.
    both: bool,
    /// Bytes the next compaction may settle.
    due: u64,
}

impl SettleDue {
    fn new(inner: &Inner) -> Self {
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
    fn look(&mut self, inner: &Inner) {
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
    fn take(&mut self) -> u64 {
        std::mem::take(&mut self.due)
    }
}

/// What the compaction thread does next.
enum Work {
    Compact,
    Warm,
    Settle,
}

/// The compaction thread: compacts while some level is over its target,
/// and settles values while the database is idle.
pub(crate) fn run(inner: &Inner) {
    let mut pointer: [Vec<u8>; LEVELS] = Default::default();
    let mut backoff = flush::RETRY_MIN;
    // Journal bytes appended when the compaction before began.
    let mut appended_before = inner.counters.journal_bytes.load(Ordering::Relaxed);
    let mut settle_due = SettleDue::new(inner);
    let mut idle = Idle::new(inner);
    // Journal bytes last seen appended, and since when no more were.
    let mut writes = (appended_before, Instant::now());
    // Values read through the page cache when written values were last
    // read back (`warm`).
    let mut reads_at_warm = inner.policy.counts().2;
    loop {
        let work = {
            let mut bg = inner.bg.lock();
            loop {
                if bg.shutdown {
                    return;
                }
                let appended = inner.counters.journal_bytes.load(Ordering::Relaxed);
                if appended != writes.0 {
                    writes = (appended, Instant::now());
                }
                settle_due.look(inner);
                if bg.error.is_none() {
                    // Before a compaction: handing the read-back to a
                    // worker takes no time here, and while writes go on a
                    // compaction is due most of the time.
                    let v = inner.state.read().version.clone();
                    let reads = inner.policy.counts().2;
                    let reading = reads.saturating_sub(reads_at_warm) >= WARM_READS;
                    if (writes.1.elapsed() >= WARM_AFTER_QUIET || reading)
                        && inner
                            .to_warm
                            .lock()
                            .iter()
                            .any(|n| v.segments.contains_key(n))
                    {
                        reads_at_warm = reads;
                        break Work::Warm;
                    }
                    if scores(&v, &inner.opts, L0Triggers::now(inner).compact)
                        .iter()
                        .any(|s| *s >= 1.0)
                    {
                        break Work::Compact;
                    }
                    if bg.paused.is_none() && idle.due(inner, &v) {
                        break Work::Settle;
                    }
                }
                inner.bg_cv.wait_for(&mut bg, Duration::from_millis(200));
            }
        };
        let guard = inner.compaction_lock.lock();
        let v = inner.state.read().version.clone();
        let result = match work {
            Work::Compact => {
                let appended = inner.counters.journal_bytes.load(Ordering::Relaxed);
                let paced = Moving::Paced {
                    gc: gc_allowance(&inner.opts, appended - appended_before),
                    settle: settle_due.take(),
                };
                appended_before = appended;
                match pick(
                    &v,
                    &inner.opts,
                    L0Triggers::now(inner).compact,
                    &mut pointer,
                ) {
                    Some(c) => compact(inner, &v, c, paced),
                    None => Ok(()),
                }
            }
            Work::Warm => {
                warm(inner);
                Ok(())
            }
            Work::Settle => settle_step(inner, &v, &mut idle),
        };
        drop(guard);
        match result {
            Ok(()) => {
                backoff = flush::RETRY_MIN;
                inner.background_succeeded();
            }
            Err(e) => {
                if inner.background_failed(e) {
                    flush::pause(inner, backoff);
                    backoff = (backoff * 2).min(flush::RETRY_MAX);
                }
            }
        }
        inner.notify_bg();
    }
}

/// Foreground work seen so far: journal bytes appended, separated values
/// read and `Db::compact` calls. Gets and scans served from tables and
/// memtables alone are not counted; they do not use the device the way
/// settling does.
fn activity(inner: &Inner) -> u64 {
    let (cached, direct, buffered) = inner.policy.counts();
    inner.counters.journal_bytes.load(Ordering::Relaxed)
        + cached
        + direct
        + buffered
        + inner.counters.compact_calls.load(Ordering::Relaxed)
}

/// When the database went idle, and which tables are not to be taken
/// again: known to need no settling, or a step over them failed (kept by
/// number: a table never changes).
struct Idle {
    seen: u64,
    since: Instant,
    settled: HashSet<u64>,
}

impl Idle {
    fn new(inner: &Inner) -> Self {
        Idle {
            seen: activity(inner),
            since: Instant::now(),
            settled: HashSet::new(),
        }
    }

    /// True if the database has been idle for `settle_after_idle` and
    /// values tables point to still lie in journals.
    fn due(&mut self, inner: &Inner, v: &Version) -> bool {
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
fn settle_step(inner: &Inner, v: &Version, idle: &mut Idle) -> Result<()> {
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
fn settle_one(
    inner: &Inner,
    v: &Version,
    idle: &mut Idle,
    quiet: &Quiet,
    taken: &mut Vec<u64>,
) -> Result<bool> {
    let level0 = &v.levels[0];
    if level0.iter().any(|f| !idle.settled.contains(&f.number))
        && let Some((lo, hi)) = user_range(level0)
    {
        let c = Compaction {
            level: 0,
            inputs: level0.clone(),
            below: v.overlapping(1, &lo, &hi),
        };
        taken.extend(c.inputs.iter().chain(&c.below).map(|f| f.number));
        inner.counters.settle_steps.fetch_add(1, Ordering::Relaxed);
        return compact(inner, v, c, Moving::WhileQuiet(quiet)).map(|()| true);
    }
    for (level, files) in v.levels.iter().enumerate().skip(1) {
        for f in files {
            if idle.settled.contains(&f.number) {
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
fn points_into_journal(
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

/// True while no foreground work has been seen since it was made and the
/// database is not closing; once false, false for good.
struct Quiet<'a> {
    inner: &'a Inner,
    at: u64,
    broken: std::cell::Cell<bool>,
}

impl<'a> Quiet<'a> {
    fn new(inner: &'a Inner) -> Self {
        Quiet {
            inner,
            at: activity(inner),
            broken: std::cell::Cell::new(false),
        }
    }

    fn closing(&self) -> bool {
        self.inner.closing.load(Ordering::Relaxed)
    }

    fn holds(&self) -> bool {
        if !self.broken.get() && (activity(self.inner) != self.at || self.closing()) {
            self.broken.set(true);
        }
        !self.broken.get()
    }
}

/// How much a merge may move values (value GC and settling).
#[derive(Clone, Copy)]
enum Moving<'a> {
    /// A background compaction: value GC moves at most `gc` bytes, and
    /// values still in journals settle up to `settle` bytes
    /// (`settle_allowance`; 0 unless scans read at random beside writes).
    /// Tables are not rewritten for either: a table alone moves down a
    /// level as it is.
    Paced { gc: u64, settle: u64 },
    /// A full compaction (`Db::compact`): every value in a journal
    /// settles, and value GC is not bounded.
    All,
    /// A settling step: as `All` while the database stays quiet, then
    /// nothing more moves.
    WhileQuiet(&'a Quiet<'a>),
}

impl Moving<'_> {
    /// Whether every value still in a journal is to move (a full
    /// compaction, a settling step): the step's tables are rewritten
    /// even alone.
    fn settles(self) -> bool {
        !matches!(self, Moving::Paced { .. })
    }

    /// May a value out of a mostly dead segment move (value GC), after
    /// `moved` bytes have in all?
    fn may_collect(self, moved: u64) -> bool {
        match self {
            Moving::Paced { gc, .. } => moved < gc,
            Moving::All => true,
            Moving::WhileQuiet(q) => q.holds(),
        }
    }

    /// May a value still in a journal settle, after `settled` bytes have?
    fn may_settle(self, settled: u64) -> bool {
        match self {
            Moving::Paced { settle, .. } => settled < settle,
            Moving::All => true,
            Moving::WhileQuiet(q) => q.holds(),
        }
    }
}

/// Runs compaction `c` into the next level, or, for a settling step of
/// one table below level 0, into its own level.
fn compact(inner: &Inner, v: &Version, c: Compaction, moving: Moving) -> Result<()> {
    let in_place = c.level > 0 && moving.settles();
    let out_level = if in_place { c.level } else { c.level + 1 };
    let mut edit = Edit::default();
    let trivial = c.below.is_empty() && c.inputs.len() == 1 && !moving.settles();
    if trivial {
        let f = &c.inputs[0];
        edit.removed.push((c.level, f.number));
        edit.added.push(f.record(out_level));
    } else {
        edit.removed
            .extend(c.inputs.iter().map(|f| (c.level, f.number)));
        edit.removed
            .extend(c.below.iter().map(|f| (out_level, f.number)));
        let all: Vec<_> = c.inputs.iter().chain(&c.below).cloned().collect();
        match merge(inner, v, &all, out_level, moving)? {
            Some(merged) => {
                if c.level == 0 {
                    let read: u64 = c.inputs.iter().map(|f| f.entries).sum();
                    let new_keys = (merged.dropped as f64) < L0_DROPS_MIN * read as f64;
                    inner.l0_new_keys.store(new_keys, Ordering::Relaxed);
                }
                merged.into_edit(&mut edit)
            }
            None => return Ok(()),
        }
    }
    let moved: Vec<u64> = edit.value_live.iter().map(|&(n, _)| n).collect();
    log_merge(inner, edit, !trivial)?;
    inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
    warm_later(inner, &moved);
    Ok(())
}

/// Logs a compaction's edit. If a full device made the manifest refuse it
/// (nothing appended), the files the merge wrote — the tables the edit
/// adds and the values files it moved values to, when `merged` (not a
/// trivial move, whose table is the input's) — are deleted, as after a
/// failed merge, and the compaction is retried later.
fn log_merge(inner: &Inner, edit: Edit, merged: bool) -> Result<()> {
    let tables: Vec<u64> = edit.added.iter().map(|t| t.number).collect();
    let values: Vec<u64> = edit.value_live.iter().map(|&(n, _)| n).collect();
    inner.log_and_apply(edit, |_| {}).inspect_err(|e| {
        if merged && inner.manifest_refused(e) {
            for n in &tables {
                let _ = inner.fs.remove(&files::table(&inner.dir, *n));
            }
            for n in &values {
                let _ = inner.fs.remove(&files::values(&inner.dir, *n));
            }
        }
    })
}

/// Writes must pause this long before written values are read back into
/// the page cache (`Options::warm_written_values`): read back beside the
/// writes, they cost dbbench's fills 40-47 % of their rate here.
const WARM_AFTER_QUIET: Duration = Duration::from_millis(200);

/// Values read through the page cache since the last read-back that make
/// written values be read back while writes go on (`warm`): readers are
/// waiting for values that a sealed journal holds and the page cache does
/// not. dbbench's readwhilewriting (4 KiB values, data in memory) read
/// ~37,000 values a second beside the writer with the read-back waiting
/// for a pause, most of them from the device; a fill with no reader
/// never reaches it.
const WARM_READS: u64 = 256;

/// Segments remembered for warming at most; past it the oldest go.
const TO_WARM_MAX: usize = 4096;

/// `Options::warm_written_values`: segments written past the page cache
/// (a sealed journal, a merge's values files) are remembered, to be read
/// into it once writes pause, or while they go on if values are being
/// read (`warm`, `WARM_READS`).
pub(crate) fn warm_later(inner: &Inner, numbers: &[u64]) {
    if numbers.is_empty() || !inner.opts.warm_written_values {
        return;
    }
    let mut to_warm = inner.to_warm.lock();
    to_warm.extend_from_slice(numbers);
    if to_warm.len() > TO_WARM_MAX {
        let extra = to_warm.len() - TO_WARM_MAX;
        to_warm.drain(..extra);
    }
}

/// Hands the remembered segments still live to one worker thread that
/// asks the kernel to read them into the page cache, one after the other,
/// if values are read through it now (they fit in memory); else forgets
/// them. One thread, not one per segment: the read-back's page faults
/// then take at most one core from what runs after the pause.
fn warm(inner: &Inner) {
    let numbers = std::mem::take(&mut *inner.to_warm.lock());
    let (v, pending): (_, Vec<u64>) = {
        let state = inner.state.read();
        let pending = state.sealed.iter().map(|m| m.journal()).collect();
        (state.version.clone(), pending)
    };
    if inner.policy.how(|| v.value_bytes_live()) != crate::read::policy::How::PageCache {
        return;
    }
    // A journal sealed but not flushed yet is not in the version: it
    // waits for the next read-back (while writes go on, that comes soon).
    // A segment neither there nor pending is gone.
    let mut files = Vec::new();
    let mut later = Vec::new();
    for n in numbers {
        match v.segments.get(&n) {
            Some(seg) => files.push(seg.file.clone()),
            None if pending.contains(&n) => later.push(n),
            None => {}
        }
    }
    if !later.is_empty() {
        inner.to_warm.lock().extend(later);
    }
    if !files.is_empty() {
        inner
            .workers
            .run(move || files.iter().for_each(|f| f.will_need()));
    }
}

/// `Db::compact`: merges every table into one level (the deepest holding
/// data, at least 1).
pub(crate) fn compact_all(inner: &Inner) -> Result<()> {
    // A settling step in progress sees this and stops soon.
    inner.counters.compact_calls.fetch_add(1, Ordering::Relaxed);
    let _guard = inner.compaction_lock.lock();
    inner.check_writable()?;
    let v = inner.state.read().version.clone();
    if v.table_count() == 0 {
        return Ok(());
    }
    let target = (1..LEVELS)
        .rev()
        .find(|&l| !v.levels[l].is_empty())
        .unwrap_or(1);
    let mut edit = Edit::default();
    let mut all = Vec::new();
    for (level, files) in v.levels.iter().enumerate() {
        edit.removed.extend(files.iter().map(|f| (level, f.number)));
        all.extend(files.iter().cloned());
    }
    match merge(inner, &v, &all, target, Moving::All)? {
        Some(merged) => merged.into_edit(&mut edit),
        None => {
            return Err(Error::InvalidArgument(
                "internal: full merge gave up".into(),
            ));
        }
    }
    let moved: Vec<u64> = edit.value_live.iter().map(|&(n, _)| n).collect();
    log_merge(inner, edit, true)?;
    inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
    warm_later(inner, &moved);
    // A background compaction that ran out of space while this one waited
    // for the lock paused background work; this merge did its work, and
    // may have left the thread none to retry (no level over its target),
    // so nothing else would lift the pause and every flush would keep
    // reporting the old error.
    inner.background_succeeded();
    Ok(())
}

/// True if no level below `out_level` may hold `user_key`.
fn is_base_level(v: &Version, out_level: usize, user_key: &[u8]) -> bool {
    (out_level + 1..LEVELS).all(|l| v.find(l, user_key).is_none())
}

/// What a merge wrote.
#[derive(Default)]
struct Merged {
    tables: Vec<TableRecord>,
    /// Separated value bytes, per segment, of the pointers it dropped or
    /// moved away.
    dead: Vec<(u64, u64)>,
    /// Value bytes, per values file, it moved there.
    moved: Vec<(u64, u64)>,
    /// Entries it dropped: shadowed versions no snapshot reads, tombstones
    /// with nothing left to hide.
    dropped: u64,
}

impl Merged {
    fn into_edit(self, edit: &mut Edit) {
        edit.added = self.tables;
        edit.value_dead = self.dead;
        edit.value_live = self.moved;
    }
}

/// Files a merge created, deleted if it fails.
#[derive(Default)]
struct Created {
    tables: Vec<u64>,
    values: Vec<u64>,
}

/// Merges `inputs` into new tables for `out_level`, moving values as
/// `moving` allows: value GC moves values out of mostly dead segments,
/// and settling (`Moving::settles`) also moves every separated value
/// still in a journal to a values file, in key order. Under the null
/// policy (`value_gc_live_ratio` 0) nothing moves. `None`: a settling
/// step saw foreground work before it moved anything and gave up, leaving
/// nothing behind.
fn merge(
    inner: &Inner,
    v: &Version,
    inputs: &[sync::Arc<TableFile>],
    out_level: usize,
    moving: Moving,
) -> Result<Option<Merged>> {
    let mut created = Created::default();
    let merged = merge_into(inner, v, inputs, out_level, moving, &mut created);
    if !matches!(merged, Ok(Some(_))) {
        // Frees the space of the outputs written so far (the next open
        // would delete them anyway): a full device is retried later.
        for n in &created.tables {
            let _ = inner.fs.remove(&files::table(&inner.dir, *n));
        }
        for n in &created.values {
            let _ = inner.fs.remove(&files::values(&inner.dir, *n));
        }
    }
    merged
}

/// A values file being written by a compaction: values moved out of
/// segments that are mostly dead (value GC).
struct ValuesOut {
    number: u64,
    file: Box<dyn crate::io::FileWrite>,
    /// Bytes given out: written, plus those of the moves still pending.
    bytes: u64,
}

/// Most moves read together, and most bytes they may hold.
const MOVES_MAX: usize = 256;
const MOVES_BYTES_MAX: u64 = 8 << 20;
/// Value GC's moves: each value gets its new place (the current values
/// file, at the next offset) as soon as the merge meets it, so the table
/// entry can be written at once; the values themselves are read in
/// batches on the worker threads (many device reads in flight instead of
/// one) and appended in the order their places were given.
#[derive(Default)]
struct Moves {
    out: Vec<ValuesOut>,
    /// Values given a place in `out.last()` and not yet copied, with the
    /// zero bytes to write before each.
    pending: Vec<(std::sync::Arc<SegmentFile>, ValuePtr, u64)>,
    pending_bytes: u64,
    /// Value bytes given a place so far.
    moved_bytes: u64,
}

impl Moves {
    /// Gives the value `ptr` names (in `seg`) its place in this
    /// compaction's values file, starting a new file when the current one
    /// is full; returns the new pointer. The value is copied later
    /// (`drain`): same length and checksum, so the pointer is known now.
    fn add(
        &mut self,
        inner: &Inner,
        seg: std::sync::Arc<SegmentFile>,
        ptr: ValuePtr,
        created: &mut Created,
    ) -> Result<ValuePtr> {
        if self
            .out
            .last()
            .is_none_or(|o| o.bytes >= inner.opts.journal_bytes)
        {
            self.drain(inner)?;
            let number = inner.new_file_number();
            created.values.push(number);
            let path = files::values(&inner.dir, number);
            let file = inner
                .fs
                .create(&path)
                .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
            self.out.push(ValuesOut {
                number,
                file,
                bytes: 0,
            });
        }
        let Some(o) = self.out.last_mut() else {
            return Err(Error::InvalidArgument("internal: no values file".into()));
        };
        let pad = padding(o.bytes, u64::from(ptr.len));
        let moved = ValuePtr {
            segment: o.number,
            offset: o.bytes + pad,
            ..ptr
        };
        o.bytes += pad + u64::from(ptr.len);
        self.pending_bytes += pad + u64::from(ptr.len);
        self.moved_bytes += u64::from(ptr.len);
        self.pending.push((seg, ptr, pad));
        if self.pending.len() >= MOVES_MAX || self.pending_bytes >= MOVES_BYTES_MAX {
            self.drain(inner)?;
        }
        Ok(moved)
    }

    /// Reads the pending values (on the worker threads) and appends them,
    /// in order, to the current values file.
    fn drain(&mut self, inner: &Inner) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let (tx, rx) = crossbeam_channel::unbounded();
        for (i, (seg, ptr, _)) in pending.iter().enumerate() {
            let (seg, ptr, tx) = (seg.clone(), *ptr, tx.clone());
            inner.workers.run(move || {
                // From the page cache if it holds the value (a scan or a
                // reader just read it), else with a direct read.
                let got = match seg.read_cached(&ptr) {
                    Ok(Some(v)) => Ok(Some(v)),
                    _ => seg.read(&ptr, true),
                };
                let _ = tx.send((i, got));
            });
        }
        drop(tx);
        let mut values: Vec<Option<std::io::Result<Option<Vec<u8>>>>> =
            pending.iter().map(|_| None).collect();
        for (i, got) in rx.iter() {
            values[i] = Some(got);
        }
        let Some(o) = self.out.last_mut() else {
            return Err(Error::InvalidArgument("internal: no values file".into()));
        };
        // The batch's values and padding, appended in one write.
        let mut buf = Vec::with_capacity(
            pending
                .iter()
                .map(|(_, p, pad)| *pad as usize + p.len as usize)
                .sum(),
        );
        for ((seg, ptr, pad), got) in pending.iter().zip(values) {
            let path = files::journal(&inner.dir, ptr.segment);
            // A value whose reader was lost (it panicked) is read here.
            let got = got.unwrap_or_else(|| seg.read(ptr, true));
            let value = match got {
                Ok(Some(v)) => v,
                Ok(None) => {
                    return Err(Error::corruption(
                        &path,
                        ptr.offset,
                        "a value being moved fails its checksum",
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(Error::corruption(
                        &path,
                        ptr.offset,
                        "a value being moved lies past the end of its segment",
                    ));
                }
                Err(e) => {
                    return Err(Error::io(
                        format!("reading a value to move from {}", path.display()),
                        e,
                    ));
                }
            };
            buf.resize(buf.len() + *pad as usize, 0);
            buf.extend_from_slice(&value);
        }
        o.file.append(&buf).map_err(|e| {
            Error::io(
                format!("writing {}", files::values(&inner.dir, o.number).display()),
                e,
            )
        })?;
        Ok(())
    }
}

/// `merge`, recording every file it creates in `created`.
fn merge_into(
    inner: &Inner,
    v: &Version,
    inputs: &[sync::Arc<TableFile>],
    out_level: usize,
    moving: Moving,
    created: &mut Created,
) -> Result<Option<Merged>> {
    let oldest_snapshot = inner.oldest_snapshot();
    // Value bytes moved out of journals by settling (also in `moves`).
    let mut settled = 0u64;
    let mut children: Vec<Box<dyn Cursor>> = Vec::with_capacity(inputs.len());
    for f in inputs {
        let table = inner.tables.get(f)?;
        children.push(Box::new(table_cursor(&table, Dir::Forward, None)));
    }
    let mut merged = MergeCursor::new(children, Dir::Forward);
    let mut outputs = Vec::new();
    let mut writer: Option<(u64, TableWriter)> = None;
    let mut current: Option<Vec<u8>> = None;
    // Seqno of the previous (newer) entry of the current user key.
    let mut newer_seqno = u64::MAX;
    let mut dead = std::collections::BTreeMap::<u64, u64>::new();
    let mut moved = std::collections::BTreeMap::<u64, u64>::new();
    let mut dropped = 0u64;
    let mut moves = Moves::default();
    let mut ptr_buf = Vec::new();
    // A settling step cut short gives up unless it has moved as many value
    // bytes as its inputs hold: finishing would rewrite the tables for
    // less than that. At close it always gives up.
    let input_bytes: u64 = inputs.iter().map(|f| f.size).sum();
    while merged.advance()? {
        if let Moving::WhileQuiet(q) = moving
            && !q.holds()
            && (moves.moved_bytes < input_bytes || q.closing())
        {
            return Ok(None);
        }
        let ikey = merged.key();
        let (user, tag) = key::split(ikey)
            .ok_or_else(|| Error::corruption(&inner.dir, 0, "internal key shorter than its tag"))?;
        let seqno = key::tag_seqno(tag);
        if current.as_deref() != Some(user) {
            if let Some((_, w)) = &writer
                && w.estimated_size() >= inner.opts.table_bytes
            {
                outputs.push(finish(inner, writer.take(), out_level)?);
            }
            current = Some(user.to_vec());
            newer_seqno = u64::MAX;
        }
        let shadowed = newer_seqno <= oldest_snapshot;
        let dead_tombstone = key::tag_kind(tag) == Kind::Delete as u8
            && seqno <= oldest_snapshot
            && is_base_level(v, out_level, user);
        newer_seqno = seqno;
        if shadowed || dead_tombstone {
            dropped += 1;
            if key::tag_kind(tag) == Kind::Pointer as u8 {
                let ptr = ValuePtr::decode(merged.value()).ok_or_else(|| {
                    Error::corruption(&inner.dir, 0, "malformed value pointer in a table")
                })?;
                *dead.entry(ptr.segment).or_default() += u64::from(ptr.len);
            }
            continue;
        }
        if writer.is_none() {
            let number = inner.new_file_number();
            created.tables.push(number);
            let path = files::table(&inner.dir, number);
            let file = inner
                .fs
                .create(&path)
                .map_err(|e| Error::io(format!("creating table {}", path.display()), e))?;
            let opts = &inner.table_opts;
            writer = Some((
                number,
                TableWriter::new(file, path, opts).owned_by(opts.db_id, number),
            ));
        }
        // Value GC: a pointer into a segment that is mostly dead moves its
        // value to this compaction's values file; settling also moves
        // every value still in a journal (written in arrival order), so
        // the values file holds them in key order. The null policy
        // (ratio 0) moves nothing.
        // A background compaction moves at most its allowances, a
        // settling step only while the database is quiet; later ones move
        // the rest.
        let gc = inner.opts.value_gc_live_ratio;
        let is_pointer = key::tag_kind(tag) == Kind::Pointer as u8;
        let may_move =
            moving.may_collect(moves.moved_bytes - settled) || moving.may_settle(settled);
        let move_one = (gc > 0.0 && is_pointer && may_move)
            .then(|| ValuePtr::decode(merged.value()))
            .flatten()
            .and_then(|p| {
                let seg = v.segments.get(&p.segment)?;
                let collect =
                    seg.mostly_dead(gc) && moving.may_collect(moves.moved_bytes - settled);
                let settle = !collect && seg.file.in_write_order() && moving.may_settle(settled);
                (collect || settle).then(|| (p, seg.file.clone(), settle))
            });
        if let Some((ptr, seg, settles)) = move_one {
            if settles {
                settled += u64::from(ptr.len);
            }
            let to = moves.add(inner, seg, ptr, created)?;
            *dead.entry(ptr.segment).or_default() += u64::from(ptr.len);
            *moved.entry(to.segment).or_default() += u64::from(to.len);
            ptr_buf.clear();
            to.encode(&mut ptr_buf);
            if let Some((_, w)) = writer.as_mut() {
                w.add(ikey, &ptr_buf)?;
            }
        } else if let Some((_, w)) = writer.as_mut() {
            w.add(ikey, merged.value())?;
        }
    }
    if writer.is_some() {
        outputs.push(finish(inner, writer, out_level)?);
    }
    // Moved values are durable before the edit that points to them.
    moves.drain(inner)?;
    inner
        .counters
        .value_bytes_moved
        .fetch_add(moves.moved_bytes, Ordering::Relaxed);
    inner
        .counters
        .value_bytes_settled
        .fetch_add(settled, Ordering::Relaxed);
    let mut values = moves.out;
    for o in &mut values {
        o.file.sync().map_err(|e| {
            Error::io(
                format!("syncing {}", files::values(&inner.dir, o.number).display()),
                e,
            )
        })?;
    }
    if !outputs.is_empty() || !values.is_empty() {
        inner
            .sync_dir()
            .map_err(|e| Error::io("syncing the database directory", e))?;
    }
    Ok(Some(Merged {
        tables: outputs,
        dead: dead.into_iter().collect(),
        moved: moved.into_iter().collect(),
        dropped,
    }))
}

fn finish(inner: &Inner, writer: Option<(u64, TableWriter)>, level: usize) -> Result<TableRecord> {
    let (number, w) = writer.ok_or_else(|| Error::InvalidArgument("internal: no writer".into()))?;
    let _ = inner;
    let s = w.finish()?;
    Ok(TableRecord {
        level,
        number,
        size: s.file_size,
        entries: s.entries,
        smallest: s.smallest,
        largest: s.largest,
    })
}

#[cfg(test)]
mod tests {
    use super::{L0Triggers, SETTLE_PER_COMPACTION_MAX, gc_allowance, padding, settle_allowance};
    use crate::format::vptr::PAGE;

    /// While level-0 merges meet only new keys, compaction starts at the
    /// new-keys count and the slowdown and stop move up with it: a load
    /// is not slowed before its first merge could run.
    #[test]
    fn new_keys_move_every_level_0_trigger_up_together() {
        let opts = crate::Options::default();
        let base = L0Triggers::new(&opts, false);
        assert_eq!((base.compact, base.slowdown, base.stop), (4, 8, 12));
        let new = L0Triggers::new(&opts, true);
        assert_eq!((new.compact, new.slowdown, new.stop), (16, 20, 24));
        let same = crate::Options {
            l0_compaction_trigger_new_keys: 4,
            ..crate::Options::default()
        };
        let t = L0Triggers::new(&same, true);
        assert_eq!((t.compact, t.slowdown, t.stop), (4, 8, 12));
    }

    /// A full compaction that succeeds lifts a pause left by a background
    /// compaction that ran out of space: after it, no level may be over
    /// its target, and then nothing else would lift the pause.
    #[test]
    fn a_full_compaction_lifts_a_stale_pause() {
        let fs = crate::io::MemFs::new();
        let opts = crate::Options {
            fs: std::sync::Arc::new(fs),
            background_compaction: false,
            ..crate::Options::default()
        };
        let db = crate::Db::open(std::path::Path::new("/db"), opts).expect("open");
        for i in 0..3 {
            db.put(format!("k{i}"), b"v").expect("put");
            db.flush().expect("flush");
        }
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert!(
            db.inner()
                .background_failed(crate::Error::io("a background compaction", full))
        );
        assert!(db.flush().is_err(), "the pause is reported");
        super::compact_all(db.inner()).expect("full compaction");
        assert!(db.stats().background_paused.is_none());
        db.flush().expect("flush after the full compaction");
    }

    /// A compaction may move the floor, or as much as the writes since the
    /// one before times the pace, whichever is more.
    #[test]
    fn gc_allowance_keeps_pace_with_writes() {
        let opts = crate::Options {
            value_gc_bytes_per_compaction: 64 << 20,
            value_gc_pace: 1.0,
            ..crate::Options::default()
        };
        assert_eq!(gc_allowance(&opts, 0), 64 << 20);
        assert_eq!(gc_allowance(&opts, 10 << 20), 64 << 20);
        assert_eq!(gc_allowance(&opts, 300 << 20), 300 << 20);
        let half = crate::Options {
            value_gc_pace: 0.5,
            ..opts.clone()
        };
        assert_eq!(gc_allowance(&half, 300 << 20), 150 << 20);
        let unpaced = crate::Options {
            value_gc_pace: 0.0,
            ..opts
        };
        assert_eq!(gc_allowance(&unpaced, 1 << 40), 64 << 20);
    }

    /// Settling beside writes follows the scans' random reads, bounded by
    /// the writes since the compaction before and by a cap per
    /// compaction; at ratio 0 nothing settles.
    #[test]
    fn settle_allowance_follows_scans_bounded_by_writes() {
        let opts = crate::Options::default();
        assert_eq!(opts.settle_for_scans, 1.0);
        assert_eq!(settle_allowance(&opts, 0, 100 << 20), 0, "no scan");
        assert_eq!(settle_allowance(&opts, 100 << 20, 0), 0, "no write");
        assert_eq!(settle_allowance(&opts, 30 << 20, 100 << 20), 30 << 20);
        assert_eq!(settle_allowance(&opts, 100 << 20, 30 << 20), 30 << 20);
        assert_eq!(
            settle_allowance(&opts, 10 << 30, 10 << 30),
            SETTLE_PER_COMPACTION_MAX
        );
        let half = crate::Options {
            settle_for_scans: 0.5,
            ..opts.clone()
        };
        assert_eq!(settle_allowance(&half, 40 << 20, 100 << 20), 20 << 20);
        let off = crate::Options {
            settle_for_scans: 0.0,
            ..opts
        };
        assert_eq!(settle_allowance(&off, 100 << 20, 100 << 20), 0);
    }

    /// Values are padded onto page boundaries only where that saves a
    /// page per read and costs at most an eighth of the value.
    #[test]
    fn values_are_padded_to_pages_only_when_it_pays() {
        // A 4 KiB value: aligned as it is, or padded onto the next page
        // when the padding is small (a read then takes one page, not two).
        assert_eq!(padding(0, PAGE), 0);
        assert_eq!(padding(8 * PAGE, PAGE), 0);
        assert_eq!(padding(PAGE - 100, PAGE), 100);
        // Padding of more than an eighth of the value is not paid.
        assert_eq!(padding(100, PAGE), 0);
        // A value that fits in the rest of its page needs none.
        assert_eq!(padding(100, 3000), 0);
        // 3000 bytes across a boundary: the 1096 bytes to align it are
        // more than an eighth of it.
        assert_eq!(padding(3000, 3000), 0);
        // 7.9 KiB straddling three pages, two would do: 200 bytes pad it.
        assert_eq!(padding(PAGE - 200, 2 * PAGE - 100), 200);
        // A small value crossing a page only for its last few bytes moves
        // onto the next page; one crossing further stays.
        assert_eq!(padding(1, 100), 0);
        assert_eq!(padding(PAGE - 1, 100), 1);
        assert_eq!(padding(PAGE - 50, 100), 0);
        // Every padded value spans exactly the pages its length needs.
        for off in (0..3 * PAGE).step_by(97) {
            for len in [1000, PAGE, PAGE + 1, 3 * PAGE - 7] {
                let pad = padding(off, len);
                let at = off + pad;
                if pad > 0 {
                    assert_eq!((at % PAGE + len).div_ceil(PAGE), len.div_ceil(PAGE));
                    assert!(pad <= len / 8);
                }
            }
        }
    }
}
