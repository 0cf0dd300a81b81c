//! openraft's storage over CairnDB: a Raft log ([`LogStore`]) and a
//! key-value state machine ([`StateMachine`]) kept in one CairnDB
//! database, one node's whole durable Raft state in one directory.
//!
//! ```no_run
//! # fn main() -> Result<(), cairn_raft::OpenError> {
//! let (log_store, state_machine) = cairn_raft::open("/var/lib/node-1", cairndb::Options::default())?;
//! // Raft::new(1, config, network, log_store, state_machine).await ...
//! # Ok(()) }
//! ```
//!
//! # Which openraft
//!
//! openraft 0.9 (0.9.25 when this was written). The newest version on
//! crates.io is a 0.10.0 alpha; a pre-release may change its storage
//! traits between alphas (0.10 moves them around), so this crate takes the
//! newest release that is not a pre-release. In 0.9 the storage traits of
//! the second generation ([`openraft::storage::RaftLogStorage`],
//! [`openraft::RaftLogReader`], [`openraft::storage::RaftStateMachine`],
//! [`openraft::RaftSnapshotBuilder`]) are sealed unless the `storage-v2`
//! feature is on; it is, and they are implemented directly (no
//! `RaftStorage` + `Adaptor`).
//!
//! # Layout (all keyspaces of one database)
//!
//! | keyspace    | key                               | value |
//! |-------------|-----------------------------------|-------|
//! | `raft_log`  | log index, 8 bytes big-endian     | the entry, JSON |
//! | `raft_meta` | `vote`, `committed`, `last_purged` | JSON |
//! | `raft_meta` | `sm.applied`, `sm.membership`     | JSON: the state machine's applied state |
//! | `raft_meta` | `sm.kv`                           | JSON: the name of the data's keyspace (absent: `kv`) |
//! | `raft_meta` | `sm.snapshot.meta`, `sm.snapshot.stored` | JSON: the current snapshot's metadata, and its data's keyspace and length |
//! | `kv`, `kv.N` | the application's key            | its value (one keyspace at a time holds the data) |
//! | `raft_snapshot.N` | piece number, 8 bytes big-endian | 1 MiB of a snapshot's data ([`codec`] format) |
//!
//! Each install writes the data into a new `kv.N` and each snapshot
//! into a new `raft_snapshot.N` ([`snapshot`] says how generations come
//! and go). A store written before snapshot keyspaces kept the current
//! snapshot's data as one value (`sm.snapshot.data`); opening it moves
//! that into a snapshot keyspace.
//!
//! Big-endian indexes make key order log order, so the last entry is the
//! last key and a range of indexes is a range of keys.
//!
//! # Serialization
//!
//! Entries, votes, log ids and memberships are serialized with serde as
//! JSON (`serde_json`): it is maintained by the serde authors, it is
//! self-describing (a record can be read by eye with `cairn`, and a field
//! added later with a serde default still reads old records, which a
//! schema-less binary format such as postcard cannot do), and it is the
//! format the HTTP service sends the same types in. The price is size and
//! speed, small beside an fsync per append. Snapshot data has its own
//! framing ([`codec`]): a stream of length-prefixed key-value pairs.
//!
//! # What is durable when
//!
//! - `append`: all given entries go in one synced `WriteBatch`; the flush
//!   callback is called after that write returned, so the entries are
//!   durable then. Concurrent synced writes (appends, applies, votes of
//!   this and other stores in the process) share fsyncs by CairnDB's group
//!   commit.
//! - `save_vote`, `truncate`, `install_snapshot`, a built snapshot:
//!   synced before the call returns. A build's and an install's bulk
//!   writes (snapshot pieces, the new data generation) are unsynced; the
//!   synced write that records them makes them durable, and until it
//!   does, no record names them.
//! - `apply`, `purge`: not synced (they survive a process crash, not
//!   necessarily a power cut). `save_committed` writes nothing itself:
//!   the id goes into the store's next write (an append, truncate, purge
//!   or vote), and is lost if the store closes first. Losing any of them
//!   is harmless: an apply's entries are in the log, which keeps them until
//!   a snapshot holds their effect, so a lost apply is applied again (at
//!   startup up to the saved committed id, or once the leader tells the
//!   node what is committed); the committed id only lets a restart
//!   re-apply sooner; and a lost purge leaves entries that are purged
//!   again (openraft purges up to the applied id at startup when the log
//!   ends before it). A later synced write makes them durable too, as
//!   CairnDB's journal is written in order: the next append makes every
//!   apply before it durable, and so does recording a snapshot, which
//!   is why the log never loses an entry whose apply a power cut can
//!   still take away.
//! - The state machine's data, applied log id and membership are written
//!   in one batch per `apply` call, and a snapshot install switches the
//!   data (to the generation it filled), the applied state and the
//!   current snapshot in one batch: after any crash the state machine is
//!   wholly before or wholly after a call.
//!
//! A power cut at each point, and what a reopen finds:
//! - inside `append`, before its write returned: all of the call's
//!   entries or none (a batch is atomic); the callback was not called, so
//!   openraft counted none of them: a follower gets them again from the
//!   leader, and on a leader they were not committed by this node's
//!   acknowledgement.
//! - inside `save_vote` or `truncate`, before the write returned: the old
//!   vote or log, as if the call had not been made; openraft acted on
//!   neither before the call returned.
//! - inside `apply`, or after it and before the next synced write: the
//!   state machine before the call (openraft applies the committed
//!   entries again) or after it, never a part.
//! - inside `install_snapshot`: the old data, applied state and current
//!   snapshot, or the new ones. The purge openraft issues after an
//!   install may be lost; see above.
//! - inside `build_snapshot`: the previous current snapshot or the new
//!   one; the state machine is untouched by a build.
//!
//! `tests/reopen.rs` checks these on CairnDB's simulated file system
//! (power cuts that keep only synced bytes, or a random part of the rest)
//! and with a process that aborts with the store open.
//!
//! # The service
//!
//! With the default feature `service`, [`service`] runs a node of a
//! replicated key-value service over HTTP (axum serving, reqwest calling
//! peers), and the binary `cairn-raft-node` runs one. [`client::Client`]
//! finds the leader and follows its changes; the binary `cairn-cluster`
//! (`init`, `add`, `status`) administers a cluster.
//!
//! Tests of the service: `tests/cluster.rs` and `tests/client.rs` start
//! three nodes in one process on loopback ports; `tests/failover.rs` runs
//! three node processes, kills the leader with SIGKILL under load, and
//! checks that no acknowledged write is lost, that no node holds a value
//! never written, and that the history of a few keys is linearizable
//! ([`lincheck`]); `tests/partition.rs` cuts a leader off (a test hook)
//! and checks that it serves no linearizable read; `tests/bench.rs`
//! (ignored) measures synced puts through a cluster against one CairnDB.
//!
//! # Limits
//!
//! - A snapshot is a copy of the state machine's data in its own
//!   keyspace, and an install writes the whole state into a new one
//!   (about twice the state on disk while both exist); memory holds one
//!   1 MiB piece and one 4 MiB batch, whatever the size of the state.
//! - Keys and values of the state machine are strings (UTF-8), as the
//!   HTTP service wants them.
//! - A log read returns at most `ENTRIES_PER_READ_MAX` (2^20) entries;
//!   openraft reads in bounded ranges.
//! - The service: writes and linearizable reads go to the leader (another
//!   node answers 421 naming it; it does not forward; [`client::Client`]
//!   follows), snapshot chunks travel as JSON
//!   arrays of numbers (about four times their size), and there is no
//!   TLS or authentication: it is for a trusted network.

