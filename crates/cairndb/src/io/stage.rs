//! A journal written with direct IO, staged through a memory-mapped ring
//! (`Options::journal_direct`; format.md §Stage ring, architecture.md
//! §Direct journal).
//!
//! An append copies its bytes into the ring, a shared mapping of the
//! database's `STAGE` file: once there they are in the page cache and
//! survive kill -9, with no system call. A flusher thread writes each
//! whole chunk (`chunk` bytes, set at open) of the ring to the journal file with one
//! direct write; `sync` writes the chunks left and the unaligned tail
//! (padded with zeros to a page) itself, then fdatasyncs. The ring space
//! of a chunk is reused only once the chunk is in the file.
//!
//! Positions: `appended` (bytes appended), `flushed` (whole chunks in the
//! file; ring bytes below it may be reused), `in_file` (bytes readable from
//! the file: `flushed`, or more after a tail write). Readers of the journal
//! (`StagedRead`) take bytes below `flushed` from the file and the rest
//! from the ring, holding `reuse` shared while they copy so `flushed`
//! cannot move under them.
//!
//! The mapping outlives its journal (`Ring`, `StageRings`): once a
//! journal is wholly in its file and its writer gone, the next journal
//! staged through the same file takes the ring still mapped.
//!
//! Written here rather than taken from a crate: the ring's layout is part
//! of the on-disk format and its reuse rule is the engine's.

use crate::format::stage::{FLUSHED_AT, HEADER_LEN, HEADER_USED, encode_header};
use parking_lot::{Condvar, Mutex, RwLock};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const PAGE: usize = super::DIRECT_ALIGN;

/// The shared mapping of a stage file. It outlives the journal written
/// through it: once that journal is wholly in its file and its writer is
/// gone (nobody reads the ring of it then: readers read below `in_file`
/// from the file), the ring goes back to the database's [`StageRings`]
/// and the next journal or stream staged through the same file takes it
/// as it is, its pages mapped. Mapping a ring afresh for each of them
/// cost the contest's writers a page fault per 4 KiB of values stored
/// into it, and an unmap of each at its seal.
struct Ring {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory shared by the threads of the
// journal written through it; who may write which bytes when is the ring
// protocol of this module (appends write only at and past `appended`,
// below `flushed + ring`; readers and the flusher read only below
// `appended`, and readers only above `in_file`), and every access goes
// through raw pointers, never through references spanning bytes another
// thread writes. A ring is bound to one journal at a time: `StageRings`
// hands it to the next one only after the last one's writer is gone and
// all of it is in its file, under its `reuse` lock.
unsafe impl Send for Ring {}
unsafe impl Sync for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly what `mmap` returned, and this
        // runs once, when no journal can reach the ring any more.
        unsafe {
            let _ = rustix::mm::munmap(self.base.cast(), self.len);
        }
    }
}

/// The rings of a database's stage files that no journal is written
/// through now, by path, for the next journal or stream staged through
/// the same file (`Fs::open_staged`). Dropped with the database, which
/// unmaps them (a ring still bound to a journal's readers lives as long
/// as they do).
#[derive(Default, Clone)]
pub struct StageRings {
    idle: Arc<Mutex<std::collections::HashMap<std::path::PathBuf, Arc<Ring>>>>,
}

impl std::fmt::Debug for StageRings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageRings")
            .field("idle", &self.idle.lock().len())
            .finish()
    }
}

impl StageRings {
    /// The idle ring of `stage`, if it is `len` bytes mapped.
    fn take(&self, stage: &Path, len: usize) -> Option<Arc<Ring>> {
        self.idle.lock().remove(stage).filter(|r| r.len == len)
    }

    /// Keeps `ring`, mapping `stage`, for the next journal staged through
    /// it.
    fn give(&self, stage: &Path, ring: Arc<Ring>) {
        self.idle.lock().insert(stage.to_path_buf(), ring);
    }
}

#[derive(Default)]
struct Flow {
    stop: bool,
    /// The first failed direct write: the journal is unusable from then on.
    error: Option<(io::ErrorKind, String)>,
}

