//! Every byte this crate stores or sends that is not JSON: log keys and
//! the snapshot data stream.
//!
//! # Log keys
//!
//! A log entry's key in the `raft_log` keyspace is its index as 8 bytes,
//! big-endian, so that key order is index order.
//!
//! # Snapshot data (version 1)
//!
//! A snapshot's data is the state machine's key-value pairs in strictly
//! increasing key order, framed so that it can be written while a
//! database snapshot is iterated and read back pair by pair:
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 0      | 8    | magic `b"cairnkv1"` (format and version) |
//! | 8      | ...  | pairs, each: key length `u32` LE, key, value length `u32` LE, value |
//! | ...    | 4    | end marker `u32::MAX` (never a key length: keys are at most `KEY_LEN_MAX`) |
//! | ...    | 8    | number of pairs, `u64` LE |
//!
//! Nothing may follow the count. A stream cut anywhere, or with a length
//! beyond CairnDB's limits, a key out of order or a wrong count, is
//! refused ([`DecodeError`]): snapshot data comes from another node, so
//! it is untrusted until it has decoded whole. There is no checksum: the
//! transport (TCP, and openraft's chunk offsets) carries the bytes.
//!
//! Worked example: the pairs `("a", "1")` and `("bc", "")` are
//! `cairnkv1` `01 00 00 00` `61` `01 00 00 00` `31` `02 00 00 00` `62 63`
//! `00 00 00 00` `ff ff ff ff` `02 00 00 00 00 00 00 00` (40 bytes).

use cairndb::limits::{KEY_LEN_MAX, VALUE_LEN_MAX};

/// The key of the log entry at `index`.
pub fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The index a log key names; `None` if `key` is not 8 bytes.
pub fn log_index(key: &[u8]) -> Option<u64> {
    let bytes: [u8; 8] = key.try_into().ok()?;
    Some(u64::from_be_bytes(bytes))
}

/// First bytes of snapshot data, naming its format and version.
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"cairnkv1";
/// Where a key length would be, this ends the pairs.
const END_MARKER: u32 = u32::MAX;

const _: () = assert!(KEY_LEN_MAX < END_MARKER as usize); // the end marker is never a key length
const _: () = assert!(VALUE_LEN_MAX <= u32::MAX as usize); // value lengths fit their u32 field

/// Why snapshot data did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Where in the data the problem was found.
    pub offset: usize,
    pub detail: &'static str,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "snapshot data at offset {}: {}",
            self.offset, self.detail
        )
    }
}

impl std::error::Error for DecodeError {}

/// Writes snapshot data: pairs in strictly increasing key order, then
/// [`SnapshotWriter::finish`].
#[derive(Debug)]
pub struct SnapshotWriter {
    buf: Vec<u8>,
    pairs: u64,
    /// Where the previous key lies in `buf`, to check the order without
    /// keeping a copy of it.
    last_key: Option<(usize, usize)>,
}

impl Default for SnapshotWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotWriter {
    pub fn new() -> Self {
        SnapshotWriter {
            buf: SNAPSHOT_MAGIC.to_vec(),
            pairs: 0,
            last_key: None,
        }
    }

    /// Adds a pair. Panics if `key` is not greater than the previous key
    /// or a length is beyond CairnDB's limits: pairs come from a database
    /// iterator, which yields keys in order and within the limits.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        assert!(key.len() <= KEY_LEN_MAX, "key longer than KEY_LEN_MAX");
        assert!(
            value.len() <= VALUE_LEN_MAX,
            "value longer than VALUE_LEN_MAX"
        );
        if let Some((start, end)) = self.last_key {
            assert!(
                self.buf[start..end] < *key,
                "snapshot keys must be strictly increasing"
            );
        }
        // 1. key length, 2. key
        self.buf
            .extend_from_slice(&len_u32(key.len()).to_le_bytes());
        let start = self.buf.len();
        self.buf.extend_from_slice(key);
        self.last_key = Some((start, self.buf.len()));
        // 3. value length, 4. value
        self.buf
            .extend_from_slice(&len_u32(value.len()).to_le_bytes());
        self.buf.extend_from_slice(value);
        self.pairs += 1;
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs == 0
    }

    /// Ends the data with the end marker and the pair count.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&END_MARKER.to_le_bytes());
        self.buf.extend_from_slice(&self.pairs.to_le_bytes());
        self.buf
    }
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("lengths are checked against the limits first")
}

/// Reads snapshot data pair by pair, checking it as it goes. The data is
/// whole and well-formed only once [`SnapshotReader::next_pair`] has
/// returned `Ok(None)`.
#[derive(Debug)]
pub struct SnapshotReader<'a> {
    data: &'a [u8],
    pos: usize,
    pairs: u64,
    last_key: Option<&'a [u8]>,
    done: bool,
}

impl<'a> SnapshotReader<'a> {
    /// Checks the magic.
    pub fn new(data: &'a [u8]) -> Result<Self, DecodeError> {
        if data.len() < SNAPSHOT_MAGIC.len() || &data[..SNAPSHOT_MAGIC.len()] != SNAPSHOT_MAGIC {
            return Err(DecodeError {
                offset: 0,
                detail: "not cairn-raft snapshot data (bad magic)",
            });
        }
        Ok(SnapshotReader {
            data,
            pos: SNAPSHOT_MAGIC.len(),
            pairs: 0,
            last_key: None,
            done: false,
        })
    }

