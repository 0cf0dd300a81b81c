//! Internal keys: a user key plus a tag (seqno and kind).
//!
//! Encoding (format.md §Keys): `user_key || tag` with the tag as 8 bytes
//! big-endian, `tag = seqno << 8 | kind`. Order: user key ascending
//! (bytewise), then tag descending, so the newest version of a key comes
//! first and a seek to `(key, snapshot)` lands on the newest version the
//! snapshot may see.

use crate::limits::SEQNO_MAX;
use std::cmp::Ordering;

/// Kind of an entry. Persisted in journal records and tables: values are
/// never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A tombstone: the key is deleted as of this seqno.
    Delete = 0,
    /// A value.
    Put = 1,
    /// A value kept in a journal segment; the entry's value is a
    /// `format::vptr::ValuePtr`. Memtables and tables only, never batches.
    Pointer = 2,
}

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Delete),
            1 => Some(Kind::Put),
            2 => Some(Kind::Pointer),
            _ => None,
        }
    }
}

/// True for kinds that carry a value (inline or by pointer).
pub fn kind_has_value(kind: u8) -> bool {
    kind == Kind::Put as u8 || kind == Kind::Pointer as u8
}

/// The kind used in seek keys: larger than any persisted kind, so a seek key
/// sorts before every entry with the same user key and seqno.
pub const KIND_SEEK: u8 = 0xff;

/// Length of the encoded tag.
pub const TAG_LEN: usize = 8;

pub fn make_tag(seqno: u64, kind: u8) -> u64 {
    debug_assert!(seqno <= SEQNO_MAX);
    (seqno << 8) | u64::from(kind)
}

pub fn tag_seqno(tag: u64) -> u64 {
    tag >> 8
}

pub fn tag_kind(tag: u64) -> u8 {
    (tag & 0xff) as u8
}

/// Encodes an internal key into `out` (cleared first).
pub fn encode_into(out: &mut Vec<u8>, user_key: &[u8], tag: u64) {
    out.clear();
    out.extend_from_slice(user_key);
    out.extend_from_slice(&tag.to_be_bytes());
}

pub fn encode(user_key: &[u8], tag: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TAG_LEN);
    encode_into(&mut v, user_key, tag);
    v
}

/// The seek key for `user_key` as seen by a snapshot at `seqno`.
pub fn seek_key(user_key: &[u8], seqno: u64) -> Vec<u8> {
    encode(user_key, make_tag(seqno, KIND_SEEK))
}

/// Splits an encoded internal key. `None` if shorter than a tag.
pub fn split(ikey: &[u8]) -> Option<(&[u8], u64)> {
    let at = ikey.len().checked_sub(TAG_LEN)?;
    let (user, tag) = ikey.split_at(at);
    Some((user, u64::from_be_bytes(tag.try_into().ok()?)))
}

/// User key part of an internal key the engine wrote itself (length was
/// validated when the block holding it was decoded).
pub fn user_key(ikey: &[u8]) -> &[u8] {
    ikey.get(..ikey.len().saturating_sub(TAG_LEN))
        .unwrap_or_default()
}

/// Compares two encoded internal keys in internal order.
pub fn compare(a: &[u8], b: &[u8]) -> Ordering {
    let (ua, ta) = split_lossy(a);
    let (ub, tb) = split_lossy(b);
    ua.cmp(ub).then(tb.cmp(&ta))
}

fn split_lossy(ikey: &[u8]) -> (&[u8], u64) {
    split(ikey).unwrap_or((ikey, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_user_key_then_newest_first() {
        let a1 = encode(b"a", make_tag(1, 1));
        let a2 = encode(b"a", make_tag(2, 1));
        let ab = encode(b"ab", make_tag(9, 1));
        let b0 = encode(b"b", make_tag(0, 0));
        assert_eq!(compare(&a2, &a1), Ordering::Less);
        assert_eq!(compare(&a1, &ab), Ordering::Less);
        assert_eq!(compare(&ab, &b0), Ordering::Less);
        let seek = seek_key(b"a", 1);
        assert_eq!(compare(&seek, &a1), Ordering::Less);
        assert_eq!(compare(&a2, &seek), Ordering::Less);
    }
}
