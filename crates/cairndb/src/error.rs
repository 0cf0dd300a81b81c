//! The one error type of the engine.
//!
//! Variants are grouped by what the caller can do about them:
//! - `InvalidArgument` / `LimitExceeded`: fix the input and retry.
//! - `Io`: the operating system refused an operation. Data already
//!   acknowledged is safe; the failed operation is not visible (a failed
//!   journal write may still be found in the journal on reopen).
//! - `Corruption`: bytes on disk do not match their checksum or their
//!   documented format. Nothing is guessed: the read fails.
//! - `Poisoned`: an earlier write or sync failed in a way that leaves the
//!   journal's durable state unknown. Writes are refused from then on (reads
//!   keep working); reopen the database to recover from what is durable.
//! - `Closed`: the handle was closed.
//! - `Conflict`: a transaction lost to a concurrent commit; it wrote
//!   nothing. Run it again.
//! - `KeyspaceDropped`: the keyspace a handle names was dropped; open it
//!   again by name (a new, empty keyspace) to go on.

use std::path::PathBuf;

/// Result alias used by every fallible CairnDB call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in CairnDB.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An IO operation failed. `context` names what the engine was doing.
    #[error("io error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Stored bytes are damaged or not in CairnDB's format.
    #[error("corruption in {file} at offset {offset}: {detail}")]
    Corruption {
        file: PathBuf,
        offset: u64,
        detail: String,
    },
    /// The caller passed something the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A documented limit (see `cairndb::limits`) was exceeded.
    #[error("limit exceeded: {what} is {actual}, the maximum is {max}")]
    LimitExceeded {
        what: &'static str,
        actual: u64,
        max: u64,
    },
    /// A previous failure of a journal or manifest write/sync left durable
    /// state unknown; the handle refuses writes until reopened.
    #[error("database is poisoned by an earlier failure: {0}")]
    Poisoned(String),
    /// The database was closed.
    #[error("database is closed")]
    Closed,
    /// A transaction's commit found a conflicting commit since it began;
    /// nothing of it was written. Retry the transaction.
    #[error("transaction conflict: {0}")]
    Conflict(String),
    /// The keyspace was dropped (by any handle); nothing was done.
    #[error("keyspace {0:?} was dropped")]
    KeyspaceDropped(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        detail: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            detail: detail.into(),
        }
    }

    /// True for a transaction conflict (`Error::Conflict`).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }

    /// True for an IO error whose cause is a full device (`ENOSPC`).
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull)
    }

    /// True if this error reports damaged or foreign on-disk bytes.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// A copy of this error for a second reader (errors hold `io::Error`,
    /// which is not `Clone`). Used where a stored background error is
    /// reported to every later caller.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption {
                file,
                offset,
                detail,
            } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                detail: detail.clone(),
            },
            Error::InvalidArgument(s) => Error::InvalidArgument(s.clone()),
            Error::LimitExceeded { what, actual, max } => Error::LimitExceeded {
                what,
                actual: *actual,
                max: *max,
            },
            Error::Poisoned(s) => Error::Poisoned(s.clone()),
            Error::Closed => Error::Closed,
            Error::Conflict(s) => Error::Conflict(s.clone()),
            Error::KeyspaceDropped(s) => Error::KeyspaceDropped(s.clone()),
        }
    }
}
