//! Reading the values of many pointers at once, for iterators.
//!
//! A scan over separated values would pay one device round trip per value
//! if it loaded each value as it met it. [`ReadView::load_start`] takes a
//! window of pointers instead, sorts them by segment and offset, and merges
//! neighbours into runs: one request per run, gaps of at most
//! [`RUN_GAP_MAX`] read and dropped, a run at most [`RUN_BYTES_MAX`]. Values
//! written in key order (a sequential load, or values a compaction moved)
//! become large sequential reads; scattered values become many small reads,
//! which the database's worker threads (`pool.rs`) issue at once, so
//! the device sees a queue of requests instead of one at a time.
//!
//! Runs whose bytes the page cache holds (a journal still written to, or
//! recently read pages) are read on the calling thread, asking the kernel
//! not to wait (`FileRead::read_cached`); only the others go to the
//! reader threads. With `Options::direct_value_reads` every flushed run goes to
//! the device.

use super::ReadView;
use super::chunk::{self, CHUNK, ChunkBytes, Value};
use super::policy::{How, Served};
use super::share::{SHARE_RUN_MIN, Scan};
use super::stream_share::{Reader as StreamReader, Span};
use crate::Result;
use crate::format::compress::decompress;
use crate::format::vptr::ValuePtr;
use crate::version::segments::{SegmentFile, SegmentKind};
use std::sync::Arc;

/// Largest gap between two values read with one request.
pub const RUN_GAP_MAX: u64 = 16 << 10;
/// Largest span one request reads.
pub const RUN_BYTES_MAX: u64 = 1 << 20;
/// Most chunks of one stream read ahead (`ReadView::read_streams_ahead`):
/// under the defaults a stream is one.
const STREAM_AHEAD_CHUNKS: u64 = 4;
/// A run of a flushed journal with fewer values than this counts as read
/// at random (`ReadPolicy::count_scattered`): values written in key order
/// come in runs of many.
const SCATTERED_RUN_MEMBERS: usize = 4;

/// Values of neighbouring pointers in one segment, read with one request.
struct Run {
    segment: u64,
    start: u64,
    end: u64,
    /// (index into the caller's slice, pointer), by offset.
    members: Vec<(usize, ValuePtr)>,
    /// Read through the database's [`ChunkShare`] (a long run of a
    /// flushed segment), not into a buffer of its own.
    shared: bool,
    /// Taken out of a flushed value stream's chunks, shared by long scans
    /// (`StreamShare`).
    stream: bool,
    /// How a device read of it goes: the view's `reads`, or the page
    /// cache for scattered values while long scans run together
    /// (`ReadView::load_start`).
    how: How,
}

/// Values read for a window: (index into the caller's slice, value).
type Loaded = Vec<(usize, Result<Value>)>;

/// Values a reader got: `None` where the value could not be read or does
/// not match its pointer (the caller then goes through `ReadView::load`).
type Checked = Vec<(usize, Option<Value>)>;

/// Values being loaded: what was read already, and the device runs in
/// flight on the worker threads ([`ReadView::load_start`]).
pub struct Loading {
    /// The pointers, as the caller gave them.
    /// Each value's pointer, decoded (`None` where it was malformed: that
    /// value is settled already).
    ptrs: Vec<Option<ValuePtr>>,
    loaded: Loaded,
    /// Results of the runs handed to worker threads.
    rx: Option<crossbeam_channel::Receiver<Checked>>,
    /// Indices whose values a worker was asked for.
    asked: Vec<usize>,
}

impl Loading {
    /// True if every value is loaded already: none is read on a worker
    /// thread.
    pub fn settled(&self) -> bool {
        self.rx.is_none()
    }
}

