//! Little helpers shared by every codec: varints and a bounds-checked
//! reader over untrusted bytes. Decoders never index or slice unchecked.

/// Appends `v` as a LEB128 varint (1-10 bytes).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `put_varint(v)` would append.
#[cfg(test)]
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Appends a varint length then the bytes.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A cursor over untrusted bytes. Every read checks bounds and returns
/// `None` when the input is too short or malformed.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub fn pos(&self) -> usize {
        self.pos
    }
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    pub fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if i == 9 && b > 1 {
                return None; // more than 64 bits
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }
    pub fn varint_usize(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub fn len_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = self.varint_usize()?;
        self.bytes(n)
    }
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    pub fn u32_le(&mut self) -> Option<u32> {
        let b = self.bytes(4)?;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }
    pub fn u64_le(&mut self) -> Option<u64> {
        let b = self.bytes(8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }
}

/// CRC-32C of `data`, masked like LevelDB's so a CRC stored inside data that
/// is itself checksummed does not produce a trivially predictable value.
///
/// `crc_fast` folds with carry-less multiplies (AVX-512 VPCLMULQDQ where the
/// CPU has it) and is 2-3x the `crc32` instruction loop of the `crc32c`
/// crate on 4 KiB values here; a scan checks every value it reads, so this
/// is a large share of a scan's CPU. Same polynomial, same result.
pub fn crc(data: &[u8]) -> u32 {
    mask(crc_fast::crc32_iscsi(data))
}

/// CRC-32C over two slices as if concatenated, masked.
pub fn crc2(a: &[u8], b: &[u8]) -> u32 {
    let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    d.update(a);
    d.update(b);
    mask(d.finalize() as u32)
}

fn mask(c: u32) -> u32 {
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_truncation() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(Reader::new(&b).varint(), Some(v));
            for cut in 0..b.len() {
                assert_eq!(Reader::new(&b[..cut]).varint(), None);
            }
        }
        // eleven continuation bytes are rejected, not wrapped
        assert_eq!(Reader::new(&[0xff; 11]).varint(), None);
    }

    #[test]
    fn crc_is_masked_crc32c_and_crc2_is_crc_of_the_concatenation() {
        // The CRC-32C check value of "123456789" (RFC 3720, B.4), masked:
        // files written before the checksum crate changed stay readable.
        assert_eq!(crc(b"123456789"), mask(0xe306_9283));
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for cut in [0, 1, 8, 63, 64, 4096, 9_999, 10_000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(crc2(a, b), crc(&data), "cut at {cut}");
        }
        assert_ne!(crc(&data[1..]), crc(&data));
    }
}
