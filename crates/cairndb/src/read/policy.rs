//! How flushed separated values are read: `Options::value_reads` resolved
//! for each view, and counts of how reads were served.
//!
//! Buffered reads serve data that fits in memory from memory, but on data
//! far larger than memory every miss inserts pages the next misses evict:
//! the kernel copies each value, charges and reclaims its pages, and a
//! 4 KiB value that straddles a page boundary costs two pages. Direct
//! reads skip all of that but never use what the page cache holds. The
//! middle way ([`How::CachedElseDirect`]) asks the page cache first,
//! without waiting for the device (`FileRead::read_cached`), and reads
//! only a miss directly. `ValueReads::Auto` picks it while the database's
//! live separated values are more than the system's available memory,
//! and plain buffered reads otherwise, looking again at most once a
//! second.
//!
//! Asking costs a system call (`cachestat`) per read (the buffer comes
//! only after a yes), about
//! a tenth of a point read's CPU, and on data far larger than memory nearly every answer is
//! no: direct reads do not fill the page cache. So after
//! `THIN_AFTER_MISSES` answers in a row were no, only one read in
//! `THIN_EVERY` asks; the first yes makes every read ask again.
//!
//! Scans ask too, under every mode, so that values the page cache lacks
//! are read on the worker threads, side by side, not one after another on
//! the scanning thread. When the data fits in memory nearly every answer
//! is yes, and the question costs as much as the read (two system calls
//! per value of a short scan instead of one). So under plain buffered
//! reads, after `TRUST_AFTER_HITS` answers in a row were yes, only one
//! scan read in `THIN_EVERY` asks ([`ReadPolicy::trust_cache`]); the
//! others read on the scanning thread, through the page cache, and the
//! first no makes every read ask again.

use crate::io::host::Host;
pub(crate) use crate::io::{How, Served};
use crate::options::ValueReads;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

impl From<How> for ValueReads {
    fn from(how: How) -> ValueReads {
        match how {
            How::PageCache => ValueReads::PageCache,
            How::Direct => ValueReads::Direct,
            How::CachedElseDirect => ValueReads::CachedElseDirect,
        }
    }
}

/// Milliseconds between two looks at the available memory under `Auto`.
const LOOK_EVERY_MS: u64 = 1000;

/// Page-cache misses in a row after which reads ask the cache only
/// `1 / THIN_EVERY` of the time.
const THIN_AFTER_MISSES: u32 = 64;
const THIN_EVERY: u32 = 16;

/// Page-cache hits in a row after which buffered scan reads ask the cache
/// only `1 / THIN_EVERY` of the time.
const TRUST_AFTER_HITS: u32 = 64;

/// `Options::value_reads` for one database, and its counters.
pub struct ReadPolicy {
    mode: ValueReads,
    /// Asked how much memory the process could still take.
    host: Arc<dyn Host>,
    /// `LOOK_EVERY_MS`, or longer in tests.
    look_every_ms: u64,
    /// `Auto`'s current choice: misses read directly.
    auto_direct: AtomicBool,
    /// Milliseconds after `born` when `Auto` looks again.
    next_look_ms: AtomicU64,
    born: Instant,
    cached: AtomicU64,
    direct: AtomicU64,
    buffered: AtomicU64,
    /// Windows of scans read as one batch through io_uring.
    batches: AtomicU64,
    /// Value bytes scans read at random from flushed journals.
    scattered: AtomicU64,
    /// Those of them short scans read (not marked long).
    scattered_short: AtomicU64,
    /// Page-cache misses in a row (saturating at `THIN_AFTER_MISSES`).
    misses_in_row: AtomicU32,
    /// Reads since thinning began, to pick every `THIN_EVERY`th.
    thinned_reads: AtomicU32,
    /// Page-cache hits in a row (saturating at `TRUST_AFTER_HITS`).
    hits_in_row: AtomicU32,
    /// Reads since trusting began, to pick every `THIN_EVERY`th.
    trusted_reads: AtomicU32,
    /// Reads that did not ask the page cache, thinned.
    unasked: AtomicU64,
    /// Reads served out of a memory map (counted in `cached` too).
    mapped: AtomicU64,
    /// Level-0 tables reads consulted past the first (`probed_level0`).
    level0_probes: crate::counter::Striped,
    /// Flushed values the page cache holds are copied out of memory maps
    /// of their files (`Options::map_values`, `io/map.rs`).
    pub maps: bool,
}

impl ReadPolicy {
    pub fn new(mode: ValueReads, host: Arc<dyn Host>) -> ReadPolicy {
        ReadPolicy {
            mode,
            host,
            look_every_ms: LOOK_EVERY_MS,
            auto_direct: AtomicBool::new(false),
            next_look_ms: AtomicU64::new(0),
            born: Instant::now(),
            cached: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            buffered: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            scattered: AtomicU64::new(0),
            scattered_short: AtomicU64::new(0),
            misses_in_row: AtomicU32::new(0),
            thinned_reads: AtomicU32::new(0),
            hits_in_row: AtomicU32::new(0),
            trusted_reads: AtomicU32::new(0),
            unasked: AtomicU64::new(0),
            mapped: AtomicU64::new(0),
            level0_probes: crate::counter::Striped::default(),
            maps: false,
        }
    }

