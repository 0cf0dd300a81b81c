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

use super::chunk::{CHUNK, Cell, Chunk, ChunkBytes, Publish, Recycler};
use super::policy::{How, ReadPolicy};
use crate::version::Version;
use crate::version::segments::SegmentFile;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Chunks kept (64 MiB): room for scanners some way apart. Four scanners
/// of the contest's range phase on two cores drift up to tens of MiB
/// apart; a chunk dropped before the last of them took it is read again.
/// With direct reads (no page cache behind the share) 16 MiB were read
/// 1.5 times over, 32 MiB about 1.1 times; 8 chunks of 4 MiB, three of them read ahead, left too little
/// room and made scans wait for laggards (range 598 MB/s).
pub const SHARE_CHUNKS: usize = 16;
/// Shortest run read through the share.
pub const SHARE_RUN_MIN: u64 = 256 << 10;

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
    /// When it last moved to another chunk (pacing: `lagging`).
    moved: Instant,
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
    /// The segment a forward scan went on to from each segment (into its
    /// first chunk): where reading ahead continues past a segment's end.
    /// Settled values are a sequence of values files in key order, so the
    /// first scan across a boundary teaches every later one.
    successors: HashMap<u64, u64>,
    /// Chunks in each segment scans read from (as `successors`, at most
    /// `SUCCESSORS_MAX`): how far apart two scans on either side of a
    /// boundary are.
    lengths: HashMap<u64, u64>,
}

/// Most successors remembered (`Map::successors`); past it they are
/// forgotten and learned again.
const SUCCESSORS_MAX: usize = 4096;

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
    /// Set once it is a long scan (`ChunkShare::mark_long`), counted in
    /// `ChunkShare::long_scans` until it leaves.
    long: Arc<AtomicBool>,
    /// What the stream share knows of where it is (`set_window`,
    /// `set_reach`).
    place: Arc<Place>,
}

/// Where a scan is, for the stream share (`stream_share.rs`): the key
/// points (`stream_share::key_point`) of the lowest and highest keys of
/// the window whose values it loads now, whether it runs forward, the
/// keyspace it scans and the point of its upper bound.
#[derive(Default)]
pub struct Place {
    lo: AtomicU64,
    hi: AtomicU64,
    forward: AtomicBool,
    keyspace: std::sync::atomic::AtomicU32,
    end: AtomicU64,
}

impl Scan {
    /// Whether this scan has been marked long.
    pub fn is_long(&self) -> bool {
        self.long.load(Ordering::Relaxed)
    }

    /// Its number, unique in the database while it runs.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// It scans keyspace `keyspace` up to key point `end` (inclusive;
    /// `u64::MAX` without an upper bound).
    pub fn set_reach(&self, keyspace: u32, end: u64) {
        self.place.keyspace.store(keyspace, Ordering::Relaxed);
        self.place.end.store(end, Ordering::Relaxed);
    }

    /// It is about to load the values of a window from key point `lo` to
    /// `hi`, scanning `forward` or backward.
    pub fn set_window(&self, lo: u64, hi: u64, forward: bool) {
        self.place.lo.store(lo, Ordering::Relaxed);
        self.place.hi.store(hi, Ordering::Relaxed);
        self.place.forward.store(forward, Ordering::Relaxed);
    }

    /// Whether the window `set_window` gave last is scanned forward.
    pub fn forward(&self) -> bool {
        self.place.forward.load(Ordering::Relaxed)
    }

    /// The keyspace and key points of the window `set_window` gave last.
    pub fn window(&self) -> super::stream_share::Span {
        super::stream_share::Span {
            keyspace: self.place.keyspace.load(Ordering::Relaxed),
            lo: self.place.lo.load(Ordering::Relaxed),
            hi: self.place.hi.load(Ordering::Relaxed),
        }
    }

    /// The key point of its upper bound (`set_reach`).
    pub fn end(&self) -> u64 {
        self.place.end.load(Ordering::Relaxed)
    }
}

/// A scan that took no chunk for this many of the share's ticks (one per
/// chunk a run asks for, and a run spans at most `RUN_BYTES_MAX` = 1 MiB:
/// about one per MiB and scan) no longer protects chunks: it paused or
/// ended without leaving.
const SCANNER_IDLE_TICKS: u64 = 128;
/// A kept chunk no scan used for this many of the map's ticks (two or so
/// per run and scan: a probe and a get) is no longer kept for scans that
/// lack it.
const PROTECT_TICKS: u64 = 512;
/// Chunks a long scan has read ahead of the run it took (`read_ahead`):
/// with the run itself, up to four 4 MiB requests in flight per stream
/// (2.4 on average at a read's start, measured). With 1 MiB chunks, 4
/// beat 2, 6 and 8; with 4 MiB
/// chunks 5 was no faster than 3 on a disk then bandwidth-bound.
pub const READ_AHEAD: u64 = 3;
/// Chunks past the farthest forward scan that reads ahead may go on to by
/// themselves (`ChunkShare::stream_on`).
const STREAM_AHEAD: u64 = 2 * READ_AHEAD;

