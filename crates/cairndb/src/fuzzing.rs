//! Fuzzing entry points: the code behind the cargo-fuzz targets in `fuzz/`
//! and the corpus replay test `tests/fuzz_corpus.rs`. Not part of the API
//! (hidden from the docs, may change with any commit).
//!
//! Each function takes arbitrary bytes, drives one decoder, or the whole
//! engine, through every read path it has, and returns how much it
//! decoded. Errors from the code under test are expected; a panic is a
//! bug, either in that code (a decoder must return an error, never panic,
//! allocate without bound or loop) or in a property asserted here: a round
//! trip, two read paths that must agree, damage classified as
//! docs/format.md says, or the `BTreeMap` model of [`ops_model`].
//!
//! Every on-disk structure is guarded by a CRC, which random mutation
//! almost never keeps valid. So most inputs start with a mode byte choosing
//! between the raw bytes (the decoder's first line of defence) and a
//! structure built from the input with valid checksums (what lies behind
//! the CRC: framing, varints, restart arrays, handles, edits).
//!
//! [`seed_corpus`] makes the seed inputs kept in `fuzz/corpus/` from real
//! engine files. Every function here runs single-threaded apart from the
//! engine's own background threads, and shares nothing between calls
//! except the immutable base image of [`open_image`].

use crate::cache::BlockCache;
use crate::error::Error;
use crate::format::batch as batch_codec;
use crate::format::block::{Block, BlockBuilder, Decoded};
use crate::format::coding::{Reader, crc, crc2};
use crate::format::filter::{self, TableFilter};
use crate::format::key::{self, Kind};
use crate::format::log::{self, Framing, RecordKind, Tail};
use crate::format::manifest::{Edit, MANIFEST_FORMAT, MANIFEST_FORMAT_MIN};
use crate::format::table::{
    FOOTER_LEN, TABLE_MAGIC, TABLE_VERSION, TRAILER_LEN, Table, TableOptions, TableWriter,
};
use crate::io::{self, Crash, Fault, FaultKind, Fs, MemFs, OpKind};
use crate::version::{Reaper, Version};
use crate::{Db, Options, Snapshot, WriteBatch, WriteOptions};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Records a sealed log built from one input may hold.
const LOG_RECORDS_MAX: usize = 64;
/// Entries a built block or table may hold.
const ENTRIES_MAX: usize = 300;
/// Keys a built filter may hold.
const FILTER_KEYS_MAX: usize = 512;
/// Keys probed in one table or block (beyond those built from the input).
const PROBES_MAX: usize = 48;
/// Edits (add a file, flip a byte, ...) one `open_image` input may make.
const IMAGE_EDITS_MAX: usize = 32;
/// Operations one `ops_model` input may run.
const MODEL_OPS_MAX: usize = 300;
/// Reopens one `ops_model` input may ask for (each costs a recovery).
const MODEL_REOPENS_MAX: usize = 12;
/// Database states tracked across failed writes (each may or may not be
/// applied); beyond it the next reopen is not checked.
const MODEL_CANDIDATES_MAX: usize = 64;

/// A cursor over fuzzer input. Reads past the end give zeros and empty
/// slices, so every input is valid and short inputs mean "the defaults".
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Input { data }
    }
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.u8();
        }
        u64::from_le_bytes(b)
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        taken
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

fn expect_corruption(e: &Error, what: &str) {
    assert!(e.is_corruption(), "{what}: expected Corruption, got {e}");
}

// ---------------------------------------------------------------------------
// Logs: journal and manifest framing

use crate::recovery::{journal_continues, manifest_continues};

/// Scans `image` with `continues` and checks what format.md §Log records
/// promises whatever the bytes: the continuation rule changes only how the
/// end is classified, never which records are found; records lie back to
/// back from offset 0; a bad end is reported exactly where the next record
/// should have started; `Clean` means every byte was used.
fn check_log<'a>(
    image: &'a [u8],
    framing: Framing,
    continues: impl Fn(RecordKind, &[u8], &[log::Record<'a>]) -> bool,
) -> log::Scan<'a> {
    let scan = log::scan_framed(image, framing, continues);
    let any = log::scan_framed(image, framing, |_, _, _| true);
    let never = log::scan_framed(image, framing, |_, _, _| false);
    assert_eq!(scan.records, any.records, "records depend on the rule");
    assert_eq!(scan.records, never.records, "records depend on the rule");
    let mut end = 0usize;
    for &(offset, _, payload) in &scan.records {
        assert_eq!(offset, end as u64, "records are not back to back");
        let start = end + log::HEADER_LEN;
        assert_eq!(image.get(start..start + payload.len()), Some(payload));
        end = start + payload.len();
    }
    let end = end as u64;
    match (scan.tail, never.tail) {
        (Tail::Clean, Tail::Clean) => assert_eq!(end, image.len() as u64),
        (Tail::Torn { offset } | Tail::Damaged { offset }, Tail::Torn { offset: torn }) => {
            assert_eq!(offset, end, "bad end reported away from the last record");
            assert_eq!(torn, end);
        }
        tails => panic!("tails disagree: {tails:?}"),
    }
    if matches!(scan.tail, Tail::Damaged { .. }) {
        assert!(matches!(any.tail, Tail::Damaged { .. }));
    }
    scan
}

/// A log built from fuzzer input with valid checksums, then cut or damaged
/// as the input says, and the records it was built from.
struct SealedLog {
    framing: Framing,
    image: Vec<u8>,
    records: Vec<(u64, RecordKind, Vec<u8>)>,
    damage: Damage,
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    None,
    /// The image was cut to this length.
    Cut(usize),
    /// The byte at this offset was changed.
    Flip(usize),
}

/// Appends up to `max` records described by `input` to `image`: per
/// record a kind selector (into `kinds`), a u16 length and the payload.
/// Numbered kinds are framed for journal `number`.
fn sealed_records(
    input: &mut Input<'_>,
    kinds: &[RecordKind],
    number: u64,
    max: usize,
    image: &mut Vec<u8>,
) -> Vec<(u64, RecordKind, Vec<u8>)> {
    let mut records = Vec::new();
    while !input.is_empty() && records.len() < max {
        let sel = usize::from(input.u8());
        let kind = kinds
            .get(sel % kinds.len().max(1))
            .copied()
            .unwrap_or(RecordKind::Edit);
        let len = usize::from(input.u16());
        let payload = input.bytes(len).to_vec();
        let offset = image.len() as u64;
        log::encode_record_parts(image, kind, number, &[], &payload);
        records.push((offset, kind, payload));
    }
    records
}

impl SealedLog {
    /// Input: damage selector, damage offset (u16), xor mask, then records
    /// as in [`sealed_records`].
    /// `kinds` must all be of `framing`.
    fn build(input: &mut Input<'_>, kinds: &[RecordKind], framing: Framing) -> SealedLog {
        let how = input.u8();
        let at = usize::from(input.u16());
        let mask = input.u8().max(1);
        let mut image = Vec::new();
        let number = match framing {
            Framing::Numbered(n) => n,
            Framing::Plain => 0,
        };
        let records = sealed_records(input, kinds, number, LOG_RECORDS_MAX, &mut image);
        let damage = match how % 4 {
            2 => {
                let cut = at % (image.len() + 1);
                image.truncate(cut);
                Damage::Cut(cut)
            }
            3 if !image.is_empty() => {
                let i = at % image.len();
                if let Some(b) = image.get_mut(i) {
                    *b ^= mask;
                }
                Damage::Flip(i)
            }
            _ => Damage::None,
        };
        SealedLog {
            framing,
            image,
            records,
            damage,
        }
    }

    /// Scans the image with `continues` and checks the result against how
    /// it was built: intact logs read back exactly; a cut keeps the
    /// records before it and is a torn tail (format.md: "every truncation
    /// is a torn tail keeping a prefix"); a changed byte is caught by a
    /// CRC, losing its record and everything after, and is `Damaged` when
    /// an intact record follows.
    fn check<'a>(
        &'a self,
        continues: impl Fn(RecordKind, &[u8], &[log::Record<'a>]) -> bool,
    ) -> log::Scan<'a> {
        let scan = check_log(&self.image, self.framing, continues);
        let end_of = |r: &(u64, RecordKind, Vec<u8>)| r.0 as usize + log::HEADER_LEN + r.2.len();
        let expect_prefix = |n: usize| {
            let want: Vec<log::Record<'_>> = self
                .records
                .iter()
                .take(n)
                .map(|(o, k, p)| (*o, *k, p.as_slice()))
                .collect();
            assert_eq!(scan.records, want, "{:?}", self.damage);
        };
        match self.damage {
            Damage::None => {
                expect_prefix(self.records.len());
                assert_eq!(scan.tail, Tail::Clean);
            }
            Damage::Cut(cut) => {
                let kept = self.records.iter().take_while(|r| end_of(r) <= cut).count();
                expect_prefix(kept);
                let boundary = self.records.get(kept).is_none_or(|r| r.0 as usize == cut);
                let never = log::scan_framed(&self.image, self.framing, |_, _, _| false);
                if boundary {
                    assert_eq!(never.tail, Tail::Clean, "cut at a record boundary");
                } else {
                    assert!(
                        matches!(never.tail, Tail::Torn { .. }),
                        "cut inside a record"
                    );
                }
            }
            Damage::Flip(i) => {
                let hit = self.records.iter().take_while(|r| end_of(r) <= i).count();
                expect_prefix(hit);
                let offset = self.records.get(hit).map_or(0, |r| r.0);
                let never = log::scan_framed(&self.image, self.framing, |_, _, _| false);
                assert_eq!(never.tail, Tail::Torn { offset });
                if hit + 1 < self.records.len() {
                    let any = log::scan_framed(&self.image, self.framing, |_, _, _| true);
                    assert_eq!(any.tail, Tail::Damaged { offset }, "intact records follow");
                }
            }
        }
        scan
    }
}

