//! Engines under test behind one trait, so every workload runs unchanged on
//! CairnDB and on its peers.
//!
//! Fairness rules every adapter follows (docs/benchmarks.md): the same
//! table compression for every engine that has it (`EngineConfig::compression`,
//! `--compression`; none by default); the journal/WAL on; the same cache budget
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
//!
//! CairnDB itself comes in variants (`CAIRN_VARIANTS`), selected and run
//! side by side like peers, so that a control is measured in the same run
//! as the engine: `cairndb` (defaults), `cairndb-inline` (no key-value
//! separation), `cairndb-nogc` (value GC's null policy),
//! `cairndb-direct` (flushed values read with direct IO) and
//! `cairndb-buffered-journal` (the journal written through the page
//! cache), among others (`CAIRN_VARIANTS`).

use super::{BenchError, BenchResult};
use std::path::Path;

/// Settings shared by every engine in a run.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Block/page cache budget in bytes.
    pub cache_bytes: usize,
    /// Write buffer (memtable) size in bytes, where the engine has one.
    pub write_buffer_bytes: usize,
    /// How engines that can compress their tables do (`--compression`);
    /// engines without it ignore it and say so (`Engine::compression`).
    pub compression: Compression,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
            compression: Compression::None,
        }
    }
}

/// Table compression asked of every engine that has it (`--compression`).
/// Each adapter maps it to its engine's own setting, for table (data)
/// blocks at every level; journals stay as each engine writes them
/// uncompressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// Nothing compressed: every run before the flag existed.
    #[default]
    None,
    /// LZ4.
    Lz4,
    /// Zstandard at level `ZSTD_LEVEL`.
    Zstd,
}

/// The Zstandard level `Compression::Zstd` asks for: RocksDB's and the
/// zstd tool's default.
pub const ZSTD_LEVEL: i32 = 3;

impl Compression {
    /// The name `--compression` takes.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
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

/// Named keyspaces of one database (CairnDB's keyspaces), where the
/// adapter has them: writes to several at once are one group commit.
pub trait Keyspaces: Send + Sync {
    /// Opens keyspace `name`, creating it if it does not exist; returns
    /// the index `write_in` and `get_in` take.
    fn open_keyspace(&self, name: &str) -> BenchResult<usize>;
    /// Applies `ops` to keyspace `ks` atomically, durably on return if
    /// `sync`.
    fn write_in(&self, ks: usize, ops: &[BatchOp], sync: bool) -> BenchResult<()>;
    fn get_in(&self, ks: usize, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
    /// Drops keyspace `name` (its index is not used again).
    fn drop_keyspace(&self, name: &str) -> BenchResult<()>;
}

/// An open database of some engine. Shared by the workload's threads.
pub trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    /// An unsynced put.
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()>;
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
    /// The values of `keys`, in order: one `get` after another unless the
    /// engine reads several at once (CairnDB's `Db::multi_get`).
    fn multi_get(&self, keys: &[Vec<u8>]) -> BenchResult<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
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
    /// Memory the engine's table indexes and filters hold per key, if it
    /// reports it: (bytes per key, the note to print).
    fn index_memory(&self) -> Option<(f64, String)> {
        None
    }
    /// What the engine says of its bytes on disk, for the note of a row
    /// that measured them (CairnDB: its tables' and live separated
    /// values' bytes, beside the journal and staging files the directory
    /// also holds).
    fn space_note(&self) -> Option<String> {
        None
    }
    /// What the engine reports about its scans (CairnDB: chunks shared
    /// scans read and waited for), for the note of a scan phase.
    fn scan_note(&self) -> Option<String> {
        None
    }
    /// Commit groups the engine wrote since open and the batches in them
    /// (CairnDB's `Stats::write_groups`), for the note of a write phase.
    fn write_groups(&self) -> Option<(u64, u64)> {
        None
    }
    /// Value bytes the engine moved into key order since open, and value
    /// bytes its scans read at random from where they were written
    /// (CairnDB's `Stats::value_bytes_settled`,
    /// `value_bytes_scanned_scattered`), for the note of a scan phase.
    fn settled(&self) -> Option<(u64, u64)> {
        None
    }
    /// Settles the data: a full compaction (with value GC where the
    /// engine has it), waiting for it. `Ok(false)` if the adapter has no
    /// such call and the engine is left to compact on its own.
    fn compact(&self) -> BenchResult<bool> {
        Ok(false)
    }
    /// Waits, at most `limit`, until the engine's own background work has
    /// settled every value (CairnDB: `Stats::value_bytes_unsettled` is 0,
    /// reached by settling while idle). `None` if the engine has no such
    /// work, else whether it finished in time.
    fn wait_settled(&self, limit: std::time::Duration) -> BenchResult<Option<bool>> {
        let _ = limit;
        Ok(None)
    }
    /// The compression the engine applies to its tables, for the
    /// report: "none", "lz4", "zstd level 3", or why `--compression` was
    /// not applied ("none: LMDB has no compression"). Every adapter
    /// states it, so no engine's setting goes unreported.
    fn compression(&self) -> String;
    /// The adapter's keyspaces, or `None` if it has none (the keyspaces
    /// workload then skips the engine).
    fn keyspaces(&self) -> Option<&dyn Keyspaces> {
        None
    }
    /// Makes a checkpoint of the database in `dir` while writes go on
    /// (CairnDB's `Db::checkpoint_with_stats`), or `None` if the adapter
    /// has none (the checkpoint workload then skips the engine).
    fn checkpoint(&self, dir: &std::path::Path) -> Option<BenchResult<Checkpointed>> {
        let _ = dir;
        None
    }
    /// Opens a follower of this database that catches up every `every`
    /// on its own timer, or `None` if the adapter has none (the follower
    /// workload then skips the engine).
    fn follower(&self, every: std::time::Duration) -> Option<BenchResult<Box<dyn Follower>>> {
        let _ = every;
        None
    }
}

/// A second handle on a database another handle writes, reading what it
/// sees as of its last catch-up (CairnDB's `Db::open_follower`).
pub trait Follower: Send + Sync {
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>>;
}

impl Follower for cairndb::ReadOnlyDb {
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(cairndb::ReadOnlyDb::get(self, key)?)
    }
}

