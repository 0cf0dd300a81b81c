//! The staging ring file `STAGE` (format.md §Stage ring).
//!
//! With `Options::journal_direct` the journal is written with direct IO in
//! whole chunks; the bytes of the newest journal not yet in its file live in
//! a memory-mapped ring of `ring` bytes after a 4096-byte header: journal
//! offset `o` is at file offset `HEADER_LEN + o % ring`. The ring is what
//! lets an unsynced write survive kill -9 before its chunk is written.
//!
//! Header (little-endian): magic `CAIRNSTG` (8), version (u32), zero (u32),
//! ring bytes (u64), journal number (u64), CRC-32C of the 32 bytes before
//! it, masked (u32), zero (u32), then at 40 `flushed` (u64): the journal
//! offset below which every byte is in the journal file, stored after each
//! chunk write with one aligned 8-byte store, and not covered by the CRC —
//! a wrong value can only shorten what recovery takes from the ring,
//! because every byte taken is inside a checksummed record. The rest of the
//! header page is zero. Ring bytes need no checksum of their own: they are
//! journal records, each with its own.

use super::coding::{Reader, crc};

pub const MAGIC: [u8; 8] = *b"CAIRNSTG";
pub const VERSION: u32 = 1;
/// Bytes before the ring: one page, so ring chunks stay page aligned.
pub const HEADER_LEN: usize = 4096;
/// Bytes of the header that carry data (the rest is zero).
pub const HEADER_USED: usize = 48;
/// Offset of the `flushed` field.
pub const FLUSHED_AT: usize = 40;

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the ring.
    pub ring: u64,
    /// The journal whose bytes the ring holds.
    pub journal: u64,
    /// Journal offset below which the journal file holds every byte.
    pub flushed: u64,
}

/// The header naming journal `journal` with a ring of `ring` bytes.
pub fn encode_header(ring: u64, journal: u64) -> [u8; HEADER_USED] {
    let mut h = [0u8; HEADER_USED];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&ring.to_le_bytes());
    h[24..32].copy_from_slice(&journal.to_le_bytes());
    let sum = crc(&h[..32]);
    h[32..36].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The header at the start of `head`, of a stage file `file_len` bytes
/// long, if its checked fields are intact and its ring fits in the file;
/// `None` for anything else (a torn or foreign header means the ring
/// holds nothing recovery may use).
pub fn decode_header(head: &[u8], file_len: u64) -> Option<Header> {
    let h = head.get(..HEADER_USED)?;
    let mut r = Reader::new(h);
    let magic = r.bytes(8)?;
    let (version, zero) = (r.u32_le()?, r.u32_le()?);
    let (ring, journal) = (r.u64_le()?, r.u64_le()?);
    let sum = r.u32_le()?;
    let _zero = r.u32_le()?;
    let flushed = r.u64_le()?;
    let summed = h.get(..32).is_some_and(|covered| crc(covered) == sum);
    if magic != MAGIC || version != VERSION || zero != 0 || !summed {
        return None;
    }
    let fits = file_len
        .checked_sub(HEADER_LEN as u64)
        .is_some_and(|room| ring > 0 && ring <= room);
    fits.then_some(Header {
        ring,
        journal,
        flushed,
    })
}

/// The ring's bytes for journal offsets `from .. from + ring`, in journal
/// order, from a whole stage file whose header was decoded as `ring`.
pub fn unwrap_from(file: &[u8], ring: u64, from: u64) -> Vec<u8> {
    let ring_len = usize::try_from(ring).unwrap_or(usize::MAX);
    let data = HEADER_LEN
        .checked_add(ring_len)
        .and_then(|end| file.get(HEADER_LEN..end));
    // `decode_header` checked that the ring (never empty) fits.
    let Some((before, after)) =
        data.and_then(|d| d.split_at_checked(usize::try_from(from % ring.max(1)).ok()?))
    else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(ring_len);
    out.extend_from_slice(after);
    out.extend_from_slice(before);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::expect_used)]
mod tests {
    use super::*;

    fn file_with(ring: u64, journal: u64) -> Vec<u8> {
        let mut f = vec![0u8; HEADER_LEN + ring as usize];
        f[..HEADER_USED].copy_from_slice(&encode_header(ring, journal));
        f
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let f = file_with(8192, 42);
        let h = Header {
            ring: 8192,
            journal: 42,
            flushed: 0,
        };
        assert_eq!(decode_header(&f, f.len() as u64), Some(h));
        for i in 0..36 {
            let mut bad = f.clone();
            bad[i] ^= 0x10;
            assert_eq!(
                decode_header(&bad, f.len() as u64),
                None,
                "flip at byte {i}"
            );
        }
        // `flushed` is outside the checksum.
        let mut moved = f.clone();
        moved[FLUSHED_AT..FLUSHED_AT + 8].copy_from_slice(&(3u64 << 20).to_le_bytes());
        let flushed = 3 << 20;
        assert_eq!(
            decode_header(&moved, f.len() as u64),
            Some(Header { flushed, ..h })
        );
        // A ring longer than the file holds is refused.
        assert_eq!(decode_header(&f, (HEADER_LEN + 4096) as u64), None);
        assert_eq!(decode_header(&f[..10], f.len() as u64), None);
    }

    #[test]
    fn unwrap_puts_journal_offsets_in_order() {
        let ring = 8u64;
        let mut f = file_with(ring, 1);
        for (i, b) in f[HEADER_LEN..].iter_mut().enumerate() {
            *b = i as u8;
        }
        // Journal offset 13 is ring byte 5.
        assert_eq!(unwrap_from(&f, ring, 13), vec![5, 6, 7, 0, 1, 2, 3, 4]);
        assert_eq!(unwrap_from(&f, ring, 16), (0..8).collect::<Vec<u8>>());
    }
}
