//! Record framing shared by the journal and the manifest (format.md §Log
//! records).
//!
//! A log file is a sequence of records, each a 16-byte header and a payload:
//!
//! ```text
//! offset size field
//!  0     4    header_crc   masked CRC-32C of bytes 4..16 of the header;
//!                          for kind 4, of the journal's number (u64 LE)
//!                          followed by bytes 4..16
//!  4     4    payload_len  u32 LE
//!  8     4    payload_crc  masked CRC-32C of the payload
//! 12     1    kind         1 = journal batch (old), 2 = manifest edit,
//!                          3 = journal batch with durability mark (old),
//!                          4 = the same in a numbered journal (persisted)
//! 13     3    reserved     zero
//! 16     n    payload
//! ```
//!
//! The header carries its own checksum so a reader that meets a damaged
//! record can look for later intact records cheaply (12 bytes per offset),
//! which is how a torn tail is told apart from damage in the middle.
//!
//! Numbered framing (kind 4) seeds the header checksum with the number of
//! the journal the record belongs to, so a record a file held in an
//! earlier life, under another number, is not intact in it: journal files
//! can be recycled without their old records ever reading as new ones.

use super::coding::{Reader, crc, crc2};

/// How the records of a log file are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Unseeded header checksums, kinds 1–3: manifests, and journals of
    /// journal formats 1 and 2.
    Plain,
    /// Header checksums seeded with the journal's number, kind 4 only:
    /// journals of journal format 3.
    Numbered(u64),
}

/// The seed of journal `number`'s numbered framing in a database whose
/// manifest names identity `db_id` (format 4; 0 for format 3, where the
/// seed is the number alone). Two journals of one database never share a
/// seed, and a journal of another database (another identity) fails every
/// header checksum here.
pub fn journal_seed(number: u64, db_id: u64) -> u64 {
    number ^ db_id
}

/// The header checksum of `header` (whose bytes 4.. are filled in).
fn header_crc(header: &[u8], framing: Framing) -> Option<u32> {
    let fields = header.get(4..HEADER_LEN)?;
    Some(match framing {
        Framing::Plain => crc(fields),
        Framing::Numbered(n) => crc2(&n.to_le_bytes(), fields),
    })
}

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
    /// A write batch preceded by its durability mark (journal files
    /// written by journal format 2; format/batch.rs §journal records).
    MarkedBatch = 3,
    /// The same payload in a journal of format 3, whose header checksums
    /// are seeded with its number (`Framing::Numbered`).
    NumberedBatch = 4,
}

impl RecordKind {
    /// The framing records of this kind are written with, given the
    /// journal number for numbered ones.
    fn framing(self, number: u64) -> Framing {
        match self {
            RecordKind::NumberedBatch => Framing::Numbered(number),
            _ => Framing::Plain,
        }
    }
}

/// Appends one framed record to `out` (plain framing).
pub fn encode_record(out: &mut Vec<u8>, kind: RecordKind, payload: &[u8]) {
    encode_record_parts(out, kind, 0, &[], payload);
}

/// Appends one framed record whose payload is `head` followed by `body`,
/// without first copying them together. `number` is the journal's number
/// (it seeds the header checksum of kind 4; other kinds ignore it).
pub fn encode_record_parts(
    out: &mut Vec<u8>,
    kind: RecordKind,
    number: u64,
    head: &[u8],
    body: &[u8],
) {
    encode_record_head(out, kind, number, head, body);
    out.extend_from_slice(body);
}

