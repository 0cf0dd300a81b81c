//! Long scans over value streams: each flushed stream read whole, once,
//! and shared by the long scans that meet its values.
//!
//! A value stream holds the values of one key range written during one
//! journal, in the order they were written (docs/architecture.md §Value
//! streams). A scan in key order meets a stream's values in random order,
//! and over one key range it meets every journal's stream of that range.
//! Read value by value, each scanner issues one small read per value and
//! copies it; eight scanners of the contest's range phase then spent their
//! two cores copying pages out of the page cache. So a long scan takes a
//! flushed stream whole instead, a chunk ([`CHUNK`] bytes; a stream is
//! usually one) at a time: the first scan whose window needs chunks that
//! are not kept starts a read of each on the worker threads, so the device
//! has them all in flight at once, and waits for them; a scan that needs a
//! chunk being read waits for that read; later ones slice their values out
//! of memory with no copy (`Value::Lent`), each value's checksum checked
//! once between them (`Chunk::check_value`).
//!
//! A scan taking a first chunk of a stream also starts reading the
//! journal's next stream, its next key range (`ReadView::
//! read_streams_ahead`), so the device reads ahead of the scans.
//!
//! Chunks are kept up to [`STREAM_SHARE_BYTES`] of buffers, or half the
//! memory the process could still take if that is less. Room is made by
//! dropping the least recently used chunk that no scan holds values of
//! (chunks read ahead that no scan has reached yet last):
//! scans over one key range use every journal's stream of it throughout,
//! so they hold those, and the chunks of ranges every scan has left go
//! first. Where every kept chunk is held (scanners spread over more key
//! ranges than the budget has room for), a scan reads its values alone,
//! so the share's memory stays within its budget.
//!
//! A flushed stream's bytes never change and segment numbers are not
//! reused, so a kept chunk never goes stale.

use super::chunk::{CHUNK, Cell, Chunk, ChunkBytes, Publish, Recycler};
use super::policy::{How, ReadPolicy};
use crate::version::segments::SegmentFile;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most bytes of chunk buffers kept. The contest's range phase (4 GiB in
/// 32 key ranges) has 128 MiB of streams per range: this holds the range
/// the scans are in and the ones on either side, for scanners drifting
/// apart.
pub const STREAM_SHARE_BYTES: u64 = 512 << 20;
/// Of the memory the process could still take (`Host::mem_available`,
/// a memory cgroup's limit included) with the share's own buffers, the
/// share keeps at most this fraction: under a tight cap the budget
/// shrinks instead of the process being killed for memory.
const MEMORY_FRACTION: u64 = 2;
/// Fewest bytes kept, whatever the memory: a few chunks.
const STREAM_SHARE_BYTES_MIN: u64 = 4 * CHUNK;
/// Milliseconds between two looks at the memory available.
const LOOK_EVERY_MS: u64 = 1000;
/// Buffers are mapped in multiples of this, so a buffer freed by one
/// stream fits the next of about the same size.
const BUFFER_STEP: usize = 1 << 20;
/// Spare buffers kept for the next reads. Room for a window's reads is
/// made (`StreamShare::insert`) before they start, so the buffers of the
/// chunks dropped for it wait here until the reads take them: a scan
/// entering a key range drops and reads a chunk for each journal's stream
/// of it (64 in the contest). With four spares kept, most of those
/// buffers were unmapped and the reads mapped new ones: in the contest's
/// range phase 589 of 4,112 chunk reads mapped a new buffer, against 263
/// with this many (most of them while the share first fills its budget),
/// and a new buffer's huge pages are zeroed by the kernel under the read.
/// Spares past `SPARE_IDLE` go once no long scan runs
/// (`StreamShare::idle`).
const SPARE_MAX: usize = 256;
/// Spare buffers kept while no long scan runs.
const SPARE_IDLE: usize = 4;
/// Dropped chunks still held by scans whose buffers are watched for reuse.
const DRAINING_MAX: usize = 16;

/// The chunks of value streams kept for long scans (see the module
/// comment).
#[derive(Default)]
pub struct StreamShare {
    map: Mutex<Map>,
    /// Buffers of dropped chunks, for the next reads.
    buffers: Recycler<SPARE_MAX, DRAINING_MAX>,
    /// Bytes of buffers kept now (`budget`), and when it is looked at next
    /// (milliseconds after `born`).
    budget: AtomicU64,
    next_look_ms: AtomicU64,
    born: std::sync::OnceLock<std::time::Instant>,
    /// Chunks read, their bytes, and waits for a read in flight (stats).
    reads: AtomicU64,
    bytes_read: AtomicU64,
    waits: AtomicU64,
}

