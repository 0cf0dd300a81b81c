//! LMDB through `heed`.
//!
//! Configuration: one environment with a 64 GiB virtual map (grows lazily;
//! only touched pages cost disk), one unnamed database of bytes -> bytes,
//! read transactions without thread-local slots (`read_txn_without_tls`),
//! 1024 reader slots, `MDB_NORDAHEAD` (no OS readahead on the map, as LMDB
//! advises for data larger than RAM). LMDB has no compression and no cache of its own: it
//! reads through the OS page cache, so `cache_bytes` cannot be applied and
//! LMDB effectively gets every free page of RAM (unfair in its favour on
//! reads; see the bench report). It has no write buffer either.
//!
//! Sync semantics: the environment is opened with `MDB_NOSYNC`. Every put,
//! delete and batch is its own write transaction; its commit `write()`s the
//! dirty pages and the meta page into the file (the env does not use
//! `WRITE_MAP`), so a committed transaction survives a process crash, but
//! not an OS crash or power loss (which may even lose or tear the last
//! transactions). `write_batch(.., sync = true)` commits and then calls
//! `mdb_env_sync(force)` (`Env::force_sync`), an fdatasync of the data
//! file, so the batch and everything before it are durable on return.
//! Without `NO_SYNC` every commit would fsync, which is LMDB's synced mode;
//! using that for unsynced puts would hold LMDB to a stricter rule than
//! the others. LMDB serializes all writers on one lock: concurrent writers
//! queue instead of overlapping (that is the engine, not the adapter).
//!
//! Keyspaces (the `keyspaces` workload): LMDB's named databases, up to
//! `NAMED_MAX` of them, each write to one its own write transaction as
//! above; a drop is `mdb_drop` with delete, committed and synced. LMDB
//! keeps the names as keys of the unnamed database, which holds the
//! other workloads' data: the keyspaces workload runs on a fresh
//! directory and never reads the unnamed one.

use crate::bench::BenchResult;
use crate::bench::engine::{BatchOp, Engine, EngineConfig, Keyspaces, visit};
use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};
use std::ops::Bound;
use std::path::Path;
use std::sync::RwLock;

/// Most named databases (keyspaces) open at once; LMDB sizes its table of
/// database slots from it (a few words per slot and transaction).
const NAMED_MAX: u32 = 128;

type Db = Database<'static, Bytes, Bytes>;

pub struct LmdbEngine {
    env: Env<WithoutTls>,
    db: Db,
    /// Named databases opened through `Keyspaces`, by index; `None` once
    /// dropped.
    spaces: RwLock<Vec<(String, Option<Db>)>>,
}

impl LmdbEngine {
    pub fn open(dir: &Path, _cfg: &EngineConfig) -> BenchResult<Self> {
        std::fs::create_dir_all(dir)?;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(64 << 30)
            .max_readers(1024)
            .max_dbs(NAMED_MAX + 1);
        // NO_READ_AHEAD (MDB_NORDAHEAD) is LMDB's documented setting for
        // data larger than RAM: without it, each random read faults in a
        // whole readahead window, and under the contest's memory cap LMDB
        // read ~1.6 GB/s from the disk to deliver 0.6 MB/s.
        // SAFETY: the directory is ours alone for the run and no other
        // process opens it; NO_SYNC is documented above.
        let env = unsafe {
            opts.flags(EnvFlags::NO_SYNC | EnvFlags::NO_READ_AHEAD);
            opts.open(dir)?
        };
        let wtxn = env.write_txn()?;
        let db = env
            .create_databases_and_commit(wtxn, |wdo, wtxn| -> Result<_, heed::Error> {
                let db = wdo.create_database::<Bytes, Bytes>(wtxn, None)?;
                Ok(CommitOrAbort::<_, ()>::Commit(db))
            })?
            .unwrap_commit();
        Ok(LmdbEngine {
            env,
            db,
            spaces: RwLock::new(Vec::new()),
        })
    }
}

