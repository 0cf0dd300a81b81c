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
//! varint len       length of the value's stored bytes
//! 4      crc       masked CRC-32C of the stored bytes, u32 LE
//! [1     codec]    only for a compressed value: how the stored bytes
//!                  are compressed (`compress::BLOCK_TYPE_*`, not raw)
//! ```
//!
//! The checksum lets a point read check the value alone, without reading
//! the whole journal record around it. Values in value streams and
//! values files may be stored compressed, each on its own, in the form a
//! compressed table block has (`compress`: the raw length, then the
//! codec's output); journals hold values raw.

use super::coding::{Reader, crc, put_varint};
use super::compress::{self, BLOCK_TYPE_LZ4, BLOCK_TYPE_RAW, BLOCK_TYPE_ZSTD};
use crate::options::Compression;

/// Longest encoded pointer: three 10-byte varints, the crc and a codec.
pub const VPTR_LEN_MAX: usize = 35;

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
    /// Length of the stored bytes (the value itself unless compressed).
    pub len: u32,
    /// Checksum of the stored bytes.
    pub crc: u32,
    /// How the stored bytes are compressed: `BLOCK_TYPE_RAW` (they are
    /// the value), `BLOCK_TYPE_LZ4` or `BLOCK_TYPE_ZSTD`.
    pub codec: u8,
}

impl ValuePtr {
    /// A pointer to `value`, stored raw at `offset` of segment `segment`.
    pub fn to(segment: u64, offset: u64, value: &[u8]) -> ValuePtr {
        ValuePtr {
            segment,
            offset,
            len: u32::try_from(value.len()).unwrap_or(u32::MAX),
            crc: crc(value),
            codec: BLOCK_TYPE_RAW,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.segment);
        put_varint(out, self.offset);
        put_varint(out, u64::from(self.len));
        out.extend_from_slice(&self.crc.to_le_bytes());
        if self.codec != BLOCK_TYPE_RAW {
            out.push(self.codec);
        }
    }

    /// Decodes a pointer that must fill `data` exactly.
    pub fn decode(data: &[u8]) -> Option<ValuePtr> {
        let mut r = Reader::new(data);
        let segment = r.varint()?;
        let offset = r.varint()?;
        let len = u32::try_from(r.varint()?).ok()?;
        let crc = r.u32_le()?;
        // A raw value's pointer has no codec byte; one naming raw is not
        // written, and an unknown codec is not read.
        let codec = match r.u8() {
            None => BLOCK_TYPE_RAW,
            Some(c @ (BLOCK_TYPE_LZ4 | BLOCK_TYPE_ZSTD)) => c,
            Some(_) => return None,
        };
        r.is_empty().then_some(ValuePtr {
            segment,
            offset,
            len,
            crc,
            codec,
        })
    }

    /// True if `stored` are the bytes this pointer names (length and
    /// checksum).
    pub fn matches(&self, stored: &[u8]) -> bool {
        stored.len() == self.len as usize && crc(stored) == self.crc
    }

    /// True if the stored bytes are compressed (`unpack` turns them into
    /// the value).
    pub fn compressed(&self) -> bool {
        self.codec != BLOCK_TYPE_RAW
    }

    /// The value out of its stored bytes (which `matches` accepted):
    /// `stored` itself if raw, else decompressed; `Err(detail)` if they
    /// do not decompress (at most `compress::COMPRESSED_RAW_MAX` bytes,
    /// bounded before allocating).
    pub fn unpack(&self, stored: Vec<u8>) -> Result<Vec<u8>, String> {
        if self.compressed() {
            compress::decompress(self.codec, &stored)
        } else {
            Ok(stored)
        }
    }

    /// This pointer's value stored as `how` says, if it is raw and
    /// compresses by an eighth (`compress::compress`): the pointer's
    /// `len`, `crc` and `codec` updated for the compressed bytes, which
    /// are returned. `None` leaves it stored as it is.
    pub fn pack(&mut self, how: Compression, value: &[u8]) -> Option<Vec<u8>> {
        if self.compressed() {
            return None;
        }
        let mut out = Vec::new();
        let codec = compress::compress(how, value, &mut out);
        if codec == BLOCK_TYPE_RAW {
            return None;
        }
        self.len = u32::try_from(out.len()).ok()?;
        self.crc = crc(&out);
        self.codec = codec;
        Some(out)
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

    /// A compressed value's pointer carries its codec; the stored bytes
    /// unpack to the value, damaged ones to an error, and values that do
    /// not shrink stay raw.
    #[test]
    fn compressed_pointers_round_trip_and_unpack() {
        let value: Vec<u8> = (0..4096u32).map(|i| (i % 7) as u8).collect();
        for how in [Compression::Lz4, Compression::Zstd(3)] {
            let mut p = ValuePtr::to(9, 1 << 33, &value);
            let stored = p.pack(how, &value).expect("compressible");
            assert!(p.compressed() && (p.len as usize) < value.len() / 2);
            assert!(p.matches(&stored) && !p.matches(&value));
            let mut e = Vec::new();
            p.encode(&mut e);
            assert!(e.len() <= VPTR_LEN_MAX);
            assert_eq!(ValuePtr::decode(&e), Some(p));
            assert_eq!(p.unpack(stored.clone()).as_deref(), Ok(&value[..]));
            // Packed once is packed for good.
            assert_eq!(p.clone().pack(how, &stored), None);
            // A codec byte naming raw, or no codec, is malformed.
            for bad in [BLOCK_TYPE_RAW, 3, 0xff] {
                let last = e.len() - 1;
                e[last] = bad;
                assert_eq!(ValuePtr::decode(&e), None, "codec {bad}");
            }
            let half = stored.get(..stored.len() / 2).expect("half").to_vec();
            assert!(p.unpack(half).is_err());
        }
        // Incompressible bytes stay raw, and so does anything with
        // compression off.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut p = ValuePtr::to(9, 0, &noise);
        assert_eq!(p.pack(Compression::Lz4, &noise), None);
        assert_eq!(p.pack(Compression::None, &value), None);
        assert!(!p.compressed() && p.matches(&noise));
        assert_eq!(p.unpack(noise.clone()), Ok(noise));
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
