//! CairnDB: an embedded, crash-safe, ordered key-value store.
//!
//! ```
//! # fn main() -> cairndb::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! use cairndb::{Db, Options, WriteBatch, WriteOptions};
//! let db = Db::open(dir.path(), Options::default())?;
//! db.put(b"apple", b"red")?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"banana", b"yellow")?;
//! batch.delete(b"apple")?;
//! db.write(batch, &WriteOptions { sync: true })?;
//! assert_eq!(db.get(b"banana")?.as_deref(), Some(&b"yellow"[..]));
//! let keys: Vec<Vec<u8>> = db.iter().map(|kv| kv.map(|(k, _)| k)).collect::<Result<_, _>>()?;
//! assert_eq!(keys, vec![b"banana".to_vec()]);
//! # Ok(()) }
//! ```
//!
//! Map of the modules (docs/architecture.md explains each path):
//! - `write/`: batches, group commit, journal append, memtable insert
//! - `read/`: point lookup, cursors, merging, the user iterator
//! - `recovery/`: open, manifest replay, journal replay; `repair.rs`:
//!   `Db::repair`, rebuilding a lost or damaged manifest
//! - `flush/`, `compaction/`: memtable → table; leveled merging
//! - `memtable/`, `version/`: the in-memory table; live table sets
//! - `format/`: every on-disk byte (journal, table, manifest)
//! - `io/`: the `Fs` trait, the POSIX and in-memory backends
//! - `follow/`: read-only and follower handles, the reader registry
//! - `pool.rs`: worker threads (scan and value GC reads, memtable inserts)
//! - `checkpoint.rs`, `backup.rs`: checkpoints and incremental backups

pub mod backup;
pub mod cache;
mod checkpoint;
mod compaction;
mod counter;
mod db;
mod engine;
pub mod error;
mod flush;
mod follow;
pub(crate) mod format;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod io;
mod keyspace;
pub mod limits;
mod memtable;
mod options;
mod pool;
mod read;
mod recovery;
mod sync;
mod txn;
mod verify;
mod version;
mod write;

pub use checkpoint::Checkpoint;
pub use db::{Db, Snapshot, Stats};
pub use error::{Error, Result};
pub use follow::{CatchUp, ReadOnlyDb, ReadOnlySnapshot};
pub use keyspace::{Keyspace, KeyspaceOptions};
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use options::Sabotage;
pub use options::{
    BYTEWISE_COMPARATOR, Compression, Misordered, Options, ValueReads, WriteOptions, misorders,
};
pub use read::iter::{Iter, KeyValue};
pub use recovery::repair::{
    JournalReplay, ManifestSalvage, RepairProgress, RepairReport, TableKept, TableLost,
};
pub use txn::{Isolation, Transaction, TxnIter};
pub use verify::VerifyReport;
pub use write::batch::WriteBatch;

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
