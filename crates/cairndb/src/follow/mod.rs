//! Read-only and follower handles (`Db::open_read_only`,
//! `Db::open_follower`; docs/architecture.md §Followers).
//!
//! A [`ReadOnlyDb`] reads a database without writing a byte: the manifest
//! CURRENT names gives the tables, and the journals at or above its floor
//! are replayed into memtables held in memory only (never flushed, never
//! cut: a torn or damaged record just ends what is read of its journal).
//! Every value read from a journal is copied into the memtable, so the
//! handle never reads a journal again after it moved past it.
//!
//! `catch_up` reads what was written since: the manifest again if CURRENT
//! names another one or it grew (a new version of tables, a new journal
//! floor: memtables of journals below it are dropped, their writes being
//! in tables now), then each journal from where the last read stopped, up
//! to its last intact record. A batch is taken only if its seqnos follow
//! the ones before without a gap; the state published is the version and
//! memtables at one seqno, so readers always see a prefix of the writes.
//!
//! A follower (`Db::open_follower`) registers in the database's reader
//! registry (`registry.rs`) what it still reads, so the writer of another
//! process keeps those files. A read-only handle instead holds the
//! database's `LOCK` shared for its life: it cannot open while a writer
//! has the database, and `Db::open` fails, naming the read-only handles,
//! while it is open.
//!
//! Threads: the handle is `Send + Sync`; `catch_up` calls are serialized
//! by the progress lock, reads take the published state under a short
//! read lock and never wait for a catch-up.

// A follower reads files another process is writing: it may not panic
// on their bytes.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)
)]

pub mod registry;

use crate::cache::BlockCache;
use crate::db::{owned_bound, prefix_bounds};
use crate::error::{Error, Result};
use crate::format::batch as batch_codec;
use crate::format::key::Kind;
use crate::format::log::{self, RecordKind, Tail};
use crate::format::reader::ReaderRecord;
use crate::io::Fs;
use crate::keyspace::{DEFAULT_ID, DEFAULT_NAME, Separation};
use crate::memtable::Memtable;
use crate::options::Options;
use crate::read::iter::Iter;
use crate::read::{ReadView, TableCache};
use crate::recovery::{Recovered, StreamFiles, StreamMiss};
use crate::version::files::{self, FileKind};
use crate::version::{Reaper, Version};
use crate::write::batch::check_key;
use crate::write::{Separate, insert_batch};
use parking_lot::{Mutex, RwLock};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Most times one `catch_up` starts over because the files changed under
/// it (CURRENT named a manifest since replaced, a journal's seqnos did not
/// follow): each retry reads a newer state, which the writer replaces only
/// as often as it rewrites its manifest or rotates its journals.
const RETRIES_MAX: usize = 16;
/// Bytes of a journal read at once while catching up.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// A database opened without the writer's lock: reads only
/// (`Db::open_read_only`, `Db::open_follower`). There are no write
/// methods: a read-only handle cannot write by construction. `Send +
/// Sync`; dropping it stops its timer and, for a follower, removes its
/// reader record.
pub struct ReadOnlyDb {
    shared: Arc<Shared>,
    timer: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

struct Shared {
    dir: PathBuf,
    fs: Arc<dyn Fs>,
    opts: Options,
    tables: Arc<TableCache>,
    reaper: Arc<Reaper>,
    _blocks: Option<Arc<BlockCache>>,
    policy: Arc<crate::read::policy::ReadPolicy>,
    workers: Arc<crate::pool::WorkerPool>,
    share: Arc<crate::read::share::ChunkShare>,
    closing: Arc<AtomicBool>,
    published: RwLock<Published>,
    progress: Mutex<Progress>,
    /// The shared `LOCK` of a read-only handle.
    _lock: Option<Box<dyn crate::io::DirLock>>,
}

/// What readers see: one version and the memtables above it, at one
/// seqno.
#[derive(Clone)]
struct Published {
    version: Arc<Version>,
    /// Memtables of the journals at or above the floor, oldest first.
    mems: Vec<Arc<Memtable>>,
    seqno: u64,
}

/// How far a catch-up has read.
struct Progress {
    /// The manifest read last: its name and the bytes of intact edits.
    manifest: Option<(String, usize)>,
    /// The manifest CURRENT named at the last read, and its length then:
    /// if either differs now, an edit came after that read.
    seen: Option<(String, u64)>,
    rec: Recovered,
    /// `rec.version`, as readers get it.
    version: Arc<Version>,
    journals: Vec<JournalRead>,
    /// Last seqno of the writes read (tables and journals).
    last: u64,
    /// Versions published that readers may still hold: their files stay
    /// in the reader record.
    held: Vec<Weak<Version>>,
    registration: Option<registry::Registration>,
    /// The record last written.
    recorded: Option<ReaderRecord>,
    /// A read-only handle reads the staging ring's tail into the newest
    /// journal (a follower reads only the journal file, where a live
    /// writer's synced writes are).
    staged: bool,
}

struct JournalRead {
    number: u64,
    /// Bytes of intact records read.
    offset: u64,
    mem: Arc<Memtable>,
    /// A later journal was listed when this one was read to its end:
    /// nothing more will be appended to it.
    done: bool,
}

/// What one `catch_up` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CatchUp {
    /// The seqno reads see now, and saw before.
    pub seqno: u64,
    pub seqno_before: u64,
    /// Whether a new version of tables was read from the manifest.
    pub new_version: bool,
}