struct Shared {
    ring_map: Arc<Ring>,
    /// Bytes of the ring (`Options::journal_ring_bytes`), a multiple of
    /// `chunk`.
    ring: usize,
    /// Bytes of one direct write (`limits::JOURNAL_CHUNK_BYTES` for the
    /// journal, `STREAM_CHUNK_BYTES` for a value stream), a multiple of a
    /// page that divides `ring`.
    chunk: usize,
    appended: AtomicU64,
    flushed: AtomicU64,
    in_file: AtomicU64,
    /// Serializes the direct writes (flusher, `sync`, drop).
    io: Mutex<()>,
    /// Held shared while a reader copies from the ring; `flushed` moves
    /// only under it exclusively.
    reuse: RwLock<()>,
    flow: Mutex<Flow>,
    cv: Condvar,
    /// The journal opened `O_DIRECT` (or plain where the file system
    /// refuses it, e.g. tmpfs: the same protocol, through the page cache).
    direct: File,
}

impl Shared {
    /// Pointer to ring byte of journal offset `at`.
    fn ring_at(&self, at: u64) -> *mut u8 {
        // SAFETY: `at % ring < ring` and the mapping holds the header page
        // and `ring` bytes.
        unsafe {
            self.ring_map
                .base
                .add(HEADER_LEN + (at % self.ring as u64) as usize)
        }
    }

    fn failed(&self) -> io::Result<()> {
        match &self.flow.lock().error {
            Some((kind, what)) => Err(io::Error::new(*kind, what.clone())),
            None => Ok(()),
        }
    }

    fn fail(&self, e: &io::Error) {
        let mut flow = self.flow.lock();
        flow.error
            .get_or_insert((e.kind(), format!("direct journal write: {e}")));
        self.cv.notify_all();
    }

    /// Writes the whole chunks below `upto` not yet in the file. Caller
    /// holds `io`.
    fn write_chunks(&self, upto: u64) -> io::Result<()> {
        loop {
            let at = self.flushed.load(Ordering::Acquire);
            if at + self.chunk as u64 > upto {
                return Ok(());
            }
            // SAFETY: a chunk starts at a multiple of `chunk`, which divides
            // the ring, so its ring bytes are contiguous; they lie below
            // `appended`, so no append writes them until `flushed` passes
            // them, which only this thread does below.
            let chunk = unsafe { std::slice::from_raw_parts(self.ring_at(at), self.chunk) };
            self.direct.write_all_at(chunk, at)?;
            // Recorded in the header before the ring space may be reused,
            // so recovery never takes reused ring bytes (format.md §Stage
            // ring).
            // SAFETY: offset FLUSHED_AT of the page-aligned mapping is 8-byte
            // aligned; only the holder of `io` writes it, nobody in this
            // process reads it.
            unsafe {
                AtomicU64::from_ptr(self.ring_map.base.add(FLUSHED_AT).cast())
                    .store(at + self.chunk as u64, Ordering::Release);
            }
            {
                let _reuse = self.reuse.write();
                self.flushed
                    .store(at + self.chunk as u64, Ordering::Release);
            }
            self.in_file
                .fetch_max(at + self.chunk as u64, Ordering::AcqRel);
            let _flow = self.flow.lock();
            self.cv.notify_all();
        }
    }

