//! The write path: group commit, journal append, memtable insert.
//!
//! `Inner::write` in steps:
//! 1. queue the batch; wait until it is first in the queue or another
//!    writer (the leader) has committed it;
//! 2. as leader, make room: pace or stall while compaction is behind, seal
//!    a full memtable and start a new journal;
//! 3. take a group of queued batches (up to `GROUP_BYTES_MAX`), give them
//!    consecutive seqnos, append them to the journal in one write, and
//!    fdatasync once if any member asked for sync;
//! 4. insert the group into the memtable and publish the last seqno;
//! 5. hand each member its result and wake the next leader.
//!
//! A failed journal append or sync poisons the handle: the journal's tail
//! is then unknown, and appending after it could put acknowledged batches
//! behind garbage, where recovery would not reach them.

pub mod batch;
pub(crate) mod queue;
#[cfg(all(test, loom))]
mod seqno_model;
pub(crate) mod streams;

use crate::db::Inner;
use crate::error::{Error, Result};
use crate::format::batch as codec;
use crate::format::key::Kind;
use crate::format::log::journal_seed;
use crate::format::vptr::ValuePtr;
use crate::limits::{GROUP_BYTES_MAX, SEQNO_MAX};
use crate::memtable::{MemWriter, Memtable};
use crate::options::WriteOptions;
use crate::txn::Validation;
use crate::txn::recent::RecentWrites;
use crate::version::files;
use crate::version::segments::SegmentFile;
use batch::WriteBatch;
use queue::Turn;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A batch waiting in the group-commit queue (`queue::GroupQueue`, which
/// also holds its result slot and wake-up).
pub(crate) struct Pending {
    rep: Vec<u8>,
    /// The batch with its large values in value streams: (the journal
    /// whose streams hold them, the batch with pointer ops in their
    /// place). Committed in that journal only; in a later one `rep`
    /// goes, values inline (`write/streams.rs`).
    placed: Option<(u64, Vec<u8>)>,
    count: u32,
    sync: bool,
    /// A transaction's conflict check, run by the leader just before the
    /// batch gets its seqnos.
    check: Option<Validation>,
    /// Set by the leader when the check failed: the batch was not written.
    rejected: crate::sync::Mutex<Option<Error>>,
    /// Set by the leader: the seqno of the batch's last op.
    assigned: std::sync::atomic::AtomicU64,
}

impl Pending {
    /// The batch as it goes into journal `journal`.
    fn rep_for(&self, journal: u64) -> &[u8] {
        match &self.placed {
            Some((placed_in, rep)) if *placed_in == journal => rep,
            _ => &self.rep,
        }
    }
}

/// Syncs the streams of a journal before the journal itself: a sync that
/// vouches for records vouches for the values they point to.
fn sync_streams(streams: &Option<Arc<streams::Streams>>) -> std::io::Result<()> {
    match streams {
        Some(s) => s.sync_dirty(),
        None => Ok(()),
    }
}

/// Longest pause a writer takes per group while compaction is behind.
const PACE_MAX: Duration = Duration::from_millis(4);
/// Longest single wait of a stalled writer before it re-checks state.
const STALL_WAIT: Duration = Duration::from_millis(10);
/// A synced commit that grows the journal pre-writes this many times its
/// own bytes ahead (`Options::journal_prewrite`), within
/// `PREWRITE_MIN..=PREWRITE_MAX`: one extra sync with a size change per
/// ~64 synced groups, and for a lone synced write among unsynced ones at
/// most 64 times its bytes of zeros.
const PREWRITE_GROUPS: u64 = 64;
const PREWRITE_MIN: u64 = 16 << 10;
const PREWRITE_MAX: u64 = 4 << 20;

/// Journal blocks a group reserves past its own (`FileWrite::reserve`):
/// one `fallocate` per this many bytes appended.
const JOURNAL_RESERVE_AHEAD: u64 = 4 << 20;

/// An unsynced journal starts a background sync of itself each time it
/// has grown this much since the last (at most one in flight), so that
/// the sync that seals a full journal — every writer waits for it — finds
/// only the last few MiB not yet durable. On this machine's disk, sealing
/// a 64 MiB journal took 50–90 ms without it.
pub(crate) const PRESYNC_BYTES: u64 = 8 << 20;

/// Waits for the journal's background sync, if one is in flight, and
/// returns its result: a failure there is a failed sync of the journal
/// (the kernel reports a writeback error once, possibly only to it).
pub(crate) fn join_presync(
    presync: &mut Option<std::thread::JoinHandle<std::io::Result<()>>>,
) -> std::io::Result<()> {
    match presync.take() {
        Some(job) => job
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("background journal sync panicked"))),
        None => Ok(()),
    }
}