impl ReadView {
    /// Starts loading the values `encoded` pointers name: what the page
    /// cache holds is read now, device runs go to the worker threads —
    /// all of them if `overlap` (the caller has other work meanwhile: an
    /// iterator yields the window before), else all but a lone one, which
    /// is read here. [`ReadView::load_finish`] waits for them and returns
    /// the values, each as [`ReadView::load`] would (same values, same
    /// errors).
    pub fn load_start<P: AsRef<[u8]>>(&self, encoded: &[P], overlap: bool, scan: &Scan) -> Loading {
        let mut loaded: Loaded = Vec::with_capacity(encoded.len());
        let decoded: Vec<Option<ValuePtr>> = encoded
            .iter()
            .map(|e| ValuePtr::decode(e.as_ref()))
            .collect();
        let mut ptrs = Vec::with_capacity(encoded.len());
        for (i, (e, p)) in encoded.iter().zip(&decoded).enumerate() {
            match p {
                Some(p) => ptrs.push((i, *p)),
                // `load` reports the malformed pointer.
                None => loaded.push((i, self.load(e.as_ref()).map(Value::Owned))),
            }
        }
        ptrs.sort_by_key(|(_, p)| (p.segment, p.offset));
        let mut runs: Vec<Run> = Vec::new();
        for (i, p) in ptrs {
            let end = p.offset + u64::from(p.len);
            match runs.last_mut() {
                Some(r)
                    if r.segment == p.segment
                        && p.offset <= r.end.saturating_add(RUN_GAP_MAX)
                        && end.max(r.end) - r.start <= RUN_BYTES_MAX =>
                {
                    r.end = r.end.max(end);
                    r.members.push((i, p));
                }
                _ => runs.push(Run {
                    segment: p.segment,
                    start: p.offset,
                    end,
                    members: vec![(i, p)],
                    shared: false,
                    stream: false,
                    how: self.reads,
                }),
            }
        }
        // Values of flushed journals read in short runs lie in write
        // order: the bytes count towards settling them while writes go on
        // (`Options::settle_for_scans`).
        let scattered: u64 = runs
            .iter()
            .filter(|r| r.members.len() < SCATTERED_RUN_MEMBERS)
            .filter(|r| {
                self.segment(r.segment)
                    .is_some_and(|(seg, flushed)| flushed && seg.in_write_order())
            })
            .flat_map(|r| &r.members)
            .map(|(_, p)| u64::from(p.len))
            .sum();
        if scattered > 0 {
            self.policy.count_scattered(scattered, !scan.is_long());
        }
        // Scattered values of flushed journals, read while two or more
        // long scans run (a scan of the same range by several readers, as
        // in an export beside an index build): through the page cache,
        // where one scan's read serves the others that pass the same
        // values soon after. Read directly, each scan reads every value
        // from the device itself (the contest's range phase, eight
        // scanners of values in write order: 38 MB/s read directly, 226
        // MB/s through the page cache). A lone scan keeps the view's
        // policy, which spares the page cache when the values outgrow it.
        if self.reads != How::PageCache && scan.is_long() && self.share.long_scans() >= 2 {
            for r in runs.iter_mut() {
                if r.members.len() < SCATTERED_RUN_MEMBERS
                    && self
                        .segment(r.segment)
                        .is_some_and(|(seg, flushed)| flushed && seg.in_write_order())
                {
                    r.how = How::PageCache;
                }
            }
        }
        // A long scan takes flushed value streams whole, shared with the
        // other long scans (`stream_share.rs`): a stream holds one key
        // range's values of one journal, which the scan is about to meet
        // (docs/architecture.md §Value streams). The chunks this window
        // needs that are not kept are all read at once on the worker
        // threads.
        let streams = &self.share.streams;
        let stream_how = if self.reads == How::PageCache {
            How::PageCache
        } else {
            How::CachedElseDirect
        };
        let stream_reader = scan.is_long().then(|| StreamReader {
            how: stream_how,
            policy: self.policy.clone(),
            workers: self.workers.clone(),
        });
        if let Some(reader) = &stream_reader {
            let mut wanted: Vec<(Arc<SegmentFile>, u64)> = Vec::new();
            for r in runs.iter_mut() {
                if let Some((seg, true)) = self.segment(r.segment)
                    && seg.kind() == SegmentKind::Stream
                {
                    r.stream = true;
                    for index in r.start / CHUNK..r.end.div_ceil(CHUNK) {
                        if wanted
                            .last()
                            .is_none_or(|(s, i)| (s.number, *i) != (r.segment, index))
                        {
                            wanted.push((seg.clone(), index));
                        }
                    }
                }
            }
            streams.start(&wanted, reader, scan.window());
        }
        // Runs the page cache holds (a journal still written to, or a
        // flushed segment's cached pages) are read here; the rest go to
        // the worker threads.
        let mut device = Vec::new();
        let mut last_stream_chunk: Option<((u64, u64), ChunkBytes)> = None;
        // Streams this window took a chunk of first.
        let mut entered: Vec<u64> = Vec::new();
        for mut run in runs {
            let got = match self.segment(run.segment) {
                Some((seg, true)) if run.stream => {
                    // Runs come by segment and offset: the chunk of the
                    // run before is most often this run's too.
                    let got = run.chunks(|number, index| match &last_stream_chunk {
                        Some((key, chunk)) if *key == (number, index) => Some(chunk.clone()),
                        _ => {
                            let (chunk, first) =
                                streams.get(seg, index, stream_how, &self.policy, scan)?;
                            if first {
                                entered.push(number);
                            }
                            last_stream_chunk = Some(((number, index), chunk.clone()));
                            Some(chunk)
                        }
                    });
                    match got {
                        Some(chunks) => run.slice_chunks(&chunks, true),
                        None => {
                            device.push(run);
                            continue;
                        }
                    }
                }
                // A long run of a flushed segment read ahead (a long
                // scan: past its first 127 entries): shared with other
                // scanners; sliced here if every chunk is kept already,
                // reading ahead past it as a run read from the device
                // does, so the device stays busy while scans take chunks
                // that arrived before they needed them.
                Some((seg, true)) if overlap && run.end - run.start >= SHARE_RUN_MIN => {
                    run.shared = true;
                    match run.chunks(|seg, index| self.share.ready(seg, index, scan)) {
                        Some(chunks) => {
                            self.share
                                .read_ahead(seg, run.chunk_span(), self.reads, self, scan);
                            run.slice_chunks(&chunks, false)
                        }
                        None => {
                            device.push(run);
                            continue;
                        }
                    }
                }
                Some((_, true)) if run.how == How::Direct => {
                    device.push(run);
                    continue;
                }
                // A mapped segment: the values copied out of the map
                // (`io/map.rs`); under `CachedElseDirect` only if `mincore`
                // says the page cache holds the run, else read directly.
                Some((seg, true)) if self.policy.maps && seg.mapped().is_some() => {
                    let ask = run.how == How::CachedElseDirect;
                    let span = usize::try_from(run.end - run.start).ok().and_then(|len| {
                        let map = seg.mapped()?;
                        if ask {
                            map.resident(run.start, len)
                        } else {
                            map.get(run.start, len)
                        }
                    });
                    if ask {
                        self.policy.asked_cache(span.is_some());
                    }
                    match span {
                        Some(span) => {
                            self.policy.count_mapped();
                            run.slice(Some(span))
                        }
                        None => {
                            device.push(run);
                            continue;
                        }
                    }
                }
                // Data that fits in memory, the page cache holding all
                // asked of it lately: read here, without asking first
                // (`ReadPolicy::trust_cache`).
                Some((seg, true)) if run.how == How::PageCache && self.policy.trust_cache() => {
                    run.read(seg, How::PageCache, self, scan)
                }
                Some((seg, true)) => {
                    let cached = usize::try_from(run.end - run.start)
                        .ok()
                        .and_then(|len| seg.read_span_cached(run.start, len).ok().flatten());
                    self.policy.asked_cache(cached.is_some());
                    match cached {
                        Some(span) => {
                            self.policy.count(Served::Cached);
                            run.slice(Some(&span))
                        }
                        None => {
                            device.push(run);
                            continue;
                        }
                    }
                }
                Some((seg, false)) => run.read(seg, How::PageCache, self, scan),
                None => run.slice(None),
            };
            self.settle(got, &mut loaded, &decoded);
        }
        if let Some(reader) = &stream_reader
            && !entered.is_empty()
        {
            self.read_streams_ahead(entered, reader, scan.window().hi, scan);
        }
        let mut loading = Loading {
            ptrs: decoded,
            loaded,
            rx: None,
            asked: Vec::new(),
        };
        self.dispatch(device, &mut loading, overlap, scan);
        loading
    }

