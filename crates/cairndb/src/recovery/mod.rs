//! Opening a database: lock, manifest replay, journal replay, clean-up.
//!
//! `open` in steps:
//! 1. create the directory if allowed, take the lock;
//! 2. read CURRENT and replay its manifest into a version (a torn last edit
//!    was never acknowledged and is ignored; damage before an intact edit
//!    is `Corruption`);
//! 3. replay every journal at or above the manifest's journal floor, in
//!    order, into a memtable, flushing it to a level-0 table whenever it
//!    fills, so replay needs at most one memtable of memory;
//! 4. flush what remains, start a new journal, and write a fresh manifest
//!    describing the whole version (this also keeps the manifest short);
//! 5. delete files no longer referenced: old journals and manifests,
//!    tables left by an interrupted flush or compaction, temporary files.
//!
//! Torn-tail policy (docs/durability.md): a journal is synced before the
//! next one is started, so only the last journal holding writes may end in
//! a torn record (later journals may exist, created empty just before a
//! crash). Its first bad record ends the log: unsynced pages may reach the
//! device in any order, so intact records after it are unsynced writes
//! that are dropped with it — unless one of them carries a durability
//! mark above the seqnos before the damage, which proves the damaged
//! records were synced: that, and any bad record in an earlier journal, is
//! `Corruption`.

// Recovery reads untrusted files: it may not panic on their bytes.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)
)]

use crate::cache::BlockCache;
use crate::engine::Opened;
use crate::error::{Error, Result};
use crate::format::batch as batch_codec;
use crate::format::key::Kind;
use crate::format::log::{self, Framing, RecordKind, Tail};
use crate::format::manifest::{
    Edit, MANIFEST_FORMAT, MANIFEST_FORMAT_IDENTIFIED, MANIFEST_FORMAT_MIN,
    MANIFEST_FORMAT_NUMBERED_JOURNALS,
};
use crate::format::stage as stage_format;
use crate::format::table::TableOptions;
use crate::format::vptr::ValuePtr;
use crate::io::{self, Fs};
use crate::keyspace::Separation;
use crate::limits::SEQNO_MAX;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::read::TableCache;
use crate::version::files::{self, FileKind};
use crate::version::segments::SegmentFile;
use crate::version::{Reaper, Version};
use crate::write::journal::Journal;
use crate::write::manifest::{ManifestStart, write_manifest};
use crate::write::{Separate, insert_batch};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub(crate) mod repair;

/// Largest file number the engine hands out (2^48 - 1: a million new files
/// a second for eight years).
const FILE_NUMBER_MAX: u64 = (1 << 48) - 1;

/// What the manifest says.
#[derive(Clone)]
pub(crate) struct Recovered {
    pub(crate) version: Version,
    pub(crate) journal_floor: u64,
    pub(crate) next_file: u64,
    pub(crate) last_seqno: u64,
    /// Format of the manifest file read (`MANIFEST_FORMAT` for a new
    /// database): decides the framing of the journals replayed.
    pub(crate) format: u64,
    /// The identity the manifest names (format 4), `None` before.
    pub(crate) db_id: Option<u64>,
    /// Set if the manifest's last edit is a clean close (tag 10).
    pub(crate) clean_close: Option<(u64, u64)>,
}

impl Recovered {
    /// What a new database starts from: no table, no write, this build's
    /// manifest format.
    pub(crate) fn new_database() -> Recovered {
        Recovered {
            version: Version::default(),
            journal_floor: 0,
            next_file: 1,
            last_seqno: 0,
            format: MANIFEST_FORMAT,
            db_id: None,
            clean_close: None,
        }
    }

    /// What a manifest's edits are replayed onto: a new database whose
    /// format the first edit names.
    pub(crate) fn before_manifest() -> Recovered {
        Recovered {
            format: 0,
            ..Recovered::new_database()
        }
    }

    /// How the records of journal `number` (at or above the floor) are
    /// framed: journals a format-3 manifest's floor covers were written by
    /// a build that numbers its records.
    pub(crate) fn framing(&self, number: u64) -> Framing {
        if self.format >= MANIFEST_FORMAT_NUMBERED_JOURNALS {
            Framing::Numbered(log::journal_seed(number, self.db_id.unwrap_or(0)))
        } else {
            Framing::Plain
        }
    }
}

pub(crate) fn open(dir: &Path, opts: Options) -> Result<Opened> {
    opts.validate()?;
    let listing = Listing::take(dir, &opts)?;
    let mut written = Written::new(&*opts.fs, &listing.dir, &listing.names);
    let (tables, reaper, blocks) = caches(&listing.dir, &opts);
    let mut rec = read_or_create_manifest(&listing, &opts, &reaper)?;
    // A database read from a manifest before format 4 gets its identity
    // now; the manifest this open writes records it.
    let db_id = rec.db_id.unwrap_or_else(|| opts.fs.new_db_id());
    tables.set_db_id(db_id);
    let table_opts = TableOptions {
        block_size: opts.block_bytes,
        restart_interval: opts.block_restart_interval,
        filter: opts.filter,
        filter_bits: opts.filter_bits,
        compression: opts.compression,
        db_id,
        keyspace: None,
    };
    let next_file = AtomicU64::new(listing.next_file(&rec)?);
    let new_number = || next_file.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let manifest_seqno = rec.last_seqno;
    replay_journals(&listing, &opts, &table_opts, &reaper, &mut rec, &new_number)?;
    check_comparator(&mut rec, &opts)?;
    listing.keep_free_journals(&reaper);

    let (journal_number, journal_file) = fresh_journal(&listing.dir, &reaper, &new_number)?;
    let manifest_number = new_number();
    let manifest = write_manifest(
        &*opts.fs,
        &listing.dir,
        manifest_number,
        &rec.version,
        &ManifestStart {
            db_id,
            journal_floor: journal_number,
            next_file: next_file.load(std::sync::atomic::Ordering::SeqCst),
            last_seqno: rec.last_seqno,
        },
    )?;
    written.keep();
    drop(written);
    listing.remove_garbage(
        &rec.version,
        journal_number,
        manifest_number,
        &opts,
        &reaper,
    );
    // The new journal's value streams: one, until its keys show where to
    // cut the next (`Streams::cut_due`).
    let streams = (opts.value_partitions > 0).then(|| {
        let first = new_number();
        Arc::new(crate::version::streams::Streams::new(
            &reaper,
            journal_number,
            first,
            Vec::new(),
            opts.value_partitions,
            crate::version::streams::stage_new_streams(
                &opts,
                rec.version.value_bytes_live(),
                opts.fs.host().mem_available(),
            ),
        ))
    });
    let mem = Memtable::with_segment(
        SegmentFile::new_journal(&reaper, journal_number, journal_file.reader()),
        streams.clone(),
    );
    let published_seqno = if crate::options::sabotaged!(opts, stale_seqno_after_open) {
        manifest_seqno
    } else {
        rec.last_seqno
    };
    Ok(Opened {
        dir: listing.dir,
        db_id,
        table_opts,
        version: rec.version,
        mem,
        journal: Journal::new(journal_file, journal_number, rec.last_seqno, streams),
        manifest,
        published_seqno,
        next_file: next_file.into_inner(),
        lock: listing.lock,
        tables,
        reaper,
        blocks,
        opts,
    })
}

