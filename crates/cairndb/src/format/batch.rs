//! Write batch encoding: the payload of a journal record (format.md §Batch).
//!
//! ```text
//! offset size  field
//!  0     8     first_seqno  u64 LE; op i has seqno first_seqno + i
//!  8     4     count        u32 LE, number of ops
//! 12     ...   ops          count × op
//! op:   1 byte kind (0 = delete, 1 = put, 2 = pointer; persisted), with
//!       bit 7 (`IN_KEYSPACE`) set when a varint keyspace id (nonzero)
//!       follows it; without it the op is of the default keyspace (0),
//!       varint key_len, key, and for puts and pointers: varint value_len,
//!       value (a pointer's value is an encoded value pointer into a value
//!       stream, format.md §Value streams)
//! ```

use super::coding::{Reader, put_bytes, put_varint};
use super::key::Kind;
use super::log::{RecordKind, encode_record_parts};

/// Bytes before the first op.
pub const BATCH_HEADER_LEN: usize = 12;

/// Starts an empty batch payload (seqno 0, count 0).
pub fn new_payload() -> Vec<u8> {
    vec![0u8; BATCH_HEADER_LEN]
}

/// Bit 7 of an op's kind byte: a varint keyspace id follows the byte
/// (manifest format 7). Ops of the default keyspace (0) go without it,
/// byte for byte as before keyspaces.
pub const IN_KEYSPACE: u8 = 0x80;

/// Appends an op of keyspace `keyspace`; the caller bumps the count with
/// [`set_count`].
pub fn push_op(rep: &mut Vec<u8>, keyspace: u32, kind: Kind, key: &[u8], value: &[u8]) {
    if keyspace == 0 {
        rep.push(kind as u8);
    } else {
        rep.push(kind as u8 | IN_KEYSPACE);
        put_varint(rep, u64::from(keyspace));
    }
    put_bytes(rep, key);
    if kind != Kind::Delete {
        put_bytes(rep, value);
    }
}

pub fn set_count(rep: &mut [u8], n: u32) {
    if let Some(b) = rep.get_mut(8..12) {
        b.copy_from_slice(&n.to_le_bytes());
    }
}

pub fn set_seqno(rep: &mut [u8], seqno: u64) {
    if let Some(b) = rep.get_mut(0..8) {
        b.copy_from_slice(&seqno.to_le_bytes());
    }
}

/// One decoded op, borrowing from the payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Op<'a> {
    /// The keyspace (0: the default one).
    pub keyspace: u32,
    pub kind: Kind,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// Offset of `value` in the payload it was decoded from: where a
    /// separated value's bytes lie within its journal record.
    pub value_at: usize,
}

/// A checked view of a batch payload.
pub struct Decoded<'a> {
    pub first_seqno: u64,
    pub ops: Vec<Op<'a>>,
}

/// Decodes a payload; `Err(detail)` if it is malformed. The payload came
/// through a checksum, so failure here means a bug or a foreign writer.
pub fn decode(rep: &[u8]) -> Result<Decoded<'_>, String> {
    let mut r = Reader::new(rep);
    let first_seqno = r.u64_le().ok_or("batch header truncated")?;
    let count = r.u32_le().ok_or("batch header truncated")?;
    let mut ops = Vec::with_capacity((count as usize).min(rep.len()));
    for i in 0..count {
        ops.push(read_op(&mut r).map_err(|e| format!("op {i}: {e}"))?);
    }
    if !r.is_empty() {
        return Err(format!(
            "{} trailing bytes after {count} ops",
            r.remaining()
        ));
    }
    Ok(Decoded { first_seqno, ops })
}

/// Reads one op at the reader's position.
fn read_op<'a>(r: &mut Reader<'a>) -> Result<Op<'a>, &'static str> {
    let byte = r.u8().ok_or("kind truncated")?;
    let kind = match byte & !IN_KEYSPACE {
        0 => Kind::Delete,
        1 => Kind::Put,
        2 => Kind::Pointer,
        _ => return Err("bad kind"),
    };
    let keyspace = if byte & IN_KEYSPACE != 0 {
        let id = r.varint().ok_or("keyspace truncated")?;
        match u32::try_from(id) {
            Ok(id) if id != 0 => id,
            _ => return Err("bad keyspace id"),
        }
    } else {
        0
    };
    let key = r.len_prefixed().ok_or("key truncated")?;
    let value = match kind {
        Kind::Put | Kind::Pointer => r.len_prefixed().ok_or("value truncated")?,
        Kind::Delete => &[],
    };
    let value_at = r.pos() - value.len();
    Ok(Op {
        keyspace,
        kind,
        key,
        value,
        value_at,
    })
}

/// The op that starts at byte `at` of payload `rep` (an offset
/// [`push_op`] appended at) and the offset just past it; `None` if no
/// whole op starts there.
pub fn op_at(rep: &[u8], at: usize) -> Option<(Op<'_>, usize)> {
    let mut r = Reader::new(rep.get(at..)?);
    let mut op = read_op(&mut r).ok()?;
    op.value_at += at;
    Some((op, at + r.pos()))
}

