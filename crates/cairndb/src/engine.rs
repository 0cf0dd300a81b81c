//! The state shared by a database's threads: one [`Inner`] per open
//! database.
//!
//! [`Inner`] is shared (`Arc`) by user handles, snapshots, iterators and the
//! two background threads (flush and compaction). Locks, in the order they
//! may be taken:
//!
//! 1. `queue` — the group-commit queue (write/).
//! 2. `compaction_lock` — one compaction at a time.
//! 3. `journal` — the open journal; held by the commit leader while it
//!    appends and inserts into the memtable, and while a memtable is sealed,
//!    so a batch is always in the journal of the memtable that holds it.
//! 4. `manifest` — serializes version changes (log, then install).
//! 5. `bg` — background status and the condvar writers stall on; the
//!    background threads check `state` while holding it.
//! 6. the block cache's lending lock (`BlockCache::lend`, from
//!    [`Inner::lend_memtable_room`]) — reads the sealed count from `state`
//!    under it.
//! 7. `state` (RwLock) — the current memtables and version; held briefly,
//!    and nothing else is taken while it is held.
//!
//! `last_seqno` is published by the leader after the memtable insert, so a
//! reader that loads it sees every write up to it.

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::format::table::TableOptions;
use crate::io::{DirLock, Fs};
use crate::memtable::Memtable;
use crate::options::Options;
use crate::read::{ReadView, TableCache, ViewParts};
use crate::version::{Reaper, Version};
use crate::write::Pending;
use crate::write::journal::Journal;
use crate::write::manifest::Manifest;
use crate::write::queue::GroupQueue;
use parking_lot::{Condvar, Mutex, RwLock};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct State {
    pub mem: Arc<Memtable>,
    /// Sealed memtables waiting for flush, oldest first.
    pub sealed: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    /// `compaction::write_pressure` of `version`, computed when it is
    /// installed rather than on every write.
    pub pressure: f64,
    /// Highest seqno any table may hold: tables get seqnos only from
    /// flushes (compaction moves versions, never makes them), so a
    /// snapshot at or above this sees every table version.
    pub table_seqno_max: u64,
    /// What a view of this state shares (`Inner::view`), rebuilt by
    /// `Inner::refresh_view` whenever the fields above it change.
    pub view: Arc<ViewParts>,
}

#[derive(Default)]
pub(crate) struct Bg {
    /// First failure of background work or of a journal/manifest write;
    /// reported to every later write (sticky).
    pub error: Option<Error>,
    /// Set while background work is paused because the device is full
    /// (`Inner::background_failed`); cleared when a retry succeeds.
    pub paused: Option<Error>,
    pub shutdown: bool,
}

/// Counters for tests and tools.
#[derive(Default)]
pub(crate) struct Counters {
    pub flushes: AtomicU64,
    pub compactions: AtomicU64,
    pub stall_micros: AtomicU64,
    pub slowdown_micros: AtomicU64,
    pub prewrites: AtomicU64,
    /// Background syncs of journals started (`write::PRESYNC_BYTES`).
    pub presyncs: AtomicU64,
    pub value_bytes_moved: AtomicU64,
    /// Of `value_bytes_moved`, the bytes moved out of journals by
    /// settling (`Stats::value_bytes_settled`).
    pub value_bytes_settled: AtomicU64,
    /// Settling steps run while idle (`compaction::settle_step`), and
    /// those that failed and were skipped.
    pub settle_steps: AtomicU64,
    pub settle_failures: AtomicU64,
    /// `Db::compact` calls (foreground work a settling step yields to).
    pub compact_calls: AtomicU64,
    /// Bytes appended to journals since open, and (about) the value bytes
    /// appended to their value streams.
    pub journal_bytes: AtomicU64,
    /// Bytes of the batches committed since open (their keys, values
    /// and op headers, as `WriteBatch` encodes them).
    pub user_bytes: AtomicU64,
    /// Bytes of the tables flushes and compactions wrote since open.
    pub table_bytes: AtomicU64,
    /// Groups committed, and the batches in them (`Stats::write_groups`).
    pub groups: AtomicU64,
    pub grouped_batches: AtomicU64,
}

