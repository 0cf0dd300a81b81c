//! Versions: immutable sets of live tables per level.
//!
//! A [`Version`] is never changed after it is built; a flush or compaction
//! makes a new one from the current one and a manifest [`Edit`]. Readers,
//! iterators and compactions hold an `Arc<Version>`, which holds an
//! `Arc<TableFile>` per table. A table removed by an edit is marked
//! obsolete, and its file is deleted when the last `Arc<TableFile>` drops,
//! that is when no version (and so no iterator or snapshot read) can still
//! reach it.
//!
//! Level 0 holds flushed memtables in flush order (overlapping ranges,
//! newest last). Levels 1.. hold non-overlapping tables sorted by key.

pub mod apply;
pub mod files;

use crate::format::key;
use crate::format::manifest::{Edit, TableRecord};
use crate::io::Fs;
use crate::limits::LEVELS;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Deletes obsolete table files; shared by every [`TableFile`] of a database.
pub struct Reaper {
    pub fs: Arc<dyn Fs>,
    pub dir: PathBuf,
    /// Called with the table number after its file is deleted (evicts
    /// cached handles).
    pub on_delete: Box<dyn Fn(u64) + Send + Sync>,
}

/// A live table file.
pub struct TableFile {
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
    /// True if `user_key` is inside this table's key range.
    pub fn covers(&self, user_key: &[u8]) -> bool {
        self.smallest_user() <= user_key && user_key <= self.largest_user()
    }
    /// True if this table's range intersects `[lo, hi]` (user keys).
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        !(self.largest_user() < lo || self.smallest_user() > hi)
    }
    pub fn record(&self, level: usize) -> TableRecord {
        TableRecord {
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
        if self.obsolete.load(Ordering::Acquire) {
            let path = files::table(&self.reaper.dir, self.number);
            // A failed delete leaves an orphan that the next open removes.
            let _ = self.reaper.fs.remove(&path);
            (self.reaper.on_delete)(self.number);
        }
    }
}

/// The live tables, per level.
#[derive(Clone, Default)]
pub struct Version {
    pub levels: [Vec<Arc<TableFile>>; LEVELS],
}

impl Version {
    /// A new version: `self` with `edit` applied. Returns the version and
    /// the tables the edit removed (to be marked obsolete once the new
    /// version is installed). `Err` if the edit does not fit this version
    /// (removes a table that is not there), which means a damaged manifest.
    pub fn apply(
        &self,
        edit: &Edit,
        reaper: &Arc<Reaper>,
    ) -> Result<(Version, Vec<Arc<TableFile>>), String> {
        let mut v = self.clone();
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
            let file = match removed.iter().position(|f| f.number == rec.number) {
                Some(i) => removed.swap_remove(i),
                None => Arc::new(TableFile::new(rec, reaper.clone())),
            };
            v.levels[rec.level].push(file);
        }
        v.levels[0].sort_by_key(|f| f.number);
        for level in v.levels.iter_mut().skip(1) {
            level.sort_by(|a, b| key::compare(&a.smallest, &b.smallest));
        }
        Ok((v, removed))
    }

    /// An edit that recreates this version from nothing.
    pub fn snapshot_edit(&self) -> Edit {
        let mut e = Edit::default();
        for (level, files) in self.levels.iter().enumerate() {
            e.added.extend(files.iter().map(|f| f.record(level)));
        }
        e
    }

    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|f| f.size).sum()
    }

    /// The table of `level` (>= 1) whose range may hold `user_key`.
    pub fn find(&self, level: usize, user_key: &[u8]) -> Option<&Arc<TableFile>> {
        let files = &self.levels[level];
        let i = files.partition_point(|f| f.largest_user() < user_key);
        files.get(i).filter(|f| f.smallest_user() <= user_key)
    }

    /// Tables of `level` intersecting the user-key range `[lo, hi]`.
    pub fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<TableFile>> {
        self.levels[level]
            .iter()
            .filter(|f| f.overlaps(lo, hi))
            .cloned()
            .collect()
    }

    pub fn table_count(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    pub fn numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels.iter().flatten().map(|f| f.number)
    }

    /// Checks the level invariants (sorted, non-overlapping in L1+).
    pub fn check(&self) -> Result<(), String> {
        for (level, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if w[0].largest_user() >= w[1].smallest_user() {
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
