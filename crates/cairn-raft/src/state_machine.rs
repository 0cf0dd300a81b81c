//! The key-value state machine over CairnDB: the application's data in the
//! `kv` keyspace; the last applied log id, the last membership and the
//! current snapshot in `raft_meta`.
//!
//! Invariants kept:
//! - The data and the applied state change together: one batch per
//!   `apply` call and one per `install_snapshot`, so after any crash the
//!   data is exactly the result of the entries up to the recorded last
//!   applied id (a persistent state machine, in openraft's words: a
//!   restart re-applies nothing it already holds).
//! - An `apply` is not synced: its entries are durable in the log
//!   already, so an apply a power cut takes away is applied again from
//!   the log. The log keeps them until a snapshot holds their effect
//!   (openraft purges only entries a snapshot covers), and recording a
//!   snapshot is a synced write, which makes every earlier apply durable
//!   too (CairnDB's journal is written in order: a sync covers everything
//!   appended before it). An install is synced: its data exists nowhere
//!   else on this node.
//! - The current snapshot never goes back: a built snapshot is recorded
//!   only if it is not older than the one recorded.
//!
//! Sharing: openraft calls `apply` and `install_snapshot` one at a time
//! (`&mut self`); [`SnapshotBuilder`]s run beside them, reading a CairnDB
//! snapshot, which is consistent at one point whatever is written
//! meanwhile. Recording a snapshot is serialized by a lock shared by the
//! state machine and its builders.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;

use cairndb::{WriteBatch, WriteOptions};
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use tokio::sync::Mutex;

use crate::codec::{SnapshotReader, SnapshotWriter};
use crate::error::{BadRecord, Result, blocking, io};
use crate::log_store::{from_json, to_json};
use crate::{NodeId, Op, Request, Response, Shared, TypeConfig};

/// `raft_meta` key of the last applied log id.
pub(crate) const KEY_APPLIED: &[u8] = b"sm.applied";
/// `raft_meta` key of the last applied membership.
pub(crate) const KEY_MEMBERSHIP: &[u8] = b"sm.membership";
/// `raft_meta` key of the current snapshot's metadata.
pub(crate) const KEY_SNAPSHOT_META: &[u8] = b"sm.snapshot.meta";
/// `raft_meta` key of the current snapshot's data (`codec` format).
pub(crate) const KEY_SNAPSHOT_DATA: &[u8] = b"sm.snapshot.data";

type Membership = StoredMembership<NodeId, openraft::BasicNode>;
type Meta = SnapshotMeta<NodeId, openraft::BasicNode>;

/// The state machine of one Raft node. Opened with [`crate::open`].
/// Clones share the database: keep one for reads (`get`, `pairs`) beside
/// the one given to `Raft`, and let only `Raft` apply or install.
#[derive(Debug, Clone)]
pub struct StateMachine {
    shared: Shared,
    /// Held while the current snapshot is compared and recorded.
    snapshot_lock: Arc<Mutex<()>>,
}

/// Builds a snapshot of the state machine as of the call; taken from
/// [`RaftStateMachine::get_snapshot_builder`].
#[derive(Debug, Clone)]
pub struct SnapshotBuilder {
    shared: Shared,
    snapshot_lock: Arc<Mutex<()>>,
}

/// Applies openraft's error subject and verb for state machine reads.
fn read_sm() -> impl FnOnce(cairndb::Error) -> StorageError<NodeId> {
    io(StorageIOError::read_state_machine)
}

fn write_sm() -> impl FnOnce(cairndb::Error) -> StorageError<NodeId> {
    io(StorageIOError::write_state_machine)
}

/// Openraft's error for a failed read of the snapshot being built.
fn read_snapshot<E: std::error::Error + 'static>(e: E) -> StorageError<NodeId> {
    io(|e| StorageIOError::read_snapshot(None, e))(e)
}

fn utf8(bytes: Vec<u8>, what: &str) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| {
        io(StorageIOError::read_state_machine)(BadRecord(format!("{what} is not UTF-8")))
    })
}

