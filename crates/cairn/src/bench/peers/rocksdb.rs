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
//!
//! Keyspaces (the `keyspaces` workload) are column families with the
//! database's options (`create_cf`, `drop_cf`; the database is opened
//! `MultiThreaded` so that they can be made and dropped while it is
//! shared); a batch of one keyspace is a `WriteBatch` of `put_cf`s.

use crate::bench::BenchResult;
use crate::bench::engine::{
    BatchOp, Compression, Engine, EngineConfig, Keyspaces, ZSTD_LEVEL, visit,
};
use ::rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, DBWithThreadMode, Direction, IteratorMode,
    MultiThreaded, Options, WriteBatch, WriteOptions,
};
use std::path::Path;

type DB = DBWithThreadMode<MultiThreaded>;

pub struct RocksEngine {
    db: DB,
    // Kept alive for the life of the DB (RocksDB holds a reference too).
    _cache: Cache,
    compression: Compression,
    /// The options the database was opened with, for its column families.
    opts: Options,
    /// Column families opened through `Keyspaces::open_keyspace`, by index.
    spaces: std::sync::RwLock<Vec<String>>,
}

impl RocksEngine {
    /// The column family of keyspace index `ks`.
    fn cf(&self, ks: usize) -> BenchResult<std::sync::Arc<::rocksdb::BoundColumnFamily<'_>>> {
        let spaces = self.spaces.read().map_err(|_| "keyspace list poisoned")?;
        let name = spaces.get(ks).ok_or("no such keyspace")?;
        Ok(self.db.cf_handle(name).ok_or("keyspace dropped")?)
    }
}

impl Keyspaces for RocksEngine {
    fn open_keyspace(&self, name: &str) -> BenchResult<usize> {
        if self.db.cf_handle(name).is_none() {
            self.db.create_cf(name, &self.opts)?;
        }
        let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
        spaces.push(name.to_owned());
        Ok(spaces.len() - 1)
    }
    fn write_in(&self, ks: usize, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let cf = self.cf(ks)?;
        let mut b = WriteBatch::default();
        for (k, v) in ops {
            match v {
                Some(v) => b.put_cf(&cf, k, v),
                None => b.delete_cf(&cf, k),
            }
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(sync);
        Ok(self.db.write_opt(b, &wo)?)
    }
    fn get_in(&self, ks: usize, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.db.get_cf(&self.cf(ks)?, key)?)
    }
    fn drop_keyspace(&self, name: &str) -> BenchResult<()> {
        Ok(self.db.drop_cf(name)?)
    }
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
        // Column families a keyspace workload left are opened too (RocksDB
        // refuses an open that leaves one out); a new database has none.
        let families = DB::list_cf(&opts, dir).unwrap_or_default();
        let db = DB::open_cf(&opts, dir, families)?;
        Ok(RocksEngine {
            db,
            _cache: cache,
            compression: cfg.compression,
            opts,
            spaces: std::sync::RwLock::new(Vec::new()),
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
    fn keyspaces(&self) -> Option<&dyn Keyspaces> {
        Some(self)
    }
}