#![allow(
    clippy::result_large_err,
    reason = "openraft's StorageError is large, and its storage traits return it; the helpers return what the traits do"
)]

#[cfg(feature = "service")]
pub mod client;
pub mod codec;
mod error;
pub mod lincheck;
mod log_store;
#[cfg(feature = "service")]
pub mod service;
pub mod snapshot;
mod state_machine;
mod types;

pub use error::OpenError;
pub use log_store::{LogReader, LogStore};
pub use snapshot::SnapshotData;
pub use state_machine::{SnapshotBuilder, StateMachine};
pub use types::{NodeId, Op, Request, Response, TypeConfig};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cairndb::{Db, Keyspace, Options};
use snapshot::Generation;

/// Keyspace of the log entries.
pub const LOG_KEYSPACE: &str = "raft_log";
/// Keyspace of the vote, the committed and last purged log ids, the
/// applied state and the current snapshot.
pub const META_KEYSPACE: &str = "raft_meta";
/// Keyspace of the application's data in a new store; each snapshot
/// install moves the data to a new one, `kv.N` (`raft_meta` key `sm.kv`
/// names the current one).
pub const KV_KEYSPACE: &str = "kv";

/// The database and keyspace handles the log store and the state machine
/// share. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Shared {
    pub db: Db,
    pub log: Keyspace,
    pub meta: Keyspace,
    /// The current generation of the state machine's data (`snapshot`
    /// module). Taken for reading with the CairnDB snapshot a build reads
    /// from, and for writing while an install switches it, so that a
    /// build reads the data and the applied state of one generation.
    kv: Arc<RwLock<Arc<Generation>>>,
    /// The recorded current snapshot, as in `raft_meta`; changed under
    /// the state machine's snapshot lock, after the synced write.
    pub current: Arc<Mutex<Option<state_machine::Current>>>,
    /// The next generation number of either family.
    next_generation: Arc<AtomicU64>,
    /// Tells this store's snapshot data from another's.
    pub token: Arc<()>,
}

