//! The open journal: the file groups are appended to, with what belongs to
//! it — its value streams, its background sync, its durability mark and
//! the log of recent writes that commit checks read. One per database,
//! behind `Inner::journal`; its fields change only through these methods.
//!
//! An append, sync or pre-write that fails leaves the journal's tail
//! unknown: appending after it could put acknowledged batches behind
//! garbage, where recovery would not reach them. Such a failure poisons
//! the journal (every later use gets `Error::Poisoned`) and comes back as
//! a [`Failure`] the caller hands to `Inner::journal_failed`, which
//! poisons the handle too. A full device met before anything was
//! appended (reserving blocks, writing zeros ahead) poisons nothing.

use crate::error::{Error, Result};
use crate::io::FileWrite;
use crate::txn::recent::RecentWrites;
use crate::version::streams::Streams;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

/// An unsynced journal starts a background sync of itself each time it
/// has grown this much since the last (at most one in flight), so that
/// the sync that seals a full journal — every writer waits for it — finds
/// only the last few MiB not yet durable. On this machine's disk, sealing
/// a 64 MiB journal took 50–90 ms without it.
pub(crate) const PRESYNC_BYTES: u64 = 8 << 20;

/// Journal blocks a group reserves past its own (`FileWrite::reserve`):
/// one `fallocate` per this many bytes appended.
const RESERVE_AHEAD: u64 = 4 << 20;

/// A synced commit that grows the journal pre-writes this many times its
/// own bytes ahead (`Options::journal_prewrite`), within
/// `PREWRITE_MIN..=PREWRITE_MAX`: one extra sync with a size change per
/// ~64 synced groups, and for a lone synced write among unsynced ones at
/// most 64 times its bytes of zeros.
const PREWRITE_GROUPS: u64 = 64;
const PREWRITE_MIN: u64 = 16 << 10;
const PREWRITE_MAX: u64 = 4 << 20;

/// A journal operation that failed: what it was, the error, and whether
/// the journal is poisoned by it (its tail unknown).
pub(crate) struct Failure {
    /// What failed, as the handle's error names it ("journal sync").
    pub what: &'static str,
    /// What was being done, as the caller's error names it ("syncing the
    /// journal").
    pub doing: &'static str,
    pub error: io::Error,
    pub poisoned: bool,
}

pub(crate) struct Journal {
    /// `None` once the database is closed.
    file: Option<Box<dyn FileWrite>>,
    number: u64,
    /// Set when an append or sync failed: the journal's tail is unknown,
    /// so nothing may be appended or synced after it. Checked under the
    /// journal's lock by every user, so a writer that passed the
    /// handle-wide check earlier cannot slip by.
    poisoned: bool,
    /// Highest seqno known durable in this journal (or before it): the
    /// durability mark written into each record, which lets recovery tell
    /// damage to synced records from an ordinary torn tail.
    synced_seqno: u64,
    /// Fingerprints of recently written keys, for commit checks
    /// (`txn/recent.rs`); recorded by the leader once a transaction has
    /// begun (`Inner::txn_begun`).
    recent: RecentWrites,
    /// A background sync of this journal in flight (`PRESYNC_BYTES`).
    presync: Option<JoinHandle<io::Result<()>>>,
    /// The next background sync starts once the journal is this long.
    presync_at: u64,
    /// The journal's value streams (`Options::value_partitions`).
    streams: Option<Arc<Streams>>,
}

impl Journal {
    /// Journal `number`, open for appends in `file`, with everything up
    /// to `synced_seqno` durable.
    pub fn new(
        file: Box<dyn FileWrite>,
        number: u64,
        synced_seqno: u64,
        streams: Option<Arc<Streams>>,
    ) -> Journal {
        Journal {
            file: Some(file),
            number,
            poisoned: false,
            synced_seqno,
            recent: RecentWrites::new(synced_seqno + 1),
            presync: None,
            presync_at: PRESYNC_BYTES,
            streams,
        }
    }

    pub fn number(&self) -> u64 {
        self.number
    }

    /// The durability mark records carry (`Journal::synced_seqno`).
    pub fn synced_seqno(&self) -> u64 {
        self.synced_seqno
    }

    pub fn streams(&self) -> Option<&Arc<Streams>> {
        self.streams.as_ref()
    }