/// What a read ahead needs to start the next one (`ChunkShare::stream_on`).
#[derive(Clone)]
struct Reader {
    how: How,
    policy: Arc<ReadPolicy>,
    workers: Arc<crate::pool::WorkerPool>,
    version: Arc<Version>,
}

/// Chunks on either side of a scan's last chunk that it protects.
const SCANNER_REACH: u64 = SHARE_CHUNKS as u64;
/// Longest a scan needing a new chunk waits for others to take the oldest
/// kept chunk before dropping it anyway.
const LAGGARD_WAIT: Duration = Duration::from_millis(10);
/// A scan about to take a chunk more than this many chunks ahead of
/// another scan on its way that is moving waits for that one (`lagging`):
/// beyond it the chunks between them no longer fit the map beside the
/// ones read ahead, and the one behind would read alone.
const PACE_GAP: u64 = SHARE_CHUNKS as u64 / 2;
/// Scans further apart than this are not paced: their ranges may well
/// never meet.
const PACE_REACH: u64 = 4 * SHARE_CHUNKS as u64;
/// A scan behind counts for pacing only if it moved to another chunk this
/// recently: a scan paused by its caller, or crawling, holds nobody up for
/// long.
const PACE_ACTIVE: Duration = Duration::from_millis(10);
/// Longest a scan waits, per chunk it takes, for scans behind it.
const PACE_WAIT: Duration = Duration::from_millis(10);
/// How often a pacing scan looks again (a scan behind that reads alone
/// does not signal `taken`).
const PACE_POLL: Duration = Duration::from_millis(1);

/// The chunks kept for scans of one database (see the module comment).
#[derive(Default)]
pub struct ChunkShare {
    map: Mutex<Map>,
    /// Signalled when a chunk is taken or a scan leaves: a scan waiting
    /// for room looks again.
    taken: Condvar,
    /// Last `Scan::id` handed out.
    scan_ids: AtomicU64,
    /// Scans marked long (`mark_long`) that have not left.
    long_scans: AtomicUsize,
    /// Times a scan waited for scans behind it (stats): to take a chunk
    /// well ahead of them (`lagging`), or before dropping a chunk they
    /// still lack.
    laggard_waits: AtomicU64,
    /// Chunks read ahead of the scans (stats; also in `reads`).
    ahead_reads: AtomicU64,
    /// Buffers handed to a read for the first time (stats): each one's
    /// memory is faulted in by that read.
    new_buffers: AtomicU64,
    /// Chunks read from files, and waits for a read in flight (stats).
    reads: AtomicU64,
    waits: AtomicU64,
    /// Buffers of dropped chunks (and of chunks read for one scan alone),
    /// for the next reads.
    buffers: Recycler<SPARE_MAX, DRAINING_MAX>,
    /// Buffers mapped but not yet read into (no memory behind them until
    /// a read faults it in), mapped `FRESH_BATCH` at a time.
    fresh: Mutex<Vec<Chunk>>,
    /// Chunks of value streams kept for long scans (`stream_share.rs`).
    pub streams: Arc<super::stream_share::StreamShare>,
    /// Windows of entries long scans share (`window_share.rs`).
    pub windows: super::window_share::WindowShare,
}

/// Spare buffers kept.
const SPARE_MAX: usize = 4;
/// Buffers mapped at once when a read finds no spare (`ChunkShare::fresh`).
/// Mapping takes the process's memory-map lock for writing, which waits
/// for every page fault in progress, and at a shared scan's start the
/// other reads are faulting in their new buffers: mapped one per read,
/// the first 16 reads of the contest's range phase each waited 10-21 ms
/// for their mapping, and the first 64 MiB took 140 ms to read instead of
/// about 20.
const FRESH_BATCH: usize = 8;
/// Dropped chunks still held by scans that are watched for their buffers
/// (`ChunkShare::draining`); past it the oldest is let go, its buffer
/// unmapped when its last holder drops it. Four scanners of the contest's
/// range phase hold a few chunks each (windows loaded ahead).
const DRAINING_MAX: usize = SHARE_CHUNKS;

impl ChunkShare {
    /// A new scan's identity.
    pub fn scan(&self) -> Scan {
        Scan {
            id: self.scan_ids.fetch_add(1, Ordering::Relaxed) + 1,
            joined: Arc::default(),
            left: Arc::default(),
            long: Arc::default(),
            place: Arc::new(Place {
                end: AtomicU64::new(u64::MAX),
                ..Place::default()
            }),
        }
    }

