//! Versions: immutable sets of live tables per level.
//!
//! A [`Version`] is never changed after it is built; a flush or compaction
//! makes a new one from the current one and a manifest [`Edit`]. Readers,
//! iterators and compactions hold an `Arc<Version>`, which holds an
//! `Arc<TableFile>` per table. A table removed by an edit is marked
//! obsolete, and its file is deleted when the last `Arc<TableFile>` drops,
//! that is when no version (and so no iterator or snapshot read) can still
//! reach it. Table handles are `crate::sync::Arc` (std's `Arc`, or loom's
//! under `--cfg loom`, where the loom model below checks that a file is
//! deleted exactly once and never while a handle to it is held).
//!
//! Level 0 holds flushed memtables in flush order (overlapping ranges,
//! newest last). Levels 1.. hold non-overlapping tables sorted by key.

pub mod files;
pub mod segments;
pub mod streams;

use crate::format::key;
use crate::format::manifest::{Edit, TableRecord};
use crate::io::Fs;
use crate::keyspace::Registry;
use crate::limits::LEVELS;
use crate::sync;
use crate::sync::atomic::{AtomicBool, Ordering};
use segments::{SegmentFile, SegmentLive};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Weak};

/// Deletes obsolete table and segment files, or keeps obsolete journal
/// files for reuse; shared by every [`TableFile`] and [`SegmentFile`] of a
/// database.
///
/// Journal recycling: an obsolete journal this process created is renamed
/// `NNNNNN.free` instead of deleted, while fewer than `free_max` are kept;
/// a new journal is made from a free file when there is one
/// ([`Reaper::new_journal`]), so its appends overwrite blocks the file
/// system has already allocated and written: no size or allocation change
/// for a synced append to commit, and no first-write conversion of
/// unwritten extents (which costs a journal commit on ext4). The records of the file's old
/// life stay behind the new ones until overwritten; their header checksums
/// are seeded with the old journal number, so they never read as records
/// of the new one (format.md §Log records).
pub struct Reaper {
    pub fs: Arc<dyn Fs>,
    pub dir: PathBuf,
    /// Called with the table number after its file is deleted (evicts
    /// cached handles).
    pub on_delete: Box<dyn Fn(u64) + Send + Sync>,
    /// The segment handles in use, so each segment has one
    /// (`SegmentFile::get`).
    pub segments: parking_lot::Mutex<HashMap<u64, Weak<SegmentFile>>>,
    /// Numbers of the free journal files (`NNNNNN.free`) kept for reuse.
    pub free: parking_lot::Mutex<Vec<u64>>,
    /// Most free journal files kept (0: none, every obsolete journal is
    /// deleted).
    pub free_max: usize,
    /// Journals made from free files.
    pub recycled: std::sync::atomic::AtomicU64,
    /// The staging ring new journals are written through
    /// (`Options::journal_direct`), if any, and its size.
    pub stage: Option<(PathBuf, usize)>,
    /// The staging ring slots new value streams are written through
    /// (`Options::journal_direct`), if any.
    pub stream_stages: Option<streams::StageSlots>,
    /// The mapped rings of the stage files above that no journal or
    /// stream is written through now (`io::StageRings`).
    pub rings: crate::io::StageRings,
    /// Set when the database is closed, before its lock is released:
    /// from then on another handle may own the directory, so files that
    /// become obsolete as leftover snapshots and iterators let go are
    /// left for the next open to remove.
    pub closed: std::sync::atomic::AtomicBool,
    /// Obsolete files a follower still reads (`follow::registry`): their
    /// number, whether each is a journal, and path; deleted by
    /// `retry_deferred` once no follower holds them.
    pub deferred: parking_lot::Mutex<Vec<(u64, bool, PathBuf)>>,
}

