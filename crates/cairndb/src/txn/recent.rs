//! Recent writes: a filter that lets a commit check skip the memtable and
//! table lookups for keys nobody wrote since the transaction began.
//!
//! For every key written at a seqno of at least `from`, the map holds a
//! 64-bit fingerprint of the key (xxh3) and the newest seqno that wrote a
//! key with that fingerprint. For a snapshot `s` with `s + 1 >= from`
//! (every write after `s` is in the map), a key whose fingerprint is
//! absent or maps to a seqno `<= s` was certainly not written after `s`.
//! A key that maps above `s` may have been (or may only share the
//! fingerprint with one that was), so the check confirms it with the exact
//! lookup: a hash collision costs a lookup, never a false conflict.
//!
//! Owned by the journal state and used only under the journal lock: the
//! group-commit leader records its group's writes and runs the checks.
//! Entries no pinned snapshot can need are dropped whenever the map has
//! doubled since it was last pruned (from `PRUNE_MIN` entries on), so
//! with short transactions it stays small enough to live in the CPU's
//! cache: recording into a map of 2^18 entries took 6.7 % of all CPU of
//! `cairn bench --workloads synctx`.
//! Bounded by `RECENT_KEYS_MAX` entries: if pruning leaves more than half
//! of that, the map is cleared and `from` moves past it (older
//! transactions then take the exact lookups).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Most fingerprints kept (16 bytes each, plus the table's slack).
pub(crate) const RECENT_KEYS_MAX: usize = 1 << 18;

/// The map is not pruned below this many entries (256 KiB of table).
const PRUNE_MIN: usize = 1 << 13;

/// The fingerprints are hashes already: the map's hasher passes them on
/// (also the hasher of a transaction's write index, `own.rs`).
#[derive(Default)]
pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in byte by byte.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Fingerprint of a user key of a keyspace (the keyspace id seeds the
/// hash; seed 0 is plain xxh3).
pub(super) fn fingerprint(keyspace: u32, key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, u64::from(keyspace))
}

pub(crate) struct RecentWrites {
    /// Fingerprint → newest seqno that wrote a key with it.
    map: HashMap<u64, u64, BuildHasherDefault<PassThrough>>,
    /// Every write with a seqno at or above this is in `map`.
    from: u64,
    /// `bound` prunes once the map holds more entries than this.
    prune_at: usize,
}

impl RecentWrites {
    /// An empty log: it covers writes from seqno `next` on.
    pub fn new(next: u64) -> Self {
        RecentWrites {
            map: HashMap::default(),
            from: next,
            prune_at: PRUNE_MIN,
        }
    }

    /// Forgets every write: the log covers writes from `next` on. For
    /// groups that are not recorded (no transaction has begun yet).
    pub fn reset(&mut self, next: u64) {
        self.map.clear();
        self.from = next;
    }

    /// Notes that `key` of `keyspace` was written at `seqno`.
    pub fn record(&mut self, keyspace: u32, key: &[u8], seqno: u64) {
        debug_assert!(seqno >= self.from);
        let newest = self.map.entry(fingerprint(keyspace, key)).or_insert(seqno);
        *newest = (*newest).max(seqno);
    }

    /// Keeps the log small: once it has doubled since it was last pruned,
    /// drops entries at or below `oldest` (no pinned snapshot can ask
    /// about them), and clears the log, covering writes from `next` on,
    /// if that left more than half of `RECENT_KEYS_MAX`.
    pub fn bound(&mut self, oldest: impl FnOnce() -> u64, next: u64) {
        if self.map.len() <= self.prune_at {
            return;
        }
        let oldest = oldest();
        self.map.retain(|_, seqno| *seqno > oldest);
        if self.map.len() > RECENT_KEYS_MAX / 2 {
            self.reset(next);
        }
        self.prune_at = (self.map.len() * 2).clamp(PRUNE_MIN, RECENT_KEYS_MAX);
        // A table grown by a long pin would keep the few entries left
        // spread over all of it.
        if self.map.capacity() > 4 * self.prune_at {
            self.map.shrink_to(2 * self.prune_at);
        }
    }

