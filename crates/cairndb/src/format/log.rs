//! Record framing shared by the journal and the manifest (format.md §Log
//! records).
//!
//! A log file is a sequence of records, each a 16-byte header and a payload:
//!
//! ```text
//! offset size field
//!  0     4    header_crc   masked CRC-32C of bytes 4..16 of the header
//!  4     4    payload_len  u32 LE
//!  8     4    payload_crc  masked CRC-32C of the payload
//! 12     1    kind         1 = journal batch, 2 = manifest edit (persisted)
//! 13     3    reserved     zero
//! 16     n    payload
//! ```
//!
//! The header carries its own checksum so a reader that meets a damaged
//! record can look for later intact records cheaply (12 bytes per offset),
//! which is how a torn tail is told apart from damage in the middle.

use super::coding::{Reader, crc};

/// Size of a record header.
pub const HEADER_LEN: usize = 16;

/// Persisted record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    /// A write batch (journal files).
    Batch = 1,
    /// A version edit (manifest files).
    Edit = 2,
}

/// Appends one framed record to `out`.
pub fn encode_record(out: &mut Vec<u8>, kind: RecordKind, payload: &[u8]) {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    debug_assert_eq!(len as usize, payload.len(), "record payload over 4 GiB");
    let mut header = [0u8; HEADER_LEN];
    header[4..8].copy_from_slice(&len.to_le_bytes());
    header[8..12].copy_from_slice(&crc(payload).to_le_bytes());
    header[12] = kind as u8;
    let hcrc = crc(&header[4..]);
    header[0..4].copy_from_slice(&hcrc.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

/// How a log file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belonged to an intact record.
    Clean,
    /// Bytes from `offset` on form no intact record and no intact record
    /// follows them: an interrupted last append.
    Torn { offset: u64 },
    /// The record at `offset` is damaged but an intact record follows it:
    /// data in the middle of the log is lost.
    Damaged { offset: u64 },
}

/// The intact records of a log image, in order, and how it ended.
pub struct Scan<'a> {
    pub records: Vec<(u64, RecordKind, &'a [u8])>,
    pub tail: Tail,
}

/// Parses the record at `pos`: `Some((kind, payload, next_pos))` if its
/// header and payload checksums hold.
fn parse_at(data: &[u8], pos: usize) -> Option<(RecordKind, &[u8], usize)> {
    let header = data.get(pos..pos.checked_add(HEADER_LEN)?)?;
    let mut r = Reader::new(header);
    let hcrc = r.u32_le()?;
    if hcrc != crc(header.get(4..)?) {
        return None;
    }
    let len = r.u32_le()? as usize;
    let pcrc = r.u32_le()?;
    let kind = match r.u8()? {
        1 => RecordKind::Batch,
        2 => RecordKind::Edit,
        _ => return None,
    };
    let start = pos + HEADER_LEN;
    let payload = data.get(start..start.checked_add(len)?)?;
    if crc(payload) != pcrc {
        return None;
    }
    Some((kind, payload, start + len))
}

/// Splits a whole log image into records. Never fails: damage is reported
/// in `Scan::tail` and the caller applies its recovery policy.
pub fn scan(data: &[u8]) -> Scan<'_> {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        match parse_at(data, pos) {
            Some((kind, payload, next)) => {
                records.push((pos as u64, kind, payload));
                pos = next;
            }
            None => {
                let later_intact = (pos + 1..data.len()).any(|p| parse_at(data, p).is_some());
                let offset = pos as u64;
                let tail = if later_intact {
                    Tail::Damaged { offset }
                } else {
                    Tail::Torn { offset }
                };
                return Scan { records, tail };
            }
        }
    }
    Scan {
        records,
        tail: Tail::Clean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in payloads {
            encode_record(&mut out, RecordKind::Batch, p);
        }
        out
    }

    #[test]
    fn round_trip() {
        let data = log_of(&[b"one", b"", b"three"]);
        let s = scan(&data);
        assert_eq!(s.tail, Tail::Clean);
        let got: Vec<&[u8]> = s.records.iter().map(|r| r.2).collect();
        assert_eq!(got, vec![&b"one"[..], b"", b"three"]);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_keeping_a_prefix() {
        let data = log_of(&[b"alpha", b"beta", b"gamma"]);
        let full = scan(&data).records.len();
        for cut in 0..data.len() {
            let s = scan(&data[..cut]);
            assert!(s.records.len() < full);
            match s.tail {
                Tail::Clean => assert!(cut == 0 || cut == 21 || cut == 41, "cut {cut}"),
                Tail::Torn { .. } => {}
                Tail::Damaged { .. } => panic!("truncation at {cut} reported as damage"),
            }
        }
    }

    #[test]
    fn damage_before_an_intact_record_is_not_a_torn_tail() {
        let data = log_of(&[b"alpha", b"beta", b"gamma"]);
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0x40;
            let s = scan(&d);
            let first_bad = if i < 21 {
                0
            } else if i < 41 {
                21
            } else {
                41
            };
            if first_bad < 41 {
                assert_eq!(s.tail, Tail::Damaged { offset: first_bad }, "flip at {i}");
            } else {
                assert_eq!(s.tail, Tail::Torn { offset: 41 }, "flip at {i}");
            }
        }
    }
}