/// Why a catch-up step starts over.
enum Step {
    Retry(&'static str),
    Fail(Error),
}

impl From<Error> for Step {
    fn from(e: Error) -> Step {
        Step::Fail(e)
    }
}

impl ReadOnlyDb {
    pub(crate) fn open(path: &Path, opts: Options, follower: bool) -> Result<ReadOnlyDb> {
        opts.validate()?;
        let fs = opts.fs.clone();
        let dir = path.to_path_buf();
        if !fs.exists(&files::current(&dir)) {
            return Err(Error::InvalidArgument(format!(
                "no database at {} (a read-only handle creates none)",
                dir.display()
            )));
        }
        let lock = if follower {
            None
        } else {
            Some(
                fs.lock_shared(&dir)
                    .map_err(|e| Error::io(format!("locking {} shared", dir.display()), e))?,
            )
        };
        let registration = if follower {
            Some(registry::Registration::new(&dir).map_err(|e| {
                Error::io(
                    format!("registering in {}", registry::readers_dir(&dir).display()),
                    e,
                )
            })?)
        } else {
            None
        };
        let (tables, reaper, blocks) = crate::recovery::caches(&dir, &opts);
        // This handle never deletes, renames or recycles a file: its
        // versions' obsolete tables are the writer's to remove.
        reaper.closed.store(true, Ordering::Release);
        // No memory maps: the writer reuses and truncates journal files
        // this handle may still read, which a map would answer with
        // SIGBUS where `pread` answers with an error.
        let policy = Arc::new(crate::read::policy::ReadPolicy::new(
            opts.value_reads,
            fs.host(),
        ));
        let shared = Arc::new(Shared {
            dir,
            fs,
            tables,
            reaper,
            _blocks: blocks,
            policy,
            workers: Arc::new(crate::pool::WorkerPool::new()),
            share: Arc::default(),
            closing: Arc::new(AtomicBool::new(false)),
            published: RwLock::new(Published {
                version: Arc::new(Version::default()),
                mems: Vec::new(),
                seqno: 0,
            }),
            progress: Mutex::new(Progress {
                manifest: None,
                seen: None,
                rec: empty_recovered(),
                version: Arc::new(Version::default()),
                journals: Vec::new(),
                last: 0,
                held: Vec::new(),
                registration,
                recorded: None,
                staged: !follower,
            }),
            _lock: lock,
            opts,
        });
        shared.catch_up()?;
        let timer = match (follower, shared.opts.follow_every) {
            (true, Some(every)) => Some(start_timer(&shared, every)?),
            _ => None,
        };
        Ok(ReadOnlyDb { shared, timer })
    }