pub(crate) struct Inner {
    pub dir: PathBuf,
    /// The database's identity (manifest tag 9): seeds its journals'
    /// framing and is written into its tables (format.md §Manifest).
    pub db_id: u64,
    pub opts: Options,
    pub fs: Arc<dyn Fs>,
    pub table_opts: TableOptions,
    pub state: RwLock<State>,
    pub queue: GroupQueue<Arc<Pending>, Result<()>>,
    pub journal: Mutex<Journal>,
    pub manifest: Mutex<Manifest>,
    pub compaction_lock: Mutex<()>,
    /// Held while a keyspace is created, changed or dropped: a name gets
    /// one id however many callers create it at once.
    pub keyspace_lock: Mutex<()>,
    pub bg: Mutex<Bg>,
    /// Set once close begins (with `Bg::shutdown`), read without the lock
    /// by long background work that should stop early (settling), and by
    /// every read view: snapshots, iterators and transactions left over
    /// after close get `Error::Closed`.
    pub closing: Arc<std::sync::atomic::AtomicBool>,
    pub bg_cv: Condvar,
    pub last_seqno: AtomicU64,
    pub next_file: AtomicU64,
    /// Seqnos pinned by snapshots and transactions (no global lock).
    pub pins: crate::txn::registry::Registry,
    pub tables: Arc<TableCache>,
    pub reaper: Arc<Reaper>,
    pub counters: Counters,
    /// Bytes written since the database was created, as its manifest said
    /// at open (`Inner::write_totals` adds this handle's).
    pub totals_at_open: crate::format::manifest::WriteTotals,
    /// The directory lock, released by close (`Handle::close`), not when
    /// the last snapshot or iterator lets go of this state.
    pub lock: Mutex<Option<Box<dyn DirLock>>>,
    pub blocks: Option<Arc<BlockCache>>,
    /// Worker threads (`pool.rs`): device reads of scans and value GC,
    /// memtable inserts of synced groups.
    pub workers: Arc<crate::pool::WorkerPool>,
    /// Chunks of flushed segments shared by long scans (`read/share.rs`).
    pub share: Arc<crate::read::share::ChunkShare>,
    /// `Options::value_reads` and counts of how values were read.
    pub policy: Arc<crate::read::policy::ReadPolicy>,
    /// Set by the first `begin`: from then on each group's writes are
    /// recorded in `Journal::recent`. Databases without transactions pay
    /// nothing for the log.
    pub txn_begun: std::sync::atomic::AtomicBool,
    /// Set when the last level-0 merge dropped little (a load of new
    /// keys): level 0 then waits for `l0_compaction_trigger_new_keys`
    /// tables. Not persisted: after open, the first merge decides.
    pub l0_new_keys: std::sync::atomic::AtomicBool,
    /// Segments written past the page cache, to be read into it once
    /// writes pause (`Options::warm_written_values`; `compaction::warm`).
    pub to_warm: Mutex<Vec<u64>>,
}

/// What an open found and made (`recovery::open`): everything the
/// runtime state starts from.
pub(crate) struct Opened {
    pub dir: PathBuf,
    pub db_id: u64,
    pub opts: Options,
    pub table_opts: TableOptions,
    /// The live tables and values files.
    pub version: Version,
    /// The active memtable, empty, on the fresh journal.
    pub mem: Memtable,
    pub journal: Journal,
    pub manifest: Manifest,
    /// The seqno readers start at: the last one recovered.
    pub published_seqno: u64,
    pub next_file: u64,
    pub lock: Box<dyn DirLock>,
    pub tables: Arc<TableCache>,
    pub reaper: Arc<Reaper>,
    pub blocks: Option<Arc<BlockCache>>,
}

