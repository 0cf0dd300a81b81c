//! The reader registry: `readers/` in the database directory, one file
//! per live follower (docs/architecture.md §Followers).
//!
//! A follower creates `readers/<pid>.<n>.reader`, holds an exclusive
//! advisory lock (`flock`) on it for its whole life, and rewrites it in
//! place (format.md §Reader records) before it reads files the record did
//! not cover yet. The writer, before deleting or recycling a table, a
//! values file, a value stream or a journal, loads every record
//! ([`Holds::load`]) and keeps the files any of them holds, retrying
//! later (`Reaper::retry_deferred`). A record whose lock nobody holds was
//! left by a dead process: the writer ignores it and removes it. A record
//! that does not decode (being rewritten, damaged) holds every file.
//!
//! This works on the host file system only (`std::fs`): databases on the
//! simulated one have no followers.

use crate::format::reader::ReaderRecord;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Name of the registry directory inside a database directory.
pub const READERS_DIR: &str = "readers";
/// Suffix of a record file.
const SUFFIX: &str = ".reader";
/// Age after which an unlocked record not yet renamed into place is a
/// dead process's: a registration creates, locks and renames it at once.
const TMP_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

pub fn readers_dir(dir: &Path) -> PathBuf {
    dir.join(READERS_DIR)
}

/// A follower's own record, locked while it lives; removed on drop.
pub struct Registration {
    file: File,
    path: PathBuf,
}

impl Registration {
    /// Creates and locks this follower's record, holding every file
    /// until the first `update`.
    pub fn new(dir: &Path) -> std::io::Result<Registration> {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let readers = readers_dir(dir);
        std::fs::create_dir_all(&readers)?;
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}.{n}", std::process::id());
        // Made under another name and renamed once locked and written, so
        // a writer never finds it unlocked (and removes it as a dead
        // process's) or empty.
        let tmp = readers.join(format!("{name}.tmp"));
        let path = readers.join(format!("{name}{SUFFIX}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.try_lock().map_err(|e| match e {
            std::fs::TryLockError::Error(e) => e,
            std::fs::TryLockError::WouldBlock => {
                std::io::Error::other(format!("{} is locked", tmp.display()))
            }
        })?;
        let mut reg = Registration { file, path };
        reg.update(&ReaderRecord::default())?;
        std::fs::rename(&tmp, &reg.path)?;
        Ok(reg)
    }

    /// Replaces the record. While the bytes are being rewritten a
    /// writer may read a mix, which does not decode and so holds
    /// everything: the old and the new record both stay covered.
    pub fn update(&mut self, record: &ReaderRecord) -> std::io::Result<()> {
        let bytes = record.encode();
        self.file.write_all_at(&bytes, 0)?;
        self.file.set_len(bytes.len() as u64)?;
        self.file.flush()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Removed while still locked: a writer never finds it unlocked
        // and mistakes it for a dead process's.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What live followers hold, as the writer loads it before deleting.
#[derive(Debug, Default)]
pub struct Holds {
    records: Vec<ReaderRecord>,
    /// A live follower whose record did not decode: everything is held.
    all: bool,
}

impl Holds {
    /// Loads every live follower's record in `dir`'s registry, removing
    /// those of dead processes. No registry: nothing is held.
    pub fn load(dir: &Path) -> Holds {
        let mut holds = Holds::default();
        let Ok(entries) = std::fs::read_dir(readers_dir(dir)) else {
            return holds;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(file) = File::open(&path) else {
                continue; // removed meanwhile: its follower closed
            };
            match file.try_lock_shared() {
                Ok(()) => {
                    // Nobody holds it: its process is gone. Or, for a file
                    // not yet renamed into place, a follower between
                    // creating and locking it: such a file is removed only
                    // once it is old enough that no registration can still
                    // be under way.
                    let registering = !path.to_string_lossy().ends_with(SUFFIX)
                        && file
                            .metadata()
                            .and_then(|m| m.modified())
                            .ok()
                            .and_then(|t| t.elapsed().ok())
                            .is_none_or(|age| age < TMP_STALE_AFTER);
                    if !registering && file.try_lock().is_ok() {
                        let _ = std::fs::remove_file(&path);
                    }
                    continue;
                }
                // Locked but not yet renamed into place: a follower
                // registering, which has read nothing yet.
                Err(std::fs::TryLockError::WouldBlock)
                    if !path.to_string_lossy().ends_with(SUFFIX) =>
                {
                    continue;
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(_)) => {
                    holds.all = true;
                    continue;
                }
            }
            let data = std::fs::read(&path).unwrap_or_default();
            match ReaderRecord::decode(&data) {
                Some(r) => holds.records.push(r),
                None => holds.all = true,
            }
        }
        holds
    }

    /// Whether a live follower may still read file `number` (a journal
    /// if `journal`).
    pub fn held(&self, number: u64, journal: bool) -> bool {
        self.all || self.records.iter().any(|r| r.holds(number, journal))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn live_dead_registering_and_garbled_records() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert!(!Holds::load(dir).held(1, true), "no registry holds nothing");
        // Registered: holds everything until its first update.
        let mut live = Registration::new(dir).unwrap();
        assert!(Holds::load(dir).held(1, false));
        live.update(&ReaderRecord {
            journal_floor: 10,
            newer_from: 20,
            numbers: vec![3],
        })
        .unwrap();
        let h = Holds::load(dir);
        assert!(h.held(3, false) && h.held(12, true) && h.held(25, false));
        assert!(!h.held(4, false) && !h.held(12, false) && !h.held(5, true));
        // A dead process's record (nobody holds its lock) holds nothing
        // and is removed; so is a dead registration's temporary file, once
        // old enough. A fresh unlocked one may be a registration between
        // creating and locking it: it stays.
        let dead = readers_dir(dir).join("1.0.reader");
        std::fs::write(&dead, ReaderRecord::default().encode()).unwrap();
        let fresh_tmp = readers_dir(dir).join("1.1.tmp");
        std::fs::write(&fresh_tmp, b"").unwrap();
        let dead_tmp = readers_dir(dir).join("1.2.tmp");
        std::fs::write(&dead_tmp, b"").unwrap();
        let old = std::time::SystemTime::now() - TMP_STALE_AFTER * 2;
        File::options()
            .write(true)
            .open(&dead_tmp)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert!(!Holds::load(dir).held(4, false));
        assert!(!dead.exists() && !dead_tmp.exists());
        assert!(fresh_tmp.exists(), "a registration under way is left alone");
        std::fs::remove_file(&fresh_tmp).unwrap();
        // A locked record that does not decode (being rewritten) holds
        // everything; a locked temporary file (registering) nothing.
        let garbled = readers_dir(dir).join("2.0.reader");
        std::fs::write(&garbled, b"CAIRNRDR torn").unwrap();
        let lock = File::open(&garbled).unwrap();
        lock.lock().unwrap();
        assert!(Holds::load(dir).held(4, false));
        drop(lock);
        let registering = readers_dir(dir).join("2.1.tmp");
        std::fs::write(&registering, b"").unwrap();
        let lock = File::open(&registering).unwrap();
        lock.lock().unwrap();
        assert!(!Holds::load(dir).held(4, false));
        assert!(!garbled.exists(), "the unlocked garbled record stays");
        drop(lock);
        // Dropped: its record is gone.
        let path = live.path.clone();
        drop(live);
        assert!(!path.exists());
    }
}
