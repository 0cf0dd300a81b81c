//! fjall (an LSM-tree in Rust).
//!
//! Configuration: one database with one keyspace `kv`; block cache
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
use crate::bench::engine::{BatchOp, Engine, EngineConfig, visit};
use ::fjall::config::CompressionPolicy;
use ::fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::path::Path;

pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
    /// What the data blocks get, for `compression()`.
    compression: &'static str,
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
        let ks = db.keyspace("kv", || {
            KeyspaceCreateOptions::default()
                .data_block_compression_policy(CompressionPolicy::all(data))
                .index_block_compression_policy(CompressionPolicy::disabled())
                .max_memtable_size(memtable)
        })?;
        Ok(FjallEngine {
            db,
            ks,
            compression,
        })
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
}
