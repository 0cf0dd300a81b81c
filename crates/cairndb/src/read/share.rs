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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// A value a read produced: owned, or lent out of a kept chunk (checked
/// against its pointer already), copied only if the caller asks to own
/// it. Scanners that borrow values (`Iter::next_ref`) then read them out
/// of the shared chunk with no copy of their own.
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
struct Cell {
    state: Mutex<Option<Option<ChunkBytes>>>,
    ready: Condvar,
    /// Some thread is reading the chunk. A cell read ahead is inserted
    /// unclaimed: its job waits in the worker pool's queue, and the first
    /// scan to need it claims it and reads it itself instead of waiting
    /// (the job, when it runs, finds it claimed and does nothing). So a
    /// scan never waits for a read that no running thread is doing, even
    /// when every worker is busy waiting.
    claimed: AtomicBool,
}

impl Cell {
    fn new(claimed: bool) -> Arc<Cell> {
        Arc::new(Cell {
            state: Mutex::new(None),
            ready: Condvar::new(),
            claimed: AtomicBool::new(claimed),
        })
    }

    /// Claims the read of this cell; false if someone has.
    fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }
}

struct Slot {
    cell: Arc<Cell>,
    used: u64,
    /// Scans that took the chunk (`Scan::id`), each once.
    takers: Vec<u64>,
}

/// Where a scan last took a chunk, and when (`Map::tick`).
struct Scanner {
    segment: u64,
    index: u64,
    seen: u64,
    /// Sum of the scan's recent moves between chunks, kept within ±8:
    /// positive for a forward scan, negative for a backward one (whose
    /// runs still take their chunks in ascending order).
    trend: i64,
}

#[derive(Default)]
struct Map {
    slots: HashMap<(u64, u64), Slot>,
    tick: u64,
    /// Scans that took chunks lately, by `Scan::id`: a kept chunk near
    /// one of them that it has not taken yet is one it is likely to need.
    scanners: HashMap<u64, Scanner>,
}

/// One scan's identity in the share (an `Iter` holds one): chunks it took
/// are not kept for it, chunks near it that it has not taken are.
#[derive(Clone)]
pub struct Scan {
    id: u64,
    /// Set once the scan took a chunk: it must then leave on drop.
    joined: Arc<AtomicBool>,
    /// Set when it left: reads of its windows still in flight then no
    /// longer put it back among the scanners.
    left: Arc<AtomicBool>,
}

/// A scan that took no chunk for this many of the share's ticks (one per
/// chunk asked for) no longer protects chunks: it paused or ended without
/// leaving.
const SCANNER_IDLE_TICKS: u64 = 4 * SHARE_CHUNKS as u64;
/// A kept chunk no scan used for this many of the map's ticks (four or so
/// per chunk and scan: a probe and a get for each run) is no longer kept
/// for scans that lack it.
const PROTECT_TICKS: u64 = 16 * SHARE_CHUNKS as u64;
/// Chunks a long scan has read ahead of the run it took (`read_ahead`):
/// with the run itself, about five 1 MiB requests in flight per stream.
/// Chosen by measurement (docs/benchmarks.md, "Thirteenth session"): 4
/// beat 2, 6 and 8 on a disk that reads 1 MiB twice as fast at depth 4
/// as at depth 1.
pub const READ_AHEAD: u64 = 4;
/// Chunks on either side of a scan's last chunk that it protects.
const SCANNER_REACH: u64 = SHARE_CHUNKS as u64;
/// Longest a scan needing a new chunk waits for others to take the oldest
/// kept chunk before dropping it anyway.
const LAGGARD_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// The chunks kept for scans of one database (see the module comment).
#[derive(Default)]
pub struct ChunkShare {
    map: Mutex<Map>,
    /// Signalled when a chunk is taken or a scan leaves: a scan waiting
    /// for room looks again.
    taken: Condvar,
    /// Last `Scan::id` handed out.
    scan_ids: AtomicU64,
    /// Times a scan waited for laggards before dropping a chunk (stats).
    laggard_waits: AtomicU64,
    /// Chunks read ahead of the scans (stats; also in `reads`).
    ahead_reads: AtomicU64,
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
    /// A new scan's identity.
    pub fn scan(&self) -> Scan {
        Scan {
            id: self.scan_ids.fetch_add(1, Ordering::Relaxed) + 1,
            joined: Arc::default(),
            left: Arc::default(),
        }
    }