    /// Writes the bytes from `flushed` to `upto` (less than a chunk),
    /// zero-padded to a page. Caller holds `io` and is the appender (no
    /// append runs): the padding lies past `appended`.
    fn write_tail(&self, upto: u64) -> io::Result<()> {
        let flushed = self.flushed.load(Ordering::Acquire);
        let in_file = self.in_file.load(Ordering::Acquire);
        // Nothing appended since the last tail write (or trim).
        if upto == flushed || in_file >= upto {
            return Ok(());
        }
        // From the page the last tail write ended in: a run of small
        // synced commits writes each page about once, not the whole
        // partial chunk each time.
        let at = flushed.max(in_file - in_file % PAGE as u64);
        let n = (upto - at) as usize;
        let padded = n.next_multiple_of(PAGE);
        // SAFETY: `at` is page aligned, in the chunk that starts at
        // `flushed`, and `upto < flushed + chunk` (whole chunks were written
        // first), so the bytes are contiguous in the ring. Bytes
        // `n..padded` are past `appended`: nobody reads them, and no
        // append runs meanwhile.
        let tail = unsafe {
            std::ptr::write_bytes(self.ring_at(at).add(n), 0, padded - n);
            std::slice::from_raw_parts(self.ring_at(at), padded)
        };
        self.direct.write_all_at(tail, at)?;
        self.in_file.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// Everything appended into the file (not synced).
    fn write_all(&self) -> io::Result<()> {
        let _io = self.io.lock();
        let upto = self.appended.load(Ordering::Acquire);
        self.write_chunks(upto)?;
        self.write_tail(upto)
    }
}

fn flusher(shared: Arc<Shared>) {
    loop {
        {
            let mut flow = shared.flow.lock();
            loop {
                if flow.stop || flow.error.is_some() {
                    return;
                }
                let ahead = shared.appended.load(Ordering::Acquire)
                    - shared.flushed.load(Ordering::Acquire);
                if ahead >= shared.chunk as u64 {
                    break;
                }
                shared.cv.wait(&mut flow);
            }
        }
        let _io = shared.io.lock();
        let upto = shared.appended.load(Ordering::Acquire);
        if let Err(e) = shared.write_chunks(upto) {
            shared.fail(&e);
            return;
        }
    }
}

/// A journal appended through the ring (see the module docs).
pub struct StagedWrite {
    shared: Arc<Shared>,
    /// Where the ring goes once this journal is wholly in its file, and
    /// the stage file it maps.
    rings: StageRings,
    stage: std::path::PathBuf,
    /// The journal opened for `fdatasync`, pre-writing and trimming.
    plain: File,
    /// The journal opened for reading, for [`StagedRead`].
    read: Arc<dyn super::FileRead>,
    number: u64,
    /// Whether the ring's header names this journal yet: done at the first
    /// append, when the journal before it is wholly in its file.
    bound: bool,
    len: u64,
    size: u64,
    /// The file has blocks below this (`FileWrite::reserve`).
    reserved: u64,
    flusher: Option<std::thread::JoinHandle<()>>,
}

/// Opens journal `number` at `path` (which exists: created or renamed from
/// a free file by the caller) for staged appends through `stage`, created
/// at its full size if missing, written out in direct writes of `chunk`
/// bytes; `read` is the file opened for reading.
pub fn open(
    path: &Path,
    stage: &Path,
    number: u64,
    (ring, chunk): (usize, usize),
    read: Arc<dyn super::FileRead>,
    rings: &StageRings,
) -> io::Result<StagedWrite> {
    if chunk == 0 || !chunk.is_multiple_of(PAGE) || !ring.is_multiple_of(chunk) || ring < 2 * chunk
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "staging ring must be a multiple of the chunk, at least two, and the chunk of pages",
        ));
    }
    let plain = OpenOptions::new().write(true).open(path)?;
    let size = plain.metadata()?.len();
    let direct = match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => plain.try_clone()?,
        Err(e) => return Err(e),
    };
    let map_len = HEADER_LEN + ring;
    let ring_map = match rings.take(stage, map_len) {
        Some(r) => r,
        None => Arc::new(map_ring(stage, map_len)?),
    };
    let shared = Arc::new(Shared {
        ring_map,
        ring,
        chunk,
        appended: AtomicU64::new(0),
        flushed: AtomicU64::new(0),
        in_file: AtomicU64::new(0),
        io: Mutex::new(()),
        reuse: RwLock::new(()),
        flow: Mutex::new(Flow::default()),
        cv: Condvar::new(),
        direct,
    });
    let worker = shared.clone();
    let flusher = std::thread::Builder::new()
        .name("cairndb-journal".into())
        .spawn(move || flusher(worker))?;
    Ok(StagedWrite {
        shared,
        rings: rings.clone(),
        stage: stage.to_path_buf(),
        read,
        plain,
        number,
        bound: false,
        len: 0,
        size,
        reserved: size,
        flusher: Some(flusher),
    })
}