#[derive(Default)]
struct Map {
    slots: HashMap<(u64, u64), Slot>,
    tick: u64,
    /// Sum of the slots' `capacity`.
    held: u64,
}

struct Slot {
    cell: Arc<Cell>,
    /// `Map::tick` when a scan last asked for it.
    used: u64,
    /// Bytes of its buffer.
    capacity: u64,
    /// A scan has taken it (`get`); a chunk read ahead (`start`) is not
    /// taken until a scan gets there.
    taken: bool,
}

/// What a read started on a worker thread needs.
pub struct Reader {
    pub how: How,
    pub policy: Arc<ReadPolicy>,
    pub workers: Arc<crate::pool::WorkerPool>,
}

impl StreamShare {
    /// Starts reading, on the worker threads, each chunk of `wanted` (a
    /// stream and a chunk index) that is neither kept nor being read.
    pub fn start(self: &Arc<Self>, wanted: &[(Arc<SegmentFile>, u64)], reader: &Reader) {
        for (seg, index) in wanted {
            let key = (seg.number, *index);
            let Some(capacity) = buffer_len(seg, *index) else {
                continue;
            };
            let cell = {
                let mut map = self.map.lock();
                if map.slots.contains_key(&key) {
                    continue;
                }
                match self.insert(&mut map, key, capacity, false, &reader.policy) {
                    Some(cell) => cell,
                    None => break,
                }
            };
            let (share, seg, index) = (self.clone(), seg.clone(), *index);
            let (how, policy) = (reader.how, reader.policy.clone());
            reader.workers.run(move || {
                if cell.claim() {
                    share.fill(&seg, index, &cell, how, &policy);
                }
            });
        }
    }

    /// Chunk `index` of stream `seg`: kept, or waited for if it is being
    /// read, or read here as `how` says (counted in `policy`), and whether
    /// this is the first time a scan takes it. `None` if it could not be
    /// read (the caller then reads each value alone, which names the
    /// damage).
    pub fn get(
        &self,
        seg: &SegmentFile,
        index: u64,
        how: How,
        policy: &ReadPolicy,
    ) -> Option<(ChunkBytes, bool)> {
        let key = (seg.number, index);
        let (cell, mine, first) = {
            let mut map = self.map.lock();
            map.tick += 1;
            let tick = map.tick;
            match map.slots.get_mut(&key) {
                Some(slot) => {
                    slot.used = tick;
                    let first = !std::mem::replace(&mut slot.taken, true);
                    (slot.cell.clone(), false, first)
                }
                None => {
                    let capacity = buffer_len(seg, index)?;
                    let cell = self.insert(&mut map, key, capacity, true, policy)?;
                    (cell, true, true)
                }
            }
        };
        let bytes = if !mine && !cell.claim() {
            cell.wait(&self.waits)
        } else {
            self.fill(seg, index, &cell, how, policy)
        };
        bytes.map(|b| (b, first))
    }

    /// A new slot for chunk `key` being read (`claimed`: by the caller),
    /// after dropping least recently used chunks to make room; `None` if
    /// no room can be made.
    ///
    /// Only a chunk that is read and that no scan holds values of can go:
    /// one being read has waiters, and a held one would keep its memory
    /// while the share read more. So the share's memory stays within its
    /// budget, and when the chunks scans hold fill it (scanners spread
    /// over more key ranges than it has room for) the caller reads its
    /// values alone instead. Chunks a scan has taken go first, least
    /// recently used first, and chunks read ahead that no scan has reached
    /// yet only after them: the scans were still taking the last key
    /// range's chunks when the next range's were read ahead, so by use
    /// alone those read ahead went first, and a third of all the stream
    /// bytes the contest's range phase read were read twice.
    fn insert(
        &self,
        map: &mut Map,
        key: (u64, u64),
        capacity: u64,
        claimed: bool,
        policy: &ReadPolicy,
    ) -> Option<Arc<Cell>> {
        let budget = self.budget(map.held, policy);
        while map.held + capacity > budget {
            let victim = map
                .slots
                .iter()
                .filter(|(_, s)| match &*s.cell.state.lock() {
                    Some(Some(chunk)) => Arc::strong_count(chunk) == 1,
                    Some(None) => true,
                    None => false,
                })
                .min_by_key(|(_, s)| (!s.taken, s.used))
                .map(|(k, _)| *k)?;
            self.evict(map, victim);
        }
        let cell = Cell::new(claimed);
        map.tick += 1;
        let slot = Slot {
            cell: cell.clone(),
            used: map.tick,
            capacity,
            taken: claimed,
        };
        map.held += capacity;
        let before = map.slots.insert(key, slot);
        assert!(before.is_none(), "stream chunk {key:?} inserted twice");
        Some(cell)
    }

