//! The database handle: the public face of one open database. The state
//! its threads share is `engine::Inner`.

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::keyspace::{DEFAULT_ID, Keyspace};
use crate::options::{Options, WriteOptions};
use crate::read::iter::{Iter, prefix_successor};
use crate::write::batch::{WriteBatch, check_key};
use parking_lot::Mutex;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

struct Handle {
    inner: Arc<Inner>,
    /// The default keyspace, whose reads `Db`'s own methods are.
    default: Keyspace,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Handle {
    /// Ends what the database owns: background threads, the journal,
    /// the directory lock. Snapshots, iterators and transactions that
    /// outlive it hold memory only and answer `Error::Closed`; another
    /// handle may open the directory at once.
    fn close(&self) -> Result<()> {
        let r = self.inner.shutdown();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        let r = match r {
            Ok(Some((journal, len))) => self.inner.log_clean_close(journal, len),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        self.inner.reaper.closed.store(true, Ordering::Release);
        drop(self.inner.lock.lock().take());
        r
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// An open database. Cheap to clone; all clones share one database, which
/// is closed when the last clone is dropped or [`Db::close`] is called.
/// `Send + Sync`: use it from any number of threads.
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.inner().dir)
            .finish()
    }
}

pub(crate) fn owned_bound<K: AsRef<[u8]>>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(crate) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let upper = match prefix_successor(prefix) {
        Some(s) => Bound::Excluded(s),
        None => Bound::Unbounded,
    };
    (Bound::Included(prefix.to_vec()), upper)
}

/// `Db::multi_get` and `Keyspace::multi_get`: the values of `keys` of
/// `keyspace` in `view` at `seqno`, an invalid key failing only its own
/// result.
pub(crate) fn multi_get<K: AsRef<[u8]>>(
    view: &crate::read::ReadView,
    keyspace: u32,
    seqno: u64,
    keys: &[K],
) -> Vec<Result<Option<Vec<u8>>>> {
    let mut out: Vec<Option<Result<Option<Vec<u8>>>>> = Vec::with_capacity(keys.len());
    let mut valid: Vec<&[u8]> = Vec::with_capacity(keys.len());
    for k in keys {
        let k = k.as_ref();
        match check_key(k) {
            Ok(()) => {
                valid.push(k);
                out.push(None);
            }
            Err(e) => out.push(Some(Err(e))),
        }
    }
    let mut got = view.get_many(keyspace, &valid, seqno).into_iter();
    out.into_iter()
        .map(|r| match r {
            Some(r) => r,
            None => got.next().expect("get_many answers every valid key"),
        })
        .collect()
}

impl Db {
    /// Rebuilds the database at `path` whose manifest is lost or damaged
    /// from its tables and journals, like LevelDB's `RepairDB`
    /// (docs/durability.md §Repair). Takes the writer lock (an open
    /// handle elsewhere makes it fail with the same `Io` error as a
    /// second `open`). Every table is read whole; a damaged or foreign
    /// one, or one holding entries another table holds too, is moved
    /// into `path/lost/` (never deleted) and reported. Journals are
    /// replayed as far as their records are intact. Whatever part of the
    /// old manifest is intact gives the identity, keyspaces and levels;
    /// where it is gone, the tables' properties give them. A fresh
    /// manifest then names every kept table, and the database is opened
    /// once (and its tables merged into one level if their old levels
    /// were lost) to check that it opens. Afterwards `open` opens it and
    /// `verify` finds every kept table intact.
    ///
    /// Errors: `InvalidArgument` if `path` does not exist, `Io` if the
    /// lock is held or a file cannot be read or written; a file that is
    /// merely damaged is reported, not an error.
    pub fn repair(path: impl AsRef<Path>, opts: &Options) -> Result<crate::RepairReport> {
        Db::repair_with(path, opts, |_| {})
    }

    /// [`Db::repair`], calling `progress` as it goes: before and after
    /// each table it reads (tables and bytes done of all), when it
    /// replays the journals, and when it merges the tables.
    pub fn repair_with(
        path: impl AsRef<Path>,
        opts: &Options,
        mut progress: impl FnMut(crate::RepairProgress),
    ) -> Result<crate::RepairReport> {
        crate::recovery::repair::repair(path.as_ref(), opts, &mut progress)
    }