    /// Reads what the writer wrote since the last catch-up (or open):
    /// manifest edits and journal records up to the last intact one. On
    /// return, reads see a state at least as new as every write that was
    /// in the journal files when the call began: a synced write
    /// acknowledged before the call is seen. Errors: `Io` reading files,
    /// `Corruption` if the files stay inconsistent over `RETRIES_MAX`
    /// fresh reads; the state readers see is then unchanged and a later
    /// call may succeed.
    pub fn catch_up(&self) -> Result<CatchUp> {
        self.shared.catch_up()
    }

    /// The seqno reads see now.
    pub fn seqno(&self) -> u64 {
        self.shared.published.read().seqno
    }

    /// The directory this database lives in.
    pub fn path(&self) -> &Path {
        &self.shared.dir
    }

    /// The value of `key` in the state last caught up with.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.snapshot().get(key)
    }

    /// `Db::multi_get`: the values of `keys` at one instant.
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        let s = self.snapshot();
        crate::db::multi_get(&s.view, DEFAULT_ID, s.seqno, keys)
    }

    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.snapshot().range(range)
    }

    pub fn iter(&self) -> Iter {
        self.snapshot().iter()
    }

    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        self.snapshot().prefix(prefix)
    }

    /// The value of `key` in the keyspace named `keyspace`
    /// (`InvalidArgument` if there is none).
    pub fn get_in(&self, keyspace: &str, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.snapshot().get_in(keyspace, key)
    }

    pub fn range_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, keyspace: &str, range: R) -> Iter {
        self.snapshot().range_in(keyspace, range)
    }

    pub fn prefix_in(&self, keyspace: &str, prefix: impl AsRef<[u8]>) -> Iter {
        self.snapshot().prefix_in(keyspace, prefix)
    }

    /// Names of the keyspaces, the default one first.
    pub fn keyspaces(&self) -> Vec<String> {
        let version = self.shared.published.read().version.clone();
        let mut names = vec![DEFAULT_NAME.to_string()];
        names.extend(version.keyspaces.iter().map(|k| k.name.clone()));
        names
    }

    /// The state last caught up with, kept as it is (later catch-ups do
    /// not change it) until dropped.
    pub fn snapshot(&self) -> ReadOnlySnapshot {
        let p = self.shared.published.read().clone();
        ReadOnlySnapshot {
            view: self.shared.view(&p),
            version: p.version,
            seqno: p.seqno,
        }
    }
}

impl Drop for ReadOnlyDb {
    fn drop(&mut self) {
        if let Some((stop, thread)) = self.timer.take() {
            drop(stop);
            let _ = thread.join();
        }
        self.shared.closing.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for ReadOnlyDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyDb")
            .field("dir", &self.shared.dir)
            .field("seqno", &self.seqno())
            .finish()
    }
}

fn start_timer(
    shared: &Arc<Shared>,
    every: Duration,
) -> Result<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let weak = Arc::downgrade(shared);
    let thread = std::thread::Builder::new()
        .name("cairndb-follow".into())
        .spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every)
            {
                let Some(shared) = weak.upgrade() else { return };
                // A failed catch-up changes nothing; the next tick retries
                // and a caller's own `catch_up` reports the error.
                let _ = shared.catch_up();
            }
        })
        .map_err(|e| Error::io("starting the follow thread", e))?;
    Ok((stop, thread))
}

/// A fixed state of a [`ReadOnlyDb`]: reads at one seqno.
pub struct ReadOnlySnapshot {
    view: ReadView,
    version: Arc<Version>,
    seqno: u64,
}

