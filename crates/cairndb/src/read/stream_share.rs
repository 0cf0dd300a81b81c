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
//! dropping, of the chunks no scan holds values of, the one the scans
//! need last (`next_use`: each long scan's place in key order is known,
//! and each chunk's span of keys): scans over one key range use every
//! journal's stream of it throughout, so they hold those, and the chunks
//! of ranges every scan has left go first. A read no scan waits for
//! (a window's chunks started on the worker threads, the next range read
//! ahead) drops no chunk a scan behind still needs (`left_behind`), and a
//! scan that would fill the budget with such chunks waits a little for
//! the scans behind it (`StreamShare::insert`, pacing), so the scans stay
//! within what the budget holds. Where every kept chunk is held (scanners spread
//! over more key ranges than the budget has room for), a scan reads its
//! values alone, so the share's memory stays within its budget.
//!
//! A flushed stream's bytes never change and segment numbers are not
//! reused, so a kept chunk never goes stale.

use super::chunk::{CHUNK, Cell, Chunk, ChunkBytes, Publish, Recycler};
use super::policy::{How, ReadPolicy};
use super::share::Scan;
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
    /// Chunks a scan waited for scans behind it before taking (pacing),
    /// and the microseconds waited (stats).
    paced: AtomicU64,
    paced_us: AtomicU64,
    /// Buffers mapped for reads, no spare fitting (stats).
    mapped: AtomicU64,
}

#[derive(Default)]
struct Map {
    slots: HashMap<(u64, u64), Slot>,
    tick: u64,
    /// Sum of the slots' `capacity`.
    held: u64,
    /// Where each long scan running forward is (`StreamShare::at`).
    scans: HashMap<u64, Place>,
}

/// What a scan asks chunks for: the keyspace it scans and the key points
/// (`key_point`) of the lowest and highest keys of the window.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub keyspace: u32,
    pub lo: u64,
    pub hi: u64,
}

/// Where a long scan is: the key point of the window it is at in
/// `keyspace`, the point of its upper bound, and when it got there.
#[derive(Clone, Copy)]
struct Place {
    keyspace: u32,
    point: u64,
    end: u64,
    at: std::time::Instant,
}

impl Place {
    fn of(scan: &Scan, point: u64) -> Place {
        Place {
            keyspace: scan.window().keyspace,
            point,
            end: scan.end(),
            at: std::time::Instant::now(),
        }
    }

    /// It will pass the start of `want` (it is behind it, in its
    /// keyspace, and its range reaches there) and has moved lately.
    fn behind(&self, want: &Span, now: std::time::Instant) -> bool {
        self.keyspace == want.keyspace
            && self.point < want.lo
            && want.lo <= self.end
            && now.duration_since(self.at) < PACE_ACTIVE
    }
}

/// Why `StreamShare::insert` made no slot.
enum Full {
    /// Every kept chunk is held by scans.
    NoRoom,
    /// Room would drop a chunk a scan still needs, and a scan behind the
    /// caller is moving: the caller waits for it.
    Behind,
}

