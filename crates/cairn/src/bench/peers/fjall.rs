//! fjall (an LSM-tree in Rust).
//!
//! Configuration: one database with one keyspace `kv` (the `keyspaces`
//! workload opens more, configured alike, and drops them with
//! `Database::delete_keyspace`); block cache
//! `cache_size(cache_bytes)`; memtable `max_memtable_size(write_buffer_bytes)`;
//! data blocks compressed as `EngineConfig::compression` asks, at every
//! level (`CompressionPolicy::all`): none by default, LZ4 for `lz4`; fjall
//! 3 has no Zstandard, so `zstd` leaves them uncompressed (and
//! `compression()` says so). Index blocks stay uncompressed (fjall's own
//! default, even with LZ4) and so does the journal
//! (`journal_compression(None)`: the crate is built with its `lz4`
//! feature, which would otherwise compress journal entries of 4 KiB and
//! more). The journal is on, as it always is in fjall; other settings are
//! fjall's defaults (leveled compaction, bloom filters, 4 KiB blocks).
//! `compact()` is `Keyspace::major_compact` (public, doc-hidden): every
//! table rewritten into the last level, waiting for it.
//!
//! Sync semantics: fjall's default (`manual_journal_persist = false`)
//! writes every insert, remove and batch into the journal file's OS
//! buffers before returning (`PersistMode::Buffer`), so unsynced writes
//! survive a process crash but not power loss, the same promise as the
//! rule asks for. `write_batch(.., sync = true)` sets the batch durability
//! to `PersistMode::SyncData` (fdatasync of the journal before the commit
//! returns). `flush()` persists the journal with `SyncAll` and then rotates
//! the memtable and waits for it to be written out as a table
//! (`rotate_memtable_and_wait`, a public but doc-hidden fjall API).

use crate::bench::BenchResult;
use crate::bench::engine::Compression;
use crate::bench::engine::{BatchOp, Engine, EngineConfig, Keyspaces, visit};
use ::fjall::config::CompressionPolicy;
use ::fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::path::Path;
use std::sync::RwLock;

pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
    /// What the data blocks get, for `compression()`.
    compression: &'static str,
    /// How keyspaces are created: `kv`'s options.
    data: CompressionType,
    memtable: u64,
    /// The `keyspaces` workload's keyspaces by index (`None` once dropped,
    /// so fjall can remove its folder when the last handle goes).
    spaces: RwLock<Vec<(String, Option<Keyspace>)>>,
}

fn create_options(data: CompressionType, memtable: u64) -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .data_block_compression_policy(CompressionPolicy::all(data))
        .index_block_compression_policy(CompressionPolicy::disabled())
        .max_memtable_size(memtable)
}

impl FjallEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        let db = Database::builder(dir)
            .cache_size(cfg.cache_bytes as u64)
            .journal_compression(CompressionType::None)
            .open()?;
        let memtable = cfg.write_buffer_bytes as u64;
        let (data, compression) = match cfg.compression {
            Compression::None => (CompressionType::None, "none"),
            Compression::Lz4 => (CompressionType::Lz4, "lz4"),
            Compression::Zstd => (CompressionType::None, "none: fjall 3 has no zstd"),
        };
        let ks = db.keyspace("kv", || create_options(data, memtable))?;
        Ok(FjallEngine {
            db,
            ks,
            compression,
            data,
            memtable,
            spaces: RwLock::new(Vec::new()),
        })
    }

    fn space(&self, ks: usize) -> BenchResult<Keyspace> {
        let spaces = self.spaces.read().map_err(|_| "keyspace list poisoned")?;
        match spaces.get(ks) {
            Some((_, Some(k))) => Ok(k.clone()),
            _ => Err(format!("no open keyspace {ks}").into()),
        }
    }
}

impl Keyspaces for FjallEngine {
    fn open_keyspace(&self, name: &str) -> BenchResult<usize> {
        let ks = self
            .db
            .keyspace(name, || create_options(self.data, self.memtable))?;
        let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
        spaces.push((name.to_owned(), Some(ks)));
        Ok(spaces.len() - 1)
    }
    fn write_in(&self, ks: usize, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let ks = self.space(ks)?;
        let mut b = self
            .db
            .batch()
            .durability(sync.then_some(PersistMode::SyncData));
        for (k, v) in ops {
            match v {
                Some(v) => b.insert(&ks, k.as_slice(), v.as_slice()),
                None => b.remove(&ks, k.as_slice()),
            }
        }
        Ok(b.commit()?)
    }
    fn get_in(&self, ks: usize, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.space(ks)?.get(key)?.map(|v| v.to_vec()))
    }
    fn drop_keyspace(&self, name: &str) -> BenchResult<()> {
        let handle = {
            let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
            spaces
                .iter_mut()
                .filter(|(n, _)| n == name)
                .find_map(|(_, k)| k.take())
        };
        let handle = match handle {
            Some(h) => h,
            None => self
                .db
                .keyspace(name, || create_options(self.data, self.memtable))?,
        };
        Ok(self.db.delete_keyspace(handle)?)
    }
}

impl Engine for FjallEngine {
    fn name(&self) -> &'static str {
        "fjall"
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        Ok(self.ks.insert(key, value)?)
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.ks.get(key)?.map(|v| v.to_vec()))
    }
    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        Ok(self.ks.remove(key)?)
    }
    fn write_batch(&self, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let mut b = self
            .db
            .batch()
            .durability(sync.then_some(PersistMode::SyncData));
        for (k, v) in ops {
            match v {
                Some(v) => b.insert(&self.ks, k.as_slice(), v.as_slice()),
                None => b.remove(&self.ks, k.as_slice()),
            }
        }
        Ok(b.commit()?)
    }
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> BenchResult<usize> {
        visit(self.ks.range(from..).map(|g| g.into_inner()), limit, f)
    }
    fn flush(&self) -> BenchResult<()> {
        self.db.persist(PersistMode::SyncAll)?;
        Ok(self.ks.rotate_memtable_and_wait()?)
    }
    fn compact(&self) -> BenchResult<bool> {
        self.ks.major_compact()?;
        Ok(true)
    }
    fn compression(&self) -> String {
        self.compression.to_owned()
    }
    fn keyspaces(&self) -> Option<&dyn Keyspaces> {
        Some(self)
    }
}
