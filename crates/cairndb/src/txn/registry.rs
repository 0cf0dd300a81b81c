//! Registered snapshots without a global lock.
//!
//! Snapshots and transactions pin the seqno they read at, so compaction
//! keeps every version they can see. Pinning must be cheap and must not
//! serialize threads: a pin takes a slot in the calling thread's home
//! shard (threads are spread over the shards round-robin), each shard on
//! its own cache lines. Flush and compaction find the pinned seqnos by
//! visiting the slots, never by locking them.
//!
//! Protocol (all `SeqCst`):
//! - pin: claim a free slot by CAS to `PENDING`, then load `last_seqno`,
//!   then store that seqno in the slot;
//! - read points: load `last_seqno` as `L`, then read every slot, waiting
//!   out a `PENDING` one; the answer is `L` and the seqnos in the slots
//!   (oldest: their minimum).
//!
//! If the scan read a slot before a pin claimed it, the pin's load of
//! `last_seqno` comes after the scan's in the single total order, so the
//! pin reads at least `L` and needs nothing `L` would not keep. A slot
//! seen `PENDING` is waited for: its seqno may be below `L`. The wait is
//! two instructions of the pinning thread (longer only if it is
//! descheduled in between), and only compaction's scan ever waits.
//!
//! If every slot is taken (more concurrent pins than `SHARDS * SLOTS`),
//! pins fall back to a mutex-protected overflow map.

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};

/// Shards; a thread pins in its home shard first.
const SHARDS: usize = 64;
/// Slots per shard (several pins per thread are common: a snapshot held
/// while a transaction runs).
const SLOTS: usize = 8;
const FREE: u64 = u64::MAX;
const PENDING: u64 = u64::MAX - 1;

struct Shard {
    slots: [AtomicU64; SLOTS],
}

/// The set of pinned seqnos.
pub(crate) struct Registry {
    shards: Box<[CachePadded<Shard>]>,
    overflow: Mutex<BTreeMap<u64, usize>>,
}

/// The seqnos readers may read at, as [`Registry::read_points`] found
/// them: sorted, without repeats, never empty. A pin taken after the scan
/// reads at a seqno at least the largest of them (the protocol above).
pub(crate) struct ReadPoints(Vec<u64>);

impl ReadPoints {
    /// Read points at these seqnos (sorted or not): for tests, and for
    /// code that runs before any reader exists.
    pub fn of(mut points: Vec<u64>) -> Self {
        assert!(
            !points.is_empty(),
            "a reader of the newest data always counts"
        );
        points.sort_unstable();
        points.dedup();
        ReadPoints(points)
    }

    pub fn oldest(&self) -> u64 {
        self.0[0]
    }

    /// True if a version of a key written at `seqno` is read at some read
    /// point, its next newer version of that key having been written at
    /// `newer` (`u64::MAX`: there is none): some point lies in
    /// `[seqno, newer)`. A version no point reads is shadowed for good, as
    /// readers that come later read newer data.
    pub fn reads(&self, seqno: u64, newer: u64) -> bool {
        assert!(seqno < newer, "a key's newer version has the larger seqno");
        if newer == u64::MAX {
            return true;
        }
        let i = self.0.partition_point(|&p| p < seqno);
        self.0.get(i).is_some_and(|&p| p < newer)
    }
}

/// Where a pin lives; released by [`Registry::unpin`].
#[derive(Debug)]
pub(crate) enum Pin {
    Slot { shard: usize, slot: usize },
    Overflow,
}

fn home_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: usize = NEXT.fetch_add(1, SeqCst) % SHARDS;
    }
    HOME.with(|h| *h)
}

impl Registry {
    pub fn new() -> Self {
        Registry {
            shards: (0..SHARDS)
                .map(|_| {
                    CachePadded::new(Shard {
                        slots: std::array::from_fn(|_| AtomicU64::new(FREE)),
                    })
                })
                .collect(),
            overflow: Mutex::new(BTreeMap::new()),
        }
    }

    /// Pins the current value of `last_seqno`; returns the pin and the
    /// seqno to read at.
    pub fn pin(&self, last_seqno: &AtomicU64) -> (Pin, u64) {
        let home = home_shard();
        for i in 0..SHARDS {
            let shard = (home + i) % SHARDS;
            for (slot, cell) in self.shards[shard].slots.iter().enumerate() {
                if cell.load(SeqCst) == FREE
                    && cell.compare_exchange(FREE, PENDING, SeqCst, SeqCst).is_ok()
                {
                    let seqno = last_seqno.load(SeqCst);
                    cell.store(seqno, SeqCst);
                    return (Pin::Slot { shard, slot }, seqno);
                }
            }
        }
        let mut overflow = self.overflow.lock();
        let seqno = last_seqno.load(SeqCst);
        *overflow.entry(seqno).or_insert(0) += 1;
        (Pin::Overflow, seqno)
    }

