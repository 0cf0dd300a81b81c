//! Journal segments as the value log: the files separated values live in.
//!
//! Every journal is a segment. A memtable holds an `Arc<SegmentFile>` of
//! its journal; once a flush makes tables point into it, the version holds
//! one too, with the count of bytes tables still point to (`live`).
//! Compaction lowers `live` as it drops pointers; at zero the segment
//! leaves the version. A segment that no version and no memtable needs is
//! marked obsolete, and its file is deleted when the last `Arc` drops —
//! the same rule as tables (version/mod.rs), so a reader holding an old
//! view can still read every value it can see.

use super::{Reaper, files};
use crate::format::vptr::ValuePtr;
use crate::io::FileRead;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// One journal segment, opened for reading on first use.
pub struct SegmentFile {
    pub number: u64,
    reader: OnceLock<Arc<dyn FileRead>>,
    obsolete: AtomicBool,
    reaper: Arc<Reaper>,
}

impl SegmentFile {
    /// The handle for segment `number`: the one already in use if any, so
    /// the memtable, every version and every reader share one obsolete
    /// flag and one open file.
    pub fn get(reaper: &Arc<Reaper>, number: u64) -> Arc<SegmentFile> {
        let mut map = reaper.segments.lock();
        if let Some(s) = map.get(&number).and_then(Weak::upgrade) {
            return s;
        }
        let s = Arc::new(SegmentFile {
            number,
            reader: OnceLock::new(),
            obsolete: AtomicBool::new(false),
            reaper: reaper.clone(),
        });
        map.insert(number, Arc::downgrade(&s));
        s
    }

    fn reader(&self) -> io::Result<&Arc<dyn FileRead>> {
        if let Some(r) = self.reader.get() {
            return Ok(r);
        }
        let r = self
            .reaper
            .fs
            .open(&files::journal(&self.reaper.dir, self.number))?;
        // Two readers may race to open; either handle serves.
        Ok(self.reader.get_or_init(|| r))
    }

    /// Reads the value `ptr` names. `Ok(None)` if the bytes read do not
    /// match the pointer's length and checksum (after one re-read, so a
    /// transient flip on the way from the device is not called damage).
    pub fn read(&self, ptr: &ValuePtr) -> io::Result<Option<Vec<u8>>> {
        let reader = self.reader()?;
        let mut buf = vec![0u8; ptr.len as usize];
        for _ in 0..2 {
            reader.read_exact_at(&mut buf, ptr.offset)?;
            if ptr.matches(&buf) {
                return Ok(Some(buf));
            }
        }
        Ok(None)
    }

    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Drop for SegmentFile {
    fn drop(&mut self) {
        {
            let mut map = self.reaper.segments.lock();
            // A new handle for the same number may have replaced ours.
            if map.get(&self.number).is_some_and(|w| w.strong_count() == 0) {
                map.remove(&self.number);
            }
        }
        if self.obsolete.load(Ordering::Acquire) {
            // A failed delete leaves an orphan that the next open removes.
            let _ = self
                .reaper
                .fs
                .remove(&files::journal(&self.reaper.dir, self.number));
        }
    }
}

/// A segment in a version: its handle and the bytes tables point to.
#[derive(Clone)]
pub struct SegmentLive {
    pub live: u64,
    pub file: Arc<SegmentFile>,
}