    /// Opens the database at `path`, creating it if missing (unless
    /// `create_if_missing` is false) and recovering it if present: the
    /// manifest is read and the journal tail replayed. Fails with
    /// `Corruption` if the files are damaged beyond a torn journal tail,
    /// `Io` if the directory is locked by another handle or unreadable.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let inner = Arc::new(Inner::new(crate::recovery::open(path.as_ref(), opts)?));
        let mut threads = Vec::new();
        let spawn = |name: &str, f: fn(&Inner)| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || f(&inner))
                .map_err(|e| Error::io("starting a background thread", e))
        };
        threads.push(spawn("cairndb-flush", crate::flush::run)?);
        if inner.opts.background_compaction {
            threads.push(spawn("cairndb-compact", crate::compaction::run)?);
        }
        Ok(Db {
            handle: Arc::new(Handle {
                default: Keyspace::default_of(inner.clone()),
                inner,
                threads: Mutex::new(threads),
            }),
        })
    }

    /// Opens the database at `path` for reading only, as it is: no file
    /// is created, written, renamed or deleted (the journals are replayed
    /// into memory, a torn tail is not cut, only not read past). Takes
    /// the directory's `LOCK` shared, so any number of read-only handles
    /// of any processes may be open at once, but not while a writer is
    /// (`Io` naming the lock and the writer's pid: use
    /// [`Db::open_follower`]), and a writer cannot open the database
    /// until they are all dropped. `InvalidArgument` if there is no
    /// database; `Corruption` as `Db::open` would report it.
    pub fn open_read_only(
        path: impl AsRef<Path>,
        opts: Options,
    ) -> Result<crate::follow::ReadOnlyDb> {
        crate::follow::ReadOnlyDb::open(path.as_ref(), opts, false)
    }

    /// Opens the database at `path`, which another process may be
    /// writing, as a follower (RocksDB's secondary instance): no lock is
    /// taken and nothing of the database is written; the follower
    /// registers in `readers/` (docs/architecture.md §Followers) which
    /// files it reads, so the writer keeps them. Reads see the state
    /// found at open, until [`ReadOnlyDb::catch_up`] (or the timer of
    /// `Options::follow_every`) reads newer writes.
    pub fn open_follower(
        path: impl AsRef<Path>,
        opts: Options,
    ) -> Result<crate::follow::ReadOnlyDb> {
        crate::follow::ReadOnlyDb::open(path.as_ref(), opts, true)
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.handle.inner
    }

    /// Sets `key` to `value` (not synced: survives a process crash).
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(key, value, &WriteOptions::default())
    }

    pub fn put_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.write(b, opts)
    }

    /// Deletes `key` (not synced). Deleting a missing key is not an error.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(key, &WriteOptions::default())
    }

    pub fn delete_opt(&self, key: impl AsRef<[u8]>, opts: &WriteOptions) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.write(b, opts)
    }

    /// Applies `batch` atomically. With `opts.sync` the call returns after
    /// the batch is durable. Errors:
    /// - `Io` from this write's journal append or sync: the batch is not
    ///   visible, but may or may not be in the journal (a reopen decides);
    ///   the handle is poisoned.
    /// - `Poisoned` after an earlier journal or manifest failure.
    /// - the stored error of a failed background flush or compaction
    ///   (usually `Io`): every later write returns it until reopen, while
    ///   reads keep working.
    /// - `Closed` after close.
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.inner().write(batch, opts)
    }

    /// The current value of `key`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        check_key(key)?;
        let inner = self.inner();
        let (view, seqno) = inner.view_and_seqno();
        view.get(DEFAULT_ID, key, seqno)
    }

    /// The current values of `keys`, in their order, all as of one
    /// instant (one snapshot). Each result is what `get` would return for
    /// its key; an invalid key fails only its own result. The separated
    /// values among them are read together, many device reads in flight
    /// at once (through io_uring where it can), instead of one after
    /// another: for a caller that needs several values at once, far less
    /// waiting than a loop of `get`.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.handle.default.multi_get(keys)
    }

    /// Keys in `range` with their values, in key order (`.rev()` for
    /// descending), as of this call.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.handle.default.range(range)
    }

    /// Every key with its value, in key order.
    pub fn iter(&self) -> Iter {
        self.handle.default.iter()
    }

    /// Keys starting with `prefix`, in key order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        self.handle.default.prefix(prefix)
    }

    /// A consistent view of the database as of now, kept until dropped.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.inner().clone();
        let (pin, seqno) = inner.pins.pin(&inner.last_seqno);
        Snapshot { inner, pin, seqno }
    }

    /// Starts an optimistic transaction with snapshot isolation: it reads
    /// the database as of now plus its own writes, and its commit fails
    /// with `Error::Conflict` if another commit wrote one of the keys it
    /// writes (or read with `get_for_update`) since it began.
    pub fn begin(&self) -> crate::txn::Transaction {
        self.begin_with(crate::txn::Isolation::Snapshot)
    }

    /// Starts an optimistic serializable transaction: like
    /// [`Db::begin`], and its commit also fails if another commit changed
    /// anything it read — keys it got (present or not) and every key in
    /// the ranges it scanned (phantoms included).
    pub fn begin_serializable(&self) -> crate::txn::Transaction {
        self.begin_with(crate::txn::Isolation::Serializable)
    }

    /// Starts an optimistic transaction with the given isolation.
    pub fn begin_with(&self, isolation: crate::txn::Isolation) -> crate::txn::Transaction {
        crate::txn::Transaction::new(self.inner().clone(), isolation)
    }

    /// Writes the memtable to a table and waits until every sealed
    /// memtable is flushed (tables synced, manifest updated).
    pub fn flush(&self) -> Result<()> {
        crate::flush::flush_and_wait(self.inner())
    }

    /// Flushes, then merges every table into one sorted level, dropping
    /// overwritten versions and tombstones no snapshot needs. Waits.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        crate::compaction::compact_all(self.inner())
    }

    /// Runs the settling steps the compaction thread runs once the
    /// database is idle (`Options::settle_after_idle`), now, on this
    /// thread, until none is left; returns how many ran. For tests that
    /// need a step at a known point (a power cut inside one); a step
    /// still gives way to foreground work as in the background.
    #[doc(hidden)]
    pub fn settle_now(&self) -> Result<u64> {
        crate::compaction::settle_now(self.inner())
    }

    /// Syncs the journal and stops background work. Later writes through
    /// any clone of this handle fail with `Closed`.
    pub fn close(self) -> Result<()> {
        self.handle.close()
    }

    /// The database's identity: drawn when it was created (or first
    /// opened by a build of manifest format 4) and kept in its manifest.
    /// Its tables carry it, and its journals' record framing is seeded
    /// with it, so a file of another database is told apart from its own
    /// (docs/format.md §Manifest).
    pub fn id(&self) -> u64 {
        self.inner().db_id
    }

    /// Reads every table of the database and every separated value its
    /// tables point to, from the files, checking every checksum, the
    /// order of every table's keys and every table against its manifest
    /// record. Writes may go on meanwhile. A problem does not stop it:
    /// each is in the report, naming its file and offset. (What open
    /// reads, the manifest and the journals, was checked by the open.)
    pub fn verify(&self) -> Result<crate::VerifyReport> {
        self.verify_with(|_| {})
    }

    /// [`Db::verify`], calling `progress` after each table.
    pub fn verify_with(
        &self,
        mut progress: impl FnMut(&crate::VerifyReport),
    ) -> Result<crate::VerifyReport> {
        Ok(crate::verify::verify(self.inner(), &mut progress))
    }

    /// Shape and counters, for tools and tests.
    pub fn stats(&self) -> Stats {
        let inner = self.inner();
        let view = inner.view();
        let (open_tables, table_memory_bytes) = inner.tables.memory();
        let bg = inner.bg.lock();
        Stats {
            open_tables,
            table_memory_bytes,
            block_cache_bytes: inner.blocks.as_ref().map_or(0, |b| b.weight()),
            block_cache_capacity: inner.blocks.as_ref().map_or(0, |b| b.capacity()),
            block_cache_hits: inner.blocks.as_ref().map_or(0, |b| b.hits()),
            block_cache_misses: inner.blocks.as_ref().map_or(0, |b| b.misses()),
            user_bytes_written: inner.counters.user_bytes.load(Ordering::Relaxed),
            journal_bytes_written: inner.counters.journal_bytes.load(Ordering::Relaxed),
            table_bytes_written: inner.counters.table_bytes.load(Ordering::Relaxed),
            lifetime_user_bytes: inner.write_totals().user,
            lifetime_disk_bytes: inner.write_totals().disk,
            tables_per_level: view.version.levels.iter().map(Vec::len).collect(),
            bytes_per_level: (0..view.version.levels.len())
                .map(|l| view.version.level_bytes(l))
                .collect(),
            memtable_bytes: view.mem.approx_bytes(),
            sealed_memtables: view.sealed.len(),
            last_seqno: inner.last_seqno.load(Ordering::Acquire),
            flushes: inner.counters.flushes.load(Ordering::Relaxed),
            compactions: inner.counters.compactions.load(Ordering::Relaxed),
            stall_micros: inner.counters.stall_micros.load(Ordering::Relaxed),
            slowdown_micros: inner.counters.slowdown_micros.load(Ordering::Relaxed),
            journal_prewrites: inner.counters.prewrites.load(Ordering::Relaxed),
            journal_presyncs: inner.counters.presyncs.load(Ordering::Relaxed),
            write_groups: inner.counters.groups.load(Ordering::Relaxed),
            write_group_batches: inner.counters.grouped_batches.load(Ordering::Relaxed),
            value_reads: view.reads.into(),
            value_reads_cached: inner.policy.counts().0,
            value_reads_unasked: inner.policy.unasked(),
            value_reads_direct: inner.policy.counts().1,
            value_reads_buffered: inner.policy.counts().2,
            value_reads_mapped: inner.policy.mapped(),
            value_read_batches: inner.policy.batches(),
            scan_chunk_reads: inner.share.reads(),
            scan_chunk_waits: inner.share.waits(),
            scan_laggard_waits: inner.share.laggard_waits(),
            scan_chunks_read_ahead: inner.share.ahead_reads(),
            scan_new_buffers: inner.share.new_buffers(),
            scan_stream_chunk_reads: inner.share.streams.reads().0,
            scan_stream_bytes_read: inner.share.streams.reads().1,
            scan_stream_chunk_waits: inner.share.streams.waits(),
            scan_stream_new_buffers: inner.share.streams.mapped(),
            scan_stream_paced: inner.share.streams.paced().0,
            scan_stream_paced_micros: inner.share.streams.paced().1,
            scan_windows_published: inner.share.windows.counts().0,
            scan_windows_taken: inner.share.windows.counts().1,
            value_bytes_moved: inner.counters.value_bytes_moved.load(Ordering::Relaxed),
            value_bytes_settled: inner.counters.value_bytes_settled.load(Ordering::Relaxed),
            value_bytes_scanned_scattered: inner.policy.scattered(),
            value_bytes_scanned_scattered_short: inner.policy.scattered_short(),
            journals_recycled: inner.reaper.recycled.load(Ordering::Relaxed),
            journals_free: inner.reaper.free.lock().len(),
            write_error: bg.error.as_ref().map(Error::to_string),
            background_paused: bg.paused.as_ref().map(Error::to_string),
            pinned: inner.pins.count(),
            table_entries: view
                .version
                .levels
                .iter()
                .flatten()
                .map(|f| f.entries)
                .sum(),
            value_segments: view.version.segments.len(),
            value_bytes_live: view.version.value_bytes_live(),
            value_bytes_unsettled: view.version.value_bytes_unsettled(),
            settle_steps: inner.counters.settle_steps.load(Ordering::Relaxed),
            settle_failures: inner.counters.settle_failures.load(Ordering::Relaxed),
        }
    }

    /// An estimate of the bytes the default keyspace's tables hold for
    /// keys in `[start, limit)` (0 if `start >= limit`), as LevelDB
    /// estimates it: for each table overlapping the range, the distance
    /// between the data blocks where `start` and `limit` would be, read
    /// from the table's index (in memory once the table is open).
    /// Memtables (data not yet flushed) and separated values are not
    /// counted. A table that cannot be opened counts in proportion to the
    /// share of its key range the range covers.
    pub fn approximate_size(&self, start: &[u8], limit: &[u8]) -> u64 {
        if start >= limit {
            return 0;
        }
        let view = self.inner().view();
        let mut bytes = 0;
        for f in view.version.levels.iter().flatten() {
            let (lo, hi) = (f.smallest_user(), f.largest_user());
            if f.keyspace != DEFAULT_ID || hi < start || lo >= limit {
                continue;
            }
            bytes += match view.tables.get(f) {
                Ok(t) => t
                    .approximate_offset_of(limit)
                    .saturating_sub(t.approximate_offset_of(start)),
                Err(_) => {
                    let share =
                        crate::version::key_range_share(lo, hi, start.max(lo), limit.min(hi));
                    (f.size as f64 * share) as u64
                }
            };
        }
        bytes
    }

    /// The directory this database lives in.
    pub fn path(&self) -> &Path {
        &self.inner().dir
    }
}