impl Inner {
    /// The runtime state of a database just opened.
    pub fn new(o: Opened) -> Inner {
        assert_ne!(o.db_id, 0, "a database identity is never 0");
        let totals_at_open = o.version.totals;
        assert!(
            o.next_file > o.journal.number(),
            "the fresh journal's number was handed out"
        );
        let pressure = crate::compaction::write_pressure(
            &o.version,
            &o.opts,
            crate::compaction::L0Triggers::new(&o.opts, false),
        );
        let (mem, version) = (Arc::new(o.mem), Arc::new(o.version));
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers = Arc::new(crate::pool::WorkerPool::new());
        let share: Arc<crate::read::share::ChunkShare> = Arc::default();
        let policy = Arc::new(
            crate::read::policy::ReadPolicy::new(o.opts.value_reads, o.opts.fs.host())
                .with_maps(o.opts.map_values),
        );
        // Tables hold at most what was recovered, all of it durable.
        let table_seqno_max = o.journal.synced_seqno();
        // As `view_parts` builds it.
        let view = Arc::new(ViewParts {
            mem: mem.clone(),
            sealed: Vec::new(),
            version: version.clone(),
            table_seqno_max,
            tables: o.tables.clone(),
            policy: policy.clone(),
            workers: workers.clone(),
            share: share.clone(),
            closed: closing.clone(),
        });
        let inner = Inner {
            dir: o.dir,
            db_id: o.db_id,
            fs: o.opts.fs.clone(),
            table_opts: o.table_opts,
            state: RwLock::new(State {
                mem,
                sealed: Vec::new(),
                pressure,
                table_seqno_max,
                version,
                view,
            }),
            queue: GroupQueue::new(),
            journal: Mutex::new(o.journal),
            manifest: Mutex::new(o.manifest),
            compaction_lock: Mutex::new(()),
            keyspace_lock: Mutex::new(()),
            closing,
            bg: Mutex::new(Bg::default()),
            bg_cv: Condvar::new(),
            last_seqno: AtomicU64::new(o.published_seqno),
            next_file: AtomicU64::new(o.next_file),
            pins: crate::txn::registry::Registry::new(),
            tables: o.tables,
            reaper: o.reaper,
            counters: Counters::default(),
            totals_at_open,
            lock: Mutex::new(Some(o.lock)),
            blocks: o.blocks,
            workers,
            share,
            policy,
            txn_begun: std::sync::atomic::AtomicBool::new(false),
            l0_new_keys: std::sync::atomic::AtomicBool::new(false),
            to_warm: Mutex::new(Vec::new()),
            opts: o.opts,
        };
        inner.lend_memtable_room();
        inner
    }

    /// Lends the block cache the room of the memtables not sealed now
    /// (`Options::block_cache_borrows_memtable_room`); called whenever a
    /// memtable is sealed or a sealed one flushed. Must not be called with
    /// `state` locked: the cache reads it under its own lock.
    pub fn lend_memtable_room(&self) {
        let Some(blocks) = &self.blocks else {
            return;
        };
        if !self.opts.block_cache_borrows_memtable_room {
            return;
        }
        blocks.lend(|| {
            let sealed = self.state.read().sealed.len();
            let free = self.opts.memtables_sealed_max.saturating_sub(sealed);
            (self.opts.memtable_bytes as u64).saturating_mul(free as u64)
        });
    }

    pub fn view(&self) -> ReadView {
        let s = self.state.read();
        let parts = s.view.clone();
        // Paired with `refresh_view`: every change of these refreshed it.
        assert!(
            Arc::ptr_eq(&parts.mem, &s.mem)
                && Arc::ptr_eq(&parts.version, &s.version)
                && parts.sealed.len() == s.sealed.len()
                && parts.table_seqno_max == s.table_seqno_max,
            "the state changed without refreshing its view"
        );
        drop(s);
        // Outside the state lock: `Auto` may read /proc/meminfo here.
        let reads = self.policy.how(|| parts.version.value_bytes_live());
        ReadView::new(parts, reads)
    }

    /// Rebuilds `s.view` from `s`: after every change of its memtables,
    /// version or `table_seqno_max`, under the same write lock.
    pub(crate) fn refresh_view(&self, s: &mut State) {
        s.view = self.view_parts(s);
    }

    fn view_parts(&self, s: &State) -> Arc<ViewParts> {
        Arc::new(ViewParts {
            mem: s.mem.clone(),
            sealed: s.sealed.clone(),
            version: s.version.clone(),
            table_seqno_max: s.table_seqno_max,
            tables: self.tables.clone(),
            policy: self.policy.clone(),
            workers: self.workers.clone(),
            share: self.share.clone(),
            closed: self.closing.clone(),
        })
    }

    /// A view and a seqno to read it at, for reads without a registered
    /// snapshot. The view is taken first: a compaction that finishes later
    /// cannot have dropped a version this seqno needs from the view's
    /// tables (it only drops versions shadowed at its own, older, oldest
    /// snapshot), and writes newer than the view's memtables all have
    /// higher seqnos than everything in them, so reading at a seqno taken
    /// afterwards still sees one consistent state.
    pub fn view_and_seqno(&self) -> (ReadView, u64) {
        let view = self.view();
        (view, self.last_seqno.load(Ordering::Acquire))
    }

    /// Each keyspace's separation threshold and compression, as of
    /// `version`.
    pub fn separation(&self, version: &Version) -> crate::keyspace::Separation {
        crate::keyspace::Separation::new(self.opts.value_separation_min, version.keyspaces.clone())
            .compressing(self.opts.compression)
    }