impl Reaper {
    pub fn new(
        fs: Arc<dyn Fs>,
        dir: PathBuf,
        free_max: usize,
        on_delete: Box<dyn Fn(u64) + Send + Sync>,
    ) -> Self {
        Reaper {
            fs,
            dir,
            on_delete,
            segments: parking_lot::Mutex::new(HashMap::new()),
            free: parking_lot::Mutex::new(Vec::new()),
            free_max,
            recycled: std::sync::atomic::AtomicU64::new(0),
            stage: None,
            stream_stages: None,
            rings: crate::io::StageRings::default(),
            closed: std::sync::atomic::AtomicBool::new(false),
            deferred: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// True if a live follower holds file `number` (a journal if
    /// `journal`): it is then kept, to be deleted by a later
    /// `retry_deferred`. Retries the files deferred before.
    pub fn defer_if_held(&self, number: u64, journal: bool, path: PathBuf) -> bool {
        let holds = crate::follow::registry::Holds::load(&self.dir);
        self.retry_with(&holds);
        if holds.held(number, journal) {
            self.deferred.lock().push((number, journal, path));
            return true;
        }
        false
    }

    /// Deletes the deferred files no live follower holds any more. Cheap
    /// when nothing is deferred; the flush thread calls it as it idles.
    pub fn retry_deferred(&self) {
        if self.deferred.lock().is_empty() || self.closed.load(std::sync::atomic::Ordering::Acquire)
        {
            return;
        }
        self.retry_with(&crate::follow::registry::Holds::load(&self.dir));
    }

    fn retry_with(&self, holds: &crate::follow::registry::Holds) {
        let free: Vec<(u64, bool, PathBuf)> = {
            let mut deferred = self.deferred.lock();
            let (held, free) = deferred.drain(..).partition(|(n, j, _)| holds.held(*n, *j));
            *deferred = held;
            free
        };
        for (number, journal, path) in free {
            let _ = self.fs.remove(&path);
            if !journal {
                (self.on_delete)(number);
            }
        }
    }

    /// Creates journal `number` for appending: from a free journal file
    /// if one is kept (renamed, its old bytes overwritten as the journal
    /// grows), else as a new file. The caller syncs the directory.
    pub fn new_journal(&self, number: u64) -> std::io::Result<Box<dyn crate::io::FileWrite>> {
        let file = self.new_journal_file(number)?;
        if let Some((stage, ring)) = &self.stage
            && let Some(staged) = self.fs.open_staged(
                &files::journal(&self.dir, number),
                stage,
                number,
                (*ring, crate::limits::JOURNAL_CHUNK_BYTES),
                &self.rings,
            )?
        {
            return Ok(staged);
        }
        Ok(file)
    }

    fn new_journal_file(&self, number: u64) -> std::io::Result<Box<dyn crate::io::FileWrite>> {
        let path = files::journal(&self.dir, number);
        loop {
            let Some(free) = self.free.lock().pop() else {
                break;
            };
            // A free file that cannot be reused (gone, unreadable) is
            // skipped; a new file is the fallback.
            if let Ok(file) = self.fs.reuse(&files::free(&self.dir, free), &path) {
                self.recycled
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(file);
            }
        }
        self.fs.create(&path)
    }

    /// Keeps obsolete journal `number` as a free file if fewer than
    /// `free_max` are kept; `false` if it was not kept (delete it).
    fn keep_free(&self, number: u64) -> bool {
        let mut free = self.free.lock();
        if free.len() >= self.free_max {
            return false;
        }
        let from = files::journal(&self.dir, number);
        // A second name (a checkpoint's link) would see the reuse's
        // overwrites: such a journal is deleted instead.
        if self.fs.link_count(&from).map_or(true, |n| n > 1) {
            return false;
        }
        if self
            .fs
            .rename(&from, &files::free(&self.dir, number))
            .is_err()
        {
            return false;
        }
        free.push(number);
        true
    }
}

/// What applying an edit took out of a version; marked obsolete once the
/// new version is installed.
#[derive(Default)]
pub struct Removed {
    pub tables: Vec<sync::Arc<TableFile>>,
    pub segments: Vec<Arc<SegmentFile>>,
}

impl Removed {
    pub fn mark_obsolete(self) {
        for t in self.tables {
            t.mark_obsolete();
        }
        for s in self.segments {
            s.mark_obsolete();
        }
    }
}

/// The share of the key range `[lo, hi]` that `[from, to]` (inside it)
/// covers (an estimate for a table whose index cannot be read), reading each key as a big-endian number from the first byte
/// where `lo` and `hi` differ (8 bytes of it). 1.0 when `lo` and `hi` do
/// not differ in those bytes.
pub fn key_range_share(lo: &[u8], hi: &[u8], from: &[u8], to: &[u8]) -> f64 {
    let common = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
    let at = |k: &[u8]| {
        let mut n = [0u8; 8];
        for (d, s) in n.iter_mut().zip(k.iter().skip(common)) {
            *d = *s;
        }
        u64::from_be_bytes(n) as f64
    };
    let whole = at(hi) - at(lo);
    if whole <= 0.0 {
        return 1.0;
    }
    ((at(to) - at(from)) / whole).clamp(0.0, 1.0)
}

/// A live table file.
pub struct TableFile {
    /// The keyspace it belongs to.
    pub keyspace: u32,
    pub number: u64,
    pub size: u64,
    pub entries: u64,
    /// Smallest and largest internal keys.
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    obsolete: AtomicBool,
    reaper: Arc<Reaper>,
}

impl TableFile {
    pub fn new(rec: &TableRecord, reaper: Arc<Reaper>) -> Self {
        TableFile {
            keyspace: rec.keyspace,
            number: rec.number,
            size: rec.size,
            entries: rec.entries,
            smallest: rec.smallest.clone(),
            largest: rec.largest.clone(),
            obsolete: AtomicBool::new(false),
            reaper,
        }
    }

    pub fn smallest_user(&self) -> &[u8] {
        key::user_key(&self.smallest)
    }
    pub fn largest_user(&self) -> &[u8] {
        key::user_key(&self.largest)
    }
    /// True if `user_key` of `keyspace` is inside this table's key range.
    pub fn covers(&self, keyspace: u32, user_key: &[u8]) -> bool {
        self.keyspace == keyspace
            && self.smallest_user() <= user_key
            && user_key <= self.largest_user()
    }
    /// True if this table is of `keyspace` and its range intersects
    /// `[lo, hi]` (user keys).
    pub fn overlaps(&self, keyspace: u32, lo: &[u8], hi: &[u8]) -> bool {
        self.keyspace == keyspace && !(self.largest_user() < lo || self.smallest_user() > hi)
    }
    /// Order of tables within a level of 1 and deeper: by keyspace, then
    /// smallest key.
    pub fn order(&self, other: &TableFile) -> std::cmp::Ordering {
        self.keyspace
            .cmp(&other.keyspace)
            .then_with(|| key::compare(&self.smallest, &other.smallest))
    }
    pub fn record(&self, level: usize) -> TableRecord {
        TableRecord {
            keyspace: self.keyspace,
            level,
            number: self.number,
            size: self.size,
            entries: self.entries,
            smallest: self.smallest.clone(),
            largest: self.largest.clone(),
        }
    }
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for TableFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) && !self.reaper.closed.load(Ordering::Acquire) {
            let path = files::table(&self.reaper.dir, self.number);
            if self.reaper.defer_if_held(self.number, false, path.clone()) {
                return;
            }
            // A failed delete leaves an orphan that the next open removes.
            let _ = self.reaper.fs.remove(&path);
            (self.reaper.on_delete)(self.number);
        }
    }
}