    /// `false` if `key` was certainly not written after `snapshot`;
    /// `true` if it may have been, or if the log does not reach back to
    /// `snapshot` (then only the exact lookup can tell).
    pub fn may_have_changed(&self, keyspace: u32, key: &[u8], snapshot: u64) -> bool {
        if snapshot.saturating_add(1) < self.from {
            return true;
        }
        self.map
            .get(&fingerprint(keyspace, key))
            .is_some_and(|&seqno| seqno > snapshot)
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_for_covered_snapshots_only() {
        let mut r = RecentWrites::new(11);
        r.record(0, b"a", 11);
        r.record(0, b"b", 12);
        r.record(0, b"a", 13);
        // Snapshot 10 is covered (every write after it is from 11 on).
        assert!(r.may_have_changed(0, b"a", 10));
        assert!(r.may_have_changed(0, b"b", 10));
        assert!(!r.may_have_changed(0, b"c", 10));
        // Newest write wins: "a" changed after 12, "b" did not.
        assert!(r.may_have_changed(0, b"a", 12));
        assert!(!r.may_have_changed(0, b"b", 12));
        assert!(!r.may_have_changed(0, b"a", 13));
        // Snapshot 9 is not covered: seqno 10 may have written anything.
        assert!(r.may_have_changed(0, b"c", 9));
        r.reset(20);
        assert!(r.may_have_changed(0, b"c", 18));
        assert!(!r.may_have_changed(0, b"a", 19));
    }

    #[test]
    fn stays_small_while_pins_are_recent() {
        let mut r = RecentWrites::new(1);
        let mut s = 1u64;
        let mut most = 0;
        for _ in 0..2_000 {
            for _ in 0..100 {
                r.record(0, &s.to_be_bytes(), s);
                s += 1;
            }
            // The oldest pin trails the newest write by 1,000 seqnos.
            r.bound(|| s.saturating_sub(1_000), s);
            most = most.max(r.len());
        }
        assert!(most <= PRUNE_MIN + 100, "the log grew to {most} entries");
        assert!(
            r.map.capacity() <= 8 * PRUNE_MIN,
            "table of {}",
            r.map.capacity()
        );
        // What the pins may still ask about is there.
        assert!(r.may_have_changed(0, &(s - 1).to_be_bytes(), s - 1_000));
        assert!(r.may_have_changed(0, &(s - 999).to_be_bytes(), s - 1_000));
        assert!(!r.may_have_changed(0, &(s - 1_000).to_be_bytes(), s - 1_000));
    }

    #[test]
    fn stays_bounded_and_keeps_what_pins_need() {
        let mut r = RecentWrites::new(1);
        let n = RECENT_KEYS_MAX as u64 + 10;
        for s in 1..=n {
            r.record(0, &s.to_be_bytes(), s);
        }
        // Pins at n - 100: only the newest 100 writes are still needed.
        r.bound(|| n - 100, n + 1);
        assert_eq!(r.len(), 100);
        assert!(r.may_have_changed(0, &n.to_be_bytes(), n - 100));
        assert!(!r.may_have_changed(0, &(n - 100).to_be_bytes(), n - 100));
        // A pin at 0 keeps everything: the log is cleared and moves on.
        for s in n + 1..=n + RECENT_KEYS_MAX as u64 {
            r.record(0, &s.to_be_bytes(), s);
        }
        let next = n + RECENT_KEYS_MAX as u64 + 1;
        r.bound(|| 0, next);
        assert_eq!(r.len(), 0);
        assert!(r.may_have_changed(0, b"anything", 5), "not covered: exact");
        assert!(!r.may_have_changed(0, b"anything", next - 1));
    }
}