/// Maps the stage file `stage`, `len` bytes (made so if it is not),
/// every byte of it with a block on the device (`allocate`).
fn map_ring(stage: &Path, len: usize) -> io::Result<Ring> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(stage)?;
    if file.metadata()?.len() != len as u64 {
        file.set_len(len as u64)?;
    }
    allocate(&file, len as u64)?;
    // SAFETY: a fresh shared read-write mapping of a file at least `len`
    // long; the pointer is kept in `Ring`, which unmaps it.
    let base = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            &file,
            0,
        )?
    };
    Ok(Ring {
        base: base.cast(),
        len,
    })
}

/// Gives every byte of `file` below `len` a block on the device before the
/// file is mapped. A store through a shared mapping into a hole makes the
/// kernel find a block at that moment; on a full file system it has none
/// and answers with SIGBUS, which kills the host process. Allocated here,
/// a full disk is an `Io` error from open instead, and later stores into
/// the ring never need a block.
///
/// `fallocate` (mode 0: blocks for the holes, data kept) where the file
/// system has it. Where it has not, a file that already has blocks for
/// all of `len` is kept as it is; else its bytes are written with zeros.
/// That happens only on a fresh or resized ring: an old ring's records
/// were read by recovery before the journal was opened.
fn allocate(file: &File, len: u64) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
            if file.metadata()?.blocks() * 512 >= len {
                return Ok(());
            }
            super::blocks::write_zeros(file, 0, len)?;
            file.sync_data()
        }
        Err(e) => Err(e.into()),
    }
}

impl StagedWrite {
    /// Waits until the ring has room past `len`; returns how much.
    fn room(&self) -> io::Result<usize> {
        let free = |s: &Shared| s.ring as u64 - (self.len - s.flushed.load(Ordering::Acquire));
        let s = &*self.shared;
        if free(s) > 0 {
            return Ok(free(s) as usize);
        }
        let mut flow = s.flow.lock();
        loop {
            if let Some((kind, what)) = &flow.error {
                return Err(io::Error::new(*kind, what.clone()));
            }
            if free(s) > 0 {
                return Ok(free(s) as usize);
            }
            // The flusher has a whole ring to write: it is awake.
            s.cv.notify_all();
            s.cv.wait(&mut flow);
        }
    }
}

impl super::FileWrite for StagedWrite {
    fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        self.shared.failed()?;
        if !self.bound {
            let header = encode_header(self.shared.ring as u64, self.number);
            // SAFETY: the header page is the mapping's first page; only
            // the appender writes it, and nobody reads it in this process.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    header.as_ptr(),
                    self.shared.ring_map.base,
                    HEADER_USED,
                );
            }
            self.bound = true;
        }
        while !data.is_empty() {
            let n = self.room()?.min(data.len());
            // Up to the end of the ring, then from its start.
            let at = self.len;
            let ring = self.shared.ring;
            let first = n.min(ring - (at % ring as u64) as usize);
            // SAFETY: bytes `at .. at + n` lie in `[appended, flushed +
            // ring)` (`room`), which nobody reads or writes but this
            // appender; `data` is a separate buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), self.shared.ring_at(at), first);
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(first),
                    self.shared.ring_at(at + first as u64),
                    n - first,
                );
            }
            self.len += n as u64;
            self.shared.appended.store(self.len, Ordering::Release);
            data = &data[n..];
            let chunk = self.shared.chunk as u64;
            if at / chunk != self.len / chunk {
                let _flow = self.shared.flow.lock();
                self.shared.cv.notify_all();
            }
        }
        self.size = self.size.max(self.len);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.shared.failed()?;
        if let Err(e) = self.shared.write_all() {
            self.shared.fail(&e);
            return Err(e);
        }
        self.size = self.size.max(self.len.next_multiple_of(PAGE as u64));
        self.plain.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn prewrite(&mut self, up_to: u64) -> io::Result<()> {
        if up_to <= self.size {
            return Ok(());
        }
        self.shared.failed()?;
        // Appends before it may lie only in the ring, over a hole in the
        // file: they are written first, so the zeros go past everything
        // appended (never under it, where the flusher writes) and no hole
        // is left that a later tail write would need blocks for. A full
        // device met here leaves them in the ring, to be written again:
        // the direct writes only move `flushed` and `in_file` once done.
        if let Err(e) = self.shared.write_all() {
            if e.kind() != io::ErrorKind::StorageFull {
                self.shared.fail(&e);
            }
            return Err(e);
        }
        let from = self.plain.metadata()?.len();
        assert!(
            from >= self.len,
            "every appended byte is in the file once written out"
        );
        // Through the page cache, as `PosixWrite` does; a direct write
        // over these pages later takes them out of the cache.
        super::blocks::write_zeros(&self.plain, from.max(self.size), up_to)?;
        self.size = up_to;
        super::sync_after_prewrite(|| self.plain.sync_data())
    }

    fn reserve(&mut self, up_to: u64, ahead: u64) -> io::Result<()> {
        // To the page's end: a sync writes the tail padded to a page, and
        // on a file system of blocks smaller than a page a padding past
        // the blocks reserved would need one the full device may lack.
        let up_to = up_to.next_multiple_of(PAGE as u64);
        super::blocks::reserve_blocks(&self.plain, &mut self.reserved, up_to, ahead)
    }

    fn trim(&mut self) -> io::Result<()> {
        self.shared.failed()?;
        self.shared.write_all()?;
        let file_len = self.plain.metadata()?.len();
        if file_len != self.len || super::blocks::reserved_past(self.reserved, self.len) {
            // Also when the size stays: a truncate to the same size gives
            // back the blocks reserved past the end.
            self.plain.set_len(self.len)?;
            self.plain.sync_all()?;
        }
        self.size = self.len;
        self.reserved = super::blocks::reserved_after_trim(self.reserved, self.len);
        Ok(())
    }

    fn reader(&self) -> Option<Arc<dyn super::FileRead>> {
        Some(Arc::new(StagedRead {
            file: self.read.clone(),
            shared: self.shared.clone(),
        }))
    }
}