/// The live tables, per level, and the journal segments tables point
/// into.
#[derive(Clone, Default)]
pub struct Version {
    /// Level 0 in flush order; deeper levels ordered by keyspace, then
    /// key (`TableFile::order`).
    pub levels: [Vec<sync::Arc<TableFile>>; LEVELS],
    pub segments: BTreeMap<u64, SegmentLive>,
    /// The keyspaces that exist (the default one aside).
    pub keyspaces: Arc<Registry>,
    /// The name of the key order the database was created under
    /// (manifest tag 15), if one was given.
    pub comparator: Option<Arc<str>>,
    /// Bytes written since the database was created, as of the last edit
    /// that said (manifest tag 16).
    pub totals: crate::format::manifest::WriteTotals,
    /// `Version::l0_depth`, computed when the version is built.
    l0_depth: usize,
}

impl Version {
    /// A new version: `self` with `edit` applied. Returns the version and
    /// the tables the edit removed (to be marked obsolete once the new
    /// version is installed). `Err` if the edit does not fit this version
    /// (removes a table that is not there), which means a damaged manifest.
    pub fn apply(&self, edit: &Edit, reaper: &Arc<Reaper>) -> Result<(Version, Removed), String> {
        let mut v = self.clone();
        if let Some(name) = &edit.comparator {
            v.comparator = Some(Arc::from(name.as_str()));
        }
        if let Some(t) = edit.totals {
            v.totals = t;
        }
        if !(edit.keyspaces.is_empty()
            && edit.dropped_keyspaces.is_empty()
            && edit.next_keyspace.is_none())
        {
            v.keyspaces = Arc::new(self.keyspaces.apply(edit)?);
        }
        let mut removed = Vec::new();
        for &(level, number) in &edit.removed {
            let files = &mut v.levels[level];
            let pos = files
                .iter()
                .position(|f| f.number == number)
                .ok_or_else(|| format!("edit removes table {number} absent from level {level}"))?;
            removed.push(files.remove(pos));
        }
        for rec in &edit.added {
            // A table removed and added by the same edit moved level: it
            // keeps its handle and is not obsolete.
            // A compaction that began before its keyspace was dropped
            // still installs its outputs; the drop's removal takes them.
            if !v.keyspaces.exists(rec.keyspace) && !v.keyspaces.dropped(rec.keyspace) {
                return Err(format!(
                    "edit adds table {} to keyspace {}, which was never created",
                    rec.number, rec.keyspace
                ));
            }
            let file = match removed.iter().position(|f| f.number == rec.number) {
                Some(i) => removed.swap_remove(i),
                None => sync::Arc::new(TableFile::new(rec, reaper.clone())),
            };
            v.levels[rec.level].push(file);
        }
        v.levels[0].sort_by_key(|f| f.number);
        v.l0_depth = v.count_l0_depth();
        for level in v.levels.iter_mut().skip(1) {
            level.sort_by(|a, b| a.order(b));
        }
        for &(number, bytes) in &edit.value_live {
            let seg = v.segments.entry(number).or_insert_with(|| SegmentLive {
                live: 0,
                added: 0,
                file: SegmentFile::get(reaper, number),
            });
            seg.live = seg
                .live
                .checked_add(bytes)
                .ok_or_else(|| format!("segment {number}: live bytes overflow"))?;
            seg.added = seg.added.saturating_add(bytes);
        }
        let mut dead_segments = Vec::new();
        for &(number, bytes) in &edit.value_dead {
            let seg = v.segments.get_mut(&number).ok_or_else(|| {
                format!("edit frees values of segment {number}, which holds none")
            })?;
            seg.live = seg.live.checked_sub(bytes).ok_or_else(|| {
                format!(
                    "edit frees {bytes} bytes of segment {number}, which holds {}",
                    seg.live
                )
            })?;
            if seg.live == 0
                && let Some(gone) = v.segments.remove(&number)
            {
                dead_segments.push(gone.file);
            }
        }
        assert_eq!(
            v.table_count() + edit.removed.len(),
            self.table_count() + edit.added.len(),
            "an edit removes and adds exactly the tables it names"
        );
        Ok((
            v,
            Removed {
                tables: removed,
                segments: dead_segments,
            },
        ))
    }