/// `Options::comparator_name` against the name the database was created
/// under (a database without one is `BYTEWISE_COMPARATOR`): another name
/// is refused, as LevelDB refuses it. A database with no write yet takes
/// the name given; the manifest this open writes records it.
fn check_comparator(rec: &mut Recovered, opts: &Options) -> Result<()> {
    let Some(given) = opts.comparator_name.as_deref() else {
        return Ok(());
    };
    let empty = rec.last_seqno == 0 && rec.version.levels.iter().all(Vec::is_empty);
    match rec.version.comparator.as_deref() {
        Some(recorded) if recorded == given => Ok(()),
        None if empty => {
            if given != crate::options::BYTEWISE_COMPARATOR {
                rec.version.comparator = Some(Arc::from(given));
            }
            Ok(())
        }
        None if given == crate::options::BYTEWISE_COMPARATOR => Ok(()),
        recorded => Err(Error::InvalidArgument(format!(
            "comparator {given:?} does not match the database's comparator {:?}",
            recorded.unwrap_or(crate::options::BYTEWISE_COMPARATOR)
        ))),
    }
}

/// A fresh journal for the open's writes (from a free file if one is
/// kept), numbered by `new_number`: the floor of the manifest written
/// next.
fn fresh_journal(
    dir: &Path,
    reaper: &Arc<Reaper>,
    new_number: &dyn Fn() -> u64,
) -> Result<(u64, Box<dyn crate::io::FileWrite>)> {
    let number = new_number();
    let file = reaper.new_journal(number).map_err(|e| {
        let path = files::journal(dir, number);
        Error::io(format!("creating {}", path.display()), e)
    })?;
    Ok((number, file))
}

/// The database directory as an open found it: locked, and its files
/// listed (before the open wrote any).
struct Listing {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    lock: Box<dyn crate::io::DirLock>,
    names: Vec<String>,
    kinds: Vec<FileKind>,
}

impl Listing {
    /// Creates the directory if allowed, takes its lock and lists it.
    fn take(dir: &Path, opts: &Options) -> Result<Listing> {
        let fs = opts.fs.clone();
        let dir = dir.to_path_buf();
        if !fs.exists(&dir) && !opts.create_if_missing {
            return Err(Error::InvalidArgument(format!(
                "{} does not exist and create_if_missing is false",
                dir.display()
            )));
        }
        fs.create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let lock = fs
            .lock(&dir)
            .map_err(|e| Error::io(format!("locking {}", dir.display()), e))?;
        let names = fs
            .list(&dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let kinds = names.iter().map(|n| files::parse(n)).collect();
        Ok(Listing {
            fs,
            dir,
            lock,
            names,
            kinds,
        })
    }

    /// The first file number free for this open: past the manifest's
    /// counter and every number in the directory. The engine never gets
    /// near `FILE_NUMBER_MAX`, so a number past it is a foreign or damaged
    /// name, and would overflow the counter.
    fn next_file(&self, rec: &Recovered) -> Result<u64> {
        let max_seen = self
            .kinds
            .iter()
            .filter_map(|k| match k {
                FileKind::Manifest(n)
                | FileKind::Journal(n)
                | FileKind::Table(n)
                | FileKind::Values(n)
                | FileKind::Stream(n)
                | FileKind::Free(n) => Some(*n),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let next = rec.next_file.max(max_seen.saturating_add(1));
        if next > FILE_NUMBER_MAX {
            return Err(Error::corruption(
                &self.dir,
                0,
                format!(
                    "file number {} is past the largest the engine uses",
                    next - 1
                ),
            ));
        }
        Ok(next)
    }

    /// Free journal files found are kept for reuse, up to the reaper's
    /// bound; the rest are deleted.
    fn keep_free_journals(&self, reaper: &Reaper) {
        let mut free = reaper.free.lock();
        for (name, kind) in self.names.iter().zip(&self.kinds) {
            if let FileKind::Free(n) = kind {
                if free.len() < reaper.free_max {
                    free.push(*n);
                } else {
                    let _ = self.fs.remove(&self.dir.join(name));
                }
            }
        }
    }

    /// Deletes what the new manifest (`manifest_number`, naming `version`
    /// and the fresh journal `journal_number`) does not reference: old
    /// journals and manifests, tables and values files of interrupted
    /// work, temporary files, and a staging ring a handle without direct
    /// journals has no use for (its content was replayed).
    fn remove_garbage(
        &self,
        version: &Version,
        journal_number: u64,
        manifest_number: u64,
        opts: &Options,
        reaper: &Reaper,
    ) {
        let live: std::collections::HashSet<u64> = version.numbers().collect();
        // Files a follower still reads stay until it lets go
        // (`Reaper::retry_deferred`).
        let holds = crate::follow::registry::Holds::load(&self.dir);
        for (name, kind) in self.names.iter().zip(&self.kinds) {
            let garbage = match kind {
                FileKind::Journal(n) => *n < journal_number && !version.segments.contains_key(n),
                FileKind::Manifest(n) => *n != manifest_number,
                FileKind::Table(n) => !live.contains(n),
                FileKind::Values(n) | FileKind::Stream(n) => !version.segments.contains_key(n),
                FileKind::Temp => true,
                FileKind::Stage => !opts.journal_direct,
                FileKind::StreamStage(_) => reaper.stream_stages.is_none(),
                _ => false,
            };
            let held = match kind {
                FileKind::Journal(n) => holds.held(*n, true),
                FileKind::Table(n) | FileKind::Values(n) | FileKind::Stream(n) => {
                    holds.held(*n, false)
                }
                _ => false,
            };
            if garbage && held {
                let n = match kind {
                    FileKind::Journal(n)
                    | FileKind::Table(n)
                    | FileKind::Values(n)
                    | FileKind::Stream(n) => *n,
                    _ => 0,
                };
                let journal = matches!(kind, FileKind::Journal(_));
                reaper
                    .deferred
                    .lock()
                    .push((n, journal, self.dir.join(name)));
            } else if garbage {
                let _ = self.fs.remove(&self.dir.join(name));
            }
        }
    }
}

/// The runtime caches an open reads through: the table cache (with the
/// block cache, if any) and the reaper that owns segment files.
pub(crate) fn caches(
    dir: &Path,
    opts: &Options,
) -> (Arc<TableCache>, Arc<Reaper>, Option<Arc<BlockCache>>) {
    let blocks = (opts.block_cache_bytes > 0)
        .then(|| Arc::new(BlockCache::new(opts.block_cache_bytes as u64)));
    let tables = Arc::new(TableCache::new(
        opts.fs.clone(),
        dir.to_path_buf(),
        opts.open_tables_max,
        blocks.clone(),
    ));
    let evict_from = tables.clone();
    let free_max = if opts.journal_recycle {
        crate::limits::FREE_JOURNALS_MAX
    } else {
        0
    };
    let reaper = Arc::new(Reaper {
        stage: opts
            .journal_direct
            .then(|| (files::stage(dir), opts.journal_ring_bytes)),
        stream_stages: (opts.journal_direct && opts.value_partitions > 0)
            .then(crate::version::streams::StageSlots::default),
        ..Reaper::new(
            opts.fs.clone(),
            dir.to_path_buf(),
            free_max,
            Box::new(move |n| evict_from.evict(n)),
        )
    });
    (tables, reaper, blocks)
}

/// What the manifest CURRENT names says, or for a new database (where
/// allowed) an empty one. A directory without CURRENT that holds tables
/// or a journal holding a record is a database whose CURRENT was lost:
/// refused rather than started over on top of it.
fn read_or_create_manifest(
    listing: &Listing,
    opts: &Options,
    reaper: &Arc<Reaper>,
) -> Result<Recovered> {
    let (fs, dir) = (&*listing.fs, &listing.dir);
    let current = files::current(dir);
    if fs.exists(&current) {
        if opts.error_if_exists {
            return Err(Error::InvalidArgument(format!(
                "a database exists at {} and error_if_exists is set",
                dir.display()
            )));
        }
        let rec = read_manifest(fs, dir, reaper)?;
        check_files_present(dir, &listing.kinds, &rec)?;
        return Ok(rec);
    }
    if !opts.create_if_missing {
        return Err(Error::InvalidArgument(format!(
            "no database at {} and create_if_missing is false",
            dir.display()
        )));
    }
    // Creating a database writes a journal and a manifest before
    // CURRENT, so a crash during creation leaves those without CURRENT;
    // nothing was acknowledged yet, so the journals hold no record.
    for (name, kind) in listing.names.iter().zip(&listing.kinds) {
        let has_data = match kind {
            FileKind::Table(_) | FileKind::Values(_) | FileKind::Stream(_) => true,
            // Whichever build was creating it.
            FileKind::Journal(n) => {
                journal_holds_record(fs, &dir.join(name), Framing::Numbered(*n))?
                    || journal_holds_record(fs, &dir.join(name), Framing::Plain)?
            }
            _ => false,
        };
        if has_data {
            return Err(Error::corruption(
                current,
                0,
                "CURRENT is missing but the directory holds tables or journal records",
            ));
        }
    }
    Ok(Recovered::new_database())
}

/// Replays every journal at or above the manifest's floor, in order, into
/// a memtable, flushing it to a level-0 table whenever it fills (so replay
/// needs at most one memtable of memory) and once at the end; the tables
/// join `rec.version` and the seqnos found raise `rec.last_seqno`. Table
/// numbers come from `new_number`.
fn replay_journals(
    listing: &Listing,
    opts: &Options,
    table_opts: &TableOptions,
    reaper: &Arc<Reaper>,
    rec: &mut Recovered,
    new_number: &dyn Fn() -> u64,
) -> Result<()> {
    let (fs, dir) = (&*listing.fs, &listing.dir);
    let keyspaces = rec.version.keyspaces.clone();
    let replay = Replay {
        fs,
        dir,
        memtable_bytes: opts.memtable_bytes,
        separation: Separation::new(opts.value_separation_min, keyspaces.clone()),
        resync: crate::options::sabotaged!(opts, replay_past_damage),
    };
    let opts_for = |keyspace| crate::keyspace::table_options(table_opts, &keyspaces, keyspace);
    let mut mem = Memtable::new(0);
    let mut added = Edit::default();
    for (n, end) in journals_to_replay(listing, rec)? {
        let framing = rec.framing(n);
        replay.journal(n, framing, end, &mut rec.last_seqno, &mut mem, &mut |mem| {
            flush_during_open(fs, dir, new_number, mem, &opts_for, &mut added)
        })?;
    }
    flush_during_open(fs, dir, new_number, &mut mem, &opts_for, &mut added)?;
    if !added.added.is_empty() {
        fs.sync_dir(dir)
            .map_err(|e| Error::io("syncing the database directory", e))?;
        let (v, _) = rec
            .version
            .apply(&added, reaper)
            .map_err(|d| Error::corruption(dir, 0, d))?;
        rec.version = v;
    }
    Ok(())
}

/// How a replayed journal may end (`journals_to_replay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Without a clean close: true if no later journal holds a write, so
    /// a torn tail is the ordinary end of an interrupted append.
    MayBeTorn(bool),
    /// The journal a clean close ended, with the length it recorded.
    Closed(u64),
}

/// The files an open writes before its new manifest is current: tables
/// flushed from replayed journals, the fresh journal, the staging ring,
/// the new manifest, CURRENT's temporary file. If the open fails before
/// `keep` (a full disk, typically), dropping this removes every such file
/// that was not in the directory when the open listed it, so failed opens
/// do not eat the space an operator frees for the next one. Nothing is
/// removed if CURRENT changed meanwhile: the new manifest may then be the
/// database's, and what it names must stay.
struct Written<'a> {
    fs: &'a dyn Fs,
    dir: &'a Path,
    before: &'a [String],
    current: Option<Vec<u8>>,
    kept: bool,
}

impl<'a> Written<'a> {
    fn new(fs: &'a dyn Fs, dir: &'a Path, before: &'a [String]) -> Self {
        Written {
            fs,
            dir,
            before,
            current: crate::io::read_all(fs, &files::current(dir)).ok(),
            kept: false,
        }
    }

