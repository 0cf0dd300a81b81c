//! Keyspaces: named, separately tuned key spaces in one database
//! (docs/architecture.md §Keyspaces).
//!
//! A keyspace is data, recorded in the manifest (tags 11, 12 and 14,
//! format.md §Manifest): its id, name and [`KeyspaceOptions`]. Ids are
//! never reused, so a name dropped and created again names a new
//! keyspace, and nothing of the old one can show through it. The default
//! keyspace has id 0 and the name `"default"`; it is not recorded, and
//! takes its options from [`Options`](crate::Options).
//!
//! Every part of the engine that holds keys keeps them per keyspace: a
//! journal op carries its keyspace's id (format.md §Batch), a memtable
//! holds one ordered map per keyspace, and a table belongs to one
//! keyspace (its manifest record names it; from table version 5 its
//! properties name it too, for `Db::repair`). Levels are ordered by
//! keyspace, then key, so one compaction never mixes keyspaces.

use crate::db::{Db, owned_bound, prefix_bounds};
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::manifest::{Edit, KeyspaceRecord};
use crate::options::WriteOptions;
use crate::read::ReadView;
use crate::read::iter::Iter;
use crate::write::batch::{WriteBatch, check_key};
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

mod options;
mod registry;

pub use options::KeyspaceOptions;
pub(crate) use options::check_name;
pub(crate) use registry::{Registry, Separation, table_options};

/// Id of the default keyspace.
pub const DEFAULT_ID: u32 = 0;
/// Name of the default keyspace.
pub const DEFAULT_NAME: &str = "default";

/// A handle to one keyspace of an open database: what [`Db`] has for
/// data (`put`, `get`, `delete`, `multi_get`, `range`, `iter`, `prefix`),
/// in this keyspace. Cheap to clone, `Send + Sync`. Like a
/// [`Snapshot`](crate::Snapshot), it does not keep the database open: after
/// [`Db::close`] its calls answer `Error::Closed`. After the keyspace is
/// dropped they answer `Error::KeyspaceDropped`, also when a keyspace of
/// the same name was created since (that one is a new keyspace).
#[derive(Clone)]
pub struct Keyspace {
    inner: Arc<Inner>,
    id: u32,
    name: Arc<str>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace")
            .field("name", &self.name)
            .field("id", &self.id)
            .finish()
    }
}

impl Keyspace {
    /// The default keyspace of the database `inner`.
    pub(crate) fn default_of(inner: Arc<Inner>) -> Keyspace {
        Keyspace {
            inner,
            id: DEFAULT_ID,
            name: Arc::from(DEFAULT_NAME),
        }
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Whether `other` is a handle to the same keyspace of the same
    /// database.
    pub(crate) fn same(&self, other: &Keyspace) -> bool {
        self.id == other.id && Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// `InvalidArgument` unless this keyspace belongs to the database
    /// `inner`.
    pub(crate) fn check_owner(&self, inner: &Inner) -> Result<()> {
        if std::ptr::eq(Arc::as_ptr(&self.inner), inner) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "keyspace {:?} belongs to another database",
            self.name
        )))
    }

    /// A view of the database, and the seqno to read it at, checked to
    /// hold this keyspace.
    pub(crate) fn view(&self) -> Result<(ReadView, u64)> {
        let (view, seqno) = self.inner.view_and_seqno();
        view.check_keyspace(self.id, &self.name)?;
        Ok((view, seqno))
    }

    /// `KeyspaceDropped` if `view` does not hold this keyspace.
    pub(crate) fn check_in(&self, view: &ReadView) -> Result<()> {
        view.check_keyspace(self.id, &self.name)
    }

    /// Sets `key` to `value` (not synced: survives a process crash).
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(key, value, &WriteOptions::default())
    }

    pub fn put_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put_in(self, key, value)?;
        self.inner.write(b, opts)
    }

    /// Deletes `key` (not synced). Deleting a missing key is not an error.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(key, &WriteOptions::default())
    }

    pub fn delete_opt(&self, key: impl AsRef<[u8]>, opts: &WriteOptions) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_in(self, key)?;
        self.inner.write(b, opts)
    }

    /// The current value of `key` in this keyspace.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        check_key(key)?;
        let (view, seqno) = self.view()?;
        view.get(self.id, key, seqno)
    }

    /// The current values of `keys`, as of one instant, as
    /// [`Db::multi_get`] reads them.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        match self.view() {
            Ok((view, seqno)) => crate::db::multi_get(&view, self.id, seqno, keys),
            Err(e) => keys.iter().map(|_| Err(e.duplicate())).collect(),
        }
    }

    fn iter_bounds(&self, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> Iter {
        let (view, seqno) = self.inner.view_and_seqno();
        let checked = self.check_in(&view);
        let mut it = Iter::new(view, self.id, seqno, lower, upper);
        if let Err(e) = checked {
            it.refuse(e);
        }
        it
    }

    /// Keys of this keyspace in `range` with their values, in key order
    /// (`.rev()` for descending), as of this call.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.iter_bounds(
            owned_bound(range.start_bound()),
            owned_bound(range.end_bound()),
        )
    }

    /// Every key of this keyspace with its value, in key order.
    pub fn iter(&self) -> Iter {
        self.iter_bounds(Bound::Unbounded, Bound::Unbounded)
    }

    /// Keys of this keyspace starting with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        self.iter_bounds(lo, hi)
    }
}

