//! Shared scans: the chunks of flushed segments that long scans read, kept
//! a short while so that scanners over the same range read them once.
//!
//! Several threads scanning the same values (every thread of a report
//! scanning a table, or the contest's range phase) would each read every
//! run into a buffer of their own. [`ChunkShare`] holds the runs of long
//! scans as aligned chunks of [`CHUNK`] bytes of one segment, keyed by
//! (segment, chunk index): the first scanner to need a chunk reads it
//! (one request, aligned, so it can be a direct read; `ValueReads`), a scanner that needs
//! it while that read is in flight waits for it instead of issuing its
//! own, and later ones slice their values out of memory. At most
//! [`SHARE_CHUNKS`] chunks are kept; the least recently used one that is
//! not being read is dropped first (a scanner holding an `Arc` of it keeps
//! its bytes until it is done). Only runs of at least [`SHARE_RUN_MIN`]
//! bytes go through the share, so point reads and short scans read exactly
//! what they need, and a lone long scanner reads what it would read anyway,
//! in aligned pieces.
//!
//! A segment's bytes never change once it is in a version (a journal is
//! sealed and synced, a values file complete), and segment numbers are not
//! reused, so a kept chunk never goes stale; one of a deleted segment is
//! never asked for again and ages out.

use super::policy::{How, ReadPolicy};
use crate::version::segments::SegmentFile;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per chunk: a multiple of the direct-IO alignment, and the size of
/// the largest run a scan reads (`prefetch::RUN_BYTES_MAX`).
pub const CHUNK: u64 = 1 << 20;
/// Chunks kept (32 MiB): room for scanners some way apart. Four scanners
/// of the contest's range phase on two cores drift up to tens of chunks
/// apart; a chunk dropped before the last of them took it is read again.
/// With direct reads (no page cache behind the share) 16 chunks were read
/// 1.5 times over, 32 about 1.1 times (docs/benchmarks.md, eighth session).
pub const SHARE_CHUNKS: usize = 32;
/// Shortest run read through the share.
pub const SHARE_RUN_MIN: u64 = 256 << 10;

/// One chunk's bytes (fewer than [`CHUNK`] at the end of a file), in a
/// buffer aligned for direct IO, and the values in it whose checksum a
/// scan has checked already.
pub struct Chunk {
    raw: Vec<u8>,
    skip: usize,
    len: usize,
    /// One slot per KiB of the chunk: the value starting in that KiB that
    /// passed its check (`checked_tag`), or 0. Scanners sharing the chunk
    /// then check each value once between them, not once each; a value
    /// that shares its KiB with another may be checked again (its slot
    /// was taken), never skipped wrongly (the tag names offset, length and
    /// checksum exactly).
    checked: Box<[AtomicU64]>,
}

/// Bytes per slot of `Chunk::checked`.
const CHECK_SLOT: usize = 1024;

/// The tag of a checked value at `from` in a chunk: valid bit, checksum,
/// length (up to `CHUNK`, 21 bits), offset within its slot (10 bits).
fn checked_tag(from: usize, len: usize, crc: u32) -> u64 {
    1 << 63 | u64::from(crc) << 31 | (len as u64) << 10 | (from % CHECK_SLOT) as u64
}

impl Chunk {
    /// A buffer of `len` bytes starting at an `align`-aligned address.
    pub fn zeroed(len: usize, align: usize) -> Chunk {
        let raw = vec![0u8; len + align];
        let skip = raw.as_ptr().align_offset(align.max(1)).min(align);
        let checked = (0..len.div_ceil(CHECK_SLOT))
            .map(|_| AtomicU64::new(0))
            .collect();
        Chunk {
            raw,
            skip,
            len,
            checked,
        }
    }

    /// This buffer made ready for `len` new bytes (no value checked), if
    /// it can hold them; the bytes are left as they are (the caller
    /// overwrites them, and `truncate`s to what it wrote).
    fn reuse(mut self, len: usize) -> Option<Chunk> {
        if self.raw.len() - self.skip < len || self.checked.len() < len.div_ceil(CHECK_SLOT) {
            return None;
        }
        self.len = len;
        for slot in self.checked.iter_mut() {
            *slot.get_mut() = 0;
        }
        Some(self)
    }

    /// A copy of the value of `len` bytes at `from` if its masked CRC-32C
    /// is `crc` (as `ValuePtr::matches`), computed only if no scan has
    /// checked this value in this chunk before.
    pub fn checked_value(&self, from: usize, len: usize, crc: u32) -> Option<Vec<u8>> {
        let value = self.bytes().get(from..from.checked_add(len)?)?;
        let slot = self.checked.get(from / CHECK_SLOT)?;
        let tag = checked_tag(from, len, crc);
        if slot.load(Ordering::Acquire) != tag {
            if crate::format::coding::crc(value) != crc {
                return None;
            }
            slot.store(tag, Ordering::Release);
        }
        Some(value.to_vec())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.raw[self.skip..self.skip + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.skip..self.skip + self.len]
    }