impl ReadOnlySnapshot {
    pub fn seqno(&self) -> u64 {
        self.seqno
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        check_key(key)?;
        self.view.get(DEFAULT_ID, key, self.seqno)
    }

    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (lo, hi) = (
            owned_bound(range.start_bound()),
            owned_bound(range.end_bound()),
        );
        Iter::new(self.view.clone(), DEFAULT_ID, self.seqno, lo, hi)
    }

    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        Iter::new(self.view.clone(), DEFAULT_ID, self.seqno, lo, hi)
    }

    fn keyspace_id(&self, name: &str) -> Result<u32> {
        if name == DEFAULT_NAME {
            return Ok(DEFAULT_ID);
        }
        self.version
            .keyspaces
            .named(name)
            .map(|k| k.id)
            .ok_or_else(|| Error::InvalidArgument(format!("no keyspace named {name:?}")))
    }

    pub fn get_in(&self, keyspace: &str, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        check_key(key)?;
        self.view.get(self.keyspace_id(keyspace)?, key, self.seqno)
    }

    fn iter_in_bounds(&self, keyspace: &str, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>) -> Iter {
        match self.keyspace_id(keyspace) {
            Ok(id) => Iter::new(self.view.clone(), id, self.seqno, lo, hi),
            Err(e) => {
                let mut it = Iter::new(self.view.clone(), DEFAULT_ID, self.seqno, lo, hi);
                it.refuse(e);
                it
            }
        }
    }

    pub fn range_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, keyspace: &str, range: R) -> Iter {
        self.iter_in_bounds(
            keyspace,
            owned_bound(range.start_bound()),
            owned_bound(range.end_bound()),
        )
    }

    pub fn prefix_in(&self, keyspace: &str, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = prefix_bounds(prefix.as_ref());
        self.iter_in_bounds(keyspace, lo, hi)
    }
}

fn empty_recovered() -> Recovered {
    Recovered {
        next_file: 0,
        ..Recovered::new_database()
    }
}

impl Shared {
    fn view(&self, p: &Published) -> ReadView {
        let mut sealed = p.mems.clone();
        let mem = sealed.pop().unwrap_or_else(|| Arc::new(Memtable::new(0)));
        let version = p.version.clone();
        let reads = self.policy.how(|| version.value_bytes_live());
        let parts = crate::read::ViewParts {
            mem,
            sealed,
            version,
            // Never skip tables: the manifest's seqno bounds them, but
            // one seqno less to trust costs nothing here.
            table_seqno_max: crate::limits::SEQNO_MAX,
            tables: self.tables.clone(),
            policy: self.policy.clone(),
            workers: self.workers.clone(),
            share: self.share.clone(),
            closed: self.closing.clone(),
        };
        ReadView::new(Arc::new(parts), reads)
    }

    fn catch_up(&self) -> Result<CatchUp> {
        let mut p = self.progress.lock();
        let before = self.published.read().seqno;
        let mut why = "";
        for _ in 0..RETRIES_MAX {
            match self.step(&mut p) {
                Ok(new_version) => {
                    // The record covers what is about to be published
                    // before any reader can use it. An edit logged after
                    // the manifest read may have removed a file it names
                    // that the record did not cover until now (a file
                    // numbered before the last counter read, added by a
                    // later edit), and its writer may have deleted it: if
                    // the manifest moved, read on from where this read
                    // stopped (the new edits, then the journals past what
                    // was read) and record again. An edit logged after
                    // this check comes before a deletion that sees the
                    // record. Reading on, not from the start, keeps each
                    // retry as short as the edits it missed, so a writer
                    // that edits its manifest often cannot outrun it.
                    if p.registration.is_some() {
                        let v = Arc::downgrade(&p.version);
                        if !p.held.iter().any(|w| w.ptr_eq(&v)) {
                            p.held.push(v);
                        }
                        self.record(&mut p)?;
                        if self.manifest_moved(&p) {
                            why = "the manifest grew while the record was written";
                            continue;
                        }
                    }
                    let seqno = self.publish(&mut p);
                    self.record(&mut p)?;
                    return Ok(CatchUp {
                        seqno,
                        seqno_before: before,
                        new_version,
                    });
                }
                Err(Step::Retry(w)) => {
                    // Start over from the manifest: what was read of the
                    // journals may belong to files replaced meanwhile.
                    why = w;
                    p.manifest = None;
                    p.seen = None;
                    p.journals.clear();
                    p.last = 0;
                }
                Err(Step::Fail(e)) => return Err(e),
            }
        }
        Err(Error::corruption(
            &self.dir,
            0,
            format!("the database stayed inconsistent over {RETRIES_MAX} reads: {why}"),
        ))
    }