/// [`encode_record_parts`] without the body: appends the record header and
/// `head`, with checksums covering `head` and `body`; the caller writes
/// `body` right after them. For payloads too large to copy once more.
pub fn encode_record_head(
    out: &mut Vec<u8>,
    kind: RecordKind,
    number: u64,
    head: &[u8],
    body: &[u8],
) {
    let total = head.len() + body.len();
    let len = u32::try_from(total).unwrap_or(u32::MAX);
    debug_assert_eq!(len as usize, total, "record payload over 4 GiB");
    let mut header = [0u8; HEADER_LEN];
    header[4..8].copy_from_slice(&len.to_le_bytes());
    header[8..12].copy_from_slice(&crc2(head, body).to_le_bytes());
    header[12] = kind as u8;
    let hcrc = header_crc(&header, kind.framing(number)).unwrap_or(0);
    header[0..4].copy_from_slice(&hcrc.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(head);
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
    pub records: Vec<Record<'a>>,
    pub tail: Tail,
}

/// Parses the record at `pos`: `Some((kind, payload, next_pos))` if its
/// header and payload checksums hold and its kind belongs to `framing`.
fn parse_at(data: &[u8], pos: usize, framing: Framing) -> Option<(RecordKind, &[u8], usize)> {
    let header = data.get(pos..pos.checked_add(HEADER_LEN)?)?;
    // The kind byte first: over stale or random bytes it rules out most
    // offsets without computing a checksum.
    let kind = match (*header.get(12)?, framing) {
        (1, Framing::Plain) => RecordKind::Batch,
        (2, Framing::Plain) => RecordKind::Edit,
        (3, Framing::Plain) => RecordKind::MarkedBatch,
        (4, Framing::Numbered(_)) => RecordKind::NumberedBatch,
        _ => return None,
    };
    let mut r = Reader::new(header);
    let hcrc = r.u32_le()?;
    if hcrc != header_crc(header, framing)? {
        return None;
    }
    let len = r.u32_le()? as usize;
    let pcrc = r.u32_le()?;
    let start = pos + HEADER_LEN;
    let payload = data.get(start..start.checked_add(len)?)?;
    if crc(payload) != pcrc {
        return None;
    }
    Some((kind, payload, start + len))
}

/// Total length (header + payload) of the record whose header is at the
/// start of `header`, if that header's checksum holds under `framing`.
/// Lets a reader check whether a log holds any intact record without
/// reading all of it.
pub fn record_len(header: &[u8], framing: Framing) -> Option<usize> {
    let header = header.get(..HEADER_LEN)?;
    let mut r = Reader::new(header);
    let hcrc = r.u32_le()?;
    if hcrc != header_crc(header, framing)? {
        return None;
    }
    Some(HEADER_LEN + r.u32_le()? as usize)
}

/// True if `data` starts with an intact record under `framing`.
pub fn starts_with_record(data: &[u8], framing: Framing) -> bool {
    parse_at(data, 0, framing).is_some()
}

/// An intact record: its offset, kind and payload.
pub type Record<'a> = (u64, RecordKind, &'a [u8]);

