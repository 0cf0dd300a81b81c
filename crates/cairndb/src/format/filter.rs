//! The per-table filter (docs/format.md §Tables §Filter block).
//!
//! Owns: the encoding of the filter block and the probe. A table's filter is
//! a binary fuse filter (xorf) over the xxh3-64 hashes of the table's
//! distinct user keys; it answers "may this table hold `user_key`?" with no
//! false negatives. Its fingerprints have 8 bits (BinaryFuse8: about 9 bits
//! per key, false positives around 0.4 %) or 16 (BinaryFuse16: about 18
//! bits per key, around 0.0015 %), as the keyspace's
//! `filter_bits` asks. A table with no keys, a table written with filters
//! disabled, or a table whose filter could not be built carries the "none"
//! kind, which answers "maybe" to everything.
//!
//! Invariants: a decoded [`TableFilter::Fuse`] or [`TableFilter::Fuse16`]
//! has geometry consistent with its fingerprint array (checked in
//! [`TableFilter::decode`]), so a probe never indexes out of bounds
//! whatever the stored bytes were.
//!
//! Sharing: a decoded filter is immutable and `Send + Sync`.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::format::coding::Reader;
use xorf::{BinaryFuse8, BinaryFuse16, Descriptor, Filter};

/// Kind byte of a filter block. Persisted: values are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FilterKind {
    /// No filter: every probe answers "maybe".
    None = 0,
    /// BinaryFuse8 over xxh3-64 of the user key.
    BinaryFuse8Xxh3 = 1,
    /// BinaryFuse16 over xxh3-64 of the user key (manifest format 9 on).
    BinaryFuse16Xxh3 = 2,
}

impl FilterKind {
    pub fn from_u8(b: u8) -> Option<FilterKind> {
        match b {
            0 => Some(FilterKind::None),
            1 => Some(FilterKind::BinaryFuse8Xxh3),
            2 => Some(FilterKind::BinaryFuse16Xxh3),
            _ => None,
        }
    }
}

/// Fingerprint sizes a filter may have (`Options::filter_bits`,
/// `KeyspaceOptions::filter_bits`).
pub const FILTER_BITS: [u8; 2] = [8, 16];

/// Bytes of the BinaryFuse8 header after the kind byte: seed u64,
/// segment_length u32, segment_length_mask u32, segment_count_length u32.
const FUSE_HEADER_LEN: usize = 8 + 4 + 4 + 4;

/// The hash a user key is filtered by.
pub fn hash_key(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// Builds the encoded filter block from the key hashes of a table (in any
/// order, duplicates allowed; `hashes` is sorted and deduplicated in
/// place), with fingerprints of `bits` bits (one of [`FILTER_BITS`]). An
/// empty set, or a set the filter cannot be built for, yields the "none"
/// kind.
pub fn build(hashes: &mut Vec<u64>, bits: u8) -> Vec<u8> {
    assert!(
        FILTER_BITS.contains(&bits),
        "filter bits {bits} were validated"
    );
    hashes.sort_unstable();
    hashes.dedup();
    if hashes.is_empty() {
        return vec![FilterKind::None as u8];
    }
    let built = if bits == 16 {
        BinaryFuse16::try_from(hashes.as_slice()).map(|f| {
            let bytes: Vec<u8> = f
                .fingerprints
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            encode_fuse(FilterKind::BinaryFuse16Xxh3, &f.descriptor, &bytes)
        })
    } else {
        BinaryFuse8::try_from(hashes.as_slice())
            .map(|f| encode_fuse(FilterKind::BinaryFuse8Xxh3, &f.descriptor, &f.fingerprints))
    };
    built.unwrap_or_else(|_| vec![FilterKind::None as u8])
}

/// The "none" filter block.
pub fn build_none() -> Vec<u8> {
    vec![FilterKind::None as u8]
}

/// A fuse filter block: `fingerprints` are the fingerprint array's bytes
/// (16-bit fingerprints little-endian).
fn encode_fuse(kind: FilterKind, d: &Descriptor, fingerprints: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + FUSE_HEADER_LEN + fingerprints.len());
    out.push(kind as u8); // 1. kind
    out.extend_from_slice(&d.seed.to_le_bytes()); // 2. seed
    out.extend_from_slice(&d.segment_length.to_le_bytes()); // 3. segment length
    out.extend_from_slice(&d.segment_length_mask.to_le_bytes()); // 4. mask
    out.extend_from_slice(&d.segment_count_length.to_le_bytes()); // 5. segment count length
    out.extend_from_slice(fingerprints); // 6. fingerprints
    out
}

/// A decoded filter, held in memory by an open table.
pub enum TableFilter {
    None,
    Fuse(BinaryFuse8),
    Fuse16(BinaryFuse16),
}