/// Ops in a journal record's batch (0 if it is not a batch record or does
/// not decode), after running the batch checks on it.
fn journal_record_ops(kind: RecordKind, payload: &[u8]) -> usize {
    match batch_codec::split_journal_record(kind, payload) {
        Some((_, rep)) => batch(rep),
        None => 0,
    }
}

/// Journal files: log framing (`log::scan` with the journal's continuation
/// rule), then every record's batch.
///
/// First byte even: the rest is a journal image. Odd: the rest describes
/// records framed with valid checksums, then cut or damaged
/// ([`SealedLog::build`]); the scan must classify the damage as specified.
/// Its bit 1 picks the numbered framing of journal format 3 (then a u16
/// journal number follows) over the plain one.
/// Returns the number of batch ops decoded.
pub fn journal(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    let how = input.u8();
    // Bit 1: journal format 3, numbered framing, the journal's number in
    // the next two bytes; else the plain framing of formats 1 and 2.
    let numbered = how & 2 != 0;
    let framing = if numbered {
        Framing::Numbered(u64::from(input.u16()))
    } else {
        Framing::Plain
    };
    if how.is_multiple_of(2) {
        let scan = check_log(input.rest(), framing, journal_continues(0));
        scan.records
            .iter()
            .map(|&(_, k, p)| journal_record_ops(k, p))
            .sum()
    } else {
        let plain = [
            RecordKind::MarkedBatch,
            RecordKind::MarkedBatch,
            RecordKind::Batch,
            RecordKind::Edit,
        ];
        let kinds: &[RecordKind] = if numbered {
            &[RecordKind::NumberedBatch]
        } else {
            &plain
        };
        let sealed = SealedLog::build(&mut input, kinds, framing);
        let scan = sealed.check(journal_continues(0));
        scan.records
            .iter()
            .map(|&(_, k, p)| journal_record_ops(k, p))
            .sum()
    }
}

/// A batch payload (format.md §Batch): decode, and if it decodes, encode
/// it again and compare; frame it as a journal record and read it back.
/// Returns the number of ops.
pub fn batch(data: &[u8]) -> usize {
    let Ok(decoded) = batch_codec::decode(data) else {
        return 0;
    };
    let mut rep = batch_codec::new_payload();
    for op in &decoded.ops {
        batch_codec::push_op(&mut rep, op.keyspace, op.kind, op.key, op.value);
    }
    let count = u32::try_from(decoded.ops.len()).unwrap_or(u32::MAX);
    batch_codec::set_count(&mut rep, count);
    batch_codec::set_seqno(&mut rep, decoded.first_seqno);
    match batch_codec::decode(&rep) {
        Ok(again) => {
            assert_eq!(again.first_seqno, decoded.first_seqno);
            // Keyspaces, kinds, keys and values; not `value_at`, which
            // moves with the varints before it.
            fn content<'a>(ops: &[batch_codec::Op<'a>]) -> Vec<(u32, Kind, &'a [u8], &'a [u8])> {
                ops.iter()
                    .map(|op| (op.keyspace, op.kind, op.key, op.value))
                    .collect()
            }
            assert_eq!(
                content(&again.ops),
                content(&decoded.ops),
                "batch does not survive a round trip"
            );
        }
        Err(e) => panic!("re-encoded batch does not decode: {e}"),
    }
    // Varints are the only freedom in the encoding: an input of the same
    // length as its re-encoding used minimal varints and is identical.
    if rep.len() == data.len() {
        assert_eq!(rep, data, "same length, different encoding");
    }
    let mut record = Vec::new();
    batch_codec::encode_journal_record(&mut record, 7, decoded.first_seqno, data);
    let scan = log::scan_framed(&record, Framing::Numbered(7), |_, _, _| false);
    assert_eq!(scan.tail, Tail::Clean);
    let found: Vec<_> = scan
        .records
        .iter()
        .map(|&(_, k, p)| batch_codec::split_journal_record(k, p))
        .collect();
    assert_eq!(found, vec![Some((decoded.first_seqno, data))]);
    decoded.ops.len()
}

/// A [`Reaper`] on a scratch file system, for replaying edits into a
/// [`Version`] (nothing is marked obsolete, so nothing is deleted).
fn scratch_reaper() -> Arc<Reaper> {
    Arc::new(Reaper::new(
        Arc::new(MemFs::new()),
        PathBuf::from("/scratch"),
        0,
        Box::new(|_| {}),
    ))
}

/// Decodes one edit; if it decodes, its encoding must decode to it again.
/// Returns the number of fields.
fn edit_round_trip(payload: &[u8]) -> usize {
    let Ok(edit) = Edit::decode(payload) else {
        return 0;
    };
    assert_eq!(
        Edit::decode(&edit.encode()).as_ref(),
        Ok(&edit),
        "edit does not survive a round trip"
    );
    1 + edit.added.len() + edit.removed.len()
}

/// Replays manifest records into a version as `recovery::read_manifest`
/// does, stopping at the first that recovery would reject. Returns the
/// number of tables in the final version.
fn replay_edits(records: &[log::Record<'_>]) -> usize {
    let reaper = scratch_reaper();
    let mut version = Version::default();
    for (i, &(_, kind, payload)) in records.iter().enumerate() {
        edit_round_trip(payload);
        if kind != RecordKind::Edit {
            break;
        }
        let Ok(edit) = Edit::decode(payload) else {
            break;
        };
        if i == 0
            && !edit
                .format
                .is_some_and(|f| (MANIFEST_FORMAT_MIN..=MANIFEST_FORMAT).contains(&f))
        {
            break;
        }
        match version.apply(&edit, &reaper) {
            Ok((next, _removed)) => version = next,
            Err(_) => break,
        }
    }
    let _ = version.check();
    version.table_count()
}

/// Manifest files and version edits (format.md §Manifest).
///
/// First byte mod 3: 0, the rest is a manifest image, scanned and replayed
/// into a version; 1, the rest is one edit payload (decode and round
/// trip); 2, the rest describes edit records framed with valid checksums
/// and then damaged ([`SealedLog::build`]), replayed. Returns a count of
/// what was decoded.
pub fn manifest(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    match input.u8() % 3 {
        0 => {
            let scan = check_log(input.rest(), Framing::Plain, manifest_continues);
            replay_edits(&scan.records)
        }
        1 => edit_round_trip(input.rest()),
        _ => {
            let kinds = [
                RecordKind::Edit,
                RecordKind::Edit,
                RecordKind::Edit,
                RecordKind::MarkedBatch,
            ];
            let sealed = SealedLog::build(&mut input, &kinds, Framing::Plain);
            let scan = sealed.check(manifest_continues);
            replay_edits(&scan.records)
        }
    }
}

// ---------------------------------------------------------------------------
// Blocks and filters

/// A key comparator (`block::Compare`).
type Compare = fn(&[u8], &[u8]) -> Ordering;

fn bytewise(a: &[u8], b: &[u8]) -> Ordering {
    a.cmp(b)
}

/// Every entry of `block` by forward iteration with `cmp`.
fn iterate_block(block: &Block, cmp: Compare) -> Result<Decoded, &str> {
    let mut out = Vec::new();
    let mut it = block.iter(cmp);
    it.seek_to_first()?;
    while it.valid() {
        assert_eq!(block.data().get(it.value_range()), Some(it.value()));
        out.push((it.key().to_vec(), it.value_range()));
        it.next()?;
    }
    Ok(out)
}

/// True if every restart offset of `block` starts an entry of `entries`
/// (as decoded front to back) and that entry shares no prefix: the shape
/// a seek's binary search relies on. The reader checks the restart array
/// but not that it points at entry boundaries.
fn restarts_at_entries(block: &Block, entries: &Decoded) -> bool {
    let data: &[u8] = block.data();
    let Some(count_at) = data.len().checked_sub(4) else {
        return false;
    };
    let mut r = Reader::new(data.get(count_at..).unwrap_or_default());
    let Some(n) = r.u32_le() else {
        return false;
    };
    let Some(array_at) = (n as usize)
        .checked_mul(4)
        .and_then(|len| count_at.checked_sub(len))
    else {
        return false;
    };
    let mut starts: BTreeSet<usize> = BTreeSet::from([0]);
    starts.extend(entries.iter().map(|(_, v)| v.end));
    let mut restarts = Reader::new(data.get(array_at..count_at).unwrap_or_default());
    (0..n).all(|_| {
        restarts.u32_le().is_some_and(|at| {
            let at = at as usize;
            let shares_nothing = data
                .get(at..)
                .is_some_and(|e| Reader::new(e).varint() == Some(0));
            (entries.is_empty() || starts.contains(&at)) && shares_nothing
        })
    })
}

/// Runs every block read path on `bytes`: construction, forward iteration,
/// `decode_all` and seeks with both comparators to the block's own keys
/// and to `probes`. Whatever the bytes: `decode_all` equals forward
/// iteration and a seek lands on a key not below the target. If the
/// restart points sit on entries, that key is an entry of the block; if
/// the keys are also sorted, it is the first key >= target. Returns the
/// number of entries.
fn check_block(bytes: &[u8], probes: &[Vec<u8>]) -> usize {
    let Ok(block) = Block::new(Arc::from(bytes)) else {
        return 0;
    };
    let all = block.decode_all();
    let forward = iterate_block(&block, bytewise);
    assert_eq!(all, forward, "decode_all and forward iteration disagree");
    let entries = all.as_ref().ok();
    let mut targets: Vec<Vec<u8>> = probes.iter().take(PROBES_MAX).cloned().collect();
    if let Some(e) = entries {
        let step = (e.len() / 16).max(1);
        for (k, _) in e.iter().step_by(step) {
            targets.push(k.clone());
            let mut after = k.clone();
            after.push(0);
            targets.push(after);
            targets.push(k.get(..k.len() / 2).unwrap_or_default().to_vec());
        }
    }
    targets.push(Vec::new());
    // Restart points are checked for order and bounds but not for landing
    // on entries; a seek through one that does not starts decoding mid
    // entry and may find keys front-to-back decoding never sees.
    let aligned = entries.filter(|e| restarts_at_entries(&block, e));
    let compares: [Compare; 2] = [bytewise, key::compare];
    for cmp in compares {
        let exact = aligned.filter(|e| {
            e.windows(2).all(|w| match w {
                [a, b] => cmp(&a.0, &b.0) == Ordering::Less,
                _ => true,
            })
        });
        for t in &targets {
            let mut it = block.iter(cmp);
            if it.seek(t).is_err() {
                assert!(exact.is_none(), "seek failed on a well-formed block");
                continue;
            }
            if it.valid() {
                assert_ne!(cmp(it.key(), t), Ordering::Less, "seek landed below target");
                if let Some(e) = aligned {
                    let here = (it.key().to_vec(), it.value_range());
                    assert!(e.contains(&here), "seek landed on a key the block lacks");
                }
            }
            if let Some(e) = exact {
                let want = e.get(e.partition_point(|(k, _)| cmp(k, t) == Ordering::Less));
                match want {
                    Some((k, v)) => {
                        assert!(it.valid(), "seek missed an entry");
                        assert_eq!((it.key(), it.value_range()), (k.as_slice(), v.clone()));
                    }
                    None => assert!(!it.valid(), "seek past the end found an entry"),
                }
            }
            for _ in 0..2 {
                if it.next().is_err() {
                    break;
                }
            }
        }
    }
    entries.map_or(0, Vec::len)
}

/// Key/value pairs described by `input`: per pair a key length (< 24) and
/// key bytes, a value length (< 48) and value bytes.
fn input_pairs(input: &mut Input<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    while !input.is_empty() && out.len() < ENTRIES_MAX {
        let klen = usize::from(input.u8() % 24);
        let k = input.bytes(klen).to_vec();
        let vlen = usize::from(input.u8() % 48);
        let v = input.bytes(vlen).to_vec();
        out.push((k, v));
    }
    out
}

/// Data and index blocks (format.md §Block contents).
///
/// First byte even: the rest is a block (without trailer). Odd: a restart
/// interval and key/value pairs; they are sorted, built into a block with
/// `BlockBuilder`, and must read back exactly. Returns the entry count.
pub fn block(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    if input.u8().is_multiple_of(2) {
        return check_block(input.rest(), &[]);
    }
    let interval = 1 + usize::from(input.u8() % 16);
    let mut pairs = input_pairs(&mut input);
    pairs.sort();
    pairs.dedup_by(|a, b| a.0 == b.0);
    let mut builder = BlockBuilder::new(interval);
    for (k, v) in &pairs {
        builder.add(k, v);
    }
    let estimate = builder.estimated_size();
    let bytes = builder.finish();
    assert_eq!(estimate, bytes.len());
    let block = match Block::new(Arc::from(bytes.as_slice())) {
        Ok(b) => b,
        Err(e) => panic!("a built block does not decode: {e}"),
    };
    let all = match block.decode_all() {
        Ok(all) => all,
        Err(e) => panic!("a built block does not iterate: {e}"),
    };
    let read: Vec<(&[u8], &[u8])> = all
        .iter()
        .map(|(k, v)| {
            (
                k.as_slice(),
                block.data().get(v.clone()).unwrap_or_default(),
            )
        })
        .collect();
    let want: Vec<(&[u8], &[u8])> = pairs
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    assert_eq!(read, want, "a built block reads back differently");
    let probes: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| k.clone()).collect();
    check_block(&bytes, &probes)
}

