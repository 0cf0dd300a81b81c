//! The memtable: an ordered, concurrent map from internal key to value.
//!
//! Owns the newest writes until they are flushed to a table. Keys are
//! encoded internal keys (format/key.rs) ordered by `key::compare`; a delete
//! is stored with `Kind::Delete` and an empty value. Inserts come from the
//! group-commit leader only; reads and cursors run concurrently with it from
//! any thread (crossbeam's lock-free skiplist). `bytes` counts key and value
//! bytes plus a per-entry overhead estimate, and decides when the memtable
//! is sealed.

use crate::format::key::{self, Kind};
use crate::version::segments::SegmentFile;
use crossbeam_skiplist::SkipMap;
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

/// Estimated skiplist overhead per entry (node, tower, boxes), in bytes.
const ENTRY_OVERHEAD: usize = 64;

/// Internal keys up to this many bytes (a user key of up to 24 bytes and
/// its tag) are stored inside the skiplist node.
const IKEY_INLINE: usize = 32;

/// An encoded internal key ordered in internal order.
///
/// Short keys live inline, in the skiplist node itself: a search then
/// touches one cache line per node it passes instead of two (the node,
/// then a boxed key elsewhere on the heap), which halves the cache misses
/// of memtable inserts and lookups (fact 5 of DESIGN.md: the memtable is a
/// top source of cache misses in random writes).
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
    fn cmp(&self, other: &Self) -> Ordering {
        key::compare(&self.0, &other.0)
    }
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

pub struct Memtable {
    map: SkipMap<IKey, Box<[u8]>>,
    bytes: AtomicUsize,
    /// Number of the journal file holding this memtable's writes.
    journal: u64,
    /// The journal as a segment: keeps it readable (separated values
    /// point into it) for as long as the memtable is. `None` for the
    /// memtables of recovery, which nobody reads.
    segment: Option<Arc<SegmentFile>>,
}

