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
use crossbeam_skiplist::SkipMap;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

/// Estimated skiplist overhead per entry (node, tower, boxes), in bytes.
const ENTRY_OVERHEAD: usize = 64;

/// An encoded internal key ordered in internal order.
#[derive(Clone, PartialEq, Eq)]
pub struct IKey(pub Box<[u8]>);

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
    Deleted,
}

pub struct Memtable {
    map: SkipMap<IKey, Box<[u8]>>,
    bytes: AtomicUsize,
    /// Number of the journal file holding this memtable's writes.
    journal: u64,
}

impl Memtable {
    pub fn new(journal: u64) -> Self {
        Memtable {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            journal,
        }
    }

    pub fn journal(&self) -> u64 {
        self.journal
    }

    pub fn insert(&self, user_key: &[u8], seqno: u64, kind: Kind, value: &[u8]) {
        let ikey = key::encode(user_key, key::make_tag(seqno, kind as u8));
        self.bytes.fetch_add(
            ikey.len() + value.len() + ENTRY_OVERHEAD,
            AtomicOrdering::Relaxed,
        );
        self.map.insert(
            IKey(ikey.into_boxed_slice()),
            value.to_vec().into_boxed_slice(),
        );
    }

    /// Approximate memory held, in bytes.
    pub fn approx_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The newest version of `user_key` with seqno <= `snapshot`, if any.
    pub fn get(&self, user_key: &[u8], snapshot: u64) -> Option<Lookup> {
        let seek = IKey(key::seek_key(user_key, snapshot).into_boxed_slice());
        let entry = self.map.lower_bound(Bound::Included(&seek))?;
        let (ukey, tag) = key::split(&entry.key().0)?;
        if ukey != user_key {
            return None;
        }
        Some(match Kind::from_u8(key::tag_kind(tag)) {
            Some(Kind::Put) => Lookup::Found(entry.value().to_vec()),
            _ => Lookup::Deleted,
        })
    }

    /// Up to `max` entries after `from` (or from the start), in order.
    pub fn chunk_forward(&self, from: Bound<&IKey>, max: usize, out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
        let range = self.map.range((from, Bound::Unbounded));
        out.extend(
            range
                .take(max)
                .map(|e| (e.key().0.to_vec(), e.value().to_vec())),
        );
    }

    /// Up to `max` entries before `to` (or from the end), in reverse order.
    pub fn chunk_backward(&self, to: Bound<&IKey>, max: usize, out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
        let range = self.map.range((Bound::Unbounded, to));
        out.extend(
            range
                .rev()
                .take(max)
                .map(|e| (e.key().0.to_vec(), e.value().to_vec())),
        );
    }

    /// Visits every entry in order (for flushing).
    pub fn for_each(
        &self,
        mut f: impl FnMut(&[u8], &[u8]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        for e in self.map.iter() {
            f(&e.key().0, e.value())?;
        }
        Ok(())
    }

    /// Highest seqno stored, if any.
    #[cfg(test)]
    pub fn max_seqno(&self) -> Option<u64> {
        self.map
            .iter()
            .filter_map(|e| key::split(&e.key().0).map(|(_, t)| key::tag_seqno(t)))
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
        let mut out = Vec::new();
        m.chunk_backward(Bound::Unbounded, 10, &mut out);
        assert_eq!(out.len(), 4);
        assert_eq!(key::user_key(&out[0].0), b"k");
        assert_eq!(key::user_key(&out[3].0), b"j");
    }
}
