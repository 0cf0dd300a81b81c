//! RocksDB through the `rocksdb` crate (`default-features = false`, with
//! `bindgen-runtime` and the `lz4` and `zstd` compression libraries only).
//!
//! Configuration: `create_if_missing`; compression as
//! `EngineConfig::compression` asks, the same for every level and the
//! bottommost level (`set_compression_type` and
//! `set_bottommost_compression_type`): `None` by default, `Lz4`, or
//! `Zstd` at level `ZSTD_LEVEL` (`set_compression_options`, RocksDB's
//! default level too); a block-based table with an LRU block cache
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
//! flushes the memtable to an SST file, waiting for it. `compact()` is a
//! manual `compact_range` over all keys, waiting for it.

use crate::bench::BenchResult;
use crate::bench::engine::{BatchOp, Compression, Engine, EngineConfig, ZSTD_LEVEL, visit};
use ::rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Direction, IteratorMode, Options, WriteBatch,
    WriteOptions,
};
use std::path::Path;

pub struct RocksEngine {
    db: DB,
    // Kept alive for the life of the DB (RocksDB holds a reference too).
    _cache: Cache,
    compression: Compression,
}

impl RocksEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        let cache = Cache::new_lru_cache(cfg.cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let compression = match cfg.compression {
            Compression::None => DBCompressionType::None,
            Compression::Lz4 => DBCompressionType::Lz4,
            Compression::Zstd => DBCompressionType::Zstd,
        };
        opts.set_compression_type(compression);
        opts.set_bottommost_compression_type(compression);
        if cfg.compression == Compression::Zstd {
            // (window_bits, level, strategy, max_dict_bytes): RocksDB's
            // defaults but the level.
            opts.set_compression_options(-14, ZSTD_LEVEL, 0, 0);
        }
        opts.set_write_buffer_size(cfg.write_buffer_bytes);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir)?;
        Ok(RocksEngine {
            db,
            _cache: cache,
            compression: cfg.compression,
        })
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
    fn compact(&self) -> BenchResult<bool> {
        self.db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(true)
    }
    fn compression(&self) -> String {
        match self.compression {
            Compression::Zstd => format!("zstd level {ZSTD_LEVEL}"),
            c => c.name().to_owned(),
        }
    }
}
