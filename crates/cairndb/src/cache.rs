//! The block cache: verified table blocks kept in memory, bounded in bytes.
//!
//! Owns: a sharded, byte-weighted cache (quick_cache's CLOCK-Pro variant)
//! from `(table id, block offset)` to a decoded [`Block`]. Only blocks whose
//! trailer checksum matched and whose restart array validated are inserted,
//! so a hit skips both the read and the checksum; or blocks a merge put in
//! as it wrote them (`TableWriter::caching`), the bytes the file holds.
//!
//! Capacity: its own bytes (`Options::block_cache_bytes`, given to
//! [`BlockCache::new`]) plus what the database lends it
//! ([`BlockCache::lend`]): the room of the memtables that are not sealed,
//! which would otherwise sit unused until writes fill them. A seal takes
//! its room back (the cache evicts down to the new capacity), a flush
//! returns it; so memtables and cache together stay within what the
//! options allow them (`Options::with_memory_budget`).
//!
//! Invariants: the resident weight stays at or below the capacity (a
//! block larger than a shard's share is simply not kept). Table ids are
//! file numbers, never reused, so an entry can never be confused with a
//! block of a different file; entries of deleted tables age out.
//!
//! Sharing: `BlockCache` is `Send + Sync` and meant to sit behind an `Arc`
//! shared by every open table. Capacity 0 disables it: lookups miss and
//! inserts are dropped.

use crate::counter::{self, SLOTS};
use crate::format::block::Block;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use quick_cache::Weighter;
use quick_cache::sync::Cache;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Fixed per-entry cost added to the block length, for the key, the Arc
/// header and the cache's own bookkeeping.
const ENTRY_OVERHEAD: u64 = 64;

#[derive(Clone, Copy, Debug, Default)]
struct BlockWeighter;

impl Weighter<(u64, u64), Block> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), block: &Block) -> u64 {
        (block.len() + block.hint_bytes()) as u64 + ENTRY_OVERHEAD
    }
}

/// Hits and misses counted by the threads of one slot (`counter::slot`:
/// readers on different cores do not write the same cache line at every
/// lookup).
#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
}