    /// Releases a pin taken at `seqno`.
    pub fn unpin(&self, pin: &Pin, seqno: u64) {
        match *pin {
            Pin::Slot { shard, slot } => self.shards[shard].slots[slot].store(FREE, SeqCst),
            Pin::Overflow => {
                let mut overflow = self.overflow.lock();
                if let Some(n) = overflow.get_mut(&seqno) {
                    *n -= 1;
                    if *n == 0 {
                        overflow.remove(&seqno);
                    }
                }
            }
        }
    }

    /// The oldest seqno any pin may read at: the minimum of the pinned
    /// seqnos and the current `last_seqno`.
    pub fn oldest(&self, last_seqno: &AtomicU64) -> u64 {
        self.read_points(last_seqno).oldest()
    }

    /// Every seqno a reader may read at: the pinned seqnos and the current
    /// `last_seqno` (what a new reader would read at), by one scan.
    pub fn read_points(&self, last_seqno: &AtomicU64) -> ReadPoints {
        let mut points = vec![last_seqno.load(SeqCst)];
        for shard in self.shards.iter() {
            for cell in &shard.slots {
                let mut spins = 0u32;
                let v = loop {
                    let v = cell.load(SeqCst);
                    if v != PENDING {
                        break v;
                    }
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                };
                if v != FREE {
                    points.push(v);
                }
            }
        }
        points.extend(self.overflow.lock().keys());
        points.sort_unstable();
        points.dedup();
        ReadPoints(points)
    }

    /// Number of pins held (for tests and stats).
    pub fn count(&self) -> usize {
        let slots = self
            .shards
            .iter()
            .flat_map(|s| s.slots.iter())
            .filter(|c| c.load(SeqCst) != FREE)
            .count();
        slots + self.overflow.lock().values().sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_points_read_a_version_only_between_it_and_its_successor() {
        let r = Registry::new();
        let last = AtomicU64::new(10);
        let (a, sa) = r.pin(&last);
        last.store(20, SeqCst);
        let points = r.read_points(&last);
        assert_eq!(points.oldest(), 10);
        assert!(points.reads(5, 11), "the pin at 10 reads it");
        assert!(!points.reads(5, 10), "the pin at 10 reads the newer one");
        assert!(!points.reads(11, 15), "no point between 11 and 15");
        assert!(points.reads(15, 21), "a new reader at 20 reads it");
        assert!(
            points.reads(25, u64::MAX),
            "the newest version always counts"
        );
        r.unpin(&a, sa);
        assert!(!r.read_points(&last).reads(5, 11));
    }

    #[test]
    fn oldest_is_the_minimum_pin_and_overflow_works() {
        let r = Registry::new();
        let last = AtomicU64::new(10);
        assert_eq!(r.oldest(&last), 10);
        let (a, sa) = r.pin(&last);
        last.store(20, SeqCst);
        let mut pins: Vec<(Pin, u64)> = (0..SHARDS * SLOTS + 5).map(|_| r.pin(&last)).collect();
        assert!(pins.iter().any(|(p, _)| matches!(p, Pin::Overflow)));
        assert_eq!(r.oldest(&last), 10);
        r.unpin(&a, sa);
        assert_eq!(r.oldest(&last), 20);
        last.store(30, SeqCst);
        for (p, s) in pins.drain(..) {
            r.unpin(&p, s);
        }
        assert_eq!(r.count(), 0);
        assert_eq!(r.oldest(&last), 30);
    }

    #[test]
    fn concurrent_pins_never_fall_below_oldest() {
        let r = std::sync::Arc::new(Registry::new());
        let last = std::sync::Arc::new(AtomicU64::new(1));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (r, last, stop) = (r.clone(), last.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        let (p, s) = r.pin(&last);
                        last.fetch_add(1, SeqCst);
                        r.unpin(&p, s);
                    }
                })
            })
            .collect();
        // A pin taken after `oldest` returned reads at least that value.
        for _ in 0..2000 {
            let o = r.oldest(&last);
            let (p, s) = r.pin(&last);
            assert!(s >= o, "pinned {s} below oldest {o}");
            r.unpin(&p, s);
        }
        stop.store(true, SeqCst);
        for t in threads {
            t.join().expect("thread");
        }
    }
}