    /// Forgets `scan` (its iterator is dropped): it protects no chunk.
    pub fn leave(&self, scan: &Scan) {
        // With `note_scanner`'s stores in the other order (both SeqCst):
        // either it sees `left` and stays out, or this sees `joined` and
        // removes it (after its insert, which holds the map lock).
        scan.left.store(true, Ordering::SeqCst);
        if scan.joined.load(Ordering::SeqCst) {
            self.map.lock().scanners.remove(&scan.id);
            self.taken.notify_all();
        }
    }

    /// Chunk `index` of `seg` for `scan`, if it is kept and read; never
    /// waits.
    pub fn ready(&self, seg: u64, index: u64, scan: &Scan) -> Option<ChunkBytes> {
        let cell = {
            let mut map = self.map.lock();
            let cell = touch(&mut map, (seg, index), scan)?;
            self.taken.notify_all();
            cell
        };
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
        scan: &Scan,
    ) -> Option<ChunkBytes> {
        let key = (seg.number, index);
        let cell_mine = {
            let mut map = self.map.lock();
            let deadline = std::time::Instant::now() + LAGGARD_WAIT;
            let mut waited = false;
            loop {
                if let Some(cell) = touch(&mut map, key, scan) {
                    self.taken.notify_all();
                    break Some((cell, false));
                }
                if map.slots.len() < SHARE_CHUNKS {
                    break Some(self.insert(&mut map, key, scan));
                }
                // Room is made by dropping the oldest chunk no nearby scan
                // still needs. If every one is needed: a scan that needs
                // some itself has fallen behind and reads this chunk for
                // itself alone, dropping none; a scan ahead of the others
                // gives them a moment to take theirs, then drops the
                // oldest anyway.
                let late = std::time::Instant::now() >= deadline;
                let victim = unneeded(&map).or_else(|| late.then(|| lru(&map)).flatten());
                let behind_others = victim.is_none() && behind(&map, scan);
                let victim = match victim {
                    None if !behind_others => unneeded_by_others(&map, scan),
                    v => v,
                };
                if let Some(victim) = victim {
                    self.drop_chunk(&mut map, victim);
                    break Some(self.insert(&mut map, key, scan));
                }
                if lru(&map).is_none() {
                    // Every kept chunk is being read: grow by one.
                    break Some(self.insert(&mut map, key, scan));
                }
                if behind_others {
                    break None;
                }
                if !waited {
                    waited = true;
                    self.laggard_waits.fetch_add(1, Ordering::Relaxed);
                }
                self.taken.wait_until(&mut map, deadline);
            }
        };
        let Some((cell, mine)) = cell_mine else {
            // Read for this scan alone, not kept.
            self.reads.fetch_add(1, Ordering::Relaxed);
            let (chunk, served) = seg.read_chunk(self.buffer(), index * CHUNK, how).ok()?;
            policy.count(served);
            return Some(Arc::new(chunk));
        };
        if !mine && !cell.claim() {
            let mut state = cell.state.lock();
            if state.is_none() {
                self.waits.fetch_add(1, Ordering::Relaxed);
            }
            while state.is_none() {
                cell.ready.wait(&mut state);
            }
            return state.clone().flatten();
        }
        self.fill(seg, key, &cell, how, policy)
    }