impl Drop for StagedWrite {
    fn drop(&mut self) {
        {
            let mut flow = self.shared.flow.lock();
            flow.stop = true;
            self.shared.cv.notify_all();
        }
        if let Some(f) = self.flusher.take() {
            let _ = f.join();
        }
        // Best effort: what fails to reach the file stays in the ring,
        // where recovery finds it (and readers, in this process).
        if self.shared.failed().is_ok() && self.shared.write_all().is_ok() {
            // The flusher is gone and no append comes; readers read below
            // `in_file`, which is now `appended`, from the file alone (they
            // look at `in_file` under `reuse`, which this waits for), so
            // the ring may take the next journal's bytes.
            let _reuse = self.shared.reuse.write();
            assert_eq!(
                self.shared.in_file.load(Ordering::Acquire),
                self.shared.appended.load(Ordering::Acquire),
                "a staged journal is wholly in its file before its ring is reused"
            );
            self.rings.give(&self.stage, self.shared.ring_map.clone());
        }
    }
}

/// Reads a staged journal: the file below `flushed`, the ring above.
pub struct StagedRead {
    file: Arc<dyn super::FileRead>,
    shared: Arc<Shared>,
}

impl super::FileRead for StagedRead {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let s = &*self.shared;
        let end = offset + buf.len() as u64;
        if end <= s.in_file.load(Ordering::Acquire) {
            return self.file.read_exact_at(buf, offset);
        }
        if end > s.appended.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of a staged journal",
            ));
        }
        let reuse = s.reuse.read();
        // Looked at again under `reuse`: once the writer has gone and
        // given the ring to another journal, everything is in the file.
        if end <= s.in_file.load(Ordering::Acquire) {
            drop(reuse);
            return self.file.read_exact_at(buf, offset);
        }
        let split = s.flushed.load(Ordering::Acquire).clamp(offset, end);
        let (low, high) = buf.split_at_mut((split - offset) as usize);
        // Ring bytes from `split` on are not reused while `reuse` is held
        // (reuse needs `flushed` past them); a range crossing the ring's
        // end comes in two copies.
        let first = high.len().min(s.ring - (split % s.ring as u64) as usize);
        // SAFETY: the bytes `split .. end` were appended (below
        // `appended`) and are not reused while `reuse` is held, so nobody
        // writes them; `high` is our own buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(s.ring_at(split), high.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                s.ring_at(split + first as u64),
                high.as_mut_ptr().add(first),
                high.len() - first,
            );
        }
        drop(reuse);
        if !low.is_empty() {
            self.file.read_exact_at(low, offset)?;
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.shared.appended.load(Ordering::Acquire)
    }

    fn advise_random(&self) {
        self.file.advise_random();
    }

    fn will_need(&self) {
        self.file.will_need();
    }

    /// Bytes in the file: as the file answers. Otherwise yes (the ring is
    /// memory; a range straddling `flushed` may wait for its part in the
    /// file).
    fn cached(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        if end <= self.shared.in_file.load(Ordering::Acquire) {
            return self.file.cached(offset, len);
        }
        len > 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::format::stage::{Header, decode_header, unwrap_from};
    use crate::io::FileWrite;
    use crate::limits::JOURNAL_CHUNK_BYTES as CHUNK;

    const RING: usize = 2 * CHUNK;

    /// Deterministic bytes, different at every offset of a run.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn staged_at(dir: &Path, name: &str, number: u64) -> StagedWrite {
        staged_with(dir, name, number, &StageRings::default())
    }

    fn staged_with(dir: &Path, name: &str, number: u64, rings: &StageRings) -> StagedWrite {
        let path = dir.join(name);
        File::create(&path).unwrap();
        let read = crate::io::Fs::open(&crate::io::PosixFs, &path).unwrap();
        open(
            &path,
            &dir.join("STAGE"),
            number,
            (RING, CHUNK),
            read,
            rings,
        )
        .unwrap()
    }

    fn staged(dir: &Path, number: u64) -> StagedWrite {
        staged_at(dir, "j", number)
    }

    #[test]
    fn appends_read_back_while_in_the_ring_and_after() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = staged(dir.path(), 7);
        let reader = w.reader().unwrap();
        let mut model = Vec::new();
        // Pieces from 1 byte to 300 KiB, and one larger than the ring,
        // which must wait for the flusher part way.
        let mut sizes: Vec<usize> = (0..60).map(|i| 1 + (i * 7919 * 37) % (300 << 10)).collect();
        sizes.insert(30, RING + CHUNK / 2);
        for (i, &n) in sizes.iter().enumerate() {
            let piece = bytes(i as u64 + 1, n);
            w.append(&piece).unwrap();
            model.extend_from_slice(&piece);
            assert_eq!(w.len(), model.len() as u64);
            // The newest bytes, a range across the ring's newest chunk
            // boundary, and old bytes long since in the file.
            let len = model.len();
            for (at, n) in [
                (len - n.min(4096), n.min(4096)),
                (len / 2, 5000.min(len - len / 2)),
                (0, 100.min(len)),
            ] {
                let mut got = vec![0u8; n];
                reader.read_exact_at(&mut got, at as u64).unwrap();
                assert!(got == model[at..at + n], "piece {i}: bytes {at}+{n} differ");
            }
        }
        let mut past = [0u8; 1];
        assert!(reader.read_exact_at(&mut past, model.len() as u64).is_err());
        w.sync().unwrap();
        let file = std::fs::read(dir.path().join("j")).unwrap();
        assert!(file.len() >= model.len() && file.len().is_multiple_of(PAGE));
        assert!(
            file[..model.len()] == model[..],
            "the file holds every synced byte"
        );
        assert!(
            file[model.len()..].iter().all(|&b| b == 0),
            "tail padded with zeros"
        );
        w.trim().unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("j")).unwrap().len(),
            model.len() as u64
        );
        // A sync after the trim writes no tail again.
        w.sync().unwrap();
        drop(w);
        assert_eq!(
            std::fs::metadata(dir.path().join("j")).unwrap().len(),
            model.len() as u64
        );
        let mut all = vec![0u8; model.len()];
        reader.read_exact_at(&mut all, 0).unwrap();
        assert!(all == model);
    }

    #[test]
    fn small_synced_appends_write_only_their_pages() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = staged(dir.path(), 5);
        let reader = w.reader().unwrap();
        let mut model = Vec::new();
        for i in 0..500u64 {
            let piece = bytes(i + 11, 1000 + (i as usize * 37) % 3000);
            w.append(&piece).unwrap();
            model.extend_from_slice(&piece);
            w.sync().unwrap();
        }
        let file = std::fs::read(dir.path().join("j")).unwrap();
        assert!(file[..model.len()] == model[..]);
        let mut all = vec![0u8; model.len()];
        reader.read_exact_at(&mut all, 0).unwrap();
        assert!(all == model);
    }

    #[test]
    fn unsynced_appends_are_in_the_stage_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = staged(dir.path(), 9);
        let model = bytes(3, 3 * CHUNK + 12345);
        for piece in model.chunks(70_000) {
            w.append(piece).unwrap();
        }
        // What another process sees of the files now, as after kill -9:
        // the stage file first (its `flushed` never runs ahead of the
        // journal file).
        let stage = std::fs::read(dir.path().join("STAGE")).unwrap();
        let journal = std::fs::read(dir.path().join("j")).unwrap();
        let Some(Header {
            ring,
            journal: n,
            flushed,
        }) = decode_header(&stage, stage.len() as u64)
        else {
            panic!("stage header does not decode");
        };
        assert_eq!((ring, n), (RING as u64, 9));
        assert!(flushed % CHUNK as u64 == 0 && flushed <= journal.len() as u64);
        let flushed = flushed as usize;
        assert!(
            journal[..flushed] == model[..flushed],
            "file below `flushed`"
        );
        let rest = unwrap_from(&stage, ring, flushed as u64);
        let n = model.len() - flushed;
        assert!(n <= RING);
        assert!(rest[..n] == model[flushed..], "ring from `flushed` on");
        drop(w);
        // Dropped: everything written into the file.
        assert!(std::fs::read(dir.path().join("j")).unwrap()[..model.len()] == model[..]);
    }

    #[test]
    fn a_new_journal_binds_the_ring_at_its_first_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = staged(dir.path(), 1);
        w.append(b"one").unwrap();
        w.sync().unwrap();
        drop(w);
        let mut w = staged_at(dir.path(), "j2", 2);
        let header = |d: &Path| {
            let f = std::fs::read(d.join("STAGE")).unwrap();
            decode_header(&f, f.len() as u64).unwrap()
        };
        assert_eq!(header(dir.path()).journal, 1, "not before the first append");
        w.append(b"two").unwrap();
        assert_eq!(header(dir.path()).journal, 2);
        assert_eq!(header(dir.path()).flushed, 0);
    }

    #[test]
    fn a_ring_goes_to_the_next_journal_once_the_last_is_in_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let rings = StageRings::default();
        let mut w = staged_with(dir.path(), "j1", 1, &rings);
        let reader = w.reader().unwrap();
        let first = bytes(5, 2 * CHUNK + 777);
        w.append(&first).unwrap();
        let base = w.shared.ring_map.base;
        // Bound to a live journal: not idle.
        assert!(rings.idle.lock().is_empty());
        drop(w);
        assert_eq!(
            rings.idle.lock().len(),
            1,
            "the ring is idle once its journal is in its file"
        );
        let mut w = staged_with(dir.path(), "j2", 2, &rings);
        assert_eq!(
            w.shared.ring_map.base, base,
            "the next journal takes the idle ring"
        );
        assert!(rings.idle.lock().is_empty());
        let second = bytes(6, CHUNK + 99);
        w.append(&second).unwrap();
        // The first journal's reader reads its file, not the ring the
        // second one overwrites.
        let mut got = vec![0u8; first.len()];
        reader.read_exact_at(&mut got, 0).unwrap();
        assert!(got == first);
        let mut got = vec![0u8; second.len()];
        w.reader().unwrap().read_exact_at(&mut got, 0).unwrap();
        assert!(got == second);
        w.sync().unwrap();
        let stage = std::fs::read(dir.path().join("STAGE")).unwrap();
        assert_eq!(
            decode_header(&stage, stage.len() as u64).unwrap().journal,
            2
        );
    }

    #[test]
    fn a_ring_whose_journal_failed_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let rings = StageRings::default();
        let mut w = staged_with(dir.path(), "j1", 1, &rings);
        w.append(&bytes(7, 100)).unwrap();
        w.shared.fail(&io::Error::other("injected"));
        drop(w);
        // Its bytes may be in the ring alone, where its readers find them.
        assert!(rings.idle.lock().is_empty());
    }
}