    /// Starts reading, for the long scans, the stream after each of
    /// `entered` (streams a scan has just taken a first chunk of): the
    /// streams of one journal are numbered in key order
    /// (`Inner::new_streams`), so the one after holds that journal's
    /// values of the next key range, which the scans need whole once they
    /// get there. So the device reads the next range's streams while the
    /// scans take this one's values, instead of every scan waiting at each
    /// range for its reads.
    fn read_streams_ahead(
        &self,
        mut entered: Vec<u64>,
        reader: &StreamReader,
        from: u64,
        scan: &Scan,
    ) {
        entered.sort_unstable();
        entered.dedup();
        let mut wanted: Vec<(Arc<SegmentFile>, u64)> = Vec::new();
        for number in entered {
            let Some((seg, true)) = number.checked_add(1).and_then(|n| self.segment(n)) else {
                continue;
            };
            if seg.kind() != SegmentKind::Stream {
                continue;
            }
            let chunks = seg
                .flushed_len()
                .map_or(0, |len| len.div_ceil(CHUNK))
                .min(STREAM_AHEAD_CHUNKS);
            wanted.extend((0..chunks).map(|index| (seg.clone(), index)));
        }
        // Their range starts past the window's (`from`, its last key's
        // point) and its end is not known here.
        let span = Span {
            lo: from,
            hi: u64::MAX,
            ..scan.window()
        };
        self.share.streams.start(&wanted, reader, span);
    }