    /// Bytes of buffers to keep, with `held` kept now: `STREAM_SHARE_BYTES`,
    /// or a `MEMORY_FRACTION` of the memory the process could take with
    /// them if less (looked at again after `LOOK_EVERY_MS`).
    fn budget(&self, held: u64, policy: &ReadPolicy) -> u64 {
        let born = self.born.get_or_init(std::time::Instant::now);
        let now = born.elapsed().as_millis() as u64;
        let due = self.next_look_ms.load(Ordering::Relaxed);
        let budget = self.budget.load(Ordering::Relaxed);
        if budget != 0 && now < due {
            return budget;
        }
        self.next_look_ms
            .store(now + LOOK_EVERY_MS, Ordering::Relaxed);
        let budget = match policy.mem_available() {
            Some(room) => {
                ((room + held) / MEMORY_FRACTION).clamp(STREAM_SHARE_BYTES_MIN, STREAM_SHARE_BYTES)
            }
            None => STREAM_SHARE_BYTES,
        };
        self.budget.store(budget, Ordering::Relaxed);
        budget
    }

    /// Drops slot `key` (under the map lock); its buffer becomes a spare
    /// now or once the scans holding it let go.
    fn evict(&self, map: &mut Map, key: (u64, u64)) {
        let Some(slot) = map.slots.remove(&key) else {
            return;
        };
        assert!(map.held >= slot.capacity, "stream share bytes undercounted");
        map.held -= slot.capacity;
        let bytes = slot.cell.state.lock().clone().flatten();
        drop(slot);
        if let Some(bytes) = bytes {
            self.buffers.drop_chunk(bytes);
        }
    }

    /// Reads chunk `index` of `seg` into `cell` (inserted as being read,
    /// claimed by the caller) and hands the outcome to its waiters. A
    /// failed read leaves no slot behind, so a later scan tries again.
    fn fill(
        &self,
        seg: &SegmentFile,
        index: u64,
        cell: &Arc<Cell>,
        how: How,
        policy: &ReadPolicy,
    ) -> Option<ChunkBytes> {
        let key = (seg.number, index);
        let mut publish = Publish {
            cell,
            bytes: None,
            forget: || {
                let mut map = self.map.lock();
                if map
                    .slots
                    .get(&key)
                    .is_some_and(|s| Arc::ptr_eq(&s.cell, cell))
                {
                    self.evict(&mut map, key);
                }
            },
        };
        let bytes = buffer_len(seg, index)
            .and_then(|len| self.buffer(len as usize).ok())
            .and_then(|buffer| buffer.read_from(seg, index * CHUNK, how).ok());
        publish.bytes = bytes.map(|(chunk, served)| {
            policy.count(served);
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.bytes_read
                .fetch_add(chunk.bytes().len() as u64, Ordering::Relaxed);
            Arc::new(chunk)
        });
        publish.bytes.clone()
    }

    /// A buffer of at least `len` bytes: a spare (or a dropped chunk's
    /// that no scan holds any more), else a new mapping.
    fn buffer(&self, len: usize) -> std::io::Result<Chunk> {
        match self.buffers.take(len) {
            Some(buffer) => Ok(buffer),
            None => Chunk::zeroed(len, crate::io::DIRECT_ALIGN),
        }
    }

    /// No long scan runs: unmaps the spare buffers past `SPARE_IDLE`.
    pub fn idle(&self) {
        self.buffers.trim(SPARE_IDLE);
    }

    /// Chunks of streams read since open, and their bytes.
    pub fn reads(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.bytes_read.load(Ordering::Relaxed),
        )
    }

    /// Waits for a stream chunk another scan was reading, since open.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

/// Bytes of the buffer chunk `index` of `seg` is read into: the chunk's
/// bytes in the file rounded up to whole `BUFFER_STEP`s, at most `CHUNK`.
/// `None` if the file's length cannot be had or the chunk is past its end.
fn buffer_len(seg: &SegmentFile, index: u64) -> Option<u64> {
    let len = seg.flushed_len().ok()?;
    let left = len.checked_sub(index.checked_mul(CHUNK)?)?;
    (left > 0).then(|| {
        left.min(CHUNK)
            .next_multiple_of(BUFFER_STEP as u64)
            .min(CHUNK)
    })
}