/// Shape and counters of an open database (`Db::stats`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Stats {
    pub tables_per_level: Vec<usize>,
    pub bytes_per_level: Vec<u64>,
    pub memtable_bytes: usize,
    pub sealed_memtables: usize,
    /// Tables whose handles are open, and the bytes of their indexes and
    /// filters (held outside the block cache).
    pub open_tables: usize,
    pub table_memory_bytes: usize,
    /// Bytes of blocks in the block cache.
    pub block_cache_bytes: u64,
    /// Bytes the block cache may hold now: `Options::block_cache_bytes`
    /// and the memtable room lent to it
    /// (`Options::block_cache_borrows_memtable_room`).
    pub block_cache_capacity: u64,
    /// Block cache lookups since open that found their block, and those
    /// that read it from its table (see [`Stats::block_cache_hit_rate`]).
    pub block_cache_hits: u64,
    pub block_cache_misses: u64,
    /// Bytes of the batches committed since open (keys, values and op
    /// headers as a `WriteBatch` encodes them): the user's writes.
    pub user_bytes_written: u64,
    /// Bytes appended to journals and value streams since open.
    pub journal_bytes_written: u64,
    /// Bytes of the tables flushes and compactions wrote since open.
    pub table_bytes_written: u64,
    /// Since the database was created (as its manifest recorded them at
    /// open, plus this handle's): the user's bytes and the bytes written
    /// to disk for them (journals, tables, moved values). Writes a crash
    /// cut off after the last manifest edit are not counted.
    pub lifetime_user_bytes: u64,
    pub lifetime_disk_bytes: u64,
    pub last_seqno: u64,
    pub flushes: u64,
    pub compactions: u64,
    /// Time writers waited for flushes or compactions (hard stops).
    pub stall_micros: u64,
    /// Time writers were delayed by pacing before a stop.
    pub slowdown_micros: u64,
    /// Times a synced commit pre-wrote the journal ahead of itself
    /// (`Options::journal_prewrite`).
    pub journal_prewrites: u64,
    /// Background syncs of a filling journal started since open, so that
    /// sealing it waits only for its last few MiB.
    pub journal_presyncs: u64,
    /// Commit groups that wrote to the journal since open (each one append,
    /// and one fdatasync if a member asked for sync), and the
    /// non-empty batches they held: their ratio is how many writers one
    /// append served.
    pub write_groups: u64,
    pub write_group_batches: u64,
    /// How flushed separated values are read now: `Options::value_reads`,
    /// with `Auto` resolved (`PageCache` or `CachedElseDirect`).
    pub value_reads: crate::ValueReads,
    /// Reads of flushed separated values since open — a value, a run of
    /// neighbouring values or a chunk of a shared scan each counts one —
    /// served from the page cache without waiting (`CachedElseDirect`, or
    /// a memory map's resident pages),
    /// with direct IO, and with buffered IO (values of a journal still
    /// written to included).
    pub value_reads_cached: u64,
    pub value_reads_direct: u64,
    pub value_reads_buffered: u64,
    /// Of `value_reads_cached`, the reads copied out of a memory map of
    /// their file (`Options::map_values`): the page cache asked with
    /// `mincore`, under `PageCache` as under `CachedElseDirect`.
    pub value_reads_mapped: u64,
    /// Reads of `CachedElseDirect` that did not ask the page cache first
    /// (counted in `value_reads_direct` too): asking is thinned while the
    /// page cache keeps missing (read/policy.rs).
    pub value_reads_unasked: u64,
    /// Batches of direct reads handed to the kernel together, in flight
    /// at once, through io_uring (Linux): a scan window or a `multi_get`
    /// of at least 4 device runs, since open. Their reads are also
    /// counted in `value_reads_direct`.
    pub value_read_batches: u64,
    /// Chunks long scans read from segment files since open (shared
    /// scans: a chunk other scanners also needed is counted once).
    pub scan_chunk_reads: u64,
    /// Times a scan waited for a chunk another scan was reading instead
    /// of reading it again.
    pub scan_chunk_waits: u64,
    /// Times a scan waited for slower scans (shared scans): to take a
    /// chunk far ahead of one moving behind it, or before dropping chunks
    /// they had not taken yet.
    pub scan_laggard_waits: u64,
    /// Of `scan_chunk_reads`, the chunks read ahead of the scans that
    /// then took them (or that no scan took).
    pub scan_chunks_read_ahead: u64,
    /// Chunk buffers (`limits::SCAN_CHUNK_BYTES` each) shared scans used
    /// for the first time since open; every other chunk read reused one.
    /// A new buffer's memory is faulted in by its first read.
    pub scan_new_buffers: u64,
    /// Chunks of flushed value streams long scans read whole since open
    /// (each read once for every long scan that needed it while it was
    /// kept), and their bytes: against the streams' bytes, how many times
    /// over scans read them.
    pub scan_stream_chunk_reads: u64,
    pub scan_stream_bytes_read: u64,
    /// Times a long scan waited for a stream chunk being read for another
    /// scan (or read ahead for its own window).
    pub scan_stream_chunk_waits: u64,
    /// Buffers the stream share mapped for its reads since open, none of
    /// its spares fitting; every other stream chunk read reused one. A new
    /// buffer's memory is faulted in (zeroed) by its first read.
    pub scan_stream_new_buffers: u64,
    /// Stream chunks a long scan waited for the scans behind it before
    /// taking, so as not to drop a chunk they still needed, and the
    /// microseconds those waits took (`read/stream_share.rs`).
    pub scan_stream_paced: u64,
    pub scan_stream_paced_micros: u64,
    /// Windows of entries long scans built where other scans at the same
    /// point of the same view could take them, and windows scans took
    /// that another had built (`read/window_share.rs`) since open.
    pub scan_windows_published: u64,
    pub scan_windows_taken: u64,
    /// Separated value bytes compactions moved to values files since
    /// open (value GC and settling).
    pub value_bytes_moved: u64,
    /// Of `value_bytes_moved`, the bytes settling moved out of journals
    /// into key order since open: while idle, in a full compaction, or in
    /// background compactions beside scans (`Options::settle_for_scans`).
    pub value_bytes_settled: u64,
    /// Separated value bytes scans read at random from journals since
    /// open (`Options::settle_for_scans`): values in write order, read in
    /// runs of fewer than four.
    pub value_bytes_scanned_scattered: u64,
    /// Of those, the bytes short scans read (before a scan is marked
    /// long, past its first windows): what pays for settling steps beside
    /// reads (`Options::settle_for_scans`).
    pub value_bytes_scanned_scattered_short: u64,
    /// Journals made from free (recycled) journal files since open
    /// (`Options::journal_recycle`).
    pub journals_recycled: u64,
    /// Free journal files kept for reuse now.
    pub journals_free: usize,
    /// The failure that stopped writes (`Some` once the handle refuses
    /// writes), as text.
    pub write_error: Option<String>,
    /// Why background work is paused (the device was full), if it is.
    pub background_paused: Option<String>,
    /// Seqnos pinned by live snapshots and transactions.
    pub pinned: usize,
    /// Entries (versions and tombstones) in all tables.
    pub table_entries: u64,
    /// Journal segments kept because tables point to separated values in
    /// them, and the bytes of those values still pointed to.
    pub value_segments: usize,
    pub value_bytes_live: u64,
    /// Of `value_bytes_live`, the bytes still in journals, in write order:
    /// what settling (`Options::settle_after_idle`, `Db::compact`) has
    /// yet to move into key order.
    pub value_bytes_unsettled: u64,
    /// Settling steps the background thread started while the database
    /// was idle, since open, and those that failed (a value that could
    /// not be read, a full device): a failed step changes nothing, and
    /// its tables are left unsettled until the database is reopened.
    pub settle_steps: u64,
    pub settle_failures: u64,
}

