//! Counters that reader threads on every core add to.
//!
//! Owns: [`Striped`], a sum kept in slots of one cache line each, and the
//! slot a thread adds to ([`slot`]). One shared counter would be a cache
//! line bounced between the cores at every add (a point read that counted
//! its block-cache hit in one spent measurable time there); threads take
//! slots in turn, so up to `SLOTS` threads add without sharing a line.
//!
//! Invariants: a sum is exact once the adds before it are visible; adds
//! and sums are `Relaxed` (the counts order nothing).

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Slots a striped count is spread over.
pub const SLOTS: usize = 16;

/// The slot of the calling thread: threads take slots in turn.
pub fn slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Relaxed) % SLOTS;
    }
    SLOT.with(|s| *s)
}

/// A count many threads add to and one thread now and then sums.
pub struct Striped {
    slots: Box<[CachePadded<AtomicU64>]>,
}

impl Default for Striped {
    fn default() -> Self {
        Striped {
            slots: (0..SLOTS).map(|_| CachePadded::default()).collect(),
        }
    }
}

impl std::fmt::Debug for Striped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Striped").field(&self.sum()).finish()
    }
}

impl Striped {
    pub fn add(&self, n: u64) {
        if let Some(s) = self.slots.get(slot()) {
            s.fetch_add(n, Relaxed);
        }
    }

    pub fn sum(&self) -> u64 {
        self.slots.iter().map(|s| s.load(Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_from_many_threads_sum_exactly() {
        let c = Striped::default();
        std::thread::scope(|s| {
            for t in 0..(SLOTS + 3) as u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(t + 1);
                    }
                });
            }
        });
        let want: u64 = (1..=(SLOTS + 3) as u64).map(|t| t * 1000).sum();
        assert_eq!(c.sum(), want);
    }
}
