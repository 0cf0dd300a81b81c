//! redb.
//!
//! Configuration: one file `redb` in the directory, one table of
//! `&[u8] -> &[u8]`, page cache `Builder::set_cache_size(cache_bytes)`.
//! redb has no compression and no write buffer (a copy-on-write B-tree).
//!
//! Sync semantics: redb 4 has two durability levels only, `Immediate`
//! (fsync on commit) and `None` (the commit is visible to readers but
//! nothing reaches disk until a later `Immediate` commit; a crash of the
//! process, not only of the OS, rolls back to the last durable commit).
//! There is no level that survives a process crash without an fsync, so
//! this adapter uses `None` for unsynced puts/deletes/batches and
//! `Immediate` for `write_batch(.., sync = true)` and for `flush()` (an
//! empty durable commit, which persists every `None` commit before it).
//! This is weaker than the fairness rule asks for (unsynced writes here
//! are lost on a process crash) and so favours redb on unsynced writes;
//! the alternative, `Immediate` for every unsynced put, would be an fsync
//! per put and a different workload. redb allows one write transaction at
//! a time: concurrent writers queue.
//!
//! Keyspaces (the `keyspaces` workload): redb's tables, by name, each
//! write to one its own write transaction as above; a drop is
//! `delete_table` in an `Immediate` commit.

use crate::bench::BenchResult;
use crate::bench::engine::{BatchOp, Engine, EngineConfig, Keyspaces, visit};
use ::redb::{Database, Durability, ReadableDatabase, TableDefinition, WriteTransaction};
use std::path::Path;
use std::sync::RwLock;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct RedbEngine {
    db: Database,
    /// Tables opened through `Keyspaces`, by index, and whether they were
    /// dropped.
    spaces: RwLock<Vec<(String, bool)>>,
}

/// The table named `name`.
fn table(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

impl RedbEngine {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        std::fs::create_dir_all(dir)?;
        let db = Database::builder()
            .set_cache_size(cfg.cache_bytes)
            .create(dir.join("redb"))?;
        let e = RedbEngine {
            db,
            spaces: RwLock::new(Vec::new()),
        };
        // Create the table so that readers find it.
        let tx = e.db.begin_write()?;
        tx.open_table(TABLE)?;
        tx.commit()?;
        Ok(e)
    }

    fn write(&self, durability: Durability) -> BenchResult<WriteTransaction> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(durability)?;
        Ok(tx)
    }

    fn space(&self, ks: usize) -> BenchResult<String> {
        let spaces = self.spaces.read().map_err(|_| "keyspace list poisoned")?;
        match spaces.get(ks) {
            Some((name, false)) => Ok(name.clone()),
            _ => Err(format!("no open keyspace {ks}").into()),
        }
    }
}

impl Keyspaces for RedbEngine {
    fn open_keyspace(&self, name: &str) -> BenchResult<usize> {
        let tx = self.write(Durability::Immediate)?;
        tx.open_table(table(name))?;
        tx.commit()?;
        let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
        spaces.push((name.to_owned(), false));
        Ok(spaces.len() - 1)
    }
    fn write_in(&self, ks: usize, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let name = self.space(ks)?;
        let tx = self.write(if sync {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        {
            let mut t = tx.open_table(table(&name))?;
            for (k, v) in ops {
                match v {
                    Some(v) => {
                        t.insert(k.as_slice(), v.as_slice())?;
                    }
                    None => {
                        t.remove(k.as_slice())?;
                    }
                }
            }
        }
        Ok(tx.commit()?)
    }
    fn get_in(&self, ks: usize, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let name = self.space(ks)?;
        let tx = self.db.begin_read()?;
        let t = tx.open_table(table(&name))?;
        Ok(t.get(key)?.map(|v| v.value().to_vec()))
    }
    fn drop_keyspace(&self, name: &str) -> BenchResult<()> {
        {
            let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
            for (n, dropped) in spaces.iter_mut() {
                if n == name {
                    *dropped = true;
                }
            }
        }
        let tx = self.write(Durability::Immediate)?;
        tx.delete_table(table(name))?;
        Ok(tx.commit()?)
    }
}

impl Engine for RedbEngine {
    fn name(&self) -> &'static str {
        "redb"
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        let tx = self.write(Durability::None)?;
        tx.open_table(TABLE)?.insert(key, value)?;
        Ok(tx.commit()?)
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        Ok(table.get(key)?.map(|v| v.value().to_vec()))
    }
    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        let tx = self.write(Durability::None)?;
        tx.open_table(TABLE)?.remove(key)?;
        Ok(tx.commit()?)
    }
    fn write_batch(&self, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let tx = self.write(if sync {
            Durability::Immediate
        } else {
            Durability::None
        })?;
        {
            let mut table = tx.open_table(TABLE)?;
            for (k, v) in ops {
                match v {
                    Some(v) => {
                        table.insert(k.as_slice(), v.as_slice())?;
                    }
                    None => {
                        table.remove(k.as_slice())?;
                    }
                }
            }
        }
        Ok(tx.commit()?)
    }
    fn scan(
        &self,
        from: &[u8],
        limit: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> BenchResult<usize> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        let entries = table
            .range::<&[u8]>(from..)?
            .map(|kv| kv.map(|(k, v)| (Guard(k), Guard(v))));
        visit(entries, limit, f)
    }
    fn flush(&self) -> BenchResult<()> {
        Ok(self.write(Durability::Immediate)?.commit()?)
    }
    fn compression(&self) -> String {
        // `--compression` cannot apply.
        "none: redb has no compression".to_owned()
    }
    fn keyspaces(&self) -> Option<&dyn Keyspaces> {
        Some(self)
    }
}

/// A redb value guard seen as bytes, so `engine::visit` can walk a range.
struct Guard<'a>(::redb::AccessGuard<'a, &'static [u8]>);

impl AsRef<[u8]> for Guard<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0.value()
    }
}