/// Offset within `data` of `part`, a slice of it: where a record's
/// payload (or a part of it) that a scan of `data` returned lies in the
/// file. `None` if `part` is not inside `data`.
pub fn offset_in(data: &[u8], part: &[u8]) -> Option<u64> {
    let from = (part.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
    (from.checked_add(part.len())? <= data.len()).then_some(from as u64)
}

/// Splits a whole log image into records. Never fails: damage is reported
/// in `Scan::tail` and the caller applies its recovery policy.
///
/// After the first bad record, the rest of the image is searched for
/// intact records; one for which `continues(kind, payload, earlier)`
/// holds (given the records before the damage) makes the damage
/// `Damaged` rather than `Torn`. The predicate lets the caller reject
/// record images that merely sit inside a payload (a stored copy of a log
/// file, say) by checking they continue the log, e.g. by seqno.
pub fn scan<'a>(
    data: &'a [u8],
    continues: impl Fn(RecordKind, &[u8], &[Record<'a>]) -> bool,
) -> Scan<'a> {
    scan_framed(data, Framing::Plain, continues)
}

/// [`scan`] for a log whose records are framed as `framing` says: only
/// records of that framing are intact.
pub fn scan_framed<'a>(
    data: &'a [u8],
    framing: Framing,
    continues: impl Fn(RecordKind, &[u8], &[Record<'a>]) -> bool,
) -> Scan<'a> {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        match parse_at(data, pos, framing) {
            Some((kind, payload, next)) => {
                records.push((pos as u64, kind, payload));
                pos = next;
            }
            None => {
                let later_intact = (pos + 1..data.len()).any(|p| {
                    parse_at(data, p, framing)
                        .is_some_and(|(kind, payload, _)| continues(kind, payload, &records))
                });
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

/// Every intact record anywhere in `data`, skipping bytes that start none.
/// Only for `Sabotage::replay_past_damage`, which replays past damage on
/// purpose to show the crash checkers catch the holes that leaves.
pub fn scan_resync(data: &[u8], framing: Framing) -> Vec<Record<'_>> {
    let mut records = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        match parse_at(data, pos, framing) {
            Some((kind, payload, next)) => {
                records.push((pos as u64, kind, payload));
                pos = next;
            }
            None => pos += 1,
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_found_where_it_lies_and_nowhere_else() {
        let data = [0u8; 64];
        assert_eq!(offset_in(&data, &data[10..20]), Some(10));
        assert_eq!(offset_in(&data, &data[64..]), Some(64));
        let other = [0u8; 8];
        assert_eq!(offset_in(&data, &other), None);
        assert_eq!(offset_in(&data[..32], &data[30..40]), None);
    }

    fn any(_: RecordKind, _: &[u8], _: &[Record]) -> bool {
        true
    }

    #[test]
    fn a_record_image_inside_a_payload_need_not_count_as_damage() {
        let mut inner = Vec::new();
        encode_record(&mut inner, RecordKind::Batch, b"copied");
        inner.extend_from_slice(b"padding");
        let mut data = log_of(&[b"first", &inner]);
        let full = data.len();
        data.truncate(full - 2); // tear the record that carries the image
        assert!(matches!(scan(&data, any).tail, Tail::Damaged { .. }));
        let never = |_: RecordKind, _: &[u8], _: &[Record]| false;
        assert_eq!(scan(&data, never).tail, Tail::Torn { offset: 21 });
        assert!(starts_with_record(&data, Framing::Plain));
        assert_eq!(record_len(&data, Framing::Plain), Some(21));
    }

    /// A numbered record is intact only in the journal of its number, and
    /// plain and numbered records never read as each other: a recycled
    /// journal file's old records are not records of its new life.
    #[test]
    fn numbered_records_belong_to_their_journal_only() {
        let mut rec = Vec::new();
        encode_record_parts(&mut rec, RecordKind::NumberedBatch, 7, b"mark", b"batch");
        let s = scan_framed(&rec, Framing::Numbered(7), any);
        assert_eq!(s.tail, Tail::Clean);
        assert_eq!(
            s.records,
            vec![(0, RecordKind::NumberedBatch, &b"markbatch"[..])]
        );
        assert_eq!(record_len(&rec, Framing::Numbered(7)), Some(rec.len()));
        for other in [Framing::Numbered(8), Framing::Plain] {
            assert!(!starts_with_record(&rec, other), "{other:?}");
            assert_eq!(record_len(&rec, other), None, "{other:?}");
            assert_eq!(scan_framed(&rec, other, any).tail, Tail::Torn { offset: 0 });
        }
        // An old life's record after the new one's is a torn tail, even
        // when every later record is intact in its own journal.
        let mut file = Vec::new();
        encode_record_parts(&mut file, RecordKind::NumberedBatch, 9, b"", b"new");
        let new_end = file.len() as u64;
        file.extend_from_slice(&rec);
        let s = scan_framed(&file, Framing::Numbered(9), any);
        assert_eq!(s.records.len(), 1);
        assert_eq!(s.tail, Tail::Torn { offset: new_end });
        let plain = log_of(&[b"old"]);
        assert_eq!(
            scan_framed(&plain, Framing::Numbered(9), any).tail,
            Tail::Torn { offset: 0 }
        );
        assert_eq!(scan_resync(&file, Framing::Numbered(7)).len(), 1);
    }

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
        let s = scan(&data, any);
        assert_eq!(s.tail, Tail::Clean);
        let got: Vec<&[u8]> = s.records.iter().map(|r| r.2).collect();
        assert_eq!(got, vec![&b"one"[..], b"", b"three"]);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_keeping_a_prefix() {
        let data = log_of(&[b"alpha", b"beta", b"gamma"]);
        let full = scan(&data, any).records.len();
        for cut in 0..data.len() {
            let s = scan(&data[..cut], any);
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
            let s = scan(&d, any);
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