/// Bytes of the durability mark before the batch in a journal record of
/// kind `MarkedBatch` (format.md §Journal records).
pub const MARK_LEN: usize = 8;

/// Offset of the batch payload within a journal record written by
/// [`encode_journal_record`]: after the record header and the mark.
pub const JOURNAL_BATCH_AT: usize = super::log::HEADER_LEN + MARK_LEN;

/// Appends a record of journal `number` holding batch `rep` (seqno
/// already set) and the durability mark `mark`: the highest seqno of this
/// journal known synced when the record was written. Journal format 3:
/// kind `NumberedBatch`, header checksum seeded with `number`.
pub fn encode_journal_record(out: &mut Vec<u8>, number: u64, mark: u64, rep: &[u8]) {
    encode_record_parts(
        out,
        RecordKind::NumberedBatch,
        number,
        &mark.to_le_bytes(),
        rep,
    );
}

/// [`encode_journal_record`] of batch `rep` with its seqno set to
/// `seqno`, written straight from the caller's batch: the commit path
/// would otherwise copy each batch once more only to set 8 bytes.
pub fn encode_journal_record_at(out: &mut Vec<u8>, number: u64, mark: u64, seqno: u64, rep: &[u8]) {
    let Some(rest) = rep.get(8..) else {
        // Shorter than a seqno: no batch `WriteBatch` made; framed as is.
        return encode_journal_record(out, number, mark, rep);
    };
    let mut head = [0u8; MARK_LEN + 8];
    head[..MARK_LEN].copy_from_slice(&mark.to_le_bytes());
    head[MARK_LEN..].copy_from_slice(&seqno.to_le_bytes());
    encode_record_parts(out, RecordKind::NumberedBatch, number, &head, rest);
}

/// The first [`JOURNAL_BATCH_AT`] + 8 bytes of the record that
/// [`encode_journal_record_at`] would append for batch `rep` (at least a
/// seqno long): header, mark and seqno, checksums covering the whole
/// record. The caller appends `rep[8..]` after them.
pub fn encode_journal_record_head_at(
    out: &mut Vec<u8>,
    seed: u64,
    mark: u64,
    seqno: u64,
    rep: &[u8],
) {
    assert!(rep.len() >= 8, "a batch starts with its seqno");
    let mut head = [0u8; MARK_LEN + 8];
    head[..MARK_LEN].copy_from_slice(&mark.to_le_bytes());
    head[MARK_LEN..].copy_from_slice(&seqno.to_le_bytes());
    let body = rep.get(8..).unwrap_or_default();
    super::log::encode_record_head(out, RecordKind::NumberedBatch, seed, &head, body);
}

/// The durability mark and batch payload of a journal record, or `None`
/// if it is not a batch record. Kind-1 records (journal format 1) carry no
/// mark; they read as mark 0, which vouches for nothing.
pub fn split_journal_record(kind: RecordKind, payload: &[u8]) -> Option<(u64, &[u8])> {
    match kind {
        RecordKind::Batch => Some((0, payload)),
        RecordKind::MarkedBatch | RecordKind::NumberedBatch => {
            let mark = payload.get(..MARK_LEN)?;
            let mark = u64::from_le_bytes(mark.try_into().ok()?);
            Some((mark, payload.get(MARK_LEN..)?))
        }
        RecordKind::Edit => None,
    }
}

