//! Engines under test behind one trait, so every workload runs unchanged on
//! CairnDB and on its peers.
//!
//! Fairness rules every adapter follows (docs/benchmarks.md): no
//! compression; the journal/WAL on; the same cache budget
//! (`EngineConfig::cache_bytes`); `sync` means the engine's own
//! durable-on-return commit (fsync/fdatasync) and unsynced means it
//! survives a process crash where the engine can promise that.
//!
//! Transactions are optional (`Engine::begin`): CairnDB's adapter has
//! them (snapshot isolation, optimistic); the peers' adapters return
//! `None`, and workloads that need them (`txn-scaling`, the transaction
//! phases of `synctx`) record SKIP rows for those engines.
//!
//! Peers are compiled only with their cargo feature (`rocksdb`, `lmdb`,
//! `fjall`, `redb`, `sled`): they are slow to build.

use super::{BenchError, BenchResult};
use std::path::Path;

/// Settings shared by every engine in a run.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Block/page cache budget in bytes.
    pub cache_bytes: usize,
    /// Write buffer (memtable) size in bytes, where the engine has one.
    pub write_buffer_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
        }
    }
}

/// One batch operation: a put (`Some(value)`) or a delete (`None`).
pub type BatchOp = (Vec<u8>, Option<Vec<u8>>);

/// An open transaction (`Engine::begin`): reads see a snapshot taken at
/// begin plus the transaction's own writes; writes are buffered until
/// commit. Dropping it rolls it back.
pub trait Txn {
    fn get(&mut self, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
    fn put(&mut self, key: &[u8], value: &[u8]) -> BenchResult<()>;
    /// Commits, durably on return if `sync`. `Ok(false)`: the engine
    /// refused the commit for a conflict with another commit and wrote
    /// nothing; the caller may retry from a new begin.
    fn commit(self: Box<Self>, sync: bool) -> BenchResult<bool>;
}

/// An open database of some engine. Shared by the workload's threads.
pub trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    /// An unsynced put.
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()>;
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
    fn delete(&self, key: &[u8]) -> BenchResult<()>;
    /// Applies `ops` atomically, durably on return if `sync`.
    fn write_batch(&self, ops: &[BatchOp], sync: bool) -> BenchResult<()>;
    /// Visits keys >= `from` in order, at most `limit` of them, while `f`
    /// returns true. Returns the number visited.
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> BenchResult<usize>;
    /// Makes everything written so far durable and settled (flush
    /// memtables); called between phases.
    fn flush(&self) -> BenchResult<()>;
    /// Starts a snapshot-isolation transaction, or `None` if the adapter
    /// has no transactions (workloads that need them skip the engine).
    fn begin(&self) -> Option<Box<dyn Txn + '_>> {
        None
    }
}

/// Engines this build can run.
pub fn available() -> Vec<&'static str> {
    let mut v = vec!["cairndb"];
    v.extend_from_slice(super::peers::COMPILED);
    v
}

/// Opens (creating) a database of engine `name` in `dir`.
pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> BenchResult<Box<dyn Engine>> {
    match name {
        "cairndb" => Ok(Box::new(CairnEngine::open(dir, cfg)?)),
        other => super::peers::open(other, dir, cfg).unwrap_or_else(|| {
            Err(format!(
                "engine {other} is not in this build (available: {}; peers need their cargo feature)",
                available().join(", ")
            )
            .into())
        }),
    }
}

/// Visits up to `limit` of `entries` while `f` returns true; returns the
/// number visited. The loop every adapter's `scan` shares.
pub fn visit<K: AsRef<[u8]>, V: AsRef<[u8]>, E: Into<BenchError>>(
    entries: impl Iterator<Item = Result<(K, V), E>>,
    limit: usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> BenchResult<usize> {
    let mut n = 0;
    for kv in entries.take(limit) {
        let (k, v) = kv.map_err(Into::into)?;
        n += 1;
        if !f(k.as_ref(), v.as_ref()) {
            break;
        }
    }
    Ok(n)
}

/// CairnDB with options sized like the peers'.
pub struct CairnEngine {
    db: cairndb::Db,
}

impl CairnEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        let mut opts = cairndb::Options {
            block_cache_bytes: cfg.cache_bytes,
            memtable_bytes: cfg.write_buffer_bytes,
            ..cairndb::Options::default()
        };
        // Control runs: `CAIRNDB_VALUE_SEPARATION_MIN=max` keeps every
        // value inline, as before key-value separation.
        if let Ok(v) = std::env::var("CAIRNDB_VALUE_SEPARATION_MIN") {
            opts.value_separation_min = match v.as_str() {
                "max" => usize::MAX,
                n => n
                    .parse()
                    .map_err(|_| format!("CAIRNDB_VALUE_SEPARATION_MIN={v}: not a number"))?,
            };
        }
        Ok(CairnEngine {
            db: cairndb::Db::open(dir, opts)?,
        })
    }
}

impl Engine for CairnEngine {
    fn name(&self) -> &'static str {
        "cairndb"
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
        let mut b = cairndb::WriteBatch::new();
        for (k, v) in ops {
            match v {
                Some(v) => b.put(k, v)?,
                None => b.delete(k)?,
            }
        }
        Ok(self.db.write(b, &cairndb::WriteOptions { sync })?)
    }
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> BenchResult<usize> {
        visit(self.db.range(from..), limit, f)
    }
    fn flush(&self) -> BenchResult<()> {
        Ok(self.db.flush()?)
    }
    fn begin(&self) -> Option<Box<dyn Txn + '_>> {
        Some(Box::new(CairnTxn(self.db.begin())))
    }
}

/// CairnDB's optimistic transaction (snapshot isolation).
struct CairnTxn(cairndb::Transaction);

impl Txn for CairnTxn {
    fn get(&mut self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.0.get(key)?)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        Ok(self.0.put(key, value)?)
    }
    fn commit(self: Box<Self>, sync: bool) -> BenchResult<bool> {
        match self.0.commit_opt(&cairndb::WriteOptions { sync }) {
            Ok(_) => Ok(true),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