/// Filter blocks (format.md §Filter block).
///
/// First byte even: the rest is a filter block, decoded and probed. Odd:
/// the rest is keys (a length byte, then the key); a filter is built over
/// them, encoded, decoded, and must answer "maybe" for every one of them.
/// Returns the number of probes answered "maybe".
pub fn filter(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    if input.u8().is_multiple_of(2) {
        let bytes = input.rest();
        let Ok(f) = TableFilter::decode(bytes) else {
            return 0;
        };
        let _ = (f.kind(), f.memory_bytes());
        let mut maybe = usize::from(f.may_contain(b""));
        maybe += bytes
            .chunks(7)
            .take(PROBES_MAX)
            .filter(|k| f.may_contain(k))
            .count();
        return maybe;
    }
    let mut keys = Vec::new();
    while !input.is_empty() && keys.len() < FILTER_KEYS_MAX {
        let len = usize::from(input.u8() % 16);
        keys.push(input.bytes(len));
    }
    let mut hashes: Vec<u64> = keys.iter().map(|k| filter::hash_key(k)).collect();
    let bits = if keys.len() % 2 == 0 { 8 } else { 16 };
    let encoded = filter::build(&mut hashes, bits);
    let f = match TableFilter::decode(&encoded) {
        Ok(f) => f,
        Err(e) => panic!("a built filter does not decode: {e}"),
    };
    assert_eq!(Some(f.kind() as u8), encoded.first().copied());
    for k in &keys {
        assert!(f.may_contain(k), "false negative for {k:?}");
    }
    keys.len()
}

// ---------------------------------------------------------------------------
// Tables

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Writes `bytes` as the file `path` of `fs`.
fn put_file(fs: &MemFs, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs.create(path)?;
    f.append(bytes)?;
    f.sync()
}

/// Opens the table image `bytes` from a fresh in-memory file.
fn open_table(bytes: &[u8], cache: bool) -> crate::Result<Arc<Table>> {
    let fs = MemFs::new();
    let path = Path::new("/t/000001.table");
    let io_err = |e| Error::io("writing the table image", e);
    put_file(&fs, path, bytes).map_err(io_err)?;
    let file = fs.open(path).map_err(io_err)?;
    let cache = cache.then(|| Arc::new(BlockCache::new(64 << 10)));
    Table::open(file, path.to_path_buf(), 1, cache).map(Arc::new)
}

/// At most `limit` entries of a table cursor.
fn take_cursor(mut c: crate::format::table::TableCursor, limit: usize) -> crate::Result<Entries> {
    let mut out = Vec::new();
    while out.len() < limit && c.advance()? {
        out.push((c.key().to_vec(), c.value().to_vec()));
    }
    Ok(out)
}

/// Keys to probe a table with: a spread of its own keys, each also as
/// seek keys just before and after it, and a few keys of no table.
fn table_probes(entries: &Entries) -> Vec<Vec<u8>> {
    let step = (entries.len() / 16).max(1);
    let mut out = vec![Vec::new(), key::seek_key(b"", 0), b"zzzzzzzzzz".to_vec()];
    for (k, _) in entries.iter().step_by(step) {
        out.push(k.clone());
        if let Some((uk, tag)) = key::split(k) {
            let seqno = key::tag_seqno(tag);
            out.push(key::seek_key(uk, seqno));
            out.push(key::encode(uk, 0));
            out.push(key::seek_key(uk, seqno.saturating_sub(1)));
        }
    }
    out.truncate(PROBES_MAX);
    out
}

/// Every read path of a table whose bytes are anything: full cursors both
/// ways, point lookups and seeks both ways. Errors must be `Corruption`
/// (the file is in memory; nothing else can fail). Whatever the bytes,
/// the two full cursors agree and a lookup returns no entry newer than
/// its snapshot. Returns the number of entries.
fn check_table_image(t: &Arc<Table>) -> usize {
    let forward = take_cursor(t.cursor_forward(None), usize::MAX);
    let backward = take_cursor(t.cursor_backward(None), usize::MAX);
    for r in [&forward, &backward] {
        if let Err(e) = r {
            expect_corruption(e, "table cursor");
        }
    }
    if let (Ok(f), Ok(b)) = (&forward, &backward) {
        assert!(f.iter().eq(b.iter().rev()), "cursors disagree");
    }
    let probes = forward.as_ref().map(table_probes).unwrap_or_default();
    for p in &probes {
        let uk = key::split(p).map_or(p.as_slice(), |(uk, _)| uk);
        let _ = t.may_contain(uk);
        for snapshot in [
            0,
            1,
            u64::MAX,
            key::split(p).map_or(0, |(_, tag)| key::tag_seqno(tag)),
        ] {
            match t.get(uk, snapshot) {
                Ok(Some((tag, _))) => {
                    assert!(key::tag_seqno(tag) <= snapshot, "get saw past its snapshot");
                }
                Ok(None) => {}
                Err(e) => expect_corruption(&e, "table get"),
            }
        }
        for backward in [false, true] {
            let c = if backward {
                t.cursor_backward(Some(p))
            } else {
                t.cursor_forward(Some(p))
            };
            if let Err(e) = take_cursor(c, 4) {
                expect_corruption(&e, "table seek");
            }
        }
    }
    let _ = t.memory_bytes();
    forward.map_or(0, |f| f.len())
}

/// The entries of a table image if it is well formed beyond what
/// `Table::open` checks (which a resealed image need not be): every data
/// block decodes with its restart points on entries, keys are internal
/// keys in strictly increasing order across the table, each index key is
/// its block's last key, and every data block's trailer holds. Lookups and
/// seeks then have exact answers.
fn well_formed_entries(img: &[u8]) -> Option<Entries> {
    let [index, _, _] = footer_handles(img)?;
    let limit = img.len().checked_sub(FOOTER_LEN)?;
    let index = Block::new(Arc::from(block_at(img, index, limit)?)).ok()?;
    let index_keys: Vec<Vec<u8>> = index.decode_all().ok()?.into_iter().map(|e| e.0).collect();
    let handles = index_handles(index.data());
    if handles.len() != index_keys.len() {
        return None;
    }
    let mut out: Entries = Vec::new();
    for (h, index_key) in handles.iter().zip(&index_keys) {
        let body = block_at(img, *h, limit)?;
        let trailer_at = usize::try_from(h.0).ok()? + body.len();
        let mut trailer = Reader::new(img.get(trailer_at..trailer_at + TRAILER_LEN)?);
        if trailer.u8()? != 0 || trailer.u32_le()? != crc2(body, &[0]) {
            return None;
        }
        let block = Block::new(Arc::from(body)).ok()?;
        let entries = block.decode_all().ok()?;
        if !restarts_at_entries(&block, &entries) || entries.last().map(|e| &e.0) != Some(index_key)
        {
            return None;
        }
        for (k, v) in entries {
            out.push((k, block.data().get(v)?.to_vec()));
        }
    }
    let sorted = out.windows(2).all(|w| match w {
        [a, b] => key::compare(&a.0, &b.0) == Ordering::Less,
        _ => true,
    });
    (sorted && out.iter().all(|(k, _)| k.len() >= key::TAG_LEN)).then_some(out)
}

