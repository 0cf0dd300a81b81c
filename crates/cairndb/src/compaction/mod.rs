//! Leveled compaction: merging tables into the next level.
//!
//! Picking: level 0 is scored by table count against
//! `l0_compaction_trigger`, or `l0_compaction_trigger_new_keys` while
//! level-0 merges drop under `L0_DROPS_MIN` of the entries they read from
//! level 0 (a load of new keys: the merge's rewrite of level 1 buys
//! nothing but fewer tables to search; `L0Triggers`), level i >= 1 by
//! bytes against
//! `level1_bytes * level_multiplier^(i-1)`; the highest score >= 1 is
//! compacted. Below its trigger, level 0 also merges once reads through
//! several of its tables have paid for it (`pick::ProbeDue`), its
//! outputs' blocks put into the block cache as they are written. Level 0
//! compacts all its tables with the overlapping level-1
//! tables; a deeper level compacts one table (round robin through its key
//! range) with the overlapping tables of the next level. A single table
//! with nothing below it is moved by a manifest edit alone.
//!
//! Merging keeps, per user key, the newest version and every older version
//! some snapshot may still read (a read point between it and the next
//! newer version, `ReadPoints::reads`); a tombstone is dropped once no snapshot
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
//!
//! Settling paid for by short scans: while no compaction is due, a step
//! as above also runs once short scans have read enough values at random
//! from journals (`settle::ReadDue`), beside the reads and writes that go
//! on, settling no more than those reads paid for.

mod drop;
mod gc;
mod merge;
mod pick;
mod quiet;
mod settle;
mod warm;

use crate::engine::Inner;
use crate::error::Result;
use crate::flush;
use crate::format::manifest::Edit;
use crate::limits::LEVELS;
use gc::{Moving, gc_allowance};
use merge::{compact, log_merge};
pub(crate) use pick::{L0Triggers, write_pressure};
use pick::{ProbeDue, scores};
pub(crate) use settle::settle_now;
use settle::{Idle, ReadDue, SettleDue, settle_step, settle_step_for_reads};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
pub(crate) use warm::warm_later;
use warm::{WARM_AFTER_QUIET, WARM_READS};

/// What the compaction thread does next.
enum Work {
    /// Remove the tables of dropped keyspaces.
    Drop,
    /// A compaction some level's score asks for, or (`for_reads`) the
    /// level-0 merge reads paid for (`ProbeDue`).
    Compact {
        for_reads: bool,
    },
    Warm,
    /// A settling step short scans paid for (`ReadDue`).
    SettleForReads,
    Settle,
}

/// The compaction thread: compacts while some level is over its target,
/// reads written values back into the page cache once writes pause, and
/// settles values while the database is idle.
pub(crate) fn run(inner: &Inner) {
    let mut thread = Thread::new(inner);
    while let Some(work) = thread.next(inner) {
        let result = {
            let _guard = inner.compaction_lock.lock();
            thread.work(inner, work)
        };
        thread.done(inner, result);
    }
}

/// What the compaction thread keeps between its jobs.
struct Thread {
    /// Where the next compaction of each level starts (round robin).
    pointer: [pick::Pointer; LEVELS],
    /// The wait before retrying work paused by a full device.
    backoff: Duration,
    /// Journal bytes appended when the compaction before began.
    appended_before: u64,
    settle_due: SettleDue,
    read_due: ReadDue,
    probe_due: ProbeDue,
    idle: Idle,
    /// Journal bytes last seen appended, and since when no more were.
    writes: (u64, Instant),
    /// Values read through the page cache when written values were last
    /// read back (`warm`).
    reads_at_warm: u64,
}

impl Thread {
    fn new(inner: &Inner) -> Thread {
        let appended = inner.counters.journal_bytes.load(Ordering::Relaxed);
        Thread {
            pointer: Default::default(),
            backoff: flush::RETRY_MIN,
            appended_before: appended,
            settle_due: SettleDue::new(inner),
            read_due: ReadDue::new(inner),
            probe_due: ProbeDue::new(inner),
            idle: Idle::new(inner),
            writes: (appended, Instant::now()),
            reads_at_warm: inner.policy.page_cache_reads(),
        }
    }

    /// Waits for the next job; `None` once the database is closing.
    fn next(&mut self, inner: &Inner) -> Option<Work> {
        let mut bg = inner.bg.lock();
        loop {
            if bg.shutdown {
                return None;
            }
            let appended = inner.counters.journal_bytes.load(Ordering::Relaxed);
            if appended != self.writes.0 {
                self.writes = (appended, Instant::now());
            }
            self.settle_due.look(inner);
            self.read_due.look(inner);
            if bg.error.is_none()
                && let Some(work) = self.due(inner, bg.paused.is_none())
            {
                return Some(work);
            }
            inner.bg_cv.wait_for(&mut bg, Duration::from_millis(200));
        }
    }