    /// How tables of `keyspace` are built, as of `version`, and the size
    /// compaction cuts them at; `None` if the keyspace was dropped.
    pub fn table_opts_for(&self, version: &Version, keyspace: u32) -> Option<(TableOptions, u64)> {
        let opts = crate::keyspace::table_options(&self.table_opts, &version.keyspaces, keyspace)?;
        let bytes = version
            .keyspaces
            .get(keyspace)
            .map_or(self.opts.table_bytes, |k| k.options.table_bytes);
        Some((opts, bytes))
    }

    /// Bytes written since the database was created: those its manifest
    /// recorded at open, plus this handle's.
    pub fn write_totals(&self) -> crate::format::manifest::WriteTotals {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::format::manifest::WriteTotals {
            user: self.totals_at_open.user + load(&c.user_bytes),
            disk: self.totals_at_open.disk
                + load(&c.journal_bytes)
                + load(&c.table_bytes)
                + load(&c.value_bytes_moved),
        }
    }

    pub fn new_file_number(&self) -> u64 {
        self.next_file.fetch_add(1, Ordering::SeqCst)
    }

    /// Records a failure that makes later writes unsafe and wakes waiters.
    pub fn set_bg_error(&self, e: Error) {
        let mut bg = self.bg.lock();
        if bg.error.is_none() {
            bg.error = Some(e);
        }
        self.bg_cv.notify_all();
    }

    /// Handles a failure of background work (a flush or a compaction).
    /// Running out of space while writing tables pauses the work instead
    /// of failing the handle: nothing acknowledged is at risk (the journal
    /// still holds it) and the manifest was not touched, so the work is
    /// retried later; writers that need the room get the error meanwhile.
    /// Returns true if paused. Anything else is sticky.
    pub fn background_failed(&self, e: Error) -> bool {
        let manifest_sound = !self.manifest.lock().poisoned;
        if e.is_no_space() && manifest_sound {
            let mut bg = self.bg.lock();
            bg.paused = Some(e);
            self.bg_cv.notify_all();
            return true;
        }
        self.set_bg_error(e);
        false
    }

    /// Background work succeeded: lifts a pause.
    pub fn background_succeeded(&self) {
        let mut bg = self.bg.lock();
        if bg.paused.take().is_some() {
            self.bg_cv.notify_all();
        }
    }

    pub fn poison(&self, what: &str, e: &std::io::Error) {
        self.set_bg_error(Error::Poisoned(format!("{what} failed: {e}")));
    }

    /// The error for a journal operation that failed; the handle is
    /// poisoned too if the journal is.
    pub fn journal_failed(&self, f: crate::write::journal::Failure) -> Error {
        if f.poisoned {
            self.poison(f.what, &f.error);
        }
        Error::io(f.doing, f.error)
    }

    /// `Ok` if writes may proceed; the stored error or `Closed` otherwise.
    pub fn check_writable(&self) -> Result<()> {
        let bg = self.bg.lock();
        if let Some(e) = &bg.error {
            return Err(e.duplicate());
        }
        if bg.shutdown {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Makes creations, renames and removals in the database directory
    /// durable (skipped only under `Sabotage::skip_dir_sync`).
    pub fn sync_dir(&self) -> std::io::Result<()> {
        if crate::options::sabotaged!(self.opts, skip_dir_sync) {
            return Ok(());
        }
        self.fs.sync_dir(&self.dir)
    }

    pub fn notify_bg(&self) {
        let _bg = self.bg.lock();
        self.bg_cv.notify_all();
    }

    /// Every seqno a snapshot, a transaction or a new reader may read at.
    pub fn read_points(&self) -> crate::txn::registry::ReadPoints {
        self.pins.read_points(&self.last_seqno)
    }

    /// Stops background work and syncs the journal. Returns the journal's
    /// number and length if it was synced whole and nothing failed: what
    /// a clean close records (`log_clean_close`).
    pub(crate) fn shutdown(&self) -> Result<Option<(u64, u64)>> {
        {
            let mut bg = self.bg.lock();
            bg.shutdown = true;
            self.closing.store(true, Ordering::Relaxed);
            self.bg_cv.notify_all();
        }
        // Sync unless the journal itself failed (`Journal::close`); a
        // stored error is then reported, so close does not claim a clean
        // shutdown.
        let end = self.journal.lock().close()?;
        match &self.bg.lock().error {
            Some(e) => Err(e.duplicate()),
            None => Ok(end),
        }
    }
}