/// A byte-bounded cache of table blocks.
pub struct BlockCache {
    inner: Option<Cache<(u64, u64), Block, BlockWeighter>>,
    /// Capacity of its own.
    base: u64,
    /// Bytes lent on top of `base`; the lock orders concurrent lenders.
    lent: Mutex<u64>,
    counts: Box<[CachePadded<Counts>]>,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity())
            .field("weight", &self.weight())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding up to `capacity_bytes` of blocks, and what is lent
    /// to it; 0 disables it (nothing can be lent then).
    pub fn new(capacity_bytes: u64) -> Self {
        let inner = (capacity_bytes > 0).then(|| {
            // quick_cache sizes its tables from an item estimate (they
            // grow past it if lent more); assume typical 4 KiB blocks.
            let items = usize::try_from(capacity_bytes / 4096)
                .unwrap_or(usize::MAX)
                .max(16);
            Cache::with_weighter(items, capacity_bytes, BlockWeighter)
        });
        BlockCache {
            inner,
            base: capacity_bytes,
            lent: Mutex::new(0),
            counts: (0..SLOTS).map(|_| CachePadded::default()).collect(),
        }
    }

    /// Sets the bytes lent to the cache on top of its own to what `room`
    /// says (called with the lender's lock held, so that of concurrent
    /// lenders the last to lock reads the newest state). Lending less
    /// evicts blocks down to the new capacity at once.
    pub fn lend(&self, room: impl FnOnce() -> u64) {
        let Some(cache) = &self.inner else {
            return;
        };
        let mut lent = self.lent.lock();
        let bytes = room();
        if bytes != *lent {
            *lent = bytes;
            cache.set_capacity(self.base.saturating_add(bytes));
        }
        // Each shard's share is rounded up: the whole is off by less than
        // one byte per shard.
        debug_assert!(
            cache.capacity().abs_diff(self.base.saturating_add(*lent)) < cache.num_shards() as u64
        );
    }

    /// The block of table `table_id` at `offset`, if cached.
    pub fn get(&self, table_id: u64, offset: u64) -> Option<Block> {
        let found = self.inner.as_ref()?.get(&(table_id, offset));
        let counts = &self.counts[counter::slot()];
        let counter = if found.is_some() {
            &counts.hits
        } else {
            &counts.misses
        };
        counter.fetch_add(1, Relaxed);
        found
    }

    /// Caches a verified block.
    pub fn insert(&self, table_id: u64, offset: u64, block: Block) {
        if let Some(c) = &self.inner {
            c.insert((table_id, offset), block);
        }
    }

    /// Drops every block of `table_id` (walks the whole cache; optional,
    /// since ids are never reused).
    pub fn evict_table(&self, table_id: u64) {
        if let Some(c) = &self.inner {
            c.retain(|k, _| k.0 != table_id);
        }
    }

    /// Capacity in bytes now: its own and what is lent (0: disabled).
    pub fn capacity(&self) -> u64 {
        match &self.inner {
            Some(_) => self.base.saturating_add(*self.lent.lock()),
            None => 0,
        }
    }

    /// Bytes currently held (block lengths plus per-entry overhead).
    pub fn weight(&self) -> u64 {
        self.inner.as_ref().map_or(0, |c| c.weight())
    }

    /// Number of cached blocks.
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |c| c.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups that found a block.
    pub fn hits(&self) -> u64 {
        self.counts.iter().map(|c| c.hits.load(Relaxed)).sum()
    }

    /// Lookups that missed (not counted when disabled).
    pub fn misses(&self) -> u64 {
        self.counts.iter().map(|c| c.misses.load(Relaxed)).sum()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::block::BlockBuilder;

    fn block(fill: u8, len: usize) -> Block {
        let mut b = BlockBuilder::new(16);
        b.add(&[fill; 8], &vec![fill; len]);
        Block::new(b.finish().into()).unwrap()
    }

    #[test]
    fn cache_hit_miss_and_bound() {
        let c = BlockCache::new(64 * 1024);
        assert!(c.get(1, 0).is_none());
        c.insert(1, 0, block(1, 100));
        let got = c.get(1, 0).unwrap();
        assert_eq!(got.data()[..], block(1, 100).data()[..]);
        assert!(c.get(2, 0).is_none());
        assert!(c.hits() >= 1);
        for i in 0..200u64 {
            c.insert(3, i * 4096, block(i as u8, 4000));
        }
        assert!(c.weight() <= 64 * 1024, "weight {}", c.weight());
        c.evict_table(3);
        assert!(c.get(3, 199 * 4096).is_none());
    }

    #[test]
    fn lent_room_is_used_and_taken_back() {
        let c = BlockCache::new(64 * 1024);
        c.lend(|| 192 * 1024);
        assert_eq!(c.capacity(), 256 * 1024);
        for i in 0..200u64 {
            c.insert(3, i * 4096, block(i as u8, 4000));
        }
        let full = c.weight();
        assert!(full > 64 * 1024, "the lent room holds blocks: {full}");
        assert!(full <= 256 * 1024, "weight {full}");
        c.lend(|| 0);
        assert_eq!(c.capacity(), 64 * 1024);
        assert!(
            c.weight() <= 64 * 1024,
            "taking the room back evicts: {}",
            c.weight()
        );
        assert!(!c.is_empty(), "blocks within the capacity stay");
    }

    #[test]
    fn counts_from_many_threads_add_up() {
        let c = BlockCache::new(64 * 1024);
        c.insert(1, 0, block(1, 100));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        assert!(c.get(1, 0).is_some());
                        assert!(c.get(1, 4096).is_none());
                    }
                });
            }
        });
        assert_eq!((c.hits(), c.misses()), (4000, 4000));
    }

    #[test]
    fn cache_disabled() {
        let c = BlockCache::new(0);
        c.insert(1, 0, block(1, 10));
        assert!(c.get(1, 0).is_none());
        assert!(c.is_empty());
        assert_eq!(c.weight(), 0);
        c.lend(|| 1 << 20);
        assert_eq!(c.capacity(), 0, "a disabled cache takes no loan");
    }
}
