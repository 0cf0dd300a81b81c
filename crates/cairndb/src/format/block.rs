//! Data and index blocks (docs/format.md §Tables §Block contents).
//!
//! Owns: the encoding of a sorted run of key/value entries into one block
//! and its decoding. Layout:
//!
//! ```text
//! entry*  restart[num_restarts] (u32 LE each)  num_restarts (u32 LE)
//! entry = varint shared | varint unshared | varint value_len
//!         | key[shared..] (unshared bytes) | value (value_len bytes)
//! ```
//!
//! Keys are prefix-compressed against the previous key; every
//! `restart_interval`-th entry is a restart point (shared = 0) whose offset
//! is listed in the restart array, so a seek binary-searches the restart
//! points and then scans at most `restart_interval` entries. The block
//! trailer (type byte + crc) is added and checked by the table layer, not
//! here.
//!
//! Invariants: a [`Block`] only exists for bytes whose restart array was
//! validated (at least one restart, first at 0, strictly increasing, all
//! inside the entry area). Entry decoding checks every length before
//! slicing and reports a malformed entry as an error, never a panic. The
//! block layer does not know the key order: callers pass the comparator.
//!
//! Sharing: a `Block` is an immutable `Arc<[u8]>` plus two numbers; clones
//! are cheap and may be sent between threads (the block cache holds them).
//! A [`BlockIter`] owns a clone of its block and is `Send`.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::format::coding::{Reader, put_varint};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

/// Key comparator used by seeks.
pub type Compare = fn(&[u8], &[u8]) -> Ordering;

/// Why a block's bytes could not be decoded. The table layer turns it into
/// `Error::Corruption` naming the file and the block offset.
pub type Malformed = &'static str;

/// Every entry of a block: the key and the value's range in [`Block::data`].
pub type Decoded = Vec<(Vec<u8>, Range<usize>)>;

/// Builds one block. Reused after [`BlockBuilder::finish`].
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    interval: usize,
    counter: usize,
    last_key: Vec<u8>,
    entries: usize,
}

impl BlockBuilder {
    /// A builder placing a restart point every `restart_interval` entries
    /// (0 is treated as 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            interval: restart_interval.max(1),
            counter: 0,
            last_key: Vec::new(),
            entries: 0,
        }
    }

    /// Appends an entry. Keys must arrive in the order the reader's
    /// comparator expects (not checked here; the table writer asserts it).
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter >= self.interval {
            self.restarts.push(offset_u32(self.buf.len()));
            self.counter = 0;
            0
        } else {
            common_prefix(&self.last_key, key)
        };
        let delta = key.get(shared..).unwrap_or_default();
        put_varint(&mut self.buf, shared as u64); // 1. shared
        put_varint(&mut self.buf, delta.len() as u64); // 2. unshared
        put_varint(&mut self.buf, value.len() as u64); // 3. value_len
        self.buf.extend_from_slice(delta); // 4. key delta
        self.buf.extend_from_slice(value); // 5. value
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(delta);
        self.counter += 1;
        self.entries += 1;
    }

    /// Size of the block if finished now (without the table trailer).
    pub fn estimated_size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Appends the restart array and returns the block bytes; the builder
    /// is reset for the next block.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&offset_u32(self.restarts.len()).to_le_bytes());
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.last_key.clear();
        self.entries = 0;
        out
    }
}

