//! Telling foreground work: whether the database has been left alone,
//! which settling steps and the value GC they drive give way to.

use crate::engine::Inner;
use std::sync::atomic::Ordering;

/// Foreground work seen so far: journal bytes appended, separated values
/// read and `Db::compact` calls. Gets and scans served from tables and
/// memtables alone are not counted; they do not use the device the way
/// settling does.
pub(super) fn activity(inner: &Inner) -> u64 {
    let (cached, direct, buffered) = inner.policy.counts();
    inner.counters.journal_bytes.load(Ordering::Relaxed)
        + cached
        + direct
        + buffered
        + inner.counters.compact_calls.load(Ordering::Relaxed)
}

/// True while no foreground work has been seen since it was made and the
/// database is not closing; once false, false for good.
pub(super) struct Quiet<'a> {
    inner: &'a Inner,
    /// What counts as foreground work: `activity`, or nothing.
    seen: fn(&Inner) -> u64,
    at: u64,
    broken: std::cell::Cell<bool>,
}

impl<'a> Quiet<'a> {
    pub(super) fn new(inner: &'a Inner) -> Self {
        Quiet {
            inner,
            seen: activity,
            at: activity(inner),
            broken: std::cell::Cell::new(false),
        }
    }

    /// Quiet until the database closes, whatever is read and written
    /// (a settling step that scans paid for, `settle::ReadDue`).
    pub(super) fn until_close(inner: &'a Inner) -> Self {
        Quiet {
            inner,
            seen: |_| 0,
            at: 0,
            broken: std::cell::Cell::new(false),
        }
    }

    pub(super) fn closing(&self) -> bool {
        self.inner.closing.load(Ordering::Relaxed)
    }

    pub(super) fn holds(&self) -> bool {
        if !self.broken.get() && ((self.seen)(self.inner) != self.at || self.closing()) {
            self.broken.set(true);
        }
        !self.broken.get()
    }
}
