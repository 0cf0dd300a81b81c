//! The Raft log over CairnDB: entries in the `raft_log` keyspace, keyed by
//! big-endian index; the vote and the committed and last purged log ids
//! in `raft_meta`.
//!
//! Invariants kept: the entries present are consecutive (appends extend
//! the log or overwrite its tail after a truncate; truncate removes a
//! suffix, purge a prefix), and every entry's index is its key's.
//!
//! Sharing: openraft calls the store's methods one at a time (`&mut
//! self`) and each write is finished (synced where the module doc of the
//! crate says so) when its call returns, so writes are applied in call
//! order. [`LogReader`]s read concurrently from other tasks; CairnDB reads
//! never block on writes.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use cairndb::{WriteBatch, WriteOptions};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageIOError, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{log_index, log_key};
use crate::error::{BadRecord, Result, blocking, io};
use crate::{NodeId, Shared, TypeConfig};

/// `raft_meta` key of the vote.
pub(crate) const KEY_VOTE: &[u8] = b"vote";
/// `raft_meta` key of the last committed log id.
pub(crate) const KEY_COMMITTED: &[u8] = b"committed";
/// `raft_meta` key of the last purged log id.
pub(crate) const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// Most entries one `try_get_log_entries` call reads: openraft asks for
/// bounded ranges when it replicates, and this bounds a caller's unbounded
/// one.
const ENTRIES_PER_READ_MAX: usize = 1 << 20;

/// The log of one Raft node. Opened with [`crate::open`].
#[derive(Debug, Clone)]
pub struct LogStore {
    shared: Shared,
    /// The committed id openraft saved last, if it is not written yet
    /// (`Some`): it goes into the next batch this store writes, so that
    /// saving it, once per commit, costs no write of its own.
    committed: Option<Option<LogId<NodeId>>>,
}

/// Reads log entries for replication; taken from
/// [`RaftLogStorage::get_log_reader`].
#[derive(Debug, Clone)]
pub struct LogReader {
    shared: Shared,
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("openraft's and this crate's types serialize to JSON")
}

pub(crate) fn from_json<T: DeserializeOwned>(
    bytes: &[u8],
    what: &str,
) -> std::result::Result<T, BadRecord> {
    serde_json::from_slice(bytes).map_err(|e| BadRecord(format!("{what} does not decode: {e}")))
}

impl Shared {
    /// The value at `key` in `raft_meta`, decoded.
    pub(crate) fn meta_get<T: DeserializeOwned>(
        &self,
        key: &[u8],
        make: fn(openraft::AnyError) -> StorageIOError<NodeId>,
    ) -> Result<Option<T>> {
        let Some(bytes) = self.meta.get(key).map_err(io(make))? else {
            return Ok(None);
        };
        let what = String::from_utf8_lossy(key).into_owned();
        from_json(&bytes, &what).map(Some).map_err(io(make))
    }
}

/// Entries with indexes in `range`, in order, at most
/// `ENTRIES_PER_READ_MAX`.
fn read_entries<RB: RangeBounds<u64>>(
    shared: &Shared,
    range: RB,
) -> Result<Vec<Entry<TypeConfig>>> {
    let key = |b: Bound<&u64>| b.map(|i| log_key(*i));
    let keys = (key(range.start_bound()), key(range.end_bound()));
    let mut out = Vec::new();
    for kv in shared.log.range(keys).take(ENTRIES_PER_READ_MAX) {
        let (k, v) = kv.map_err(io(StorageIOError::read_logs))?;
        out.push(decode_entry(&k, &v)?);
    }
    Ok(out)
}

/// The entry stored under `key`, checked to carry the key's index.
fn decode_entry(key: &[u8], value: &[u8]) -> Result<Entry<TypeConfig>> {
    let bad = |detail: String| io(StorageIOError::read_logs)(BadRecord(detail));
    let Some(index) = log_index(key) else {
        return Err(bad(format!("log key of {} bytes", key.len())));
    };
    let entry: Entry<TypeConfig> =
        from_json(value, "log entry").map_err(io(StorageIOError::read_logs))?;
    if entry.log_id.index != index {
        return Err(bad(format!(
            "entry {} stored under index {index}",
            entry.log_id
        )));
    }
    Ok(entry)
}

impl LogStore {
    pub(crate) fn new(shared: Shared) -> Self {
        LogStore {
            shared,
            committed: None,
        }
    }

    /// The id of the last entry present, if any.
    fn last_entry_id(&self) -> Result<Option<LogId<NodeId>>> {
        match self.shared.log.iter().next_back() {
            None => Ok(None),
            Some(kv) => {
                let (k, v) = kv.map_err(io(StorageIOError::read_logs))?;
                Ok(Some(decode_entry(&k, &v)?.log_id))
            }
        }
    }

