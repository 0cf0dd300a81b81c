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

use std::io::{self, Read, Write};

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
    pub offset: u64,
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

/// Why reading snapshot data failed: its bytes are not well-formed, or
/// its source failed to give them.
#[derive(Debug)]
pub enum ReadError {
    Decode(DecodeError),
    Io(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Decode(e) => e.fmt(f),
            ReadError::Io(e) => write!(f, "reading snapshot data: {e}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Decode(e) => Some(e),
            ReadError::Io(e) => Some(e),
        }
    }
}

/// Writes snapshot data into `out` as it is given: pairs in strictly
/// increasing key order, then [`SnapshotWriter::finish`]. Holds only the
/// previous key, whatever the size of the data.
#[derive(Debug)]
pub struct SnapshotWriter<W> {
    out: W,
    pairs: u64,
    written: u64,
    /// The previous key, to check the order.
    last_key: Vec<u8>,
}

impl<W: Write> SnapshotWriter<W> {
    /// Writes the magic.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(SNAPSHOT_MAGIC)?;
        Ok(SnapshotWriter {
            out,
            pairs: 0,
            written: SNAPSHOT_MAGIC.len() as u64,
            last_key: Vec::new(),
        })
    }

    /// Adds a pair. Panics if `key` is not greater than the previous key
    /// or a length is beyond CairnDB's limits: pairs come from a database
    /// iterator, which yields keys in order and within the limits.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        assert!(key.len() <= KEY_LEN_MAX, "key longer than KEY_LEN_MAX");
        assert!(
            value.len() <= VALUE_LEN_MAX,
            "value longer than VALUE_LEN_MAX"
        );
        assert!(
            self.pairs == 0 || self.last_key.as_slice() < key,
            "snapshot keys must be strictly increasing"
        );
        // key length, key, value length, value
        self.out.write_all(&len_u32(key.len()).to_le_bytes())?;
        self.out.write_all(key)?;
        self.out.write_all(&len_u32(value.len()).to_le_bytes())?;
        self.out.write_all(value)?;
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.pairs += 1;
        self.written += 8 + key.len() as u64 + value.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Pairs written so far.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }

    /// Ends the data with the end marker and the pair count, and gives
    /// the sink back.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&END_MARKER.to_le_bytes())?;
        self.out.write_all(&self.pairs.to_le_bytes())?;
        Ok(self.out)
    }
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("lengths are checked against the limits first")
}

/// Reads snapshot data pair by pair from `src`, checking it as it goes;
/// holds one pair (and the key before it) at a time. The data is whole
/// and well-formed only once [`SnapshotReader::next_pair`] has returned
/// `Ok(None)`. A length in the data is never trusted for an allocation:
/// buffers grow only as bytes arrive.
#[derive(Debug)]
pub struct SnapshotReader<R> {
    src: R,
    pos: u64,
    pairs: u64,
    /// The key of the pair last returned.
    key: Vec<u8>,
    /// Where the next key is read, swapped with `key` once checked.
    next_key: Vec<u8>,
    value: Vec<u8>,
    done: bool,
}

impl<R: Read> SnapshotReader<R> {
    /// Reads and checks the magic.
    pub fn new(src: R) -> Result<Self, ReadError> {
        let mut r = SnapshotReader {
            src,
            pos: 0,
            pairs: 0,
            key: Vec::new(),
            next_key: Vec::new(),
            value: Vec::new(),
            done: false,
        };
        let mut magic = Vec::new();
        r.fill(
            &mut magic,
            SNAPSHOT_MAGIC.len(),
            "not cairn-raft snapshot data (bad magic)",
        )?;
        if magic.as_slice() != SNAPSHOT_MAGIC {
            return Err(ReadError::Decode(DecodeError {
                offset: 0,
                detail: "not cairn-raft snapshot data (bad magic)",
            }));
        }
        Ok(r)
    }

    fn err(&self, detail: &'static str) -> ReadError {
        ReadError::Decode(DecodeError {
            offset: self.pos,
            detail,
        })
    }

    /// Replaces `buf` with the next `n` bytes; `cut` if the data ends first.
    fn fill(&mut self, buf: &mut Vec<u8>, n: usize, cut: &'static str) -> Result<(), ReadError> {
        buf.clear();
        let got = (&mut self.src)
            .take(n as u64)
            .read_to_end(buf)
            .map_err(ReadError::Io)?;
        if got < n {
            self.pos += got as u64;
            return Err(self.err(cut));
        }
        self.pos += n as u64;
        Ok(())
    }