impl StateMachine {
    pub(crate) fn new(shared: Shared) -> Self {
        StateMachine {
            shared,
            snapshot_lock: Arc::new(Mutex::new(())),
        }
    }

    /// The value of `key` as applied on this node (not a linearizable
    /// read by itself: the node may lag the leader).
    pub fn get(&self, key: &str) -> Result<Option<String>> {
        match self.shared.kv.get(key).map_err(read_sm())? {
            Some(v) => utf8(v, "a value").map(Some),
            None => Ok(None),
        }
    }

    /// At most `limit` pairs applied on this node with keys from `from`
    /// (inclusive) to `to` (exclusive; `None`: to the end), in key order.
    /// Like [`StateMachine::get`], not linearizable by itself; the pairs
    /// are read from one CairnDB snapshot.
    pub fn range(
        &self,
        from: &str,
        to: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        use std::ops::Bound;
        let hi = to.map_or(Bound::Unbounded, |t| Bound::Excluded(t.as_bytes()));
        let mut out = Vec::new();
        for kv in self
            .shared
            .kv
            .range::<&[u8], _>((Bound::Included(from.as_bytes()), hi))
            .take(limit)
        {
            let (k, v) = kv.map_err(read_sm())?;
            out.push((utf8(k, "a key")?, utf8(v, "a value")?));
        }
        Ok(out)
    }

    /// Every pair applied on this node, in key order; for tests and tools.
    pub fn pairs(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for kv in self.shared.kv.iter() {
            let (k, v) = kv.map_err(read_sm())?;
            out.push((utf8(k, "a key")?, utf8(v, "a value")?));
        }
        Ok(out)
    }

    /// Writes `batch`, synced if `sync`, off the async runtime's workers.
    async fn write(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        let db = self.shared.db.clone();
        blocking(move || db.write(batch, &WriteOptions { sync }))
            .await
            .map_err(write_sm())
    }
}

/// Puts `key := value` (a delete if `None`) into `batch` and returns the
/// value the key held before: the one an earlier request of the same
/// `apply` call left (`written`), else the stored one.
fn stage(
    kv: &cairndb::Keyspace,
    batch: &mut WriteBatch,
    written: &mut HashMap<String, Option<String>>,
    key: String,
    value: Option<String>,
) -> std::result::Result<Option<String>, StageError> {
    let previous = match written.get(&key) {
        Some(v) => v.clone(),
        None => match kv.get(&key)? {
            Some(v) => Some(
                String::from_utf8(v)
                    .map_err(|_| StageError::Record(BadRecord("a value is not UTF-8".into())))?,
            ),
            None => None,
        },
    };
    match &value {
        Some(v) => batch.put_in(kv, &key, v),
        None => batch.delete_in(kv, &key),
    }?;
    written.insert(key, value);
    Ok(previous)
}

/// Why staging a change failed: CairnDB refused it (a read, or a key or
/// value over its limits), or a stored value is not UTF-8.
#[derive(Debug)]
enum StageError {
    Db(cairndb::Error),
    Record(BadRecord),
}

