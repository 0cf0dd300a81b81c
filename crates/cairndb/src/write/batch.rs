//! `WriteBatch`: operations applied atomically, in order.

use crate::format::batch as codec;
use crate::format::key::Kind;
use crate::limits::{BATCH_BYTES_MAX, BATCH_OPS_MAX, KEY_LEN_MAX, VALUE_LEN_MAX};
use crate::{Error, Keyspace, Result};

/// Puts and deletes applied atomically by `Db::write`: after any crash
/// either all of them are visible or none. Later operations on the same key
/// win. Limits are checked as operations are added, so a batch that was
/// built without error can always be written.
#[derive(Clone)]
pub struct WriteBatch {
    pub(crate) rep: Vec<u8>,
    count: u32,
    /// Handles of the keyspaces (other than the default) it writes to.
    keyspaces: Vec<Keyspace>,
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("ops", &self.count)
            .field("bytes", &self.rep.len())
            .finish()
    }
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > KEY_LEN_MAX {
        return Err(Error::LimitExceeded {
            what: "key length",
            actual: key.len() as u64,
            max: KEY_LEN_MAX as u64,
        });
    }
    Ok(())
}

pub(crate) fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > VALUE_LEN_MAX {
        return Err(Error::LimitExceeded {
            what: "value length",
            actual: value.len() as u64,
            max: VALUE_LEN_MAX as u64,
        });
    }
    Ok(())
}

impl WriteBatch {
    pub fn new() -> Self {
        WriteBatch {
            rep: codec::new_payload(),
            count: 0,
            keyspaces: Vec::new(),
        }
    }

    /// Adds a put. Fails with `LimitExceeded` if the key, the value or the
    /// batch would exceed its limit (`cairndb::limits`); the batch is then
    /// unchanged.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_value(value)?;
        self.push(0, Kind::Put, key, value).map(drop)
    }

    /// Adds a delete (a no-op for a missing key).
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.push(0, Kind::Delete, key.as_ref(), &[]).map(drop)
    }

    /// Adds a put to keyspace `ks`. A batch may hold ops of several
    /// keyspaces (of one database): they commit together or not at all.
    pub fn put_in(
        &mut self,
        ks: &Keyspace,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_value(value)?;
        self.push(ks.id(), Kind::Put, key, value)?;
        self.note(ks);
        Ok(())
    }

    /// Adds a delete to keyspace `ks`.
    pub fn delete_in(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<()> {
        self.push(ks.id(), Kind::Delete, key.as_ref(), &[])?;
        self.note(ks);
        Ok(())
    }

    /// Remembers that the batch writes to `ks`, so that a write checks the
    /// keyspace still exists and belongs to the database written to.
    pub(crate) fn note(&mut self, ks: &Keyspace) {
        if !self.keyspaces.iter().any(|k| k.same(ks)) {
            self.keyspaces.push(ks.clone());
        }
    }

    /// The keyspaces other than the default one the batch writes to.
    pub(crate) fn keyspaces(&self) -> &[Keyspace] {
        &self.keyspaces
    }

    /// Appends an op of keyspace `keyspace` (a put's value already
    /// checked); returns the offset in `rep` where it starts
    /// (`format::batch::op_at` reads it back).
    pub(crate) fn push(
        &mut self,
        keyspace: u32,
        kind: Kind,
        key: &[u8],
        value: &[u8],
    ) -> Result<usize> {
        check_key(key)?;
        if self.count as usize >= BATCH_OPS_MAX {
            return Err(Error::LimitExceeded {
                what: "operations in a batch",
                actual: self.count as u64 + 1,
                max: BATCH_OPS_MAX as u64,
            });
        }
        let grown = self.rep.len() + key.len() + value.len() + 26;
        if grown > BATCH_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: "batch bytes",
                actual: grown as u64,
                max: BATCH_BYTES_MAX as u64,
            });
        }
        let at = self.rep.len();
        codec::push_op(&mut self.rep, keyspace, kind, key, value);
        self.count += 1;
        codec::set_count(&mut self.rep, self.count);
        Ok(at)
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size in bytes (what the journal will hold, less framing).
    pub fn size_bytes(&self) -> usize {
        self.rep.len()
    }

    pub fn clear(&mut self) {
        *self = WriteBatch::new();
    }
}
