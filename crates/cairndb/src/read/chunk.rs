//! Chunks of flushed segments as long scans hold them: aligned buffers
//! read whole (`Chunk`), the values lent out of them (`Value`), the cell a
//! chunk being read is waited for in (`Cell`, `Publish`), and the
//! recycling of their buffers (`Recycler`). Shared by the scan share
//! (`share.rs`) and the stream share (`stream_share.rs`).

use super::policy::{How, Served};
use crate::io::AlignedBuf;
use crate::version::segments::SegmentFile;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes per chunk (`limits::SCAN_CHUNK_BYTES`): at least the largest run
/// a scan reads (`prefetch::RUN_BYTES_MAX`), so a run spans at most two
/// chunks. Against 1 MiB chunks, 4 MiB ones made the contest's range
/// phase read 2,430–2,724 against 2,351–2,652 MB/s (five runs each,
/// alternated), and four scanners spent about a quarter less CPU, mostly
/// in the kernel (a quarter of the requests, wake-ups and pool jobs).
pub const CHUNK: u64 = crate::limits::SCAN_CHUNK_BYTES;
const _: () = assert!(CHUNK.is_multiple_of(crate::io::DIRECT_ALIGN as u64));
/// One chunk's bytes (fewer than [`CHUNK`] at the end of a file), in a
/// buffer aligned for direct IO (`AlignedBuf`), and the values in it
/// whose checksum a scan has checked already.
pub struct Chunk {
    buf: AlignedBuf,
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

/// Values this long or longer are checked by every scan that takes them:
/// their length does not fit a tag.
const TAG_LEN_LIMIT: usize = 1 << 21;

/// The tag of a checked value at `from` in a chunk: valid bit, checksum,
/// length (below `TAG_LEN_LIMIT`, 21 bits), offset within its slot (10
/// bits).
fn checked_tag(from: usize, len: usize, crc: u32) -> u64 {
    1 << 63 | u64::from(crc) << 31 | (len as u64) << 10 | (from % CHECK_SLOT) as u64
}

impl Chunk {
    /// A chunk of `len` zero bytes starting at an `align`-aligned address
    /// (`AlignedBuf::zeroed`), no value checked.
    pub fn zeroed(len: usize, align: usize) -> std::io::Result<Chunk> {
        let checked = (0..len.div_ceil(CHECK_SLOT))
            .map(|_| AtomicU64::new(0))
            .collect();
        Ok(Chunk {
            buf: AlignedBuf::zeroed(len, align)?,
            checked,
        })
    }

    /// This buffer made ready for `len` new bytes (no value checked), if
    /// it can hold them; the bytes are left as they are (the caller
    /// overwrites them, and `truncate`s to what it wrote).
    pub(crate) fn reuse(mut self, len: usize) -> Option<Chunk> {
        if self.checked.len() < len.div_ceil(CHECK_SLOT) || !self.buf.resize_within(len) {
            return None;
        }
        for slot in self.checked.iter_mut() {
            *slot.get_mut() = 0;
        }
        Some(self)
    }

    /// Whether the value of `len` bytes at `from` has the masked CRC-32C
    /// `crc` (as `ValuePtr::matches`), computed only if no scan has
    /// checked this value in this chunk before.
    pub fn check_value(&self, from: usize, len: usize, crc: u32) -> bool {
        let Some(value) = from
            .checked_add(len)
            .and_then(|end| self.bytes().get(from..end))
        else {
            return false;
        };
        if len >= TAG_LEN_LIMIT {
            return crate::format::coding::crc(value) == crc;
        }
        let Some(slot) = self.checked.get(from / CHECK_SLOT) else {
            return false;
        };
        let tag = checked_tag(from, len, crc);
        if slot.load(Ordering::Acquire) != tag {
            if crate::format::coding::crc(value) != crc {
                return false;
            }
            slot.store(tag, Ordering::Release);
        }
        true
    }

    pub fn bytes(&self) -> &[u8] {
        self.buf.bytes()
    }

    /// The most bytes this buffer can hold (`reuse`).
    pub fn capacity(&self) -> usize {
        self.buf.capacity().min(self.checked.len() * CHECK_SLOT)
    }

    /// The bytes, to write into: tests only (a read fills them through
    /// `read_from`).
    #[cfg(test)]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.bytes_mut()
    }

    /// Keeps the first `len` bytes: tests only (`read_from` truncates).
    #[cfg(test)]
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// This chunk filled from `seg` at `offset` as `how` says
    /// (`SegmentFile::read_chunk`), with how the read was served.
    pub fn read_from(
        mut self,
        seg: &SegmentFile,
        offset: u64,
        how: How,
    ) -> std::io::Result<(Chunk, Served)> {
        let served = seg.read_chunk(&mut self.buf, offset, how)?;
        Ok((self, served))
    }
}

