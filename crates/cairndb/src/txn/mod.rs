//! Optimistic transactions: snapshot isolation and serializable.
//!
//! A [`Transaction`] pins the seqno it reads at (`registry.rs`: a slot in
//! the thread's shard, no global lock), buffers its writes, and records
//! what its commit must check: the keys it writes or reads with
//! `get_for_update` (snapshot isolation), plus every key it read and every
//! range it scanned (serializable).
//!
//! Commit goes through the normal group-commit path: the batch joins the
//! queue with its [`Validation`], and the group's leader, holding the
//! journal lock (so no other commit is in flight), checks it just before
//! assigning seqnos: a checked key or range fails if the committed state
//! has a version of it newer than the transaction's snapshot, or if an
//! earlier member of the same group writes it. A failed check writes
//! nothing and returns `Error::Conflict`. Validation and seqno assignment
//! therefore happen together, once per group, by the one writer that is
//! appending to the journal anyway; begin, reads and read-only commits
//! take no shared lock at all.
//!
//! Committed transactions are serializable in commit (seqno) order: a
//! serializable transaction commits only if nothing it read changed
//! between its snapshot and its commit point.

mod own;
pub(crate) mod recent;
pub(crate) mod registry;

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::batch as codec;
use crate::keyspace::{DEFAULT_ID, Keyspace};
use crate::options::WriteOptions;
use crate::read::ReadView;
use crate::read::iter::{Iter, KeyValue};
use crate::write::batch::check_key;
use own::{OwnWrite, OwnWrites};
use recent::RecentWrites;
use registry::Pin;
use std::collections::BTreeSet;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// How a transaction is checked at commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Write-write conflicts only: the commit fails if another commit
    /// wrote a key this one writes (or read with `get_for_update`) after
    /// it began. Write skew is possible.
    Snapshot,
    /// Also read-write conflicts: the commit fails if another commit
    /// changed a key this one read (present or absent) or any key in a
    /// range it scanned.
    Serializable,
}

/// A scanned key range of a keyspace, as owned bounds.
type KeyRange = (u32, Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The keys of `written` (keyspace, key) within `range`.
fn written_within<'a>(
    written: &'a BTreeSet<(u32, &[u8])>,
    (keyspace, lo, hi): &'a KeyRange,
) -> impl Iterator<Item = &'a (u32, &'a [u8])> {
    let ks = *keyspace;
    let lower = match lo {
        Bound::Included(k) => Bound::Included((ks, k.as_slice())),
        Bound::Excluded(k) => Bound::Excluded((ks, k.as_slice())),
        Bound::Unbounded => Bound::Included((ks, &[][..])),
    };
    let upper = match hi {
        Bound::Included(k) => Bound::Included((ks, k.as_slice())),
        Bound::Excluded(k) => Bound::Excluded((ks, k.as_slice())),
        Bound::Unbounded => match ks.checked_add(1) {
            Some(next) => Bound::Excluded((next, &[][..])),
            None => Bound::Unbounded,
        },
    };
    written.range((lower, upper))
}

/// What a commit checks, run by the group-commit leader: the keys of the
/// batch it goes with, and these.
pub(crate) struct Validation {
    snapshot: u64,
    /// Keys read (serializable) or read for update, written or not, with
    /// their keyspaces.
    keys: BTreeSet<(u32, Vec<u8>)>,
    ranges: Vec<KeyRange>,
}