    /// Writes `batch` (synced if `sync`) off the async runtime's workers,
    /// with the committed id saved since the last write, if any.
    async fn write(
        &mut self,
        mut batch: WriteBatch,
        sync: bool,
        make: fn(openraft::AnyError) -> StorageIOError<NodeId>,
    ) -> Result<()> {
        if let Some(committed) = self.committed.take() {
            batch
                .put_in(&self.shared.meta, KEY_COMMITTED, to_json(&committed))
                .map_err(io(make))?;
        }
        let db = self.shared.db.clone();
        blocking(move || db.write(batch, &WriteOptions { sync }))
            .await
            .map_err(io(make))
    }

    /// Keys of the entries with indexes in `range`, to delete.
    fn keys_in<RB: RangeBounds<u64>>(&self, range: RB, batch: &mut WriteBatch) -> Result<()> {
        let key = |b: Bound<&u64>| b.map(|i| log_key(*i));
        let keys = (key(range.start_bound()), key(range.end_bound()));
        for kv in self.shared.log.range(keys) {
            let (k, _) = kv.map_err(io(StorageIOError::read_logs))?;
            batch
                .delete_in(&self.shared.log, &k)
                .map_err(io(StorageIOError::write_logs))?;
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        read_entries(&self.shared, range)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        read_entries(&self.shared, range)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId<NodeId>> = self
            .shared
            .meta_get(KEY_LAST_PURGED, StorageIOError::read_logs)?;
        let last_log_id = self.last_entry_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            shared: self.shared.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch
            .put_in(&self.shared.meta, KEY_VOTE, to_json(vote))
            .map_err(io(StorageIOError::write_vote))?;
        self.write(batch, true, StorageIOError::write_vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>> {
        self.shared.meta_get(KEY_VOTE, StorageIOError::read_vote)
    }

    /// Not written now: kept, and written with the next batch this store
    /// writes (an append, synced, or a truncate, purge or vote). A
    /// committed id that is lost (to a power cut, or never written before
    /// the store closed) only makes a restart re-apply later, when the
    /// leader tells it again.
    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<()> {
        self.committed = Some(committed);
        Ok(())
    }

    /// The committed id saved last, written or not.
    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>> {
        if let Some(committed) = self.committed {
            return Ok(committed);
        }
        Ok(self
            .shared
            .meta_get::<Option<LogId<NodeId>>>(KEY_COMMITTED, StorageIOError::read)?
            .flatten())
    }

    /// One synced batch for all `entries`; `callback` is told once it is
    /// durable, before this returns (the entries are readable then too).
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::new();
        for entry in entries {
            batch
                .put_in(
                    &self.shared.log,
                    log_key(entry.log_id.index),
                    to_json(&entry),
                )
                .map_err(io(StorageIOError::write_logs))?;
        }
        if batch.is_empty() {
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        let written = self.write(batch, true, StorageIOError::write_logs).await;
        match &written {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        written
    }

    /// Deletes the entries from `log_id.index` on, in one synced batch.
    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        let mut batch = WriteBatch::new();
        self.keys_in(log_id.index.., &mut batch)?;
        if batch.is_empty() {
            return Ok(());
        }
        self.write(batch, true, StorageIOError::write_logs).await
    }

    /// Deletes the entries up to `log_id.index` and records `log_id` as
    /// the last purged, in one batch (not synced: a purge lost to a power
    /// cut leaves entries that are purged again).
    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<()> {
        let mut batch = WriteBatch::new();
        self.keys_in(..=log_id.index, &mut batch)?;
        batch
            .put_in(&self.shared.meta, KEY_LAST_PURGED, to_json(&log_id))
            .map_err(io(StorageIOError::write_logs))?;
        self.write(batch, false, StorageIOError::write_logs).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misplaced_entry_is_refused() {
        let entry = openraft::testing::blank_ent::<TypeConfig>(1, 1, 5);
        let json = to_json(&entry);
        assert!(decode_entry(&log_key(5), &json).is_ok());
        assert!(decode_entry(&log_key(6), &json).is_err());
        assert!(decode_entry(b"abc", &json).is_err());
        assert!(decode_entry(&log_key(5), b"{").is_err());
    }

    #[test]
    fn storage_errors_name_their_subject() {
        let e: openraft::StorageError<NodeId> =
            io(StorageIOError::read_vote)(BadRecord("x".into()));
        assert!(e.to_string().to_lowercase().contains("vote"), "{e}");
    }
}
