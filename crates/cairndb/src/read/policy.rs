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

use crate::options::ValueReads;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

/// How one view reads a flushed value: `ValueReads` without `Auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    PageCache,
    Direct,
    CachedElseDirect,
}

impl How {
    /// Whether a read the page cache does not serve is a direct read.
    pub fn direct_misses(self) -> bool {
        self != How::PageCache
    }

    pub fn as_option(self) -> ValueReads {
        match self {
            How::PageCache => ValueReads::PageCache,
            How::Direct => ValueReads::Direct,
            How::CachedElseDirect => ValueReads::CachedElseDirect,
        }
    }
}

/// How a flushed value (or a run or chunk of them) was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// From the page cache, asked without waiting (`read_cached`).
    Cached,
    /// With a direct read.
    Direct,
    /// With a buffered read (which may or may not have waited).
    Buffered,
}

/// Milliseconds between two looks at the available memory under `Auto`.
const LOOK_EVERY_MS: u64 = 1000;

/// Page-cache misses in a row after which reads ask the cache only
/// `1 / THIN_EVERY` of the time.
const THIN_AFTER_MISSES: u32 = 64;
const THIN_EVERY: u32 = 16;

/// `Options::value_reads` for one database, and its counters.
pub struct ReadPolicy {
    mode: ValueReads,
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
    /// Page-cache misses in a row (saturating at `THIN_AFTER_MISSES`).
    misses_in_row: AtomicU32,
    /// Reads since thinning began, to pick every `THIN_EVERY`th.
    thinned_reads: AtomicU32,
    /// Reads that did not ask the page cache, thinned.
    unasked: AtomicU64,
}