fn offset_u32(v: usize) -> u32 {
    // A block holds at most block_size plus one entry, and entries are
    // bounded by limits::{KEY_LEN_MAX, VALUE_LEN_MAX}, far below 4 GiB.
    assert!(v <= u32::MAX as usize, "block offset {v} exceeds u32");
    v as u32
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A decoded, validated block.
#[derive(Clone)]
pub struct Block {
    data: Arc<[u8]>,
    /// Offset of the restart array = end of the entry area.
    restarts_at: usize,
    num_restarts: usize,
    /// Search aid for `BlockIter::seek`, built by [`Block::with_hints`]
    /// (in memory only).
    hints: Option<Arc<Hints>>,
}

/// The restart keys of a block packed for searching: `part` maps a key
/// to the bytes the comparator orders first (for internal keys, the user
/// key), and `words` holds those parts of the restart keys. A seek
/// binary-searches the words, which lie side by side, instead of
/// decoding a restart entry (elsewhere in the block, often a cache miss)
/// at every step.
struct Hints {
    part: fn(&[u8]) -> &[u8],
    words: KeyWords,
}

/// Ascending byte strings packed for binary search: the prefix all of
/// them share, and for each the 8 bytes after it, zero-padded, as a
/// big-endian word. Among strings with that prefix, a smaller word means
/// a smaller string and a larger word a larger string (a shorter string
/// pads with zeros, and a string that ends first is the smaller); equal
/// words decide nothing. Used for a table's index keys and a block's
/// restart keys (in memory only; nothing on disk).
pub struct KeyWords {
    prefix: Box<[u8]>,
    words: Box<[u64]>,
}

impl KeyWords {
    /// The words of `strings`, which must ascend (else searches through
    /// the words answer wrongly, but never panic).
    pub fn new<'a>(strings: impl DoubleEndedIterator<Item = &'a [u8]> + Clone) -> KeyWords {
        let first = strings.clone().next().unwrap_or_default();
        let last = strings.clone().next_back().unwrap_or_default();
        // Each string lies between the first and the last, so it shares
        // the prefix those two share.
        let skip = common_prefix(first, last);
        KeyWords {
            prefix: first.get(..skip).unwrap_or_default().into(),
            words: strings.map(|s| word(s, skip)).collect(),
        }
    }

    /// If `target` shares the prefix, the range of strings the words
    /// cannot place against it: every string before the range is smaller
    /// than `target`, every one after it larger. `None` otherwise.
    pub fn narrow(&self, target: &[u8]) -> Option<std::ops::Range<usize>> {
        if target.get(..self.prefix.len())? != &*self.prefix {
            return None;
        }
        let w = word(target, self.prefix.len());
        let below = self.words.partition_point(|&x| x < w);
        Some(below..self.words.partition_point(|&x| x <= w))
    }

    /// Length of the shared prefix.
    #[cfg(test)]
    pub fn prefix_len(&self) -> usize {
        self.prefix.len()
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8 + self.prefix.len()
    }
}

/// The 8 bytes of `bytes` after its first `skip`, zero-padded, as a
/// big-endian word ([`KeyWords`]).
fn word(bytes: &[u8], skip: usize) -> u64 {
    let mut w = [0u8; 8];
    let rest = bytes.get(skip..).unwrap_or_default();
    for (w, b) in w.iter_mut().zip(rest) {
        *w = *b;
    }
    u64::from_be_bytes(w)
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("len", &self.data.len())
            .field("restarts", &self.num_restarts)
            .finish()
    }
}

/// One decoded entry header, as ranges into the block.
struct Entry {
    shared: usize,
    delta: Range<usize>,
    value: Range<usize>,
    next: usize,
}

impl Block {
    /// Validates the restart array of `data` (the block bytes without the
    /// trailer).
    pub fn new(data: Arc<[u8]>) -> Result<Block, Malformed> {
        let len = data.len();
        let count_at = len
            .checked_sub(4)
            .ok_or("block shorter than its restart count")?;
        let n = read_u32(&data, count_at).ok_or("block shorter than its restart count")? as usize;
        if n == 0 {
            return Err("block has no restart points");
        }
        let array_len = n.checked_mul(4).ok_or("restart count overflows")?;
        let restarts_at = count_at
            .checked_sub(array_len)
            .ok_or("restart array larger than the block")?;
        let block = Block {
            data,
            restarts_at,
            num_restarts: n,
            hints: None,
        };
        let mut prev: Option<usize> = None;
        for i in 0..n {
            let r = block.restart(i).ok_or("restart array truncated")?;
            match prev {
                None if r != 0 => return Err("first restart point is not at offset 0"),
                Some(p) if r <= p => return Err("restart points are not increasing"),
                _ => {}
            }
            if r >= restarts_at && !(r == 0 && restarts_at == 0 && n == 1) {
                return Err("restart point outside the entry area");
            }
            prev = Some(r);
        }
        Ok(block)
    }

    /// This block with its restart keys packed for seeks ([`Hints`]),
    /// for blocks whose comparator orders keys by `part` of them first,
    /// bytewise (as `key::compare` does user keys). Decodes every restart
    /// entry once.
    pub fn with_hints(mut self, part: fn(&[u8]) -> &[u8]) -> Result<Block, Malformed> {
        let keys = (0..self.num_restarts)
            .map(|i| {
                let e = self.decode_entry(self.restart(i).ok_or("restart array truncated")?)?;
                if e.shared != 0 {
                    return Err("restart entry shares a prefix");
                }
                self.data.get(e.delta).ok_or("entry key out of range")
            })
            .collect::<Result<Vec<&[u8]>, Malformed>>()?;
        let hints = Hints {
            part,
            words: KeyWords::new(keys.iter().map(|k| part(k))),
        };
        self.hints = Some(Arc::new(hints));
        Ok(self)
    }