    /// Hands `runs` of flushed segments to the worker threads (reads a
    /// lone one here unless `overlap`).
    fn dispatch(&self, runs: Vec<Run>, loading: &mut Loading, overlap: bool, scan: &Scan) {
        if let [run] = &runs[..]
            && !overlap
        {
            let got = match self.segment(run.segment) {
                Some((seg, _)) => run.read(seg, run.how, self, scan),
                None => run.slice(None),
            };
            self.settle(got, &mut loading.loaded, &loading.ptrs);
            return;
        }
        if runs.is_empty() {
            return;
        }
        let (tx, rx) = crossbeam_channel::unbounded::<Checked>();
        #[cfg(target_os = "linux")]
        if runs.iter().all(|r| r.how.direct_misses())
            && runs.len() >= URING_RUNS_MIN
            && crate::io::uring::available()
            && runs.iter().all(|r| {
                !r.shared
                    && self
                        .segment(r.segment)
                        .is_some_and(|(seg, _)| matches!(seg.direct_fd(), Ok(Some(_))))
            })
        {
            // One job reads the whole window through its thread's ring.
            let mut batch = Vec::with_capacity(runs.len());
            for run in runs {
                match self.segment(run.segment) {
                    Some((seg, _)) => {
                        loading.asked.extend(run.members.iter().map(|&(i, _)| i));
                        batch.push((run, seg.clone()));
                    }
                    None => self.settle(run.slice(None), &mut loading.loaded, &loading.ptrs),
                }
            }
            let (view, scan) = (self.clone(), scan.clone());
            self.workers.run(move || {
                let _ = tx.send(read_batch(&batch, &view, &scan));
            });
            loading.rx = Some(rx);
            return;
        }
        for run in runs {
            let Some((seg, _)) = self.segment(run.segment) else {
                self.settle(run.slice(None), &mut loading.loaded, &loading.ptrs);
                continue;
            };
            loading.asked.extend(run.members.iter().map(|&(i, _)| i));
            let (seg, tx, view, scan) = (seg.clone(), tx.clone(), self.clone(), scan.clone());
            self.workers.run(move || {
                let _ = tx.send(run.read(&seg, run.how, &view, &scan));
            });
        }
        // Every job holds a sender and drops it when done (also if it
        // panicked): once all are gone, the receiver's `iter` ends.
        loading.rx = Some(rx);
    }