    /// The handle of segment `number` if tables point into it.
    pub fn segment(&self, number: u64) -> Option<&Arc<SegmentFile>> {
        self.segments.get(&number).map(|s| &s.file)
    }

    /// Bytes of separated values tables point to, over all segments.
    pub fn value_bytes_live(&self) -> u64 {
        self.segments.values().map(|s| s.live).sum()
    }

    /// Bytes of separated values tables point to that still lie in
    /// journals (in write order): what settling has left to move.
    pub fn value_bytes_unsettled(&self) -> u64 {
        self.segments
            .values()
            .filter(|s| s.file.in_write_order())
            .map(|s| s.live)
            .sum()
    }

    /// An edit that recreates this version from nothing.
    pub fn snapshot_edit(&self) -> Edit {
        let mut e = Edit::default();
        for (level, files) in self.levels.iter().enumerate() {
            e.added.extend(files.iter().map(|f| f.record(level)));
        }
        e.value_live = self.segments.iter().map(|(&n, s)| (n, s.live)).collect();
        e.keyspaces = self.keyspaces.iter().map(|k| (**k).clone()).collect();
        let next = self.keyspaces.next_id();
        e.next_keyspace = (next > 1).then_some(next);
        e.comparator = self.comparator.as_deref().map(str::to_owned);
        e.totals = Some(self.totals);
        e
    }