impl Db {
    /// The keyspace named `name`, created (with
    /// `KeyspaceOptions::default()`: LZ4-compressed tables) if it does not
    /// exist. `"default"` is the default keyspace, which `Db`'s own
    /// methods address. Creating one is a synced manifest edit; opening
    /// one that exists takes no IO.
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        self.open_keyspace(name, None)
    }

    /// The keyspace named `name` with options `opts`: created with them if
    /// it does not exist; if it exists with other options, they are
    /// replaced (recorded in the manifest), and tables written from then
    /// on follow them. The default keyspace takes its options from
    /// [`Options`](crate::Options) and refuses this (`InvalidArgument`).
    pub fn keyspace_with(&self, name: &str, opts: KeyspaceOptions) -> Result<Keyspace> {
        opts.validate()?;
        self.open_keyspace(name, Some(opts))
    }

    fn open_keyspace(&self, name: &str, opts: Option<KeyspaceOptions>) -> Result<Keyspace> {
        check_name(name)?;
        let inner = self.inner();
        let handle = |id| Keyspace {
            inner: inner.clone(),
            id,
            name: Arc::from(name),
        };
        if name == DEFAULT_NAME {
            if opts.is_some() {
                return Err(Error::InvalidArgument(
                    "the default keyspace takes its options from Options".into(),
                ));
            }
            return Ok(handle(DEFAULT_ID));
        }
        let found = |inner: &Inner| inner.state.read().version.keyspaces.named(name).cloned();
        if let Some(k) = found(inner)
            && opts.as_ref().is_none_or(|o| *o == k.options)
        {
            return Ok(handle(k.id));
        }
        // Creating or changing: one at a time, so that two callers
        // creating one name agree on its id.
        let _one = inner.keyspace_lock.lock();
        inner.check_writable()?;
        let existing = found(inner);
        let (id, options) = match (existing, opts) {
            (Some(k), None) => return Ok(handle(k.id)),
            (Some(k), Some(o)) if k.options == o => return Ok(handle(k.id)),
            (Some(k), Some(o)) => (k.id, o),
            (None, o) => {
                let id = inner.state.read().version.keyspaces.next_id();
                if id == u32::MAX {
                    return Err(Error::LimitExceeded {
                        what: "keyspaces created",
                        actual: u64::from(id),
                        max: u64::from(u32::MAX - 1),
                    });
                }
                (id, o.unwrap_or_default())
            }
        };
        let edit = Edit {
            keyspaces: vec![KeyspaceRecord {
                id,
                name: name.to_owned(),
                options,
            }],
            next_keyspace: Some(id + 1),
            ..Edit::default()
        };
        inner.log_and_apply(edit, |_| {})?;
        Ok(handle(id))
    }

    /// The names of the keyspaces, `"default"` first, then in the order
    /// they were created.
    pub fn keyspaces(&self) -> Vec<String> {
        let v = self.inner().state.read().version.clone();
        std::iter::once(DEFAULT_NAME.to_owned())
            .chain(v.keyspaces.iter().map(|k| k.name.clone()))
            .collect()
    }

    /// Drops the keyspace named `name`: its data is gone at once for
    /// every reader, and its tables and values leave in the background.
    /// The call records the drop (one synced manifest edit) and returns;
    /// it takes no longer for a large keyspace. It does not sync the
    /// journal: unsynced writes made before it are as durable as before
    /// (a power cut may lose them while the drop survives). Returns false
    /// if there is no such keyspace. The name can be used again at once, for a new,
    /// empty keyspace. The default keyspace cannot be dropped
    /// (`InvalidArgument`).
    pub fn drop_keyspace(&self, name: &str) -> Result<bool> {
        if name == DEFAULT_NAME {
            return Err(Error::InvalidArgument(
                "the default keyspace cannot be dropped".into(),
            ));
        }
        let inner = self.inner();
        let _one = inner.keyspace_lock.lock();
        inner.check_writable()?;
        let Some(k) = inner.state.read().version.keyspaces.named(name).cloned() else {
            return Ok(false);
        };
        let edit = Edit {
            dropped_keyspaces: vec![k.id],
            ..Edit::default()
        };
        inner.log_and_apply(edit, |_| {})?;
        inner.notify_bg();
        Ok(true)
    }
}
