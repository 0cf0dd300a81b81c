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
pub(crate) mod journal;
pub(crate) mod manifest;
pub(crate) mod queue;
#[cfg(all(test, loom))]
mod seqno_model;

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::batch as codec;
use crate::format::key::Kind;
use crate::format::log::journal_seed;
use crate::format::vptr::ValuePtr;
use crate::keyspace::Separation;
use crate::limits::{GROUP_BYTES_MAX, SEQNO_MAX};
use crate::memtable::{MemWriter, Memtable};
use crate::options::WriteOptions;
use crate::txn::Validation;
use crate::txn::recent::RecentWrites;
use crate::version::files;
use crate::version::segments::SegmentFile;
use crate::version::streams::Streams;
use batch::WriteBatch;
use journal::Journal;
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
    /// goes, values inline (`version/streams.rs`).
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

/// Longest pause a writer takes per group while compaction is behind.
const PACE_MAX: Duration = Duration::from_millis(4);
/// Longest single wait of a stalled writer before it re-checks state.
const STALL_WAIT: Duration = Duration::from_millis(10);
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
#[derive(Clone)]
pub(crate) struct Separate {
    /// Each keyspace's threshold, and which keyspaces exist.
    pub rule: Separation,
    /// Number of the journal (segment) the batch was written to.
    pub segment: u64,
}