    /// Keeps the first `len` bytes (a read that met the end of the file).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

pub type ChunkBytes = Arc<Chunk>;

/// One chunk: being read (`None`) or read (`Some`: its bytes, or `None`
/// if the read failed).
struct Cell {
    state: Mutex<Option<Option<ChunkBytes>>>,
    ready: Condvar,
}

struct Slot {
    cell: Arc<Cell>,
    used: u64,
}

#[derive(Default)]
struct Map {
    slots: HashMap<(u64, u64), Slot>,
    tick: u64,
}

/// The chunks kept for scans of one database (see the module comment).
#[derive(Default)]
pub struct ChunkShare {
    map: Mutex<Map>,
    /// Chunks read from files, and waits for a read in flight (stats).
    reads: AtomicU64,
    waits: AtomicU64,
    /// Buffers of dropped chunks nobody held any more, for the next reads
    /// (a new 1 MiB buffer costs a zeroing or 256 page faults).
    spare: Mutex<Vec<Chunk>>,
}

/// Spare buffers kept.
const SPARE_MAX: usize = 4;

impl ChunkShare {
    /// Chunk `index` of `seg`, if it is kept and read; never waits.
    pub fn ready(&self, seg: u64, index: u64) -> Option<ChunkBytes> {
        let cell = touch(&mut self.map.lock(), (seg, index))?;
        cell.state.lock().clone().flatten()
    }