    /// This policy with memory maps used (`Options::map_values`) if
    /// `maps`; never under `ValueReads::Direct`, which keeps reads off the
    /// page cache.
    pub fn with_maps(mut self, maps: bool) -> ReadPolicy {
        self.maps = maps && self.mode != ValueReads::Direct;
        self
    }

    /// Whether a read of `How::CachedElseDirect` asks the page cache
    /// first (module header: asking is thinned while it keeps missing).
    pub fn ask_cache(&self) -> bool {
        if self.misses_in_row.load(Ordering::Relaxed) < THIN_AFTER_MISSES {
            return true;
        }
        let ask = self
            .thinned_reads
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(THIN_EVERY);
        if !ask {
            self.unasked.fetch_add(1, Ordering::Relaxed);
        }
        ask
    }

    /// Whether a buffered scan read may skip asking the page cache and
    /// read on the caller's thread (module header: after many hits in a
    /// row, most reads do not ask).
    pub fn trust_cache(&self) -> bool {
        if self.hits_in_row.load(Ordering::Relaxed) < TRUST_AFTER_HITS {
            return false;
        }
        !self
            .trusted_reads
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(THIN_EVERY)
    }

    /// True while buffered scan reads trust the page cache (without
    /// counting a read, as `trust_cache` does).
    pub fn trusting(&self) -> bool {
        self.hits_in_row.load(Ordering::Relaxed) >= TRUST_AFTER_HITS
    }