/// What `Table::get(uk, snapshot)` must return for a table holding
/// `entries` (sorted): the newest entry of `uk` visible at `snapshot`.
fn expected_get(entries: &Entries, uk: &[u8], snapshot: u64) -> Option<(u64, Vec<u8>)> {
    entries.iter().find_map(|(k, v)| {
        let (u, tag) = key::split(k)?;
        (u == uk && key::tag_seqno(tag) <= snapshot).then(|| (tag, v.clone()))
    })
}

/// Every read path of a table written from `entries`: each must return
/// exactly the entries' answer, or, only if `damaged`, `Corruption`.
fn check_table_model(t: &Arc<Table>, entries: &Entries, damaged: bool) -> usize {
    let check = |what: &str, r: crate::Result<bool>| match r {
        Ok(right) => assert!(right, "{what} returned wrong data"),
        Err(e) => {
            expect_corruption(&e, what);
            assert!(damaged, "{what} failed on an undamaged table: {e}");
        }
    };
    check(
        "forward cursor",
        take_cursor(t.cursor_forward(None), usize::MAX).map(|g| g == *entries),
    );
    check(
        "backward cursor",
        take_cursor(t.cursor_backward(None), usize::MAX).map(|g| g.iter().eq(entries.iter().rev())),
    );
    for p in table_probes(entries) {
        let (uk, seqno) =
            key::split(&p).map_or((p.as_slice(), 0), |(uk, tag)| (uk, key::tag_seqno(tag)));
        if entries.iter().any(|(k, _)| key::user_key(k) == uk) {
            assert!(t.may_contain(uk), "filter lost a key");
        }
        for snapshot in [seqno, seqno.saturating_sub(1), u64::MAX, 0] {
            check(
                "get",
                t.get(uk, snapshot)
                    .map(|g| g == expected_get(entries, uk, snapshot)),
            );
        }
        let start = entries.partition_point(|(k, _)| key::compare(k, &p) == Ordering::Less);
        let want: Vec<_> = entries.iter().skip(start).take(4).cloned().collect();
        check(
            "forward seek",
            take_cursor(t.cursor_forward(Some(&p)), 4).map(|g| g == want),
        );
        let end = entries.partition_point(|(k, _)| key::compare(k, &p) != Ordering::Greater);
        let want: Vec<_> = entries.iter().take(end).rev().take(4).cloned().collect();
        check(
            "backward seek",
            take_cursor(t.cursor_backward(Some(&p)), 4).map(|g| g == want),
        );
    }
    entries.len()
}

/// Sets `img[at..at + bytes.len()]` if it is in range.
fn patch(img: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = at
        .checked_add(bytes.len())
        .and_then(|end| img.get_mut(at..end))
    {
        dst.copy_from_slice(bytes);
    }
}

/// The block handles in a table footer: index, filter, properties.
fn footer_handles(img: &[u8]) -> Option<[(u64, u64); 3]> {
    let footer_at = img.len().checked_sub(FOOTER_LEN)?;
    let mut r = Reader::new(img.get(footer_at..)?);
    let mut h = || Some((r.u64_le()?, r.u64_le()?));
    Some([h()?, h()?, h()?])
}

/// The bytes of the block at `handle`, if it lies within `img[..limit]`.
fn block_at(img: &[u8], (offset, size): (u64, u64), limit: usize) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    if end.checked_add(TRAILER_LEN)? > limit {
        return None;
    }
    img.get(start..end)
}

/// The data block handles listed by the index block `index`.
fn index_handles(index: &[u8]) -> Vec<(u64, u64)> {
    let Ok(block) = Block::new(Arc::from(index)) else {
        return Vec::new();
    };
    let Ok(entries) = block.decode_all() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|(_, v)| {
            let mut r = Reader::new(block.data().get(v.clone())?);
            Some((r.varint()?, r.varint()?))
        })
        .collect()
}

/// Makes a mutated table image checksum-valid again, so the fuzzer's
/// changes reach the decoders behind the CRCs: the footer's version and
/// magic are set, and the trailer CRC of every block the footer and the
/// index name (in range) and the footer CRC are recomputed.
fn reseal_table(img: &mut [u8]) {
    let Some(footer_at) = img.len().checked_sub(FOOTER_LEN) else {
        return;
    };
    patch(img, footer_at + 48, &TABLE_VERSION.to_le_bytes());
    patch(img, footer_at + 56, &TABLE_MAGIC);
    let Some([index, filter_h, props]) = footer_handles(img) else {
        return;
    };
    let mut handles = vec![index, filter_h, props];
    if let Some(block) = block_at(img, index, footer_at) {
        handles.extend(index_handles(block));
    }
    for h in handles {
        let Some(body) = block_at(img, h, footer_at) else {
            continue;
        };
        let end = body.len() + h.0 as usize;
        let ty = img.get(end).copied().unwrap_or(0);
        let c = crc2(body, &[ty]);
        patch(img, end + 1, &c.to_le_bytes());
    }
    if let Some(covered) = img.get(footer_at..footer_at + 52) {
        let c = crc(covered);
        patch(img, footer_at + 52, &c.to_le_bytes());
    }
}

/// Sorted table entries described by `input`: per entry a header byte
/// (kind in bit 7, a large value in bit 6, user-key length in bits 0-2),
/// the user key (bytes folded onto "abcd" so keys collide), a seqno byte
/// and a value length byte with the value.
fn input_entries(input: &mut Input<'_>) -> Entries {
    let mut out = Vec::new();
    while !input.is_empty() && out.len() < ENTRIES_MAX {
        let h = input.u8();
        let uk: Vec<u8> = input
            .bytes(usize::from(h & 7) % 6)
            .iter()
            .map(|b| b'a' + b % 4)
            .collect();
        let seqno = 1 + u64::from(input.u8());
        let kind = if h & 0x80 != 0 {
            Kind::Delete
        } else {
            Kind::Put
        };
        let value = if h & 0x40 != 0 {
            vec![h; 3000]
        } else {
            let len = usize::from(input.u8() % 32);
            input.bytes(len).to_vec()
        };
        let value = if kind == Kind::Delete {
            Vec::new()
        } else {
            value
        };
        out.push((key::encode(&uk, key::make_tag(seqno, kind as u8)), value));
    }
    out.sort_by(|a, b| key::compare(&a.0, &b.0));
    out.dedup_by(|a, b| key::compare(&a.0, &b.0) == Ordering::Equal);
    out
}

/// Writes `entries` with `TableWriter` into a fresh file; the bytes.
fn write_table(entries: &Entries, opts: &TableOptions) -> Vec<u8> {
    let fs = MemFs::new();
    let path = Path::new("/t/000002.table");
    let file = match fs.create(path) {
        Ok(f) => f,
        Err(e) => panic!("in-memory create failed: {e}"),
    };
    let mut w = TableWriter::new(file, path.to_path_buf(), opts);
    for (k, v) in entries {
        if let Err(e) = w.add(k, v) {
            panic!("in-memory table write failed: {e}");
        }
    }
    let summary = match w.finish() {
        Ok(s) => s,
        Err(e) => panic!("in-memory table write failed: {e}"),
    };
    assert_eq!(summary.entries, entries.len() as u64);
    let first = entries.first().map(|e| e.0.clone()).unwrap_or_default();
    let last = entries.last().map(|e| e.0.clone()).unwrap_or_default();
    assert_eq!((summary.smallest, summary.largest), (first, last));
    let bytes = io::read_all(&fs, path).unwrap_or_default();
    assert_eq!(bytes.len() as u64, summary.file_size);
    bytes
}

/// Tables (format.md §Tables), footer to data blocks.
///
/// First byte mod 4: 0, the rest is a table image, opened and read through
/// every path; 1, the same after [`reseal_table`] made its checksums hold;
/// 2 and 3, the rest describes table options, entries and optionally one
/// changed byte: the entries are written with `TableWriter` and read back
/// exactly, or (damaged) each read path gives the exact answer or
/// `Corruption`; bits 4 and 5 pick the data blocks' compression (none,
/// LZ4, Zstandard). Bit 7 of the first byte puts a block cache under the
/// table. Returns the number of entries read.
pub fn table(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    let mode = input.u8();
    let cache = mode & 0x80 != 0;
    let (image, model, damaged) = match mode % 4 {
        0 => (input.rest().to_vec(), None, false),
        1 => {
            let mut img = input.rest().to_vec();
            reseal_table(&mut img);
            (img, None, false)
        }
        _ => {
            let opts = TableOptions {
                block_size: 64 + usize::from(input.u8()) * 4,
                restart_interval: 1 + usize::from(input.u8() % 8),
                filter: mode & 0x40 == 0,
                filter_bits: if mode & 0x04 != 0 { 16 } else { 8 },
                compression: match (mode >> 4) & 3 {
                    1 => crate::options::Compression::Lz4,
                    2 => crate::options::Compression::Zstd(1),
                    _ => crate::options::Compression::None,
                },
                db_id: 0,
                keyspace: None,
            };
            let damage = input.u8();
            let at = usize::from(input.u16());
            let entries = input_entries(&mut input);
            let mut img = write_table(&entries, &opts);
            let damaged = damage % 2 == 1 && !img.is_empty();
            if damaged {
                let len = img.len();
                if let Some(b) = img.get_mut(at % len) {
                    *b ^= (damage >> 1).max(1);
                }
            }
            (img, Some(entries), damaged)
        }
    };
    let t = match open_table(&image, cache) {
        Ok(t) => t,
        Err(e) => {
            expect_corruption(&e, "table open");
            assert!(
                model.is_none() || damaged,
                "a written table does not open: {e}"
            );
            return 0;
        }
    };
    // A well-formed image (a resealed one may be) whose filter holds all
    // its keys has exact answers too.
    let model = model.or_else(|| {
        well_formed_entries(&image)
            .filter(|e| e.iter().all(|(k, _)| t.may_contain(key::user_key(k))))
    });
    let n = check_table_image(&t);
    match model {
        Some(entries) => check_table_model(&t, &entries, damaged),
        None => n,
    }
}