    /// The open succeeded up to its new manifest: its files stay.
    fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for Written<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if crate::io::read_all(self.fs, &files::current(self.dir)).ok() != self.current {
            return;
        }
        let Ok(names) = self.fs.list(self.dir) else {
            return;
        };
        let mut removed = false;
        for name in names {
            let ours = !matches!(
                files::parse(&name),
                FileKind::Current | FileKind::Lock | FileKind::Other
            );
            if ours && !self.before.contains(&name) {
                removed |= self.fs.remove(&self.dir.join(&name)).is_ok();
            }
        }
        if removed {
            let _ = self.fs.sync_dir(self.dir);
        }
    }
}

/// Reads a whole file. If `looks_whole` rejects what was read, reads it
/// again until two reads agree (at most four reads), so a transient read
/// error — a bit flipped between the device and memory — is not taken for
/// a torn tail (which recovery would cut, losing data) or for damage.
fn read_settled(
    fs: &dyn Fs,
    path: &Path,
    looks_whole: impl Fn(&[u8]) -> bool,
) -> std::io::Result<Vec<u8>> {
    let mut data = io::read_all(fs, path)?;
    if looks_whole(&data) {
        return Ok(data);
    }
    for _ in 0..3 {
        let again = io::read_all(fs, path)?;
        if again == data {
            return Ok(data);
        }
        data = again;
    }
    // Every read differed: the device is not returning stable bytes.
    // Cutting what was read as a torn tail could drop acknowledged data.
    Err(std::io::Error::other(
        "four reads returned different bytes (unstable reads)",
    ))
}

/// The journal's continuation rule for `log::scan`: a record after damage
/// counts (making the damage `Damaged`, not a torn tail) only if it is a
/// batch continuing the log (a higher seqno than every seqno before the
/// damage, `start_seqno` for a journal's first record) whose durability
/// mark says some of those seqnos had been synced.
pub(crate) fn journal_continues(
    start_seqno: u64,
) -> impl Fn(RecordKind, &[u8], &[log::Record<'_>]) -> bool {
    move |kind, payload, earlier| {
        let before = earlier
            .last()
            .and_then(|&(_, k, p)| batch_codec::split_journal_record(k, p))
            .and_then(|(_, b)| batch_codec::decode(b).ok())
            .map_or(start_seqno, |b| {
                b.first_seqno.saturating_add(b.ops.len() as u64)
            });
        batch_codec::split_journal_record(kind, payload).is_some_and(|(mark, b)| {
            mark >= before.saturating_add(1)
                && batch_codec::decode(b).is_ok_and(|b| b.first_seqno > before)
        })
    }
}

/// The manifest's continuation rule: an edit that decodes.
pub(crate) fn manifest_continues(kind: RecordKind, payload: &[u8], _: &[log::Record<'_>]) -> bool {
    kind == RecordKind::Edit && Edit::decode(payload).is_ok()
}

fn read_manifest(fs: &dyn Fs, dir: &Path, reaper: &Arc<Reaper>) -> Result<Recovered> {
    let (path, data) = read_current_manifest(fs, dir)?;
    let scan = log::scan(&data, manifest_continues);
    if let Tail::Damaged { offset } = scan.tail {
        return Err(Error::corruption(&path, offset, "damaged manifest record"));
    }
    if scan.records.is_empty() {
        return Err(Error::corruption(&path, 0, "manifest holds no intact edit"));
    }
    let mut rec = Recovered::before_manifest();
    for (i, (offset, kind, payload)) in scan.records.iter().enumerate() {
        let bad = |d: String| Error::corruption(&path, *offset, d);
        if *kind != RecordKind::Edit {
            return Err(bad("manifest holds a non-edit record".into()));
        }
        let edit = Edit::decode(payload).map_err(bad)?;
        rec.replay(i == 0, &edit, reaper).map_err(bad)?;
    }
    rec.version
        .check()
        .map_err(|d| Error::corruption(&path, 0, d))?;
    Ok(rec)
}

/// The path and bytes of the manifest CURRENT names.
fn read_current_manifest(fs: &dyn Fs, dir: &Path) -> Result<(PathBuf, Vec<u8>)> {
    let current = files::current(dir);
    let text = read_settled(fs, &current, |t| files::parse_current(t).is_some())
        .map_err(|e| Error::io("reading CURRENT", e))?;
    let name = files::parse_current(&text).ok_or_else(|| {
        Error::corruption(
            &current,
            0,
            "CURRENT does not name a manifest (or its checksum does not match)",
        )
    })?;
    let path = dir.join(name);
    let data = read_settled(fs, &path, |d| {
        log::scan(d, |_, _, _| true).tail == Tail::Clean
    })
    .map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::corruption(
                &current,
                0,
                format!("CURRENT names {name}, which is missing"),
            )
        } else {
            Error::io(format!("reading manifest {}", path.display()), e)
        }
    })?;
    Ok((path, data))
}