/// What `Engine::checkpoint` made.
#[derive(Debug, Clone, Copy)]
pub struct Checkpointed {
    pub seqno: u64,
    pub bytes_linked: u64,
    pub bytes_copied: u64,
    /// Time waiting for acknowledged writes to reach tables, and time
    /// linking and copying files (zero where the engine does not say).
    pub flush_time: std::time::Duration,
    pub files_time: std::time::Duration,
}

/// CairnDB variants, each an engine of its own in `--engines`:
/// - `cairndb`: `Options::default()` (values of 1 KiB and more separated,
///   value GC at a live ratio of 0.5), but for a block cache of the
///   budget alone (`block_cache_borrows_memtable_room` off in every
///   variant but `cairndb-borrow`);
/// - `cairndb-inline`: `value_separation_min = usize::MAX`, every value
///   inline in the tables (the control for key-value separation);
/// - `cairndb-nogc`: `value_gc_live_ratio = 0.0`, the null free-space
///   policy: no value is ever moved, a segment is freed when all its
///   values are dead (the control for value GC);
/// - `cairndb-direct`: `value_reads = Direct`, flushed values read with
///   direct IO, never from the page cache;
/// - `cairndb-buffered`: `value_reads = PageCache`, flushed values read
///   through the page cache whatever the data's size (the control for the
///   default `Auto`, which reads misses directly once the values outgrow
///   the available memory);
/// - `cairndb-append`: `journal_prewrite = false`, every synced commit
///   appends (grows the journal) instead of overwriting pre-written
///   blocks (the control for journal pre-writing);
/// - `cairndb-norecycle`: `journal_recycle = false`, every journal is a
///   new file and obsolete ones are deleted (the control for journal
///   recycling);
/// - `cairndb-buffered-journal`: `journal_direct = false`, the journal
///   written with buffered `write`s through the page cache (the control
///   for the default direct journal);
/// - `cairndb-cold`: `warm_written_values = false`, journals and values
///   files not read back into the page cache after writes pause (the
///   control for it);
/// - `cairndb-nosettle`: `settle_for_scans = 0.0`, compactions beside
///   writes settle nothing however scans read (the control for it);
/// - `cairndb-nostreams`: `value_partitions = 0`, unsynced separated
///   values kept inside their journal records instead of appended to
///   value streams by key range (the control for value streams);
/// - `cairndb-map`: `map_values = true`, flushed values the page cache
///   holds copied out of memory maps of their files instead of read with
///   `pread` (what the option gains);
/// - `cairndb-lz4`: `compression = Lz4` whatever `--compression` says, so
///   that one run measures what LZ4 costs against `cairndb`;
/// - `cairndb-borrow`: `block_cache_borrows_memtable_room = true`, the
///   engine's default, off in every other variant so that the block cache
///   is the budget the peers' caches get: the cache also holds blocks in
///   the room of memtables not sealed (what the default gains).
pub const CAIRN_VARIANTS: &[&str] = &[
    "cairndb",
    "cairndb-inline",
    "cairndb-nogc",
    "cairndb-direct",
    "cairndb-buffered",
    "cairndb-append",
    "cairndb-norecycle",
    "cairndb-buffered-journal",
    "cairndb-cold",
    "cairndb-nosettle",
    "cairndb-nostreams",
    "cairndb-map",
    "cairndb-lz4",
    "cairndb-borrow",
];

