//! Value pointers: where a separated value lives (format.md §Value
//! pointers).
//!
//! A value of at least `Options::value_separation_min` bytes is written
//! once, inside its batch in the journal, and the memtable and tables hold
//! this pointer to it instead of the value (entry kind `Kind::Pointer`):
//!
//! ```text
//! varint segment   number of the journal file (segment) holding the value
//! varint offset    byte offset of the value's first byte in that file
//! varint len       value length in bytes
//! 4      crc       masked CRC-32C of the value, u32 LE
//! ```
//!
//! The checksum lets a point read check the value alone, without reading
//! the whole journal record around it.

use super::coding::{Reader, crc, put_varint};

/// Longest encoded pointer: three 10-byte varints and the crc.
pub const VPTR_LEN_MAX: usize = 34;

/// Page size values are aligned to in values files and value streams.
pub const PAGE: u64 = crate::io::DIRECT_ALIGN as u64;

/// Zero bytes to write before a value of `len` bytes that would start at
/// `offset` of a values file or value stream, so that it spans no more
/// pages than its length needs: a point read of it is then one page read
/// fewer (a 4 KiB value in one page, not two). Only when that costs at
/// most an eighth of its length: 4 KiB values line up with no padding at
/// all after the first; values of a page and a bit are left where they
/// fall (format.md §Value pointers).
pub fn padding(offset: u64, len: u64) -> u64 {
    let spanned = (offset % PAGE + len).div_ceil(PAGE);
    let needed = len.div_ceil(PAGE);
    let pad = offset.next_multiple_of(PAGE) - offset;
    if spanned > needed && pad <= len / 8 {
        pad
    } else {
        0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePtr {
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
    pub crc: u32,
}

impl ValuePtr {
    /// A pointer to `value`, stored at `offset` of segment `segment`.
    pub fn to(segment: u64, offset: u64, value: &[u8]) -> ValuePtr {
        ValuePtr {
            segment,
            offset,
            len: u32::try_from(value.len()).unwrap_or(u32::MAX),
            crc: crc(value),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.segment);
        put_varint(out, self.offset);
        put_varint(out, u64::from(self.len));
        out.extend_from_slice(&self.crc.to_le_bytes());
    }

    /// Decodes a pointer that must fill `data` exactly.
    pub fn decode(data: &[u8]) -> Option<ValuePtr> {
        let mut r = Reader::new(data);
        let segment = r.varint()?;
        let offset = r.varint()?;
        let len = u32::try_from(r.varint()?).ok()?;
        let crc = r.u32_le()?;
        r.is_empty().then_some(ValuePtr {
            segment,
            offset,
            len,
            crc,
        })
    }

    /// True if `value` is what this pointer names (length and checksum).
    pub fn matches(&self, value: &[u8]) -> bool {
        value.len() == self.len as usize && crc(value) == self.crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let p = ValuePtr::to(7, 1 << 40, &[5u8; 4096]);
        let mut e = Vec::new();
        p.encode(&mut e);
        assert!(e.len() <= VPTR_LEN_MAX);
        assert_eq!(ValuePtr::decode(&e), Some(p));
        assert!(p.matches(&[5u8; 4096]));
        assert!(!p.matches(&[5u8; 4095]));
        let mut other = [5u8; 4096];
        other[100] = 6;
        assert!(!p.matches(&other));
        assert_eq!(ValuePtr::decode(&e[..e.len() - 1]), None);
        let mut long = e.clone();
        long.push(0);
        assert_eq!(ValuePtr::decode(&long), None);
    }

    /// Values are padded onto page boundaries only where that saves a
    /// page per read and costs at most an eighth of the value.
    #[test]
    fn values_are_padded_to_pages_only_when_it_pays() {
        // A 4 KiB value: aligned as it is, or padded onto the next page
        // when the padding is small (a read then takes one page, not two).
        assert_eq!(padding(0, PAGE), 0);
        assert_eq!(padding(8 * PAGE, PAGE), 0);
        assert_eq!(padding(PAGE - 100, PAGE), 100);
        // Padding of more than an eighth of the value is not paid.
        assert_eq!(padding(100, PAGE), 0);
        // A value that fits in the rest of its page needs none.
        assert_eq!(padding(100, 3000), 0);
        // 3000 bytes across a boundary: the 1096 bytes to align it are
        // more than an eighth of it.
        assert_eq!(padding(3000, 3000), 0);
        // 7.9 KiB straddling three pages, two would do: 200 bytes pad it.
        assert_eq!(padding(PAGE - 200, 2 * PAGE - 100), 200);
        // A small value crossing a page only for its last few bytes moves
        // onto the next page; one crossing further stays.
        assert_eq!(padding(1, 100), 0);
        assert_eq!(padding(PAGE - 1, 100), 1);
        assert_eq!(padding(PAGE - 50, 100), 0);
        // Every padded value spans exactly the pages its length needs.
        for off in (0..3 * PAGE).step_by(97) {
            for len in [1000, PAGE, PAGE + 1, 3 * PAGE - 7] {
                let pad = padding(off, len);
                let at = off + pad;
                if pad > 0 {
                    assert_eq!((at % PAGE + len).div_ceil(PAGE), len.div_ceil(PAGE));
                    assert!(pad <= len / 8);
                }
            }
        }
    }
}
