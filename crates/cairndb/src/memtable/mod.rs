//! The memtable: an ordered map from internal key to value, shared by
//! the commit leader (the one writer) and any number of readers.
//!
//! Owns the newest writes until they are flushed to a table. Keys are
//! encoded internal keys (format/key.rs) ordered by `key::compare`; a delete
//! is stored with `Kind::Delete` and an empty value. `bytes` counts key and
//! value bytes plus a per-entry overhead estimate, and decides when the
//! memtable is sealed.
//!
//! The map is a B-tree (`std::collections::BTreeMap`) behind a
//! `parking_lot::RwLock`, not a lock-free skiplist. Measured on this
//! project's 2-core VM, 120,000 and 500,000 random 16-byte keys with their
//! tags and 100-byte values, one thread: crossbeam's skiplist 1.3–2.5 µs per insert and 1.3–2.8 µs
//! per lookup, the B-tree 0.5–1.4 µs and 0.5–1.2 µs, in the same runs. A
//! skiplist search follows one pointer per node it passes, and at these
//! sizes nearly every one is a cache miss; a B-tree node holds eleven
//! keys side by side, so a search misses about once per level of a tree
//! only four or five deep. Inserting a group is what a synced commit and
//! a random load spend most of their CPU on.
//!
//! Sharing: the leader inserts through a [`MemWriter`], which holds the
//! write lock for one commit group but yields it to waiting readers every
//! `WRITER_YIELD_OPS` inserts or `WRITER_YIELD_BYTES` of values, so a
//! reader waits for at most that much (about 30–90 µs). Readers hold the read lock only while they
//! search or copy out a chunk of entries; nothing borrows the map beyond
//! one call. A memtable no insert has reached is read without the lock
//! (`bytes` is 0): every entry a reader may see was counted before its
//! seqno was published (`Inner::last_seqno`, Release), and the reader
//! loaded that seqno (Acquire) before it looks, so an entry it must see
//! is never hidden by that shortcut.

use crate::format::key::{self, Kind};
use crate::limits::SEQNO_MAX;
use crate::version::segments::SegmentFile;
use crate::version::streams::Streams;
use parking_lot::{RwLock, RwLockWriteGuard};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

/// Estimated map overhead per entry (its share of a B-tree node and of
/// a value chunk's unused room), in bytes.
const ENTRY_OVERHEAD: usize = 64;

/// A writer yields the write lock to waiting readers after this many
/// inserts: the longest a reader waits for an insert in progress.
const WRITER_YIELD_OPS: usize = 64;

/// ... or after copying this many bytes of values, whichever comes first:
/// 64 large inline values would hold readers for many times longer.
const WRITER_YIELD_BYTES: usize = 256 << 10;

/// Versions of one user key a chunk steps over one by one before it
/// seeks: forward past the rest (`Memtable::visible_forward`), backward
/// (oldest first) to the newest visible one and then before them all
/// (`visible_backward`), as RocksDB's
/// `max_sequential_skip_in_iterations`: a key updated in place
/// thousands of times (the head of a zipfian update load) holds as many
/// versions until the memtable is flushed, and a scan that met it walked
/// them all — 11 % of YCSB E's CPU after A's updates. A seek costs a
/// descent of the tree, a few cache misses; so do about this many steps.
const SKIP_BEFORE_SEEK: usize = 8;

/// Internal keys up to this many bytes (a user key of up to 24 bytes and
/// its tag) are stored inside the map's node.
const IKEY_INLINE: usize = 32;

/// An encoded internal key ordered in internal order.
///
/// Short keys live inline, in the B-tree node itself: a search compares
/// keys that lie side by side in the node instead of following a pointer
/// to each (the memtable is a top source of cache misses in random
/// writes).
#[derive(Clone, PartialEq, Eq)]
pub struct IKey(SmallVec<[u8; IKEY_INLINE]>);

impl IKey {
    /// An internal key from its encoding (format/key.rs).
    pub fn from_encoded(ikey: &[u8]) -> Self {
        IKey(SmallVec::from_slice(ikey))
    }

    /// The internal key of `user_key` with `tag`.
    pub fn new(user_key: &[u8], tag: u64) -> Self {
        let mut v = SmallVec::with_capacity(user_key.len() + key::TAG_LEN);
        v.extend_from_slice(user_key);
        v.extend_from_slice(&tag.to_be_bytes());
        IKey(v)
    }