/// Inserts the ops of batch payload `rep` through `mem` with seqnos from
/// `seqno` on; returns the next seqno. `separate.rule` says which
/// keyspaces exist: ops of a dropped keyspace take their seqnos but are
/// left out. With `place` = the file offset of `rep`'s first byte in its
/// journal, values of at least their keyspace's threshold go in as
/// pointers to where they lie in the journal. With
/// `recent`, each key is also recorded there for commit checks. Shared by
/// commits and journal replay, so both build the same memtable.
pub(crate) fn insert_batch(
    mem: &mut MemWriter<'_>,
    rep: &[u8],
    seqno: u64,
    separate: &Separate,
    place: Option<u64>,
    mut recent: Option<&mut RecentWrites>,
) -> std::result::Result<u64, String> {
    let decoded = codec::decode(rep)?;
    let next = seqno + decoded.ops.len() as u64;
    let mut ptr = Vec::with_capacity(crate::format::vptr::VPTR_LEN_MAX);
    for (seqno, op) in (seqno..).zip(&decoded.ops) {
        if !separate.rule.keeps(op.keyspace)? {
            continue;
        }
        if let Some(recent) = recent.as_deref_mut() {
            recent.record(op.keyspace, op.key, seqno);
        }
        match place {
            Some(at)
                if op.kind == Kind::Put && op.value.len() >= separate.rule.min(op.keyspace) =>
            {
                ptr.clear();
                ValuePtr::to(separate.segment, at + op.value_at as u64, op.value).encode(&mut ptr);
                mem.insert(op.keyspace, op.key, seqno, Kind::Pointer, &ptr);
            }
            _ => mem.insert(op.keyspace, op.key, seqno, op.kind, op.value),
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

/// A group's journal records as `Inner::encode_group` made them.
struct Records {
    buf: Vec<u8>,
    /// Where each member's batch lies (`None` under the split sabotage).
    placed: Vec<Option<Placed>>,
    /// As `Inserts::owns`.
    owns: Vec<(usize, usize)>,
    /// Bytes of the records in all (`buf` and the large bodies).
    bytes: u64,
    /// The journal's length when they were encoded.
    base: u64,
    /// The seqno after the group's last.
    next: u64,
}

/// A group's memtable inserts running on a worker thread, with the
/// journal's recent-writes log lent to it (`Inner::insert_on_worker`).
struct Offloaded(crossbeam_channel::Receiver<(std::result::Result<(), String>, RecentWrites)>);

impl Offloaded {
    /// Waits for the inserts and gives the log back. A job that panicked
    /// dropped its sender without a result; the log stays the empty one
    /// put in its place.
    fn join(self, journal: &mut Journal) -> std::result::Result<(), String> {
        match self.0.recv() {
            Ok((inserted, recent)) => {
                journal.give_back_recent(recent);
                inserted
            }
            Err(_) => Err("a memtable insert job panicked".into()),
        }
    }
}

impl Inserts {
    /// The inserts of `members` (with seqnos from `first`) as `records`
    /// placed them, into `mem`.
    fn new(
        mem: Arc<Memtable>,
        records: Records,
        members: &[&Arc<Pending>],
        first: u64,
        separate: Separate,
    ) -> Inserts {
        let mut seqno = first;
        let items: Vec<_> = members
            .iter()
            .zip(records.placed)
            .map(|(p, at)| {
                let item = ((*p).clone(), at, seqno);
                seqno += u64::from(p.count);
                item
            })
            .collect();
        assert_eq!(seqno, records.next, "the group's seqnos are consecutive");
        Inserts {
            mem,
            buf: records.buf,
            owns: records.owns,
            bytes: records.bytes,
            separate,
            items,
        }
    }

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
                Some(Placed::Buf(r, at)) => (&self.buf[r.clone()], Some(*at)),
                Some(Placed::Own(at)) => (p.rep_for(self.separate.segment), Some(*at)),
                None => (p.rep_for(self.separate.segment), None),
            };
            insert_batch(
                &mut mem,
                rep,
                *first,
                &self.separate,
                place,
                recent.as_deref_mut(),
            )?;
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
        if !batch.keyspaces().is_empty() {
            let keyspaces = self.state.read().version.keyspaces.clone();
            for ks in batch.keyspaces() {
                ks.check_owner(self)?;
                if !keyspaces.exists(ks.id()) {
                    return Err(Error::KeyspaceDropped(ks.name().to_owned()));
                }
            }
        }
        // Unsynced large values go to the value streams now, before the
        // queue: each writer appends its own, in parallel with the others.
        let placed = if !opts.sync && self.opts.value_partitions > 0 {
            let (streams, rule) = {
                let s = self.state.read();
                (s.mem.streams().cloned(), self.separation(&s.version))
            };
            streams.and_then(|s| s.place(&batch.rep, &rule).map(|rep| (s.journal, rep)))
        } else {
            None
        };
        if let Some((_, rep)) = &placed {
            // The values' bytes went to the streams (their pointers stay
            // in the batch): counted with the journal's.
            self.counters.journal_bytes.fetch_add(
                batch.rep.len().saturating_sub(rep.len()) as u64,
                Ordering::Relaxed,
            );
        }
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
        let mut written: BTreeSet<(u32, &[u8])> = BTreeSet::new();
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
                            written.extend(d.ops.iter().map(|op| (op.keyspace, op.key)));
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

    /// Commits a group: encodes its accepted members as journal records,
    /// readies the journal, appends them and syncs if a member asked,
    /// inserts them into the memtable and publishes their seqnos. Leader
    /// only; the journal lock is held throughout.
    fn commit_group(&self, group: &[Arc<Pending>]) -> Result<()> {
        let mut journal = self.journal.lock();
        journal.usable()?;
        let accepted = self.check_group(group, journal.recent());
        let members: Vec<&Arc<Pending>> = group
            .iter()
            .zip(&accepted)
            .filter(|(p, ok)| **ok && p.count > 0)
            .map(|(p, _)| p)
            .collect();
        let first = self.last_seqno.load(Ordering::Acquire) + 1;
        let records = self.encode_group(&journal, &members, first)?;
        let next = records.next;
        let sync = group.iter().any(|p| p.sync)
            && !crate::options::sabotaged!(self.opts, skip_journal_sync);
        let presync_due = self.prepare_append(&mut journal, records.bytes, sync)?;
        assert_eq!(
            records.base,
            journal.len(),
            "the journal moved while the group was encoded"
        );
        let (mem, rule) = {
            let s = self.state.read();
            (s.mem.clone(), self.separation(&s.version))
        };
        let separate = Separate {
            rule,
            segment: journal.number(),
        };
        let inserts = Arc::new(Inserts::new(mem, records, &members, first, separate));
        // Once a transaction has begun, the group's keys are recorded in
        // the journal's recent-writes log for later commit checks (as they
        // are inserted, in one pass); before that the log just moves past
        // the group. A transaction that begins after this load pins a
        // seqno below the group's only if the group is not yet published;
        // `reset` then leaves it uncovered, and its check takes exact
        // lookups.
        let record = self.txn_begun.load(Ordering::SeqCst);
        let worker = (sync && next - first >= OFFLOAD_OPS_MIN)
            .then(|| self.insert_on_worker(&mut journal, &inserts, record, next));
        if let Err(f) = journal.append(inserts.bytes, |file| inserts.append_to(file)) {
            if let Some(worker) = worker {
                let _ = worker.join(&mut journal);
            }
            return Err(self.journal_failed(f));
        }
        self.count_group(&inserts);
        if presync_due && journal.start_presync() {
            self.counters.presyncs.fetch_add(1, Ordering::Relaxed);
        }
        let inserted = match worker {
            Some(worker) => {
                let synced = journal.sync(next);
                let inserted = worker.join(&mut journal);
                synced.map_err(|f| self.journal_failed(f))?;
                inserted
            }
            None => {
                if sync {
                    journal.sync(next).map_err(|f| self.journal_failed(f))?;
                }
                inserts.run(record.then_some(journal.recent_mut()))
            }
        };
        self.publish(&mut journal, &inserts, inserted, record, next)
    }

    /// The journal records of `members` (accepted, not empty), seqnos from
    /// `first`, with where each batch lands in the journal, so the
    /// memtable can point at separated values there: their offsets are
    /// those in the group's buffer plus the large bodies appended before
    /// them.
    fn encode_group(
        &self,
        journal: &Journal,
        members: &[&Arc<Pending>],
        first: u64,
    ) -> Result<Records> {
        let number = journal.number();
        let seed = journal_seed(number, self.db_id);
        let mark = journal.synced_seqno();
        let copied = |p: &Pending| {
            let len = p.rep_for(number).len();
            if len > GROUP_COPY_MAX { 32 } else { len + 32 }
        };
        let base = journal.len();
        let mut r = Records {
            buf: Vec::with_capacity(members.iter().map(|p| copied(p)).sum()),
            placed: Vec::with_capacity(members.len()),
            owns: Vec::new(),
            bytes: 0,
            base,
            next: first,
        };
        let mut own_bytes = 0u64;
        for (i, p) in members.iter().enumerate() {
            let rep = p.rep_for(number);
            if crate::options::sabotaged!(self.opts, split_batches) {
                r.next = codec::encode_split(&mut r.buf, seed, mark, rep, r.next);
                r.placed.push(None);
                continue;
            }
            let at = r.buf.len() + codec::JOURNAL_BATCH_AT;
            let journal_at = base + at as u64 + own_bytes;
            if rep.len() > GROUP_COPY_MAX {
                codec::encode_journal_record_head_at(&mut r.buf, seed, mark, r.next, rep);
                r.owns.push((r.buf.len(), i));
                own_bytes += (rep.len() - 8) as u64;
                r.placed.push(Some(Placed::Own(journal_at)));
            } else {
                codec::encode_journal_record_at(&mut r.buf, seed, mark, r.next, rep);
                r.placed
                    .push(Some(Placed::Buf(at..r.buf.len(), journal_at)));
            }
            r.next += u64::from(p.count);
        }
        r.bytes = r.buf.len() as u64 + own_bytes;
        assert_eq!(r.placed.len(), members.len(), "one place per member");
        if r.next - 1 > SEQNO_MAX {
            return Err(Error::LimitExceeded {
                what: "seqno",
                actual: r.next - 1,
                max: SEQNO_MAX,
            });
        }
        Ok(r)
    }

    /// Readies the journal for a group of `bytes`: takes the background
    /// sync's result before a sync (a sync must not succeed past its
    /// failure), reserves the group's blocks, and pre-writes ahead of a
    /// synced group. Returns whether the group starts a background sync
    /// (an unsynced one that takes the journal past the next start).
    fn prepare_append(&self, journal: &mut Journal, bytes: u64, sync: bool) -> Result<bool> {
        let presync_due = !sync && journal.presync_due(bytes);
        if sync || presync_due {
            journal.join_presync().map_err(|f| self.journal_failed(f))?;
        }
        if bytes == 0 {
            return Ok(presync_due);
        }
        journal.reserve(bytes).map_err(|f| self.journal_failed(f))?;
        if sync
            && self.opts.journal_prewrite
            && journal
                .prewrite(bytes, self.opts.journal_bytes)
                .map_err(|f| self.journal_failed(f))?
        {
            self.counters.prewrites.fetch_add(1, Ordering::Relaxed);
        }
        Ok(presync_due)
    }

    /// Starts the group's memtable inserts on a worker thread, which
    /// records the keys in the journal's recent-writes log (lent to it)
    /// if `record`, while the leader appends and syncs: the device's
    /// flush and the memtable's cache misses overlap, and nothing is
    /// published before both are done. One worker: the memtable takes one
    /// writer at a time. Inserting before the append is safe: entries
    /// above `last_seqno` are invisible, and a failed append or sync
    /// poisons the handle, so their seqnos are never published or given
    /// out again (and nothing is flushed after a poison).
    fn insert_on_worker(
        &self,
        journal: &mut Journal,
        inserts: &Arc<Inserts>,
        record: bool,
        next: u64,
    ) -> Offloaded {
        let mut recent = journal.lend_recent(next);
        let (tx, rx) = crossbeam_channel::bounded(1);
        let job = inserts.clone();
        self.workers.run(move || {
            let inserted = job.run(record.then_some(&mut recent));
            let _ = tx.send((inserted, recent));
        });
        Offloaded(rx)
    }

    fn count_group(&self, inserts: &Inserts) {
        self.counters
            .journal_bytes
            .fetch_add(inserts.bytes, Ordering::Relaxed);
        if !inserts.items.is_empty() {
            self.counters.user_bytes.fetch_add(
                inserts.items.iter().map(|(p, ..)| p.rep.len() as u64).sum(),
                Ordering::Relaxed,
            );
            self.counters.groups.fetch_add(1, Ordering::Relaxed);
            self.counters
                .grouped_batches
                .fetch_add(inserts.items.len() as u64, Ordering::Relaxed);
        }
    }

    /// Publishes a group whose records are in the journal (synced if
    /// asked) and whose inserts ended with `inserted`: each member learns
    /// its last seqno, the recent-writes log moves past the group, and
    /// readers see every seqno below `next`.
    fn publish(
        &self,
        journal: &mut Journal,
        inserts: &Inserts,
        inserted: std::result::Result<(), String>,
        record: bool,
        next: u64,
    ) -> Result<()> {
        // `WriteBatch` built every batch, so they decode, and insert jobs
        // do not panic; if one ever did, the journal would hold seqnos
        // that were never published. A panic here would strand the
        // group's other members: a release build poisons the handle.
        debug_assert!(inserted.is_ok(), "a group's inserts fail: {inserted:?}");
        inserted.map_err(|d| {
            // A gap in the log must never read as "not written".
            journal.recent_mut().reset(next);
            let e = Error::Poisoned(format!("bug: a group's memtable inserts failed: {d}"));
            self.set_bg_error(e.duplicate());
            e
        })?;
        for (p, _, first) in &inserts.items {
            p.assigned
                .store(first + u64::from(p.count) - 1, Ordering::Release);
        }
        if record {
            journal
                .recent_mut()
                .bound(|| self.pins.oldest(&self.last_seqno), next);
        } else {
            journal.recent_mut().reset(next);
        }
        let last = self.last_seqno.load(Ordering::Acquire);
        assert!(
            next > last,
            "seqnos are published in order: {next} after {last}"
        );
        self.last_seqno.store(next - 1, Ordering::Release);
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
            let journal_full = self.journal.lock().is_full(self.opts.journal_bytes);
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
                    s.version.l0_depth(),
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
            assert!(
                sealed < self.opts.memtables_sealed_max,
                "a full memtable is sealed only with room for it ({sealed} sealed)"
            );
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
        before: Option<&Streams>,
    ) -> Option<Arc<Streams>> {
        let partitions = self.opts.value_partitions;
        if partitions == 0 {
            return None;
        }
        let bounds = before.map_or_else(Vec::new, |b| b.next_bounds(partitions));
        let count = bounds.len() as u64 + 1;
        let first = self.next_file.fetch_add(count, Ordering::SeqCst);
        Some(Arc::new(Streams::new(
            &self.reaper,
            journal,
            first,
            bounds,
            partitions,
            self.stage_streams(),
        )))
    }

    /// Whether the next journal's value streams are staged
    /// (`streams::stage_new_streams`).
    fn stage_streams(&self) -> bool {
        let live = self.state.read().version.value_bytes_live();
        crate::version::streams::stage_new_streams(&self.opts, live, self.policy.mem_available())
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
        // Commits append and publish under the journal lock, which this
        // holds: everything up to the published seqno is durable once the
        // seal's sync is done.
        let published = self.last_seqno.load(Ordering::Acquire);
        journal
            .seal(published)?
            .map_err(|f| self.journal_failed(f))?;
        let number = self.new_file_number();
        let new_file = self
            .reaper
            .new_journal(number)
            .and_then(|f| self.sync_dir().map(|()| f))
            .map_err(|e| {
                let path = files::journal(&self.dir, number);
                // The name may exist (a free file renamed to it, whose old
                // records would read as damage before the next journal's):
                // `number` is used by nothing else, so it goes. Its
                // removal is durable with the next journal's directory
                // sync, before that journal holds a write.
                let _ = self.fs.remove(&path);
                Error::io(format!("creating journal {}", path.display()), e)
            })?;
        let reader = new_file.reader();
        let streams = self.new_streams(number, journal.streams().map(|s| &**s));
        journal.switch_to(new_file, number, streams.clone());
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
            self.refresh_view(&mut s);
            sealed
        };
        drop(journal);
        // The new memtable fills in the room the sealed one lent the cache.
        self.lend_memtable_room();
        // `warm_written_values`: the journal just sealed is read into the
        // page cache once writes pause.
        if !sealed.is_empty() {
            crate::compaction::warm_later(self, &sealed);
        }
        self.notify_bg();
        Ok(())
    }
}