/// Sabotage only (`Options::sabotage.split_batches`): appends each op of
/// `rep` to `out` as its own one-op journal record, seqnos from `first`.
/// Returns the next unused seqno.
pub fn encode_split(out: &mut Vec<u8>, number: u64, mark: u64, rep: &[u8], first: u64) -> u64 {
    let mut next = first;
    if let Ok(d) = decode(rep) {
        for op in d.ops {
            let mut one = new_payload();
            push_op(&mut one, op.keyspace, op.kind, op.key, op.value);
            set_count(&mut one, 1);
            set_seqno(&mut one, next);
            encode_journal_record(out, number, mark, &one);
            next += 1;
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_op_knows_where_its_value_lies() {
        let mut rep = new_payload();
        let at = rep.len();
        push_op(&mut rep, 0, Kind::Put, b"key", &[9u8; 300]);
        push_op(&mut rep, 0, Kind::Delete, b"gone", b"");
        let second = rep.len();
        push_op(&mut rep, 0, Kind::Put, b"k", b"short");
        set_count(&mut rep, 3);
        let d = decode(&rep).expect("decodes");
        for op in &d.ops {
            assert_eq!(&rep[op.value_at..op.value_at + op.value.len()], op.value);
        }
        for start in [at, second] {
            let (op, _) = op_at(&rep, start).expect("an op starts there");
            assert_eq!(&rep[op.value_at..op.value_at + op.value.len()], op.value);
        }
    }

    #[test]
    fn round_trip_and_every_cut_fails() {
        let mut rep = new_payload();
        push_op(&mut rep, 0, Kind::Put, b"k1", b"v1");
        push_op(&mut rep, 0, Kind::Delete, b"k2", b"");
        push_op(&mut rep, 0, Kind::Put, b"k3", b"");
        set_count(&mut rep, 3);
        set_seqno(&mut rep, 42);
        let d = decode(&rep).expect("decodes");
        assert_eq!(d.first_seqno, 42);
        assert_eq!(d.ops.len(), 3);
        assert_eq!(d.ops[1].kind, Kind::Delete);
        assert_eq!(d.ops[2].value, b"");
        for cut in 0..rep.len() {
            assert!(decode(&rep[..cut]).is_err(), "cut {cut}");
        }
    }

    /// Ops of other keyspaces carry their id; default-keyspace ops are
    /// as before keyspaces; a keyspace id of 0 or past 32 bits is damage.
    #[test]
    fn keyspace_ops_round_trip() {
        let mut rep = new_payload();
        push_op(&mut rep, 0, Kind::Put, b"a", b"1");
        push_op(&mut rep, 7, Kind::Put, b"b", b"2");
        push_op(&mut rep, 300, Kind::Delete, b"c", b"");
        set_count(&mut rep, 3);
        let d = decode(&rep).expect("decodes");
        let got: Vec<(u32, &[u8])> = d.ops.iter().map(|o| (o.keyspace, o.key)).collect();
        assert_eq!(got, [(0, &b"a"[..]), (7, b"b"), (300, b"c")]);
        assert_eq!(rep[BATCH_HEADER_LEN], Kind::Put as u8);
        for bad in [0u64, 1 << 32] {
            let mut rep = new_payload();
            rep.push(Kind::Put as u8 | IN_KEYSPACE);
            put_varint(&mut rep, bad);
            put_bytes(&mut rep, b"k");
            put_bytes(&mut rep, b"v");
            set_count(&mut rep, 1);
            assert!(decode(&rep).is_err(), "keyspace {bad}");
        }
    }

    fn hex(bytes: &[u8]) -> String {
        let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
        hex.join(" ")
    }

    /// Setting the seqno while encoding writes the bytes that setting it
    /// in a copy first does.
    #[test]
    fn record_at_seqno_matches_copy() {
        let mut rep = new_payload();
        push_op(&mut rep, 0, Kind::Put, b"key", &[7u8; 300]);
        push_op(&mut rep, 0, Kind::Delete, b"gone", b"");
        set_count(&mut rep, 2);
        set_seqno(&mut rep, 5);
        let before = rep.clone();
        let mut copy = rep.clone();
        set_seqno(&mut copy, 0x0102_0304_0506);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode_journal_record(&mut a, 9, 77, &copy);
        encode_journal_record_at(&mut b, 9, 77, 0x0102_0304_0506, &rep);
        assert_eq!(a, b);
        assert_eq!(rep, before, "the caller's batch is left as it was");
    }

    /// format.md §Log records, worked example: one synced put as the first
    /// write of a new database of identity `EXAMPLE_DB_ID`, whose first
    /// journal is `000002.journal`; the same bytes as the engine writes
    /// them (with the identity the engine drew).
    #[test]
    fn worked_example_bytes() {
        use crate::format::log::journal_seed;
        const EXAMPLE_DB_ID: u64 = 0x0123_4567_89ab_cdef;
        let mut rep = new_payload();
        push_op(&mut rep, 0, Kind::Put, b"a", b"b");
        set_count(&mut rep, 1);
        set_seqno(&mut rep, 1);
        let mut rec = Vec::new();
        encode_journal_record(&mut rec, journal_seed(2, EXAMPLE_DB_ID), 0, &rep);
        println!("{}", hex(&rec));
        assert_eq!(hex(&rec), GOLDEN);

        let fs = crate::io::MemFs::new();
        let dir = std::path::Path::new("/db");
        let opts = crate::Options {
            fs: std::sync::Arc::new(fs.clone()),
            ..crate::Options::default()
        };
        let db = crate::Db::open(dir, opts).expect("open");
        db.put_opt("a", "b", &crate::WriteOptions { sync: true })
            .expect("put");
        let journal = crate::io::read_all(&fs, &dir.join("000002.journal")).expect("journal");
        let mut rec = Vec::new();
        encode_journal_record(&mut rec, journal_seed(2, db.inner().db_id), 0, &rep);
        assert_eq!(hex(&journal[..rec.len()]), hex(&rec));
        // Only the header checksum depends on the identity.
        assert_eq!(hex(&journal[4..rec.len()]), GOLDEN[12..]);
    }

    const GOLDEN: &str = "f4 d3 ce e4 19 00 00 00 d9 70 27 68 04 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 01 00 00 00 01 01 61 01 62";
}