    /// The encoded internal key.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Ord for IKey {
    /// Internal order (`key::compare`), with a shortcut: two user keys of
    /// 8 bytes or more whose first 8 bytes differ are ordered by those
    /// bytes read as one big-endian word, the order the full comparison
    /// gives them, without splitting off the tags or calling `memcmp`.
    /// Random keys nearly always differ there. Inserting 500,000 random
    /// 16-byte keys with 100-byte values took 391–477 ns each with it
    /// against 494–694 without.
    fn cmp(&self, other: &Self) -> Ordering {
        if let (Some(a), Some(b)) = (lead_word(&self.0), lead_word(&other.0))
            && a != b
        {
            return a.cmp(&b);
        }
        key::compare(&self.0, &other.0)
    }
}

/// The first 8 bytes of internal key `ikey`'s user key as a big-endian
/// word, if its user key has that many.
fn lead_word(ikey: &[u8]) -> Option<u64> {
    if ikey.len() < 8 + key::TAG_LEN {
        return None;
    }
    ikey.first_chunk::<8>().map(|w| u64::from_be_bytes(*w))
}
impl PartialOrd for IKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a memtable knows about a key at a snapshot.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(Vec<u8>),
    /// A separated value: the encoded `ValuePtr`.
    Pointer(Vec<u8>),
    Deleted,
}

/// Values are copied into chunks of this many bytes, one after another.
const CHUNK_BYTES: usize = 1 << 20;

/// A value larger than this gets a chunk of its own, sized to it.
const CHUNK_VALUE_MAX: usize = CHUNK_BYTES / 4;

/// How many entries ahead of the one it visits [`Memtable::for_each`]
/// asks the CPU for a value. A flush of 500,000 random 16-byte keys with
/// 100-byte values took 327–373 ns per entry at 8 against 375–399
/// without; 16 was no better.
const VISIT_PREFETCH_AHEAD: usize = 8;

/// Asks the CPU to bring the first two cache lines of `bytes` into its
/// caches: a hint, which changes no result.
#[inline]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = bytes.as_ptr();
        // SAFETY: `_mm_prefetch` is unsafe only for its target feature,
        // SSE, which is in every x86_64 target's baseline. A prefetch
        // reads nothing the program sees and never faults, whatever the
        // address, so the line past a short value's end is fine too (its
        // address is formed with `wrapping_add` and never dereferenced).
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p.cast());
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Where a value lies in its memtable's [`Values`].
#[derive(Clone, Copy)]
struct ValRef {
    chunk: u32,
    at: u32,
    len: u32,
}

/// A memtable's values, appended into large chunks rather than boxed one
/// by one: an insert then allocates nothing for its value most of the
/// time and dropping a memtable frees a few chunks instead of one box per
/// entry. Written here
/// because it is a dozen lines over `Vec`s; nothing is freed before the
/// whole memtable is.
#[derive(Default)]
struct Values {
    chunks: Vec<Vec<u8>>,
    /// The chunk small values are appended to. A value that does not fit
    /// in its room starts a new one, so less than `CHUNK_VALUE_MAX` of a
    /// chunk is ever left unused.
    open: Option<usize>,
}

impl Values {
    fn push(&mut self, value: &[u8]) -> ValRef {
        let len = value.len();
        if len == 0 {
            return ValRef {
                chunk: 0,
                at: 0,
                len: 0,
            };
        }
        let (chunk, at) = if len > CHUNK_VALUE_MAX {
            self.chunks.push(value.to_vec());
            (self.chunks.len() - 1, 0)
        } else {
            let open = match self.open {
                Some(i) if self.chunks[i].capacity() - self.chunks[i].len() >= len => i,
                _ => {
                    self.chunks.push(Vec::with_capacity(CHUNK_BYTES));
                    self.chunks.len() - 1
                }
            };
            self.open = Some(open);
            let c = &mut self.chunks[open];
            let at = c.len();
            c.extend_from_slice(value);
            (open, at)
        };
        // Values are at most `VALUE_LEN_MAX` (1 GiB) and a chunk holds at
        // most `CHUNK_BYTES` or one value, so every field fits 32 bits.
        ValRef {
            chunk: chunk as u32,
            at: at as u32,
            len: len as u32,
        }
    }