impl std::fmt::Debug for TableFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableFilter::None => f.write_str("TableFilter::None"),
            TableFilter::Fuse(b) => write!(f, "TableFilter::Fuse({} bytes)", b.fingerprints.len()),
            TableFilter::Fuse16(b) => {
                write!(
                    f,
                    "TableFilter::Fuse16({} fingerprints)",
                    b.fingerprints.len()
                )
            }
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
            Some(kind @ (FilterKind::BinaryFuse8Xxh3 | FilterKind::BinaryFuse16Xxh3)) => {
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
                let width = if kind == FilterKind::BinaryFuse16Xxh3 {
                    2
                } else {
                    1
                };
                if expected > u64::from(u32::MAX) || expected * width != fingerprints.len() as u64 {
                    return Err("filter fingerprint array has the wrong length");
                }
                let descriptor = Descriptor {
                    seed,
                    segment_length,
                    segment_length_mask,
                    segment_count_length,
                };
                Ok(if kind == FilterKind::BinaryFuse16Xxh3 {
                    TableFilter::Fuse16(BinaryFuse16 {
                        descriptor,
                        fingerprints: fingerprints
                            .chunks_exact(2)
                            // `chunks_exact(2)` gives 2-byte slices only.
                            .map(|c| c.try_into().map_or(0, u16::from_le_bytes))
                            .collect(),
                    })
                } else {
                    TableFilter::Fuse(BinaryFuse8 {
                        descriptor,
                        fingerprints: fingerprints.into(),
                    })
                })
            }
            None => Err("unknown filter kind"),
        }
    }

    pub fn kind(&self) -> FilterKind {
        match self {
            TableFilter::None => FilterKind::None,
            TableFilter::Fuse(_) => FilterKind::BinaryFuse8Xxh3,
            TableFilter::Fuse16(_) => FilterKind::BinaryFuse16Xxh3,
        }
    }

    /// False only if `user_key` is certainly absent.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        match self {
            TableFilter::None => true,
            TableFilter::Fuse(f) => f.contains(&hash_key(user_key)),
            TableFilter::Fuse16(f) => f.contains(&hash_key(user_key)),
        }
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        match self {
            TableFilter::None => 0,
            TableFilter::Fuse(f) => f.fingerprints.len(),
            TableFilter::Fuse16(f) => f.fingerprints.len() * 2,
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

    /// False positives of `bits`-bit filters over 100,000 keys, probed
    /// with 100,000 absent keys; every present key must pass.
    fn false_positives(bits: u8, kind: FilterKind) -> (usize, usize) {
        let present = keys(100_000, "key");
        let mut hashes: Vec<u64> = present.iter().map(|k| hash_key(k)).collect();
        // duplicates are tolerated
        hashes.extend_from_slice(&hashes.clone()[..1000]);
        let block = build(&mut hashes, bits);
        assert_eq!(block[0], kind as u8);
        let f = TableFilter::decode(&block).unwrap();
        assert_eq!(f.kind(), kind);
        for k in &present {
            assert!(f.may_contain(k));
        }
        let absent = keys(100_000, "other");
        let fp = absent.iter().filter(|k| f.may_contain(k)).count();
        (fp, f.memory_bytes())
    }

    #[test]
    fn filter_round_trip_no_false_negatives_low_fpr() {
        let (fp8, bytes8) = false_positives(8, FilterKind::BinaryFuse8Xxh3);
        assert!(fp8 * 100 < 100_000, "8 bits: false positives: {fp8}");
        assert!(bytes8 < 100_000 * 2);
        // 16-bit fingerprints: about 1 in 65,536 where 8 give 1 in 256,
        // for twice the bytes.
        let (fp16, bytes16) = false_positives(16, FilterKind::BinaryFuse16Xxh3);
        assert!(
            fp16 * 20 < fp8.max(20),
            "16 bits: {fp16} false positives, 8 bits: {fp8}"
        );
        assert!(fp16 < 20, "16 bits: false positives: {fp16}");
        assert_eq!(bytes16, bytes8 * 2);
    }

    #[test]
    fn filter_small_sets_and_none() {
        for bits in FILTER_BITS {
            for n in 0..40 {
                let present = keys(n, "k");
                let mut hashes: Vec<u64> = present.iter().map(|k| hash_key(k)).collect();
                let f = TableFilter::decode(&build(&mut hashes, bits)).unwrap();
                for k in &present {
                    assert!(f.may_contain(k), "bits={bits} n={n}");
                }
                if n == 0 {
                    assert_eq!(f.kind(), FilterKind::None);
                }
            }
        }
        let f = TableFilter::decode(&build_none()).unwrap();
        assert!(f.may_contain(b"anything"));
        assert_eq!(f.memory_bytes(), 0);
    }

    #[test]
    fn filter_decode_rejects_damage_without_panic() {
        for bits in FILTER_BITS {
            damaged_filters_fail_or_probe(bits);
        }
        assert!(TableFilter::decode(&[7]).is_err());
        assert!(TableFilter::decode(&[0, 0]).is_err());
    }

    fn damaged_filters_fail_or_probe(bits: u8) {
        let present = keys(50, "k");
        let mut hashes: Vec<u64> = present.iter().map(|k| hash_key(k)).collect();
        let block = build(&mut hashes, bits);
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
    }
}