    /// Installs what `p` read for readers, unless it is older than what
    /// they see (after a restart from the manifest that has not yet read
    /// as far): the seqno readers see never goes back.
    fn publish(&self, p: &mut Progress) -> u64 {
        let mut published = self.published.write();
        if p.last < published.seqno {
            return published.seqno;
        }
        let version = p.version.clone();
        *published = Published {
            version: version.clone(),
            mems: p.journals.iter().map(|j| j.mem.clone()).collect(),
            seqno: p.last,
        };
        p.held.retain(|w| w.strong_count() > 0);
        if !p.held.iter().any(|w| w.as_ptr() == Arc::as_ptr(&version)) {
            p.held.push(Arc::downgrade(&version));
        }
        p.last
    }

    /// Rewrites the follower's reader record to what it holds now: the
    /// files of every version a reader may still use, journals from the
    /// floor on, and files newer than the manifest read (which a newer
    /// manifest may name).
    fn record(&self, p: &mut Progress) -> Result<()> {
        if p.registration.is_none() {
            return Ok(());
        }
        p.held.retain(|w| w.strong_count() > 0);
        let mut numbers: Vec<u64> = p
            .held
            .iter()
            .filter_map(Weak::upgrade)
            .flat_map(|v| {
                v.numbers()
                    .chain(v.segments.keys().copied())
                    .collect::<Vec<u64>>()
            })
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        let record = ReaderRecord {
            journal_floor: p.rec.journal_floor,
            newer_from: p.rec.next_file,
            numbers,
        };
        self.write_record(p, record)
    }

    fn write_record(&self, p: &mut Progress, record: ReaderRecord) -> Result<()> {
        if p.recorded.as_ref() == Some(&record) {
            return Ok(());
        }
        if let Some(reg) = p.registration.as_mut() {
            reg.update(&record)
                .map_err(|e| Error::io("writing the reader record", e))?;
        }
        p.recorded = Some(record);
        Ok(())
    }

    /// One attempt: the manifest, then the journals. Returns whether a
    /// new version was read.
    fn step(&self, p: &mut Progress) -> std::result::Result<bool, Step> {
        // Before reading the manifest, hold everything it may name that
        // the record does not cover yet: files numbered from the last
        // manifest's counter on (all files, on the first read).
        if p.registration.is_some() {
            let mut widened = p.recorded.clone().unwrap_or_default();
            widened.newer_from = widened.newer_from.min(p.rec.next_file);
            if p.manifest.is_none() {
                widened.newer_from = 0;
                widened.journal_floor = 0;
            }
            self.write_record(p, widened)?;
        }
        let new_version = self.read_manifest(p)?;
        self.read_journals(p)?;
        Ok(new_version)
    }

    /// True if CURRENT names another manifest than at the last read, or
    /// that manifest's length changed (or either cannot be read).
    fn manifest_moved(&self, p: &Progress) -> bool {
        let (fs, dir) = (&*self.fs, &self.dir);
        let Some((seen, len)) = &p.seen else {
            return true;
        };
        let Ok(text) = crate::io::read_all(fs, &files::current(dir)) else {
            return true;
        };
        if files::parse_current(&text) != Some(seen.as_str()) {
            return true;
        }
        fs.open(&dir.join(seen)).map_or(true, |f| f.len() != *len)
    }