    /// Level-0 tables of the keyspace that has the most: how deep level 0
    /// is for a read. A flush writes one table per keyspace it holds, so
    /// this, not the count of all level-0 tables, is what triggers
    /// compaction and slows writers.
    /// Tables of dropped keyspaces are not counted: compaction does not
    /// take them, their removal does.
    pub fn l0_depth(&self) -> usize {
        self.l0_depth
    }

    fn count_l0_depth(&self) -> usize {
        let mut per: BTreeMap<u32, usize> = BTreeMap::new();
        for f in &self.levels[0] {
            if self.keyspaces.exists(f.keyspace) {
                *per.entry(f.keyspace).or_default() += 1;
            }
        }
        per.into_values().max().unwrap_or(0)
    }

    /// Whether the value bytes an edit built from table contents counts
    /// dead (`dead`, per segment, beside the bytes it makes live, `live`)
    /// fit this version: each segment is held, with at least that many
    /// live bytes. Tables whose checksums pass can still point into
    /// segments the manifest does not hold, or more bytes than it counts
    /// (a damaged or foreign image): then `Err` names the segment, and the
    /// caller reports `Corruption` instead of logging an edit that
    /// `apply` would refuse.
    pub fn check_value_dead(&self, dead: &[(u64, u64)], live: &[(u64, u64)]) -> Result<(), String> {
        for &(number, bytes) in dead {
            let added: u64 = live
                .iter()
                .filter(|(n, _)| *n == number)
                .map(|(_, b)| b)
                .sum();
            let held = self.segments.get(&number).map(|s| s.live);
            if held.is_none() && added == 0 {
                return Err(format!(
                    "tables point to {bytes} bytes of segment {number}, which holds none"
                ));
            }
            let holds = held.unwrap_or(0).saturating_add(added);
            if holds < bytes {
                return Err(format!(
                    "tables point to {bytes} bytes of segment {number}, which holds {holds}"
                ));
            }
        }
        Ok(())
    }

