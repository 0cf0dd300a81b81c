//! Write batch encoding: the payload of a journal record (format.md §Batch).
//!
//! ```text
//! offset size  field
//!  0     8     first_seqno  u64 LE; op i has seqno first_seqno + i
//!  8     4     count        u32 LE, number of ops
//! 12     ...   ops          count × op
//! op:   1 byte kind (0 = delete, 1 = put; persisted), varint key_len, key,
//!       and for puts: varint value_len, value
//! ```

use super::coding::{Reader, put_bytes};
use super::key::Kind;

/// Bytes before the first op.
pub const BATCH_HEADER_LEN: usize = 12;

/// Starts an empty batch payload (seqno 0, count 0).
pub fn new_payload() -> Vec<u8> {
    vec![0u8; BATCH_HEADER_LEN]
}

/// Appends an op; the caller bumps the count with [`set_count`].
pub fn push_op(rep: &mut Vec<u8>, kind: Kind, key: &[u8], value: &[u8]) {
    rep.push(kind as u8);
    put_bytes(rep, key);
    if kind == Kind::Put {
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
    pub kind: Kind,
    pub key: &'a [u8],
    pub value: &'a [u8],
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
        let kind = r
            .u8()
            .and_then(Kind::from_u8)
            .ok_or_else(|| format!("op {i}: bad kind"))?;
        let key = r
            .len_prefixed()
            .ok_or_else(|| format!("op {i}: key truncated"))?;
        let value = match kind {
            Kind::Put => r
                .len_prefixed()
                .ok_or_else(|| format!("op {i}: value truncated"))?,
            Kind::Delete => &[],
        };
        ops.push(Op { kind, key, value });
    }
    if !r.is_empty() {
        return Err(format!(
            "{} trailing bytes after {count} ops",
            r.remaining()
        ));
    }
    Ok(Decoded { first_seqno, ops })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_cut_fails() {
        let mut rep = new_payload();
        push_op(&mut rep, Kind::Put, b"k1", b"v1");
        push_op(&mut rep, Kind::Delete, b"k2", b"");
        push_op(&mut rep, Kind::Put, b"k3", b"");
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
}