    /// Reads the manifest CURRENT names if it is not the one read last
    /// or grew; returns whether it was read.
    fn read_manifest(&self, p: &mut Progress) -> std::result::Result<bool, Step> {
        let (fs, dir) = (&*self.fs, &self.dir);
        let current = files::current(dir);
        let text =
            crate::io::read_all(fs, &current).map_err(|e| Error::io("reading CURRENT", e))?;
        let Some(name) = files::parse_current(&text) else {
            // CURRENT is replaced by a rename, never rewritten in place.
            return Err(Step::Fail(Error::corruption(
                &current,
                0,
                "CURRENT does not name a manifest (or its checksum does not match)",
            )));
        };
        let path = dir.join(name);
        // The manifest read last, grown: only its new edits are read, and
        // replayed onto the state it gave. Another manifest: read whole.
        let (base, from) = match &p.manifest {
            Some((seen, len)) if seen == name => (Some(p.rec.clone()), *len),
            _ => (None, 0),
        };
        let ctx = |e| Error::io(format!("reading manifest {}", path.display()), e);
        let file = match fs.open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Step::Retry("CURRENT named a manifest since replaced"));
            }
            Err(e) => return Err(Step::Fail(ctx(e))),
        };
        p.seen = Some((name.to_string(), file.len()));
        let len = usize::try_from(file.len()).unwrap_or(usize::MAX);
        if len < from {
            return Err(Step::Retry("the manifest is shorter than read before"));
        }
        let mut data = vec![0u8; len - from];
        file.read_exact_at(&mut data, from as u64).map_err(ctx)?;
        // The writer appends edits as this reads: an edit cut short is one
        // not yet wholly written, read next time.
        let scan = log::scan(&data, crate::recovery::manifest_continues);
        let intact = match scan.tail {
            Tail::Clean => data.len(),
            Tail::Torn { offset } => offset as usize,
            // A read racing an append may copy a later page before an
            // earlier one was written: read again (damage that stays is
            // `Corruption` after `RETRIES_MAX` reads).
            Tail::Damaged { .. } => {
                return Err(Step::Retry("damaged manifest record"));
            }
        };
        if scan.records.is_empty() {
            if base.is_some() {
                return Ok(false);
            }
            return Err(Step::Retry("the manifest holds no intact edit yet"));
        }
        let whole = base.is_none();
        let mut rec = base.unwrap_or_else(Recovered::before_manifest);
        for (i, (offset, kind, payload)) in scan.records.iter().enumerate() {
            let at = from as u64 + offset;
            let bad = |d: String| Step::Fail(Error::corruption(&path, at, d));
            if *kind != RecordKind::Edit {
                return Err(bad("manifest holds a non-edit record".into()));
            }
            let edit = crate::format::manifest::Edit::decode(payload).map_err(bad)?;
            rec.replay(whole && i == 0, &edit, &self.reaper)
                .map_err(bad)?;
        }
        rec.version
            .check()
            .map_err(|d| Error::corruption(&path, 0, d))?;
        if let Some(id) = rec.db_id {
            self.tables.set_db_id(id);
        }
        // Journals below the new floor are in its tables now.
        let floor = rec.journal_floor;
        p.journals.retain(|j| j.number >= floor);
        match p.journals.first() {
            None => {
                if p.last > rec.last_seqno {
                    return Err(Step::Retry("the manifest is older than the journals read"));
                }
                p.last = rec.last_seqno;
            }
            Some(j) if j.number != floor => {
                return Err(Step::Retry("the floor journal was not read"));
            }
            Some(_) => {}
        }
        p.version = Arc::new(rec.version.clone());
        p.rec = rec;
        p.manifest = Some((name.to_string(), from + intact));
        Ok(true)
    }

    /// Reads each journal at or above the floor from where the last read
    /// stopped.
    fn read_journals(&self, p: &mut Progress) -> std::result::Result<(), Step> {
        let (fs, dir) = (&*self.fs, &self.dir);
        let names = fs
            .list(dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let mut listed: Vec<u64> = names
            .iter()
            .filter_map(|n| match files::parse(n) {
                FileKind::Journal(n) if n >= p.rec.journal_floor => Some(n),
                _ => None,
            })
            .collect();
        listed.sort_unstable();
        if p.rec.journal_floor > 0 && listed.first() != Some(&p.rec.journal_floor) {
            return Err(Step::Retry("the floor journal is missing"));
        }
        let separation = Separation::new(
            self.opts.value_separation_min,
            p.rec.version.keyspaces.clone(),
        );
        let mut streams = StreamFiles::default();
        for (i, &number) in listed.iter().enumerate() {
            let later = i + 1 < listed.len();
            let at = match p.journals.iter().position(|j| j.number == number) {
                Some(at) => at,
                None => {
                    if p.journals.last().is_some_and(|j| j.number > number) {
                        return Err(Step::Retry("a journal appeared below one read"));
                    }
                    p.journals.push(JournalRead {
                        number,
                        offset: 0,
                        mem: Arc::new(Memtable::new(number)),
                        done: false,
                    });
                    p.journals.len() - 1
                }
            };
            let Some(j) = p.journals.get_mut(at) else {
                unreachable!("position was just found or pushed");
            };
            if j.done {
                continue;
            }
            let staged = p.staged && !later;
            let whole = read_journal(
                fs,
                dir,
                &p.rec,
                j,
                &mut p.last,
                &separation,
                &mut streams,
                staged,
            )?;
            if later && whole {
                // Sealed before the listing: read to its end.
                j.done = true;
            } else if !whole {
                break;
            }
        }
        Ok(())
    }
}