// ---------------------------------------------------------------------------
// Whole databases: arbitrary directory images

/// Options for fuzzed databases: small memtables and tables so that
/// flushes and compactions happen within a few operations, no background
/// compaction (runs stay deterministic; `Db::compact` compacts), and a
/// small block cache or none.
fn small_options(fs: &MemFs, flags: u8) -> Options {
    let mut o = Options::with_memory_budget(1 << 20);
    o.fs = Arc::new(fs.clone());
    o.memtable_bytes = [4 << 10, 16 << 10, 64 << 10][usize::from(flags % 3)];
    o.block_cache_bytes = if flags & 0x04 != 0 { 0 } else { 32 << 10 };
    o.filter = flags & 0x08 == 0;
    // The middle memtable size runs with 16-bit filter fingerprints.
    o.filter_bits = if flags % 3 == 1 { 16 } else { 8 };
    o.block_bytes = if flags & 0x10 != 0 { 4096 } else { 256 };
    o.block_restart_interval = 1 + usize::from((flags >> 5) % 4);
    o.table_bytes = 8 << 10;
    o.level1_bytes = 32 << 10;
    o.l0_compaction_trigger = 2;
    o.background_compaction = false;
    // Most runs separate values of 16 bytes and more (pointers into the
    // journal, value GC in compactions); some keep every value inline.
    o.value_separation_min = if flags & 0x80 != 0 { usize::MAX } else { 16 };
    o.value_gc_live_ratio = 0.5;
    o.journal_bytes = 32 << 10;
    o
}

/// The directory every fuzzed database lives in.
fn db_dir() -> &'static Path {
    Path::new("/db")
}

/// Every file of the directory `dir` of `fs`: (name, bytes), by name.
fn files_of(fs: &MemFs, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = fs.list(dir).unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter_map(|n| {
            let bytes = io::read_all(fs, &dir.join(&n)).ok()?;
            Some((n, bytes))
        })
        .collect()
}

/// A small real database: tables in levels 0 and 1, a journal with writes
/// not yet flushed, a manifest with several edits.
fn build_base_image() -> crate::Result<Vec<(String, Vec<u8>)>> {
    let fs = MemFs::new();
    let db = Db::open(db_dir(), small_options(&fs, 0x01))?;
    let synced = WriteOptions::synced();
    for i in 0..40u32 {
        db.put_opt(format!("k{i:03}"), format!("value-{i}"), &synced)?;
    }
    // Separated values of a keyspace that compresses (LZ4, the default
    // for named ones): the compaction below moves them into a values file
    // compressed (test `the_base_image_holds_compressed_values`).
    let users = db.keyspace_with(
        "users",
        crate::KeyspaceOptions {
            value_separation_min: 16,
            ..crate::KeyspaceOptions::default()
        },
    )?;
    for i in 0..8u32 {
        users.put(format!("p{i:03}"), format!("{i}").repeat(60 + i as usize))?;
    }
    db.flush()?;
    db.compact()?;
    for i in (0..40u32).step_by(3) {
        db.delete(format!("k{i:03}"))?;
    }
    for i in 40..60u32 {
        db.put(format!("k{i:03}"), vec![b'v'; i as usize])?;
    }
    db.flush()?;
    let mut batch = WriteBatch::new();
    for i in 60..70u32 {
        batch.put(format!("k{i:03}"), format!("batched-{i}"))?;
    }
    batch.delete("k041")?;
    db.write(batch, &synced)?;
    db.put_opt("k070", "last", &synced)?;
    // Keyspaces: tables and journal ops of two, one of them dropped with
    // its tables still in place, and a batch spanning keyspaces.
    let gone = db.keyspace("gone")?;
    for i in 0..20u32 {
        users.put(format!("u{i:03}"), format!("user-{i}"))?;
        gone.put(format!("g{i:03}"), vec![b'g'; 40])?;
    }
    db.flush()?;
    let mut batch = WriteBatch::new();
    batch.put_in(&users, "u100", "in a batch")?;
    batch.put("k071", "beside it")?;
    batch.delete_in(&gone, "g001")?;
    db.write(batch, &synced)?;
    db.drop_keyspace("gone")?;
    users.put_opt("u101", "after the drop", &synced)?;
    db.close()?;
    Ok(files_of(&fs, db_dir()))
}

/// [`build_base_image`], built once per process.
fn base_image() -> &'static [(String, Vec<u8>)] {
    static IMAGE: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    IMAGE.get_or_init(|| match build_base_image() {
        Ok(files) => files,
        Err(e) => panic!("building the base image failed: {e}"),
    })
}

/// A file name chosen by `input`: database files with small numbers
/// (mostly), odd spellings of them, huge numbers, and names the engine
/// must leave alone.
fn image_file_name(input: &mut Input<'_>) -> String {
    let sel = input.u8();
    let n = u64::from(input.u8() % 16);
    match sel % 10 {
        0 => "CURRENT".into(),
        1 => format!("MANIFEST-{n:06}"),
        2 | 3 => format!("{n:06}.journal"),
        4 => format!("{n:06}.table"),
        5 => "CURRENT.tmp".into(),
        6 => ["LOCK", "notes.txt", "000007.journal.tmp"][usize::from(sel >> 4) % 3].into(),
        7 => format!("{n}.journal"),
        8 => {
            let big = input.u64();
            match (sel >> 4) % 3 {
                0 => format!("MANIFEST-{big:06}"),
                1 => format!("{big:06}.journal"),
                _ => format!("{big:06}.table"),
            }
        }
        _ => format!("{n:06}.table"),
    }
}

/// The path of an existing file of the directory picked by `input`.
fn pick_file(fs: &MemFs, input: &mut Input<'_>) -> Option<PathBuf> {
    let mut names = fs.list(db_dir()).ok()?;
    names.sort();
    let i = usize::from(input.u8()) % names.len().max(1);
    names.get(i).map(|n| db_dir().join(n))
}

/// Applies one edit described by `input` to the directory image.
fn edit_image(fs: &MemFs, input: &mut Input<'_>) {
    let op = input.u8();
    match op % 8 {
        // a file with the given bytes
        0 | 1 => {
            let name = image_file_name(input);
            let len = usize::from(input.u16());
            let _ = put_file(fs, &db_dir().join(name), input.bytes(len));
        }
        // a journal or manifest of records with valid checksums
        2 => {
            let name = image_file_name(input);
            let count = 1 + usize::from(input.u8() % 8);
            let kinds = [RecordKind::MarkedBatch, RecordKind::Edit, RecordKind::Batch];
            let mut image = Vec::new();
            sealed_records(input, &kinds, 0, count, &mut image);
            let _ = put_file(fs, &db_dir().join(name), &image);
        }
        // flip bits of a byte
        3 => {
            if let Some(path) = pick_file(fs, input) {
                let at = usize::from(input.u16());
                let mask = input.u8().max(1);
                let len = fs.file_len(&path).unwrap_or(0) as usize;
                fs.mutate_byte(&path, at % len.max(1), |b| b ^ mask);
            }
        }
        // cut a file short
        4 => {
            if let Some(path) = pick_file(fs, input) {
                let len = fs.file_len(&path).unwrap_or(0) as usize;
                fs.truncate(&path, usize::from(input.u16()) % (len + 1));
            }
        }
        5 => {
            if let Some(path) = pick_file(fs, input) {
                let _ = fs.remove(&path);
            }
        }
        // point CURRENT at a manifest number (new or first format)
        6 => {
            let n = u64::from(input.u8() % 16);
            let contents = if op & 0x80 != 0 {
                format!("MANIFEST-{n:06}\n")
            } else {
                crate::version::files::current_contents(n)
            };
            let _ = put_file(fs, &db_dir().join("CURRENT"), contents.as_bytes());
        }
        // make a changed table's checksums hold again
        _ => {
            if let Some(path) = pick_file(fs, input)
                && let Ok(mut bytes) = io::read_all(fs, &path)
            {
                reseal_table(&mut bytes);
                let _ = put_file(fs, &path, &bytes);
            }
        }
    }
}

/// Reads, writes, flushes and compacts an open database, ignoring errors.
/// Returns the number of entries read.
fn exercise(db: &Db) -> usize {
    let keys: Vec<Vec<u8>> = db
        .iter()
        .take(64)
        .filter_map(Result::ok)
        .map(|(k, _)| k)
        .collect();
    let mut n = keys.len();
    n += db.iter().rev().take(64).filter(Result::is_ok).count();
    for k in keys.iter().step_by(4) {
        let _ = db.get(k);
        n += db.range(k.clone()..).take(3).count();
    }
    let _ = db.get("k010");
    let _ = db.put("fuzz", "value");
    if let Some(k) = keys.first() {
        let _ = db.delete(k);
    }
    let _ = db.get("fuzz");
    let _ = db.flush();
    let snapshot = db.snapshot();
    let _ = db.put_opt("fuzz2", "value2", &WriteOptions::synced());
    for name in db.keyspaces() {
        if let Ok(ks) = db.keyspace(&name) {
            n += ks.iter().take(64).count();
            n += snapshot.iter_in(&ks).take(16).count();
            let _ = ks.get("u005");
            // A compressed separated value of the base image.
            let _ = ks.get("p003");
        }
    }
    let _ = db.drop_keyspace("users");
    let _ = db.compact();
    n += snapshot.iter().take(64).count();
    n += db.iter().take(256).count();
    n
}