    fn err(&self, detail: &'static str) -> DecodeError {
        DecodeError {
            offset: self.pos,
            detail,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let rest = self.data.len() - self.pos;
        if n > rest {
            return Err(self.err(what));
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn take_u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4, "cut inside a length")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The next pair, `Ok(None)` after the last one (the end marker and
    /// the count checked), or what is wrong with the data.
    #[allow(clippy::type_complexity)]
    pub fn next_pair(&mut self) -> Result<Option<(&'a [u8], &'a [u8])>, DecodeError> {
        if self.done {
            return Ok(None);
        }
        let key_len = self.take_u32()?;
        if key_len == END_MARKER {
            let b = self.take(8, "cut inside the pair count")?;
            let count = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            if count != self.pairs {
                return Err(self.err("pair count does not match the pairs"));
            }
            if self.pos != self.data.len() {
                return Err(self.err("bytes after the pair count"));
            }
            self.done = true;
            return Ok(None);
        }
        let key_len = key_len as usize;
        if key_len > KEY_LEN_MAX {
            return Err(self.err("key longer than KEY_LEN_MAX"));
        }
        let key = self.take(key_len, "cut inside a key")?;
        if self.last_key.is_some_and(|last| last >= key) {
            return Err(self.err("keys not in strictly increasing order"));
        }
        let value_len = self.take_u32()? as usize;
        if value_len > VALUE_LEN_MAX {
            return Err(self.err("value longer than VALUE_LEN_MAX"));
        }
        let value = self.take(value_len, "cut inside a value")?;
        self.last_key = Some(key);
        self.pairs += 1;
        Ok(Some((key, value)))
    }
}

/// Reads all of `data`, checking it; the pairs it holds.
#[allow(clippy::type_complexity)]
pub fn decode_snapshot(data: &[u8]) -> Result<Vec<(&[u8], &[u8])>, DecodeError> {
    let mut r = SnapshotReader::new(data)?;
    let mut out = Vec::new();
    while let Some(pair) = r.next_pair()? {
        out.push(pair);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = SnapshotWriter::new();
        w.push(b"a", b"1");
        w.push(b"bc", b"");
        w.push(b"bd", &[7u8; 300]);
        w.finish()
    }

    #[test]
    fn log_keys_sort_as_indexes() {
        let idx = [0u64, 1, 255, 256, 1 << 40, u64::MAX];
        for w in idx.windows(2) {
            assert!(log_key(w[0]) < log_key(w[1]));
        }
        for i in idx {
            assert_eq!(log_index(&log_key(i)), Some(i));
        }
        assert_eq!(log_index(b"short"), None);
    }

    #[test]
    fn round_trip() {
        let data = sample();
        let pairs = decode_snapshot(&data).expect("decodes");
        assert_eq!(
            pairs,
            vec![
                (&b"a"[..], &b"1"[..]),
                (&b"bc"[..], &b""[..]),
                (&b"bd"[..], &[7u8; 300][..])
            ]
        );
        let empty = SnapshotWriter::new().finish();
        assert_eq!(decode_snapshot(&empty).expect("decodes"), vec![]);
    }

    #[test]
    fn worked_example_of_the_module_doc() {
        let mut w = SnapshotWriter::new();
        w.push(b"a", b"1");
        w.push(b"bc", b"");
        let data = w.finish();
        let mut want = b"cairnkv1".to_vec();
        want.extend_from_slice(&[1, 0, 0, 0, b'a', 1, 0, 0, 0, b'1']);
        want.extend_from_slice(&[2, 0, 0, 0, b'b', b'c', 0, 0, 0, 0]);
        want.extend_from_slice(&[0xff; 4]);
        want.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(data, want);
        assert_eq!(data.len(), 40);
    }

    #[test]
    fn every_cut_is_refused() {
        let data = sample();
        for cut in 0..data.len() {
            assert!(
                decode_snapshot(&data[..cut]).is_err(),
                "a cut at {cut} of {} decoded",
                data.len()
            );
        }
    }

    #[test]
    fn damage_is_refused_not_panicked_on() {
        let data = sample();
        for i in 0..data.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = data.clone();
                bad[i] ^= flip;
                // Either refused or still well-formed; never a panic.
                if let Ok(pairs) = decode_snapshot(&bad) {
                    assert_eq!(pairs.len(), 3, "flip {flip:#x} at {i}");
                }
            }
        }
        let mut trailing = data.clone();
        trailing.push(0);
        assert!(decode_snapshot(&trailing).is_err());
    }

    #[test]
    fn out_of_order_keys_are_refused() {
        let mut data = b"cairnkv1".to_vec();
        for key in [b"b", b"a"] {
            data.extend_from_slice(&1u32.to_le_bytes());
            data.extend_from_slice(key);
            data.extend_from_slice(&0u32.to_le_bytes());
        }
        data.extend_from_slice(&u32::MAX.to_le_bytes());
        data.extend_from_slice(&2u64.to_le_bytes());
        let e = decode_snapshot(&data).expect_err("refused");
        assert_eq!(e.detail, "keys not in strictly increasing order");
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn writer_asserts_the_order() {
        let mut w = SnapshotWriter::new();
        w.push(b"b", b"");
        w.push(b"b", b"");
    }
}