    /// What asking the page cache found.
    pub fn asked_cache(&self, hit: bool) {
        let (grow, reset) = if hit {
            (&self.hits_in_row, &self.misses_in_row)
        } else {
            (&self.misses_in_row, &self.hits_in_row)
        };
        if reset.load(Ordering::Relaxed) != 0 {
            reset.store(0, Ordering::Relaxed);
        }
        let limit = if hit {
            TRUST_AFTER_HITS
        } else {
            THIN_AFTER_MISSES
        };
        if grow.load(Ordering::Relaxed) < limit {
            grow.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Memory the process could still take (`Host::mem_available`).
    pub fn mem_available(&self) -> Option<u64> {
        self.host.mem_available()
    }

    /// Reads that did not ask the page cache first, since open.
    pub fn unasked(&self) -> u64 {
        self.unasked.load(Ordering::Relaxed)
    }

    /// How flushed values are read now; `live_bytes` gives the database's
    /// live separated bytes, asked only when `Auto` looks again.
    pub fn how(&self, live_bytes: impl FnOnce() -> u64) -> How {
        match self.mode {
            ValueReads::PageCache => How::PageCache,
            ValueReads::Direct => How::Direct,
            ValueReads::CachedElseDirect => How::CachedElseDirect,
            ValueReads::Auto => {
                let now = self.born.elapsed().as_millis() as u64;
                let due = self.next_look_ms.load(Ordering::Relaxed);
                // One reader looks; the others keep the last choice.
                if now >= due
                    && self
                        .next_look_ms
                        .compare_exchange(
                            due,
                            now + self.look_every_ms,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    let direct = auto_choice(live_bytes(), self.host.mem_available())
                        == How::CachedElseDirect;
                    self.auto_direct.store(direct, Ordering::Relaxed);
                }
                if self.auto_direct.load(Ordering::Relaxed) {
                    How::CachedElseDirect
                } else {
                    How::PageCache
                }
            }
        }
    }

    pub fn count(&self, served: Served) {
        let counter = match served {
            Served::Cached => &self.cached,
            Served::Direct => &self.direct,
            Served::Buffered => &self.buffered,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a read served out of a memory map: one from the page cache.
    pub fn count_mapped(&self) {
        self.count(Served::Cached);
        self.mapped.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads served out of a memory map since open.
    pub fn mapped(&self) -> u64 {
        self.mapped.load(Ordering::Relaxed)
    }

    /// Reads through the page cache since open: buffered, and out of
    /// memory maps.
    pub fn page_cache_reads(&self) -> u64 {
        self.buffered.load(Ordering::Relaxed) + self.mapped()
    }

    /// Counts a window of direct reads handed to the kernel as one batch.
    pub fn count_batch(&self) {
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Windows read as one io_uring batch since open.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Counts `bytes` of values a scan read at random from a flushed
    /// journal (`Options::settle_for_scans`); `short` if the scan is not
    /// marked long.
    pub fn count_scattered(&self, bytes: u64, short: bool) {
        self.scattered.fetch_add(bytes, Ordering::Relaxed);
        if short {
            self.scattered_short.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// A read consulted `extra` level-0 tables past the first: what a
    /// merge of level 0 would have spared it (compaction's `ProbeDue`).
    pub fn probed_level0(&self, extra: u64) {
        if extra > 0 {
            self.level0_probes.add(extra);
        }
    }

    /// Level-0 tables reads consulted past the first, since open.
    pub fn level0_probes(&self) -> u64 {
        self.level0_probes.sum()
    }

    /// Of `scattered`, the bytes short scans read.
    pub fn scattered_short(&self) -> u64 {
        self.scattered_short.load(Ordering::Relaxed)
    }

    /// Value bytes scans read at random from journals since open.
    pub fn scattered(&self) -> u64 {
        self.scattered.load(Ordering::Relaxed)
    }

    /// Reads served from the page cache without waiting, with direct
    /// reads, and with buffered reads, since open.
    pub fn counts(&self) -> (u64, u64, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (get(&self.cached), get(&self.direct), get(&self.buffered))
    }
}

/// `Auto`'s choice for `live` bytes of separated values when the system
/// has `available` bytes of memory (`None`: unknown).
pub fn auto_choice(live: u64, available: Option<u64>) -> How {
    match available {
        Some(room) if live > room => How::CachedElseDirect,
        _ => How::PageCache,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with a fixed answer.
    struct Fixed(Option<u64>);

    impl Host for Fixed {
        fn mem_available(&self) -> Option<u64> {
            self.0
        }
    }

    #[test]
    fn auto_reads_directly_only_past_the_available_memory() {
        assert_eq!(auto_choice(10 << 30, Some(4 << 30)), How::CachedElseDirect);
        assert_eq!(auto_choice(1 << 30, Some(4 << 30)), How::PageCache);
        assert_eq!(auto_choice(10 << 30, None), How::PageCache);
    }

    #[test]
    fn fixed_modes_ignore_memory_and_count_what_was_served() {
        let p = ReadPolicy::new(ValueReads::Direct, Arc::new(Fixed(None)));
        assert_eq!(
            p.how(|| unreachable!("fixed modes do not look")),
            How::Direct
        );
        let p = ReadPolicy::new(ValueReads::PageCache, Arc::new(Fixed(None)));
        assert_eq!(p.how(|| unreachable!()), How::PageCache);
        p.count(Served::Cached);
        p.count(Served::Direct);
        p.count(Served::Direct);
        assert_eq!(p.counts(), (1, 2, 0));
    }

    #[test]
    fn asking_the_cache_thins_while_it_misses_and_resumes_on_a_hit() {
        let p = ReadPolicy::new(ValueReads::CachedElseDirect, Arc::new(Fixed(None)));
        for _ in 0..THIN_AFTER_MISSES {
            assert!(p.ask_cache(), "thinned before the misses ran out");
            p.asked_cache(false);
        }
        let asked = (0..THIN_EVERY * 4).filter(|_| p.ask_cache()).count();
        assert_eq!(asked, 4, "one read in THIN_EVERY asks once thinned");
        assert_eq!(p.unasked(), u64::from(THIN_EVERY * 4 - 4));
        p.asked_cache(true);
        assert!(
            (0..THIN_EVERY).all(|_| p.ask_cache()),
            "a hit resumes asking"
        );
        // Misses below the threshold do not thin.
        for _ in 0..THIN_AFTER_MISSES - 1 {
            p.asked_cache(false);
        }
        assert!((0..THIN_EVERY).all(|_| p.ask_cache()));
    }

    #[test]
    fn scans_trust_the_cache_after_hits_in_a_row_until_a_miss() {
        let p = ReadPolicy::new(ValueReads::PageCache, Arc::new(Fixed(None)));
        assert!(!p.trust_cache(), "nothing answered yet");
        for _ in 0..TRUST_AFTER_HITS - 1 {
            p.asked_cache(true);
        }
        assert!(!p.trust_cache(), "one hit short");
        p.asked_cache(true);
        let asks = (0..THIN_EVERY * 4).filter(|_| !p.trust_cache()).count();
        assert_eq!(asks, 4, "one read in THIN_EVERY still asks");
        p.asked_cache(false);
        assert!(!p.trust_cache(), "a miss makes every read ask again");
    }

    #[test]
    fn auto_looks_again_only_when_due() {
        // Looks a minute apart: the second call cannot be due, however
        // slow the machine.
        let p = ReadPolicy {
            look_every_ms: 60_000,
            ..ReadPolicy::new(ValueReads::Auto, Arc::new(Fixed(Some(1 << 30))))
        };
        let mut looks = 0;
        // Larger than any machine's memory: misses go direct.
        let huge = || {
            looks += 1;
            u64::MAX
        };
        let first = p.how(huge);
        let second = p.how(|| unreachable!("looked again within a second"));
        assert_eq!(first, second);
        assert_eq!(looks, 1);
        assert_eq!(first, How::CachedElseDirect);
    }
}