impl Shared {
    fn open(db: Db) -> Result<Shared, cairndb::Error> {
        let meta = db.keyspace(META_KEYSPACE)?;
        let loaded = state_machine::load(&db, &meta)?;
        Ok(Shared {
            log: db.keyspace(LOG_KEYSPACE)?,
            meta,
            kv: Arc::new(RwLock::new(loaded.kv)),
            current: Arc::new(Mutex::new(loaded.current)),
            next_generation: Arc::new(AtomicU64::new(loaded.next_generation)),
            token: Arc::new(()),
            db,
        })
    }

    /// The current generation of the state machine's data.
    pub fn kv(&self) -> Arc<Generation> {
        self.kv.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The current data generation and a CairnDB snapshot taken while it
    /// was current.
    pub fn kv_and_snapshot(&self) -> (Arc<Generation>, cairndb::Snapshot) {
        let kv = self.kv.read().unwrap_or_else(|e| e.into_inner());
        (kv.clone(), self.db.snapshot())
    }

    /// Runs `f` with the current data generation held for writing (no
    /// build takes it meanwhile) and replaces it with what `f` returns.
    pub fn switch_kv<T>(
        &self,
        f: impl FnOnce(&Arc<Generation>) -> Result<(Arc<Generation>, T), cairndb::Error>,
    ) -> Result<(Arc<Generation>, T), cairndb::Error> {
        let mut kv = self.kv.write().unwrap_or_else(|e| e.into_inner());
        let (new, out) = f(&kv)?;
        Ok((std::mem::replace(&mut *kv, new), out))
    }

    /// A new, empty generation of `family`, not current.
    pub fn new_generation(&self, family: &str) -> Result<Arc<Generation>, cairndb::Error> {
        let n = self.next_generation.fetch_add(1, Ordering::Relaxed);
        assert!(
            n > 0,
            "generation 0 is the bare family name, never made anew"
        );
        Generation::open(&self.db, &snapshot::generation_name(family, n), false)
    }
}

/// Opens (creating if `opts` allow) the database at `path` and returns
/// the node's log store and state machine over it. Both hold the
/// database; it is closed when both (and every log reader and snapshot
/// builder taken from them) are dropped. Errors are CairnDB's
/// ([`cairndb::Db::open`]).
pub fn open(
    path: impl AsRef<std::path::Path>,
    opts: Options,
) -> Result<(LogStore, StateMachine), OpenError> {
    let db = Db::open(path, opts)?;
    from_db(db)
}

/// The log store and state machine over an open database, whose
/// `raft_log`, `raft_meta` and `kv` keyspaces they own (created if
/// missing).
pub fn from_db(db: Db) -> Result<(LogStore, StateMachine), OpenError> {
    let shared = Shared::open(db)?;
    Ok((LogStore::new(shared.clone()), StateMachine::new(shared)))
}
