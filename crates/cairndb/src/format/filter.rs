//! The per-table filter (docs/format.md §Tables §Filter block).
//!
//! Owns: the encoding of the filter block and the probe. A table's filter is
//! a BinaryFuse8 (xorf) over the xxh3-64 hashes of the table's distinct user
//! keys; it answers "may this table hold `user_key`?" with no false
//! negatives and a false-positive rate around 0.4 %. A table with no keys, a
//! table written with filters disabled, or a table whose filter could not be
//! built carries the "none" kind, which answers "maybe" to everything.
//!
//! Invariants: a decoded [`TableFilter::Fuse`] has geometry consistent with
//! its fingerprint array (checked in [`TableFilter::decode`]), so a probe
//! never indexes out of bounds whatever the stored bytes were.
//!
//! Sharing: a decoded filter is immutable and `Send + Sync`.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::format::coding::Reader;
use xorf::{BinaryFuse8, Descriptor, Filter};

/// Kind byte of a filter block. Persisted: values are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FilterKind {
    /// No filter: every probe answers "maybe".
    None = 0,
    /// BinaryFuse8 over xxh3-64 of the user key.
    BinaryFuse8Xxh3 = 1,
}

impl FilterKind {
    pub fn from_u8(b: u8) -> Option<FilterKind> {
        match b {
            0 => Some(FilterKind::None),
            1 => Some(FilterKind::BinaryFuse8Xxh3),
            _ => None,
        }
    }
}

/// Bytes of the BinaryFuse8 header after the kind byte: seed u64,
/// segment_length u32, segment_length_mask u32, segment_count_length u32.
const FUSE_HEADER_LEN: usize = 8 + 4 + 4 + 4;

/// The hash a user key is filtered by.
pub fn hash_key(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// Builds the encoded filter block from the key hashes of a table (in any
/// order, duplicates allowed; `hashes` is sorted and deduplicated in
/// place). An empty set, or a set the filter cannot be built for, yields
/// the "none" kind.
pub fn build(hashes: &mut Vec<u64>) -> Vec<u8> {
    hashes.sort_unstable();
    hashes.dedup();
    if hashes.is_empty() {
        return vec![FilterKind::None as u8];
    }
    match BinaryFuse8::try_from(hashes.as_slice()) {
        Ok(f) => encode_fuse(&f),
        Err(_) => vec![FilterKind::None as u8],
    }
}

/// The "none" filter block.
pub fn build_none() -> Vec<u8> {
    vec![FilterKind::None as u8]
}

fn encode_fuse(f: &BinaryFuse8) -> Vec<u8> {
    let d = &f.descriptor;
    let mut out = Vec::with_capacity(1 + FUSE_HEADER_LEN + f.fingerprints.len());
    out.push(FilterKind::BinaryFuse8Xxh3 as u8); // 1. kind
    out.extend_from_slice(&d.seed.to_le_bytes()); // 2. seed
    out.extend_from_slice(&d.segment_length.to_le_bytes()); // 3. segment length
    out.extend_from_slice(&d.segment_length_mask.to_le_bytes()); // 4. mask
    out.extend_from_slice(&d.segment_count_length.to_le_bytes()); // 5. segment count length
    out.extend_from_slice(&f.fingerprints); // 6. fingerprints
    out
}

/// A decoded filter, held in memory by an open table.
pub enum TableFilter {
    None,
    Fuse(BinaryFuse8),
}

impl std::fmt::Debug for TableFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableFilter::None => f.write_str("TableFilter::None"),
            TableFilter::Fuse(b) => write!(f, "TableFilter::Fuse({} bytes)", b.fingerprints.len()),
        }
    }
}