    /// Counts `scan` among the long scans (its read-ahead window reached
    /// its largest: it is reading many entries), once.
    pub fn mark_long(&self, scan: &Scan) {
        if !scan.long.swap(true, Ordering::Relaxed) {
            self.long_scans.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Long scans now running.
    pub fn long_scans(&self) -> usize {
        self.long_scans.load(Ordering::Relaxed)
    }

    /// Forgets `scan` (its iterator is dropped): it protects no chunk.
    pub fn leave(&self, scan: &Scan) {
        if scan.long.swap(false, Ordering::Relaxed) {
            let before = self.long_scans.fetch_sub(1, Ordering::Relaxed);
            assert!(before > 0, "a long scan left that was not counted");
            if before == 1 {
                // The last long scan: the windows' values hold chunks no
                // scan will take.
                self.windows.clear();
                self.streams.idle();
            }
        }
        self.streams.forget(scan.id);
        // With `note_scanner`'s stores in the other order (both SeqCst):
        // either it sees `left` and stays out, or this sees `joined` and
        // removes it (after its insert, which holds the map lock).
        scan.left.store(true, Ordering::SeqCst);
        if scan.joined.load(Ordering::SeqCst) {
            self.map.lock().scanners.remove(&scan.id);
            self.taken.notify_all();
            // The chunks it held are likely let go now: their buffers are
            // not kept past `SPARE_MAX` once the last scan is gone.
            self.buffers.recycle();
        }
    }

    /// Chunk `index` of `seg` for `scan`, if it is kept and read; never
    /// waits.
    /// `None` also when `scan` should first wait for a scan behind it
    /// (`lagging`): `get` then waits.
    pub fn ready(&self, seg: u64, index: u64, scan: &Scan) -> Option<ChunkBytes> {
        let cell = {
            let mut map = self.map.lock();
            if lagging(&map, (seg, index), scan, Instant::now()) {
                return None;
            }
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
            if let Ok(len) = seg.flushed_len() {
                note_length(&mut map, seg.number, len);
            }
            // A scan that moved well ahead of another on its way lets it
            // catch up first. On two cores a scan that starts its pass a
            // few milliseconds late, or is starved of CPU that long, falls
            // out of the map's reach, and the scans then read their chunks
            // alone: 3 of 15 runs of the contest's range phase without
            // pacing read the data 1.6 to 6.6 times over.
            let now = Instant::now();
            let until = now + PACE_WAIT;
            let mut paced = false;
            let mut at = now;
            while at < until && lagging(&map, key, scan, at) {
                if !paced {
                    paced = true;
                    self.laggard_waits.fetch_add(1, Ordering::Relaxed);
                }
                self.taken.wait_until(&mut map, (at + PACE_POLL).min(until));
                at = Instant::now();
            }
            let deadline = Instant::now() + LAGGARD_WAIT;
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
                let late = Instant::now() >= deadline;
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
            let buffer = self.buffer().ok()?;
            let (chunk, served) = buffer.read_from(seg, index * CHUNK, how).ok()?;
            policy.count(served);
            let chunk = Arc::new(chunk);
            self.buffers.drain(chunk.clone());
            return Some(chunk);
        };
        if !mine && !cell.claim() {
            return cell.wait(&self.waits);
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
                    map.slots.remove(&key);
                }
            },
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let bytes = self
            .buffer()
            .and_then(|buffer| buffer.read_from(seg, key.1 * CHUNK, how))
            .ok();
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
    /// scanners slice the current ones. Forward, past the end of `seg`,
    /// the read ahead goes on into the first chunks of the segment a scan
    /// went on to from `seg` before (`Map::successors`), if the view has
    /// it, so a scan does not wait at each values file's start. Room is
    /// taken only from chunks no nearby scan still needs; without room,
    /// nothing is read ahead.
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
        let (trend, successor) = {
            let mut map = self.map.lock();
            note_length(&mut map, seg.number, len);
            match map.scanners.get(&scan.id) {
                Some(s) => (s.trend, map.successors.get(&seg.number).copied()),
                None => return,
            }
        };
        let chunks = len.div_ceil(CHUNK);
        let next: Vec<(&Arc<SegmentFile>, u64)> = if trend > 0 {
            let here = (last + 1..=last + READ_AHEAD).take_while(|&i| i < chunks);
            let mut next: Vec<_> = here.map(|i| (seg, i)).collect();
            let rest = READ_AHEAD - next.len() as u64;
            let then = (rest > 0)
                .then(|| self.successor(seg.number, successor, &view.version))
                .flatten();
            if rest > 0
                && let Some(then) = then
                && let Ok(then_len) = then.flushed_len()
            {
                next.extend((0..rest.min(then_len.div_ceil(CHUNK))).map(|i| (then, i)));
            }
            next
        } else if trend < 0 {
            let from = first.saturating_sub(READ_AHEAD);
            (from..first.min(chunks)).rev().map(|i| (seg, i)).collect()
        } else {
            return;
        };
        let reader = Reader {
            how,
            policy: view.policy.clone(),
            workers: view.workers.clone(),
            version: view.version.clone(),
        };
        for (seg, index) in next {
            let key = (seg.number, index);
            let cell = {
                let mut map = self.map.lock();
                if map.slots.contains_key(&key) {
                    continue;
                }
                if !self.make_room(&mut map) {
                    break;
                }
                ahead_slot(&mut map, key)
            };
            self.spawn_read(seg, key, cell, &reader);
        }
    }

    /// Reads chunk `key` of `seg`, just inserted as being read (`cell`),
    /// on a worker thread; once it is in, the read goes on to the chunk
    /// after it (`stream_on`).
    fn spawn_read(
        self: &Arc<Self>,
        seg: &Arc<SegmentFile>,
        key: (u64, u64),
        cell: Arc<Cell>,
        reader: &Reader,
    ) {
        self.ahead_reads.fetch_add(1, Ordering::Relaxed);
        let (share, seg, then) = (self.clone(), seg.clone(), reader.clone());
        reader.workers.run(move || {
            if cell.claim()
                && share
                    .fill(&seg, key, &cell, then.how, &then.policy)
                    .is_some()
            {
                share.stream_on(&seg, key, &then);
            }
        });
    }

    /// After chunk `key` of `seg` was read ahead: starts reading the first
    /// chunk after it that is not kept (on in `seg`, then in the values
    /// file forward scans go on to) if room is left and a forward scan
    /// still taking chunks is at most `STREAM_AHEAD` chunks before it. Each
    /// read ahead that ends so starts one more, wherever it ends. Scans
    /// start reads only as they take runs (`read_ahead`), so while all of
    /// them are busy slicing chunks the device used to run dry: in traces
    /// of the contest's range phase no read was in flight 9-10 % of the
    /// time and one alone 16-20 %. A read ahead that starts the next
    /// keeps the device at the depth `read_ahead` gave it; a scan that
    /// stops leaves at most `STREAM_AHEAD` chunks read for nothing, and a
    /// scan that left (its iterator dropped) none beyond what is in flight.
    fn stream_on(self: &Arc<Self>, seg: &Arc<SegmentFile>, key: (u64, u64), reader: &Reader) {
        let mut at = (seg.clone(), key.1);
        for _ in 0..=STREAM_AHEAD {
            let Some(next) = self.chunk_after(&at.0, at.1, reader) else {
                return;
            };
            let key = (next.0.number, next.1);
            let cell = {
                let mut map = self.map.lock();
                if !before_front(&map, key) {
                    return;
                }
                if map.slots.contains_key(&key) {
                    None
                } else if self.make_room(&mut map) {
                    Some(ahead_slot(&mut map, key))
                } else {
                    return;
                }
            };
            if let Some(cell) = cell {
                self.spawn_read(&next.0, key, cell, reader);
                return;
            }
            at = next;
        }
    }

    /// The chunk after chunk `index` of `seg` for a forward scan: the next
    /// in `seg`, else the first of the values file scans went on to (or
    /// are guessed to go on to) from `seg`.
    fn chunk_after(
        &self,
        seg: &Arc<SegmentFile>,
        index: u64,
        reader: &Reader,
    ) -> Option<(Arc<SegmentFile>, u64)> {
        let len = seg.flushed_len().ok()?;
        if index + 1 < len.div_ceil(CHUNK) {
            return Some((seg.clone(), index + 1));
        }
        let known = self.map.lock().successors.get(&seg.number).copied();
        let then = self.successor(seg.number, known, &reader.version)?;
        then.flushed_len()
            .is_ok_and(|l| l > 0)
            .then(|| (then.clone(), 0))
    }

    /// The values file forward scans go on to from `from`: `known` (the
    /// map's successor of `from`, looked up by the caller) if `version`
    /// has it, else the guess (`guess_successor`).
    fn successor<'v>(
        &self,
        from: u64,
        known: Option<u64>,
        version: &'v Version,
    ) -> Option<&'v Arc<SegmentFile>> {
        match known {
            Some(n) => version.segment(n),
            None => self.guess_successor(from, version),
        }
    }

    /// Whether the map may take one more chunk: it has room, or a chunk no
    /// nearby scan needs is dropped for it.
    fn make_room(&self, map: &mut Map) -> bool {
        if map.slots.len() < SHARE_CHUNKS {
            return true;
        }
        match unneeded(map) {
            Some(victim) => {
                self.drop_chunk(map, victim);
                true
            }
            None => false,
        }
    }

    /// The values file a forward scan at the end of values file `from`
    /// most likely goes on to, before any scan did (`Map::successors`
    /// learns it only at the first crossing, which in a single pass over
    /// the data is always too late): the next values file by number. A
    /// full compaction and the settling steps fill values files in key
    /// order, numbering them as they go, so the guess holds for settled
    /// data; it is kept as the successor (a scan that goes elsewhere
    /// corrects it), so its first chunks count as needed like a learned
    /// successor's. A journal is never guessed: its values lie in write
    /// order, and scans do not share its runs.
    fn guess_successor<'v>(&self, from: u64, version: &'v Version) -> Option<&'v Arc<SegmentFile>> {
        let (&number, next) = version.segments.range(from + 1..).next()?;
        if next.file.in_write_order() {
            return None;
        }
        let mut map = self.map.lock();
        if map.successors.len() >= SUCCESSORS_MAX {
            map.successors.clear();
        }
        map.successors.entry(from).or_insert(number);
        Some(&next.file)
    }

    /// A buffer for one chunk read: a spare one (its memory faulted in
    /// already), else one mapped before and never used, else the first of
    /// a new batch of `FRESH_BATCH` (`Err` only if no memory could be
    /// mapped for it).
    fn buffer(&self) -> std::io::Result<Chunk> {
        let len = CHUNK as usize;
        if let Some(spare) = self.buffers.take(len) {
            return Ok(spare);
        }
        let mut fresh = self.fresh.lock();
        if let Some(buffer) = fresh.pop() {
            self.new_buffers.fetch_add(1, Ordering::Relaxed);
            return Ok(buffer);
        }
        let buffer = Chunk::zeroed(len, crate::io::DIRECT_ALIGN)?;
        self.new_buffers.fetch_add(1, Ordering::Relaxed);
        while fresh.len() + 1 < FRESH_BATCH {
            match Chunk::zeroed(len, crate::io::DIRECT_ALIGN) {
                Ok(more) => fresh.push(more),
                Err(_) => break,
            }
        }
        Ok(buffer)
    }

    /// Drops kept chunk `victim` (under the map lock), keeping its buffer
    /// as a spare if no scan holds the chunk any more and room is left.
    fn drop_chunk(&self, map: &mut Map, victim: (u64, u64)) {
        assert!(
            map.slots.contains_key(&victim),
            "dropping {victim:?}, not kept"
        );
        if let Some(bytes) = evict(map, victim) {
            self.buffers.drop_chunk(bytes);
        }
        assert!(!map.slots.contains_key(&victim), "{victim:?} dropped");
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
        let before = map.slots.insert(key, slot);
        assert!(before.is_none(), "chunk {key:?} kept twice");
        (cell, true)
    }

    /// Times a scan waited for scans behind it since open (pacing, or
    /// before dropping a chunk they lack).
    pub fn laggard_waits(&self) -> u64 {
        self.laggard_waits.load(Ordering::Relaxed)
    }

    /// Chunk buffers first used since open (each one's memory faulted in
    /// by the read that used it); the rest were reused.
    pub fn new_buffers(&self) -> u64 {
        self.new_buffers.load(Ordering::Relaxed)
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

/// Inserts chunk `key` into the map as being read ahead (taken by no
/// scan yet); the caller checked it is not there and made room.
fn ahead_slot(map: &mut Map, key: (u64, u64)) -> Arc<Cell> {
    let cell = Cell::new(false);
    let slot = Slot {
        cell: cell.clone(),
        used: map.tick,
        takers: Vec::new(),
    };
    map.slots.insert(key, slot);
    cell
}

/// Whether a forward scan that still takes chunks is before chunk `key`
/// and at most `STREAM_AHEAD` chunks from it (`ChunkShare::stream_on`).
fn before_front(map: &Map, key: (u64, u64)) -> bool {
    map.scanners.values().any(|s| {
        if s.trend <= 0 || map.tick - s.seen > SCANNER_IDLE_TICKS {
            return false;
        }
        let gap = if s.segment == key.0 {
            key.1.checked_sub(s.index)
        } else {
            forward_gap(map, (s.segment, s.index), key)
        };
        gap.is_some_and(|g| g > 0 && g <= STREAM_AHEAD)
    })
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
    let moved = match map.scanners.get(&scan.id) {
        Some(s) if (s.segment, s.index) == key => s.moved,
        _ => Instant::now(),
    };
    let trend = match map.scanners.get(&scan.id) {
        Some(s) if s.segment == key.0 => {
            let moved = if key.1 >= s.index {
                i64::try_from(key.1 - s.index).unwrap_or(8)
            } else {
                -i64::try_from(s.index - key.1).unwrap_or(8)
            };
            (s.trend + moved.clamp(-8, 8)).clamp(-8, 8)
        }
        // Into another segment: a scan over settled values goes on in the
        // direction it had (the next Part in key order), and reads ahead
        // in the new segment at once instead of after its first chunk.
        Some(s) => s.trend,
        None => 0,
    };
    if let Some(s) = map.scanners.get(&scan.id)
        && s.segment != key.0
        && s.trend > 0
        && key.1 == 0
    {
        if map.successors.len() >= SUCCESSORS_MAX {
            map.successors.clear();
        }
        let from = s.segment;
        map.successors.insert(from, key.0);
    }
    map.scanners.insert(
        scan.id,
        Scanner {
            segment: key.0,
            index: key.1,
            seen: tick,
            moved,
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
        Some(*id) != except
            && within_reach(map, s, key)
            && map.tick - s.seen <= SCANNER_IDLE_TICKS
            && !slot.takers.contains(id)
    })
}

/// Whether chunk `key` lies on the way of scan `s`: in its segment within
/// `SCANNER_REACH` chunks and not behind it (a forward scan has passed the
/// chunks below it, a backward one those above), or, for a forward scan,
/// among the first [`READ_AHEAD`] chunks of the segment it is known to go
/// on to (`Map::successors`: what a read ahead across the boundary brought
/// in). Protecting more of the next segment for scans still before it
/// filled the map with chunks nobody could drop: two interleaved scans
/// then read their chunks alone, twice over (`tests/shared_scans.rs`).
fn within_reach(map: &Map, s: &Scanner, key: (u64, u64)) -> bool {
    if s.segment == key.0 {
        let passed = (s.trend > 0 && key.1 < s.index) || (s.trend < 0 && key.1 > s.index);
        return s.index.abs_diff(key.1) <= SCANNER_REACH && !passed;
    }
    s.trend > 0 && map.successors.get(&s.segment) == Some(&key.0) && key.1 < READ_AHEAD
}

/// Records that `segment` is `len` bytes long (`Map::lengths`).
fn note_length(map: &mut Map, segment: u64, len: u64) {
    if map.lengths.len() >= SUCCESSORS_MAX && !map.lengths.contains_key(&segment) {
        map.lengths.clear();
    }
    map.lengths.insert(segment, len.div_ceil(CHUNK));
}

/// Whether `scan`, about to take chunk `key`, should first wait for
/// another scan: one moving the same way that moved to another chunk
/// within `PACE_ACTIVE` of `now` and is more than `PACE_GAP` but at most
/// `PACE_REACH` chunks behind `key` on the way to it (in the same
/// segment, or for a forward scan in a segment that leads to `key`'s
/// through `Map::successors`). Scans over the same range at the same time
/// then stay within the map's reach of one another, so each chunk is read
/// once: the scan ahead waits a little, where otherwise the one behind
/// would read every chunk again beside it, sharing the device. A scan
/// behind that moves on steadily but slower holds the one ahead to its
/// pace (docs/architecture.md §Shared scans, "Pacing").
fn lagging(map: &Map, key: (u64, u64), scan: &Scan, now: Instant) -> bool {
    let Some(me) = map.scanners.get(&scan.id) else {
        return false;
    };
    if me.trend == 0 {
        return false;
    }
    map.scanners.iter().any(|(id, s)| {
        if *id == scan.id
            || s.trend.signum() != me.trend.signum()
            || now.saturating_duration_since(s.moved) > PACE_ACTIVE
        {
            return false;
        }
        let gap = if s.segment == key.0 {
            if me.trend > 0 {
                key.1.checked_sub(s.index)
            } else {
                s.index.checked_sub(key.1)
            }
        } else if me.trend > 0 {
            forward_gap(map, (s.segment, s.index), key)
        } else {
            None
        };
        gap.is_some_and(|g| g > PACE_GAP && g <= PACE_REACH)
    })
}

/// Chunks from `from` forward to `to` in another segment, following
/// `Map::successors` from `from`'s segment while the way is known and
/// shorter than `PACE_REACH`.
fn forward_gap(map: &Map, from: (u64, u64), to: (u64, u64)) -> Option<u64> {
    let mut segment = from.0;
    // Chunks from `from` to the end of its segment, then whole segments.
    let mut gap = map.lengths.get(&segment)?.checked_sub(from.1)?;
    for _ in 0..=PACE_REACH {
        let next = *map.successors.get(&segment)?;
        if next == to.0 {
            return gap.checked_add(to.1);
        }
        if gap > PACE_REACH {
            return None;
        }
        gap = gap.checked_add(*map.lengths.get(&next)?)?;
        segment = next;
    }
    None
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

/// Drops chunk `victim` if it was read: its buffer if no scan holds the
/// chunk any more, else the chunk itself (to watch until they let go,
/// `ChunkShare::drain`). Called under the map lock, so nobody can take a
/// new reference to the dropped cell.
fn evict(map: &mut Map, victim: (u64, u64)) -> Option<ChunkBytes> {
    let slot = map.slots.remove(&victim)?;
    slot.cell.state.lock().clone()?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks a full map keeps (the tests' positions are in chunk numbers).
    const N: u64 = SHARE_CHUNKS as u64;

    fn chunk(fill: u8, len: usize) -> ChunkBytes {
        let mut c = Chunk::zeroed(len, 4096).expect("a buffer");
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
            moved: Instant::now(),
            trend: 1,
        };
        map.scanners.insert(id, s);
    }

    fn scan(id: u64) -> Scan {
        Scan {
            id,
            joined: Arc::default(),
            left: Arc::default(),
            long: Arc::default(),
            place: Arc::default(),
        }
    }

    #[test]
    fn the_oldest_chunk_every_nearby_scan_took_is_dropped_first() {
        // Scan 1 is ahead at chunk 8 + N and took 9..9 + N (a full map);
        // scan 2, at 12, took 9..13 so far.
        let mut map = map_of(9..9 + N, |i| if i <= 12 { vec![1, 2] } else { vec![1] });
        at(&mut map, 1, 7, 8 + N, 1000);
        at(&mut map, 2, 7, 12, 999);
        assert_eq!(unneeded(&map), Some((7, 9)));
        assert!(!behind(&map, &scan(1)));
        assert!(behind(&map, &scan(2)), "scan 2 has chunks ahead to take");
        // Once scan 2 has taken nothing yet, every chunk within its reach
        // is needed: none is dropped without a wait.
        let mut map = map_of(9..9 + N, |_| vec![1]);
        at(&mut map, 1, 7, 8 + N, 1000);
        at(&mut map, 2, 7, 8, 999);
        assert_eq!(unneeded(&map), None);
        assert_eq!(lru(&map), Some((7, 9)), "the fallback after the wait");
        // Out of its reach, a chunk is not kept for it.
        at(&mut map, 2, 7, 2, 999);
        assert_eq!(unneeded(&map), Some((7, 3 + N)));
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
        // A move to another segment keeps the direction: the scan reads
        // ahead in it from its first chunk.
        note_scanner(&mut map, (8, 0), &fwd);
        assert!(map.scanners[&1].trend > 0);
        note_scanner(&mut map, (9, 40), &bwd);
        assert!(map.scanners[&2].trend < 0);
        // A new scan has no direction yet.
        note_scanner(&mut map, (8, 0), &scan(3));
        assert_eq!(map.scanners[&3].trend, 0);
    }

    #[test]
    fn a_forward_scan_teaches_where_a_segment_goes_on() {
        let mut map = Map::default();
        let (fwd, bwd, new) = (scan(1), scan(2), scan(3));
        for i in [14, 15] {
            note_scanner(&mut map, (7, i), &fwd);
        }
        note_scanner(&mut map, (8, 0), &fwd);
        assert_eq!(map.successors.get(&7), Some(&8));
        // Not from a backward scan, nor from one entering mid-segment, nor
        // from a scan with no direction yet.
        for i in [21, 20] {
            note_scanner(&mut map, (9, i), &bwd);
        }
        note_scanner(&mut map, (10, 0), &bwd);
        note_scanner(&mut map, (8, 3), &fwd);
        note_scanner(&mut map, (11, 0), &new);
        note_scanner(&mut map, (12, 0), &new);
        assert_eq!(map.successors.len(), 1, "{:?}", map.successors);
    }

    #[test]
    fn the_first_chunks_of_the_next_segment_are_kept_for_scans_still_before_it() {
        // Scan 1 went on from segment 7 into 8 and took 8's first chunk;
        // scan 2 is still in 7, moving forward: it will need it.
        let mut map = map_of(9..12, |_| vec![1, 2]);
        let cell = Cell::new(true);
        *cell.state.lock() = Some(Some(chunk(1, 16)));
        let slot = Slot {
            cell,
            used: 1000,
            takers: vec![1],
        };
        map.slots.insert((8, 0), slot);
        map.successors.insert(7, 8);
        at(&mut map, 1, 8, 0, 1000);
        at(&mut map, 2, 7, 11, 1000);
        assert_eq!(unneeded(&map), Some((7, 9)), "taken by both: first to go");
        map.slots.retain(|k, _| k.0 == 8);
        assert_eq!(unneeded(&map), None, "scan 2 still needs (8, 0)");
        // Without the successor, segment 8 is out of scan 2's way.
        map.successors.clear();
        assert_eq!(unneeded(&map), Some((8, 0)));
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
    fn long_scans_are_counted_once_until_they_leave() {
        let share = ChunkShare::default();
        let (a, b) = (share.scan(), share.scan());
        assert_eq!(share.long_scans(), 0);
        share.mark_long(&a);
        share.mark_long(&a);
        assert!(a.is_long() && !b.is_long());
        assert_eq!(share.long_scans(), 1, "marked twice, counted once");
        share.mark_long(&b.clone());
        assert!(b.is_long(), "a clone marks the scan itself");
        assert_eq!(share.long_scans(), 2);
        share.leave(&a);
        assert_eq!(share.long_scans(), 1);
        share.leave(&a);
        assert_eq!(share.long_scans(), 1, "leaving twice counts once");
        share.leave(&b);
        assert_eq!(share.long_scans(), 0);
        // A scan that never became long leaves the count alone.
        share.leave(&share.scan());
        assert_eq!(share.long_scans(), 0);
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
        let mut map = map_of(9..9 + N, |_| vec![1]);
        at(&mut map, 1, 7, 8 + N, 1000);
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
    fn a_dropped_chunk_still_held_gives_its_buffer_back_once_let_go() {
        let share = ChunkShare::default();
        let held = chunk(3, CHUNK as usize);
        let at = held.bytes().as_ptr();
        {
            let mut map = share.map.lock();
            let cell = Cell::new(true);
            *cell.state.lock() = Some(Some(held.clone()));
            let slot = Slot {
                cell,
                used: 0,
                takers: vec![],
            };
            map.slots.insert((7, 0), slot);
            share.drop_chunk(&mut map, (7, 0));
        }
        assert!(
            share.buffers.spare.lock().is_empty(),
            "a scan still holds it"
        );
        assert_eq!(share.buffers.draining.lock().len(), 1);
        // While held, a read gets another buffer.
        let other = share.buffer().expect("a buffer");
        assert_ne!(other.bytes().as_ptr(), at);
        assert_eq!(share.buffers.draining.lock().len(), 1);
        // Let go: the next read reuses it.
        drop(held);
        let reused = share.buffer().expect("a buffer");
        assert_eq!(reused.bytes().as_ptr(), at);
        assert!(share.buffers.draining.lock().is_empty());
        assert!(share.buffers.spare.lock().is_empty());
    }

    #[test]
    fn a_scan_well_ahead_of_a_moving_one_waits_for_it() {
        let mut map = map_of(0..0, |_| vec![]);
        let now = Instant::now();
        at(&mut map, 1, 7, 20, 1000);
        at(&mut map, 2, 7, 20 - PACE_GAP, 1000);
        // Scan 1 about to take chunk 21: scan 2 is PACE_GAP + 1 behind it.
        assert!(lagging(&map, (7, 21), &scan(1), now));
        assert!(!lagging(&map, (7, 20), &scan(1), now), "PACE_GAP behind");
        // The scan behind never waits for the one ahead.
        assert!(!lagging(&map, (7, 20 - PACE_GAP + 1), &scan(2), now));
        // Too far behind to be on the same range, or not moving lately.
        assert!(!lagging(&map, (7, 21 + PACE_REACH), &scan(1), now));
        let later = now + PACE_ACTIVE + Duration::from_millis(1);
        assert!(!lagging(&map, (7, 21), &scan(1), later));
        // A scan moving the other way is not on this one's way.
        map.scanners.get_mut(&2).expect("scan 2").trend = -1;
        assert!(!lagging(&map, (7, 21), &scan(1), now));
        // Behind, across a boundary: scan 2 near the end of segment 6,
        // which goes on into 7; how far depends on 6's length.
        at(&mut map, 2, 6, 10, 1000);
        map.successors.insert(6, 7);
        assert!(!lagging(&map, (7, 3), &scan(1), now), "6's length unknown");
        note_length(&mut map, 6, 16 * CHUNK);
        assert!(!lagging(&map, (7, 2), &scan(1), now), "6 + 2 chunks apart");
        assert!(lagging(&map, (7, 3), &scan(1), now), "6 + 3 chunks apart");
        // Two boundaries back: 5 (4 chunks long) goes on into 6.
        at(&mut map, 2, 5, 1, 1000);
        map.successors.insert(5, 6);
        note_length(&mut map, 5, 4 * CHUNK);
        assert!(lagging(&map, (7, 0), &scan(1), now), "3 + 16 chunks apart");
        at(&mut map, 2, 5, 0, 1000);
        assert!(!lagging(&map, (7, PACE_REACH - 20 + 1), &scan(1), now));
        assert!(lagging(&map, (7, PACE_REACH - 20), &scan(1), now));
        // Not a successor: unrelated.
        at(&mut map, 2, 6, 10, 1000);
        map.successors.insert(6, 8);
        assert!(!lagging(&map, (7, 3), &scan(1), now));
    }

    #[test]
    fn a_kept_chunk_is_not_ready_for_a_scan_well_ahead_of_a_moving_one() {
        let share = ChunkShare::default();
        let (ahead, behind) = (share.scan(), share.scan());
        {
            let mut map = share.map.lock();
            *map = map_of(0..N, |_| vec![]);
            // Both move forward; `behind` took chunk 2 just now.
            for i in 0..=PACE_GAP + 3 {
                note_scanner(&mut map, (7, i), &ahead);
            }
            for i in 0..=2 {
                note_scanner(&mut map, (7, i), &behind);
            }
        }
        // `ahead` at chunk PACE_GAP + 3 takes the next kept one only once
        // `behind` is within PACE_GAP of it (`get` then waits).
        assert!(share.ready(7, PACE_GAP + 4, &ahead).is_none());
        assert!(share.ready(7, 3, &behind).is_some());
        assert!(share.ready(7, PACE_GAP + 4, &ahead).is_none());
        assert!(share.ready(7, 4, &behind).is_some());
        assert!(share.ready(7, PACE_GAP + 4, &ahead).is_some());
    }

    #[test]
    fn a_scan_past_a_chunk_or_alone_keeps_nothing() {
        // Chunks 9..9 + N taken by scan 1 only; scan 2 moves forward at
        // N - 2: it has passed the chunks below (its range skipped them),
        // it may still take those from N - 2 up.
        let mut map = map_of(9..9 + N, |_| vec![1]);
        at(&mut map, 1, 7, 8 + N, 1000);
        at(&mut map, 2, 7, N - 2, 1000);
        assert_eq!(unneeded(&map), Some((7, 9)));
        map.scanners.get_mut(&2).expect("scan 2").trend = -1;
        assert_eq!(
            unneeded(&map),
            Some((7, N - 1)),
            "backward, it passed those above it"
        );
        // A lone scan lacking its own chunks (read ahead, never taken):
        // no other scan needs them, so it drops one instead of waiting.
        let mut map = map_of(9..9 + N, |_| Vec::new());
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
        let mut map = map_of(9..9 + N, |_| vec![1]);
        at(&mut map, 1, 7, 8 + N, 1000);
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
    fn buffers_are_mapped_a_batch_at_a_time_and_spares_go_first() {
        let share = ChunkShare::default();
        let first = share.buffer().expect("a buffer");
        assert_eq!(share.fresh.lock().len(), FRESH_BATCH - 1);
        let mut taken = vec![first];
        for _ in 1..FRESH_BATCH {
            taken.push(share.buffer().expect("a buffer"));
        }
        assert!(share.fresh.lock().is_empty(), "the batch is used up");
        assert_eq!(share.new_buffers(), FRESH_BATCH as u64);
        let spare = taken.pop().expect("a buffer");
        let at = spare.bytes().as_ptr();
        share.buffers.keep(spare);
        assert_eq!(share.buffer().expect("a buffer").bytes().as_ptr(), at);
        assert!(share.fresh.lock().is_empty(), "a spare was there");
        assert_eq!(
            share.new_buffers(),
            FRESH_BATCH as u64,
            "a spare is not new"
        );
        let _next = share.buffer().expect("a buffer");
        assert_eq!(share.fresh.lock().len(), FRESH_BATCH - 1, "a new batch");
    }
}