/// The open database at index `ks` of `spaces`.
fn space(spaces: &[(String, Option<Db>)], ks: usize) -> BenchResult<Db> {
    match spaces.get(ks) {
        Some((_, Some(db))) => Ok(*db),
        _ => Err(format!("no open keyspace {ks}").into()),
    }
}

impl Keyspaces for LmdbEngine {
    fn open_keyspace(&self, name: &str) -> BenchResult<usize> {
        let wtxn = self.env.write_txn()?;
        let db = self
            .env
            .create_databases_and_commit(wtxn, |wdo, wtxn| -> Result<_, heed::Error> {
                let db = wdo.create_database::<Bytes, Bytes>(wtxn, Some(name))?;
                Ok(CommitOrAbort::<_, ()>::Commit(db))
            })?
            .unwrap_commit();
        let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
        spaces.push((name.to_owned(), Some(db)));
        Ok(spaces.len() - 1)
    }
    fn write_in(&self, ks: usize, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        // Held through the transaction: a drop waits for it (see there).
        let spaces = self.spaces.read().map_err(|_| "keyspace list poisoned")?;
        let db = space(&spaces, ks)?;
        let mut wtxn = self.env.write_txn()?;
        for (k, v) in ops {
            match v {
                Some(v) => db.put(&mut wtxn, k, v)?,
                None => {
                    db.delete(&mut wtxn, k)?;
                }
            }
        }
        wtxn.commit()?;
        if sync {
            self.env.force_sync()?;
        }
        Ok(())
    }
    fn get_in(&self, ks: usize, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let spaces = self.spaces.read().map_err(|_| "keyspace list poisoned")?;
        let db = space(&spaces, ks)?;
        let rtxn = self.env.read_txn()?;
        Ok(db.get(&rtxn, key)?.map(<[u8]>::to_vec))
    }
    fn drop_keyspace(&self, name: &str) -> BenchResult<()> {
        // The write lock waits for every `write_in` and `get_in` using a
        // handle (they hold the read lock through their transaction) and
        // keeps new ones out until the handle is gone from the list.
        let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
        let db = spaces
            .iter_mut()
            .filter(|(n, _)| n == name)
            .find_map(|(_, db)| db.take());
        let Some(db) = db else {
            return Err(format!("no open keyspace {name:?}").into());
        };
        let mut wtxn = self.env.write_txn()?;
        // SAFETY: `remove` closes the database's slot. Its one handle was
        // just taken out of `spaces` under the write lock, which no call
        // using a handle holds the read lock beside, so no transaction
        // uses the slot now or later.
        unsafe { db.remove(&mut wtxn)? };
        wtxn.commit()?;
        drop(spaces);
        Ok(self.env.force_sync()?)
    }
}

impl Engine for LmdbEngine {
    fn name(&self) -> &'static str {
        "lmdb"
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn()?;
        self.db.put(&mut wtxn, key, value)?;
        Ok(wtxn.commit()?)
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let rtxn = self.env.read_txn()?;
        Ok(self.db.get(&rtxn, key)?.map(<[u8]>::to_vec))
    }
    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn()?;
        self.db.delete(&mut wtxn, key)?;
        Ok(wtxn.commit()?)
    }
    fn write_batch(&self, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn()?;
        for (k, v) in ops {
            match v {
                Some(v) => self.db.put(&mut wtxn, k, v)?,
                None => {
                    self.db.delete(&mut wtxn, k)?;
                }
            }
        }
        wtxn.commit()?;
        if sync {
            self.env.force_sync()?;
        }
        Ok(())
    }
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> BenchResult<usize> {
        let rtxn = self.env.read_txn()?;
        // LMDB rejects empty keys, even as a range bound.
        let start = if from.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(from)
        };
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (start, Bound::Unbounded);
        visit(self.db.range(&rtxn, &range)?, limit, f)
    }
    fn flush(&self) -> BenchResult<()> {
        Ok(self.env.force_sync()?)
    }
    fn compression(&self) -> String {
        // `--compression` cannot apply.
        "none: LMDB has no compression".to_owned()
    }
    fn keyspaces(&self) -> Option<&dyn Keyspaces> {
        Some(self)
    }
}