fn dup(r: &Result<()>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(e.duplicate()),
    }
}

/// A synced group with at least this many ops has its memtable inserts
/// done on a worker thread while the leader waits for the fdatasync;
/// smaller groups insert faster than the hand-off costs.
const OFFLOAD_OPS_MIN: u64 = 16;

/// Which values an applied batch separates, and the journal they are in.
#[derive(Clone, Copy)]
pub(crate) struct Separate {
    /// `Options::value_separation_min`.
    pub min: usize,
    /// Number of the journal (segment) the batch was written to.
    pub segment: u64,
}

/// Inserts the ops of batch payload `rep` through `mem` with seqnos from
/// `seqno` on; returns the next seqno. With `place` = (file offset of
/// `rep`'s first byte in its journal, rule), values of at least `min`
/// bytes go in as pointers to where they lie in the journal. With
/// `recent`, each key is also recorded there for commit checks. Shared by
/// commits and journal replay, so both build the same memtable.
pub(crate) fn insert_batch(
    mem: &mut MemWriter<'_>,
    rep: &[u8],
    seqno: u64,
    place: Option<(u64, &Separate)>,
    mut recent: Option<&mut RecentWrites>,
) -> std::result::Result<u64, String> {
    let decoded = codec::decode(rep)?;
    let next = seqno + decoded.ops.len() as u64;
    let mut ptr = Vec::with_capacity(crate::format::vptr::VPTR_LEN_MAX);
    for (seqno, op) in (seqno..).zip(&decoded.ops) {
        if let Some(recent) = recent.as_deref_mut() {
            recent.record(op.key, seqno);
        }
        match place {
            Some((at, rule)) if op.kind == Kind::Put && op.value.len() >= rule.min => {
                // `op.value` borrows from `rep`, so its distance from
                // `rep`'s start is its offset within the payload.
                let within = op.value.as_ptr() as usize - rep.as_ptr() as usize;
                ptr.clear();
                ValuePtr::to(rule.segment, at + within as u64, op.value).encode(&mut ptr);
                mem.insert(op.key, seqno, Kind::Pointer, &ptr);
            }
            _ => mem.insert(op.key, seqno, op.kind, op.value),
        }
    }
    Ok(next)
}

/// The memtable inserts of one group: each accepted member's batch as it
/// lies in the group's journal buffer (or, for the split sabotage, the
/// caller's copy) with its first seqno.
struct Inserts {
    mem: Arc<Memtable>,
    /// The group's journal records, as appended, but for the bodies of
    /// large batches (`Placed::Own`), appended from their own buffers
    /// where `owns` says.
    buf: Vec<u8>,
    /// (length of `buf` before it, index in `items`) of each batch whose
    /// body is appended from its own buffer, in order.
    owns: Vec<(usize, usize)>,
    /// Bytes of the group's records in all (`buf` and the bodies).
    bytes: u64,
    separate: Separate,
    /// (member, where its batch lies, its first seqno).
    items: Vec<(Arc<Pending>, Option<Placed>, u64)>,
}

/// Batches longer than this are appended to the journal from the
/// writer's own buffer instead of being copied into the group's: a large
/// value is then held once in memory (the batch), not twice.
const GROUP_COPY_MAX: usize = 1 << 20;

/// Where a member's batch lies: in the group buffer, or (a large batch) in
/// its own `rep`; with the journal offset of its first byte.
#[derive(Clone)]
enum Placed {
    Buf(std::ops::Range<usize>, u64),
    Own(u64),
}