/// Whole-engine robustness on arbitrary directory images: `Db::open` on a
/// directory built from the input, then reads, writes, flush, compaction,
/// close and a second open. Errors are fine; a panic, hang or unbounded
/// allocation is a bug.
///
/// Input: a flags byte (bit 0: start from a real database's files, see
/// [`build_base_image`]; the rest pick options), then up to
/// `IMAGE_EDITS_MAX` edits of the directory ([`edit_image`]: add a file,
/// add a log with valid checksums, flip a byte, cut or remove a file,
/// rewrite CURRENT, reseal a table). Returns the number of entries read.
pub fn open_image(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    let flags = input.u8();
    let fs = MemFs::new();
    let _ = fs.create_dir_all(db_dir());
    if flags & 1 != 0 {
        for (name, bytes) in base_image() {
            let _ = put_file(&fs, &db_dir().join(name), bytes);
        }
    }
    for _ in 0..IMAGE_EDITS_MAX {
        if input.is_empty() {
            break;
        }
        edit_image(&fs, &mut input);
    }
    let opts = small_options(&fs, flags >> 1);
    let Ok(db) = Db::open(db_dir(), opts.clone()) else {
        return 0;
    };
    let mut n = exercise(&db);
    let _ = db.close();
    if let Ok(db) = Db::open(db_dir(), opts) {
        n += db.iter().take(256).count();
        let _ = db.close();
    }
    n
}

// ---------------------------------------------------------------------------
// Random operations against a model, with power cuts and injected faults

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One batch of writes as the model sees it.
#[derive(Debug, Clone)]
struct ModelWrite {
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// The engine returned `Ok`. Otherwise it may or may not be applied
    /// after a reopen (it never is before one).
    acked: bool,
}