impl Validation {
    /// `Ok` if nothing checked — the keys of `rep`, the batch this check
    /// goes with, and the check's own — changed after the snapshot, in
    /// `view` (the committed state) or in `written` (keys of the group's
    /// earlier members); `Err(Conflict)` naming the first change
    /// otherwise.
    ///
    /// `committed` is the last committed seqno: when it is not above the
    /// snapshot, nothing was committed since the transaction began and
    /// only `written` can conflict (a lone committer's every commit).
    ///
    /// A key `recent` proves unwritten since the snapshot needs no lookup;
    /// the committed state is looked up (`view`, taken on first need by
    /// `make_view`) only for the others and for ranges.
    pub(crate) fn run(
        &self,
        rep: &[u8],
        committed: u64,
        recent: &RecentWrites,
        written: &BTreeSet<(u32, &[u8])>,
        view: &mut Option<ReadView>,
        make_view: &dyn Fn() -> ReadView,
    ) -> Result<()> {
        let conflict = |what: String| Err(Error::Conflict(what));
        let changed = committed > self.snapshot;
        let mut check = |ks: u32, k: &[u8]| -> Result<()> {
            if written.contains(&(ks, k)) {
                return conflict(format!("key {k:?} written by a commit in the same group"));
            }
            if !changed || !recent.may_have_changed(ks, k, self.snapshot) {
                return Ok(());
            }
            let view = view.get_or_insert_with(make_view);
            if let Some(s) = view.newest_seqno_after(ks, k, self.snapshot)? {
                return conflict(format!(
                    "key {k:?} written at seqno {s} after snapshot {}",
                    self.snapshot
                ));
            }
            Ok(())
        };
        // A lone committer's check: nothing committed since the snapshot
        // and no earlier member, so no key can conflict.
        if changed || !written.is_empty() {
            // Run by the commit leader: a panic here would strand the
            // group's other members, so a release build reports the bug.
            let decoded = codec::decode(rep);
            debug_assert!(decoded.is_ok(), "a transaction's own batch decodes");
            let ops = decoded
                .map_err(|d| {
                    Error::Poisoned(format!("bug: a transaction's batch does not decode: {d}"))
                })?
                .ops;
            for op in &ops {
                check(op.keyspace, op.key)?;
            }
            for (ks, k) in &self.keys {
                check(*ks, k)?;
            }
        }
        for range in &self.ranges {
            if written_within(written, range).next().is_some() {
                return conflict("a scanned range written by a commit in the same group".into());
            }
            if !changed {
                continue;
            }
            let (ks, lo, hi) = range;
            let it = Iter::new(
                view.get_or_insert_with(make_view).clone(),
                *ks,
                crate::limits::SEQNO_MAX,
                lo.clone(),
                hi.clone(),
            );
            if it.changed_since(self.snapshot)? {
                return conflict(format!(
                    "a scanned range changed after snapshot {}",
                    self.snapshot
                ));
            }
        }
        Ok(())
    }
}