pub type ChunkBytes = Arc<Chunk>;

/// A value a read produced: owned, or lent out of a kept chunk (checked
/// against its pointer already), copied only if the caller asks to own
/// it. Scanners that borrow values (`Iter::next_ref`) then read them out
/// of the shared chunk with no copy of their own.
#[derive(Clone)]
pub enum Value {
    Owned(Vec<u8>),
    Lent {
        chunk: ChunkBytes,
        from: usize,
        len: usize,
    },
}

impl Value {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Value::Owned(v) => v,
            // In range: `Run::slice_chunks` checked it (`check_value`).
            Value::Lent { chunk, from, len } => &chunk.bytes()[*from..*from + *len],
        }
    }

    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Value::Owned(v) => v,
            lent => lent.as_slice().to_vec(),
        }
    }
}

/// One chunk: being read (`None`) or read (`Some`: its bytes, or `None`
/// if the read failed).
pub(crate) struct Cell {
    pub(crate) state: Mutex<Option<Option<ChunkBytes>>>,
    pub(crate) ready: Condvar,
    /// Some thread is reading the chunk. A cell read ahead is inserted
    /// unclaimed: its job waits in the worker pool's queue, and the first
    /// scan to need it claims it and reads it itself instead of waiting
    /// (the job, when it runs, finds it claimed and does nothing). So a
    /// scan never waits for a read that no running thread is doing, even
    /// when every worker is busy waiting.
    claimed: AtomicBool,
}

impl Cell {
    pub(crate) fn new(claimed: bool) -> Arc<Cell> {
        Arc::new(Cell {
            state: Mutex::new(None),
            ready: Condvar::new(),
            claimed: AtomicBool::new(claimed),
        })
    }

    /// Claims the read of this cell; false if someone has.
    pub(crate) fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    /// Waits for the read someone else claimed; its bytes, `None` if it
    /// failed. Counts in `waits` a wait for a read still in flight.
    pub(crate) fn wait(&self, waits: &AtomicU64) -> Option<ChunkBytes> {
        let mut state = self.state.lock();
        if state.is_none() {
            waits.fetch_add(1, Ordering::Relaxed);
        }
        while state.is_none() {
            self.ready.wait(&mut state);
        }
        state.clone().flatten()
    }
}

/// Buffers of dropped chunks, reused for the next reads instead of
/// unmapped (a new buffer costs a mapping and its page faults): up to
/// `SPARE` spares nobody holds, and up to `DRAINING` dropped chunks a scan
/// still held, watched until it lets go. Without the watching, four
/// scanners holding the chunks of their windows made most dropped chunks'
/// buffers unmapped, and many reads mapped and faulted in a new one (in
/// one profiled run of the contest's range phase the kernel zeroing new
/// huge pages under `pread` was 14 % of its samples).
#[derive(Default)]
pub(crate) struct Recycler<const SPARE: usize, const DRAINING: usize> {
    pub(super) spare: Mutex<Vec<Chunk>>,
    pub(super) draining: Mutex<Vec<ChunkBytes>>,
}

impl<const SPARE: usize, const DRAINING: usize> Recycler<SPARE, DRAINING> {
    /// A dropped chunk: its buffer a spare now if nobody holds it, else
    /// once they let go.
    pub(crate) fn drop_chunk(&self, bytes: ChunkBytes) {
        match Arc::try_unwrap(bytes) {
            Ok(buffer) => self.keep(buffer),
            Err(held) => self.drain(held),
        }
    }

    /// Watches `held`, a dropped chunk a scan still holds; past `DRAINING`
    /// the oldest watched is let go (its buffer unmapped when its last
    /// holder drops it).
    pub(crate) fn drain(&self, held: ChunkBytes) {
        let mut draining = self.draining.lock();
        if draining.len() >= DRAINING {
            draining.remove(0);
        }
        draining.push(held);
    }

    /// Keeps `buffer` for the next read if room is left.
    pub(crate) fn keep(&self, buffer: Chunk) {
        let mut spare = self.spare.lock();
        if spare.len() < SPARE {
            spare.push(buffer);
        }
    }

    /// Moves the buffers of watched chunks no scan holds any more to the
    /// spares (the ones past `SPARE` are unmapped).
    pub(crate) fn recycle(&self) {
        let free: Vec<Chunk> = {
            let mut draining = self.draining.lock();
            let mut free = Vec::new();
            let mut i = 0;
            while i < draining.len() {
                if Arc::strong_count(&draining[i]) == 1 {
                    if let Ok(chunk) = Arc::try_unwrap(draining.swap_remove(i)) {
                        free.push(chunk);
                    }
                } else {
                    i += 1;
                }
            }
            free
        };
        for buffer in free {
            self.keep(buffer);
        }
    }

    /// Bytes of the spares' buffers.
    pub(crate) fn spare_bytes(&self) -> u64 {
        let spare = self.spare.lock();
        spare.iter().map(|c| c.capacity() as u64).sum()
    }