impl From<cairndb::Error> for StageError {
    fn from(e: cairndb::Error) -> Self {
        StageError::Db(e)
    }
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageError::Db(e) => e.fmt(f),
            StageError::Record(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StageError {}

fn applied_state(shared: &Shared) -> Result<(Option<LogId<NodeId>>, Membership)> {
    let applied: Option<LogId<NodeId>> =
        shared.meta_get(KEY_APPLIED, StorageIOError::read_state_machine)?;
    let membership: Option<Membership> =
        shared.meta_get(KEY_MEMBERSHIP, StorageIOError::read_state_machine)?;
    Ok((applied, membership.unwrap_or_default()))
}

/// The recorded current snapshot's metadata, if any.
fn current_meta(shared: &Shared) -> Result<Option<Meta>> {
    shared.meta_get(KEY_SNAPSHOT_META, |e| {
        StorageIOError::read_snapshot(None, e)
    })
}

/// Puts `meta` and `data` as the current snapshot into `batch`.
fn put_snapshot(shared: &Shared, batch: &mut WriteBatch, meta: &Meta, data: &[u8]) -> Result<()> {
    let w = |e| io(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))(e);
    batch
        .put_in(&shared.meta, KEY_SNAPSHOT_META, to_json(meta))
        .map_err(w)?;
    batch
        .put_in(&shared.meta, KEY_SNAPSHOT_DATA, data)
        .map_err(w)
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    /// Serializes the state machine as of one CairnDB snapshot (data and
    /// applied state read at the same point), records it as the current
    /// snapshot (synced) unless a newer one is recorded, and returns it.
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        let shared = self.shared.clone();
        let lock = self.snapshot_lock.clone();
        let built = tokio::task::spawn_blocking(move || build(&shared, &lock)).await;
        match built {
            Ok(r) => r,
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }
}

/// `build_snapshot`'s work, on a thread that may block.
fn build(shared: &Shared, lock: &Mutex<()>) -> Result<Snapshot<TypeConfig>> {
    let snap = shared.db.snapshot();
    let get = |key: &[u8]| snap.get_in(&shared.meta, key).map_err(read_snapshot);
    let applied: Option<LogId<NodeId>> = match get(KEY_APPLIED)? {
        Some(b) => Some(from_json(&b, "sm.applied").map_err(read_snapshot)?),
        None => None,
    };
    let membership: Membership = match get(KEY_MEMBERSHIP)? {
        Some(b) => from_json(&b, "sm.membership").map_err(read_snapshot)?,
        None => Membership::default(),
    };
    let mut w = SnapshotWriter::new();
    for kv in snap.iter_in(&shared.kv) {
        let (k, v) = kv.map_err(read_snapshot)?;
        w.push(&k, &v);
    }
    let data = w.finish();
    // The CairnDB snapshot's seqno tells two snapshots of one log id
    // apart (openraft asks ids to differ between builds).
    let snapshot_id = match &applied {
        Some(id) => format!("{}-{}-{}", id.leader_id, id.index, snap.seqno()),
        None => format!("none-{}", snap.seqno()),
    };
    drop(snap);
    let meta = Meta {
        last_log_id: applied,
        last_membership: membership,
        snapshot_id,
    };
    {
        let _one = lock.blocking_lock();
        let newer = current_meta(shared)?.is_some_and(|cur| cur.last_log_id > meta.last_log_id);
        if !newer {
            let mut batch = WriteBatch::new();
            put_snapshot(shared, &mut batch, &meta, &data)?;
            shared
                .db
                .write(batch, &WriteOptions::synced())
                .map_err(io(|e| {
                    StorageIOError::write_snapshot(Some(meta.signature()), e)
                }))?;
        }
    }
    Ok(Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data)),
    })
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId<NodeId>>, Membership)> {
        applied_state(&self.shared)
    }

    /// Applies `entries` in one batch: their data changes, the last
    /// applied log id and, if one of them is a membership entry, the last
    /// membership. Not synced (the module documentation says why): the
    /// batch survives a process crash, and a power cut only if a later
    /// synced write (the next append, a vote, a snapshot) followed it.
    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let kv = &self.shared.kv;
        let mut batch = WriteBatch::new();
        let mut responses = Vec::new();
        // What this call has written so far, so that a later request on the
        // same key answers the value an earlier one left.
        let mut written: HashMap<String, Option<String>> = HashMap::new();
        let mut last_applied = None;
        let mut membership = None;
        for entry in entries {
            let log_id = entry.log_id;
            let response = match entry.payload {
                EntryPayload::Blank => Response::Ok,
                EntryPayload::Membership(m) => {
                    membership = Some(Membership::new(Some(entry.log_id), m));
                    Response::Ok
                }
                EntryPayload::Normal(request) => {
                    let mut stage = |key: String, value: Option<String>| {
                        stage(kv, &mut batch, &mut written, key, value)
                            .map_err(|e| io(|e| StorageIOError::apply(log_id, e))(e))
                    };
                    match request {
                        Request::Set { key, value } => Response::Previous(stage(key, Some(value))?),
                        Request::Delete { key } => Response::Previous(stage(key, None)?),
                        Request::Batch { ops } => {
                            let mut previous = Vec::with_capacity(ops.len());
                            for op in ops {
                                previous.push(match op {
                                    Op::Set { key, value } => stage(key, Some(value))?,
                                    Op::Delete { key } => stage(key, None)?,
                                });
                            }
                            Response::Batch(previous)
                        }
                    }
                }
            };
            responses.push(response);
            last_applied = Some(entry.log_id);
        }
        let Some(last_applied) = last_applied else {
            return Ok(responses);
        };
        batch
            .put_in(&self.shared.meta, KEY_APPLIED, to_json(&last_applied))
            .map_err(write_sm())?;
        if let Some(m) = &membership {
            batch
                .put_in(&self.shared.meta, KEY_MEMBERSHIP, to_json(m))
                .map_err(write_sm())?;
        }
        self.write(batch, false).await?;
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
            snapshot_lock: self.snapshot_lock.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    /// Replaces the data with the snapshot's pairs and the applied state
    /// with its metadata, and records it as the current snapshot, all in
    /// one synced batch: a crash leaves either the state before the call
    /// or the installed one, never a mix. The data is checked whole
    /// before anything is written; bad data changes nothing.
    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<()> {
        let data = snapshot.into_inner();
        let bad = |e| io(|e| StorageIOError::read_snapshot(Some(meta.signature()), e))(e);
        // 1. Check the data whole (it came from another node).
        let mut check = SnapshotReader::new(&data).map_err(bad)?;
        while let Some((k, v)) = check.next_pair().map_err(bad)? {
            if std::str::from_utf8(k).is_err() || std::str::from_utf8(v).is_err() {
                return Err(bad(crate::codec::DecodeError {
                    offset: 0,
                    detail: "a key or value is not UTF-8",
                }));
            }
        }
        // 2. One batch: delete the keys the snapshot lacks, put its pairs
        // (both sorted: one merge walk), then the applied state and the
        // snapshot itself.
        let mut batch = WriteBatch::new();
        let mut incoming = SnapshotReader::new(&data).map_err(bad)?;
        let mut next = incoming.next_pair().map_err(bad)?;
        for kv in self.shared.kv.iter() {
            let (key, _) = kv.map_err(read_sm())?;
            while let Some((k, v)) = next.filter(|(k, _)| *k < key.as_slice()) {
                batch.put_in(&self.shared.kv, k, v).map_err(write_sm())?;
                next = incoming.next_pair().map_err(bad)?;
            }
            if next.is_none_or(|(k, _)| k != key.as_slice()) {
                batch.delete_in(&self.shared.kv, &key).map_err(write_sm())?;
            }
        }
        while let Some((k, v)) = next {
            batch.put_in(&self.shared.kv, k, v).map_err(write_sm())?;
            next = incoming.next_pair().map_err(bad)?;
        }
        batch
            .put_in(&self.shared.meta, KEY_APPLIED, to_json(&meta.last_log_id))
            .map_err(write_sm())?;
        batch
            .put_in(
                &self.shared.meta,
                KEY_MEMBERSHIP,
                to_json(&meta.last_membership),
            )
            .map_err(write_sm())?;
        put_snapshot(&self.shared, &mut batch, meta, &data)?;
        // Under the snapshot lock, so that a builder's compare-and-record
        // does not straddle this write.
        let _one = self.snapshot_lock.lock().await;
        self.write(batch, true).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        let Some(meta) = current_meta(&self.shared)? else {
            return Ok(None);
        };
        let data = self
            .shared
            .meta
            .get(KEY_SNAPSHOT_DATA)
            .map_err(io(|e| {
                StorageIOError::read_snapshot(Some(meta.signature()), e)
            }))?
            .ok_or_else(|| {
                io(|e| StorageIOError::read_snapshot(Some(meta.signature()), e))(BadRecord(
                    "snapshot metadata without data".into(),
                ))
            })?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
