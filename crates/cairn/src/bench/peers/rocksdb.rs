//! RocksDB through the `rocksdb` crate (built without any compression
//! library: `default-features = false`, `bindgen-runtime` only).
//!
//! Configuration: `create_if_missing`; compression `None` for every level
//! and the bottommost level; a block-based table with an LRU block cache
//! of `cache_bytes` (`Cache::new_lru_cache`); `write_buffer_size =
//! write_buffer_bytes`; the WAL on (the default); everything else is
//! RocksDB's default (leveled compaction, 4 KiB blocks, no bloom filter,
//! default background jobs).
//!
//! Sync semantics: unsynced puts, deletes and batches use the default
//! `WriteOptions` (`sync = false`): the WAL record is `write()`n to the OS
//! before the call returns, so it survives a process crash but not power
//! loss. `write_batch(.., sync = true)` uses `WriteOptions::set_sync(true)`
//! (fsync/fdatasync of the WAL before return). `flush()` syncs the WAL and
//! flushes the memtable to an SST file, waiting for it.

use crate::bench::BenchResult;
use crate::bench::engine::{BatchOp, Engine, EngineConfig, visit};
use ::rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Direction, IteratorMode, Options, WriteBatch,
    WriteOptions,
};
use std::path::Path;

pub struct RocksEngine {
    db: DB,
    // Kept alive for the life of the DB (RocksDB holds a reference too).
    _cache: Cache,
}

impl RocksEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        let cache = Cache::new_lru_cache(cfg.cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_bottommost_compression_type(DBCompressionType::None);
        opts.set_write_buffer_size(cfg.write_buffer_bytes);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir)?;
        Ok(RocksEngine { db, _cache: cache })
    }
}

impl Engine for RocksEngine {
    fn name(&self) -> &'static str {
        "rocksdb"
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        Ok(self.db.put(key, value)?)
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }
    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        Ok(self.db.delete(key)?)
    }
    fn write_batch(&self, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let mut b = WriteBatch::default();
        for (k, v) in ops {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        Ok(self.db.write_opt(b, &wo)?)
    }
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> BenchResult<usize> {
        let entries = self
            .db
            .iterator(IteratorMode::From(from, Direction::Forward));
        visit(entries, limit, f)
    }
    fn flush(&self) -> BenchResult<()> {
        self.db.flush_wal(true)?;
        Ok(self.db.flush()?)
    }
}