    /// Unmaps spares, the last kept first, until those left take at most
    /// `keep` bytes.
    pub(crate) fn trim_bytes(&self, keep: u64) {
        let gone: Vec<Chunk> = {
            let mut spare = self.spare.lock();
            let mut total = 0u64;
            let at = spare
                .iter()
                .position(|c| {
                    total += c.capacity() as u64;
                    total > keep
                })
                .unwrap_or(spare.len());
            spare.split_off(at)
        };
        drop(gone);
    }

    /// Unmaps the spares past the first `keep`.
    pub(crate) fn trim(&self, keep: usize) {
        let gone: Vec<Chunk> = {
            let mut spare = self.spare.lock();
            let at = keep.min(spare.len());
            spare.split_off(at)
        };
        drop(gone);
    }

    /// A spare that can hold `len` bytes, made ready for them
    /// (`Chunk::reuse`), after recycling what scans let go.
    pub(crate) fn take(&self, len: usize) -> Option<Chunk> {
        self.recycle();
        let mut spare = self.spare.lock();
        let fit = spare.iter().position(|c| c.capacity() >= len)?;
        spare.swap_remove(fit).reuse(len)
    }
}

/// Hands a chunk read's outcome to its cell's waiters when dropped, so a
/// waiter never waits for a read nobody is doing (a panic inside the read
/// unwinds through here); a failed read first calls `forget`, which drops
/// the cell's slot if it still holds this cell, so the next scan tries
/// again.
pub(crate) struct Publish<'a, F: FnMut()> {
    pub(crate) cell: &'a Arc<Cell>,
    pub(crate) bytes: Option<ChunkBytes>,
    pub(crate) forget: F,
}

impl<F: FnMut()> Drop for Publish<'_, F> {
    fn drop(&mut self) {
        if self.bytes.is_none() {
            (self.forget)();
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
        let mut c = Chunk::zeroed(len, 4096).expect("a buffer");
        c.bytes_mut().fill(fill);
        assert_eq!(c.bytes().as_ptr() as usize % 4096, 0);
        Arc::new(c)
    }

    #[test]
    fn a_value_is_checked_once_per_offset_length_and_checksum() {
        let mut c = Chunk::zeroed(8192, 4096).expect("a buffer");
        c.bytes_mut()[1100..1200].fill(7);
        let crc = crate::format::coding::crc(&c.bytes()[1100..1200]);
        assert!(c.check_value(1100, 100, crc), "matches");
        assert_ne!(c.checked[1].load(Ordering::Relaxed), 0, "remembered");
        assert!(!c.check_value(1100, 100, crc ^ 1), "other checksum");
        assert!(!c.check_value(1100, 99, crc), "other length");
        assert!(!c.check_value(1101, 100, crc), "other offset");
        assert!(c.check_value(1100, 100, crc), "again");
        assert!(!c.check_value(8100, 100, crc), "past the end");
        // A damaged value is not passed on the strength of a slot.
        c.checked[1].store(0, Ordering::Relaxed);
        c.bytes_mut()[1150] ^= 1;
        assert!(!c.check_value(1100, 100, crc), "damaged");
    }

    #[test]
    fn a_value_too_long_for_a_tag_is_checked_every_time() {
        // A tag holds 21 bits of length: a longer value is never passed on
        // the strength of a slot, whatever another length's tag holds.
        let len = TAG_LEN_LIMIT + 100;
        let mut c = Chunk::zeroed(len + 4096, 4096).expect("a buffer");
        c.bytes_mut()[..len].fill(5);
        let crc = crate::format::coding::crc(&c.bytes()[..len]);
        assert!(c.check_value(0, len, crc), "matches");
        assert_eq!(c.checked[0].load(Ordering::Relaxed), 0, "not remembered");
        c.bytes_mut()[len / 2] ^= 1;
        assert!(
            !c.check_value(0, len, crc),
            "damage found on the next check"
        );
    }

    #[test]
    fn a_reused_buffer_forgets_its_checks() {
        let mut c = Chunk::zeroed(8192, 4096).expect("a buffer");
        c.bytes_mut()[..100].fill(3);
        let crc = crate::format::coding::crc(&c.bytes()[..100]);
        assert!(c.check_value(0, 100, crc));
        c.truncate(200);
        let c = c.reuse(8192).expect("room for a whole chunk");
        assert_eq!(c.bytes().len(), 8192);
        assert_eq!(c.bytes().as_ptr() as usize % 4096, 0, "still aligned");
        assert!(c.checked.iter().all(|s| s.load(Ordering::Relaxed) == 0));
        assert!(
            Chunk::zeroed(1024, 4096)
                .expect("a buffer")
                .reuse(8192)
                .is_none(),
            "too small"
        );
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