impl ReadPolicy {
    pub fn new(mode: ValueReads) -> ReadPolicy {
        ReadPolicy {
            mode,
            look_every_ms: LOOK_EVERY_MS,
            auto_direct: AtomicBool::new(false),
            next_look_ms: AtomicU64::new(0),
            born: Instant::now(),
            cached: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            buffered: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            scattered: AtomicU64::new(0),
            misses_in_row: AtomicU32::new(0),
            thinned_reads: AtomicU32::new(0),
            unasked: AtomicU64::new(0),
        }
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

    /// What asking the page cache found.
    pub fn asked_cache(&self, hit: bool) {
        if hit {
            if self.misses_in_row.load(Ordering::Relaxed) != 0 {
                self.misses_in_row.store(0, Ordering::Relaxed);
            }
        } else if self.misses_in_row.load(Ordering::Relaxed) < THIN_AFTER_MISSES {
            self.misses_in_row.fetch_add(1, Ordering::Relaxed);
        }
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
                    let direct =
                        auto_choice(live_bytes(), mem_available()) == How::CachedElseDirect;
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

    /// Counts a window of direct reads handed to the kernel as one batch.
    pub fn count_batch(&self) {
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// Windows read as one io_uring batch since open.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Counts `bytes` of values a scan read at random from a flushed
    /// journal (`Options::settle_for_scans`).
    pub fn count_scattered(&self, bytes: u64) {
        self.scattered.fetch_add(bytes, Ordering::Relaxed);
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

/// Memory this process could still take, in bytes: `MemAvailable` from
/// `/proc/meminfo` (what the kernel could give without swapping, page
/// cache it may drop included), or less where a memory cgroup the
/// process runs in has a limit (`cgroup_room`): a container's cap, not
/// the machine's memory, is what the page cache can hold for it.
pub(crate) fn mem_available() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_mem_available(&text));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_room(&text, std::path::Path::new("/sys/fs/cgroup")));
    match (machine, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

/// The least room left under any memory limit on the way from the
/// process's cgroups (`proc_cgroup`: the text of `/proc/self/cgroup`) up
/// to the hierarchy's root under `root` (`/sys/fs/cgroup`): a limit less
/// the anonymous memory charged below it (the page cache inside a limit
/// is reclaimed before the limit is hit, as `MemAvailable` counts it).
/// cgroup v1 (`memory.limit_in_bytes`, `total_rss`, under `memory/`) and
/// v2 (`memory.max`, `anon`, at `root` or under `unified/`). `None` if no
/// limit applies or none could be read.
fn cgroup_room(proc_cgroup: &str, root: &std::path::Path) -> Option<u64> {
    let mut room: Option<u64> = None;
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (base, limit_file, anon_key) = if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes", "total_rss")
        } else if id == "0" && controllers.is_empty() {
            let base = if root.join("cgroup.controllers").exists() {
                root.to_path_buf()
            } else {
                root.join("unified")
            };
            (base, "memory.max", "anon")
        } else {
            continue;
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            if let Some(r) = cgroup_level_room(&dir, limit_file, anon_key) {
                room = Some(room.map_or(r, |least| least.min(r)));
            }
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    room
}

/// Room under one cgroup's memory limit (`cgroup_room`); `None` without
/// a limit ("max" in v2, a near-`i64::MAX` in v1) or its files.
fn cgroup_level_room(dir: &std::path::Path, limit_file: &str, anon_key: &str) -> Option<u64> {
    let limit: u64 = std::fs::read_to_string(dir.join(limit_file))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if limit >= 1 << 60 {
        return None;
    }
    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let anon = stat
        .lines()
        .find_map(|l| {
            l.strip_prefix(anon_key)?
                .strip_prefix(' ')?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    Some(limit.saturating_sub(anon))
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_reads_directly_only_past_the_available_memory() {
        assert_eq!(auto_choice(10 << 30, Some(4 << 30)), How::CachedElseDirect);
        assert_eq!(auto_choice(1 << 30, Some(4 << 30)), How::PageCache);
        assert_eq!(auto_choice(10 << 30, None), How::PageCache);
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_memory_cgroup_limit_bounds_the_room() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        // cgroup v1: no limit at the root or in `a`, 1 GiB on `a/b` with
        // 100 MiB of anonymous memory charged under it.
        write("memory/memory.limit_in_bytes", "9223372036854771712\n");
        write("memory/a/memory.limit_in_bytes", "9223372036854771712\n");
        write("memory/a/b/memory.limit_in_bytes", "1073741824\n");
        write(
            "memory/a/b/memory.stat",
            "cache 5\nrss 7\ntotal_cache 900\ntotal_rss_huge 3\ntotal_rss 104857600\n",
        );
        let v1 = "5:devices:/\n4:memory:/a/b\n0::/\n";
        assert_eq!(cgroup_room(v1, root), Some((1 << 30) - (100 << 20)));
        // A tighter limit above wins.
        write("memory/a/memory.limit_in_bytes", "536870912\n");
        write("memory/a/memory.stat", "total_rss 0\n");
        assert_eq!(cgroup_room(v1, root), Some(512 << 20));
        // No memory line, or no limit anywhere: nothing known.
        assert_eq!(cgroup_room("5:devices:/\n", root), None);
        assert_eq!(cgroup_room("4:memory:/\n", root), None);
        // cgroup v2 (hybrid: under unified/): "max" is no limit.
        write("unified/x/memory.max", "max\n");
        write("unified/x/y/memory.max", "2147483648\n");
        write(
            "unified/x/y/memory.stat",
            "anon_thp 9\nanon 1073741824\nfile 12\n",
        );
        assert_eq!(cgroup_room("0::/x\n", root), None);
        assert_eq!(cgroup_room("0::/x/y\n", root), Some(1 << 30));
        // Both: the least room.
        assert_eq!(
            cgroup_room("4:memory:/a/b\n0::/x/y\n", root),
            Some(512 << 20)
        );
        // Pure v2, mounted at the root.
        write("cgroup.controllers", "memory\n");
        write("z/memory.max", "1048576\n");
        assert_eq!(cgroup_room("0::/z\n", root), Some(1 << 20));
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24600000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2 << 20));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: 5 MB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
    }

    #[test]
    fn fixed_modes_ignore_memory_and_count_what_was_served() {
        let p = ReadPolicy::new(ValueReads::Direct);
        assert_eq!(
            p.how(|| unreachable!("fixed modes do not look")),
            How::Direct
        );
        let p = ReadPolicy::new(ValueReads::PageCache);
        assert_eq!(p.how(|| unreachable!()), How::PageCache);
        p.count(Served::Cached);
        p.count(Served::Direct);
        p.count(Served::Direct);
        assert_eq!(p.counts(), (1, 2, 0));
    }

    #[test]
    fn asking_the_cache_thins_while_it_misses_and_resumes_on_a_hit() {
        let p = ReadPolicy::new(ValueReads::CachedElseDirect);
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
    fn auto_looks_again_only_when_due() {
        // Looks a minute apart: the second call cannot be due, however
        // slow the machine.
        let p = ReadPolicy {
            look_every_ms: 60_000,
            ..ReadPolicy::new(ValueReads::Auto)
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
        if mem_available().is_some() {
            assert_eq!(first, How::CachedElseDirect);
        }
    }
}