impl Recovered {
    /// Replays one intact edit of the manifest (`first`: its first, which
    /// names the format and, from format 4, the database's identity).
    pub(crate) fn replay(
        &mut self,
        first: bool,
        edit: &Edit,
        reaper: &Arc<Reaper>,
    ) -> std::result::Result<(), String> {
        if first {
            match edit.format {
                Some(f) if (MANIFEST_FORMAT_MIN..=MANIFEST_FORMAT).contains(&f) => self.format = f,
                other => {
                    return Err(format!(
                        "unsupported manifest format {other:?} (this build reads {MANIFEST_FORMAT_MIN}..={MANIFEST_FORMAT})",
                    ));
                }
            }
            if self.format >= MANIFEST_FORMAT_IDENTIFIED {
                self.db_id = Some(edit.db_id.ok_or_else(|| {
                    "manifest of format 4 or later names no database identity".to_string()
                })?);
            }
        } else if edit.db_id.is_some() {
            return Err("database identity in an edit after the first".into());
        }
        // A clean close is the last edit its handle writes: it holds only
        // if nothing follows it.
        self.clean_close = edit.clean_close;
        let (v, _) = self.version.apply(edit, reaper)?;
        self.version = v;
        if let Some(j) = edit.journal {
            self.journal_floor = self.journal_floor.max(j);
        }
        if let Some(n) = edit.next_file {
            self.next_file = self.next_file.max(n);
        }
        if let Some(s) = edit.last_seqno {
            if s > SEQNO_MAX {
                return Err(format!("last seqno {s} is past SEQNO_MAX"));
            }
            self.last_seqno = self.last_seqno.max(s);
        }
        Ok(())
    }
}

/// Every table and value segment the manifest names, and the journal at
/// its floor, must
/// exist: files are deleted only after the edit that retires them is synced,
/// and the floor journal is created (and its name synced) before any edit
/// names it. A missing one means a durable edit was lost — typically a
/// damaged last manifest edit, which reads like a torn one and is dropped
/// by `read_manifest` — and the older version would return stale data.
fn check_files_present(dir: &Path, kinds: &[FileKind], rec: &Recovered) -> Result<()> {
    let mut tables = std::collections::HashSet::new();
    let mut journals = std::collections::HashSet::new();
    for k in kinds {
        match k {
            FileKind::Table(n) => tables.insert(*n),
            FileKind::Journal(n) | FileKind::Values(n) | FileKind::Stream(n) => journals.insert(*n),
            _ => false,
        };
    }
    if rec.journal_floor > 0 && !journals.contains(&rec.journal_floor) {
        return Err(Error::corruption(
            files::journal(dir, rec.journal_floor),
            0,
            "journal named by the manifest is missing (a manifest edit was lost)",
        ));
    }
    if let Some(n) = rec.version.segments.keys().find(|n| !journals.contains(n)) {
        return Err(Error::corruption(
            files::journal(dir, *n),
            0,
            "journal segment holding values named by the manifest is missing",
        ));
    }
    if let Some(n) = rec.version.numbers().find(|n| !tables.contains(n)) {
        return Err(Error::corruption(
            files::table(dir, n),
            0,
            "table named by the manifest is missing",
        ));
    }
    Ok(())
}

/// True if the journal at `path` starts with an intact record framed as
/// `framing`. Reads one record, not the file.
fn journal_holds_record(fs: &dyn Fs, path: &Path, framing: Framing) -> Result<bool> {
    let ctx = |e| Error::io(format!("reading journal {}", path.display()), e);
    let file = fs.open(path).map_err(ctx)?;
    let mut header = [0u8; log::HEADER_LEN];
    if file.len() < header.len() as u64 {
        return Ok(false);
    }
    file.read_exact_at(&mut header, 0).map_err(ctx)?;
    let Some(len) = log::record_len(&header, framing).filter(|&l| l as u64 <= file.len()) else {
        return Ok(false);
    };
    let mut record = vec![0u8; len];
    file.read_exact_at(&mut record, 0).map_err(ctx)?;
    Ok(log::starts_with_record(&record, framing))
}

/// The journals to replay, in order, each with how it may end. Every
/// journal at or above the manifest's floor, but after a clean close
/// (nothing was in flight) none past the one it closed, which must then
/// hold writes no more than it did. A journal may end torn only if no
/// later journal holds a write: a journal is synced before the next is
/// started, but the next may have been created empty just before a crash
/// (while sealing, or while opening), with nothing written after the torn
/// record.
fn journals_to_replay(listing: &Listing, rec: &Recovered) -> Result<Vec<(u64, End)>> {
    let (fs, dir) = (&*listing.fs, &listing.dir);
    let mut journals: Vec<u64> = listing
        .kinds
        .iter()
        .filter_map(|k| match k {
            FileKind::Journal(n) if *n >= rec.journal_floor => Some(*n),
            _ => None,
        })
        .collect();
    journals.sort_unstable();
    let mut holds_writes = Vec::with_capacity(journals.len());
    for &n in &journals {
        holds_writes.push(journal_holds_record(
            fs,
            &files::journal(dir, n),
            rec.framing(n),
        )?);
    }
    if let Some((closed, len)) = rec.clean_close
        && len > 0
        && closed >= rec.journal_floor
        && !journals.contains(&closed)
    {
        return Err(Error::corruption(
            files::journal(dir, closed),
            0,
            format!("the journal a clean close left {len} bytes long is missing"),
        ));
    }
    let mut ends = Vec::with_capacity(journals.len());
    for (i, &n) in journals.iter().enumerate() {
        // After a clean close nothing was in flight: every journal up to
        // the one it closed is whole, that one exactly as long as the
        // close found it, and none after it holds a write. Damage
        // anywhere is then reported, never cut as a torn tail.
        let end = match rec.clean_close {
            None => End::MayBeTorn(!holds_writes.iter().skip(i + 1).any(|&w| w)),
            Some((closed, len)) if n == closed => End::Closed(len),
            Some((closed, _)) if n < closed => End::MayBeTorn(false),
            Some(_) if holds_writes.get(i) == Some(&true) => {
                return Err(Error::corruption(
                    files::journal(dir, n),
                    0,
                    "journal after the one a clean close ended holds writes",
                ));
            }
            Some(_) => continue,
        };
        ends.push((n, end));
    }
    Ok(ends)
}

