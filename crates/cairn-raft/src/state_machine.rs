//! The key-value state machine over CairnDB: the application's data in
//! the current data generation (keyspace `kv` or `kv.N`, see
//! [`crate::snapshot`]); the last applied log id, the last membership and
//! the current snapshot's record in `raft_meta`; the current snapshot's
//! data in its own keyspace.
//!
//! Invariants kept:
//! - The data and the applied state change together: one batch per
//!   `apply` call, and for `install_snapshot` one synced batch that names
//!   the new data generation (written before it, unsynced) beside the new
//!   applied state, so after any crash the
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
//! - Memory: a build streams the data into its snapshot keyspace piece by
//!   piece while it iterates; an install decodes the data as it reads it
//!   and writes the pairs in batches of `INSTALL_BATCH_BYTES`. Neither
//!   holds more than a piece and a batch, whatever the size of the state.
//!
//! Sharing: openraft calls `apply` and `install_snapshot` one at a time
//! (`&mut self`); [`SnapshotBuilder`]s run beside them, reading a CairnDB
//! snapshot, which is consistent at one point whatever is written
//! meanwhile, of the data generation current when it was taken (which
//! the builder holds, so that an install does not drop it under the
//! build). Recording a snapshot is serialized by a lock shared by the
//! state machine and its builders.

use std::collections::HashMap;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use cairndb::{Db, Keyspace, WriteBatch, WriteOptions};
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use tokio::sync::Mutex;

use crate::codec::{DecodeError, SnapshotReader, SnapshotWriter};
use crate::error::{BadRecord, Result, blocking, io};
use crate::log_store::{from_json, to_json};
use crate::snapshot::{
    Generation, KV_FAMILY, SNAPSHOT_FAMILY, SnapshotData, Stored, parse_generation,
};
use crate::{NodeId, Op, Request, Response, Shared, TypeConfig};

/// `raft_meta` key of the last applied log id.
pub(crate) const KEY_APPLIED: &[u8] = b"sm.applied";
/// `raft_meta` key of the last applied membership.
pub(crate) const KEY_MEMBERSHIP: &[u8] = b"sm.membership";
/// `raft_meta` key of the current snapshot's metadata.
pub(crate) const KEY_SNAPSHOT_META: &[u8] = b"sm.snapshot.meta";
/// `raft_meta` key of where the current snapshot's data is ([`Stored`]).
pub(crate) const KEY_SNAPSHOT_STORED: &[u8] = b"sm.snapshot.stored";
/// `raft_meta` key of the current data generation's keyspace name
/// (absent: `kv`).
pub(crate) const KEY_KV: &[u8] = b"sm.kv";
/// `raft_meta` key of a snapshot's whole data as one value, as stores
/// before snapshot keyspaces kept it; moved into one when the store opens.
const KEY_LEGACY_SNAPSHOT_DATA: &[u8] = b"sm.snapshot.data";

/// Bytes of pairs an install writes per (unsynced) batch.
const INSTALL_BATCH_BYTES: usize = 4 << 20;

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
    snapshot_read_error(None, e)
}

/// Openraft's error for a failed read of snapshot data (`meta`'s if
/// known).
fn snapshot_read_error<E: std::error::Error + 'static>(
    meta: Option<&Meta>,
    e: E,
) -> StorageError<NodeId> {
    io(|e| StorageIOError::read_snapshot(meta.map(Meta::signature), e))(e)
}