    /// Waits for the values [`ReadView::load_start`] dispatched; returns
    /// every value, in the order of the pointers.
    pub fn load_finish(&self, mut loading: Loading) -> Vec<Result<Value>> {
        if let Some(rx) = loading.rx.take() {
            let mut answered = vec![false; loading.ptrs.len()];
            for got in rx.iter() {
                for &(i, _) in &got {
                    answered[i] = true;
                }
                self.settle(got, &mut loading.loaded, &loading.ptrs);
            }
            for &i in loading.asked.iter().filter(|&&i| !answered[i]) {
                let value = self.load_at(&loading.ptrs, i).map(Value::Owned);
                loading.loaded.push((i, value));
            }
        }
        let mut out: Vec<Option<Result<Value>>> = loading.ptrs.iter().map(|_| None).collect();
        for (i, v) in loading.loaded {
            out[i] = Some(v);
        }
        out.into_iter()
            .map(|v| v.expect("every value of a window is loaded or read"))
            .collect()
    }

    /// Turns what a reader got into results: a compressed value is
    /// unpacked, and one that could not be read, does not match or does
    /// not unpack goes through `load`, which re-reads it and names the
    /// damage.
    fn settle(&self, got: Checked, loaded: &mut Loaded, ptrs: &[Option<ValuePtr>]) {
        loaded.extend(got.into_iter().map(|(i, v)| {
            let ptr = ptrs.get(i).copied().flatten();
            let v = match (v, ptr) {
                (Some(v), Some(p)) if p.compressed() => {
                    decompress(p.codec, v.as_slice()).ok().map(Value::Owned)
                }
                (v, _) => v,
            };
            match v {
                Some(v) => (i, Ok(v)),
                None => (i, self.load_at(ptrs, i).map(Value::Owned)),
            }
        }));
    }

    /// `load_ptr` of the `i`th pointer of a window.
    fn load_at(&self, ptrs: &[Option<ValuePtr>], i: usize) -> Result<Vec<u8>> {
        let p = ptrs
            .get(i)
            .copied()
            .flatten()
            .expect("a value is loaded only where its window has a pointer");
        self.load_ptr(&p)
    }
}

/// Fewest device runs of a window read through io_uring as one batch
/// (fewer go to worker threads one run each).
#[cfg(target_os = "linux")]
const URING_RUNS_MIN: usize = 4;

/// Reads the runs of `batch` (none shared) with direct reads all in
/// flight at once through this thread's io_uring (`io::uring`); a run
/// whose segment has no descriptor, or every run if no ring can be used,
/// is read as `Run::read` does.
#[cfg(target_os = "linux")]
fn read_batch(batch: &[(Run, Arc<SegmentFile>)], view: &ReadView, scan: &Scan) -> Checked {
    use crate::io::uring;
    let align = crate::io::DIRECT_ALIGN as u64;
    let mut reads = Vec::with_capacity(batch.len());
    let mut plan = Vec::with_capacity(batch.len());
    for (run, seg) in batch {
        let start = run.start - run.start % align;
        let end = run.end.next_multiple_of(align);
        match (seg.direct_fd(), usize::try_from(end - start)) {
            (Ok(Some(fd)), Ok(len)) => {
                plan.push(Some(reads.len()));
                reads.push(uring::Read {
                    fd,
                    offset: start,
                    buf: uring::AlignedBuf::new(len),
                    result: None,
                });
            }
            _ => plan.push(None),
        }
    }
    let batched = !reads.is_empty() && uring::read_all(&mut reads).is_ok();
    if batched {
        view.policy.count_batch();
    }
    let mut out = Vec::with_capacity(batch.iter().map(|(r, _)| r.members.len()).sum());
    for ((run, seg), at) in batch.iter().zip(plan) {
        let read = at.filter(|_| batched).and_then(|i| reads.get(i));
        match read {
            Some(r) => {
                view.policy.count(Served::Direct);
                let from = (run.start - r.offset) as usize;
                let to = (run.end - r.offset) as usize;
                // A value that does not match is re-read by `load`, which
                // names any damage; a failed or short read is read again
                // the usual way.
                match r.result {
                    Some(Ok(n)) if n >= to => out.extend(run.slice(r.buf.bytes().get(from..to))),
                    _ => out.extend(run.read(seg, view.reads, view, scan)),
                }
            }
            None => out.extend(run.read(seg, view.reads, view, scan)),
        }
    }
    out
}