    /// Heap bytes of the seek hints (0 without them).
    pub fn hint_bytes(&self) -> usize {
        self.hints.as_ref().map_or(0, |h| h.words.bytes())
    }

    /// The block bytes (without trailer).
    pub fn data(&self) -> &Arc<[u8]> {
        &self.data
    }

    /// Length of the block bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.restarts_at == 0
    }

    fn restart(&self, i: usize) -> Option<usize> {
        let at = self.restarts_at.checked_add(i.checked_mul(4)?)?;
        read_u32(&self.data, at).map(|v| v as usize)
    }

    fn decode_entry(&self, pos: usize) -> Result<Entry, Malformed> {
        let area = self
            .data
            .get(pos..self.restarts_at)
            .ok_or("entry offset outside the entry area")?;
        let mut r = Reader::new(area);
        let shared = r.varint_usize().ok_or("entry header truncated")?;
        let unshared = r.varint_usize().ok_or("entry header truncated")?;
        let value_len = r.varint_usize().ok_or("entry header truncated")?;
        let key_start = pos + r.pos();
        let key_end = key_start
            .checked_add(unshared)
            .ok_or("entry key length overflows")?;
        let value_end = key_end
            .checked_add(value_len)
            .ok_or("entry value length overflows")?;
        if value_end > self.restarts_at {
            return Err("entry extends past the entry area");
        }
        Ok(Entry {
            shared,
            delta: key_start..key_end,
            value: key_end..value_end,
            next: value_end,
        })
    }

    /// An iterator over this block, unpositioned.
    pub fn iter(&self, cmp: Compare) -> BlockIter {
        self.clone().iter_owned(cmp)
    }

    /// [`Block::iter`] taking this handle instead of cloning it.
    pub fn iter_owned(self, cmp: Compare) -> BlockIter {
        BlockIter {
            next: self.restarts_at,
            block: self,
            cmp,
            key: SmallVec::new(),
            value: 0..0,
            valid: false,
        }
    }

    /// Decodes every entry: (key, value range into [`Block::data`]). Used by
    /// backward iteration.
    ///
    /// Keys are copied whole, so a crafted block whose entries share ever
    /// longer prefixes could decode to far more bytes than it holds; past
    /// `DECODE_GROWTH_MAX` times the block's size it is refused.
    pub fn decode_all(&self) -> Result<Decoded, Malformed> {
        let mut out = Vec::new();
        let budget = self
            .data
            .len()
            .saturating_mul(DECODE_GROWTH_MAX)
            .max(1 << 16);
        let mut decoded = 0usize;
        let mut it = self.iter(|_, _| Ordering::Equal);
        it.seek_to_first()?;
        while it.valid() {
            decoded += it.key.len();
            if decoded > budget {
                return Err("keys decode to implausibly many bytes (prefix sharing)");
            }
            out.push((it.key.to_vec(), it.value.clone()));
            it.next()?;
        }
        Ok(out)
    }
}

/// How many times its size a block may decode to in `decode_all`. A block
/// from `BlockBuilder` stores a whole key at every restart point (at most
/// every `restart_interval` entries), so each stored key byte expands to at
/// most `restart_interval` decoded bytes; 64 covers intervals up to 64.
const DECODE_GROWTH_MAX: usize = 64;

fn read_u32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// A forward iterator over one block. Owns its block (no borrows).
///
/// After any error the iterator is invalid; callers stop using it.
#[derive(Debug)]
pub struct BlockIter {
    block: Block,
    cmp: Compare,
    /// Offset of the entry after the current one.
    next: usize,
    /// The current key, rebuilt from its shared prefix and delta; short
    /// keys (most internal keys) stay on the stack.
    key: SmallVec<[u8; 48]>,
    value: Range<usize>,
    valid: bool,
}

impl BlockIter {
    /// True if positioned on an entry.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// Current key (empty if not valid).
    pub fn key(&self) -> &[u8] {
        if self.valid { &self.key } else { &[] }
    }

    /// Current value (empty if not valid).
    pub fn value(&self) -> &[u8] {
        if self.valid {
            self.block.data.get(self.value.clone()).unwrap_or_default()
        } else {
            &[]
        }
    }

    /// Range of the current value within [`Block::data`].
    pub fn value_range(&self) -> Range<usize> {
        self.value.clone()
    }

    /// The block iterated.
    pub fn block(&self) -> &Block {
        &self.block
    }