    /// The job due now, if any: a read-back first (handing it to a worker
    /// takes no time here, and while writes go on a compaction is due
    /// most of the time), then a compaction, then (unless background work
    /// is paused) a settling step that short scans paid for, then one
    /// while idle.
    fn due(&mut self, inner: &Inner, unpaused: bool) -> Option<Work> {
        let v = inner.state.read().version.clone();
        if v.levels
            .iter()
            .flatten()
            .any(|f| v.keyspaces.dropped(f.keyspace))
        {
            return Some(Work::Drop);
        }
        let reads = inner.policy.page_cache_reads();
        let reading = reads.saturating_sub(self.reads_at_warm) >= WARM_READS;
        if (self.writes.1.elapsed() >= WARM_AFTER_QUIET || reading)
            && inner
                .to_warm
                .lock()
                .iter()
                .any(|n| v.segments.contains_key(n))
        {
            self.reads_at_warm = reads;
            return Some(Work::Warm);
        }
        self.probe_due.look(inner, &v);
        if scores(&v, &inner.opts, L0Triggers::now(inner).compact)
            .iter()
            .any(|s| *s >= 1.0)
        {
            return Some(Work::Compact { for_reads: false });
        }
        if unpaused && self.probe_due.ready(&v) {
            return Some(Work::Compact { for_reads: true });
        }
        if unpaused && self.read_due.ready(inner, &v) {
            return Some(Work::SettleForReads);
        }
        (unpaused && self.idle.due(inner, &v)).then_some(Work::Settle)
    }

    /// Runs `work` (under the compaction lock).
    fn work(&mut self, inner: &Inner, work: Work) -> Result<()> {
        let v = inner.state.read().version.clone();
        match work {
            Work::Drop => drop::remove_dropped(inner, &v),
            Work::Compact { for_reads } => {
                let appended = inner.counters.journal_bytes.load(Ordering::Relaxed);
                let paced = Moving::Paced {
                    gc: gc_allowance(&inner.opts, appended - self.appended_before),
                    settle: self.settle_due.take(),
                };
                self.appended_before = appended;
                let mut triggers = L0Triggers::now(inner).compact;
                if for_reads {
                    // Level 0 scores 1 as it is; a level scoring more
                    // (none did when this was due) goes first.
                    self.probe_due.spent();
                    triggers = triggers.min(v.l0_depth()).max(1);
                }
                match pick::pick(&v, &inner.opts, triggers, &mut self.pointer) {
                    Some(mut c) => {
                        c.warm = for_reads && c.level == 0;
                        compact(inner, &v, c, paced)
                    }
                    None => Ok(()),
                }
            }
            Work::Warm => {
                warm::warm(inner);
                Ok(())
            }
            Work::SettleForReads => {
                settle_step_for_reads(inner, &v, &mut self.idle, &mut self.read_due)
            }
            Work::Settle => settle_step(inner, &v, &mut self.idle),
        }
    }

    /// After a job: a success lifts a pause; a full device pauses
    /// background work, waiting longer each time; anything else is
    /// sticky (`Inner::background_failed`).
    fn done(&mut self, inner: &Inner, result: Result<()>) {
        match result {
            Ok(()) => {
                self.backoff = flush::RETRY_MIN;
                inner.background_succeeded();
            }
            Err(e) => {
                if inner.background_failed(e) {
                    flush::pause(inner, self.backoff);
                    self.backoff = (self.backoff * 2).min(flush::RETRY_MAX);
                }
            }
        }
        inner.notify_bg();
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
    drop::remove_dropped(inner, &v)?;
    let v = inner.state.read().version.clone();
    if v.table_count() == 0 {
        return Ok(());
    }
    let target = (1..LEVELS)
        .rev()
        .find(|&l| !v.levels[l].is_empty())
        .unwrap_or(1);
    let keyspaces: std::collections::BTreeSet<u32> =
        v.levels.iter().flatten().map(|f| f.keyspace).collect();
    // One merge and one edit per keyspace: a merge never mixes them.
    for keyspace in keyspaces {
        let mut edit = Edit::default();
        let mut all = Vec::new();
        for (level, files) in v.levels.iter().enumerate() {
            for f in files.iter().filter(|f| f.keyspace == keyspace) {
                edit.removed.push((level, f.number));
                all.push(f.clone());
            }
        }
        merge::merge(inner, &v, keyspace, &all, target, Moving::All, false)?
            .expect("only a settling step gives up a merge")
            .into_edit(&mut edit);
        let moved: Vec<u64> = edit.value_live.iter().map(|&(n, _)| n).collect();
        log_merge(inner, edit, true)?;
        inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
        warm_later(inner, &moved);
    }
    // A background compaction that ran out of space while this one waited
    // for the lock paused background work; this merge did its work, and
    // may have left the thread none to retry (no level over its target),
    // so nothing else would lift the pause and every flush would keep
    // reporting the old error.
    inner.background_succeeded();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::settle::{SETTLE_PER_COMPACTION_MAX, settle_allowance};
    use super::{L0Triggers, gc_allowance};

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
}