/// Overrides the separation threshold of every CairnDB variant that
/// separates values (all but `cairndb-inline`): a number of bytes, or
/// `max` (`usize::MAX`, every value inline).
pub const SEPARATION_ENV: &str = "CAIRNDB_VALUE_SEPARATION_MIN";

/// The separation threshold `SEPARATION_ENV` asks for, if it is set.
pub fn separation_override() -> BenchResult<Option<usize>> {
    match std::env::var(SEPARATION_ENV) {
        Ok(v) => parse_separation(&v).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(format!("{SEPARATION_ENV}: {e}").into()),
    }
}

fn parse_separation(v: &str) -> BenchResult<usize> {
    match v.trim() {
        "max" => Ok(usize::MAX),
        n => n
            .parse()
            .map_err(|_| format!("{SEPARATION_ENV}={v}: not a number or `max`").into()),
    }
}

/// The options of CairnDB variant `name` (`None` if it is not one), with
/// the separation threshold `separation` overrides (ignored by
/// `cairndb-inline`).
pub fn cairn_options(
    name: &str,
    cfg: &EngineConfig,
    separation: Option<usize>,
) -> Option<cairndb::Options> {
    let mut opts = cairndb::Options {
        block_cache_bytes: cfg.cache_bytes,
        // The cache is the budget every engine gets, no more: the
        // engine's default lends it the room of unsealed memtables too,
        // which the peers' caches do not get (`cairndb-borrow`).
        block_cache_borrows_memtable_room: false,
        memtable_bytes: cfg.write_buffer_bytes,
        // Set whatever the engine's default, so that a run without
        // `--compression` stays uncompressed.
        compression: match cfg.compression {
            Compression::None => cairndb::Compression::None,
            Compression::Lz4 => cairndb::Compression::Lz4,
            Compression::Zstd => cairndb::Compression::Zstd(ZSTD_LEVEL),
        },
        ..cairndb::Options::default()
    };
    if let Some(min) = separation {
        opts.value_separation_min = min;
    }
    match name {
        "cairndb" => {}
        "cairndb-inline" => opts.value_separation_min = usize::MAX,
        "cairndb-nogc" => opts.value_gc_live_ratio = 0.0,
        "cairndb-direct" => opts.value_reads = cairndb::ValueReads::Direct,
        "cairndb-buffered" => opts.value_reads = cairndb::ValueReads::PageCache,
        "cairndb-append" => opts.journal_prewrite = false,
        "cairndb-norecycle" => opts.journal_recycle = false,
        "cairndb-buffered-journal" => opts.journal_direct = false,
        "cairndb-cold" => opts.warm_written_values = false,
        "cairndb-nosettle" => opts.settle_for_scans = 0.0,
        "cairndb-nostreams" => opts.value_partitions = 0,
        "cairndb-map" => opts.map_values = true,
        "cairndb-lz4" => opts.compression = cairndb::Compression::Lz4,
        "cairndb-borrow" => opts.block_cache_borrows_memtable_room = true,
        _ => return None,
    }
    Some(opts)
}