    /// Reads chunk `key` of `seg` into `cell` (inserted as being read)
    /// and hands the outcome to its waiters.
    fn fill(
        &self,
        seg: &SegmentFile,
        key: (u64, u64),
        cell: &Arc<Cell>,
        how: How,
        policy: &ReadPolicy,
    ) -> Option<ChunkBytes> {
        // The reader publishes whatever happens, so a waiter never waits
        // for a read nobody is doing (a panic inside the read would unwind
        // through `Publish::drop`).
        let mut publish = Publish {
            share: self,
            key,
            cell,
            bytes: None,
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let bytes = seg.read_chunk(self.buffer(), key.1 * CHUNK, how).ok();
        publish.bytes = bytes.map(|(chunk, served)| {
            policy.count(served);
            Arc::new(chunk)
        });
        let bytes = publish.bytes.clone();
        drop(publish);
        bytes
    }

    /// Starts reading, on the view's worker threads, the [`READ_AHEAD`]
    /// chunks of `seg` past the run `first..=last` that `scan` just took,
    /// in the direction it is moving, unless they are kept already: the
    /// device then has the next chunks of a long scan in flight while the
    /// scanners slice the current ones. Room is taken only from chunks no
    /// nearby scan still needs; without room, nothing is read ahead.
    pub fn read_ahead(
        self: &Arc<Self>,
        seg: &Arc<SegmentFile>,
        (first, last): (u64, u64),
        how: How,
        view: &super::ReadView,
        scan: &Scan,
    ) {
        let Ok(len) = seg.flushed_len() else {
            return;
        };
        let trend = match self.map.lock().scanners.get(&scan.id) {
            Some(s) => s.trend,
            None => return,
        };
        let next: Vec<u64> = if trend > 0 {
            (last + 1..=last + READ_AHEAD).collect()
        } else if trend < 0 {
            (first.saturating_sub(READ_AHEAD)..first).rev().collect()
        } else {
            return;
        };
        for index in next {
            if index.saturating_mul(CHUNK) >= len {
                break;
            }
            let key = (seg.number, index);
            let cell = {
                let mut map = self.map.lock();
                if map.slots.contains_key(&key) {
                    continue;
                }
                if map.slots.len() >= SHARE_CHUNKS {
                    let Some(victim) = unneeded(&map) else {
                        break;
                    };
                    self.drop_chunk(&mut map, victim);
                }
                let cell = Cell::new(false);
                let slot = Slot {
                    cell: cell.clone(),
                    used: map.tick,
                    takers: Vec::new(),
                };
                map.slots.insert(key, slot);
                cell
            };
            self.ahead_reads.fetch_add(1, Ordering::Relaxed);
            let (share, seg, policy) = (self.clone(), seg.clone(), view.policy.clone());
            view.workers.run(move || {
                if cell.claim() {
                    share.fill(&seg, key, &cell, how, &policy);
                }
            });
        }
    }

    /// A buffer for one chunk read: a spare one, else a new one.
    fn buffer(&self) -> Chunk {
        let len = CHUNK as usize;
        let spare = self.spare.lock().pop().and_then(|c| c.reuse(len));
        spare.unwrap_or_else(|| Chunk::zeroed(len, crate::io::DIRECT_ALIGN))
    }

    /// Drops kept chunk `victim` (under the map lock), keeping its buffer
    /// as a spare if no scan holds the chunk any more and room is left.
    fn drop_chunk(&self, map: &mut Map, victim: (u64, u64)) {
        if let Some(buffer) = evict(map, victim) {
            let mut spare = self.spare.lock();
            if spare.len() < SPARE_MAX {
                spare.push(buffer);
            }
        }
    }

    /// A new chunk being read by `scan`, kept under `key`.
    fn insert(&self, map: &mut Map, key: (u64, u64), scan: &Scan) -> (Arc<Cell>, bool) {
        note_scanner(map, key, scan);
        let cell = Cell::new(true);
        let slot = Slot {
            cell: cell.clone(),
            used: map.tick,
            takers: vec![scan.id],
        };
        map.slots.insert(key, slot);
        (cell, true)
    }

    /// Times a scan waited for others to take a chunk before it dropped
    /// one, since open.
    pub fn laggard_waits(&self) -> u64 {
        self.laggard_waits.load(Ordering::Relaxed)
    }

    /// Chunks read ahead of the scans since open (`read_ahead`).
    pub fn ahead_reads(&self) -> u64 {
        self.ahead_reads.load(Ordering::Relaxed)
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

/// The cell of chunk `key` if the map has it, marked as just used and as
/// taken by `scan`.
fn touch(map: &mut Map, key: (u64, u64), scan: &Scan) -> Option<Arc<Cell>> {
    note_scanner(map, key, scan);
    let tick = map.tick;
    let slot = map.slots.get_mut(&key)?;
    slot.used = tick;
    if !slot.takers.contains(&scan.id) {
        slot.takers.push(scan.id);
    }
    Some(slot.cell.clone())
}

/// Advances the tick and records that `scan` is at chunk `key`.
fn note_scanner(map: &mut Map, key: (u64, u64), scan: &Scan) {
    map.tick += 1;
    // A scan that left (its iterator dropped while a window was still
    // loading) stays out; see `ChunkShare::leave`.
    scan.joined.store(true, Ordering::SeqCst);
    if scan.left.load(Ordering::SeqCst) {
        return;
    }
    let tick = map.tick;
    let trend = match map.scanners.get(&scan.id) {
        Some(s) if s.segment == key.0 => {
            let moved = if key.1 >= s.index {
                i64::try_from(key.1 - s.index).unwrap_or(8)
            } else {
                -i64::try_from(s.index - key.1).unwrap_or(8)
            };
            (s.trend + moved.clamp(-8, 8)).clamp(-8, 8)
        }
        _ => 0,
    };
    map.scanners.insert(
        scan.id,
        Scanner {
            segment: key.0,
            index: key.1,
            seen: tick,
            trend,
        },
    );
    // Scans that stopped taking chunks without leaving stop counting.
    if map.scanners.len() > 64 {
        map.scanners
            .retain(|_, s| tick - s.seen <= SCANNER_IDLE_TICKS);
    }
}

/// Whether a scan that took chunks lately, near this one in its segment,
/// has not taken it yet (it is likely on its way), and the chunk was used
/// lately.
fn needed(map: &Map, key: (u64, u64), slot: &Slot) -> bool {
    needed_by_other(map, key, slot, None)
}

/// `needed`, counting only scans other than `except`. A scan lacks a
/// chunk only if it may still reach it: a forward scan (positive trend)
/// has passed every chunk below its position, a backward one every chunk
/// above it.
fn needed_by_other(map: &Map, key: (u64, u64), slot: &Slot, except: Option<u64>) -> bool {
    // A chunk nobody used for long is not kept for anyone: a scan near it
    // that has not taken it may never take it (its range skips it, or it
    // was read ahead of a scan that stopped).
    if map.tick - slot.used > PROTECT_TICKS {
        return false;
    }
    map.scanners.iter().any(|(id, s)| {
        let ahead_of_it = (s.trend > 0 && key.1 < s.index) || (s.trend < 0 && key.1 > s.index);
        Some(*id) != except
            && s.segment == key.0
            && s.index.abs_diff(key.1) <= SCANNER_REACH
            && !ahead_of_it
            && map.tick - s.seen <= SCANNER_IDLE_TICKS
            && !slot.takers.contains(id)
    })
}

/// The least recently used kept chunk that is not being read and that no
/// scan but `scan` still needs: what a scan drops rather than wait when
/// only it lacks the kept chunks (waiting helps only if others do).
fn unneeded_by_others(map: &Map, scan: &Scan) -> Option<(u64, u64)> {
    map.slots
        .iter()
        .filter(|(k, s)| {
            s.cell.state.lock().is_some() && !needed_by_other(map, **k, s, Some(scan.id))
        })
        .min_by_key(|(_, s)| s.used)
        .map(|(k, _)| *k)
}

/// Whether some kept chunk near `scan` is one another scan took and it
/// has not: the other scans are ahead of it. (Chunks read ahead that
/// nobody took yet do not count.)
fn behind(map: &Map, scan: &Scan) -> bool {
    let Some(me) = map.scanners.get(&scan.id) else {
        return false;
    };
    map.slots.iter().any(|(k, s)| {
        k.0 == me.segment
            && k.1.abs_diff(me.index) <= SCANNER_REACH
            && !s.takers.is_empty()
            && !s.takers.contains(&scan.id)
    })
}

/// The least recently used kept chunk that is not being read.
fn lru(map: &Map) -> Option<(u64, u64)> {
    map.slots
        .iter()
        .filter(|(_, s)| s.cell.state.lock().is_some())
        .min_by_key(|(_, s)| s.used)
        .map(|(k, _)| *k)
}

/// The least recently used kept chunk that is not being read and that no
/// nearby scan still needs.
fn unneeded(map: &Map) -> Option<(u64, u64)> {
    map.slots
        .iter()
        .filter(|(k, s)| s.cell.state.lock().is_some() && !needed(map, **k, s))
        .min_by_key(|(_, s)| s.used)
        .map(|(k, _)| *k)
}

/// Drops chunk `victim`; returns its buffer if no scan holds the chunk any
/// more. Called under the map lock, so nobody can take a new reference to
/// the dropped cell.
fn evict(map: &mut Map, victim: (u64, u64)) -> Option<Chunk> {
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

    /// A map of ready chunks `indices` of segment 7, each used at tick
    /// 900 + its index (lower: older; the map is at tick 1000) and taken
    /// by `takers(index)`.
    fn map_of(indices: std::ops::Range<u64>, takers: impl Fn(u64) -> Vec<u64>) -> Map {
        let mut map = Map::default();
        for i in indices {
            let cell = Cell::new(true);
            *cell.state.lock() = Some(Some(chunk(1, 16)));
            let slot = Slot {
                cell,
                used: 900 + i,
                takers: takers(i),
            };
            map.slots.insert((7, i), slot);
        }
        map.tick = 1000;
        map
    }

    fn at(map: &mut Map, id: u64, segment: u64, index: u64, seen: u64) {
        let s = Scanner {
            segment,
            index,
            seen,
            trend: 1,
        };
        map.scanners.insert(id, s);
    }

    fn scan(id: u64) -> Scan {
        Scan {
            id,
            joined: Arc::default(),
            left: Arc::default(),
        }
    }

    #[test]
    fn the_oldest_chunk_every_nearby_scan_took_is_dropped_first() {
        // Scan 1 is ahead at chunk 40 and took 9..41; scan 2, at 12,
        // took 9..13 so far.
        let mut map = map_of(9..41, |i| if i <= 12 { vec![1, 2] } else { vec![1] });
        at(&mut map, 1, 7, 40, 1000);
        at(&mut map, 2, 7, 12, 999);
        assert_eq!(unneeded(&map), Some((7, 9)));
        assert!(!behind(&map, &scan(1)));
        assert!(behind(&map, &scan(2)), "scan 2 has chunks ahead to take");
        // Once scan 2 has taken nothing yet, every chunk within its reach
        // is needed: none is dropped without a wait.
        let mut map = map_of(9..41, |_| vec![1]);
        at(&mut map, 1, 7, 40, 1000);
        at(&mut map, 2, 7, 8, 999);
        assert_eq!(unneeded(&map), None);
        assert_eq!(lru(&map), Some((7, 9)), "the fallback after the wait");
        // Out of its reach, a chunk is not kept for it.
        at(&mut map, 2, 7, 2, 999);
        assert_eq!(unneeded(&map), Some((7, 35)));
    }

    #[test]
    fn a_scan_moving_backward_is_told_from_one_moving_forward() {
        let mut map = Map::default();
        let (fwd, bwd) = (scan(1), scan(2));
        // Runs of two chunks, each taken in ascending order: forward the
        // runs climb, backward they fall.
        for (a, b) in [(10, 11), (11, 12), (12, 13)] {
            note_scanner(&mut map, (7, a), &fwd);
            note_scanner(&mut map, (7, b), &fwd);
        }
        for (a, b) in [(20, 21), (19, 20), (18, 19)] {
            note_scanner(&mut map, (7, a), &bwd);
            note_scanner(&mut map, (7, b), &bwd);
        }
        assert!(map.scanners[&1].trend > 0);
        assert!(map.scanners[&2].trend < 0);
        // A move to another segment starts over.
        note_scanner(&mut map, (8, 0), &fwd);
        assert_eq!(map.scanners[&1].trend, 0);
    }

    #[test]
    fn chunks_read_ahead_do_not_make_a_scan_look_behind() {
        let mut map = map_of(9..20, |_| vec![1]);
        at(&mut map, 1, 7, 19, 1000);
        assert!(!behind(&map, &scan(1)));
        // Read ahead, nobody took them yet: still not behind.
        let ahead = map_of(20..22, |_| Vec::new());
        map.slots.extend(ahead.slots);
        assert!(!behind(&map, &scan(1)));
        // But they are kept for it: the oldest taken chunk goes first.
        assert_eq!(unneeded(&map), Some((7, 9)));
    }

    #[test]
    fn a_chunk_read_ahead_is_read_by_whoever_claims_it_first() {
        // Read ahead: its job waits in the pool's queue; a scan needing it
        // claims it and reads it itself, and the job then does nothing.
        let ahead = Cell::new(false);
        assert!(ahead.claim(), "the scan claims the queued read");
        assert!(!ahead.claim(), "the job finds it claimed");
        // Inserted by a scan that reads it at once: others wait.
        assert!(!Cell::new(true).claim());
    }

    #[test]
    fn a_scan_that_left_is_not_brought_back_by_its_late_reads() {
        let share = ChunkShare::default();
        let (gone, here) = (share.scan(), share.scan());
        note_scanner(&mut share.map.lock(), (7, 1), &gone);
        share.leave(&gone);
        assert!(share.map.lock().scanners.is_empty());
        // A window of the dropped iterator still loading takes a chunk.
        note_scanner(&mut share.map.lock(), (7, 2), &gone);
        note_scanner(&mut share.map.lock(), (7, 2), &here);
        let map = share.map.lock();
        assert_eq!(map.scanners.keys().copied().collect::<Vec<_>>(), [here.id]);
    }

    #[test]
    fn a_chunk_unused_for_long_is_not_kept_for_a_scan_that_lacks_it() {
        let mut map = map_of(9..41, |_| vec![1]);
        at(&mut map, 1, 7, 40, 1000);
        at(&mut map, 2, 7, 8, 999);
        assert_eq!(unneeded(&map), None, "scan 2 lacks them all");
        // Much later, with no use of them in between (scan 2 never takes
        // them: its range skips them).
        map.tick += PROTECT_TICKS;
        let now = map.tick;
        at(&mut map, 2, 7, 8, now);
        assert_eq!(unneeded(&map), Some((7, 9)));
    }

    #[test]
    fn a_scan_past_a_chunk_or_alone_keeps_nothing() {
        // Chunks 9..41 taken by scan 1 only; scan 2 moves forward at 30:
        // it has passed 9..30 (its range skipped them), it may still take
        // 30..41.
        let mut map = map_of(9..41, |_| vec![1]);
        at(&mut map, 1, 7, 40, 1000);
        at(&mut map, 2, 7, 30, 1000);
        assert_eq!(unneeded(&map), Some((7, 9)));
        map.scanners.get_mut(&2).expect("scan 2").trend = -1;
        assert_eq!(unneeded(&map), Some((7, 31)), "backward, it passed 31..41");
        // A lone scan lacking its own chunks (read ahead, never taken):
        // no other scan needs them, so it drops one instead of waiting.
        let mut map = map_of(9..41, |_| Vec::new());
        at(&mut map, 1, 7, 8, 1000);
        assert_eq!(unneeded(&map), None);
        assert!(!behind(&map, &scan(1)));
        assert_eq!(unneeded_by_others(&map, &scan(1)), Some((7, 9)));
        at(&mut map, 2, 7, 8, 1000);
        assert_eq!(
            unneeded_by_others(&map, &scan(1)),
            None,
            "scan 2 lacks them"
        );
    }

    #[test]
    fn idle_and_distant_scans_keep_nothing() {
        let mut map = map_of(9..41, |_| vec![1]);
        at(&mut map, 1, 7, 40, 1000);
        // Scan 2 took no chunk for longer than the idle limit.
        at(&mut map, 2, 7, 8, 1000 - SCANNER_IDLE_TICKS - 1);
        assert_eq!(unneeded(&map), Some((7, 9)));
        // Scan 3 is in another segment.
        at(&mut map, 3, 8, 10, 1000);
        assert_eq!(unneeded(&map), Some((7, 9)));
        assert!(!behind(&map, &scan(3)));
        // A chunk being read is never dropped.
        *map.slots[&(7, 9)].cell.state.lock() = None;
        assert_eq!(unneeded(&map), Some((7, 10)));
        assert_eq!(lru(&map), Some((7, 10)));
    }

    #[test]
    fn a_value_is_checked_once_per_offset_length_and_checksum() {
        let mut c = Chunk::zeroed(8192, 4096);
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
    fn a_reused_buffer_forgets_its_checks() {
        let mut c = Chunk::zeroed(8192, 4096);
        c.bytes_mut()[..100].fill(3);
        let crc = crate::format::coding::crc(&c.bytes()[..100]);
        assert!(c.check_value(0, 100, crc));
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