impl Stats {
    /// Bytes written to disk since open per byte the user wrote: journals
    /// and value streams, tables from flushes and compactions, and values
    /// moved by value GC and settling, over `user_bytes_written`. `None`
    /// before the first write.
    pub fn write_amplification(&self) -> Option<f64> {
        (self.user_bytes_written > 0).then(|| {
            (self.journal_bytes_written + self.table_bytes_written + self.value_bytes_moved) as f64
                / self.user_bytes_written as f64
        })
    }

    /// `write_amplification` since the database was created, or `None`
    /// if nothing was ever written.
    pub fn lifetime_write_amplification(&self) -> Option<f64> {
        (self.lifetime_user_bytes > 0)
            .then(|| self.lifetime_disk_bytes as f64 / self.lifetime_user_bytes as f64)
    }

    /// Share of block cache lookups since open that hit, or `None` before
    /// the first lookup (or without a block cache).
    pub fn block_cache_hit_rate(&self) -> Option<f64> {
        let lookups = self.block_cache_hits + self.block_cache_misses;
        (lookups > 0).then(|| self.block_cache_hits as f64 / lookups as f64)
    }
}

/// A consistent read-only view of the database at one instant. Owned and
/// `Send`: it does not borrow the `Db`. Versions it can see are kept (also
/// through compactions) until it is dropped.
pub struct Snapshot {
    inner: Arc<Inner>,
    pin: crate::txn::registry::Pin,
    seqno: u64,
}