/// How CairnDB read its flushed values since open, for phase notes.
fn value_reads_note(s: &cairndb::Stats) -> String {
    format!(
        "value reads {:?}: {} cached, {} direct ({} without asking the page cache), {} buffered",
        s.value_reads,
        s.value_reads_cached,
        s.value_reads_direct,
        s.value_reads_unasked,
        s.value_reads_buffered
    )
}

/// Engines this build can run: the CairnDB variants, then the peers.
pub fn available() -> Vec<&'static str> {
    let mut v = CAIRN_VARIANTS.to_vec();
    v.extend_from_slice(super::peers::COMPILED);
    v
}

/// Opens (creating) a database of engine `name` in `dir`.
pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> BenchResult<Box<dyn Engine>> {
    match CAIRN_VARIANTS.iter().find(|v| **v == name) {
        Some(variant) => Ok(Box::new(CairnEngine::open(variant, dir, cfg)?)),
        None => super::peers::open(name, dir, cfg).unwrap_or_else(|| {
            Err(format!(
                "engine {name} is not in this build (available: {}; peers need their cargo feature)",
                available().join(", ")
            )
            .into())
        }),
    }
}

/// Visits up to `limit` of `entries` while `f` returns true; returns the
/// number visited. The loop the peers' `scan`s share (each peer is behind
/// its cargo feature).
#[cfg_attr(
    not(any(
        feature = "lmdb",
        feature = "redb",
        feature = "fjall",
        feature = "sled",
        feature = "rocksdb"
    )),
    allow(dead_code)
)]
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

/// CairnDB with options sized like the peers', in one of its variants
/// (`CAIRN_VARIANTS`).
pub struct CairnEngine {
    db: cairndb::Db,
    name: &'static str,
    compression: cairndb::Compression,
    /// `Options::value_separation_min`: values this long are separated
    /// (and compressed like the tables).
    separation_min: usize,
    /// Whether the database settles values while idle.
    settles_when_idle: bool,
    /// Keyspaces opened through `Keyspaces::open_keyspace`, by index.
    spaces: std::sync::RwLock<Vec<cairndb::Keyspace>>,
}

impl CairnEngine {
    /// Opens variant `name` (one of `CAIRN_VARIANTS`), with the threshold
    /// of `SEPARATION_ENV` if it is set.
    pub fn open(name: &'static str, dir: &Path, cfg: &EngineConfig) -> BenchResult<Self> {
        let opts = cairn_options(name, cfg, separation_override()?)
            .ok_or_else(|| format!("{name} is not a CairnDB variant"))?;
        Ok(CairnEngine {
            settles_when_idle: opts.settle_after_idle.is_some()
                && opts.background_compaction
                && opts.value_gc_live_ratio > 0.0,
            compression: opts.compression,
            separation_min: opts.value_separation_min,
            db: cairndb::Db::open(dir, opts)?,
            name,
            spaces: std::sync::RwLock::new(Vec::new()),
        })
    }

    fn space(&self, ks: usize) -> BenchResult<cairndb::Keyspace> {
        let spaces = self.spaces.read().map_err(|_| "keyspace list poisoned")?;
        Ok(spaces
            .get(ks)
            .ok_or_else(|| format!("no keyspace {ks}"))?
            .clone())
    }
}

impl Keyspaces for CairnEngine {
    fn open_keyspace(&self, name: &str) -> BenchResult<usize> {
        let ks = self.db.keyspace_with(
            name,
            cairndb::KeyspaceOptions {
                compression: self.compression,
                value_separation_min: self.separation_min,
                ..cairndb::KeyspaceOptions::default()
            },
        )?;
        let mut spaces = self.spaces.write().map_err(|_| "keyspace list poisoned")?;
        spaces.push(ks);
        Ok(spaces.len() - 1)
    }
    fn write_in(&self, ks: usize, ops: &[BatchOp], sync: bool) -> BenchResult<()> {
        let ks = self.space(ks)?;
        let mut b = cairndb::WriteBatch::new();
        for (k, v) in ops {
            match v {
                Some(v) => b.put_in(&ks, k, v)?,
                None => b.delete_in(&ks, k)?,
            }
        }
        Ok(self.db.write(b, &cairndb::WriteOptions { sync })?)
    }
    fn get_in(&self, ks: usize, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.space(ks)?.get(key)?)
    }
    fn drop_keyspace(&self, name: &str) -> BenchResult<()> {
        self.db.drop_keyspace(name)?;
        Ok(())
    }
}