impl Memtable {
    pub fn new(journal: u64) -> Self {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            journal,
            segment: None,
        }
    }

    /// A memtable whose writes go to journal `segment`.
    pub fn with_segment(segment: Arc<SegmentFile>) -> Self {
        Memtable {
            journal: segment.number,
            segment: Some(segment),
            ..Memtable::new(0)
        }
    }

    pub fn journal(&self) -> u64 {
        self.journal
    }

    pub fn segment(&self) -> Option<&Arc<SegmentFile>> {
        self.segment.as_ref()
    }

    pub fn insert(&self, user_key: &[u8], seqno: u64, kind: Kind, value: &[u8]) {
        let ikey = IKey::new(user_key, key::make_tag(seqno, kind as u8));
        self.bytes.fetch_add(
            ikey.0.len() + value.len() + ENTRY_OVERHEAD,
            AtomicOrdering::Relaxed,
        );
        self.map.insert(ikey, value.into());
    }

    /// Approximate memory held, in bytes.
    pub fn approx_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The newest version of `user_key` with seqno <= `snapshot`, if any.
    /// Seqno of the newest version of `user_key` (a put or a tombstone).
    pub fn newest_seqno(&self, user_key: &[u8]) -> Option<u64> {
        let seek = IKey::new(
            user_key,
            key::make_tag(crate::limits::SEQNO_MAX, key::KIND_SEEK),
        );
        let entry = self.map.lower_bound(Bound::Included(&seek))?;
        let (ukey, tag) = key::split(entry.key().as_bytes())?;
        (ukey == user_key).then(|| key::tag_seqno(tag))
    }

    pub fn get(&self, user_key: &[u8], snapshot: u64) -> Option<Lookup> {
        let seek = IKey::new(user_key, key::make_tag(snapshot, key::KIND_SEEK));
        let entry = self.map.lower_bound(Bound::Included(&seek))?;
        let (ukey, tag) = key::split(entry.key().as_bytes())?;
        if ukey != user_key {
            return None;
        }
        Some(match Kind::from_u8(key::tag_kind(tag)) {
            Some(Kind::Put) => Lookup::Found(entry.value().to_vec()),
            Some(Kind::Pointer) => Lookup::Pointer(entry.value().to_vec()),
            _ => Lookup::Deleted,
        })
    }

    /// Copies out, in order from `from`, the newest version with seqno <=
    /// `snapshot` of each user key (a tombstone included), up to `max` of
    /// them; older and invisible versions are skipped without copying
    /// their values. Returns where to resume (`Included` of the first entry
    /// not yet looked at), or `None` at the end of the memtable.
    pub fn visible_forward(
        &self,
        from: Bound<&IKey>,
        snapshot: u64,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Option<Bound<Vec<u8>>> {
        // The last version copied out; its user key's older versions are
        // skipped.
        let mut last: Option<crossbeam_skiplist::map::Entry<'_, IKey, Box<[u8]>>> = None;
        let range = self.map.range((from, Bound::Unbounded));
        for e in range {
            let ikey: &[u8] = e.key().as_bytes();
            let Some((user, tag)) = key::split(ikey) else {
                continue;
            };
            if last
                .as_ref()
                .is_some_and(|l| key::user_key(l.key().as_bytes()) == user)
            {
                continue;
            }
            if out.len() >= max {
                return Some(Bound::Included(ikey.to_vec()));
            }
            if key::tag_seqno(tag) > snapshot {
                continue;
            }
            out.push((ikey.to_vec(), e.value().to_vec()));
            last = Some(e);
        }
        None
    }

    /// Like [`Memtable::visible_forward`], backward from `to`: entries in
    /// reverse order, each user key represented by its newest version
    /// with seqno <= `snapshot`.
    pub fn visible_backward(
        &self,
        to: Bound<&IKey>,
        snapshot: u64,
        max: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Option<Bound<Vec<u8>>> {
        // Backward, a user key's versions come oldest first: the newest
        // visible one is known only when the user key changes.
        let mut candidate = None;
        let range = self.map.range((Bound::Unbounded, to));
        for e in range.rev() {
            let ikey: &[u8] = e.key().as_bytes();
            let Some((user, tag)) = key::split(ikey) else {
                continue;
            };
            let new_user = candidate.as_ref().is_some_and(
                |c: &crossbeam_skiplist::map::Entry<'_, IKey, Box<[u8]>>| {
                    key::user_key(c.key().as_bytes()) != user
                },
            );
            if new_user {
                if let Some(c) = candidate.take() {
                    out.push((c.key().as_bytes().to_vec(), c.value().to_vec()));
                }
                if out.len() >= max {
                    return Some(Bound::Included(ikey.to_vec()));
                }
            }
            if key::tag_seqno(tag) <= snapshot {
                candidate = Some(e);
            }
        }
        if let Some(c) = candidate {
            out.push((c.key().as_bytes().to_vec(), c.value().to_vec()));
        }
        None
    }

    /// Visits every entry in order (for flushing).
    pub fn for_each(
        &self,
        mut f: impl FnMut(&[u8], &[u8]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        for e in self.map.iter() {
            f(e.key().as_bytes(), e.value())?;
        }
        Ok(())
    }

    /// Highest seqno stored, if any.
    #[cfg(test)]
    pub fn max_seqno(&self) -> Option<u64> {
        self.map
            .iter()
            .filter_map(|e| key::split(e.key().as_bytes()).map(|(_, t)| key::tag_seqno(t)))
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_see_the_right_version() {
        let m = Memtable::new(1);
        m.insert(b"k", 1, Kind::Put, b"v1");
        m.insert(b"k", 3, Kind::Delete, b"");
        m.insert(b"k", 5, Kind::Put, b"v5");
        m.insert(b"j", 2, Kind::Put, b"j2");
        assert_eq!(m.get(b"k", 0), None);
        assert_eq!(m.get(b"k", 1), Some(Lookup::Found(b"v1".to_vec())));
        assert_eq!(m.get(b"k", 2), Some(Lookup::Found(b"v1".to_vec())));
        assert_eq!(m.get(b"k", 4), Some(Lookup::Deleted));
        assert_eq!(m.get(b"k", 9), Some(Lookup::Found(b"v5".to_vec())));
        assert_eq!(m.get(b"kk", 9), None);
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
        assert_eq!(m.visible_backward(Bound::Unbounded, 9, 10, &mut out), None);
        assert_eq!(seqnos(&out), vec![(b"k".to_vec(), 5), (b"j".to_vec(), 2)]);
        out.clear();
        assert_eq!(m.visible_forward(Bound::Unbounded, 4, 10, &mut out), None);
        assert_eq!(seqnos(&out), vec![(b"j".to_vec(), 2), (b"k".to_vec(), 3)]);
        out.clear();
        assert_eq!(m.visible_backward(Bound::Unbounded, 1, 10, &mut out), None);
        assert_eq!(seqnos(&out), vec![(b"k".to_vec(), 1)]);
        // A chunk stops at `max` and says where to resume.
        out.clear();
        let resume = m.visible_forward(Bound::Unbounded, 9, 1, &mut out);
        assert_eq!(seqnos(&out), vec![(b"j".to_vec(), 2)]);
        assert_eq!(
            resume,
            Some(Bound::Included(key::encode(b"k", key::make_tag(5, 1))))
        );
    }
}