    /// `Ok` if groups may be appended: not poisoned, not closed.
    pub fn usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned(
                "an earlier journal write or sync failed".into(),
            ));
        }
        if self.file.is_none() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Bytes appended so far (0 once closed).
    pub fn len(&self) -> u64 {
        self.file.as_ref().map_or(0, |f| f.len())
    }

    /// Whether the journal with its value streams holds `limit` bytes or
    /// more (a full journal seals its memtable).
    pub fn is_full(&self, limit: u64) -> bool {
        let streamed = self.streams.as_ref().map_or(0, |s| s.bytes());
        let cut_due = self.streams.as_ref().is_some_and(|s| s.cut_due());
        self.file
            .as_ref()
            .is_some_and(|f| cut_due || f.len() + streamed >= limit)
    }

    pub fn recent(&self) -> &RecentWrites {
        &self.recent
    }

    pub fn recent_mut(&mut self) -> &mut RecentWrites {
        &mut self.recent
    }

    /// Lends the recent-writes log out (to a worker recording a group's
    /// keys), leaving an empty one from `next` in its place until
    /// `give_back_recent`.
    pub fn lend_recent(&mut self, next: u64) -> RecentWrites {
        std::mem::replace(&mut self.recent, RecentWrites::new(next))
    }

    pub fn give_back_recent(&mut self, recent: RecentWrites) {
        self.recent = recent;
    }

    fn file(&mut self) -> Result<&mut Box<dyn FileWrite>> {
        self.file.as_mut().ok_or(Error::Closed)
    }

    /// Marks the journal poisoned by `error`.
    fn poison(&mut self, what: &'static str, doing: &'static str, error: io::Error) -> Failure {
        self.poisoned = true;
        Failure {
            what,
            doing,
            error,
            poisoned: true,
        }
    }

    /// Waits for the background sync in flight, if any: its failure is a
    /// failed sync of the journal (the kernel reports a writeback error
    /// once, possibly only to it), so a sync must not succeed past it.
    pub fn join_presync(&mut self) -> std::result::Result<(), Failure> {
        join_presync(&mut self.presync)
            .map_err(|e| self.poison("journal sync", "syncing the journal", e))
    }

    /// Whether an unsynced group of `group_bytes` takes the journal past
    /// the next background sync's start, with none still running (the
    /// device is behind: waiting for it would stall writers).
    pub fn presync_due(&self, group_bytes: u64) -> bool {
        self.len() + group_bytes >= self.presync_at
            && self.presync.as_ref().is_none_or(|p| p.is_finished())
    }

    /// Reserves blocks for `group_bytes` more before any of them is
    /// appended: a full device refuses the group here, with the journal
    /// as it was, instead of failing a write of it later (the staged
    /// journal's flusher, a tail write), which would poison the handle.
    pub fn reserve(&mut self, group_bytes: u64) -> std::result::Result<(), Failure> {
        let file = self.file.as_mut().expect("checked usable");
        let end = file.len() + group_bytes;
        file.reserve(end, RESERVE_AHEAD).map_err(|error| Failure {
            what: "journal reserve",
            doing: "reserving journal space",
            error,
            poisoned: false,
        })
    }

    /// Pre-writes zeros ahead of a synced group of `group_bytes` that
    /// grows the journal (`Options::journal_prewrite`), up to `limit`
    /// bytes in all; true if it did. Its sync covers the appends before
    /// it: a failure leaves their durability unknown, as a failed journal
    /// sync does. A full device met while writing the zeros, before any
    /// sync, leaves the journal as it was: the group fails with nothing
    /// appended and writes go on once space returns
    /// (docs/durability.md §Full disk).
    pub fn prewrite(&mut self, group_bytes: u64, limit: u64) -> std::result::Result<bool, Failure> {
        let file = self.file.as_mut().expect("checked usable");
        let need = file.len() + group_bytes;
        if need <= file.size() {
            return Ok(false);
        }
        let ahead = (group_bytes * PREWRITE_GROUPS).clamp(PREWRITE_MIN, PREWRITE_MAX);
        let up_to = (need + ahead).min(limit.max(need));
        match file.prewrite(up_to.next_multiple_of(PREWRITE_MIN)) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::StorageFull => Err(Failure {
                what: "journal pre-write",
                doing: "pre-writing the journal",
                error,
                poisoned: false,
            }),
            Err(e) => Err(self.poison("journal pre-write", "pre-writing the journal", e)),
        }
    }

    /// Appends one group's records through `append`, which must append
    /// exactly `bytes`.
    pub fn append(
        &mut self,
        bytes: u64,
        append: impl FnOnce(&mut dyn FileWrite) -> io::Result<()>,
    ) -> std::result::Result<(), Failure> {
        let file = self.file.as_mut().expect("checked usable");
        let base = file.len();
        match append(&mut **file) {
            Ok(()) => {
                assert_eq!(
                    file.len(),
                    base + bytes,
                    "the group's records fill the journal from its old end to its new"
                );
                Ok(())
            }
            Err(e) => Err(self.poison("journal append", "appending to the journal", e)),
        }
    }

    /// Starts a background sync of what was appended so far, and sets
    /// when the next one is due; true if one started (a backend may have
    /// none).
    pub fn start_presync(&mut self) -> bool {
        let file = self.file.as_mut().expect("checked usable");
        self.presync_at = file.len() + PRESYNC_BYTES;
        self.presync = file.background_sync().and_then(|job| {
            std::thread::Builder::new()
                .name("cairndb-presync".into())
                .spawn(job)
                .ok()
        });
        self.presync.is_some()
    }

    /// Syncs the value streams, then the journal: a sync that vouches
    /// for records vouches for the values they point to. On success
    /// every seqno below `next` is durable.
    pub fn sync(&mut self, next: u64) -> std::result::Result<(), Failure> {
        let synced = sync_streams(self.streams.as_deref()).and_then(|()| {
            self.file
                .as_mut()
                .map_or(Err(io::Error::other("closed")), |f| f.sync())
        });
        match synced {
            Ok(()) => {
                self.synced_seqno = next - 1;
                Ok(())
            }
            Err(e) => Err(self.poison("journal sync", "syncing the journal", e)),
        }
    }

    /// Ends the journal's appends for a seal: waits for the background
    /// sync, seals the value streams (a batch placed in them from now on
    /// is committed with its values inline, `Pending::rep_for`), cuts off
    /// pre-written zeros (only the newest journal may end in anything but
    /// an intact record: recovery's torn-tail rule) and syncs. Everything
    /// up to `published` is then durable.
    pub fn seal(&mut self, published: u64) -> Result<std::result::Result<(), Failure>> {
        self.usable()?;
        let presynced = join_presync(&mut self.presync);
        let streams = self.streams.clone();
        let file = self.file()?;
        let synced = presynced
            .and_then(|()| streams.as_ref().map_or(Ok(()), |s| s.seal()))
            .and_then(|()| file.trim().and_then(|()| file.sync()));
        Ok(match synced {
            Ok(()) => {
                self.synced_seqno = published;
                Ok(())
            }
            Err(e) => Err(self.poison("journal sync", "syncing the journal", e)),
        })
    }

    /// Goes on in journal `number`, open in `file`, with its `streams`,
    /// after `seal`.
    pub fn switch_to(
        &mut self,
        file: Box<dyn FileWrite>,
        number: u64,
        streams: Option<Arc<Streams>>,
    ) {
        assert!(number > self.number, "journal numbers only grow");
        assert!(!self.poisoned, "a poisoned journal is never sealed");
        self.file = Some(file);
        self.number = number;
        self.presync_at = PRESYNC_BYTES;
        self.streams = streams;
    }

    /// Closes the journal for the database's close: seals its streams,
    /// cuts off pre-written zeros and syncs, unless the journal itself
    /// failed (a failure elsewhere leaves it sound, and its unsynced
    /// writes must still be made durable). Returns its number and length
    /// if it was synced whole: what a clean close records.
    pub fn close(&mut self) -> Result<Option<(u64, u64)>> {
        let presynced = join_presync(&mut self.presync);
        let synced = match self.file.take() {
            Some(mut f) if !self.poisoned => self
                .streams
                .as_ref()
                .map_or(Ok(()), |s| s.seal())
                .and_then(|()| f.trim())
                .and_then(|()| f.sync())
                .map(|()| Some((self.number, f.len())))
                .map_err(|e| Error::io("syncing the journal on close", e)),
            _ => Ok(None),
        };
        presynced.map_err(|e| Error::io("syncing the journal on close", e))?;
        synced
    }
}

/// Syncs a journal's value streams that took values since their last sync.
fn sync_streams(streams: Option<&Streams>) -> io::Result<()> {
    streams.map_or(Ok(()), |s| s.sync_dirty())
}

/// Waits for a journal's background sync, if one is in flight, and
/// returns its result.
fn join_presync(presync: &mut Option<JoinHandle<io::Result<()>>>) -> io::Result<()> {
    match presync.take() {
        Some(job) => job
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("background journal sync panicked"))),
        None => Ok(()),
    }
}