    /// Positions on the first entry (invalid if the block is empty).
    pub fn seek_to_first(&mut self) -> Result<(), Malformed> {
        self.key.clear();
        self.next = 0;
        self.parse_next()
    }

    /// Moves to the next entry; invalid past the last one.
    pub fn next(&mut self) -> Result<(), Malformed> {
        if !self.valid {
            return Ok(());
        }
        self.parse_next()
    }

    /// Positions on the first entry with key >= `target` (invalid if none).
    pub fn seek(&mut self, target: &[u8]) -> Result<(), Malformed> {
        // Last restart point whose key is < target.
        let (mut lo, mut hi) = (0usize, self.block.num_restarts - 1);
        if let Some(tied) = self.hinted(target) {
            // Restarts before `tied` are below the target and those after
            // it above; only those whose words tie need their keys.
            lo = tied.start.saturating_sub(1);
            hi = tied.end.saturating_sub(1).max(lo);
        }
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            let at = self.block.restart(mid).ok_or("restart array truncated")?;
            let e = self.block.decode_entry(at)?;
            if e.shared != 0 {
                self.valid = false;
                return Err("restart entry shares a prefix");
            }
            let k = self
                .block
                .data
                .get(e.delta)
                .ok_or("entry key out of range")?;
            if (self.cmp)(k, target) == Ordering::Less {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.key.clear();
        self.next = self.block.restart(lo).ok_or("restart array truncated")?;
        loop {
            self.parse_next()?;
            if !self.valid || (self.cmp)(&self.key, target) != Ordering::Less {
                return Ok(());
            }
        }
    }

    /// With hints and a target that shares their prefix: the restarts
    /// whose words tie with the target's (`KeyWords::narrow`).
    fn hinted(&self, target: &[u8]) -> Option<Range<usize>> {
        let h = self.block.hints.as_deref()?;
        h.words.narrow((h.part)(target))
    }

    fn parse_next(&mut self) -> Result<(), Malformed> {
        self.valid = false;
        if self.next >= self.block.restarts_at {
            self.next = self.block.restarts_at;
            return Ok(());
        }
        let e = self.block.decode_entry(self.next)?;
        if e.shared > self.key.len() {
            return Err("entry shares more bytes than the previous key has");
        }
        let delta = self
            .block
            .data
            .get(e.delta)
            .ok_or("entry key out of range")?;
        self.key.truncate(e.shared);
        self.key.extend_from_slice(delta);
        self.value = e.value;
        self.next = e.next;
        self.valid = true;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
        a.cmp(b)
    }

    fn sample(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| {
                let k = format!("prefix/shared/{:06}", i * 3).into_bytes();
                let v = if i % 7 == 0 {
                    Vec::new()
                } else if i % 50 == 1 {
                    vec![b'x'; 5000]
                } else {
                    format!("v{i}").into_bytes()
                };
                (k, v)
            })
            .collect()
    }

    fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Block {
        let mut b = BlockBuilder::new(interval);
        for (k, v) in entries {
            b.add(k, v);
        }
        let est = b.estimated_size();
        let bytes = b.finish();
        assert_eq!(est, bytes.len());
        assert!(b.is_empty());
        Block::new(bytes.into()).unwrap()
    }

    #[test]
    fn block_round_trip_and_seek() {
        for interval in [1, 2, 16, 1000] {
            for n in [0, 1, 2, 17, 300] {
                let entries = sample(n);
                let block = build(&entries, interval);
                assert_eq!(block.decode_all().unwrap().len(), n);
                let mut it = block.iter(bytewise);
                it.seek_to_first().unwrap();
                for (k, v) in &entries {
                    assert!(it.valid());
                    assert_eq!(it.key(), &k[..]);
                    assert_eq!(it.value(), &v[..]);
                    it.next().unwrap();
                }
                assert!(!it.valid());
                let all = block.decode_all().unwrap();
                for (i, (k, r)) in all.iter().enumerate() {
                    assert_eq!(k, &entries[i].0);
                    assert_eq!(&block.data()[r.clone()], &entries[i].1[..]);
                }
                // seeks: exact keys, keys between, before first, after last
                for i in 0..n {
                    let k = &entries[i].0;
                    it.seek(k).unwrap();
                    assert_eq!(it.key(), &k[..]);
                    let mut between = k.clone();
                    between.push(0);
                    it.seek(&between).unwrap();
                    if i + 1 < n {
                        assert_eq!(it.key(), &entries[i + 1].0[..]);
                    } else {
                        assert!(!it.valid());
                    }
                }
                it.seek(b"").unwrap();
                assert_eq!(it.valid(), n > 0);
                it.seek(b"zzz").unwrap();
                assert!(!it.valid());
            }
        }
    }

