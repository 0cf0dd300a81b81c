//! Reader records (format.md §Reader records): what a follower process
//! still reads, so the writer keeps those files.
//!
//! ```text
//! offset   size  field
//!  0       8     magic         "CAIRNRDR"
//!  8       4     version       u32 LE, 1 (persisted)
//! 12       4     count         u32 LE, numbers that follow
//! 16       8     journal_floor u64 LE: every journal numbered >= this is held
//! 24       8     newer_from    u64 LE: every file numbered >= this is held
//! 32       8*n   numbers       u64 LE each: tables and value segments held
//! 32+8n    4     crc           masked CRC-32C of bytes 0..32+8n
//! ```
//!
//! A record that does not decode (torn by a concurrent rewrite, damaged,
//! of a newer version) holds every file: the writer then deletes nothing
//! and retries later.

use super::coding::crc;

const MAGIC: &[u8; 8] = b"CAIRNRDR";
/// Persisted.
const VERSION: u32 = 1;
const FIXED_LEN: usize = 32;
/// Most numbers a record may list: bounds what a reader of a damaged
/// count allocates (a version holds far fewer files).
pub const NUMBERS_MAX: usize = 1 << 22;

/// What one follower holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReaderRecord {
    pub journal_floor: u64,
    pub newer_from: u64,
    pub numbers: Vec<u64>,
}

impl ReaderRecord {
    /// Whether file `number` (a journal if `journal`) is held.
    pub fn holds(&self, number: u64, journal: bool) -> bool {
        number >= self.newer_from
            || (journal && number >= self.journal_floor)
            || self.numbers.contains(&number)
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.numbers.len() <= NUMBERS_MAX,
            "a version holds fewer files"
        );
        let mut out = Vec::with_capacity(FIXED_LEN + 8 * self.numbers.len() + 4);
        out.extend_from_slice(MAGIC); // 0
        out.extend_from_slice(&VERSION.to_le_bytes()); // 8
        out.extend_from_slice(&(self.numbers.len() as u32).to_le_bytes()); // 12
        out.extend_from_slice(&self.journal_floor.to_le_bytes()); // 16
        out.extend_from_slice(&self.newer_from.to_le_bytes()); // 24
        for n in &self.numbers {
            out.extend_from_slice(&n.to_le_bytes()); // 32 + 8i
        }
        let c = crc(&out);
        out.extend_from_slice(&c.to_le_bytes()); // 32 + 8n
        out
    }

    /// `None` for anything but a whole, intact record of version 1.
    pub fn decode(data: &[u8]) -> Option<ReaderRecord> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
        };
        let u32_at = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
        };
        if data.get(0..8)? != MAGIC || u32_at(8)? != VERSION {
            return None;
        }
        let count = u32_at(12)? as usize;
        if count > NUMBERS_MAX {
            return None;
        }
        let end = FIXED_LEN + 8 * count;
        if data.len() != end + 4 || crc(data.get(..end)?) != u32_at(end)? {
            return None;
        }
        let numbers = (0..count)
            .map(|i| u64_at(FIXED_LEN + 8 * i))
            .collect::<Option<Vec<u64>>>()?;
        Some(ReaderRecord {
            journal_floor: u64_at(16)?,
            newer_from: u64_at(24)?,
            numbers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_cut_is_refused() {
        let r = ReaderRecord {
            journal_floor: 7,
            newer_from: 42,
            numbers: vec![3, 5, 9],
        };
        let bytes = r.encode();
        assert_eq!(ReaderRecord::decode(&bytes), Some(r.clone()));
        for cut in 0..bytes.len() {
            assert_eq!(ReaderRecord::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert_eq!(ReaderRecord::decode(&b), None, "flip at {i}");
        }
        assert!(r.holds(5, false) && r.holds(8, true) && r.holds(42, false));
        assert!(!r.holds(8, false) && !r.holds(6, true));
    }
}