/// Reads journal `j` from its offset to its last intact record,
/// inserting each batch that follows `last` into its memtable. Returns
/// false if it stopped early, at a record whose separated values are not
/// all in their value streams yet.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site, all parts of one read"
)]
fn read_journal(
    fs: &dyn Fs,
    dir: &Path,
    rec: &Recovered,
    j: &mut JournalRead,
    last: &mut u64,
    separation: &Separation,
    streams: &mut StreamFiles,
    staged: bool,
) -> std::result::Result<bool, Step> {
    let path = files::journal(dir, j.number);
    let framing = rec.framing(j.number);
    let ctx = |e| Error::io(format!("reading journal {}", path.display()), e);
    let file = match fs.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Step::Retry("a journal was removed while read"));
        }
        Err(e) => return Err(Step::Fail(ctx(e))),
    };
    let rule = Separate {
        rule: separation.clone(),
        segment: j.number,
    };
    let staged = staged && j.offset == 0;
    let mut chunk = READ_CHUNK_BYTES;
    loop {
        let data = if staged {
            // A read-only handle of a database whose writer was killed:
            // the newest journal's last records may be in the ring only.
            let whole = crate::io::read_all(fs, &path).map_err(ctx)?;
            crate::recovery::with_staged_tail(fs, dir, j.number, framing, whole, *last)?
        } else {
            let want = file.len().saturating_sub(j.offset).min(chunk as u64) as usize;
            let mut buf = vec![0u8; want];
            let got = file.read_at(&mut buf, j.offset).map_err(ctx)?;
            buf.truncate(got);
            buf
        };
        // No continuation rule: the first record that is not intact (a
        // record being appended, pre-written zeros, a recycled file's old
        // bytes seeded with another number) ends what is read.
        let scan = log::scan_framed(&data, framing, |_, _, _| false);
        let mut consumed = 0usize;
        for &(offset, kind, raw) in &scan.records {
            let bad = |d: String| Step::Fail(Error::corruption(&path, j.offset + offset, d));
            let Some((_, payload)) = batch_codec::split_journal_record(kind, raw) else {
                return Err(bad("journal holds a non-batch record".into()));
            };
            let batch = batch_codec::decode(payload).map_err(bad)?;
            if batch.ops.is_empty() || Some(batch.first_seqno) != last.checked_add(1) {
                return Err(Step::Retry(
                    "a journal batch does not follow the one before",
                ));
            }
            let inlined;
            let payload = if batch.ops.iter().any(|op| op.kind == Kind::Pointer) {
                match streams.inline(fs, dir, &batch) {
                    Ok(rep) => {
                        inlined = rep;
                        &inlined[..]
                    }
                    // Its values are not all in their streams yet: read
                    // it next time.
                    Err(StreamMiss::Absent(_)) => {
                        j.offset += consumed as u64;
                        return Ok(false);
                    }
                    Err(StreamMiss::Io(e)) => return Err(Step::Fail(e)),
                }
            } else {
                payload
            };
            let next = insert_batch(
                &mut j.mem.writer(),
                payload,
                batch.first_seqno,
                &rule,
                None,
                None,
            )
            .map_err(bad)?;
            *last = next - 1;
            let Some(at) = log::offset_in(&data, raw) else {
                unreachable!("a record's payload is a slice of what was read");
            };
            consumed = at as usize + raw.len();
        }
        j.offset += consumed as u64;
        if staged {
            return Ok(true);
        }
        if consumed == 0 {
            // The record at the offset is not intact in what was read: it
            // may be longer than a chunk (read it whole), else it is not
            // wholly written yet.
            match data
                .get(..log::HEADER_LEN)
                .and_then(|h| log::record_len(h, framing))
            {
                Some(len) if len > data.len() && j.offset + len as u64 <= file.len() => {
                    chunk = len;
                    continue;
                }
                _ => return Ok(true),
            }
        }
        chunk = READ_CHUNK_BYTES;
        if consumed == data.len() && data.len() < READ_CHUNK_BYTES {
            return Ok(true);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::batch::{encode_journal_record_at, new_payload, push_op};

    /// Journal `seed`'s records of one put each, seqnos from `first`.
    fn records(seed: u64, first: u64, values: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let mut rep = new_payload();
            push_op(&mut rep, DEFAULT_ID, Kind::Put, b"k", v);
            crate::format::batch::set_count(&mut rep, 1);
            encode_journal_record_at(&mut out, seed, 0, first + i as u64, &rep);
        }
        out
    }

    fn read(
        fs: &dyn Fs,
        dir: &Path,
        rec: &Recovered,
        j: &mut JournalRead,
        last: &mut u64,
    ) -> std::result::Result<bool, Step> {
        let sep = Separation::new(usize::MAX, rec.version.keyspaces.clone());
        read_journal(
            fs,
            dir,
            rec,
            j,
            last,
            &sep,
            &mut StreamFiles::default(),
            false,
        )
    }

    /// A recycled journal file is overwritten in place with records of
    /// its new number: a follower still reading it under the old number
    /// (a handle opened before the rename) finds no intact record in the
    /// new bytes, from the start or from where it had stopped, because
    /// the header checksums are seeded with the journal's number (and the
    /// database's identity); it reads on only once the old bytes are back
    /// (never: a follower's registry record keeps the writer from
    /// recycling a journal it reads).
    #[test]
    fn recycled_bytes_never_read_as_old_records() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let fs: Arc<dyn Fs> = Arc::new(crate::io::PosixFs);
        let mut rec = empty_recovered();
        rec.db_id = Some(0x5eed);
        let (old, new) = (7u64, 9u64);
        let seed = |n| log::journal_seed(n, 0x5eed);
        let path = files::journal(dir, old);
        let first = records(seed(old), 1, &[b"one", b"two"]);
        std::fs::write(&path, &first).unwrap();
        let mut j = JournalRead {
            number: old,
            offset: 0,
            mem: Arc::new(Memtable::new(old)),
            done: false,
        };
        let mut last = 0;
        match read(&*fs, dir, &rec, &mut j, &mut last) {
            Ok(_) => {}
            Err(Step::Retry(w)) => panic!("retry: {w}"),
            Err(Step::Fail(e)) => panic!("{e}"),
        }
        assert_eq!((last, j.offset), (2, first.len() as u64));
        // Recycled as journal 9: new records from offset 0, longer than
        // the old ones, with seqnos that would follow.
        let recycled = records(
            seed(new),
            3,
            &[b"three-is-longer", b"four", b"five", b"six"],
        );
        std::fs::write(&path, &recycled).unwrap();
        assert!(read(&*fs, dir, &rec, &mut j, &mut last).is_ok());
        assert_eq!(
            (last, j.offset),
            (2, first.len() as u64),
            "read new bytes as old records"
        );
        let mut fresh = JournalRead {
            number: old,
            offset: 0,
            mem: Arc::new(Memtable::new(old)),
            done: false,
        };
        let mut fresh_last = 2;
        assert!(read(&*fs, dir, &rec, &mut fresh, &mut fresh_last).is_ok());
        assert_eq!((fresh_last, fresh.offset), (2, 0));
        // Read under its new number, they are all there.
        std::fs::write(files::journal(dir, new), &recycled).unwrap();
        let mut j9 = JournalRead {
            number: new,
            offset: 0,
            mem: Arc::new(Memtable::new(new)),
            done: false,
        };
        let mut last9 = 2;
        assert!(read(&*fs, dir, &rec, &mut j9, &mut last9).is_ok());
        assert_eq!(last9, 6);
        // Records of the same number whose seqnos do not follow (old
        // bytes behind a shorter rewrite) make the catch-up start over.
        let mut gap = JournalRead {
            number: new,
            offset: 0,
            mem: Arc::new(Memtable::new(new)),
            done: false,
        };
        let mut gap_last = 5;
        assert!(matches!(
            read(&*fs, dir, &rec, &mut gap, &mut gap_last),
            Err(Step::Retry(_))
        ));
    }
}
