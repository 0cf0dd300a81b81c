//! Journal segments as the value log: the files separated values live in.
//!
//! Every journal is a segment, and so is every values file (values a
//! compaction moved out of sparsely live segments). A memtable holds an `Arc<SegmentFile>` of
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
use crate::io::{AlignedBuf, How, Mapped, Served};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// The three files a value pointer may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    Journal,
    /// A value stream (`version/streams.rs`): one key range's separated
    /// values of one journal's unsynced writes.
    Stream,
    Values,
}

/// One value segment, opened for reading on first use.
pub struct SegmentFile {
    pub number: u64,
    reader: OnceLock<Arc<dyn FileRead>>,
    /// A second handle for direct reads (`Fs::open_direct`).
    direct: OnceLock<Arc<dyn FileRead>>,
    /// A memory map of the flushed segment (`Fs::map`), made on first use;
    /// `None` where it cannot be mapped.
    mapped: OnceLock<Option<Mapped>>,
    obsolete: AtomicBool,
    /// A journal this process created (journal format 3, every record
    /// numbered): kept for reuse when obsolete rather than deleted.
    recyclable: AtomicBool,
    /// What file it is, once asked (or set by its creator).
    kind: OnceLock<SegmentKind>,
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
            direct: OnceLock::new(),
            mapped: OnceLock::new(),
            obsolete: AtomicBool::new(false),
            recyclable: AtomicBool::new(false),
            kind: OnceLock::new(),
            reaper: reaper.clone(),
        });
        map.insert(number, Arc::downgrade(&s));
        s
    }

    /// The handle of journal `number`, which this process has just
    /// created: every record in it is numbered, so once obsolete its file
    /// may be reused (`Reaper::new_journal`).
    /// `reader`: the journal writer's own reader, where plain reads of the
    /// file would miss its newest bytes (`FileWrite::reader`).
    pub fn new_journal(
        reaper: &Arc<Reaper>,
        number: u64,
        reader: Option<Arc<dyn FileRead>>,
    ) -> Arc<SegmentFile> {
        let segment = SegmentFile::get(reaper, number);
        segment.recyclable.store(true, Ordering::Release);
        let _ = segment.kind.set(SegmentKind::Journal);
        if let Some(r) = reader {
            r.advise_random();
            let _ = segment.reader.set(r);
        }
        segment
    }

    /// The handle of value stream `number`, which this process has just
    /// created (`version/streams.rs`); `reader` as for `new_journal` (a
    /// staged stream's newest bytes are in its ring).
    pub fn new_stream(
        reaper: &Arc<Reaper>,
        number: u64,
        reader: Option<Arc<dyn FileRead>>,
    ) -> Arc<SegmentFile> {
        let segment = SegmentFile::get(reaper, number);
        let _ = segment.kind.set(SegmentKind::Stream);
        if let Some(r) = reader {
            r.advise_random();
            let _ = segment.reader.set(r);
        }
        segment
    }

    /// The handle of `slot`, opened (buffered or direct) on first use.
    fn handle<'a>(
        &self,
        slot: &'a OnceLock<Arc<dyn FileRead>>,
        direct: bool,
    ) -> io::Result<&'a Arc<dyn FileRead>> {
        if let Some(r) = slot.get() {
            return Ok(r);
        }
        // File numbers are unique: a segment is one of the three kinds.
        let (fs, path) = (&self.reaper.fs, self.path());
        let r = if direct {
            fs.open_direct(&path)?
        } else {
            fs.open(&path)?
        };
        if !direct {
            r.advise_random();
        }
        // Two readers may race to open; either handle serves.
        Ok(slot.get_or_init(|| r))
    }

    /// Asks the page cache to read the whole segment in the background
    /// (`FileRead::will_need`); a segment that cannot be opened is left
    /// alone (its reads will report that).
    pub fn will_need(&self) {
        if let Ok(r) = self.handle(&self.reader, false) {
            r.will_need();
        }
    }

    /// Reads the value `ptr` names. `Ok(None)` if the bytes read do not
    /// match the pointer's length and checksum (after one re-read, so a
    /// transient flip on the way from the device is not called damage).
    /// `direct`: one aligned direct read around the value, bypassing the
    /// page cache — for segments no longer written to; a journal still
    /// being appended to is read through the page cache, where its newest
    /// bytes are.
    pub fn read(&self, ptr: &ValuePtr, direct: bool) -> io::Result<Option<Vec<u8>>> {
        let len = ptr.len as usize;
        let checked = crate::io::read_checked(|| {
            let value = if direct {
                crate::io::read_direct(&**self.handle(&self.direct, true)?, ptr.offset, len)?
            } else {
                let mut buf = vec![0u8; len];
                self.handle(&self.reader, false)?
                    .read_exact_at(&mut buf, ptr.offset)?;
                buf
            };
            io::Result::Ok(if ptr.matches(&value) {
                Ok(value)
            } else {
                Err(())
            })
        })?;
        Ok(checked.ok())
    }

    /// The segment's memory map (`io/map.rs`), made on the first call as
    /// long as the file is then; `None` where it cannot be mapped. Only
    /// for flushed segments, whose files no longer change.
    pub fn mapped(&self) -> Option<&Mapped> {
        self.mapped
            .get_or_init(|| self.reaper.fs.map(&self.path()).ok().flatten())
            .as_ref()
    }

    /// Reads `len` raw bytes at `offset`, unchecked (the caller checks
    /// each value it slices out against its pointer): one aligned direct
    /// read if `direct`, else through the page cache. For scans that read
    /// the values of several pointers with one request.
    pub fn read_span(&self, offset: u64, len: usize, direct: bool) -> io::Result<Vec<u8>> {
        if direct {
            crate::io::read_direct(&**self.handle(&self.direct, true)?, offset, len)
        } else {
            let mut buf = vec![0u8; len];
            self.handle(&self.reader, false)?
                .read_exact_at(&mut buf, offset)?;
            Ok(buf)
        }
    }

    /// Up to `chunk`'s length of bytes at `offset` (fewer where the file
    /// ends: `chunk` is truncated to what was read), read as `how` says:
    /// chunk reads of shared scans (`read/share.rs`; `offset` is a
    /// multiple of `io::DIRECT_ALIGN`, and so is the chunk's length).
    /// Returns how the read was served.
    pub fn read_chunk(&self, chunk: &mut AlignedBuf, offset: u64, how: How) -> io::Result<Served> {
        let len = chunk.bytes().len();
        if how == How::CachedElseDirect {
            let reader = self.handle(&self.reader, false)?;
            let upto = usize::try_from(self.flushed_len()?.saturating_sub(offset))
                .map_or(len, |n| n.min(len));
            if upto > 0 && reader.read_cached(&mut chunk.bytes_mut()[..upto], offset)? {
                chunk.truncate(upto);
                return Ok(Served::Cached);
            }
        }
        if !how.direct_misses() {
            let got = self
                .handle(&self.reader, false)?
                .read_at(chunk.bytes_mut(), offset)?;
            chunk.truncate(got);
            return Ok(Served::Buffered);
        }
        // A direct read must ask for whole aligned blocks, also at the end
        // of the file: read the file's last block whole and cut after.
        let handle = self.handle(&self.direct, true)?;
        let end = handle
            .len()
            .next_multiple_of(crate::io::DIRECT_ALIGN as u64);
        let want = usize::try_from(end.saturating_sub(offset)).map_or(len, |w| w.min(len));
        let got = handle.read_at(&mut chunk.bytes_mut()[..want], offset)?;
        let got =
            got.min(usize::try_from(handle.len().saturating_sub(offset)).unwrap_or(usize::MAX));
        chunk.truncate(got);
        Ok(Served::Direct)
    }

    /// The descriptor of the handle for direct reads (opened on first
    /// use), for batched reads through io_uring; `None` where the file
    /// system has none.
    #[cfg(unix)]
    pub fn direct_fd(&self) -> io::Result<Option<std::os::fd::RawFd>> {
        Ok(self.handle(&self.direct, true)?.raw_fd())
    }

    /// The length of a flushed segment's file, in bytes: from the handle
    /// for direct reads, which is opened only for flushed segments (the
    /// buffered handle may have been opened while the journal was still
    /// written to, and a handle's length is taken at open).
    pub fn flushed_len(&self) -> io::Result<u64> {
        Ok(self.handle(&self.direct, true)?.len())
    }

    /// The value `ptr` names if the page cache holds all of it and it
    /// matches the pointer; `Ok(None)` otherwise (nothing waited for).
    pub fn read_cached(&self, ptr: &ValuePtr) -> io::Result<Option<Vec<u8>>> {
        let value = self.read_span_cached(ptr.offset, ptr.len as usize)?;
        Ok(value.filter(|v| ptr.matches(v)))
    }

    /// `read_span` through the page cache if it holds every byte;
    /// `Ok(None)` (nothing waited for) if it does not or cannot tell. The
    /// buffer is allocated only after the page cache said yes.
    pub fn read_span_cached(&self, offset: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
        let reader = self.handle(&self.reader, false)?;
        if !reader.cached(offset, len as u64) {
            return Ok(None);
        }
        let mut buf = vec![0u8; len];
        let got = reader.read_at(&mut buf, offset)?;
        Ok((got == len).then_some(buf))
    }

    /// What file the segment is, looked up once: a journal or a value
    /// stream (values in write order), or a values file (values a
    /// compaction wrote, in key order).
    pub fn kind(&self) -> SegmentKind {
        *self.kind.get_or_init(|| {
            let (fs, dir) = (&self.reaper.fs, &self.reaper.dir);
            if fs.exists(&files::journal(dir, self.number)) {
                SegmentKind::Journal
            } else if fs.exists(&files::stream(dir, self.number)) {
                SegmentKind::Stream
            } else {
                SegmentKind::Values
            }
        })
    }

    /// True if the segment's values lie in write order (a journal or a
    /// value stream): what settling moves into key order.
    pub fn in_write_order(&self) -> bool {
        self.kind() != SegmentKind::Values
    }

    /// The segment's file: its journal, value stream or values file.
    pub fn path(&self) -> std::path::PathBuf {
        let dir = &self.reaper.dir;
        match self.kind() {
            SegmentKind::Journal => files::journal(dir, self.number),
            SegmentKind::Stream => files::stream(dir, self.number),
            SegmentKind::Values => files::values(dir, self.number),
        }
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
        if self.obsolete.load(Ordering::Acquire) && !self.reaper.closed.load(Ordering::Acquire) {
            let journal = self.kind() == SegmentKind::Journal;
            // A follower still reading it: deleted later, never recycled
            // (its bytes would change under the follower).
            if self.reaper.defer_if_held(self.number, journal, self.path()) {
                return;
            }
            if self.recyclable.load(Ordering::Acquire) && self.reaper.keep_free(self.number) {
                return;
            }
            // A failed delete leaves an orphan that the next open removes.
            let _ = self.reaper.fs.remove(&self.path());
        }
    }
}

/// A segment in a version: its handle and the bytes tables point to.
#[derive(Clone)]
pub struct SegmentLive {
    pub live: u64,
    /// Bytes tables pointed to at most since the database was opened
    /// (`live` at open): `live / added` is the share still live, which
    /// decides when compactions move the rest out (value GC).
    pub added: u64,
    pub file: Arc<SegmentFile>,
}

impl SegmentLive {
    /// True if at most `ratio` of the bytes this segment held are live.
    pub fn mostly_dead(&self, ratio: f64) -> bool {
        (self.live as f64) <= ratio * (self.added as f64)
    }
}
