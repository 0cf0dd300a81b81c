//! Errors: CairnDB's and decoding errors, turned into openraft's
//! `StorageError` with the subject and verb openraft asks for.

use openraft::{AnyError, StorageError, StorageIOError};

use crate::NodeId;

/// Why [`crate::open`] failed: the database could not be opened or its
/// keyspaces created.
#[derive(Debug)]
pub struct OpenError(pub cairndb::Error);

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "opening the raft store: {}", self.0)
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<cairndb::Error> for OpenError {
    fn from(e: cairndb::Error) -> Self {
        OpenError(e)
    }
}

/// A stored record that does not decode: the database's checksums vouch
/// for its bytes, so this is a bug or a record of another format.
#[derive(Debug)]
pub(crate) struct BadRecord(pub String);

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadRecord {}

/// The storage error openraft expects, built by `f` from the source.
pub(crate) type Result<T> = std::result::Result<T, StorageError<NodeId>>;

/// Maps an error to a `StorageError` with `make` (one of
/// `StorageIOError`'s constructors: `read_logs`, `write_vote`, ...).
pub(crate) fn io<E, F>(make: F) -> impl FnOnce(E) -> StorageError<NodeId>
where
    E: std::error::Error + 'static,
    F: FnOnce(AnyError) -> StorageIOError<NodeId>,
{
    move |e| StorageError::IO {
        source: make(AnyError::new(&e)),
    }
}

/// Runs `f`, which blocks (CairnDB writes wait for an fsync), on tokio's
/// blocking pool, so that the async task calling it does not hold a
/// runtime worker while it waits.
pub(crate) async fn blocking<T, F>(f: F) -> std::result::Result<T, cairndb::Error>
where
    F: FnOnce() -> std::result::Result<T, cairndb::Error> + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(join) => Err(cairndb::Error::Poisoned(format!(
            "a storage task did not finish: {join}"
        ))),
    }
}