impl Engine for CairnEngine {
    fn name(&self) -> &'static str {
        self.name
    }
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        Ok(self.db.put(key, value)?)
    }
    fn get(&self, key: &[u8]) -> BenchResult<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }
    fn multi_get(&self, keys: &[Vec<u8>]) -> BenchResult<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(keys.len());
        for v in self.db.multi_get(keys) {
            out.push(v?);
        }
        Ok(out)
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
        // Borrowed entries (`Iter::next_ref`), as the peers' iterators
        // lend theirs: values of long scans are not copied.
        let mut iter = self.db.range(from..);
        let mut n = 0;
        while n < limit {
            let Some(entry) = iter.next_ref() else {
                break;
            };
            let (k, v) = entry?;
            n += 1;
            if !f(k, v) {
                break;
            }
        }
        Ok(n)
    }
    fn flush(&self) -> BenchResult<()> {
        Ok(self.db.flush()?)
    }
    fn begin(&self) -> Option<Box<dyn Txn + '_>> {
        Some(Box::new(CairnTxn(self.db.begin())))
    }
    fn compact(&self) -> BenchResult<bool> {
        self.db.compact()?;
        Ok(true)
    }
    fn wait_settled(&self, limit: std::time::Duration) -> BenchResult<Option<bool>> {
        if !self.settles_when_idle {
            return Ok(None);
        }
        let until = std::time::Instant::now() + limit;
        // Stats are read, not values: the database stays idle.
        while self.db.stats().value_bytes_unsettled > 0 {
            if std::time::Instant::now() >= until {
                return Ok(Some(false));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // The last step's obsolete files are deleted after its version is
        // installed: wait until the directory stops shrinking.
        let mut bytes = crate::bench::monitor::dir_bytes(self.db.path());
        loop {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let now = crate::bench::monitor::dir_bytes(self.db.path());
            if now == bytes || std::time::Instant::now() >= until {
                break;
            }
            bytes = now;
        }
        Ok(Some(true))
    }
    fn compression(&self) -> String {
        let what = match self.compression {
            cairndb::Compression::None => return "none".to_owned(),
            cairndb::Compression::Lz4 => "lz4".to_owned(),
            cairndb::Compression::Zstd(level) => format!("zstd level {level}"),
        };
        // Separated values are compressed too: unsynced ones as value
        // streams take them, synced ones when a compaction moves them.
        if self.separation_min == usize::MAX {
            format!("{what} (table blocks, every value inline)")
        } else {
            format!(
                "{what} (table blocks; values of {} B and more are separated, compressed as value streams take them, or, written synced, as compactions move them)",
                self.separation_min
            )
        }
    }
    fn keyspaces(&self) -> Option<&dyn Keyspaces> {
        Some(self)
    }
    fn follower(&self, every: std::time::Duration) -> Option<BenchResult<Box<dyn Follower>>> {
        let opts = cairndb::Options {
            follow_every: Some(every),
            ..cairndb::Options::default()
        };
        Some(
            cairndb::Db::open_follower(self.db.path(), opts)
                .map(|f| Box::new(f) as Box<dyn Follower>)
                .map_err(Into::into),
        )
    }
    fn checkpoint(&self, dir: &std::path::Path) -> Option<BenchResult<Checkpointed>> {
        Some(
            self.db
                .checkpoint_with_stats(dir)
                .map(|c| Checkpointed {
                    seqno: c.seqno,
                    bytes_linked: c.bytes_linked,
                    bytes_copied: c.bytes_copied,
                    flush_time: c.flush_time,
                    files_time: c.files_time,
                })
                .map_err(Into::into),
        )
    }
    fn space_note(&self) -> Option<String> {
        let s = self.db.stats();
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        Some(format!(
            "of which tables {:.1} MiB, live separated values {:.1} MiB; {} free journals kept for reuse (journal_recycle)",
            mib(s.bytes_per_level.iter().sum()),
            mib(s.value_bytes_live),
            s.journals_free
        ))
    }
    fn write_groups(&self) -> Option<(u64, u64)> {
        let s = self.db.stats();
        Some((s.write_groups, s.write_group_batches))
    }
    fn settled(&self) -> Option<(u64, u64)> {
        let s = self.db.stats();
        Some((s.value_bytes_settled, s.value_bytes_scanned_scattered))
    }
    fn scan_note(&self) -> Option<String> {
        let s = self.db.stats();
        Some(format!(
            "shared scans read {} chunks of {} MiB ({} ahead) into {} new buffers, waited {} times for a read, {} for laggards; \
             value streams read whole: {} chunks, {:.1} MiB into {} new buffers, waited {} times, {} times for scans behind ({:.2} s); windows of entries built {}, taken by other scans {}; {}",
            s.scan_chunk_reads,
            cairndb::limits::SCAN_CHUNK_BYTES >> 20,
            s.scan_chunks_read_ahead,
            s.scan_new_buffers,
            s.scan_chunk_waits,
            s.scan_laggard_waits,
            s.scan_stream_chunk_reads,
            s.scan_stream_bytes_read as f64 / (1 << 20) as f64,
            s.scan_stream_new_buffers,
            s.scan_stream_chunk_waits,
            s.scan_stream_paced,
            s.scan_stream_paced_micros as f64 / 1e6,
            s.scan_windows_published,
            s.scan_windows_taken,
            value_reads_note(&s)
        ))
    }
    fn index_memory(&self) -> Option<(f64, String)> {
        let s = self.db.stats();
        let per_key = s.table_memory_bytes as f64 / s.table_entries.max(1) as f64;
        let tables: usize = s.tables_per_level.iter().sum();
        Some((
            per_key,
            format!(
                "index+filters {per_key:.1} B/key ({} of {tables} tables open, {} entries); {}",
                s.open_tables,
                s.table_entries,
                value_reads_note(&s)
            ),
        ))
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cairn_variants_are_engines() {
        let all = available();
        assert_eq!(&all[..CAIRN_VARIANTS.len()], CAIRN_VARIANTS);
        let cfg = EngineConfig::default();
        let def = cairndb::Options::default();
        let opts = |name, sep| cairn_options(name, &cfg, sep).unwrap();
        let plain = opts("cairndb", None);
        assert_eq!(plain.value_separation_min, def.value_separation_min);
        assert_eq!(plain.value_gc_live_ratio, def.value_gc_live_ratio);
        assert_eq!(plain.block_cache_bytes, cfg.cache_bytes);
        assert!(!plain.block_cache_borrows_memtable_room);
        assert!(def.block_cache_borrows_memtable_room);
        assert!(opts("cairndb-borrow", None).block_cache_borrows_memtable_room);
        assert_eq!(plain.memtable_bytes, cfg.write_buffer_bytes);
        let inline = opts("cairndb-inline", None);
        assert_eq!(inline.value_separation_min, usize::MAX);
        assert_eq!(inline.value_gc_live_ratio, def.value_gc_live_ratio);
        let nogc = opts("cairndb-nogc", None);
        assert_eq!(nogc.value_separation_min, def.value_separation_min);
        assert_eq!(nogc.value_gc_live_ratio, 0.0);
        assert_eq!(plain.value_reads, cairndb::ValueReads::Auto);
        let direct = opts("cairndb-direct", None);
        assert_eq!(direct.value_reads, cairndb::ValueReads::Direct);
        let buffered = opts("cairndb-buffered", None);
        assert_eq!(buffered.value_reads, cairndb::ValueReads::PageCache);
        assert!(plain.journal_direct);
        assert!(!opts("cairndb-buffered-journal", None).journal_direct);
        assert!(plain.warm_written_values);
        assert!(!opts("cairndb-cold", None).warm_written_values);
        assert_eq!(direct.value_separation_min, def.value_separation_min);
        // The environment's threshold applies to the variants that
        // separate, never to the inline control.
        assert_eq!(opts("cairndb", Some(256)).value_separation_min, 256);
        assert_eq!(opts("cairndb-nogc", Some(256)).value_separation_min, 256);
        assert_eq!(opts("cairndb-nogc", Some(256)).value_gc_live_ratio, 0.0);
        assert_eq!(
            opts("cairndb-inline", Some(256)).value_separation_min,
            usize::MAX
        );
        assert!(cairn_options("cairndb-foo", &cfg, None).is_none());
        assert!(cairn_options("rocksdb", &cfg, None).is_none());
        assert_eq!(parse_separation("max").unwrap(), usize::MAX);
        assert_eq!(parse_separation(" 4096").unwrap(), 4096);
        assert!(parse_separation("1k").is_err());
        let dir = tempfile::tempdir().unwrap();
        let err = open("cairndb-foo", dir.path(), &cfg).err().unwrap();
        assert!(err.to_string().contains("cairndb-inline"), "{err}");
    }

    /// `--compression` reaches CairnDB's options (whatever the engine's
    /// default), and its tables: on values that compress 2:1, LZ4 and
    /// Zstandard tables are far smaller than uncompressed ones.
    #[test]
    fn compression_reaches_cairndb_tables() {
        let cfg = |compression| EngineConfig {
            compression,
            ..EngineConfig::default()
        };
        let opts = |c| cairn_options("cairndb", &cfg(c), None).unwrap().compression;
        assert_eq!(opts(Compression::None), cairndb::Compression::None);
        assert_eq!(opts(Compression::Lz4), cairndb::Compression::Lz4);
        assert_eq!(
            opts(Compression::Zstd),
            cairndb::Compression::Zstd(ZSTD_LEVEL)
        );
        let inline = cairn_options("cairndb-inline", &cfg(Compression::Lz4), None).unwrap();
        assert_eq!(inline.compression, cairndb::Compression::Lz4);

        let fill = crate::bench::workloads::Fill::compressible(Some(0.5), 1).unwrap();
        let mut table_bytes = Vec::new();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let dir = tempfile::tempdir().unwrap();
            let e = CairnEngine::open("cairndb", dir.path(), &cfg(c)).unwrap();
            assert!(e.compression().starts_with(match c {
                Compression::None => "none",
                Compression::Lz4 => "lz4 (table blocks",
                Compression::Zstd => "zstd level 3 (table blocks",
            }));
            for i in 0..20_000u64 {
                e.put(&i.to_be_bytes(), &fill.value(i, 0, 100)).unwrap();
            }
            e.compact().unwrap();
            for i in (0..20_000u64).step_by(97) {
                let v = e.get(&i.to_be_bytes()).unwrap().unwrap();
                crate::bench::workloads::check_value(i, &v).unwrap();
            }
            table_bytes.push(e.db.stats().bytes_per_level.iter().sum::<u64>());
        }
        let [none, lz4, zstd] = table_bytes[..] else {
            unreachable!()
        };
        // 108 bytes of entry each, 58 of them unrepeated: about 0.55.
        let (lz4, zstd) = (lz4 as f64 / none as f64, zstd as f64 / none as f64);
        assert!(
            lz4 < 0.7 && zstd < 0.7,
            "tables: none {none} B, lz4 {lz4:.2}, zstd {zstd:.2} of it"
        );
    }

    #[test]
    fn cairn_variants_roundtrip() {
        for name in CAIRN_VARIANTS {
            super::super::peers::roundtrip(name);
        }
    }
    /// The index memory note counts the flushed table's index and filter
    /// over its entries: some bytes per key, far fewer than a key-value.
    #[test]
    fn cairndb_reports_index_memory_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let db = open("cairndb", dir.path(), &EngineConfig::default()).unwrap();
        assert_eq!(db.index_memory().unwrap().0, 0.0, "no table yet");
        for i in 0..5000u64 {
            db.put(&i.to_be_bytes(), &[7u8; 100]).unwrap();
        }
        db.flush().unwrap();
        for i in 0..5000u64 {
            assert!(db.get(&i.to_be_bytes()).unwrap().is_some());
        }
        let (per_key, note) = db.index_memory().unwrap();
        assert!(per_key > 0.1 && per_key < 50.0, "{note}");
        assert!(note.contains("5000 entries"), "{note}");
    }
}