/// Openraft's error for a failed write of snapshot data.
fn snapshot_write_error<E: std::error::Error + 'static>(
    meta: Option<&Meta>,
    e: E,
) -> StorageError<NodeId> {
    io(|e| StorageIOError::write_snapshot(meta.map(Meta::signature), e))(e)
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
        match self.shared.kv().ks.get(key).map_err(read_sm())? {
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
            .kv()
            .ks
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
        for kv in self.shared.kv().ks.iter() {
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
    kv: &Keyspace,
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

/// The recorded current snapshot (in memory as in `raft_meta`).
#[derive(Debug, Clone)]
pub(crate) struct Current {
    pub meta: Meta,
    pub len: u64,
    pub generation: Arc<Generation>,
}

/// What [`load`] finds in a store being opened.
pub(crate) struct Loaded {
    pub kv: Arc<Generation>,
    pub current: Option<Current>,
    pub next_generation: u64,
}

fn bad_record(db: &Db, detail: String) -> cairndb::Error {
    cairndb::Error::Corruption {
        file: db.path().to_path_buf(),
        offset: 0,
        detail: format!("keyspace {}: {detail}", crate::META_KEYSPACE),
    }
}

fn meta_record<T: serde::de::DeserializeOwned>(
    db: &Db,
    meta: &Keyspace,
    key: &[u8],
) -> std::result::Result<Option<T>, cairndb::Error> {
    match meta.get(key)? {
        Some(b) => from_json(&b, &String::from_utf8_lossy(key))
            .map(Some)
            .map_err(|e| bad_record(db, e.0)),
        None => Ok(None),
    }
}

/// Reads the state machine's records of a store being opened: which
/// keyspace holds the data and which the current snapshot; drops the
/// generations they do not name (left by a crash); moves a snapshot kept
/// as one value (stores before snapshot keyspaces) into a keyspace.
pub(crate) fn load(db: &Db, meta: &Keyspace) -> std::result::Result<Loaded, cairndb::Error> {
    let kv_name: String =
        meta_record(db, meta, KEY_KV)?.unwrap_or_else(|| crate::KV_KEYSPACE.to_owned());
    if parse_generation(&kv_name).is_none_or(|(f, _)| f != KV_FAMILY) {
        return Err(bad_record(db, format!("sm.kv names {kv_name:?}")));
    }
    let stored: Option<Stored> = meta_record(db, meta, KEY_SNAPSHOT_STORED)?;
    let snapshot_meta: Option<Meta> = meta_record(db, meta, KEY_SNAPSHOT_META)?;
    if let Some(s) = &stored
        && parse_generation(&s.keyspace).is_none_or(|(f, n)| f != SNAPSHOT_FAMILY || n == 0)
    {
        return Err(bad_record(
            db,
            format!("sm.snapshot.stored names {:?}", s.keyspace),
        ));
    }
    let names = db.keyspaces();
    let named = |name: &str| names.iter().any(|n| n == name);
    let mut next_generation = 1;
    for name in &names {
        let Some((_, n)) = parse_generation(name) else {
            continue;
        };
        next_generation = next_generation.max(n.saturating_add(1));
        let recorded = *name == kv_name || stored.as_ref().is_some_and(|s| s.keyspace == *name);
        if !recorded {
            db.drop_keyspace(name)?;
        }
    }
    if kv_name != crate::KV_KEYSPACE && !named(&kv_name) {
        return Err(bad_record(
            db,
            format!("sm.kv names {kv_name:?}, which does not exist"),
        ));
    }
    let kv = Generation::open(db, &kv_name, true)?;
    let current = match (stored, snapshot_meta) {
        (Some(s), Some(m)) => {
            if !named(&s.keyspace) {
                return Err(bad_record(
                    db,
                    format!(
                        "the current snapshot's keyspace {:?} does not exist",
                        s.keyspace
                    ),
                ));
            }
            Some(Current {
                meta: m,
                len: s.len,
                generation: Generation::open(db, &s.keyspace, true)?,
            })
        }
        (None, Some(m)) => match meta.get(KEY_LEGACY_SNAPSHOT_DATA)? {
            Some(bytes) => {
                let name = crate::snapshot::generation_name(SNAPSHOT_FAMILY, next_generation);
                next_generation += 1;
                let generation = Generation::open(db, &name, false)?;
                let mut data = SnapshotData::new(generation.clone(), Arc::new(()), 0);
                let moved = data.write_all(&bytes).and_then(|()| data.flush());
                moved.map_err(|e| cairndb::Error::Io {
                    context: "moving the current snapshot into its keyspace".into(),
                    source: e,
                })?;
                let stored = Stored {
                    keyspace: name,
                    len: data.len(),
                };
                let mut batch = WriteBatch::new();
                batch.put_in(meta, KEY_SNAPSHOT_STORED, to_json(&stored))?;
                batch.delete_in(meta, KEY_LEGACY_SNAPSHOT_DATA)?;
                db.write(batch, &WriteOptions::synced())?;
                generation.set_current(true);
                Some(Current {
                    meta: m,
                    len: stored.len,
                    generation,
                })
            }
            None => return Err(bad_record(db, "snapshot metadata without data".into())),
        },
        (Some(_), None) => return Err(bad_record(db, "snapshot data without metadata".into())),
        (None, None) => None,
    };
    Ok(Loaded {
        kv,
        current,
        next_generation,
    })
}

/// Puts `meta` and where `data` is as the current snapshot into `batch`.
fn put_snapshot(
    shared: &Shared,
    batch: &mut WriteBatch,
    meta: &Meta,
    data: &SnapshotData,
) -> Result<()> {
    let w = |e| io(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))(e);
    let stored = Stored {
        keyspace: data.generation().name().to_owned(),
        len: data.len(),
    };
    batch
        .put_in(&shared.meta, KEY_SNAPSHOT_META, to_json(meta))
        .map_err(w)?;
    batch
        .put_in(&shared.meta, KEY_SNAPSHOT_STORED, to_json(&stored))
        .map_err(w)
}

/// After the write `put_snapshot` went into: `data` is the current
/// snapshot, and the one before it leaves once no reader holds it.
/// Called under the snapshot lock.
fn make_current(shared: &Shared, meta: &Meta, data: &SnapshotData) {
    let generation = data.generation().clone();
    generation.set_current(true);
    let new = Current {
        meta: meta.clone(),
        len: data.len(),
        generation,
    };
    let mut current = shared.current.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = current.replace(new)
        && !Arc::ptr_eq(&old.generation, data.generation())
    {
        old.generation.set_current(false);
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    /// Streams the state machine as of one CairnDB snapshot (data and
    /// applied state read at the same point) into a new snapshot
    /// keyspace, records it as the current snapshot (synced) unless a
    /// newer one is recorded, and returns it.
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
    let (kv, snap) = shared.kv_and_snapshot();
    let get = |key: &[u8]| snap.get_in(&shared.meta, key).map_err(read_snapshot);
    let applied: Option<LogId<NodeId>> = match get(KEY_APPLIED)? {
        Some(b) => Some(from_json(&b, "sm.applied").map_err(read_snapshot)?),
        None => None,
    };
    let membership: Membership = match get(KEY_MEMBERSHIP)? {
        Some(b) => from_json(&b, "sm.membership").map_err(read_snapshot)?,
        None => Membership::default(),
    };
    let write = |e| snapshot_write_error(None, e);
    let write_io = |e| snapshot_write_error(None, e);
    let generation = shared.new_generation(SNAPSHOT_FAMILY).map_err(write)?;
    let data = SnapshotData::new(generation, shared.token.clone(), 0);
    let mut w = SnapshotWriter::new(data).map_err(write_io)?;
    let mut pairs = snap.iter_in(&kv.ks);
    while let Some(kv) = pairs.next_ref() {
        let (k, v) = kv.map_err(read_snapshot)?;
        w.push(k, v).map_err(write_io)?;
    }
    drop(pairs);
    let mut data = w.finish().map_err(write_io)?;
    data.flush().map_err(write_io)?;
    // The CairnDB snapshot's seqno tells two snapshots of one log id
    // apart (openraft asks ids to differ between builds).
    let snapshot_id = match &applied {
        Some(id) => format!("{}-{}-{}", id.leader_id, id.index, snap.seqno()),
        None => format!("none-{}", snap.seqno()),
    };
    drop(snap);
    drop(kv);
    let meta = Meta {
        last_log_id: applied,
        last_membership: membership,
        snapshot_id,
    };
    {
        let _one = lock.blocking_lock();
        let newer = shared
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|cur| cur.meta.last_log_id > meta.last_log_id);
        if !newer {
            let mut batch = WriteBatch::new();
            put_snapshot(shared, &mut batch, &meta, &data)?;
            shared
                .db
                .write(batch, &WriteOptions::synced())
                .map_err(io(|e| {
                    StorageIOError::write_snapshot(Some(meta.signature()), e)
                }))?;
            make_current(shared, &meta, &data);
        }
    }
    data.seek(SeekFrom::Start(0)).map_err(read_snapshot)?;
    Ok(Snapshot {
        meta,
        snapshot: Box::new(data),
    })
}

/// Reads snapshot data from `src`, writing each byte read into `copy`
/// too if there is one.
struct Tee<'a> {
    src: &'a mut SnapshotData,
    copy: Option<&'a mut SnapshotData>,
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.src.read(buf)?;
        if let Some(copy) = self.copy.as_mut() {
            copy.write_all(&buf[..n])?;
        }
        Ok(n)
    }
}

