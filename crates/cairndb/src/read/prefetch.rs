//! Reading the values of many pointers at once, for iterators.
//!
//! A scan over separated values would pay one device round trip per value
//! if it loaded each value as it met it. [`ReadView::load_many`] takes a
//! window of pointers instead, sorts them by segment and offset, and merges
//! neighbours into runs: one request per run, gaps of at most
//! [`RUN_GAP_MAX`] read and dropped, a run at most [`RUN_BYTES_MAX`]. Values
//! written in key order (a sequential load, or values a compaction moved)
//! become large sequential reads; scattered values become many small reads,
//! which are issued from up to [`READERS_MAX`] threads at once so the device
//! sees a queue of requests instead of one at a time.
//!
//! Runs whose bytes the page cache holds (a journal still written to, or
//! recently read pages) are read on the calling thread, asking the kernel
//! not to wait (`FileRead::read_cached`); only the others go to reader
//! threads. With `Options::direct_value_reads` every flushed run goes to
//! the device.

use super::ReadView;
use crate::Result;
use crate::format::vptr::ValuePtr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest gap between two values read with one request.
pub const RUN_GAP_MAX: u64 = 16 << 10;
/// Largest span one request reads.
pub const RUN_BYTES_MAX: u64 = 1 << 20;
/// Most threads reading runs of one window at once.
pub const READERS_MAX: usize = 32;

/// Values of neighbouring pointers in one segment, read with one request.
struct Run {
    segment: u64,
    start: u64,
    end: u64,
    /// (index into the caller's slice, pointer), by offset.
    members: Vec<(usize, ValuePtr)>,
}

/// Values read for a window: (index into the caller's slice, value).
type Loaded = Vec<(usize, Result<Vec<u8>>)>;

impl ReadView {
    /// The values `encoded` pointers name, in order, each as
    /// [`ReadView::load`] would return it (same values, same errors).
    pub fn load_many(&self, encoded: &[&[u8]]) -> Vec<Result<Vec<u8>>> {
        let mut loaded: Loaded = Vec::with_capacity(encoded.len());
        let mut ptrs = Vec::with_capacity(encoded.len());
        for (i, e) in encoded.iter().enumerate() {
            match ValuePtr::decode(e) {
                Some(p) => ptrs.push((i, p)),
                // `load` reports the malformed pointer.
                None => loaded.push((i, self.load(e))),
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
                }),
            }
        }
        // Runs the page cache holds (a journal still written to, or a
        // flushed segment's cached pages) are read here; the rest go to
        // the device, in parallel.
        let mut device = Vec::new();
        for run in runs {
            match self.segment(run.segment) {
                Some((_, true)) if self.direct_reads => device.push(run),
                Some((seg, true)) => {
                    let cached = usize::try_from(run.end - run.start)
                        .ok()
                        .and_then(|len| seg.read_span_cached(run.start, len).ok().flatten());
                    match cached {
                        Some(span) => self.fill_run(&run, Some(span), &mut loaded, encoded),
                        None => device.push(run),
                    }
                }
                _ => self.read_run(&run, &mut loaded, encoded),
            }
        }
        self.read_runs_parallel(&device, &mut loaded, encoded);
        let mut out: Vec<Option<Result<Vec<u8>>>> = encoded.iter().map(|_| None).collect();
        for (i, v) in loaded {
            out[i] = Some(v);
        }
        out.into_iter()
            .map(|v| {
                v.unwrap_or_else(|| Err(crate::Error::Poisoned("internal: value not read".into())))
            })
            .collect()
    }

    /// Reads `runs` from up to `READERS_MAX` threads (on this thread alone
    /// if there is one run, or no thread can be started).
    fn read_runs_parallel(&self, runs: &[Run], loaded: &mut Loaded, encoded: &[&[u8]]) {
        let threads = runs.len().min(READERS_MAX);
        if threads <= 1 {
            for run in runs {
                self.read_run(run, loaded, encoded);
            }
            return;
        }
        let next = AtomicUsize::new(0);
        // Each reader takes the next unread run until none is left, and
        // returns which runs it read and their values.
        let work = || {
            let (mut done, mut got) = (Vec::new(), Vec::new());
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(run) = runs.get(k) else {
                    return (done, got);
                };
                self.read_run(run, &mut got, encoded);
                done.push(k);
            }
        };
        let mut read = vec![false; runs.len()];
        std::thread::scope(|s| {
            let handles: Vec<_> = (1..threads)
                .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, work).ok())
                .collect();
            // This thread reads too; if no thread started it reads all.
            let mut results = vec![work()];
            // `work` does not panic; if it did, its runs are read below.
            results.extend(handles.into_iter().filter_map(|h| h.join().ok()));
            for (done, got) in results {
                for k in done {
                    read[k] = true;
                }
                loaded.extend(got);
            }
        });
        for (run, _) in runs.iter().zip(read).filter(|(_, r)| !r) {
            self.read_run(run, loaded, encoded);
        }
    }

    /// Reads one run into `loaded`; a single value goes through `load`.
    fn read_run(&self, run: &Run, loaded: &mut Loaded, encoded: &[&[u8]]) {
        if let [(i, _)] = run.members[..] {
            loaded.push((i, self.load(encoded[i])));
            return;
        }
        let span = self.segment(run.segment).and_then(|(seg, flushed)| {
            let len = usize::try_from(run.end - run.start).ok()?;
            seg.read_span(run.start, len, flushed && self.direct_reads)
                .ok()
        });
        self.fill_run(run, span, loaded, encoded);
    }

    /// Slices each member's value out of `span` (the run's bytes, if they
    /// could be read) and checks it; a value that is not there or does
    /// not match goes through `load`, which re-reads it and names the
    /// damage.
    fn fill_run(&self, run: &Run, span: Option<Vec<u8>>, loaded: &mut Loaded, encoded: &[&[u8]]) {
        for &(i, p) in &run.members {
            let from = (p.offset - run.start) as usize;
            let value = span
                .as_ref()
                .and_then(|s| s.get(from..from + p.len as usize))
                .filter(|v| p.matches(v));
            loaded.push((
                i,
                match value {
                    Some(v) => Ok(v.to_vec()),
                    None => self.load(encoded[i]),
                },
            ));
        }
    }
}