/// An optimistic transaction. Reads see the database as of
/// [`Db::begin`](crate::Db::begin) plus the transaction's own writes; writes are buffered
/// until [`Transaction::commit`]. Dropping it without committing rolls it
/// back. `Send`: it may move between threads.
pub struct Transaction {
    /// The database's shared state, held as a `Snapshot` holds it: a
    /// transaction left over after `close` gets `Error::Closed`.
    inner: Arc<Inner>,
    pin: Pin,
    snapshot: u64,
    isolation: Isolation,
    /// Buffered writes, encoded as the batch the commit writes.
    writes: OwnWrites,
    /// Keys read (serializable only): checked if the transaction writes.
    reads: BTreeSet<(u32, Vec<u8>)>,
    /// Keys read with `get_for_update`: always checked.
    locked: BTreeSet<(u32, Vec<u8>)>,
    ranges: Vec<KeyRange>,
    /// The keyspaces other than the default one it writes to: checked to
    /// exist at commit.
    keyspaces: Vec<Keyspace>,
    done: bool,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("snapshot", &self.snapshot)
            .field("isolation", &self.isolation)
            .field("writes", &self.writes.len())
            .finish()
    }
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Transaction {
    pub(crate) fn new(inner: Arc<Inner>, isolation: Isolation) -> Transaction {
        // Read first: once set, the flag's cache line is only ever read.
        if !inner.txn_begun.load(std::sync::atomic::Ordering::Relaxed) {
            inner
                .txn_begun
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let (pin, snapshot) = inner.pins.pin(&inner.last_seqno);
        Transaction {
            inner,
            pin,
            snapshot,
            isolation,
            writes: OwnWrites::default(),
            reads: BTreeSet::new(),
            locked: BTreeSet::new(),
            ranges: Vec::new(),
            keyspaces: Vec::new(),
            done: false,
        }
    }

    /// The seqno this transaction reads at.
    pub fn snapshot_seqno(&self) -> u64 {
        self.snapshot
    }

    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    fn check_open(&self) -> Result<()> {
        if self.done {
            return Err(Error::InvalidArgument("transaction already ended".into()));
        }
        Ok(())
    }

    /// The value of `key` as this transaction sees it: its own write if it
    /// made one, else the database at its snapshot. In serializable mode
    /// the key (present or not) is checked at commit.
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.read(None, key.as_ref(), false)
    }

    /// `get`, and the commit fails if another commit writes `key` after
    /// this transaction began — in either isolation. Use it for
    /// read-modify-write under snapshot isolation (prevents write skew on
    /// that key).
    pub fn get_for_update(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.read(None, key.as_ref(), true)
    }

    /// Buffers a put. Checked against the documented limits now: for a
    /// key, a value, and the batch the commit will write (where a key
    /// written again counts once).
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.check_open()?;
        self.writes.put(DEFAULT_ID, key.as_ref(), value.as_ref())
    }

    /// Buffers a delete.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.check_open()?;
        self.writes.delete(DEFAULT_ID, key.as_ref())
    }

    /// Keys and values in `range` as this transaction sees them (its own
    /// writes merged over the snapshot), in key order. In serializable
    /// mode the whole range is checked at commit (phantoms included).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&mut self, range: R) -> Result<TxnIter> {
        self.scan(None, range)
    }

    /// `get` in keyspace `ks`. A transaction reads every keyspace at its
    /// one snapshot, and checks keys per keyspace.
    pub fn get_in(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.read(Some(ks), key.as_ref(), false)
    }

    /// `get_for_update` in keyspace `ks`.
    pub fn get_for_update_in(
        &mut self,
        ks: &Keyspace,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        self.read(Some(ks), key.as_ref(), true)
    }

    /// Buffers a put in keyspace `ks`. The commit writes every keyspace
    /// the transaction wrote to atomically.
    pub fn put_in(
        &mut self,
        ks: &Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        self.check_open()?;
        self.note(ks)?;
        self.writes.put(ks.id(), key.as_ref(), value.as_ref())
    }

    /// Buffers a delete in keyspace `ks`.
    pub fn delete_in(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<()> {
        self.check_open()?;
        self.note(ks)?;
        self.writes.delete(ks.id(), key.as_ref())
    }

    /// `range` in keyspace `ks`.
    pub fn range_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        ks: &Keyspace,
        range: R,
    ) -> Result<TxnIter> {
        self.scan(Some(ks), range)
    }

    /// Every key of keyspace `ks`, as this transaction sees it.
    pub fn iter_in(&mut self, ks: &Keyspace) -> Result<TxnIter> {
        self.scan::<&[u8], _>(Some(ks), ..)
    }

    /// Remembers a keyspace written to, checked to belong to this
    /// database.
    fn note(&mut self, ks: &Keyspace) -> Result<()> {
        ks.check_owner(&self.inner)?;
        if !self.keyspaces.iter().any(|k| k.same(ks)) {
            self.keyspaces.push(ks.clone());
        }
        Ok(())
    }

    /// A view holding keyspace `ks` (the default one if `None`), and its
    /// id.
    fn view_of(&self, ks: Option<&Keyspace>) -> Result<(ReadView, u32)> {
        let view = self.inner.view();
        let Some(ks) = ks else {
            return Ok((view, DEFAULT_ID));
        };
        ks.check_owner(&self.inner)?;
        ks.check_in(&view)?;
        Ok((view, ks.id()))
    }

    /// A read of `key` in `ks`, recorded for the commit's check as
    /// `for_update` and the isolation say.
    fn read(
        &mut self,
        ks: Option<&Keyspace>,
        key: &[u8],
        for_update: bool,
    ) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        check_key(key)?;
        let (view, id) = self.view_of(ks)?;
        if for_update {
            self.locked.insert((id, key.to_vec()));
        }
        if let Some(w) = self.writes.get(id, key) {
            return Ok(w.map(<[u8]>::to_vec));
        }
        if !for_update && self.isolation == Isolation::Serializable {
            self.reads.insert((id, key.to_vec()));
        }
        view.get(id, key, self.snapshot)
    }

    fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        ks: Option<&Keyspace>,
        range: R,
    ) -> Result<TxnIter> {
        self.check_open()?;
        let (view, id) = self.view_of(ks)?;
        let lo = owned(range.start_bound().map(|k| k.as_ref()));
        let hi = owned(range.end_bound().map(|k| k.as_ref()));
        if self.isolation == Isolation::Serializable {
            self.ranges.push((id, lo.clone(), hi.clone()));
        }
        let own: Vec<OwnWrite> = self.writes.range(id, &lo, &hi);
        let base = Iter::new(view, id, self.snapshot, lo, hi);
        Ok(TxnIter {
            base: base.peekable(),
            own: own.into_iter().peekable(),
        })
    }

    /// Every key, as this transaction sees it.
    pub fn iter(&mut self) -> Result<TxnIter> {
        self.range::<&[u8], _>(..)
    }

    /// Commits with default write options (not synced).
    pub fn commit(self) -> Result<()> {
        self.commit_opt(&WriteOptions::default()).map(drop)
    }

    /// Commits atomically and durably per `opts`, or fails with
    /// `Error::Conflict` having written nothing. Returns the commit's
    /// seqno — its place in the serial order of commits — or `None` if it
    /// wrote nothing. A transaction without writes is already serializable
    /// at its snapshot: it commits without a check, except for its
    /// `get_for_update` keys.
    pub fn commit_opt(mut self, opts: &WriteOptions) -> Result<Option<u64>> {
        self.check_open()?;
        self.done = true;
        let writes = std::mem::take(&mut self.writes);
        let mut keys = std::mem::take(&mut self.locked);
        if writes.is_empty() {
            if keys.is_empty() {
                return Ok(None);
            }
            self.ranges.clear();
        } else {
            keys.append(&mut self.reads);
        }
        let mut batch = writes.into_batch();
        for ks in std::mem::take(&mut self.keyspaces) {
            batch.note(&ks);
        }
        let check = Validation {
            snapshot: self.snapshot,
            keys,
            ranges: std::mem::take(&mut self.ranges),
        };
        let empty = batch.is_empty();
        let seqno = self.inner.write_checked(batch, opts, Some(check))?;
        Ok((!empty).then_some(seqno))
    }

    /// Discards the buffered writes. Same as dropping the transaction.
    pub fn rollback(mut self) {
        self.done = true;
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        self.inner.pins.unpin(&self.pin, self.snapshot);
    }
}

/// Iterator of [`Transaction::range`]: the transaction's own writes merged
/// over a snapshot iterator; own puts replace, own deletes hide.
pub struct TxnIter {
    base: std::iter::Peekable<Iter>,
    own: std::iter::Peekable<std::vec::IntoIter<OwnWrite>>,
}

impl Iterator for TxnIter {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let base_key = match self.base.peek() {
                Some(Ok((k, _))) => Some(k.clone()),
                Some(Err(_)) => return self.base.next(),
                None => None,
            };
            let own_key = self.own.peek().map(|(k, _)| k.clone());
            match (base_key, own_key) {
                (None, None) => return None,
                (Some(_), None) => return self.base.next(),
                (b, Some(o)) => {
                    if let Some(b) = &b {
                        if b < &o {
                            return self.base.next();
                        }
                        if b == &o {
                            self.base.next();
                        }
                    }
                    let (k, v) = self.own.next()?;
                    match v {
                        Some(v) => return Some(Ok((k, v))),
                        None => continue,
                    }
                }
            }
        }
    }
}