/// `install_snapshot`'s work, on a thread that may block.
fn install(shared: &Shared, lock: &Mutex<()>, meta: &Meta, mut data: SnapshotData) -> Result<()> {
    let bad = |e| snapshot_read_error(Some(meta), e);
    let bad_io = |e| snapshot_read_error(Some(meta), e);
    let write = |e| snapshot_write_error(Some(meta), e);
    let write_io = |e| snapshot_write_error(Some(meta), e);
    data.flush().map_err(write_io)?;
    data.seek(SeekFrom::Start(0)).map_err(bad_io)?;
    // Data received by this store is stored already; data of another
    // store (a test handing one store's snapshot to another) is copied
    // as it is read.
    let mut copy = match data.is_of(&shared.token) {
        true => None,
        false => {
            let generation = shared.new_generation(SNAPSHOT_FAMILY).map_err(write)?;
            Some(SnapshotData::new(generation, shared.token.clone(), 0))
        }
    };
    // 1. The pairs into a new data generation, in unsynced batches, each
    // checked as it is read (the data came from another node). Bad data
    // leaves only the new generation, which is dropped with its handle.
    let kv = shared.new_generation(KV_FAMILY).map_err(write)?;
    let tee = Tee {
        src: &mut data,
        copy: copy.as_mut(),
    };
    let mut reader = SnapshotReader::new(BufReader::with_capacity(1 << 16, tee)).map_err(bad)?;
    let mut batch = WriteBatch::new();
    while let Some((k, v)) = reader.next_pair().map_err(bad)? {
        if std::str::from_utf8(k).is_err() || std::str::from_utf8(v).is_err() {
            return Err(snapshot_read_error(
                Some(meta),
                DecodeError {
                    offset: 0,
                    detail: "a key or value is not UTF-8",
                },
            ));
        }
        batch.put_in(&kv.ks, k, v).map_err(write_sm())?;
        if batch.size_bytes() >= INSTALL_BATCH_BYTES {
            let full = std::mem::replace(&mut batch, WriteBatch::new());
            shared
                .db
                .write(full, &WriteOptions::default())
                .map_err(write_sm())?;
        }
    }
    drop(reader);
    let stored = match copy {
        Some(mut copy) => {
            copy.flush().map_err(write_io)?;
            copy
        }
        None => data,
    };
    // 2. One synced batch names the new generation with the applied
    // state and the snapshot; it makes the unsynced batches durable too.
    batch
        .put_in(&shared.meta, KEY_KV, to_json(&kv.name()))
        .map_err(write_sm())?;
    batch
        .put_in(&shared.meta, KEY_APPLIED, to_json(&meta.last_log_id))
        .map_err(write_sm())?;
    batch
        .put_in(&shared.meta, KEY_MEMBERSHIP, to_json(&meta.last_membership))
        .map_err(write_sm())?;
    put_snapshot(shared, &mut batch, meta, &stored)?;
    // Under the snapshot lock, so that a builder's compare-and-record
    // does not straddle this write; the data generation is switched
    // under its write lock, so that no build pairs the old data with the
    // new applied state.
    let _one = lock.blocking_lock();
    let (old, ()) = shared
        .switch_kv(|_| {
            shared.db.write(batch, &WriteOptions::synced())?;
            kv.set_current(true);
            Ok((kv.clone(), ()))
        })
        .map_err(write_sm())?;
    old.set_current(false);
    make_current(shared, meta, &stored);
    Ok(())
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
        let generation = self.shared.kv();
        let kv = &generation.ks;
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

    /// A new, empty snapshot keyspace to receive into; dropped unless the
    /// data is installed.
    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>> {
        let shared = self.shared.clone();
        let generation = blocking(move || shared.new_generation(SNAPSHOT_FAMILY))
            .await
            .map_err(io(|e| StorageIOError::write_snapshot(None, e)))?;
        Ok(Box::new(SnapshotData::new(
            generation,
            self.shared.token.clone(),
            0,
        )))
    }

    /// Replaces the data with the snapshot's pairs and the applied state
    /// with its metadata, and records it as the current snapshot: the
    /// pairs go into a new data generation as they are decoded, then one
    /// synced batch switches to it. A crash leaves either the state
    /// before the call or the installed one, never a mix; bad data
    /// changes nothing.
    async fn install_snapshot(&mut self, meta: &Meta, snapshot: Box<SnapshotData>) -> Result<()> {
        let shared = self.shared.clone();
        let lock = self.snapshot_lock.clone();
        let meta = meta.clone();
        let done =
            tokio::task::spawn_blocking(move || install(&shared, &lock, &meta, *snapshot)).await;
        match done {
            Ok(r) => r,
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        let current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(current.map(|c| Snapshot {
            meta: c.meta,
            snapshot: Box::new(SnapshotData::new(
                c.generation,
                self.shared.token.clone(),
                c.len,
            )),
        }))
    }
}