    fn get(&self, r: ValRef) -> &[u8] {
        if r.len == 0 {
            return &[];
        }
        let at = r.at as usize;
        &self.chunks[r.chunk as usize][at..at + r.len as usize]
    }
}

type Map = BTreeMap<IKey, ValRef>;

/// The ordered maps, one per keyspace, and the values their entries
/// point to.
#[derive(Default)]
struct Tree {
    /// The default keyspace's map, kept apart so its inserts and lookups
    /// take no extra step.
    map: Map,
    /// The other keyspaces' maps, by keyspace id.
    others: BTreeMap<u32, Map>,
    values: Values,
}

/// An empty map, for lookups in a keyspace the memtable holds nothing of.
static EMPTY: Map = BTreeMap::new();

impl Tree {
    fn map(&self, keyspace: u32) -> &Map {
        if keyspace == 0 {
            return &self.map;
        }
        self.others.get(&keyspace).unwrap_or(&EMPTY)
    }

    fn map_mut(&mut self, keyspace: u32) -> &mut Map {
        if keyspace == 0 {
            return &mut self.map;
        }
        self.others.entry(keyspace).or_default()
    }

    /// Every keyspace's map, in keyspace order.
    fn maps(&self) -> impl Iterator<Item = (u32, &Map)> {
        std::iter::once((0, &self.map)).chain(self.others.iter().map(|(&k, m)| (k, m)))
    }
}

pub struct Memtable {
    map: RwLock<Tree>,
    bytes: AtomicUsize,
    /// Number of the journal file holding this memtable's writes.
    journal: u64,
    /// The journal as a segment: keeps it readable (separated values
    /// point into it) for as long as the memtable is. `None` for the
    /// memtables of recovery, which nobody reads.
    segment: Option<Arc<SegmentFile>>,
    /// The journal's value streams (`version/streams.rs`): the memtable's
    /// pointers name them too.
    streams: Option<Arc<Streams>>,
}

/// Inserts into one memtable, holding its write lock (module header:
/// yielded to waiting readers every `WRITER_YIELD_OPS` inserts or
/// `WRITER_YIELD_BYTES` of values).
pub struct MemWriter<'a> {
    map: RwLockWriteGuard<'a, Tree>,
    bytes: &'a AtomicUsize,
    since_yield: usize,
    bytes_since_yield: usize,
}

impl MemWriter<'_> {
    pub fn insert(&mut self, keyspace: u32, user_key: &[u8], seqno: u64, kind: Kind, value: &[u8]) {
        let ikey = IKey::new(user_key, key::make_tag(seqno, kind as u8));
        // Counted before the entry exists: a reader that finds `bytes` at
        // 0 may skip the map (module header).
        self.bytes.fetch_add(
            ikey.0.len() + value.len() + ENTRY_OVERHEAD,
            AtomicOrdering::Relaxed,
        );
        let tree = &mut *self.map;
        let at = tree.values.push(value);
        tree.map_mut(keyspace).insert(ikey, at);
        self.since_yield += 1;
        self.bytes_since_yield += value.len();
        if self.since_yield >= WRITER_YIELD_OPS || self.bytes_since_yield >= WRITER_YIELD_BYTES {
            self.since_yield = 0;
            self.bytes_since_yield = 0;
            RwLockWriteGuard::bump(&mut self.map);
        }
    }
}

impl Memtable {
    pub fn new(journal: u64) -> Self {
        Memtable {
            map: RwLock::new(Tree::default()),
            bytes: AtomicUsize::new(0),
            journal,
            segment: None,
            streams: None,
        }
    }

    /// A memtable whose writes go to journal `segment` and, with
    /// `streams`, their separated values to those value streams.
    pub fn with_segment(segment: Arc<SegmentFile>, streams: Option<Arc<Streams>>) -> Self {
        debug_assert!(streams.as_ref().is_none_or(|s| s.journal == segment.number));
        Memtable {
            journal: segment.number,
            segment: Some(segment),
            streams,
            ..Memtable::new(0)
        }
    }

    /// The journal's value streams, if it has them.
    pub fn streams(&self) -> Option<&Arc<Streams>> {
        self.streams.as_ref()
    }