/// How journals are replayed into a memtable (`replay_journals`).
struct Replay<'a> {
    fs: &'a dyn Fs,
    dir: &'a Path,
    /// A memtable this full is flushed (`Options::memtable_bytes`).
    memtable_bytes: usize,
    /// Each keyspace's separation threshold, and which keyspaces exist.
    separation: Separation,
    /// `Sabotage::replay_past_damage`.
    resync: bool,
}

impl Replay<'_> {
    /// Replays journal `number` into `mem` (flushed through `flush`
    /// whenever it fills), raising `last_seqno` past each batch.
    fn journal(
        &self,
        number: u64,
        framing: Framing,
        end: End,
        last_seqno: &mut u64,
        mem: &mut Memtable,
        flush: &mut dyn FnMut(&mut Memtable) -> Result<()>,
    ) -> Result<()> {
        let rule = Separate {
            rule: self.separation.clone(),
            segment: number,
        };
        let path = files::journal(self.dir, number);
        let data = self.read(&path, number, framing, end, *last_seqno)?;
        let records = self.intact_records(&path, &data, framing, end, *last_seqno)?;
        let may_be_torn = end == End::MayBeTorn(true);
        let vouched = vouched(&records, may_be_torn);
        // Where the device holds the journal as read, from the first
        // record no sync vouched for (`on_device`), found when one is met.
        let mut on_device = None;
        let records_end = records
            .last()
            .and_then(|&(_, _, p)| Some(log::offset_in(&data, p)? + p.len() as u64))
            .unwrap_or(0);
        let mut streams = StreamFiles::default();
        for (offset, kind, payload) in records {
            let bad = |d: String| Error::corruption(&path, offset, d);
            let Some((_, payload)) = batch_codec::split_journal_record(kind, payload) else {
                return Err(bad("journal holds a non-batch record".into()));
            };
            let batch = batch_codec::decode(payload).map_err(bad)?;
            let last = self.check_seqnos(&batch, *last_seqno).map_err(bad)?;
            let Some(at) = log::offset_in(&data, payload) else {
                unreachable!("a record's payload is a slice of its file");
            };
            let synced = last <= vouched;
            // Values stay where they lie in the journal if a sync vouched
            // for the record, or if the device holds the record now that
            // the open synced the journal; otherwise they are copied into
            // the tables the open writes.
            let held = synced
                || *on_device.get_or_insert_with(|| {
                    let until = data.get(..records_end as usize).unwrap_or(&data);
                    self.on_device(&path, until, offset)
                }) >= at + payload.len() as u64;
            // Values in value streams: a synced record's stay there (the
            // sync that vouched for it synced its streams first, and reads
            // check each value); so do an unsynced record's where the
            // device holds them (`StreamFiles::settle`), else they are
            // copied, and the first that is missing or does not match its
            // pointer ends the journal as a torn tail would (unsynced
            // appends reach the device in any order).
            let inlined;
            let (payload, place) = if batch.ops.iter().any(|op| op.kind == Kind::Pointer) {
                let got = if synced {
                    streams
                        .check_present(self.fs, self.dir, &batch)
                        .map(|()| None)
                } else {
                    streams.settle(self.fs, self.dir, &batch)
                };
                match got {
                    Ok(None) => (payload, held.then_some(at)),
                    // Copied ops lie elsewhere than in the journal.
                    Ok(Some(rep)) => {
                        inlined = rep;
                        (&inlined[..], None)
                    }
                    Err(StreamMiss::Io(e)) => return Err(e),
                    Err(StreamMiss::Absent(_)) if may_be_torn && !synced => break,
                    Err(StreamMiss::Absent(d)) => return Err(bad(d)),
                }
            } else {
                (payload, held.then_some(at))
            };
            let seqno = insert_batch(
                &mut mem.writer(),
                payload,
                batch.first_seqno,
                &rule,
                place,
                None,
            )
            .map_err(bad)?;
            assert_eq!(seqno - 1, last, "a replayed batch ends at its last seqno");
            *last_seqno = (*last_seqno).max(last);
            if mem.approx_bytes() >= self.memtable_bytes {
                flush(mem)?;
            }
        }
        Ok(())
    }

    /// Where the device stops holding `data`, the newest journal's
    /// records as replay read them, looking from `from` (a record's start)
    /// on: the journal is synced first, then read past the page cache
    /// (`Fs::open_device`) and compared. A record before that point is on
    /// the device and durable, whether or not a sync of the writer's
    /// vouched for it, so its values may stay in the journal instead of
    /// being copied into the open's tables (the open then needs little
    /// free space after a crash, docs/durability.md §Full disk). The page
    /// cache alone is not enough: after a failed fsync it may show bytes
    /// the device never got, which this sync does not write again. Records
    /// only the staging ring held lie past the file's end, or where it
    /// holds other bytes. Gives `from` if it cannot tell (no such read, or
    /// a failed sync or read): the values are copied.
    fn on_device(&self, path: &Path, data: &[u8], from: u64) -> u64 {
        if self.fs.sync_file(path).is_err() {
            return from;
        }
        let Ok(Some(file)) = self.fs.open_device(path) else {
            return from;
        };
        let end = (data.len() as u64).min(file.len());
        let mut pos = from;
        while pos < end {
            let n = (end - pos).min(DEVICE_CHECK_STEP);
            let want = usize::try_from(pos)
                .ok()
                .and_then(|p| data.get(p..p + n as usize));
            let (Some(want), Ok(got)) = (want, io::read_direct(&*file, pos, n as usize)) else {
                return pos;
            };
            if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
                return pos + i as u64;
            }
            pos += n;
        }
        end
    }

    /// Journal `number`'s bytes as replay judges them: read until two
    /// reads agree where it looks damaged (`read_settled`), with the
    /// records only the staging ring holds appended to the newest
    /// journal, and cut at the length a clean close recorded.
    fn read(
        &self,
        path: &Path,
        number: u64,
        framing: Framing,
        end: End,
        last_seqno: u64,
    ) -> Result<Vec<u8>> {
        let data = read_settled(self.fs, path, |d| {
            log::scan_framed(d, framing, |_, _, _| true).tail == Tail::Clean
        })
        .map_err(|e| Error::io(format!("reading journal {}", path.display()), e))?;
        match end {
            End::MayBeTorn(true) => {
                with_staged_tail(self.fs, self.dir, number, framing, data, last_seqno)
            }
            End::MayBeTorn(false) => Ok(data),
            End::Closed(len) => {
                let mut data = data;
                if (data.len() as u64) < len {
                    return Err(Error::corruption(
                        path,
                        data.len() as u64,
                        format!("a clean close left this journal {len} bytes long; it holds fewer"),
                    ));
                }
                // Past `len` only zeros a pre-write or a page-padded tail
                // write left.
                data.truncate(len as usize);
                Ok(data)
            }
        }
    }

    /// The records of `data` replay takes: all of them, or those before
    /// a torn tail where the journal may end torn. Damage is a torn tail
    /// unless an intact record after it continues this journal (a batch
    /// with a higher seqno than everything before the damage; a stored
    /// value that happens to hold a record image does not qualify) and
    /// its durability mark says some of those higher seqnos had been
    /// synced, i.e. synced records were damaged: that is `Corruption`, as
    /// is any damage where the journal may not end torn.
    fn intact_records<'d>(
        &self,
        path: &Path,
        data: &'d [u8],
        framing: Framing,
        end: End,
        last_seqno: u64,
    ) -> Result<Vec<log::Record<'d>>> {
        let scan = log::scan_framed(data, framing, journal_continues(last_seqno));
        match scan.tail {
            Tail::Clean => Ok(scan.records),
            Tail::Torn { .. } | Tail::Damaged { .. } if self.resync => {
                Ok(log::scan_resync(data, framing))
            }
            Tail::Torn { .. } if end == End::MayBeTorn(true) => Ok(scan.records),
            Tail::Torn { offset } => Err(Error::corruption(
                path,
                offset,
                if matches!(end, End::Closed(_)) {
                    "damaged journal record before the end a clean close recorded"
                } else {
                    "bad record in a journal followed by a later journal holding writes"
                },
            )),
            Tail::Damaged { offset } => Err(Error::corruption(
                path,
                offset,
                "damaged journal record that a later record marks as synced",
            )),
        }
    }

    /// The last seqno of `batch`, replayed after `last_seqno`, if its
    /// seqnos are ones the engine writes: a non-empty batch in
    /// 1..=SEQNO_MAX (anything else would make the seqno arithmetic
    /// wrap), starting right after the batch before it. Seqnos are handed
    /// out without gaps (`commit_group`), and the manifest's last seqno
    /// ends where the floor journal begins, so a gap means records were
    /// lost or moved (a misdirected write can put later records where
    /// earlier ones were): replay never goes past it.
    fn check_seqnos(
        &self,
        batch: &batch_codec::Decoded<'_>,
        last_seqno: u64,
    ) -> std::result::Result<u64, String> {
        let count = batch.ops.len() as u64;
        let last = batch.first_seqno.checked_add(count.saturating_sub(1));
        let last = match last {
            Some(last) if count > 0 && batch.first_seqno > 0 && last <= SEQNO_MAX => last,
            _ => {
                return Err(format!(
                    "batch of {count} ops at seqno {} is outside the seqno range",
                    batch.first_seqno
                ));
            }
        };
        let follows = if self.resync {
            batch.first_seqno > last_seqno
        } else {
            Some(batch.first_seqno) == last_seqno.checked_add(1)
        };
        if !follows {
            return Err(format!(
                "batch seqno {} does not follow {last_seqno}",
                batch.first_seqno
            ));
        }
        Ok(last)
    }
}

