//! The keyspaces of a version (`Registry`), and what the write path and
//! table builders need of it.

use super::DEFAULT_ID;
use crate::format::manifest::{Edit, KeyspaceRecord};
use crate::format::table::TableOptions;
use crate::options::Compression;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The keyspaces of a version: those that exist (the default one aside),
/// by id and by name, and the next unused id. Rebuilt only by edits that
/// create or drop a keyspace; versions share it otherwise.
#[derive(Clone, Debug, Default)]
pub(crate) struct Registry {
    by_id: BTreeMap<u32, Arc<KeyspaceRecord>>,
    by_name: BTreeMap<String, u32>,
    /// Ids below this were used (1 when none was).
    next: u32,
}

impl Registry {
    /// The registry with `edit`'s keyspace records applied: creations and
    /// option changes, then drops. `Err(detail)` if the edit does not fit
    /// (drops an absent keyspace, gives a live name a second id, reuses
    /// an id), which means a damaged manifest.
    pub fn apply(&self, edit: &Edit) -> Result<Registry, String> {
        let mut r = self.clone();
        r.next = r.next.max(1);
        for k in &edit.keyspaces {
            if k.id < r.next && !r.by_id.contains_key(&k.id) {
                return Err(format!("keyspace {} created with a used id", k.id));
            }
            match r.by_name.get(&k.name) {
                Some(&id) if id != k.id => {
                    return Err(format!(
                        "keyspace name {:?} given to ids {id} and {}",
                        k.name, k.id
                    ));
                }
                _ => {}
            }
            if let Some(old) = r.by_id.get(&k.id)
                && old.name != k.name
            {
                return Err(format!("keyspace {} renamed", k.id));
            }
            r.by_name.insert(k.name.clone(), k.id);
            r.by_id.insert(k.id, Arc::new(k.clone()));
            r.next = r.next.max(k.id.saturating_add(1));
        }
        for id in &edit.dropped_keyspaces {
            let k = r
                .by_id
                .remove(id)
                .ok_or_else(|| format!("edit drops keyspace {id}, which does not exist"))?;
            r.by_name.remove(&k.name);
        }
        if let Some(n) = edit.next_keyspace {
            r.next = r.next.max(n);
        }
        Ok(r)
    }

    /// The registry with keyspace `rec` restored (`Db::repair`): unlike
    /// `apply`, the id may be below the counter, since repair finds
    /// keyspaces in no particular order; the id must be neither live nor
    /// dropped and the name free.
    pub fn restore(&self, rec: KeyspaceRecord) -> Result<Registry, String> {
        if self.exists(rec.id) || self.dropped(rec.id) {
            return Err(format!("keyspace {} exists or was dropped", rec.id));
        }
        if self.by_name.contains_key(&rec.name) {
            return Err(format!("keyspace name {:?} is taken", rec.name));
        }
        let mut r = self.clone();
        r.next = r.next.max(1).max(rec.id.saturating_add(1));
        r.by_name.insert(rec.name.clone(), rec.id);
        r.by_id.insert(rec.id, Arc::new(rec));
        Ok(r)
    }

    /// The live keyspace named `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<KeyspaceRecord>> {
        self.by_id.get(self.by_name.get(name)?)
    }

    /// The live keyspace `id` (not the default one).
    pub fn get(&self, id: u32) -> Option<&Arc<KeyspaceRecord>> {
        self.by_id.get(&id)
    }

    /// Whether `id` names a keyspace that exists: the default one or a
    /// live one.
    pub fn exists(&self, id: u32) -> bool {
        id == DEFAULT_ID || self.by_id.contains_key(&id)
    }

    /// Whether `id` was used and is gone: its data is dropped.
    pub fn dropped(&self, id: u32) -> bool {
        id != DEFAULT_ID && id < self.next && !self.by_id.contains_key(&id)
    }

    /// The next unused id.
    pub fn next_id(&self) -> u32 {
        self.next.max(1)
    }

    /// The live keyspaces, in id order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<KeyspaceRecord>> {
        self.by_id.values()
    }
}

/// Which values each keyspace keeps apart from its keys (its
/// `value_separation_min`), and which keyspaces exist: what inserting a
/// batch into a memtable needs of the registry.
#[derive(Clone)]
pub(crate) struct Separation {
    /// The default keyspace's threshold (`Options::value_separation_min`).
    default_min: usize,
    /// The default keyspace's compression (`Options::compression`), for
    /// values placed in value streams.
    default_compression: Compression,
    keyspaces: Arc<Registry>,
}

impl Separation {
    pub fn new(default_min: usize, keyspaces: Arc<Registry>) -> Self {
        Separation {
            default_min,
            default_compression: Compression::None,
            keyspaces,
        }
    }

    /// This rule, with the default keyspace compressing as `c` says.
    pub fn compressing(mut self, c: Compression) -> Self {
        self.default_compression = c;
        self
    }

    /// How separated values of `keyspace` placed in value streams are
    /// compressed (its tables' compression).
    pub fn compression(&self, keyspace: u32) -> Compression {
        if keyspace == DEFAULT_ID {
            return self.default_compression;
        }
        self.keyspaces
            .get(keyspace)
            .map_or(Compression::None, |k| k.options.compression)
    }

    /// Values of `keyspace` of at least this many bytes are separated.
    pub fn min(&self, keyspace: u32) -> usize {
        if keyspace == DEFAULT_ID {
            return self.default_min;
        }
        self.keyspaces
            .get(keyspace)
            .map_or(usize::MAX, |k| k.options.value_separation_min)
    }

    /// What becomes of an op of `keyspace`: inserted (`Ok(true)`), left
    /// out because its keyspace was dropped (`Ok(false)`), or
    /// `Err(detail)` for a keyspace that was never created (damage).
    pub fn keeps(&self, keyspace: u32) -> Result<bool, String> {
        if self.keyspaces.exists(keyspace) {
            Ok(true)
        } else if self.keyspaces.dropped(keyspace) {
            Ok(false)
        } else {
            Err(format!(
                "an op of keyspace {keyspace}, which was never created"
            ))
        }
    }
}

/// How tables of `keyspace` are built: `base` (the database's options)
/// for the default keyspace, with a live keyspace's own options over it
/// for the others; `None` for a keyspace that does not exist (dropped:
/// its entries are left out of new tables).
pub(crate) fn table_options(
    base: &TableOptions,
    keyspaces: &Registry,
    keyspace: u32,
) -> Option<TableOptions> {
    if keyspace == DEFAULT_ID {
        return Some(base.clone());
    }
    let k = keyspaces.get(keyspace)?;
    Some(TableOptions {
        block_size: k.options.block_bytes,
        filter: k.options.filter,
        filter_bits: k.options.filter_bits,
        compression: k.options.compression,
        keyspace: Some(k.clone()),
        ..base.clone()
    })
}