fn apply_write(m: &mut Model, w: &ModelWrite) {
    for (k, v) in &w.ops {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

/// Whether `got` is a state a reopen may find: `base` with the writes of
/// some prefix of `writes` at least `floor` long (a power cut keeps a
/// prefix of the writes that contains every durable one), each failed
/// write in the prefix applied or not, atomically. `None` if too many
/// failed writes make too many states to track.
fn explained(base: &Model, writes: &[ModelWrite], floor: usize, got: &Model) -> Option<bool> {
    let mut states = vec![base.clone()];
    for (i, w) in writes.iter().enumerate() {
        if i >= floor && states.contains(got) {
            return Some(true);
        }
        if w.acked {
            states.iter_mut().for_each(|m| apply_write(m, w));
        } else {
            let mut applied = states.clone();
            applied.iter_mut().for_each(|m| apply_write(m, w));
            states.extend(applied);
            states.sort();
            states.dedup();
            if states.len() > MODEL_CANDIDATES_MAX {
                return None;
            }
        }
    }
    Some(states.contains(got))
}

/// The entries of `m` within the bounds, in order.
fn model_range(m: &Model, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let above = |k: &Vec<u8>| match lo {
        Bound::Included(b) => k >= b,
        Bound::Excluded(b) => k > b,
        Bound::Unbounded => true,
    };
    let below = |k: &Vec<u8>| match hi {
        Bound::Included(b) => k <= b,
        Bound::Excluded(b) => k < b,
        Bound::Unbounded => true,
    };
    m.iter()
        .filter(|(k, _)| above(k) && below(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A key chosen by `b`: 32 short keys, long keys sharing their prefixes,
/// the empty key and keys of 0xff bytes.
/// The keyspaces `ops_model` writes besides the default one; a model key
/// is the keyspace's slot (0 for the default keyspace, i + 1 for
/// `MODEL_KEYSPACES[i]`) followed by the user key.
const MODEL_KEYSPACES: [&str; 2] = ["ka", "kb"];

/// The model key of `key` in keyspace slot `slot`.
fn slot_key(slot: u8, key: &[u8]) -> Vec<u8> {
    let mut k = vec![slot];
    k.extend_from_slice(key);
    k
}

/// The keyspace slot bits 5 and 6 of `b` choose.
fn slot_of(b: u8) -> u8 {
    (b >> 5) % 3
}

/// The entries of slot `slot` of `m`, under their user keys.
fn slot_model(m: &Model, slot: u8) -> Model {
    m.iter()
        .filter(|(k, _)| k.first() == Some(&slot))
        .map(|(k, v)| (k[1..].to_vec(), v.clone()))
        .collect()
}

fn model_key(b: u8) -> Vec<u8> {
    let n = b % 32;
    match b >> 5 {
        0..=5 => format!("k{n:02}").into_bytes(),
        6 => format!("k{n:02}/{}", "x".repeat(40)).into_bytes(),
        _ => vec![0xff; usize::from(n)],
    }
}

fn model_bound(input: &mut Input<'_>) -> Bound<Vec<u8>> {
    let b = input.u8();
    match b % 3 {
        0 => Bound::Unbounded,
        1 => Bound::Included(model_key(b)),
        _ => Bound::Excluded(model_key(b)),
    }
}

/// How a database is reopened.
#[derive(Debug, Clone, Copy)]
enum Reopen {
    /// `Db::close`, then open: every acknowledged write survives.
    Clean,
    /// A power cut (a crash image of the file system), then open: writes
    /// made durable survive, later ones may be lost as a suffix.
    Crash(Crash, u64),
}

/// One `ops_model` run: the database, the model and what is known about
/// durability.
struct ModelRun {
    fs: MemFs,
    flags: u8,
    db: Option<Db>,
    /// Handles of `MODEL_KEYSPACES` in `db`.
    spaces: Vec<crate::Keyspace>,
    /// The database's contents at the last (re)open, as checked then.
    base: Model,
    /// Writes since the last (re)open.
    writes: Vec<ModelWrite>,
    /// `writes[..durable]` survive a power cut.
    durable: usize,
    /// `base` with every acknowledged write: what reads must return.
    visible: Model,
    snapshot: Option<(Snapshot, Model)>,
    /// A fault was injected since the last (re)open, so operations may
    /// fail (and unsynced writes may be lost to a failed fsync).
    faulty: bool,
    /// A read flip was injected since the last (re)open.
    flipped: bool,
    reopens: usize,
    /// Makes every written value distinct.
    counter: u64,
}

/// Handles of `MODEL_KEYSPACES` in `db`, each made if missing.
fn open_model_keyspaces(db: &Db) -> crate::Result<Vec<crate::Keyspace>> {
    MODEL_KEYSPACES.iter().map(|n| db.keyspace(n)).collect()
}

/// Everything `db` holds, under model keys.
fn read_model(db: &Db, spaces: &[crate::Keyspace]) -> crate::Result<Model> {
    let mut m = Model::new();
    for kv in db.iter() {
        let (k, v) = kv?;
        m.insert(slot_key(0, &k), v);
    }
    for (i, ks) in spaces.iter().enumerate() {
        for kv in ks.iter() {
            let (k, v) = kv?;
            m.insert(slot_key(i as u8 + 1, &k), v);
        }
    }
    Ok(m)
}

impl ModelRun {
    fn new(flags: u8) -> ModelRun {
        let fs = MemFs::with_seed(u64::from(flags));
        let db = match Db::open(db_dir(), small_options(&fs, flags)) {
            Ok(db) => db,
            Err(e) => panic!("creating a database failed: {e}"),
        };
        let spaces = match open_model_keyspaces(&db) {
            Ok(spaces) => spaces,
            Err(e) => panic!("creating keyspaces failed: {e}"),
        };
        ModelRun {
            fs,
            flags,
            db: Some(db),
            spaces,
            base: Model::new(),
            writes: Vec::new(),
            durable: 0,
            visible: Model::new(),
            snapshot: None,
            faulty: false,
            flipped: false,
            reopens: 0,
            counter: 0,
        }
    }

    fn value(&mut self, b: u8) -> Vec<u8> {
        self.counter += 1;
        let len = match b % 8 {
            0 => 0,
            7 => 3000,
            _ => 8 + usize::from(b % 32),
        };
        let mut v = self.counter.to_le_bytes().to_vec();
        v.resize(len.max(8), b);
        v.truncate(len);
        v
    }

    /// A failure the model does not allow is a bug: without an injected
    /// fault nothing may fail.
    fn allow_error(&self, what: &str, e: &Error) {
        assert!(self.faulty, "{what} failed without an injected fault: {e}");
    }

    fn write(&mut self, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>, sync: bool) {
        let Some(db) = &self.db else { return };
        // A handle that stores a write error refuses every write before it
        // reaches the journal (the error is sticky until reopen).
        let refused = db.stats().write_error.is_some();
        let mut batch = WriteBatch::new();
        for (k, v) in &ops {
            let (slot, key) = (k[0], &k[1..]);
            let r = match (self.spaces.get(usize::from(slot).wrapping_sub(1)), v) {
                (None, Some(v)) => batch.put(key, v),
                (None, None) => batch.delete(key),
                (Some(ks), Some(v)) => batch.put_in(ks, key, v),
                (Some(ks), None) => batch.delete_in(ks, key),
            };
            if let Err(e) = r {
                panic!("building a batch failed: {e}");
            }
        }
        match db.write(batch, &WriteOptions { sync }) {
            Ok(()) => {
                assert!(
                    !refused,
                    "a write succeeded on a handle that refuses writes"
                );
                let w = ModelWrite { ops, acked: true };
                apply_write(&mut self.visible, &w);
                self.writes.push(w);
                if sync {
                    self.durable = self.writes.len();
                }
            }
            // Refused before reaching the journal.
            Err(e) if refused || matches!(e, Error::Poisoned(_)) => self.allow_error("write", &e),
            Err(e) => {
                self.allow_error("write", &e);
                self.writes.push(ModelWrite { ops, acked: false });
            }
        }
    }

    /// Reads model key `k`.
    fn get(&self, k: &[u8]) {
        let Some(db) = &self.db else { return };
        let (slot, key) = (k[0], &k[1..]);
        let got = match self.spaces.get(usize::from(slot).wrapping_sub(1)) {
            Some(ks) => ks.get(key),
            None => db.get(key),
        };
        match got {
            Ok(v) => assert_eq!(v.as_ref(), self.visible.get(k), "get {k:?}"),
            Err(e) => self.allow_error("get", &e),
        }
    }

    fn scan(&self, slot: u8, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, rev: bool) {
        let Some(db) = &self.db else { return };
        let want = model_range(&slot_model(&self.visible, slot), &lo, &hi);
        let it = match self.spaces.get(usize::from(slot).wrapping_sub(1)) {
            Some(ks) => ks.range((lo.clone(), hi.clone())),
            None => db.range((lo.clone(), hi.clone())),
        };
        let got: crate::Result<Vec<_>> = if rev {
            it.rev().collect()
        } else {
            it.collect()
        };
        match got {
            Ok(mut got) => {
                if rev {
                    got.reverse();
                }
                assert!(
                    got == want,
                    "scan {lo:?}..{hi:?} rev {rev}: {got:?} != {want:?}"
                );
            }
            Err(e) => self.allow_error("scan", &e),
        }
    }

    fn read_snapshot(&self, k: &[u8]) {
        let Some((snap, m)) = &self.snapshot else {
            return;
        };
        match snap.get(k) {
            Ok(v) => assert_eq!(v.as_ref(), m.get(&slot_key(0, k)), "snapshot get {k:?}"),
            Err(e) => self.allow_error("snapshot get", &e),
        }
        match snap.iter().collect::<crate::Result<Vec<_>>>() {
            Ok(got) => {
                assert!(got == model_range(&slot_model(m, 0), &Bound::Unbounded, &Bound::Unbounded))
            }
            Err(e) => self.allow_error("snapshot scan", &e),
        }
        for (i, ks) in self.spaces.iter().enumerate() {
            match snap.iter_in(ks).collect::<crate::Result<Vec<_>>>() {
                Ok(got) => {
                    let want = slot_model(m, i as u8 + 1);
                    assert!(
                        got == want.into_iter().collect::<Vec<_>>(),
                        "snapshot scan of {i}"
                    );
                }
                Err(e) => self.allow_error("snapshot scan", &e),
            }
        }
    }

    /// Flush or compaction: on success everything written so far is
    /// durable.
    fn persist(&mut self, compact: bool) {
        let Some(db) = &self.db else { return };
        let r = if compact { db.compact() } else { db.flush() };
        match r {
            Ok(()) => self.durable = self.writes.len(),
            Err(e) => self.allow_error(if compact { "compact" } else { "flush" }, &e),
        }
    }

    fn inject(&mut self, input: &mut Input<'_>) {
        let a = input.u8();
        let b = input.u8();
        let op = [
            OpKind::Append,
            OpKind::Sync,
            OpKind::Create,
            OpKind::SyncDir,
            OpKind::Rename,
            OpKind::Remove,
            OpKind::Read,
            OpKind::Any,
        ][usize::from(a % 8)];
        // Faults that report themselves, and read flips (the device's bytes
        // stay intact; recovery re-reads what does not parse). A misdirected
        // write damages durable bytes silently: the corruption tests' case.
        let kind = [
            FaultKind::Eio,
            FaultKind::Enospc,
            FaultKind::SyncLost,
            FaultKind::FlipOnRead,
        ][usize::from(a >> 3) % 4];
        let path_contains = match b >> 5 {
            0 => Some("journal"),
            1 => Some("MANIFEST"),
            2 => Some("table"),
            3 => Some("CURRENT"),
            _ => None,
        };
        // One transient read flip per reopen at most: recovery settles a
        // file by reading it up to four times, and if no two reads agree it
        // goes on with the last, so four flipped reads in a row (or a
        // persistent flip) can cut acknowledged writes as a torn tail (see
        // the fuzzing report).
        if kind == FaultKind::FlipOnRead {
            if self.flipped {
                return;
            }
            self.flipped = true;
        }
        let persistent = a & 0x80 != 0 && kind != FaultKind::FlipOnRead;
        self.fs.inject(Fault {
            op,
            kind,
            nth: u64::from(b % 8),
            persistent,
            path_contains: path_contains.map(str::to_owned),
        });
        self.faulty = true;
    }

    /// Reopens the database and checks it holds one of the states the
    /// model allows; that state becomes the new base.
    fn reopen(&mut self, how: Reopen) {
        self.snapshot = None;
        let db = self.db.take();
        // Writes before `floor` must survive.
        let floor = match how {
            Reopen::Clean => {
                if let Some(db) = db {
                    let _ = db.close();
                }
                self.writes.len()
            }
            Reopen::Crash(crash, seed) => {
                let image = self.fs.crash_image(crash, seed);
                drop(db);
                self.fs = image;
                match crash {
                    // A process crash: the page cache survives, unless a
                    // failed fsync dropped some of it.
                    Crash::All if !self.faulty => self.writes.len(),
                    _ => self.durable,
                }
            }
        };
        let opts = small_options(&self.fs, self.flags);
        let db = match Db::open(db_dir(), opts.clone()) {
            Ok(db) => db,
            Err(e) => {
                self.allow_error("open", &e);
                self.fs.clear_faults();
                match Db::open(db_dir(), opts) {
                    Ok(db) => db,
                    Err(e) => panic!("open after {how:?} failed once the faults were gone: {e}"),
                }
            }
        };
        self.fs.clear_faults();
        self.faulty = false;
        self.flipped = false;
        // The keyspaces were made (and their edit synced) before any fault
        // or write: every reopen finds them.
        self.spaces = match open_model_keyspaces(&db) {
            Ok(spaces) => spaces,
            Err(e) => panic!("keyspaces after {how:?}: {e}"),
        };
        let got: Model = match read_model(&db, &self.spaces) {
            Ok(got) => got,
            Err(e) => panic!("scan after {how:?} failed: {e}"),
        };
        let ok = explained(&self.base, &self.writes, floor, &got);
        assert!(
            ok != Some(false),
            "after {how:?} the database holds {got:?}, which no prefix of the writes \
             from {floor} on explains; base {:?}, writes {:?}",
            self.base,
            self.writes
        );
        self.base = got.clone();
        self.visible = got;
        self.writes.clear();
        self.durable = 0;
        self.db = Some(db);
        self.reopens += 1;
    }

    fn step(&mut self, input: &mut Input<'_>) {
        let op = input.u8();
        match op % 16 {
            0..=2 => {
                let k = slot_key(slot_of(op), &model_key(input.u8()));
                let v = self.value(input.u8());
                self.write(vec![(k, Some(v))], op & 0x80 != 0);
            }
            3 => {
                let k = slot_key(slot_of(op), &model_key(input.u8()));
                self.write(vec![(k, None)], op & 0x80 != 0);
            }
            4 => {
                let n = 1 + input.u8() % 8;
                let mut ops = Vec::new();
                for _ in 0..n {
                    let b = input.u8();
                    let k = slot_key(slot_of(b), &model_key(input.u8()));
                    let v = (!b.is_multiple_of(4)).then(|| self.value(b));
                    ops.push((k, v));
                }
                self.write(ops, op & 0x80 != 0);
            }
            5 => self.get(&slot_key(slot_of(op), &model_key(input.u8()))),
            6 => {
                let lo = model_bound(input);
                let hi = model_bound(input);
                self.scan(slot_of(op), lo, hi, op & 0x80 != 0);
            }
            7 => self.persist(false),
            8 => self.persist(true),
            9 => {
                self.snapshot = self
                    .db
                    .as_ref()
                    .map(|db| (db.snapshot(), self.visible.clone()));
            }
            10 => self.read_snapshot(&model_key(input.u8())),
            11 if self.reopens < MODEL_REOPENS_MAX => self.reopen(Reopen::Clean),
            12 if self.reopens < MODEL_REOPENS_MAX => {
                let crash = [Crash::Clean, Crash::Torn, Crash::All][usize::from(op >> 4) % 3];
                let seed = u64::from(input.u8());
                self.reopen(Reopen::Crash(crash, seed));
            }
            13..=15 if op & 0x10 != 0 => self.inject(input),
            _ => self.get(&slot_key(0, &model_key(op))),
        }
    }
}

/// Random operations on a database on `MemFs`, checked against a
/// `BTreeMap`: puts, deletes and batches (synced or not) in three
/// keyspaces (batches span them), gets, range scans both ways, snapshots, flushes, compactions, clean reopens,
/// reopens after a power cut (nothing, part or all of the unsynced state
/// kept) and injected IO faults (EIO, ENOSPC, a lost fsync, a bit flipped
/// on read).
///
/// The model's rules: reads see every acknowledged write and no failed
/// one; after a reopen the database holds the writes of some prefix of
/// the sequence that includes every acknowledged write (clean reopen) or
/// every durable one (power cut: a synced write, flush or compaction
/// makes everything before it durable), with each failed write applied or
/// not, atomically; nothing fails unless a fault was injected, and a
/// reopen succeeds once the faults are cleared.
///
/// Input: a flags byte choosing options, then operations ([`ModelRun`]'s
/// `step`). Returns the number of operations run.
pub fn ops_model(data: &[u8]) -> usize {
    let mut input = Input::new(data);
    let flags = input.u8();
    let mut run = ModelRun::new(flags);
    let mut steps = 0;
    while !input.is_empty() && steps < MODEL_OPS_MAX {
        run.step(&mut input);
        steps += 1;
    }
    run.reopen(Reopen::Clean);
    if let Some(db) = run.db.take() {
        let _ = db.close();
    }
    steps
}

// ---------------------------------------------------------------------------
// Seed corpus

/// The records of a log image.
fn records_of(image: &[u8], framing: Framing) -> Vec<(RecordKind, Vec<u8>)> {
    log::scan_framed(image, framing, |_, _, _| false)
        .records
        .iter()
        .map(|&(_, k, p)| (k, p.to_vec()))
        .collect()
}

/// The input bytes [`sealed_records`] reads back as `records`, with
/// `kinds` the selector list of the target.
fn sealed_input(records: &[(RecordKind, Vec<u8>)], kinds: &[RecordKind]) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, payload) in records {
        let sel = kinds.iter().position(|k| k == kind).unwrap_or(0);
        out.push(sel as u8);
        out.extend_from_slice(&(payload.len().min(0xffff) as u16).to_le_bytes());
        out.extend_from_slice(payload);
    }
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Seed inputs for every target, built from the files of a real database
/// (journal, manifest, tables and their blocks) and from short scripts:
/// `(target, input)` pairs. `tests/fuzz_corpus.rs` writes them to
/// `fuzz/corpus/<target>/` when asked to regenerate the corpus.
pub fn seed_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let files = base_image();
    let file = |suffix: &str| {
        files
            .iter()
            .filter(|(n, _)| n.ends_with(suffix) || n.starts_with(suffix))
            .map(|(_, b)| b.clone())
            .collect::<Vec<_>>()
    };
    // (number, bytes) of every journal.
    let journals: Vec<(u16, Vec<u8>)> = files
        .iter()
        .filter_map(|(n, b)| {
            let number = n.strip_suffix(".journal")?.parse::<u16>().ok()?;
            Some((number, b.clone()))
        })
        .collect();
    let manifests = file("MANIFEST-");
    let tables = file(".table");
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();

    // The database's identity, which seeds its journals' framing with
    // their numbers (format.md §Log records): from the first edit of its
    // manifest.
    let db_id = manifests
        .first()
        .and_then(|m| records_of(m, Framing::Plain).into_iter().next())
        .and_then(|(_, edit)| Edit::decode(&edit).ok()?.db_id)
        .unwrap_or(0);
    let journal_kinds = [RecordKind::NumberedBatch];
    for (number, j) in &journals {
        let n = number.to_le_bytes();
        out.push(("journal", cat(&[&[2], &n, j])));
        let seed = log::journal_seed(u64::from(*number), db_id);
        let records = records_of(j, Framing::Numbered(seed));
        let body = sealed_input(&records, &journal_kinds);
        out.push(("journal", cat(&[&[3], &n, &[0, 0, 0, 0], &body])));
        out.push(("journal", cat(&[&[3], &n, &[3, 40, 0, 0x20], &body])));
        // The same records under the plain framing of formats 1 and 2.
        let plain: Vec<_> = records
            .iter()
            .map(|(_, p)| (RecordKind::MarkedBatch, p.clone()))
            .collect();
        out.push((
            "journal",
            cat(&[
                &[1, 0, 0, 0, 0],
                &sealed_input(&plain, &[RecordKind::MarkedBatch]),
            ]),
        ));
        for (kind, payload) in &records {
            if let Some((_, rep)) = batch_codec::split_journal_record(*kind, payload) {
                out.push(("batch", rep.to_vec()));
            }
        }
    }
    let edit_kinds = [
        RecordKind::Edit,
        RecordKind::Edit,
        RecordKind::Edit,
        RecordKind::MarkedBatch,
    ];
    for m in &manifests {
        out.push(("manifest", cat(&[&[0], m])));
        let records = records_of(m, Framing::Plain);
        for (_, payload) in records.iter().take(2) {
            out.push(("manifest", cat(&[&[1], payload])));
        }
        let body = sealed_input(&records, &edit_kinds);
        out.push(("manifest", cat(&[&[2, 0, 0, 0, 0], &body])));
        out.push(("manifest", cat(&[&[2, 2, 50, 0, 0], &body])));
    }
    for t in &tables {
        out.push(("table", cat(&[&[0], t])));
        out.push(("table", cat(&[&[0x81], t])));
        if let Some([index, filter_h, _]) = footer_handles(t) {
            let limit = t.len().saturating_sub(FOOTER_LEN);
            if let Some(b) = block_at(t, filter_h, limit) {
                out.push(("filter", cat(&[&[0], b])));
            }
            if let Some(b) = block_at(t, index, limit) {
                out.push(("block", cat(&[&[0], b])));
                if let Some(first) = index_handles(b).first()
                    && let Some(d) = block_at(t, *first, limit)
                {
                    out.push(("block", cat(&[&[0], d])));
                }
            }
        }
    }
    out.push((
        "block",
        cat(&[&[1, 3], b"\x04key1\x03one\x04key2\x00\x05key10\x05three"]),
    ));
    out.push(("filter", cat(&[&[1], b"\x03abc\x03abd\x00\x05hello\x01z"])));
    let entries: &[u8] = b"\x03abc\x05\x04val1\x02ab\x07\x00\x83abc\x09\x41x\x02\x02ab\x04\x01v";
    out.push(("table", cat(&[&[2, 0, 2, 0, 0, 0], entries])));
    out.push(("table", cat(&[&[0x42, 4, 0, 0x11, 30, 0], entries])));
    out.push(("table", cat(&[&[3, 1, 1, 0x81, 90, 0], entries])));

    // open_image: the base image as is, damaged, and rebuilt file by file.
    out.push(("open_image", vec![0x01]));
    out.push(("open_image", vec![0x03, 0x03, 0x02, 0x40, 0x00, 0x10]));
    out.push(("open_image", vec![0x01, 0x04, 0x01, 0x20, 0x00]));
    out.push(("open_image", vec![0x01, 0x06, 0x03]));
    let mut rebuilt = vec![0x00];
    for (name, bytes) in files {
        // `image_file_name` selectors: 0 is CURRENT; 8, 18 and 38 are a
        // manifest, journal and table numbered by the u64 that follows.
        let number = name
            .trim_start_matches("MANIFEST-")
            .split('.')
            .next()
            .and_then(|n| n.parse::<u64>().ok());
        let sel = match (name.as_str(), number) {
            ("CURRENT", _) => 0u8,
            (n, Some(_)) if n.starts_with("MANIFEST-") => 8,
            (n, Some(_)) if n.ends_with(".journal") => 18,
            (n, Some(_)) if n.ends_with(".table") => 38,
            _ => continue,
        };
        rebuilt.extend_from_slice(&[0, sel, 0]);
        if let Some(n) = number.filter(|_| sel != 0) {
            rebuilt.extend_from_slice(&n.to_le_bytes());
        }
        rebuilt.extend_from_slice(&(bytes.len().min(0xffff) as u16).to_le_bytes());
        rebuilt.extend_from_slice(bytes);
    }
    out.push(("open_image", rebuilt));

    // ops_model: puts, batches, reads, flush, compaction, every reopen kind,
    // and faults.
    let put = |k: u8, v: u8, sync: bool| [if sync { 0x80 } else { 0 }, k, v];
    let mut script = vec![0x00];
    for i in 0..24u8 {
        script.extend_from_slice(&put(i, i, i % 5 == 0));
    }
    script.extend_from_slice(&[0x04, 2, 1, 2, 0, 3, 2, 4]); // batch
    script.extend_from_slice(&[0x05, 3, 0x06, 1, 2, 0x86, 0, 0]); // get, scans
    script.extend_from_slice(&[0x09, 0x03, 5, 0x07, 0x0a, 5]); // snapshot, flush
    script.extend_from_slice(&[0x08, 0x0b, 0x05, 7]); // compact, reopen
    for i in 0..8u8 {
        script.extend_from_slice(&put(i + 100, i, false));
    }
    script.extend_from_slice(&[0x0c, 1, 0x1c, 2, 0x2c, 3]); // three power cuts
    out.push(("ops_model", script.clone()));
    let mut faults = vec![0x01];
    for i in 0..6u8 {
        faults.extend_from_slice(&put(i, i, true));
    }
    faults.extend_from_slice(&[0x1d, 0x01, 0x02]); // sync fails on the 3rd
    for i in 0..6u8 {
        faults.extend_from_slice(&put(i + 6, i, true));
    }
    faults.extend_from_slice(&[0x1d, 0x1e, 0x20]); // the next manifest read flips a bit
    faults.extend_from_slice(&[0x0b, 0x1e, 0x00, 0x21]); // reopen; append fails
    faults.extend_from_slice(&put(40, 1, false));
    faults.extend_from_slice(&[0x07, 0x1f, 0x0a, 0x40, 0x07, 0x0c, 9]);
    out.push(("ops_model", faults));
    out.push((
        "ops_model",
        vec![0x02, 0x80, 5, 5, 0x1d, 0x08, 0x00, 0x80, 6, 6, 0x1c, 4],
    ));
    // Synced writes, then a power cut that keeps nothing unsynced.
    out.push(("ops_model", vec![0x00, 0x80, 1, 1, 0x80, 2, 2, 0x0c, 0]));
    out
}

/// For tests that build journal images by hand: the journal record
/// `record` (header and payload, any framing) framed again as a record of
/// journal `number` of database `db_id` (`Db::id`), payload unchanged.
/// `None` if
/// `record` is shorter than its header says.
pub fn reframe_journal_record(record: &[u8], number: u64, db_id: u64) -> Option<Vec<u8>> {
    let seed = log::journal_seed(number, db_id);
    let len = u32::from_le_bytes(record.get(4..8)?.try_into().ok()?) as usize;
    let payload = record.get(log::HEADER_LEN..log::HEADER_LEN.checked_add(len)?)?;
    let mut out = Vec::with_capacity(record.len());
    log::encode_record_parts(&mut out, RecordKind::NumberedBatch, seed, &[], payload);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `open_image` starts from values stored compressed: the base
    /// image's one values file holds the `users` keyspace's eight values
    /// in less than half their raw bytes, and they read back.
    #[test]
    fn the_base_image_holds_compressed_values() {
        let files = base_image();
        let values: Vec<_> = files
            .iter()
            .filter(|(n, _)| n.ends_with(".values"))
            .collect();
        let raw: usize = (0..8).map(|i| 60 + i).sum();
        let stored: usize = values.iter().map(|(_, b)| b.len()).sum();
        assert!(
            !values.is_empty() && stored * 2 < raw,
            "{stored} bytes in {} values files for {raw} raw",
            values.len()
        );
        let fs = MemFs::new();
        for (name, bytes) in files {
            put_file(&fs, &db_dir().join(name), bytes).expect("image file");
        }
        let db = Db::open(db_dir(), small_options(&fs, 0x01)).expect("open");
        let users = db.keyspace("users").expect("users");
        for i in 0..8u32 {
            let want = format!("{i}").repeat(60 + i as usize).into_bytes();
            assert_eq!(users.get(format!("p{i:03}")).expect("get"), Some(want));
        }
    }
}