/// The highest seqno a successful sync covered among `records`: every
/// record of a journal a later journal follows (it was synced when
/// sealed), and in the last journal (`may_be_torn`) the records up to its
/// highest durability mark. The records after that may be on the device
/// or not — and after a failed fsync the kernel may show bytes the device
/// never got ("lost" writeback), which a later fsync does not write again
/// — so their values stay where they are only where the open finds them
/// on the device (`Replay::on_device`).
fn vouched(records: &[log::Record<'_>], may_be_torn: bool) -> u64 {
    if !may_be_torn {
        return u64::MAX;
    }
    records
        .iter()
        .filter_map(|&(_, k, p)| batch_codec::split_journal_record(k, p))
        .map(|(mark, _)| mark)
        .max()
        .unwrap_or(0)
}

/// Bytes of the newest journal `Replay::on_device` compares per read.
const DEVICE_CHECK_STEP: u64 = 1 << 20;

/// The value streams replay reads (`version/streams.rs`), opened once each.
#[derive(Default)]
pub(crate) struct StreamFiles {
    open: std::collections::HashMap<u64, Option<Arc<dyn crate::io::FileRead>>>,
    /// Each stream synced and opened past the page cache
    /// (`Fs::open_device`), once: `None` where it cannot be.
    device: std::collections::HashMap<u64, Option<Arc<dyn crate::io::FileRead>>>,
    /// The value streams' staging ring slots by the stream each holds the
    /// newest bytes of (`StageRing`), listed on the first value a stream
    /// file lacks.
    rings: Option<std::collections::HashMap<u64, StageRing>>,
}

/// A value streams' staging ring slot (`files::stream_stage`, format.md
/// §Stage ring): the stream its header names holds every byte below
/// `header.flushed` in its file, and the ring the bytes from there on, up
/// to a ring's length. After kill -9 an unsynced value appended after the
/// stream's last direct write is there only.
struct StageRing {
    file: Arc<dyn crate::io::FileRead>,
    header: stage_format::Header,
}

/// Why a record's values could not be taken from their streams.
pub(crate) enum StreamMiss {
    /// Missing, short or not matching the pointer: what an unsynced
    /// append that never reached the device leaves.
    Absent(String),
    /// The device failed a read: the open fails, nothing is judged.
    Io(Error),
}

impl StreamFiles {
    fn get(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        number: u64,
    ) -> std::result::Result<Option<&Arc<dyn crate::io::FileRead>>, StreamMiss> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.open.entry(number) {
            let path = files::stream(dir, number);
            let file = match fs.open(&path) {
                Ok(f) => Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    let what = format!("opening value stream {}", path.display());
                    return Err(StreamMiss::Io(Error::io(what, e)));
                }
            };
            slot.insert(file);
        }
        Ok(self.open.get(&number).and_then(Option::as_ref))
    }

    /// Fills `value` with the bytes `ptr` names from the staging ring slot
    /// that holds its stream's newest bytes (and, for a value that starts
    /// below the slot's `flushed`, the stream file's bytes up to there);
    /// true if they are there and match the pointer. Ring bytes past what
    /// was appended are older bytes (of this stream or of one before it):
    /// the pointer's checksum tells them apart, as a record's does in the
    /// journal's ring.
    fn read_ring(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        ptr: &ValuePtr,
        value: &mut [u8],
    ) -> std::result::Result<bool, StreamMiss> {
        if self.rings.is_none() {
            self.rings = Some(stage_rings(fs, dir).map_err(StreamMiss::Io)?);
        }
        let Some((ring_file, h)) = self
            .rings
            .as_ref()
            .and_then(|r| r.get(&ptr.segment))
            .map(|r| (r.file.clone(), r.header))
        else {
            return Ok(false);
        };
        let (from, len) = (ptr.offset, value.len() as u64);
        let Some(end) = from.checked_add(len) else {
            return Ok(false);
        };
        if end <= h.flushed || end > h.flushed.saturating_add(h.ring) {
            return Ok(false);
        }
        let io_error = |what: &str, e| {
            StreamMiss::Io(Error::io(
                format!("reading {what} of value stream {}", ptr.segment),
                e,
            ))
        };
        // A value straddling `flushed`: its head from the stream file,
        // which holds every byte below it.
        let in_file = (h.flushed.saturating_sub(from)).min(len) as usize;
        let (head, tail) = value.split_at_mut(in_file);
        if in_file > 0 {
            let Some(file) = self.get(fs, dir, ptr.segment)?.cloned() else {
                return Ok(false);
            };
            match file.read_exact_at(head, from) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
                Err(e) => return Err(io_error("the file", e)),
            }
        }
        // The rest from the ring: up to its end, then from its start.
        let at = (from + in_file as u64) % h.ring;
        let first = (tail.len() as u64).min(h.ring - at) as usize;
        let base = stage_format::HEADER_LEN as u64;
        let (upto_end, wrapped) = tail.split_at_mut(first);
        let read = ring_file
            .read_exact_at(upto_end, base + at)
            .and_then(|()| ring_file.read_exact_at(wrapped, base));
        match read {
            Ok(()) => Ok(ptr.matches(value)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(io_error("the staging ring", e)),
        }
    }

    /// Every value stream `batch`'s pointer ops name exists.
    fn check_present(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        batch: &batch_codec::Decoded<'_>,
    ) -> std::result::Result<(), StreamMiss> {
        for op in batch.ops.iter().filter(|op| op.kind == Kind::Pointer) {
            let ptr = ValuePtr::decode(op.value)
                .ok_or_else(|| StreamMiss::Absent("malformed value pointer in a batch".into()))?;
            if self.get(fs, dir, ptr.segment)?.is_none() {
                return Err(StreamMiss::Absent(format!(
                    "value stream {} named by a synced journal record is missing",
                    ptr.segment
                )));
            }
        }
        Ok(())
    }

    /// True if the device holds the value `ptr` names: its stream synced,
    /// then read past the page cache, matching the pointer (see
    /// `Replay::on_device` for why the page cache does not count). False
    /// if it does not, or if that cannot be told.
    fn on_device(&mut self, fs: &dyn Fs, dir: &Path, ptr: &ValuePtr) -> bool {
        let file = self.device.entry(ptr.segment).or_insert_with(|| {
            let path = files::stream(dir, ptr.segment);
            fs.sync_file(&path)
                .ok()
                .and_then(|()| fs.open_device(&path).ok().flatten())
        });
        file.as_ref().is_some_and(|f| {
            io::read_direct(&**f, ptr.offset, ptr.len as usize).is_ok_and(|v| ptr.matches(&v))
        })
    }

    /// `batch`, from a record no sync vouched for, as replay takes it:
    /// `None` if the device holds every value its pointer ops name (they
    /// stay in their streams), else the batch with every value put back
    /// inline (`inline`).
    fn settle(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        batch: &batch_codec::Decoded<'_>,
    ) -> std::result::Result<Option<Vec<u8>>, StreamMiss> {
        let mut held = true;
        for op in batch.ops.iter().filter(|op| op.kind == Kind::Pointer) {
            held = ValuePtr::decode(op.value).is_some_and(|ptr| self.on_device(fs, dir, &ptr));
            if !held {
                break;
            }
        }
        if held {
            Ok(None)
        } else {
            self.inline(fs, dir, batch).map(Some)
        }
    }

    /// `batch` with each pointer op's value read from its stream and put
    /// back inline.
    pub(crate) fn inline(
        &mut self,
        fs: &dyn Fs,
        dir: &Path,
        batch: &batch_codec::Decoded<'_>,
    ) -> std::result::Result<Vec<u8>, StreamMiss> {
        let mut rep = batch_codec::new_payload();
        for op in &batch.ops {
            if op.kind != Kind::Pointer {
                batch_codec::push_op(&mut rep, op.keyspace, op.kind, op.key, op.value);
                continue;
            }
            let ptr = ValuePtr::decode(op.value)
                .ok_or_else(|| StreamMiss::Absent("malformed value pointer in a batch".into()))?;
            let absent = || {
                StreamMiss::Absent(format!(
                    "value of {} bytes at {} of value stream {} is missing or damaged",
                    ptr.len, ptr.offset, ptr.segment
                ))
            };
            let mut value = vec![0u8; ptr.len as usize];
            let in_file = match self.get(fs, dir, ptr.segment)? {
                // A value that does not match is read once more before it
                // counts as absent (`io::read_checked`): taking a bit
                // flipped on the way from the device for a torn tail would
                // drop every later record of the journal.
                Some(file) => {
                    io::read_checked(|| match file.read_exact_at(&mut value, ptr.offset) {
                        Ok(()) => Ok(if ptr.matches(&value) { Ok(()) } else { Err(()) }),
                        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(Err(())),
                        Err(e) => {
                            let what = format!("reading value stream {}", ptr.segment);
                            Err(StreamMiss::Io(Error::io(what, e)))
                        }
                    })?
                    .is_ok()
                }
                None => false,
            };
            // Not in the file: appended after the stream's last direct
            // write, it may be in the stream's staging ring.
            if !in_file && !self.read_ring(fs, dir, &ptr, &mut value)? {
                return Err(absent());
            }
            // Stored bytes that match their pointer but do not decompress
            // are not a torn tail: damage no checksum caught, or a bug.
            let value = ptr.unpack(value).map_err(|detail| {
                StreamMiss::Io(Error::corruption(
                    files::stream(dir, ptr.segment),
                    ptr.offset,
                    format!("a separated value does not decompress: {detail}"),
                ))
            })?;
            batch_codec::push_op(&mut rep, op.keyspace, Kind::Put, op.key, &value);
        }
        batch_codec::set_count(&mut rep, batch.ops.len() as u32);
        batch_codec::set_seqno(&mut rep, batch.first_seqno);
        Ok(rep)
    }
}