/// A scan behind counts for pacing (`StreamShare::insert`) only if it
/// moved this recently.
const PACE_ACTIVE: std::time::Duration = std::time::Duration::from_millis(50);
/// A scan ahead of another that is moving waits for it rather than take
/// a chunk that would fill more than this share of the budget with chunks
/// left behind (`left_behind`): the rest is room for the scans behind to
/// take theirs without dropping the ones just ahead of them.
const PACE_FILL: (u64, u64) = (3, 4);
/// Longest a scan waits for the scans behind it, per chunk, and how often
/// it looks again meanwhile.
const PACE_WAIT: std::time::Duration = std::time::Duration::from_millis(20);
const PACE_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// A key's place in key order as a number: its first 8 bytes, big-endian,
/// zero-padded (keys sharing those bytes share a point). Only for ranking
/// chunks by how soon scans get to them.
pub fn key_point(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// A scan that has not moved for this long no longer counts in choosing
/// which chunk to drop: it paused, or ended without leaving.
const SCAN_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

struct Slot {
    cell: Arc<Cell>,
    /// `Map::tick` when a scan last asked for it.
    used: u64,
    /// Bytes of its buffer.
    capacity: u64,
    /// A scan has taken it (`get`); a chunk read ahead (`start`) is not
    /// taken until a scan gets there.
    taken: bool,
    /// The keyspace and key points of the windows that asked for it,
    /// lowest and highest (a stream holds one key range: scans past `hi`
    /// are done with it).
    keyspace: u32,
    lo: u64,
    hi: u64,
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
    /// `span`: the key points the chunks are for (a window's, or from
    /// the end of one on for the next key range's).
    pub fn start(
        self: &Arc<Self>,
        wanted: &[(Arc<SegmentFile>, u64)],
        reader: &Reader,
        span: Span,
    ) {
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
                match self.insert(&mut map, key, capacity, false, span, false, &reader.policy) {
                    Ok(cell) => cell,
                    Err(_) => break,
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
        scan: &Scan,
    ) -> Option<(ChunkBytes, bool)> {
        let key = (seg.number, index);
        let span = scan.window();
        let mut paced: Option<std::time::Instant> = None;
        let (cell, mine, first) = loop {
            let mut map = self.map.lock();
            map.tick += 1;
            let tick = map.tick;
            // Places and pacing assume scans run forward: one running
            // backward takes no part in them.
            let forward = scan.forward();
            if forward {
                map.scans.insert(scan.id(), Place::of(scan, span.lo));
            } else {
                map.scans.remove(&scan.id());
            }
            match map.slots.get_mut(&key) {
                Some(slot) => {
                    slot.used = tick;
                    let first = !std::mem::replace(&mut slot.taken, true);
                    // A chunk read ahead had a guess of a span until now.
                    if first || slot.keyspace != span.keyspace {
                        (slot.keyspace, slot.lo, slot.hi) = (span.keyspace, span.lo, span.hi);
                    } else {
                        slot.lo = slot.lo.min(span.lo);
                        slot.hi = slot.hi.max(span.hi);
                    }
                    break (slot.cell.clone(), false, first);
                }
                None => {
                    let capacity = buffer_len(seg, index)?;
                    let patient = forward && paced.is_none_or(|since| since.elapsed() < PACE_WAIT);
                    match self.insert(&mut map, key, capacity, true, span, patient, policy) {
                        Ok(cell) => break (cell, true, true),
                        Err(Full::NoRoom) => return None,
                        Err(Full::Behind) => {}
                    }
                }
            }
            drop(map);
            if paced.is_none() {
                paced = Some(std::time::Instant::now());
                self.paced.fetch_add(1, Ordering::Relaxed);
            }
            std::thread::sleep(PACE_POLL);
        };
        if let Some(since) = paced {
            self.paced_us
                .fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
        let bytes = if !mine && !cell.claim() {
            cell.wait(&self.waits)
        } else {
            self.fill(seg, index, &cell, how, policy)
        };
        bytes.map(|b| (b, first))
    }

    /// A new slot for chunk `key` being read (`claimed`: by the caller),
    /// for windows at `span`, after dropping chunks to make
    /// room; `Full::NoRoom` if no room can be made.
    ///
    /// Only a chunk that is read and that no scan holds values of can go:
    /// one being read has waiters, and a held one would keep its memory
    /// while the share read more. So the share's memory stays within its
    /// budget, and when the chunks scans hold fill it (scanners spread
    /// over more key ranges than it has room for) the caller reads its
    /// values alone instead. Of the others, the one the scans need last
    /// goes first (`next_use`), then chunks taken before chunks read
    /// ahead, then the least recently used. A read nobody waits for (not
    /// `claimed`) gets `Full::NoRoom` rather than drop a chunk a scan
    /// behind `span.lo` still needs (`left_behind`).
    ///
    /// A `patient` caller (a scan that needs the chunk now, at key point
    /// `span.lo`) gets `Full::Behind` while a scan behind it is moving and
    /// the chunks left behind would fill more than `PACE_FILL` of the
    /// budget, or room could only be made by dropping one of them: it
    /// waits for the scan behind to take them, as one
    /// reader serving every scanner keeps them together. Dropped, those
    /// chunks would be read again for the scan behind, and scans drifting
    /// further apart than the budget holds read the data several times
    /// (the contest's scaled-down range phase, 1 GiB under a 512 MiB cap,
    /// dropping the least recently used chunk, read 1.5–2.1× the data in
    /// three of five runs, at 399–851 MB/s). The
    /// slowest scan never waits, so waits cannot go round in a circle.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        map: &mut Map,
        key: (u64, u64),
        capacity: u64,
        claimed: bool,
        span: Span,
        patient: bool,
        policy: &ReadPolicy,
    ) -> Result<Arc<Cell>, Full> {
        let budget = self.budget(map.held, policy);
        if map.held + capacity > budget {
            let now = std::time::Instant::now();
            map.scans
                .retain(|_, p| now.duration_since(p.at) < SCAN_IDLE);
        }
        if patient {
            let now = std::time::Instant::now();
            let behind = map.scans.values().any(|p| p.behind(&span, now));
            if behind {
                let points: Vec<Place> = map.scans.values().copied().collect();
                let needed: u64 = map
                    .slots
                    .values()
                    .filter(|s| left_behind(&points, s, span.lo))
                    .map(|s| s.capacity)
                    .sum();
                let (num, den) = PACE_FILL;
                if needed + capacity > budget / den * num {
                    return Err(Full::Behind);
                }
            }
        }
        while map.held + capacity > budget {
            let points: Vec<Place> = map.scans.values().copied().collect();
            let (victim, slot) = map
                .slots
                .iter()
                .filter(|(_, s)| match &*s.cell.state.lock() {
                    Some(Some(chunk)) => Arc::strong_count(chunk) == 1,
                    Some(None) => true,
                    None => false,
                })
                .max_by_key(|(_, s)| (next_use(&points, s), s.taken, std::cmp::Reverse(s.used)))
                .ok_or(Full::NoRoom)?;
            let (victim, behind) = (*victim, left_behind(&points, slot, span.lo));
            // A read the caller does not wait for takes no chunk a scan
            // behind it still needs: that scan would read it again, and
            // one scan reading alone behind the others reads at half the
            // device's pace while they read too, so it falls further
            // behind and reads everything again.
            if behind && !claimed {
                return Err(Full::NoRoom);
            }
            if patient && behind {
                let now = std::time::Instant::now();
                if map.scans.values().any(|p| p.behind(&span, now)) {
                    return Err(Full::Behind);
                }
            }
            self.evict(map, victim);
        }
        let cell = Cell::new(claimed);
        map.tick += 1;
        let slot = Slot {
            cell: cell.clone(),
            used: map.tick,
            capacity,
            taken: claimed,
            keyspace: span.keyspace,
            lo: span.lo,
            hi: span.hi,
        };
        map.held += capacity;
        let before = map.slots.insert(key, slot);
        assert!(before.is_none(), "stream chunk {key:?} inserted twice");
        Ok(cell)
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
        let spares = self.buffers.spare_bytes();
        let budget = match policy.mem_available() {
            Some(room) => ((room + held + spares) / MEMORY_FRACTION)
                .clamp(STREAM_SHARE_BYTES_MIN, STREAM_SHARE_BYTES),
            None => STREAM_SHARE_BYTES,
        };
        // Spares are the share's memory too: where memory bounds the
        // budget, the ones past its room go, or a budget shrinking under a
        // tight cap would drop chunks into spares that kept the memory the
        // chunks gave up.
        if budget < STREAM_SHARE_BYTES {
            self.buffers.trim_bytes(budget.saturating_sub(held));
        }
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
            None => {
                let chunk = Chunk::zeroed(len, crate::io::DIRECT_ALIGN)?;
                self.mapped.fetch_add(1, Ordering::Relaxed);
                Ok(chunk)
            }
        }
    }

    /// No long scan runs: unmaps the spare buffers past `SPARE_IDLE`.
    pub fn idle(&self) {
        self.buffers.trim(SPARE_IDLE);
    }

    /// Long scan `scan` is at the window starting at key point `point`
    /// (one it took from another scan: `get` notes the ones it loads).
    pub fn at(&self, scan: &Scan, point: u64) {
        self.map
            .lock()
            .scans
            .insert(scan.id(), Place::of(scan, point));
    }

    /// Scan `scan` ended.
    pub fn forget(&self, scan: u64) {
        self.map.lock().scans.remove(&scan);
    }

    /// Chunks a scan waited for the scans behind it before taking, and the
    /// microseconds it waited, since open.
    pub fn paced(&self) -> (u64, u64) {
        (
            self.paced.load(Ordering::Relaxed),
            self.paced_us.load(Ordering::Relaxed),
        )
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

    /// Buffers mapped for chunk reads (no spare fitting), since open.
    pub fn mapped(&self) -> u64 {
        self.mapped.load(Ordering::Relaxed)
    }
}

/// How far the scans at `places` are from needing `slot` again, for
/// choosing which chunk to drop (the one needed last goes first, as in
/// Belady's rule): `u64::MAX` if no scan of its keyspace will reach its
/// key range (every one is past it, or ends before it), else the least
/// distance from one that will to the range's start (0 for a scan inside
/// it). The scans run forward, so one past `hi` is done with the chunk
/// for this pass.
fn next_use(places: &[Place], slot: &Slot) -> u64 {
    places
        .iter()
        .filter(|p| p.keyspace == slot.keyspace && p.point <= slot.hi && slot.lo <= p.end)
        .map(|p| slot.lo.saturating_sub(p.point))
        .min()
        .unwrap_or(u64::MAX)
}

/// Whether a scan behind key point `point` still needs `slot`: the chunk
/// starts at or before `point`, and a scan has not passed it.
fn left_behind(places: &[Place], slot: &Slot, point: u64) -> bool {
    slot.lo <= point && next_use(places, slot) != u64::MAX
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Host;
    use crate::options::ValueReads;

    /// A host with no room to spare: the budget is the least one,
    /// `STREAM_SHARE_BYTES_MIN` (four chunks).
    struct Tight;

    impl Host for Tight {
        fn mem_available(&self) -> Option<u64> {
            Some(0)
        }
    }

    fn policy() -> ReadPolicy {
        ReadPolicy::new(ValueReads::Direct, Arc::new(Tight))
    }

    /// A window of keyspace 0 from key point `lo` to `hi`.
    fn span(lo: u64, hi: u64) -> Span {
        Span {
            keyspace: 0,
            lo,
            hi,
        }
    }

    /// A scan of keyspace `keyspace` up to `end`, at `point`, moved now.
    fn place(keyspace: u32, point: u64, end: u64) -> Place {
        Place {
            keyspace,
            point,
            end,
            at: std::time::Instant::now(),
        }
    }

    /// Fills four chunk slots of one stream each, read (so they may go),
    /// for windows at the given key points, and puts scan 1 at point 100
    /// and scan 2 at point 10, both in keyspace 0 with no upper bound.
    fn share(spans: &[(u64, u64)]) -> StreamShare {
        let share = StreamShare::default();
        let p = policy();
        for (i, &(lo, hi)) in spans.iter().enumerate() {
            let mut map = share.map.lock();
            let cell = share
                .insert(
                    &mut map,
                    (i as u64, 0),
                    CHUNK,
                    true,
                    span(lo, hi),
                    false,
                    &p,
                )
                .ok()
                .expect("room for four chunks");
            *cell.state.lock() = Some(None);
        }
        let mut map = share.map.lock();
        map.scans.insert(1, place(0, 100, u64::MAX));
        map.scans.insert(2, place(0, 10, u64::MAX));
        drop(map);
        share
    }

    fn kept(share: &StreamShare) -> Vec<u64> {
        let mut segs: Vec<u64> = share.map.lock().slots.keys().map(|k| k.0).collect();
        segs.sort_unstable();
        segs
    }

    #[test]
    fn the_chunk_dropped_is_the_one_the_scans_need_last() {
        // Both scans are past segment 0; scan 2 still needs segment 1;
        // scan 1 is in segment 2's range; both reach segment 3 last.
        let share = share(&[(0, 5), (20, 30), (100, 110), (200, 210)]);
        assert_eq!(share.budget(0, &policy()), STREAM_SHARE_BYTES_MIN);
        let p = policy();
        let mut map = share.map.lock();
        let cell = share.insert(&mut map, (10, 0), CHUNK, true, span(110, 120), false, &p);
        assert!(cell.is_ok(), "room is made");
        drop(map);
        assert_eq!(
            kept(&share),
            [1, 2, 3, 10],
            "the chunk no scan needs goes first"
        );
        let mut map = share.map.lock();
        *map.slots[&(10, 0)].cell.state.lock() = Some(None);
        let cell = share.insert(&mut map, (11, 0), CHUNK, true, span(120, 130), false, &p);
        assert!(cell.is_ok(), "room is made");
        drop(map);
        // Least recently used would drop segment 1, which scan 2 needs
        // next; segment 3 is needed 90 key points later.
        assert_eq!(
            kept(&share),
            [1, 2, 10, 11],
            "the chunk needed last goes next"
        );
    }

    #[test]
    fn a_scan_ahead_waits_rather_than_drop_what_a_scan_behind_needs() {
        let share = share(&[(20, 30), (40, 50), (100, 110), (200, 210)]);
        let p = policy();
        let mut map = share.map.lock();
        let ahead = share.insert(&mut map, (10, 0), CHUNK, true, span(110, 120), true, &p);
        assert!(
            matches!(ahead, Err(Full::Behind)),
            "the scan ahead made room while the one behind needs every chunk"
        );
        assert_eq!(map.slots.len(), 4, "nothing was dropped");
        // Out of patience it makes room all the same.
        let ahead = share.insert(&mut map, (10, 0), CHUNK, true, span(110, 120), false, &p);
        assert!(ahead.is_ok());
        *map.slots[&(10, 0)].cell.state.lock() = Some(None);
        // The slowest scan never waits.
        let behind = share.insert(&mut map, (11, 0), CHUNK, true, span(10, 20), true, &p);
        assert!(behind.is_ok(), "the scan behind waited");
        // A scan behind that has not moved lately holds nobody up.
        map.scans.insert(
            2,
            Place {
                at: std::time::Instant::now() - 2 * PACE_ACTIVE,
                ..place(0, 10, u64::MAX)
            },
        );
        *map.slots[&(11, 0)].cell.state.lock() = Some(None);
        let ahead = share.insert(&mut map, (12, 0), CHUNK, true, span(50, 60), true, &p);
        assert!(ahead.is_ok(), "an idle scan behind held the scan ahead");
    }

    #[test]
    fn a_read_ahead_takes_no_chunk_a_scan_behind_needs() {
        let share = share(&[(20, 30), (40, 50), (100, 110), (200, 210)]);
        let p = policy();
        let mut map = share.map.lock();
        // Scan 1 reads ahead past point 110. Segment 3, ahead of both
        // scans, is needed last: it goes.
        let ahead = share.insert(
            &mut map,
            (10, 0),
            CHUNK,
            false,
            span(110, u64::MAX),
            false,
            &p,
        );
        assert!(
            ahead.is_ok(),
            "a chunk needed later than the one read ahead was kept"
        );
        *map.slots[&(10, 0)].cell.state.lock() = Some(None);
        drop(map);
        assert_eq!(kept(&share), [0, 1, 2, 10]);
        // Next in line is segment 1, which scan 2 (at point 10) still
        // needs behind scan 1: a read ahead does not take its room.
        let mut map = share.map.lock();
        let ahead = share.insert(
            &mut map,
            (11, 0),
            CHUNK,
            false,
            span(120, u64::MAX),
            false,
            &p,
        );
        assert!(
            matches!(ahead, Err(Full::NoRoom)),
            "a read ahead dropped a chunk the scan behind needs"
        );
        drop(map);
        assert_eq!(kept(&share), [0, 1, 2, 10], "nothing was dropped");
        // A scan that needs its chunk now (out of patience) makes room.
        let mut map = share.map.lock();
        let now = share.insert(&mut map, (11, 0), CHUNK, true, span(120, 130), false, &p);
        assert!(now.is_ok());
    }

    #[test]
    fn a_scan_does_not_wait_for_scans_behind_to_drop_a_chunk_ahead_of_it() {
        // Scans starting over at the front while the chunks kept are those
        // of the end, which both need only last.
        let share = share(&[(200, 210), (220, 230), (240, 250), (250, 255)]);
        let p = policy();
        let mut map = share.map.lock();
        map.scans.insert(1, place(0, 5, u64::MAX));
        map.scans.insert(2, place(0, 0, u64::MAX));
        let ahead = share.insert(&mut map, (10, 0), CHUNK, true, span(5, 10), true, &p);
        assert!(
            ahead.is_ok(),
            "the scan ahead waited for one behind that needs the chunk dropped after it"
        );
        drop(map);
        assert_eq!(kept(&share), [0, 1, 2, 10]);
    }

    #[test]
    fn scans_of_other_ranges_or_keyspaces_neither_keep_chunks_nor_hold_others_up() {
        let share = share(&[(20, 30), (40, 50), (100, 110), (200, 210)]);
        let p = policy();
        let mut map = share.map.lock();
        // Scan 1 asks. Scan 2 ends at point 35 and scan 1 is past segment
        // 1: nobody will read segment 1 again, so it goes before segment
        // 3, which scan 1 reaches last; and scan 2 will not get to where
        // scan 1 is, so it holds nobody up.
        map.scans.insert(2, place(0, 10, 35));
        let ahead = share.insert(&mut map, (10, 0), CHUNK, true, span(100, 120), true, &p);
        assert!(ahead.is_ok(), "a scan behind that ends before held it up");
        drop(map);
        assert_eq!(kept(&share), [0, 2, 3, 10]);
        // A scan of another keyspace at point 10 neither keeps keyspace
        // 0's chunks nor holds its scans up.
        let mut map = share.map.lock();
        *map.slots[&(10, 0)].cell.state.lock() = Some(None);
        map.scans.insert(2, place(1, 10, u64::MAX));
        let ahead = share.insert(&mut map, (11, 0), CHUNK, true, span(100, 130), true, &p);
        assert!(ahead.is_ok(), "a scan of another keyspace held it up");
        drop(map);
        assert_eq!(
            kept(&share),
            [2, 3, 10, 11],
            "segment 0 is behind every scan of its keyspace"
        );
    }
}
