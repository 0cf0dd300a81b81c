//! sled 0.34 (the last stable release; 1.0 is still alpha).
//!
//! Configuration: `sled::Config` with `cache_capacity(cache_bytes)`, the
//! default tree, no compression, the default `flush_every_ms(500)`. sled
//! has no separate write buffer setting. `--compression` is not applied:
//! sled has no LZ4, and its zstd (the `compression` feature) needs the
//! `zstd` 0.9 crate, whose `zstd-sys` 1.x links the same native library
//! (`links = "zstd"`) as the `zstd-sys` 2 CairnDB builds, which cargo
//! refuses in one build; `compression()` says so.
//!
//! Sync semantics: sled's log is buffered in the process; a background
//! thread writes and fsyncs it every 500 ms. Unsynced puts, deletes and
//! batches are therefore lost on a process crash if they are younger than
//! ~500 ms: weaker than the fairness rule, and sled offers nothing between
//! that and a full `flush()` (write + fsync). `write_batch(.., sync =
//! true)` applies the batch atomically (`apply_batch`) and then calls
//! `Db::flush()`, which makes it and everything before it durable;
//! `flush()` does the same.
//!
//! Reopening: sled's flusher thread holds its own reference to the
//! database and with it the directory's file lock, so the lock can outlive
//! the dropped `Db` by a moment (CI saw `could not acquire lock ...
//! WouldBlock` on a reopen). `open` retries that one error for up to 5 s.

use crate::bench::BenchResult;
use crate::bench::engine::{BatchOp, Engine, EngineConfig, visit};
use std::path::Path;

pub struct SledEngine {
    db: ::sled::Db,
}

impl SledEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let opened = ::sled::Config::new()
                .path(dir)
                .cache_capacity(cfg.cache_bytes as u64)
                .open();
            match opened {
                Ok(db) => return Ok(SledEngine { db }),
                Err(::sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl Engine for SledEngine {
    fn name(&self) -> &'static str {
        "sled"
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.db.insert(key, value)?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.db.get(key)?.map(|v| v.to_vec()))
    }
    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.db.remove(key)?;
        Ok(())
    }
    fn write_batch(&self, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let mut b = ::sled::Batch::default();
        for (k, v) in ops {
            match v {
                Some(v) => b.insert(k.as_slice(), v.as_slice()),
                None => b.remove(k.as_slice()),
            }
        }
        self.db.apply_batch(b)?;
        if sync {
            self.db.flush()?;
        }
        Ok(())
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
        self.db.flush()?;
        Ok(())
    }
    fn compression(&self) -> String {
        "none: sled's zstd feature cannot be built beside CairnDB's zstd".to_owned()
    }
}