    fn fixed<const N: usize>(&mut self, cut: &'static str) -> Result<[u8; N], ReadError> {
        let mut buf = Vec::with_capacity(N);
        self.fill(&mut buf, N, cut)?;
        Ok(buf.try_into().expect("fill gives exactly N bytes"))
    }

    /// The next pair, `Ok(None)` after the last one (the end marker, the
    /// count and the end of the data checked), or what is wrong.
    #[allow(clippy::type_complexity)]
    pub fn next_pair(&mut self) -> Result<Option<(&[u8], &[u8])>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let key_len = u32::from_le_bytes(self.fixed("cut inside a length")?);
        if key_len == END_MARKER {
            let count = u64::from_le_bytes(self.fixed("cut inside the pair count")?);
            if count != self.pairs {
                return Err(self.err("pair count does not match the pairs"));
            }
            let mut rest = Vec::new();
            let more = (&mut self.src)
                .take(1)
                .read_to_end(&mut rest)
                .map_err(ReadError::Io)?;
            if more != 0 {
                return Err(self.err("bytes after the pair count"));
            }
            self.done = true;
            return Ok(None);
        }
        let key_len = key_len as usize;
        if key_len > KEY_LEN_MAX {
            return Err(self.err("key longer than KEY_LEN_MAX"));
        }
        let mut next_key = std::mem::take(&mut self.next_key);
        self.fill(&mut next_key, key_len, "cut inside a key")?;
        if self.pairs > 0 && self.key >= next_key {
            return Err(self.err("keys not in strictly increasing order"));
        }
        let value_len = u32::from_le_bytes(self.fixed("cut inside a length")?) as usize;
        if value_len > VALUE_LEN_MAX {
            return Err(self.err("value longer than VALUE_LEN_MAX"));
        }
        let mut value = std::mem::take(&mut self.value);
        self.fill(&mut value, value_len, "cut inside a value")?;
        self.value = value;
        self.next_key = std::mem::replace(&mut self.key, next_key);
        self.pairs += 1;
        Ok(Some((&self.key, &self.value)))
    }
}

/// Reads all of `data`, checking it; the pairs it holds.
#[allow(clippy::type_complexity)]
pub fn decode_snapshot(data: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, ReadError> {
    let mut r = SnapshotReader::new(data)?;
    let mut out = Vec::new();
    while let Some((k, v)) = r.next_pair()? {
        out.push((k.to_vec(), v.to_vec()));
    }
    Ok(out)
}

/// The pairs, encoded: what a [`SnapshotWriter`] into memory writes.
pub fn encode_snapshot<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(K, V)]) -> Vec<u8> {
    let mut w = SnapshotWriter::new(Vec::new()).expect("writing to memory");
    for (k, v) in pairs {
        w.push(k.as_ref(), v.as_ref()).expect("writing to memory");
    }
    w.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        encode_snapshot(&[(&b"a"[..], &b"1"[..]), (b"bc", b""), (b"bd", &[7u8; 300])])
    }

    fn detail(e: ReadError) -> &'static str {
        match e {
            ReadError::Decode(d) => d.detail,
            ReadError::Io(e) => panic!("reading memory failed: {e}"),
        }
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
                (b"a".to_vec(), b"1".to_vec()),
                (b"bc".to_vec(), b"".to_vec()),
                (b"bd".to_vec(), vec![7u8; 300])
            ]
        );
        let empty = encode_snapshot::<&[u8], &[u8]>(&[]);
        assert_eq!(decode_snapshot(&empty).expect("decodes"), vec![]);
    }

    #[test]
    fn worked_example_of_the_module_doc() {
        let data = encode_snapshot(&[(&b"a"[..], &b"1"[..]), (b"bc", b"")]);
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
        assert_eq!(detail(e), "keys not in strictly increasing order");
    }

    #[test]
    fn a_huge_length_in_cut_data_allocates_nothing_up_front() {
        let mut data = b"cairnkv1".to_vec();
        data.extend_from_slice(&1u32.to_le_bytes());
        data.push(b'k');
        data.extend_from_slice(&(VALUE_LEN_MAX as u32).to_le_bytes());
        data.extend_from_slice(b"short");
        let mut r = SnapshotReader::new(&data[..]).expect("magic");
        let e = r.next_pair().expect_err("cut");
        assert_eq!(detail(e), "cut inside a value");
        assert!(r.value.capacity() < 1 << 20, "{}", r.value.capacity());
    }

    #[test]
    #[should_panic(expected = "strictly increasing")]
    fn writer_asserts_the_order() {
        let mut w = SnapshotWriter::new(Vec::new()).expect("memory");
        w.push(b"b", b"").expect("memory");
        let _ = w.push(b"b", b"");
    }
}