impl TableFilter {
    /// Decodes a filter block. Errors name what is wrong; the caller wraps
    /// them into `Error::Corruption` with the file and offset.
    pub fn decode(block: &[u8]) -> Result<TableFilter, &'static str> {
        let mut r = Reader::new(block);
        let kind = r.u8().ok_or("empty filter block")?;
        match FilterKind::from_u8(kind) {
            Some(FilterKind::None) => {
                if !r.is_empty() {
                    return Err("trailing bytes after a \"none\" filter");
                }
                Ok(TableFilter::None)
            }
            Some(FilterKind::BinaryFuse8Xxh3) => {
                let seed = r.u64_le().ok_or("filter header truncated")?;
                let segment_length = r.u32_le().ok_or("filter header truncated")?;
                let segment_length_mask = r.u32_le().ok_or("filter header truncated")?;
                let segment_count_length = r.u32_le().ok_or("filter header truncated")?;
                let fingerprints = r.bytes(r.remaining()).ok_or("filter truncated")?;
                // Geometry before arithmetic: the probe computes indexes
                // below segment_count_length + 2 * segment_length using
                // u32 additions, so these relations keep it in bounds.
                if !segment_length.is_power_of_two()
                    || segment_length_mask != segment_length - 1
                    || segment_count_length == 0
                    || segment_count_length % segment_length != 0
                {
                    return Err("filter geometry is inconsistent");
                }
                let expected = u64::from(segment_count_length) + 2 * u64::from(segment_length);
                if expected > u64::from(u32::MAX) || expected != fingerprints.len() as u64 {
                    return Err("filter fingerprint array has the wrong length");
                }
                Ok(TableFilter::Fuse(BinaryFuse8 {
                    descriptor: Descriptor {
                        seed,
                        segment_length,
                        segment_length_mask,
                        segment_count_length,
                    },
                    fingerprints: fingerprints.into(),
                }))
            }
            None => Err("unknown filter kind"),
        }
    }

    pub fn kind(&self) -> FilterKind {
        match self {
            TableFilter::None => FilterKind::None,
            TableFilter::Fuse(_) => FilterKind::BinaryFuse8Xxh3,
        }
    }

    /// False only if `user_key` is certainly absent.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        match self {
            TableFilter::None => true,
            TableFilter::Fuse(f) => f.contains(&hash_key(user_key)),
        }
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        match self {
            TableFilter::None => 0,
            TableFilter::Fuse(f) => f.fingerprints.len(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn keys(n: usize, tag: &str) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{tag}{i:08}").into_bytes())
            .collect()
    }

    #[test]
    fn filter_round_trip_no_false_negatives_low_fpr() {
        let present = keys(100_000, "key");
        let mut hashes: Vec<u64> = present.iter().map(|k| hash_key(k)).collect();
        // duplicates are tolerated
        hashes.extend_from_slice(&hashes.clone()[..1000]);
        let block = build(&mut hashes);
        assert_eq!(block[0], FilterKind::BinaryFuse8Xxh3 as u8);
        let f = TableFilter::decode(&block).unwrap();
        assert_eq!(f.kind(), FilterKind::BinaryFuse8Xxh3);
        for k in &present {
            assert!(f.may_contain(k));
        }
        let absent = keys(100_000, "other");
        let fp = absent.iter().filter(|k| f.may_contain(k)).count();
        assert!(fp * 100 < absent.len(), "false positives: {fp}");
        assert!(f.memory_bytes() < 100_000 * 2);
    }

    #[test]
    fn filter_small_sets_and_none() {
        for n in 0..40 {
            let present = keys(n, "k");
            let mut hashes: Vec<u64> = present.iter().map(|k| hash_key(k)).collect();
            let f = TableFilter::decode(&build(&mut hashes)).unwrap();
            for k in &present {
                assert!(f.may_contain(k), "n={n}");
            }
            if n == 0 {
                assert_eq!(f.kind(), FilterKind::None);
            }
        }
        let f = TableFilter::decode(&build_none()).unwrap();
        assert!(f.may_contain(b"anything"));
        assert_eq!(f.memory_bytes(), 0);
    }

    #[test]
    fn filter_decode_rejects_damage_without_panic() {
        let present = keys(50, "k");
        let mut hashes: Vec<u64> = present.iter().map(|k| hash_key(k)).collect();
        let block = build(&mut hashes);
        for cut in 0..block.len() {
            assert!(TableFilter::decode(&block[..cut]).is_err(), "cut {cut}");
        }
        let mut longer = block.clone();
        longer.push(0);
        assert!(TableFilter::decode(&longer).is_err());
        // Any flip either fails to decode or yields a filter that probes
        // without panicking (the table's crc catches flips on disk).
        for i in 0..block.len() {
            for bit in 0..8 {
                let mut b = block.clone();
                b[i] ^= 1 << bit;
                if let Ok(f) = TableFilter::decode(&b) {
                    for k in &present {
                        let _ = f.may_contain(k);
                    }
                }
            }
        }
        assert!(TableFilter::decode(&[7]).is_err());
        assert!(TableFilter::decode(&[0, 0]).is_err());
    }
}