impl Inserts {
    /// Inserts the ops of the whole group, through one writer, and with
    /// `recent` records their keys there. Seqnos are not published here:
    /// readers skip entries above `last_seqno`, so inserting before the
    /// sync has finished shows nothing early. On an error `recent` may
    /// hold part of the group: the caller resets it.
    fn run(&self, mut recent: Option<&mut RecentWrites>) -> std::result::Result<(), String> {
        let mut mem = self.mem.writer();
        for (p, at, first) in &self.items {
            // The batch as written (its seqno set), or the caller's copy
            // (a large batch, whose seqno bytes are not set: the seqno
            // comes from `first`), or for the split sabotage the caller's
            // copy with values kept inline.
            let (rep, place) = match at {
                Some(Placed::Buf(r, at)) => (&self.buf[r.clone()], Some((*at, &self.separate))),
                Some(Placed::Own(at)) => (
                    p.rep_for(self.separate.segment),
                    Some((*at, &self.separate)),
                ),
                None => (p.rep_for(self.separate.segment), None),
            };
            insert_batch(&mut mem, rep, *first, place, recent.as_deref_mut())?;
        }
        Ok(())
    }

    /// Appends the group's records to `file`: `buf` with the large
    /// batches' bodies in their places.
    fn append_to(&self, file: &mut dyn crate::io::FileWrite) -> std::io::Result<()> {
        let mut from = 0;
        for &(upto, i) in &self.owns {
            file.append(&self.buf[from..upto])?;
            let (p, _, _) = &self.items[i];
            file.append(&p.rep_for(self.separate.segment)[8..])?;
            from = upto;
        }
        if from < self.buf.len() {
            file.append(&self.buf[from..])?;
        }
        Ok(())
    }
}