impl Snapshot {
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        check_key(key)?;
        self.inner.view().get(DEFAULT_ID, key, self.seqno)
    }

    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (lo, hi) = (
            owned_bound(range.start_bound()),
            owned_bound(range.end_bound()),
        );
        Iter::new(self.inner.view(), DEFAULT_ID, self.seqno, lo, hi)
    }

    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        Iter::new(self.inner.view(), DEFAULT_ID, self.seqno, lo, hi)
    }

    /// The value of `key` in keyspace `ks` as of this snapshot. Every
    /// keyspace is seen at the snapshot's one instant. A keyspace dropped
    /// since answers `KeyspaceDropped`, here as everywhere.
    pub fn get_in(&self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        check_key(key)?;
        ks.check_owner(&self.inner)?;
        let view = self.inner.view();
        ks.check_in(&view)?;
        view.get(ks.id(), key, self.seqno)
    }

    fn iter_in_bounds(&self, ks: &Keyspace, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Iter {
        let view = self.inner.view();
        let checked = ks
            .check_owner(&self.inner)
            .and_then(|()| ks.check_in(&view));
        let mut it = Iter::new(view, ks.id(), self.seqno, lo, hi);
        if let Err(e) = checked {
            it.refuse(e);
        }
        it
    }

    /// Keys of keyspace `ks` in `range`, as of this snapshot.
    pub fn range_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, ks: &Keyspace, range: R) -> Iter {
        self.iter_in_bounds(
            ks,
            owned_bound(range.start_bound()),
            owned_bound(range.end_bound()),
        )
    }

    /// Every key of keyspace `ks`, as of this snapshot.
    pub fn iter_in(&self, ks: &Keyspace) -> Iter {
        self.iter_in_bounds(ks, Bound::Unbounded, Bound::Unbounded)
    }

    /// Keys of keyspace `ks` starting with `prefix`, as of this snapshot.
    pub fn prefix_in(&self, ks: &Keyspace, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        self.iter_in_bounds(ks, lo, hi)
    }

    /// The seqno this snapshot reads at.
    pub fn seqno(&self) -> u64 {
        self.seqno
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.inner.pins.unpin(&self.pin, self.seqno);
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("seqno", &self.seqno)
            .finish()
    }
}