    /// Chunk `index` of `seg`: kept, or waited for if another scanner is
    /// reading it, or read here as `how` says (counted in `policy`).
    /// `None` if it could not be read (the caller then reads each value
    /// alone, which names the damage).
    pub fn get(
        &self,
        seg: &SegmentFile,
        index: u64,
        how: How,
        policy: &ReadPolicy,
    ) -> Option<ChunkBytes> {
        let key = (seg.number, index);
        let (cell, mine) = {
            let mut map = self.map.lock();
            match touch(&mut map, key) {
                Some(cell) => (cell, false),
                None => {
                    if map.slots.len() >= SHARE_CHUNKS
                        && let Some(buffer) = evict_one(&mut map)
                    {
                        let mut spare = self.spare.lock();
                        if spare.len() < SPARE_MAX {
                            spare.push(buffer);
                        }
                    }
                    let cell = Arc::new(Cell {
                        state: Mutex::new(None),
                        ready: Condvar::new(),
                    });
                    let slot = Slot {
                        cell: cell.clone(),
                        used: map.tick,
                    };
                    map.slots.insert(key, slot);
                    (cell, true)
                }
            }
        };
        if !mine {
            let mut state = cell.state.lock();
            if state.is_none() {
                self.waits.fetch_add(1, Ordering::Relaxed);
            }
            while state.is_none() {
                cell.ready.wait(&mut state);
            }
            return state.clone().flatten();
        }
        // The reader publishes whatever happens, so a waiter never waits
        // for a read nobody is doing (a panic inside the read would unwind
        // through `Publish::drop`).
        let mut publish = Publish {
            share: self,
            key,
            cell: &cell,
            bytes: None,
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let len = CHUNK as usize;
        let buffer = self.spare.lock().pop().and_then(|c| c.reuse(len));
        let buffer = buffer.unwrap_or_else(|| Chunk::zeroed(len, crate::io::DIRECT_ALIGN));
        let bytes = seg.read_chunk(buffer, index * CHUNK, how).ok();
        publish.bytes = bytes.map(|(chunk, served)| {
            policy.count(served);
            Arc::new(chunk)
        });
        let bytes = publish.bytes.clone();
        drop(publish);
        bytes
    }

    /// Chunks read from files since the database opened.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Waits for a chunk another scan was reading, since open.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

/// The cell of chunk `key` if the map has it, marked as just used.
fn touch(map: &mut Map, key: (u64, u64)) -> Option<Arc<Cell>> {
    map.tick += 1;
    let tick = map.tick;
    let slot = map.slots.get_mut(&key)?;
    slot.used = tick;
    Some(slot.cell.clone())
}

/// Drops the least recently used chunk that is not being read (if every
/// kept chunk is being read, the share grows by one until they finish);
/// returns its buffer if no scan holds the chunk any more. Called under
/// the map lock, so nobody can take a new reference to the dropped cell.
fn evict_one(map: &mut Map) -> Option<Chunk> {
    let victim = map
        .slots
        .iter()
        .filter(|(_, s)| s.cell.state.lock().is_some())
        .min_by_key(|(_, s)| s.used)
        .map(|(k, _)| *k)?;
    let slot = map.slots.remove(&victim)?;
    let cell = Arc::try_unwrap(slot.cell).ok()?;
    Arc::try_unwrap(cell.state.into_inner()??).ok()
}

/// Hands a chunk read's outcome to its waiters when dropped; a failed read
/// leaves no slot behind, so the next scanner tries again.
struct Publish<'a> {
    share: &'a ChunkShare,
    key: (u64, u64),
    cell: &'a Arc<Cell>,
    bytes: Option<ChunkBytes>,
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        if self.bytes.is_none() {
            let mut map = self.share.map.lock();
            if map
                .slots
                .get(&self.key)
                .is_some_and(|s| Arc::ptr_eq(&s.cell, self.cell))
            {
                map.slots.remove(&self.key);
            }
        }
        *self.cell.state.lock() = Some(self.bytes.take());
        self.cell.ready.notify_all();
    }
}

/// Bytes `offset..offset + len` of a segment out of its chunks (`chunks[0]`
/// is chunk `first`), or `None` if they are not all there (a chunk failed,
/// or the file ended first).
pub fn gather(chunks: &[ChunkBytes], first: u64, offset: u64, len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut at = offset;
    let end = offset + len as u64;
    while at < end {
        let index = at / CHUNK;
        let chunk = chunks.get(usize::try_from(index.checked_sub(first)?).ok()?)?;
        let from = (at % CHUNK) as usize;
        let upto = ((end - index * CHUNK).min(CHUNK)) as usize;
        out.extend_from_slice(chunk.bytes().get(from..upto)?);
        at = index * CHUNK + upto as u64;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(fill: u8, len: usize) -> ChunkBytes {
        let mut c = Chunk::zeroed(len, 4096);
        c.bytes_mut().fill(fill);
        assert_eq!(c.bytes().as_ptr() as usize % 4096, 0);
        Arc::new(c)
    }

    #[test]
    fn a_value_is_checked_once_per_offset_length_and_checksum() {
        let mut c = Chunk::zeroed(8192, 4096);
        c.bytes_mut()[1100..1200].fill(7);
        let crc = crate::format::coding::crc(&c.bytes()[1100..1200]);
        assert_eq!(c.checked_value(1100, 100, crc).expect("matches"), [7; 100]);
        assert_ne!(c.checked[1].load(Ordering::Relaxed), 0, "remembered");
        assert!(
            c.checked_value(1100, 100, crc ^ 1).is_none(),
            "other checksum"
        );
        assert!(c.checked_value(1100, 99, crc).is_none(), "other length");
        assert!(c.checked_value(1101, 100, crc).is_none(), "other offset");
        assert_eq!(c.checked_value(1100, 100, crc).expect("again"), [7; 100]);
        assert!(c.checked_value(8100, 100, crc).is_none(), "past the end");
    }

    #[test]
    fn a_reused_buffer_forgets_its_checks() {
        let mut c = Chunk::zeroed(8192, 4096);
        c.bytes_mut()[..100].fill(3);
        let crc = crate::format::coding::crc(&c.bytes()[..100]);
        assert!(c.checked_value(0, 100, crc).is_some());
        c.truncate(200);
        let c = c.reuse(8192).expect("room for a whole chunk");
        assert_eq!(c.bytes().len(), 8192);
        assert_eq!(c.bytes().as_ptr() as usize % 4096, 0, "still aligned");
        assert!(c.checked.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        assert!(Chunk::zeroed(1024, 4096).reuse(8192).is_none(), "too small");
    }

    #[test]
    fn gather_takes_bytes_across_chunk_boundaries() {
        let n = CHUNK as usize;
        let chunks = [chunk(1, n), chunk(2, n), chunk(3, 100)];
        let got = gather(&chunks, 4, 4 * CHUNK + CHUNK - 3, 5).expect("across a boundary");
        assert_eq!(got, [1, 1, 1, 2, 2]);
        let got = gather(&chunks, 4, 6 * CHUNK + 90, 10).expect("in the short last chunk");
        assert_eq!(got, [3; 10]);
        // Past the short last chunk, before the first, beyond the list.
        assert!(gather(&chunks, 4, 6 * CHUNK + 95, 10).is_none());
        assert!(gather(&chunks, 4, 3 * CHUNK, 10).is_none());
        assert!(gather(&chunks, 4, 7 * CHUNK, 1).is_none());
        assert_eq!(
            gather(&chunks, 4, 5 * CHUNK, 0).expect("empty"),
            Vec::<u8>::new()
        );
    }
}