impl Inner {
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.write_checked(batch, opts, None).map(drop)
    }

    /// Writes `batch` if `check` (a transaction's conflict check) passes
    /// at commit time; `Error::Conflict` and nothing written otherwise.
    /// Returns the seqno of the batch's last op (0 for an empty batch).
    pub fn write_checked(
        &self,
        batch: WriteBatch,
        opts: &WriteOptions,
        check: Option<Validation>,
    ) -> Result<u64> {
        let count = batch.len() as u32;
        // Unsynced large values go to the value streams now, before the
        // queue: each writer appends its own, in parallel with the others.
        let placed = if !opts.sync && self.opts.value_partitions > 0 {
            let streams = self.state.read().mem.streams().cloned();
            streams.and_then(|s| {
                s.place(&batch.rep, self.opts.value_separation_min)
                    .map(|rep| (s.journal, rep))
            })
        } else {
            None
        };
        let me = Arc::new(Pending {
            rep: batch.rep,
            placed,
            count,
            sync: opts.sync,
            check,
            rejected: crate::sync::Mutex::new(None),
            assigned: std::sync::atomic::AtomicU64::new(0),
        });
        let rejected = |me: &Pending, r: Result<()>| match me.rejected.lock().take() {
            Some(e) => Err(e),
            None => r.map(|()| me.assigned.load(Ordering::Acquire)),
        };
        let mut leader = match self.queue.join(me.clone()) {
            Turn::Done(result) => return rejected(&me, result),
            Turn::Lead(leader) => leader,
        };
        // The group is taken only once there is room; a failed `make_room`
        // fails the leader's own batch alone, and the next writer leads.
        let result = self.make_room().and_then(|()| {
            let group = leader.take_group(|p| p.rep.len(), GROUP_BYTES_MAX);
            self.commit_group(&group)
        });
        let result = leader.finish(result, dup);
        rejected(&me, result)
    }

    /// Runs the conflict checks of the group's transactions, in queue
    /// order, against the committed state and against the members before
    /// them. Marks the losers `rejected`; returns which members go on.
    fn check_group(&self, group: &[Arc<Pending>], recent: &RecentWrites) -> Vec<bool> {
        if group.iter().all(|p| p.check.is_none())
            || crate::options::sabotaged!(self.opts, skip_conflict_checks)
        {
            return vec![true; group.len()];
        }
        // Under the journal lock: no commit is in flight, so a view holds
        // every committed write, and `last_seqno` is the last of them.
        let mut view = None;
        let make_view = || self.view();
        let committed = self.last_seqno.load(Ordering::Acquire);
        // The keys of the accepted members so far, borrowed from their
        // batches.
        let mut written: BTreeSet<&[u8]> = BTreeSet::new();
        // Members after the last checked one need no record of what the
        // members before them wrote.
        let last_checked = group.iter().rposition(|p| p.check.is_some());
        group
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let verdict = match &p.check {
                    Some(check) => {
                        check.run(&p.rep, committed, recent, &written, &mut view, &make_view)
                    }
                    None => Ok(()),
                };
                match verdict {
                    Ok(()) => {
                        if last_checked.is_some_and(|last| i < last)
                            && let Ok(d) = codec::decode(&p.rep)
                        {
                            written.extend(d.ops.iter().map(|op| op.key));
                        }
                        true
                    }
                    Err(e) => {
                        *p.rejected.lock() = Some(e);
                        false
                    }
                }
            })
            .collect()
    }

    /// Appends the group to the journal, syncs if asked, inserts into the
    /// memtable and publishes the seqnos. Leader only.
    fn commit_group(&self, group: &[Arc<Pending>]) -> Result<()> {
        let mut journal = self.journal.lock();
        if journal.poisoned {
            return Err(Error::Poisoned(
                "an earlier journal write or sync failed".into(),
            ));
        }
        if journal.file.is_none() {
            return Err(Error::Closed);
        }
        let accepted = self.check_group(group, &journal.recent);
        let live = || {
            group
                .iter()
                .zip(&accepted)
                .filter(|(p, ok)| **ok && p.count > 0)
                .map(|(p, _)| p)
        };
        let first = self.last_seqno.load(Ordering::Acquire) + 1;
        let mut next = first;
        let number = journal.number;
        let copied = |p: &Pending| {
            let len = p.rep_for(number).len();
            if len > GROUP_COPY_MAX { 32 } else { len + 32 }
        };
        let mut buf = Vec::with_capacity(group.iter().map(|p| copied(p)).sum());
        // Where each member's batch lies, so the memtable can point at
        // separated values where they land in the journal: their offsets
        // are those in `buf` plus the large bodies appended before them.
        let base = journal.file.as_ref().map_or(0, |f| f.len());
        let mut placed: Vec<Option<Placed>> = Vec::new();
        let mut owns: Vec<(usize, usize)> = Vec::new();
        let mut own_bytes = 0u64;
        for (i, p) in live().enumerate() {
            let rep = p.rep_for(number);
            if crate::options::sabotaged!(self.opts, split_batches) {
                next = codec::encode_split(
                    &mut buf,
                    journal_seed(journal.number, self.db_id),
                    journal.synced_seqno,
                    rep,
                    next,
                );
                placed.push(None);
                continue;
            }
            let at = buf.len() + codec::JOURNAL_BATCH_AT;
            let journal_at = base + at as u64 + own_bytes;
            let seed = journal_seed(journal.number, self.db_id);
            if rep.len() > GROUP_COPY_MAX {
                codec::encode_journal_record_head_at(
                    &mut buf,
                    seed,
                    journal.synced_seqno,
                    next,
                    rep,
                );
                owns.push((buf.len(), i));
                own_bytes += (rep.len() - 8) as u64;
                placed.push(Some(Placed::Own(journal_at)));
            } else {
                codec::encode_journal_record_at(&mut buf, seed, journal.synced_seqno, next, rep);
                placed.push(Some(Placed::Buf(at..buf.len(), journal_at)));
            }
            next += u64::from(p.count);
        }
        if next - 1 > SEQNO_MAX {
            return Err(Error::LimitExceeded {
                what: "seqno",
                actual: next - 1,
                max: SEQNO_MAX,
            });
        }
        let journal = &mut *journal;
        let streams = journal.streams.clone();
        let Some(file) = journal.file.as_mut() else {
            return Err(Error::Closed);
        };
        assert_eq!(
            base,
            file.len(),
            "the journal moved while the group was encoded"
        );
        let group_bytes = buf.len() as u64 + own_bytes;
        let sync = group.iter().any(|p| p.sync)
            && !crate::options::sabotaged!(self.opts, skip_journal_sync);
        // An unsynced group that takes the journal past `presync_at`
        // starts a background sync, unless one is still running (the
        // device is behind: waiting for it would stall writers).
        let presync_due = !sync
            && base + group_bytes >= journal.presync_at
            && journal.presync.as_ref().is_none_or(|p| p.is_finished());
        // A sync must not succeed past a failure the background sync met:
        // its result is taken first.
        if (sync || presync_due)
            && let Err(e) = join_presync(&mut journal.presync)
        {
            journal.poisoned = true;
            self.poison("journal sync", &e);
            return Err(Error::io("syncing the journal", e));
        }
        // Blocks for the group before any of it is appended: a full device
        // refuses the group here, with the journal as it was, instead of
        // failing a write of it later (the staged journal's flusher, a
        // tail write), which would poison the handle.
        if group_bytes > 0
            && let Err(e) = file.reserve(base + group_bytes, JOURNAL_RESERVE_AHEAD)
        {
            return Err(Error::io("reserving journal space", e));
        }
        if sync && self.opts.journal_prewrite && group_bytes > 0 {
            let need = base + group_bytes;
            if need > file.size() {
                let ahead = (group_bytes * PREWRITE_GROUPS).clamp(PREWRITE_MIN, PREWRITE_MAX);
                let up_to = (need + ahead).min(self.opts.journal_bytes.max(need));
                // Its sync covers the appends before it: a failure leaves
                // their durability unknown, as a failed journal sync does.
                // A full device met while writing the zeros, before any
                // sync, leaves the journal as it was: the group fails
                // with nothing appended and writes go on once space
                // returns (docs/durability.md §Full disk).
                if let Err(e) = file.prewrite(up_to.next_multiple_of(PREWRITE_MIN)) {
                    if e.kind() != std::io::ErrorKind::StorageFull {
                        journal.poisoned = true;
                        self.poison("journal pre-write", &e);
                    }
                    return Err(Error::io("pre-writing the journal", e));
                }
                self.counters.prewrites.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut seqno = first;
        let items = live()
            .zip(placed)
            .map(|(p, at)| {
                let item = (p.clone(), at, seqno);
                seqno += u64::from(p.count);
                item
            })
            .collect();
        let inserts = Arc::new(Inserts {
            mem: self.state.read().mem.clone(),
            buf,
            owns,
            bytes: group_bytes,
            separate: Separate {
                min: self.opts.value_separation_min,
                segment: journal.number,
            },
            items,
        });
        debug_assert_eq!(seqno, next);
        // Once a transaction has begun, the group's keys are recorded in
        // `journal.recent` for later commit checks (as they are
        // inserted, in one pass); before that the log just moves past the
        // group. A transaction that begins after this load pins a seqno
        // below the group's only if the group is not yet published;
        // `reset` then leaves it uncovered, and its check takes exact
        // lookups.
        let record = self.txn_begun.load(Ordering::SeqCst);
        // With a sync to wait for, a worker inserts and records while the
        // leader appends and syncs (the device's flush and the memtable's
        // cache misses overlap); nothing is published before both are
        // done. One worker: the memtable takes one writer at a time. The
        // log moves to the worker and back; the journal lock, held
        // throughout, keeps every other user out of it. Inserting before
        // the append is safe: entries above `last_seqno` are invisible,
        // and a failed append or sync poisons the handle, so their seqnos
        // are never published or given out again (and nothing is flushed
        // after a poison).
        let worker = (sync && next - first >= OFFLOAD_OPS_MIN).then(|| {
            let recent = std::mem::replace(&mut journal.recent, RecentWrites::new(next));
            let (tx, rx) = crossbeam_channel::bounded(1);
            let job = inserts.clone();
            self.workers.run(move || {
                let mut recent = recent;
                let inserted = job.run(record.then_some(&mut recent));
                let _ = tx.send((inserted, recent));
            });
            rx
        });
        // Takes the worker's result and gives the log back. A job that
        // panicked dropped its sender without a result; the log stays the
        // empty one put in its place (reset to `next`).
        let join = |journal: &mut crate::db::Journal,
                    rx: crossbeam_channel::Receiver<(
            std::result::Result<(), String>,
            RecentWrites,
        )>| match rx.recv() {
            Ok((inserted, recent)) => {
                journal.recent = recent;
                inserted
            }
            Err(_) => Err("a memtable insert job panicked".into()),
        };
        let appended = inserts.append_to(&mut **file);
        debug_assert!(
            appended.is_err() || file.len() == base + inserts.bytes,
            "the group's records fill the journal from its old end to its new"
        );
        if let Err(e) = appended {
            if let Some(rx) = worker {
                let _ = join(journal, rx);
            }
            journal.poisoned = true;
            self.poison("journal append", &e);
            return Err(Error::io("appending to the journal", e));
        }
        self.counters
            .journal_bytes
            .fetch_add(inserts.bytes, Ordering::Relaxed);
        if !inserts.items.is_empty() {
            self.counters.groups.fetch_add(1, Ordering::Relaxed);
            self.counters
                .grouped_batches
                .fetch_add(inserts.items.len() as u64, Ordering::Relaxed);
        }
        if presync_due {
            journal.presync_at = file.len() + PRESYNC_BYTES;
            journal.presync = file.background_sync().and_then(|job| {
                std::thread::Builder::new()
                    .name("cairndb-presync".into())
                    .spawn(job)
                    .ok()
            });
            if journal.presync.is_some() {
                self.counters.presyncs.fetch_add(1, Ordering::Relaxed);
            }
        }
        let inserted = match worker {
            Some(rx) => {
                let synced = sync_streams(&streams).and_then(|()| file.sync());
                let inserted = join(journal, rx);
                self.synced(journal, synced, next)?;
                (inserted, inserts)
            }
            None => {
                if sync {
                    let synced = sync_streams(&streams).and_then(|()| file.sync());
                    self.synced(journal, synced, next)?;
                }
                let inserted = inserts.run(record.then_some(&mut journal.recent));
                (inserted, inserts)
            }
        };
        let (inserted, inserts) = inserted;
        // `WriteBatch` built every batch, so they decode; if one ever did
        // not, the journal would hold seqnos that were never published.
        inserted.map_err(|d| {
            // A gap in the log must never read as "not written".
            journal.recent.reset(next);
            let e = Error::Poisoned(format!("internal: batch does not decode: {d}"));
            self.set_bg_error(e.duplicate());
            e
        })?;
        for (p, _, first) in &inserts.items {
            p.assigned
                .store(first + u64::from(p.count) - 1, Ordering::Release);
        }
        if record {
            journal
                .recent
                .bound(|| self.pins.oldest(&self.last_seqno), next);
        } else {
            journal.recent.reset(next);
        }
        self.last_seqno.store(next - 1, Ordering::Release);
        Ok(())
    }

    /// Records the outcome of the journal sync that made seqnos below
    /// `next` durable: raises the durability mark, or poisons the handle.
    fn synced(
        &self,
        journal: &mut crate::db::Journal,
        synced: std::io::Result<()>,
        next: u64,
    ) -> Result<()> {
        if let Err(e) = synced {
            journal.poisoned = true;
            self.poison("journal sync", &e);
            return Err(Error::io("syncing the journal", e));
        }
        journal.synced_seqno = next - 1;
        Ok(())
    }

    /// Ensures the memtable has room, pacing writers in proportion to
    /// compaction debt and stalling only at the hard limits. Never waits
    /// without a timeout, and gives up on background errors and shutdown,
    /// so a stall cannot deadlock.
    fn make_room(&self) -> Result<()> {
        let mut paced = false;
        loop {
            self.check_writable()?;
            // Without a compaction thread nothing would relieve level 0, so
            // pacing and the level-0 stop apply only when one runs.
            let background = self.opts.background_compaction;
            // A journal's size counts its value streams' bytes.
            let journal_full = {
                let journal = self.journal.lock();
                let streamed = journal.streams.as_ref().map_or(0, |s| s.bytes());
                journal
                    .file
                    .as_ref()
                    .is_some_and(|f| f.len() + streamed >= self.opts.journal_bytes)
            };
            let (mem_bytes, sealed, pressure, l0) = {
                let s = self.state.read();
                // A full journal counts as a full memtable.
                (
                    if journal_full {
                        self.opts.memtable_bytes
                    } else {
                        s.mem.approx_bytes()
                    },
                    s.sealed.len(),
                    s.pressure,
                    s.version.levels[0].len(),
                )
            };
            let (pressure, l0) = if background { (pressure, l0) } else { (0.0, 0) };
            if !paced && pressure > 0.0 {
                paced = true;
                let pause = PACE_MAX.mul_f64(pressure.min(1.0));
                std::thread::sleep(pause);
                self.counters
                    .slowdown_micros
                    .fetch_add(pause.as_micros() as u64, Ordering::Relaxed);
                continue;
            }
            let must_wait = l0 >= crate::compaction::L0Triggers::now(self).stop
                || (mem_bytes >= self.opts.memtable_bytes
                    && sealed >= self.opts.memtables_sealed_max);
            if must_wait {
                // Background work paused on a full device cannot make room:
                // report that rather than wait for space to come back.
                if let Some(e) = &self.bg.lock().paused {
                    return Err(e.duplicate());
                }
                self.stall();
                continue;
            }
            if mem_bytes < self.opts.memtable_bytes {
                return Ok(());
            }
            self.seal_memtable()?;
        }
    }

    /// The value streams of new journal `journal`
    /// (`Options::value_partitions`), cut at the keys `before` (the
    /// streams of the journal before it) sampled; one stream while there
    /// is no sample.
    pub(crate) fn new_streams(
        &self,
        journal: u64,
        before: Option<&streams::Streams>,
    ) -> Option<Arc<streams::Streams>> {
        let partitions = self.opts.value_partitions;
        if partitions == 0 {
            return None;
        }
        let bounds = before.map_or_else(Vec::new, |b| b.next_bounds(partitions));
        let count = bounds.len() as u64 + 1;
        let first = self.next_file.fetch_add(count, Ordering::SeqCst);
        Some(Arc::new(streams::Streams::new(
            &self.reaper,
            journal,
            first,
            bounds,
        )))
    }

    fn stall(&self) {
        let start = Instant::now();
        let mut bg = self.bg.lock();
        if bg.error.is_none() && !bg.shutdown {
            self.bg_cv.wait_for(&mut bg, STALL_WAIT);
        }
        self.counters
            .stall_micros
            .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Seals the active memtable and starts a new journal. The old journal
    /// is synced first: from here on only the newest journal may have a
    /// torn tail, which is what recovery assumes.
    pub fn seal_memtable(&self) -> Result<()> {
        let mut journal = self.journal.lock();
        if journal.poisoned {
            return Err(Error::Poisoned(
                "an earlier journal write or sync failed".into(),
            ));
        }
        // Pre-written zeros are cut off first: only the newest journal may
        // end in anything but an intact record (recovery's torn-tail rule).
        // A background sync's failure is this sync's.
        let presynced = join_presync(&mut journal.presync);
        let sealed_streams = journal.streams.clone();
        let Some(file) = journal.file.as_mut() else {
            return Err(Error::Closed);
        };
        // The streams are sealed first: a batch placed in them from now
        // on is committed with its values inline (`Pending::rep_for`).
        let synced = presynced
            .and_then(|()| sealed_streams.as_ref().map_or(Ok(()), |s| s.seal()))
            .and_then(|()| file.trim().and_then(|()| file.sync()));
        if let Err(e) = synced {
            journal.poisoned = true;
            self.poison("journal sync", &e);
            return Err(Error::io("syncing the journal", e));
        }
        // Commits append and publish under the journal lock, which this
        // holds: everything up to the published seqno is now durable.
        journal.synced_seqno = self.last_seqno.load(Ordering::Acquire);
        let number = self.new_file_number();
        let new_file = self
            .reaper
            .new_journal(number)
            .and_then(|f| self.sync_dir().map(|()| f))
            .map_err(|e| {
                let path = files::journal(&self.dir, number);
                Error::io(format!("creating journal {}", path.display()), e)
            })?;
        let reader = new_file.reader();
        let streams = self.new_streams(number, sealed_streams.as_deref());
        journal.file = Some(new_file);
        journal.number = number;
        journal.presync_at = PRESYNC_BYTES;
        journal.streams = streams.clone();
        let sealed = {
            let mut s = self.state.write();
            let segment = SegmentFile::new_journal(&self.reaper, number, reader);
            let fresh = Memtable::with_segment(segment, streams);
            let old = std::mem::replace(&mut s.mem, Arc::new(fresh));
            let mut sealed: Vec<u64> = old.segment().map(|seg| seg.number).into_iter().collect();
            if let Some(streams) = old.streams() {
                sealed.extend(streams.segments().map(|seg| seg.number));
            }
            s.sealed.push(old);
            sealed
        };
        drop(journal);
        // `warm_written_values`: the journal just sealed is read into the
        // page cache once writes pause.
        if !sealed.is_empty() {
            crate::compaction::warm_later(self, &sealed);
        }
        self.notify_bg();
        Ok(())
    }
}