    /// The segment numbered `number` that this memtable's pointers may
    /// name: its journal, or one of its value streams.
    pub fn segment_of(&self, number: u64) -> Option<&Arc<SegmentFile>> {
        if number == self.journal {
            return self.segment.as_ref();
        }
        self.streams.as_ref()?.segment(number)
    }

    pub fn journal(&self) -> u64 {
        self.journal
    }

    pub fn segment(&self) -> Option<&Arc<SegmentFile>> {
        self.segment.as_ref()
    }

    /// A writer for a run of inserts (a commit group, or one replayed
    /// batch): takes the write lock.
    pub fn writer(&self) -> MemWriter<'_> {
        MemWriter {
            map: self.map.write(),
            bytes: &self.bytes,
            since_yield: 0,
            bytes_since_yield: 0,
        }
    }

    /// One insert (tests); a batch goes through one [`Memtable::writer`].
    #[cfg(test)]
    pub fn insert(&self, user_key: &[u8], seqno: u64, kind: Kind, value: &[u8]) {
        self.writer().insert(0, user_key, seqno, kind, value);
    }

    /// Approximate memory held, in bytes.
    pub fn approx_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.approx_bytes() == 0
    }

    /// The first entry at or after `seek`, looked up under the read lock,
    /// and `f` of it; `None` for an empty memtable without taking the lock.
    fn first_from<R>(
        &self,
        keyspace: u32,
        seek: &IKey,
        f: impl FnOnce(&[u8], &[u8]) -> Option<R>,
    ) -> Option<R> {
        if self.is_empty() {
            return None;
        }
        let tree = self.map.read();
        let (k, v) = tree
            .map(keyspace)
            .range((Bound::Included(seek), Bound::Unbounded))
            .next()?;
        f(k.as_bytes(), tree.values.get(*v))
    }

    /// Seqno of the newest version of `user_key` of `keyspace` (a put or
    /// a tombstone).
    pub fn newest_seqno(&self, keyspace: u32, user_key: &[u8]) -> Option<u64> {
        let seek = IKey::new(user_key, key::make_tag(SEQNO_MAX, key::KIND_SEEK));
        self.first_from(keyspace, &seek, |ikey, _| {
            let (ukey, tag) = key::split(ikey)?;
            (ukey == user_key).then(|| key::tag_seqno(tag))
        })
    }

    /// The newest version of `user_key` of `keyspace` with seqno <=
    /// `snapshot`, if any.
    pub fn get(&self, keyspace: u32, user_key: &[u8], snapshot: u64) -> Option<Lookup> {
        let seek = IKey::new(user_key, key::make_tag(snapshot, key::KIND_SEEK));
        self.first_from(keyspace, &seek, |ikey, value| {
            let (ukey, tag) = key::split(ikey)?;
            if ukey != user_key {
                return None;
            }
            Some(match Kind::from_u8(key::tag_kind(tag)) {
                Some(Kind::Put) => Lookup::Found(value.to_vec()),
                Some(Kind::Pointer) => Lookup::Pointer(value.to_vec()),
                _ => Lookup::Deleted,
            })
        })
    }

    /// Copies out, in order from `from`, the newest version with seqno <=
    /// `snapshot` of each user key (a tombstone included), up to `max` of
    /// them; older and invisible versions are skipped without copying
    /// their values. Returns where to resume (`Included` of the first entry
    /// not yet looked at), or `None` at the end of the memtable.
    pub fn visible_forward(
        &self,
        keyspace: u32,
        from: Bound<&IKey>,
        snapshot: u64,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Option<Bound<Vec<u8>>> {
        if self.is_empty() {
            return None;
        }
        let tree = self.map.read();
        let map = tree.map(keyspace);
        let mut entries = map.range((from, Bound::Unbounded));
        // The user key of the last version copied out; its older versions
        // are skipped, stepped over one by one up to `SKIP_BEFORE_SEEK`,
        // then sought past.
        let mut last: Option<&[u8]> = None;
        let mut skipped = 0;
        while let Some((k, v)) = entries.next() {
            let ikey: &[u8] = k.as_bytes();
            let Some((user, tag)) = key::split(ikey) else {
                continue;
            };
            if last == Some(user) {
                skipped += 1;
                if skipped == SKIP_BEFORE_SEEK {
                    // Tag 0 sorts after every other version of `user`.
                    let past = IKey::new(user, 0);
                    entries = map.range((Bound::Excluded(past), Bound::Unbounded));
                }
                continue;
            }
            skipped = 0;
            if out.len() >= max {
                return Some(Bound::Included(ikey.to_vec()));
            }
            if key::tag_seqno(tag) > snapshot {
                continue;
            }
            out.push((ikey.to_vec(), tree.values.get(*v).to_vec()));
            last = Some(user);
        }
        None
    }

    /// Like [`Memtable::visible_forward`], backward from `to`: entries in
    /// reverse order, each user key represented by its newest version
    /// with seqno <= `snapshot`.
    pub fn visible_backward(
        &self,
        keyspace: u32,
        to: Bound<&IKey>,
        snapshot: u64,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Option<Bound<Vec<u8>>> {
        if self.is_empty() {
            return None;
        }
        let tree = self.map.read();
        let map = tree.map(keyspace);
        let mut entries = map.range((Bound::Unbounded, to)).rev();
        // Backward, a user key's versions come oldest first: the newest
        // visible one is known only when the user key changes, or, once
        // `SKIP_BEFORE_SEEK` of them were stepped over, sought.
        let mut candidate: Option<(&IKey, ValRef)> = None;
        let mut run: (Option<&[u8]>, usize) = (None, 0);
        while let Some((k, v)) = entries.next() {
            let ikey: &[u8] = k.as_bytes();
            let Some((user, tag)) = key::split(ikey) else {
                continue;
            };
            run = if run.0 == Some(user) {
                (run.0, run.1 + 1)
            } else {
                (Some(user), 1)
            };
            if run.1 == SKIP_BEFORE_SEEK {
                // The newest version at or below the snapshot comes first
                // from here in internal order; `to` never falls among a
                // user key's versions (iterator bounds take all or none),
                // and a version past it would be left out all the same.
                let newest =
                    IKey::new(user, key::make_tag(snapshot.min(SEQNO_MAX), key::KIND_SEEK));
                let found = map
                    .range((Bound::Included(&newest), Bound::Unbounded))
                    .next()
                    .filter(|(f, _)| key::user_key(f.as_bytes()) == user)
                    .filter(|(f, _)| match to {
                        Bound::Included(t) => *f <= t,
                        Bound::Excluded(t) => *f < t,
                        Bound::Unbounded => true,
                    });
                if let Some((f, fv)) = found {
                    candidate = Some((f, *fv));
                }
                // Tag `u64::MAX` sorts before every version of `user`.
                let before = IKey::new(user, u64::MAX);
                entries = map.range((Bound::Unbounded, Bound::Excluded(before))).rev();
                continue;
            }
            let new_user = candidate.is_some_and(|(c, _)| key::user_key(c.as_bytes()) != user);
            if new_user {
                if let Some((c, cv)) = candidate.take() {
                    out.push((c.as_bytes().to_vec(), tree.values.get(cv).to_vec()));
                }
                if out.len() >= max {
                    return Some(Bound::Included(ikey.to_vec()));
                }
            }
            if key::tag_seqno(tag) <= snapshot {
                candidate = Some((k, *v));
            }
        }
        if let Some((c, cv)) = candidate {
            out.push((c.as_bytes().to_vec(), tree.values.get(cv).to_vec()));
        }
        None
    }

    /// Visits every entry, keyspace by keyspace in id order and each in
    /// key order (for flushing), holding the read lock throughout: a
    /// flushed memtable is sealed and takes no inserts. `f` gets the
    /// keyspace, the internal key and the value.
    ///
    /// Values lie in their chunks in the order they were inserted, and a
    /// random load visits them in another: nearly every value is a cache
    /// miss. The CPU is asked for the value `VISIT_PREFETCH_AHEAD` entries
    /// on, so those misses overlap the work on the entries before it.
    pub fn for_each(
        &self,
        mut f: impl FnMut(u32, &[u8], &[u8]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        let tree = self.map.read();
        for (keyspace, map) in tree.maps() {
            let mut ahead = map.values().skip(VISIT_PREFETCH_AHEAD);
            for (k, v) in map {
                if let Some(next) = ahead.next() {
                    prefetch(tree.values.get(*next));
                }
                f(keyspace, k.as_bytes(), tree.values.get(*v))?;
            }
        }
        Ok(())
    }

    /// Highest seqno stored, if any.
    #[cfg(test)]
    pub fn max_seqno(&self) -> Option<u64> {
        self.map
            .read()
            .maps()
            .flat_map(|(_, m)| m.keys())
            .filter_map(|k| key::split(k.as_bytes()).map(|(_, t)| key::tag_seqno(t)))
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `IKey`'s order, shortcut included, is `key::compare`'s: user keys
    /// around the shortcut's 8 bytes (shorter, exactly 8, sharing their
    /// first 8 bytes, prefixes of each other), bytes at both ends of their
    /// range, and tags that differ where the user keys do not.
    #[test]
    fn ikey_order_is_internal_order() {
        const BYTES: [u8; 5] = [0x00, 0x01, 0x7f, 0x80, 0xff];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut user = |len: usize, shared: &[u8]| -> Vec<u8> {
            let mut k = shared[..shared.len().min(len)].to_vec();
            while k.len() < len {
                k.push(BYTES[(next() % 5) as usize]);
            }
            k
        };
        let mut keys = Vec::new();
        let common = [0x41u8; 12];
        for len in 0..=20 {
            for shared in [&[][..], &common[..]] {
                for seqno in [1u64, 2, 1 << 40] {
                    let k = user(len, shared);
                    keys.push(key::encode(&k, key::make_tag(seqno, Kind::Put as u8)));
                }
            }
        }
        let mut shortcuts = 0;
        for a in &keys {
            for b in &keys {
                let (ia, ib) = (IKey::from_encoded(a), IKey::from_encoded(b));
                assert_eq!(ia.cmp(&ib), key::compare(a, b), "{a:?} vs {b:?}");
                shortcuts += usize::from(matches!(
                    (lead_word(a), lead_word(b)), (Some(x), Some(y)) if x != y
                ));
            }
        }
        assert!(shortcuts > 1000, "the shortcut was taken {shortcuts} times");
    }

    #[test]
    fn snapshot_reads_see_the_right_version() {
        let m = Memtable::new(1);
        m.insert(b"k", 1, Kind::Put, b"v1");
        m.insert(b"k", 3, Kind::Delete, b"");
        m.insert(b"k", 5, Kind::Put, b"v5");
        m.insert(b"j", 2, Kind::Put, b"j2");
        assert_eq!(m.get(0, b"k", 0), None);
        assert_eq!(m.get(0, b"k", 1), Some(Lookup::Found(b"v1".to_vec())));
        assert_eq!(m.get(0, b"k", 2), Some(Lookup::Found(b"v1".to_vec())));
        assert_eq!(m.get(0, b"k", 4), Some(Lookup::Deleted));
        assert_eq!(m.get(0, b"k", 9), Some(Lookup::Found(b"v5".to_vec())));
        assert_eq!(m.get(0, b"kk", 9), None);
        assert_eq!(m.max_seqno(), Some(5));
        // Cursors see one version per user key: the newest visible one.
        let seqnos = |out: &[(Vec<u8>, Vec<u8>)]| -> Vec<(Vec<u8>, u64)> {
            out.iter()
                .map(|(k, _)| {
                    let (u, t) = key::split(k).expect("ikey");
                    (u.to_vec(), key::tag_seqno(t))
                })
                .collect()
        };
        let mut out = Vec::new();
        assert_eq!(
            m.visible_backward(0, Bound::Unbounded, 9, 10, &mut out),
            None
        );
        assert_eq!(seqnos(&out), vec![(b"k".to_vec(), 5), (b"j".to_vec(), 2)]);
        out.clear();
        assert_eq!(
            m.visible_forward(0, Bound::Unbounded, 4, 10, &mut out),
            None
        );
        assert_eq!(seqnos(&out), vec![(b"j".to_vec(), 2), (b"k".to_vec(), 3)]);
        out.clear();
        assert_eq!(
            m.visible_backward(0, Bound::Unbounded, 1, 10, &mut out),
            None
        );
        assert_eq!(seqnos(&out), vec![(b"k".to_vec(), 1)]);
        // A chunk stops at `max` and says where to resume.
        out.clear();
        let resume = m.visible_forward(0, Bound::Unbounded, 9, 1, &mut out);
        assert_eq!(seqnos(&out), vec![(b"j".to_vec(), 2)]);
        assert_eq!(
            resume,
            Some(Bound::Included(key::encode(b"k", key::make_tag(5, 1))))
        );
    }

    /// Chunks over user keys with many versions (sought past after
    /// `SKIP_BEFORE_SEEK`, `visible_forward` and `visible_backward`)
    /// yield what stepping over every version yields: the newest visible
    /// version of each user key, keys that extend a many-versioned key
    /// (`k\0`, `ka`) included, for every snapshot, chunk size and start,
    /// in both directions.
    #[test]
    fn chunks_seek_past_many_versions_and_miss_nothing() {
        let m = Memtable::new(1);
        // user key -> (seqno, kind) of each version.
        let mut model: BTreeMap<Vec<u8>, Vec<(u64, Kind)>> = BTreeMap::new();
        let users: [&[u8]; 6] = [b"", b"j", b"k", b"k\0", b"ka", b"l"];
        let mut seqno = 0;
        for round in 0..60usize {
            for (i, u) in users.iter().enumerate() {
                // "k" and "" get a version each round, the others a few.
                if matches!(i, 0 | 2) || round % (i + 7) == 0 {
                    seqno += 1;
                    let kind = if round % 11 == 5 {
                        Kind::Delete
                    } else {
                        Kind::Put
                    };
                    m.insert(u, seqno, kind, format!("{seqno}").as_bytes());
                    model.entry(u.to_vec()).or_default().push((seqno, kind));
                }
            }
        }
        let expect = |from: &[u8], snapshot: u64| -> Vec<(Vec<u8>, u64)> {
            model
                .iter()
                .filter(|(u, _)| u.as_slice() >= from)
                .filter_map(|(u, vs)| {
                    vs.iter()
                        .rev()
                        .find(|(s, _)| *s <= snapshot)
                        .map(|(s, _)| (u.clone(), *s))
                })
                .collect()
        };
        for snapshot in [0, 1, 2, 7, seqno / 2, seqno - 1, seqno, seqno + 5] {
            for from in [&b""[..], b"k", b"k\0", b"kb"] {
                for max in [1, 2, 3, 64] {
                    let mut got = Vec::new();
                    let start = IKey::new(from, key::make_tag(SEQNO_MAX, key::KIND_SEEK));
                    let mut resume = Some(Bound::Included(start.as_bytes().to_vec()));
                    while let Some(r) = resume.take() {
                        let k = match &r {
                            Bound::Included(k) | Bound::Excluded(k) => IKey::from_encoded(k),
                            Bound::Unbounded => unreachable!("chunks resume at a key"),
                        };
                        let bound = match &r {
                            Bound::Included(_) => Bound::Included(&k),
                            _ => Bound::Excluded(&k),
                        };
                        let mut out = Vec::new();
                        resume = m.visible_forward(0, bound, snapshot, max, &mut out);
                        assert!(out.len() <= max);
                        got.extend(out.iter().map(|(k, v)| {
                            let (u, t) = key::split(k).expect("ikey");
                            let s = key::tag_seqno(t);
                            if key::tag_kind(t) == Kind::Put as u8 {
                                assert_eq!(v, format!("{s}").as_bytes());
                            }
                            (u.to_vec(), s)
                        }));
                    }
                    assert_eq!(
                        got,
                        expect(from, snapshot),
                        "snapshot {snapshot} from {from:?} max {max}"
                    );
                }
            }
            // Backward, from the ends iterators start at: after every
            // version of a user key (tag 0), or before every one.
            for (to, inclusive) in [
                (&b"l"[..], true),
                (b"ka", true),
                (b"k\0", false),
                (b"k", true),
            ] {
                for max in [1, 2, 3, 64] {
                    let mut got = Vec::new();
                    let first = if inclusive {
                        Bound::Included(IKey::new(to, 0).as_bytes().to_vec())
                    } else {
                        Bound::Excluded(
                            IKey::new(to, key::make_tag(SEQNO_MAX, key::KIND_SEEK))
                                .as_bytes()
                                .to_vec(),
                        )
                    };
                    let mut resume = Some(first);
                    while let Some(r) = resume.take() {
                        let k = match &r {
                            Bound::Included(k) | Bound::Excluded(k) => IKey::from_encoded(k),
                            Bound::Unbounded => unreachable!("chunks resume at a key"),
                        };
                        let bound = match &r {
                            Bound::Included(_) => Bound::Included(&k),
                            _ => Bound::Excluded(&k),
                        };
                        let mut out = Vec::new();
                        resume = m.visible_backward(0, bound, snapshot, max, &mut out);
                        assert!(out.len() <= max);
                        got.extend(out.iter().map(|(k, v)| {
                            let (u, t) = key::split(k).expect("ikey");
                            let s = key::tag_seqno(t);
                            if key::tag_kind(t) == Kind::Put as u8 {
                                assert_eq!(v, format!("{s}").as_bytes());
                            }
                            (u.to_vec(), s)
                        }));
                    }
                    let mut want: Vec<_> = expect(b"", snapshot)
                        .into_iter()
                        .filter(|(u, _)| {
                            if inclusive {
                                u.as_slice() <= to
                            } else {
                                u.as_slice() < to
                            }
                        })
                        .collect();
                    want.reverse();
                    assert_eq!(
                        got, want,
                        "backward: snapshot {snapshot} to {to:?} max {max}"
                    );
                }
            }
        }
    }

    /// Keyspaces do not see each other's keys; a visit goes keyspace by
    /// keyspace.
    #[test]
    fn keyspaces_are_apart() {
        let m = Memtable::new(1);
        let mut w = m.writer();
        w.insert(0, b"k", 1, Kind::Put, b"default");
        w.insert(9, b"k", 2, Kind::Put, b"nine");
        w.insert(3, b"a", 3, Kind::Put, b"three");
        drop(w);
        assert_eq!(m.get(0, b"k", 9), Some(Lookup::Found(b"default".to_vec())));
        assert_eq!(m.get(9, b"k", 9), Some(Lookup::Found(b"nine".to_vec())));
        assert_eq!(m.get(3, b"k", 9), None);
        assert_eq!(m.get(4, b"a", 9), None);
        assert_eq!(m.newest_seqno(9, b"k"), Some(2));
        let mut out = Vec::new();
        assert_eq!(
            m.visible_forward(3, Bound::Unbounded, 9, 10, &mut out),
            None
        );
        assert_eq!(out.len(), 1);
        let mut seen = Vec::new();
        m.for_each(|ks, k, _| {
            seen.push((ks, key::user_key(k).to_vec()));
            Ok(())
        })
        .expect("visit");
        assert_eq!(
            seen,
            [(0, b"k".to_vec()), (3, b"a".to_vec()), (9, b"k".to_vec())]
        );
    }

    #[test]
    fn values_of_every_size_read_back_across_chunks() {
        let m = Memtable::new(1);
        // Small values fill several chunks; values over `CHUNK_VALUE_MAX`
        // take chunks of their own between them; empty values none.
        let sizes = [
            0,
            1,
            100,
            CHUNK_VALUE_MAX,
            CHUNK_VALUE_MAX + 1,
            3 * CHUNK_BYTES,
            4000,
        ];
        let value = |i: usize| -> Vec<u8> {
            let len = sizes[i % sizes.len()];
            (0..len).map(|j| (i * 31 + j) as u8).collect()
        };
        let n = 60;
        for i in 0..n {
            m.insert(
                format!("k{i:03}").as_bytes(),
                i as u64 + 1,
                Kind::Put,
                &value(i),
            );
        }
        for i in 0..n {
            assert_eq!(
                m.get(0, format!("k{i:03}").as_bytes(), n as u64),
                Some(Lookup::Found(value(i))),
                "value {i}"
            );
        }
        let tree = m.map.read();
        assert!(tree.values.chunks.len() > 10, "several chunks were used");
        let open = tree.values.open.expect("small values went in");
        for (i, c) in tree.values.chunks.iter().enumerate() {
            if c.capacity() == CHUNK_BYTES && i != open {
                assert!(
                    c.len() > CHUNK_BYTES - CHUNK_VALUE_MAX,
                    "chunk {i} was left with {} of {} bytes used",
                    c.len(),
                    c.capacity()
                );
            }
        }
        drop(tree);
        let mut seen = 0;
        m.for_each(|_, k, v| {
            let (u, _) = key::split(k).expect("ikey");
            let i: usize = std::str::from_utf8(&u[1..])
                .expect("utf8")
                .parse()
                .expect("number");
            assert_eq!(v, &value(i)[..]);
            seen += 1;
            Ok(())
        })
        .expect("for_each");
        assert_eq!(seen, n);
    }
}