    /// The tables of keyspaces that were dropped, with their levels: what
    /// the compaction thread removes.
    pub fn dropped_tables(&self) -> Vec<(usize, sync::Arc<TableFile>)> {
        let mut out = Vec::new();
        for (level, files) in self.levels.iter().enumerate() {
            for f in files {
                if self.keyspaces.dropped(f.keyspace) {
                    out.push((level, f.clone()));
                }
            }
        }
        out
    }

    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|f| f.size).sum()
    }

    /// The table of `level` (>= 1) whose range may hold `user_key` of
    /// `keyspace`.
    pub fn find(
        &self,
        level: usize,
        keyspace: u32,
        user_key: &[u8],
    ) -> Option<&sync::Arc<TableFile>> {
        let files = &self.levels[level];
        let i = files.partition_point(|f| (f.keyspace, f.largest_user()) < (keyspace, user_key));
        files.get(i).filter(|f| f.covers(keyspace, user_key))
    }

    /// The tables of `level` (>= 1) of `keyspace`, in key order.
    pub fn level_of(&self, level: usize, keyspace: u32) -> &[sync::Arc<TableFile>] {
        let files = &self.levels[level];
        let lo = files.partition_point(|f| f.keyspace < keyspace);
        let hi = files.partition_point(|f| f.keyspace <= keyspace);
        &files[lo..hi]
    }

    /// Tables of `level` of `keyspace` intersecting the user-key range
    /// `[lo, hi]`.
    pub fn overlapping(
        &self,
        level: usize,
        keyspace: u32,
        lo: &[u8],
        hi: &[u8],
    ) -> Vec<sync::Arc<TableFile>> {
        self.levels[level]
            .iter()
            .filter(|f| f.overlaps(keyspace, lo, hi))
            .cloned()
            .collect()
    }

    pub fn table_count(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    pub fn numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels.iter().flatten().map(|f| f.number)
    }

    /// Checks the level invariants (sorted by keyspace, non-overlapping
    /// within a keyspace in L1+).
    pub fn check(&self) -> Result<(), String> {
        for (level, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if w[0].keyspace > w[1].keyspace
                    || (w[0].keyspace == w[1].keyspace
                        && w[0].largest_user() >= w[1].smallest_user())
                {
                    return Err(format!(
                        "level {level}: tables {} and {} overlap",
                        w[0].number, w[1].number
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Table lifetime under concurrency: the engine's `Version::apply`,
/// `TableFile::mark_obsolete` and `TableFile::drop` (with a `Reaper` on
/// the in-memory `MemFs`), run by loom. Loom's `Arc` models the reference
/// counts, so the model checks that the obsolete flag reaches whichever
/// thread drops the last handle.
///
/// The current version sits in a loom `Mutex`, standing for the `state`
/// lock of `Inner` (a `parking_lot` `RwLock`, which loom cannot run);
/// installing follows `Inner::log_and_apply` without the manifest IO:
/// apply, install, mark the removed tables obsolete, drop them.
#[cfg(all(test, loom))]
mod loom_model {
    use super::{Reaper, TableFile, Version, files};
    use crate::format::key::{self, Kind};
    use crate::format::manifest::{Edit, TableRecord};
    use crate::io::{Fs, MemFs};
    use crate::sync::{Arc, Mutex};
    use std::path::PathBuf;

    fn record(level: usize, number: u64, lo: &[u8], hi: &[u8]) -> TableRecord {
        let ikey = |k: &[u8]| key::encode(k, key::make_tag(number, Kind::Put as u8));
        TableRecord {
            keyspace: 0,
            level,
            number,
            size: 100,
            entries: 2,
            smallest: ikey(lo),
            largest: ikey(hi),
        }
    }

    /// A reader: clones the current version, takes handles to its tables
    /// (as a read view or an iterator does), lets the version go, and uses
    /// the tables: none may be deleted while it holds them.
    fn read(state: &Mutex<Arc<Version>>, deleted: &Mutex<Vec<u64>>) {
        let version = state.lock().clone();
        let held: Vec<Arc<TableFile>> = version.levels.iter().flatten().cloned().collect();
        drop(version);
        for table in &held {
            let gone = deleted.lock().contains(&table.number);
            assert!(
                !gone,
                "table {} deleted while a reader holds it",
                table.number
            );
        }
    }

    /// One edit installed while two readers use the old or the new
    /// version: table 1 moves from level 0 to level 1 (removed and added by
    /// the same edit, so it keeps its handle), table 2 is compacted into
    /// table 3. Table 2 is deleted exactly once, after the last handle to
    /// it is gone; tables 1 and 3 are never deleted.
    #[test]
    fn loom_table_lifetime() {
        crate::sync::model("table_lifetime", 4, || {
            let dir = PathBuf::from("/db");
            let fs = MemFs::new();
            let deleted = Arc::new(Mutex::new(Vec::new()));
            let log = deleted.clone();
            let reaper = std::sync::Arc::new(Reaper::new(
                std::sync::Arc::new(fs.clone()),
                dir.clone(),
                0,
                Box::new(move |n| log.lock().push(n)),
            ));
            for n in 1..=3 {
                drop(fs.create(&files::table(&dir, n)).expect("create"));
            }
            let start = Edit {
                added: vec![record(0, 1, b"a", b"m"), record(0, 2, b"f", b"z")],
                ..Edit::default()
            };
            let (v1, removed) = Version::default()
                .apply(&start, &reaper)
                .expect("first edit");
            assert!(removed.tables.is_empty());
            let state = Arc::new(Mutex::new(Arc::new(v1)));

            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let (state, deleted) = (state.clone(), deleted.clone());
                    loom::thread::spawn(move || read(&state, &deleted))
                })
                .collect();

            let compaction = Edit {
                added: vec![record(1, 1, b"a", b"m"), record(1, 3, b"n", b"z")],
                removed: vec![(0, 1), (0, 2)],
                ..Edit::default()
            };
            let base = state.lock().clone();
            let (v2, removed) = base.apply(&compaction, &reaper).expect("compaction edit");
            *state.lock() = Arc::new(v2);
            removed.mark_obsolete();
            drop(base);

            for r in readers {
                r.join().expect("reader thread");
            }
            let gone = deleted.lock().clone();
            assert_eq!(gone, [2], "the obsolete table deleted exactly once");
            let exists = |n| fs.exists(&files::table(&dir, n));
            assert!(exists(1) && !exists(2) && exists(3));
            drop(state);
            assert_eq!(*deleted.lock(), [2], "a live table is never deleted");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dead value bytes that the version cannot account for are refused
    /// before an edit is built from them: a segment it does not hold,
    /// more bytes than a segment holds; bytes the same edit makes live
    /// count.
    #[test]
    fn value_dead_that_the_version_does_not_hold_is_refused() {
        let reaper = Arc::new(Reaper::new(
            Arc::new(crate::io::MemFs::new()),
            PathBuf::from("/v"),
            0,
            Box::new(|_| {}),
        ));
        let edit = Edit {
            value_live: vec![(7, 100)],
            ..Edit::default()
        };
        let (v, _) = Version::default().apply(&edit, &reaper).expect("apply");
        assert_eq!(v.check_value_dead(&[(7, 100)], &[]), Ok(()));
        assert!(v.check_value_dead(&[(7, 101)], &[]).is_err());
        assert!(v.check_value_dead(&[(8, 1)], &[]).is_err());
        assert!(v.check_value_dead(&[(8, 0)], &[]).is_err());
        assert_eq!(v.check_value_dead(&[(7, 150)], &[(7, 50)]), Ok(()));
        assert_eq!(v.check_value_dead(&[(9, 5)], &[(9, 5)]), Ok(()));
        // What it accepts, `apply` accepts.
        let dead = Edit {
            value_dead: vec![(7, 100)],
            ..Edit::default()
        };
        assert!(v.apply(&dead, &reaper).is_ok());
        let beyond = Edit {
            value_dead: vec![(7, 101)],
            ..Edit::default()
        };
        assert!(v.apply(&beyond, &reaper).is_err());
    }
}