impl Run {
    /// Reads the run from `seg` as `how` says, with one request (a lone
    /// value with `ReadView::read_value`, which re-reads a mismatch once),
    /// or a shared run through the view's `ChunkShare`, chunk by chunk,
    /// for `scan`.
    /// The page cache was asked already if `how` is `CachedElseDirect`.
    fn read(&self, seg: &Arc<SegmentFile>, how: How, view: &ReadView, scan: &Scan) -> Checked {
        if self.shared {
            let got = self.chunks(|_, index| view.share.get(seg, index, how, &view.policy, scan));
            view.share
                .read_ahead(seg, self.chunk_span(), how, view, scan);
            return match got {
                Some(chunks) => self.slice_chunks(&chunks, false),
                None => self.slice(None),
            };
        }
        let direct = how.direct_misses();
        view.policy.count(if direct {
            Served::Direct
        } else {
            Served::Buffered
        });
        if let [(i, p)] = self.members[..] {
            return vec![(i, seg.read(&p, direct).ok().flatten().map(Value::Owned))];
        }
        let span = usize::try_from(self.end - self.start)
            .ok()
            .and_then(|len| seg.read_span(self.start, len, direct).ok());
        self.slice(span.as_deref())
    }

    /// The first and last index of the chunks covering the run.
    fn chunk_span(&self) -> (u64, u64) {
        (self.start / CHUNK, (self.end - 1) / CHUNK)
    }

    /// The chunks covering the run, each from `get(segment, index)`;
    /// `None` if one is missing.
    fn chunks(
        &self,
        mut get: impl FnMut(u64, u64) -> Option<ChunkBytes>,
    ) -> Option<Vec<ChunkBytes>> {
        (self.start / CHUNK..self.end.div_ceil(CHUNK))
            .map(|index| get(self.segment, index))
            .collect()
    }

    /// Each member's value out of `chunks` (those covering the run), if it
    /// matches its pointer: lent if `lend` or the run is dense, else
    /// copied.
    fn slice_chunks(&self, chunks: &[ChunkBytes], lend: bool) -> Checked {
        let first = self.start / CHUNK;
        // Values of the chunk share are lent out of their chunk only where
        // they fill at least half the run: a lent value keeps its whole
        // chunk alive, so an iterator's queue holds at most twice the
        // bytes of its values. A stream's chunks are kept while scans are
        // in its key range anyway (`stream_share.rs`).
        let bytes: u64 = self.members.iter().map(|(_, p)| u64::from(p.len)).sum();
        let lend = lend || bytes * 2 >= self.end - self.start;
        self.members
            .iter()
            .map(|&(i, p)| {
                let (index, from) = (p.offset / CHUNK, (p.offset % CHUNK) as usize);
                let len = p.len as usize;
                let one = chunks.get(usize::try_from(index - first).unwrap_or(usize::MAX));
                let value = match one {
                    // Within one chunk: checked once for all its scanners,
                    // and lent out of it if the run is dense.
                    Some(c) if from + len <= CHUNK as usize => {
                        c.check_value(from, len, p.crc).then(|| {
                            if lend {
                                Value::Lent {
                                    chunk: c.clone(),
                                    from,
                                    len,
                                }
                            } else {
                                Value::Owned(c.bytes()[from..from + len].to_vec())
                            }
                        })
                    }
                    _ => chunk::gather(chunks, first, p.offset, len)
                        .filter(|v| p.matches(v))
                        .map(Value::Owned),
                };
                (i, value)
            })
            .collect()
    }

    /// Each member's value sliced out of `span` (the run's bytes, if they
    /// could be read), if it matches its pointer.
    fn slice(&self, span: Option<&[u8]>) -> Checked {
        self.members
            .iter()
            .map(|&(i, p)| {
                let from = (p.offset - self.start) as usize;
                let value = span
                    .and_then(|s| s.get(from..from + p.len as usize))
                    .filter(|v| p.matches(v))
                    .map(|v| Value::Owned(v.to_vec()));
                (i, value)
            })
            .collect()
    }
}