    /// Keys ordered by all but their last two bytes first (a stand-in
    /// for internal keys and their tags), then by those two descending.
    fn front(k: &[u8]) -> &[u8] {
        &k[..k.len().saturating_sub(2)]
    }

    fn by_front(a: &[u8], b: &[u8]) -> Ordering {
        front(a)
            .cmp(front(b))
            .then_with(|| b[b.len().saturating_sub(2)..].cmp(&a[a.len().saturating_sub(2)..]))
    }

    /// A seek through the hints lands where a seek through the restart
    /// keys does: keys with a long shared prefix, whole windows alike,
    /// keys that are prefixes of others (zero padding), several versions
    /// of one front, and targets outside the prefix.
    #[test]
    fn hinted_seeks_land_where_plain_seeks_do() {
        let mut fronts: Vec<Vec<u8>> = Vec::new();
        for i in 0..150u32 {
            let mut f = b"shared/".to_vec();
            f.extend_from_slice(&(i / 30).to_be_bytes());
            f.extend_from_slice(b"tiedtied");
            f.extend_from_slice(&i.to_be_bytes()[..(i % 5) as usize]);
            fronts.push(f);
            let mut z = b"shared/".to_vec();
            z.extend(std::iter::repeat_n(0u8, (i % 9) as usize));
            fronts.push(z);
        }
        fronts.sort();
        fronts.dedup();
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (n, f) in fronts.iter().enumerate() {
            for version in (0..1 + n % 3).rev() {
                let mut k = f.clone();
                k.extend_from_slice(&(version as u16).to_be_bytes());
                entries.push((k, format!("{n}/{version}").into_bytes()));
            }
        }
        entries.sort_by(|a, b| by_front(&a.0, &b.0));
        let mut targets: Vec<Vec<u8>> = Vec::new();
        for f in &fronts {
            for tag in [0u16, 1, 2, u16::MAX] {
                let mut t = f.clone();
                t.extend_from_slice(&tag.to_be_bytes());
                targets.push(t);
            }
            let mut longer = f.clone();
            longer.extend_from_slice(&[0, 0, 0]);
            targets.push(longer);
        }
        for outside in [&b""[..], b"ab", b"shared", b"sharee\0\0", b"zz\0\0"] {
            targets.push(outside.to_vec());
        }
        for interval in [1, 2, 3, 16] {
            let plain = build(&entries, interval);
            let hinted = plain.clone().with_hints(front).unwrap();
            assert!(hinted.hint_bytes() > 0);
            let h = hinted.hints.as_deref().unwrap();
            assert!(
                h.words.prefix.len() >= b"shared/".len(),
                "{:?}",
                h.words.prefix
            );
            for t in &targets {
                let mut a = plain.iter(by_front);
                let mut b = hinted.iter(by_front);
                a.seek(t).unwrap();
                b.seek(t).unwrap();
                assert_eq!(a.valid(), b.valid(), "interval {interval} target {t:?}");
                assert_eq!(a.key(), b.key(), "interval {interval} target {t:?}");
                assert_eq!(a.value(), b.value());
                let want = entries
                    .iter()
                    .find(|(k, _)| by_front(k, t) != Ordering::Less);
                assert_eq!(want.map(|(k, _)| &k[..]), b.valid().then(|| b.key()));
            }
        }
    }

    #[test]
    fn block_rejects_truncation_and_damage_without_panic() {
        let entries = sample(40);
        let bytes = build(&entries, 4).data().to_vec();
        for cut in 0..bytes.len() {
            // A cut block must either be refused or decode without panic;
            // most cuts break the restart array.
            if let Ok(b) = Block::new(bytes[..cut].to_vec().into()) {
                let _ = b.decode_all();
            }
        }
        for cut in 0..4 {
            assert!(Block::new(bytes[..cut].to_vec().into()).is_err());
        }
        for i in 0..bytes.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= x;
                if let Ok(block) = Block::new(b.into()) {
                    let _ = block.decode_all();
                    let mut it = block.iter(bytewise);
                    let _ = it.seek(&entries[20].0);
                    let _ = it.seek(b"");
                }
            }
        }
        assert!(Block::new(vec![0, 0, 0, 0].into()).is_err()); // zero restarts
        assert!(Block::new(vec![5, 0, 0, 0, 1, 0, 0, 0].into()).is_err()); // restart != 0
        assert!(Block::new(vec![0xff, 0xff, 0xff, 0xff].into()).is_err());
    }
}