/// The value streams' staging ring slots in `dir` whose header is intact,
/// by the stream each names.
fn stage_rings(fs: &dyn Fs, dir: &Path) -> Result<std::collections::HashMap<u64, StageRing>> {
    let mut rings = std::collections::HashMap::new();
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for name in names {
        let files::FileKind::StreamStage(_) = files::parse(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let ctx = |e| Error::io(format!("reading {}", path.display()), e);
        let file = fs.open(&path).map_err(ctx)?;
        let mut head = [0u8; stage_format::HEADER_USED];
        if file.len() < head.len() as u64 {
            continue;
        }
        file.read_exact_at(&mut head, 0).map_err(ctx)?;
        if let Some(header) = stage_format::decode_header(&head, file.len()) {
            rings.insert(header.journal, StageRing { file, header });
        }
    }
    Ok(rings)
}

/// The newest journal's bytes with the records only the staging ring
/// holds appended (`Options::journal_direct`, format.md §Stage ring): after
/// kill -9 the file ends where its last direct write ended, and the
/// records acknowledged after that are in the ring. The file's intact
/// records are kept as they are; from where they end, the ring's records
/// are taken for as long as each continues the seqnos of the one before —
/// past the real end the ring holds older bytes of the same journal (or
/// of an earlier one), which never do. A damaged file (intact records
/// after its damage) is returned as it is, for the usual checks to judge.
pub(crate) fn with_staged_tail(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    framing: Framing,
    mut data: Vec<u8>,
    last_seqno: u64,
) -> Result<Vec<u8>> {
    let path = files::stage(dir);
    if !fs.exists(&path) {
        return Ok(data);
    }
    let ctx = |e| Error::io(format!("reading {}", path.display()), e);
    let file = fs.open(&path).map_err(ctx)?;
    // The header first: the ring is read only if it holds this journal.
    let mut head = [0u8; stage_format::HEADER_USED];
    if file.len() < head.len() as u64 {
        return Ok(data);
    }
    file.read_exact_at(&mut head, 0).map_err(ctx)?;
    let Some(header) = stage_format::decode_header(&head, file.len()) else {
        return Ok(data);
    };
    if header.journal != number {
        return Ok(data);
    }
    // `decode_header` checked that the ring fits in the file.
    let mut stage = vec![0u8; stage_format::HEADER_LEN + header.ring as usize];
    file.read_exact_at(&mut stage, 0).map_err(ctx)?;
    let scan = log::scan_framed(&data, framing, journal_continues(last_seqno));
    let end = match scan.tail {
        Tail::Clean => data.len(),
        Tail::Torn { offset } => offset as usize,
        Tail::Damaged { .. } => return Ok(data),
    };
    let batch = |kind: RecordKind, payload: &[u8]| {
        batch_codec::split_journal_record(kind, payload)
            .and_then(|(_, b)| batch_codec::decode(b).ok())
            .map(|b| (b.first_seqno, b.ops.len() as u64))
    };
    let mut next = match scan.records.last() {
        // Seqnos from disk: checked, as replay checks them again later.
        Some(&(_, kind, p)) => match batch(kind, p).and_then(|(f, n)| f.checked_add(n)) {
            Some(next) => next,
            None => return Ok(data),
        },
        None => last_seqno.saturating_add(1),
    };
    // From `end` on: the file's bytes below `flushed` (a record may
    // straddle it), the ring's from there.
    let ring_from = usize::try_from(header.flushed)
        .unwrap_or(usize::MAX)
        .clamp(end, data.len());
    let mut tail = data.get(end..ring_from).unwrap_or_default().to_vec();
    tail.extend_from_slice(&stage_format::unwrap_from(
        &stage,
        header.ring,
        ring_from as u64,
    ));
    let mut keep = 0;
    for (_, kind, payload) in log::scan_framed(&tail, framing, |_, _, _| false).records {
        match batch(kind, payload) {
            Some((first, count)) if first == next && count > 0 => {
                let Some(after) = first.checked_add(count) else {
                    break;
                };
                next = after;
                let Some(at) = log::offset_in(&tail, payload) else {
                    break;
                };
                keep = at as usize + payload.len();
            }
            _ => break,
        }
    }
    data.truncate(end);
    data.extend_from_slice(tail.get(..keep).unwrap_or_default());
    Ok(data)
}

/// Writes `mem` to a level-0 table (if non-empty), records it in `edit`,
/// and empties `mem`.
fn flush_during_open(
    fs: &dyn Fs,
    dir: &Path,
    number: &dyn Fn() -> u64,
    mem: &mut Memtable,
    opts_for: &dyn Fn(u32) -> Option<TableOptions>,
    edit: &mut Edit,
) -> Result<()> {
    // One number is taken even for an empty memtable (the numbering of a
    // new database's first files is documented in format.md).
    let mut first = Some(number());
    if !mem.is_empty() {
        // A table left by a failure here is an orphan the next open
        // deletes; this open fails.
        let mut numbers = || first.take().unwrap_or_else(number);
        let f = crate::flush::write_tables(
            fs,
            dir,
            mem,
            // No reader exists yet: one of everything, which reads each
            // key's newest version only.
            &crate::txn::registry::ReadPoints::of(vec![crate::limits::SEQNO_MAX]),
            &mut numbers,
            opts_for,
            &mut Vec::new(),
        )?;
        edit.added.extend(f.records);
        edit.last_seqno = Some(edit.last_seqno.unwrap_or(0).max(f.max_seqno));
        edit.value_live.extend(f.value_live);
    }
    *mem = Memtable::new(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::format::batch as codec;
    use crate::format::key::Kind;
    use crate::io::{Fs, MemFs};
    use crate::version::files;
    use crate::{Db, Options};
    use std::path::Path;
    use std::sync::Arc;

    /// A database last written by a build of journal format 2 (manifest
    /// format 2, plain marked-batch records) opens and replays its journal;
    /// the open leaves a format-3 manifest and a numbered journal behind,
    /// and a reopen reads both. A numbered record in a journal a format-2
    /// manifest covers is not read (the framing comes from the manifest).
    #[test]
    fn journals_of_format_2_databases_replay_with_plain_framing() {
        use crate::format::log::{RecordKind, encode_record, encode_record_parts};
        use crate::format::manifest::Edit;
        let dir = Path::new("/db");
        let batch = |first: u64, key: &[u8]| {
            let mut rep = codec::new_payload();
            codec::push_op(&mut rep, 0, Kind::Put, key, b"old");
            codec::set_count(&mut rep, 1);
            codec::set_seqno(&mut rep, first);
            rep
        };
        // A format-2 manifest (floor 5) and journal 5 holding `journal`.
        let build = |journal: Vec<u8>| {
            let fs = MemFs::new();
            fs.create_dir_all(dir).expect("mkdir");
            let edit = Edit {
                format: Some(2),
                journal: Some(5),
                next_file: Some(7),
                last_seqno: Some(0),
                ..Edit::default()
            };
            let mut manifest = Vec::new();
            encode_record(&mut manifest, RecordKind::Edit, &edit.encode());
            for (name, bytes) in [
                (files::manifest_name(6), manifest),
                ("000005.journal".to_string(), journal),
                (
                    "CURRENT".to_string(),
                    files::current_contents(6).into_bytes(),
                ),
            ] {
                let mut f = fs.create(&dir.join(name)).expect("create");
                f.append(&bytes).expect("append");
                f.sync().expect("sync");
            }
            Options {
                fs: Arc::new(fs),
                ..Options::default()
            }
        };

        let mut plain = Vec::new();
        for (first, key) in [(1u64, b"a"), (2, b"b")] {
            let mark = (first - 1).to_le_bytes();
            encode_record_parts(
                &mut plain,
                RecordKind::MarkedBatch,
                0,
                &mark,
                &batch(first, key),
            );
        }
        let opts = build(plain);
        let db = Db::open(dir, opts.clone()).expect("open format 2");
        assert_eq!(db.get("a").expect("get"), Some(b"old".to_vec()));
        assert_eq!(db.get("b").expect("get"), Some(b"old".to_vec()));
        db.put_opt("c", "new", &crate::WriteOptions { sync: true })
            .expect("put");
        drop(db);
        let db = Db::open(dir, opts).expect("reopen as format 3");
        for k in ["a", "b"] {
            assert_eq!(db.get(k).expect("get"), Some(b"old".to_vec()), "{k}");
        }
        assert_eq!(db.get("c").expect("get"), Some(b"new".to_vec()));
        drop(db);

        let mut numbered = Vec::new();
        codec::encode_journal_record(&mut numbered, 5, 0, &batch(1, b"a"));
        let db = Db::open(dir, build(numbered)).expect("open");
        assert_eq!(
            db.get("a").expect("get"),
            None,
            "a numbered record under format 2"
        );
    }

    /// A journal record whose checksums hold but whose seqnos the engine
    /// never writes (empty batch, seqno 0, past SEQNO_MAX) is corruption,
    /// not arithmetic that wraps.
    #[test]
    fn out_of_range_batch_seqnos_are_corruption() {
        let cases: [(u64, u32); 3] = [(0, 0), (0, 1), (u64::MAX - 1, 3)];
        for (first, ops) in cases {
            // A crash (no clean close, which would vouch for the last
            // journal's end) after creation; the records are framed for
            // this database.
            let live = MemFs::new();
            let dir = Path::new("/db");
            let db = Db::open(
                dir,
                Options {
                    fs: Arc::new(live.clone()),
                    ..Options::default()
                },
            )
            .expect("create");
            let seed = crate::format::log::journal_seed(999, db.inner().db_id);
            let fs = live.crash_image(crate::io::Crash::Clean, 0);
            drop(db);
            let opts = Options {
                fs: Arc::new(fs.clone()),
                ..Options::default()
            };
            let mut rep = codec::new_payload();
            for i in 0..ops {
                codec::push_op(&mut rep, 0, Kind::Put, &i.to_be_bytes(), b"v");
            }
            codec::set_count(&mut rep, ops);
            codec::set_seqno(&mut rep, first);
            let mut rec = Vec::new();
            codec::encode_journal_record(&mut rec, seed, 0, &rep);
            let mut f = fs.create(&files::journal(dir, 999)).expect("journal");
            f.append(&rec).expect("append");
            f.sync().expect("sync");
            match Db::open(dir, opts) {
                Err(e) => assert!(e.is_corruption(), "first {first} ops {ops}: {e}"),
                Ok(_) => panic!("first {first} ops {ops}: opened"),
            }
        }
    }
}
