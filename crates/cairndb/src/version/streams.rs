//! Value streams: the separated values of unsynced writes, ordered by key
//! range as they are written (docs/architecture.md §Value streams).
//!
//! Each journal has a set of streams (`Streams`), one per key range
//! (partition). A writer whose batch is not synced appends each separated
//! value to the stream of its key's partition itself, before it joins the
//! commit queue, and the batch that goes into the journal holds a pointer
//! op in its place (format.md §Batch). A full scan then finds a key
//! range's values of one journal in one file of a few MiB instead of
//! scattered over the whole journal.
//!
//! Rules that keep acknowledged writes:
//! - a value is in the page cache (appended) before its batch is queued,
//!   so a record that points at it survives a process crash;
//! - every sync that vouches for records — a synced group, a seal, a
//!   clean close — first syncs every stream appended to since the last
//!   one (and the directory, if a stream was created): `sync_dirty`;
//! - a batch placed in one journal's streams and committed after that
//!   journal was sealed goes into the next journal with its values inline
//!   (`Pending::rep_for`, which keeps the batch as the writer made it): a
//!   memtable points only into its own journal and its own streams, which
//!   are synced when it is sealed;
//! - recovery copies the values of unvouched records into the tables it
//!   writes, checking each against its pointer (and decompressing it);
//!   the first that does not match ends the journal like a torn tail.
//!
//! A value of a keyspace that compresses is stored compressed where it
//! shrinks (`Streams::pack`), its pointer naming the codec.

use crate::format::batch as codec;
use crate::format::compress::{BLOCK_TYPE_RAW, compress};
use crate::format::key::Kind;
use crate::format::vptr::{ValuePtr, padding};
use crate::io::FileWrite;
use crate::keyspace::Separation;
use crate::options::Compression;
use crate::sync::Mutex;
use crate::version::Reaper;
use crate::version::files;
use crate::version::segments::SegmentFile;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Blocks a stream reserves ahead of its appends (`FileWrite::reserve`).
const STREAM_RESERVE_AHEAD: u64 = 1 << 20;

/// After this many values in a row that did not shrink, one value in
/// `BARREN_SAMPLE` is tried, until one does: incompressible values cost
/// the writers little more than with compression off.
const BARREN_AFTER: u64 = 64;
const BARREN_SAMPLE: u64 = 16;

/// Keys kept to cut the next journal's partitions: the keys of about one
/// separated value in `SAMPLE_EVERY` (by hash), up to `SAMPLE_MAX` keys.
const SAMPLE_EVERY: u64 = 16;
const SAMPLE_MAX: usize = 4096;
/// A journal of one stream (no sample to cut it by yet: the first after
/// open) is full once it has sampled this many keys per partition wanted
/// (`Streams::cut_due`), so the next journal is cut into key ranges. A
/// journal of one stream holds every key range's values in write order,
/// and a long scan over any key range needs all of it: the contest's
/// scaled-down range phase (1 GiB of values, 128 MiB journals, 512 MiB
/// cap) held the whole 128 MiB first stream beside the key ranges it was
/// in, which left its eight scanners room for only a few ranges, and
/// scanners drifting apart read their values alone. Cut after 8 samples
/// per partition (256 keys at 32, about 4,096 values, 16 MiB of 4 KiB
/// values), the next journal's ranges come within about a third of an
/// even split, and the journal after it is cut by up to 4,096 keys.
const SAMPLE_PER_PART_TO_CUT: usize = 8;

/// The staging ring slots of value streams (`files::stream_stage`), one
/// per stream being appended to: a slot is taken when a stream is created
/// and given back when the stream is sealed, so its ring's pages stay in
/// memory and are reused by the next journal's streams instead of every
/// stream mapping new ones.
#[derive(Default)]
pub(crate) struct StageSlots {
    free: Mutex<Vec<u64>>,
    next: AtomicU64,
}

impl StageSlots {
    /// A free slot: the lowest given back, else a new one.
    fn take(&self) -> u64 {
        let mut free = self.free.lock();
        free.sort_unstable_by(|a, b| b.cmp(a));
        free.pop()
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Gives back `slot`, whose stream is wholly in its file.
    fn give(&self, slot: u64) {
        let mut free = self.free.lock();
        debug_assert!(!free.contains(&slot), "stage slot {slot} given back twice");
        free.push(slot);
    }
}

/// Whether a new journal's value streams are staged (written directly,
/// `Streams::staged`) rather than through the page cache, with `live`
/// bytes of separated values in the database and `available` bytes of
/// memory the process could still take: as `Options::stage_streams` says,
/// and by default once the values take more than half that memory
/// (`auto_choice`, as for reads; never where it cannot be told, nor when
/// values are read through the page cache). Through the page cache,
/// values written stay there for the reads after them (YCSB A ran
/// 570–600 k ops/s so, 234–236 k staged, its every read of a written
/// value a device read); staged, a load bigger than memory costs the
/// writers about half the CPU per value (the contest's write phase ran
/// 1.6× as fast), and the values it writes would have left the page
/// cache before they are read anyway.
pub(crate) fn stage_new_streams(
    opts: &crate::options::Options,
    live: u64,
    available: Option<u64>,
) -> bool {
    if let Some(always) = opts.stage_streams {
        return always;
    }
    opts.value_reads != crate::options::ValueReads::PageCache
        && crate::read::policy::auto_choice(live.saturating_mul(2), available)
            != crate::read::policy::How::PageCache
}

/// Most threads one `each_at_once` runs its calls on.
const AT_ONCE_MAX: usize = 8;

/// Calls `f` on each of `parts`, on up to `AT_ONCE_MAX` threads at once
/// when there are several, and returns the first error (every part is
/// tried). A seal syncs and truncates each of a journal's streams (32 by
/// default), and each is a device flush: one after another they held up
/// the writers waiting on the seal for the sum of them (32 at once were
/// no faster than 8).
fn each_at_once<T: Sync>(
    parts: &[T],
    f: impl Fn(&T) -> std::io::Result<()> + Sync,
) -> std::io::Result<()> {
    if parts.len() < 2 {
        return parts.iter().try_for_each(&f);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> std::io::Result<()> {
        let mut first = Ok(());
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(part) = parts.get(i) else {
                return first;
            };
            // Every part is tried, whatever failed before: each records its
            // own failure (`dirty`, its writer kept) for the next attempt.
            if let Err(e) = f(part) {
                first = first.and(Err(e));
            }
        }
    };
    let threads = parts.len().min(AT_ONCE_MAX);
    std::thread::scope(|s| {
        // A helper that cannot be started leaves its share to the others.
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("cairndb-stream-sync".into())
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        let mine = work();
        helpers.into_iter().fold(mine, |acc, h| {
            let theirs = h
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("a stream sync panicked")));
            acc.and(theirs)
        })
    })
}

/// A new stream's writer, the reader that sees what it appended, and its
/// ring slot if it is staged (`Streams::staged`).
type Staged = (
    Box<dyn FileWrite>,
    Option<Arc<dyn crate::io::FileRead>>,
    Option<u64>,
);

/// The value streams of one journal.
pub(crate) struct Streams {
    /// The journal they belong to.
    pub journal: u64,
    /// File number of partition 0; partition `i` is `first + i`.
    first: u64,
    /// `bounds[i]` is the smallest key of partition `i + 1`.
    bounds: Vec<Vec<u8>>,
    parts: Vec<Part>,
    /// Set by `seal`: nothing more is appended.
    sealed: AtomicBool,
    /// New streams are staged (`Streams::staged`), where the reaper has
    /// stage slots.
    stage: bool,
    /// A stream file was created since the directory was last synced.
    created: AtomicBool,
    /// Value bytes appended (with padding): counts towards the journal's
    /// size (`Options::journal_bytes`).
    bytes: AtomicU64,
    /// Values tried for compression in a row that did not shrink.
    misses: AtomicU64,
    /// Values not tried while `misses` is past `BARREN_AFTER`.
    skipped: AtomicU64,
    sample: Mutex<Vec<Vec<u8>>>,
    /// Keys sampled after which this journal is full, if it has one
    /// stream and more are wanted (`SAMPLE_PER_PART_TO_CUT`), and whether
    /// they have been.
    cut_at: Option<usize>,
    cut_due: AtomicBool,
    reaper: Arc<Reaper>,
}

struct Part {
    /// The stream's segment handle, once its file exists.
    segment: OnceLock<Arc<SegmentFile>>,
    file: Mutex<PartFile>,
    /// Appended to since the last sync.
    dirty: AtomicBool,
}

#[derive(Default)]
struct PartFile {
    writer: Option<Box<dyn FileWrite>>,
    /// The staging ring slot `writer` appends through, if staged.
    slot: Option<u64>,
    /// An append or a create failed: the values go to the journal.
    failed: bool,
}

impl Streams {
    /// The streams of journal `journal`, with file numbers
    /// `first..first + bounds.len() + 1`; files are created on first use,
    /// staged through ring slots if `stage` (`Streams::staged`). With no
    /// bounds and `partitions` (`Options::value_partitions`) of 2 or more,
    /// the journal is full once its sample can cut them (`cut_due`).
    pub fn new(
        reaper: &Arc<Reaper>,
        journal: u64,
        first: u64,
        bounds: Vec<Vec<u8>>,
        partitions: usize,
        stage: bool,
    ) -> Streams {
        let cut_at = (bounds.is_empty() && partitions >= 2)
            .then(|| (partitions * SAMPLE_PER_PART_TO_CUT).min(SAMPLE_MAX));
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        let parts = (0..=bounds.len())
            .map(|_| Part {
                segment: OnceLock::new(),
                file: Mutex::new(PartFile::default()),
                dirty: AtomicBool::new(false),
            })
            .collect();
        Streams {
            journal,
            first,
            bounds,
            parts,
            sealed: AtomicBool::new(false),
            stage,
            created: AtomicBool::new(false),
            bytes: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            sample: Mutex::new(Vec::new()),
            cut_at,
            cut_due: AtomicBool::new(false),
            reaper: reaper.clone(),
        }
    }

    /// This journal has one stream and has sampled enough keys to cut the
    /// next one into key ranges: it is full (`Journal::is_full`).
    pub fn cut_due(&self) -> bool {
        self.cut_due.load(Ordering::Relaxed)
    }

    /// Value bytes appended so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The segment of stream `number`, if it is one of these and exists.
    pub fn segment(&self, number: u64) -> Option<&Arc<SegmentFile>> {
        let i = usize::try_from(number.checked_sub(self.first)?).ok()?;
        self.parts.get(i)?.segment.get()
    }

    /// The segments of the streams that exist.
    pub fn segments(&self) -> impl Iterator<Item = &Arc<SegmentFile>> {
        self.parts.iter().filter_map(|p| p.segment.get())
    }

    /// `rep` (a batch payload) with each put of at least its keyspace's
    /// threshold (`rule`) replaced by a pointer op to its value, appended
    /// to its partition's stream; `None` if no value was placed (the batch
    /// goes as it is). A value that cannot be appended (a full device, a
    /// failed write) stays inline: the journal append then decides the
    /// write's fate.
    pub fn place(&self, rep: &[u8], rule: &Separation) -> Option<Vec<u8>> {
        let decoded = codec::decode(rep).ok()?;
        let separated =
            |op: &codec::Op| op.kind == Kind::Put && op.value.len() >= rule.min(op.keyspace);
        if !decoded.ops.iter().any(separated) {
            return None;
        }
        let mut out = Vec::with_capacity(rep.len().min(64 << 10));
        out.extend_from_slice(&rep[..codec::BATCH_HEADER_LEN]);
        let mut encoded = Vec::with_capacity(crate::format::vptr::VPTR_LEN_MAX);
        let mut any = false;
        for op in &decoded.ops {
            let packed = separated(op)
                .then(|| self.pack(rule.compression(op.keyspace), op.value))
                .flatten();
            let (stored, codec) = packed
                .as_ref()
                .map_or((op.value, BLOCK_TYPE_RAW), |(b, c)| (&b[..], *c));
            if separated(op)
                && let Some(ptr) = self.append(op.key, stored, codec)
            {
                encoded.clear();
                ptr.encode(&mut encoded);
                codec::push_op(&mut out, op.keyspace, Kind::Pointer, op.key, &encoded);
                any = true;
            } else {
                codec::push_op(&mut out, op.keyspace, op.kind, op.key, op.value);
            }
        }
        any.then_some(out)
    }

    /// `value` compressed as `how` says and its codec, if it shrinks by an
    /// eighth (`compress::compress`); `None` stores it raw. While values
    /// do not shrink, most are not tried (`BARREN_AFTER`).
    fn pack(&self, how: Compression, value: &[u8]) -> Option<(Vec<u8>, u8)> {
        if how == Compression::None {
            return None;
        }
        if self.misses.load(Ordering::Relaxed) >= BARREN_AFTER
            && !self
                .skipped
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(BARREN_SAMPLE)
        {
            return None;
        }
        let mut out = Vec::new();
        match compress(how, value, &mut out) {
            BLOCK_TYPE_RAW => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
            codec => {
                self.misses.store(0, Ordering::Relaxed);
                Some((out, codec))
            }
        }
    }

    /// Appends `value` (the stored bytes of `key`'s value, compressed as
    /// `codec` says) to its partition's stream.
    fn append(&self, key: &[u8], value: &[u8], codec: u8) -> Option<ValuePtr> {
        let i = self.bounds.partition_point(|b| b.as_slice() <= key);
        let part = &self.parts[i];
        let number = self.first + i as u64;
        let mut file = part.file.lock();
        // Checked under the part's lock, which `seal` takes after setting
        // the flag: an append either sees it or is synced by the seal.
        if self.sealed.load(Ordering::Acquire) || file.failed {
            return None;
        }
        if file.writer.is_none() {
            match self
                .reaper
                .fs
                .create(&files::stream(&self.reaper.dir, number))
            {
                Ok(w) => {
                    let (w, reader, slot) = self.staged(number, w);
                    file.writer = Some(w);
                    file.slot = slot;
                    self.created.store(true, Ordering::Release);
                    let _ = part
                        .segment
                        .set(SegmentFile::new_stream(&self.reaper, number, reader));
                }
                Err(_) => {
                    file.failed = true;
                    return None;
                }
            }
        }
        let w = file.writer.as_mut()?;
        let at = w.len();
        let len = value.len() as u64;
        let pad = padding(at, len);
        // A full device refuses here, with nothing appended.
        w.reserve(at + pad + len, STREAM_RESERVE_AHEAD).ok()?;
        let appended = if pad > 0 {
            w.append(&vec![0u8; pad as usize])
                .and_then(|()| w.append(value))
        } else {
            w.append(value)
        };
        if appended.is_err() {
            file.failed = true;
            return None;
        }
        assert_eq!(w.len(), at + pad + len, "a stream append moved its end");
        part.dirty.store(true, Ordering::Release);
        drop(file);
        self.bytes.fetch_add(pad + len, Ordering::Relaxed);
        // Chosen by the key's hash, not by count: a count would follow
        // any period in the order keys are written.
        if u64::from(crate::format::coding::crc(key)).is_multiple_of(SAMPLE_EVERY) {
            let mut sample = self.sample.lock();
            if sample.len() < SAMPLE_MAX {
                sample.push(key.to_vec());
            }
            if self.cut_at.is_some_and(|at| sample.len() >= at) {
                self.cut_due.store(true, Ordering::Relaxed);
            }
        }
        Some(ValuePtr {
            codec,
            ..ValuePtr::to(number, at + pad, value)
        })
    }

    /// Syncs every stream appended to since its last sync, after the
    /// directory if a stream was created: what a sync that vouches for
    /// journal records must do first.
    pub fn sync_dirty(&self) -> std::io::Result<()> {
        if self.created.swap(false, Ordering::AcqRel)
            && let Err(e) = self.reaper.fs.sync_dir(&self.reaper.dir)
        {
            self.created.store(true, Ordering::Release);
            return Err(e);
        }
        let dirty: Vec<&Part> = self
            .parts
            .iter()
            .filter(|p| p.dirty.swap(false, Ordering::AcqRel))
            .collect();
        each_at_once(&dirty, |part| {
            let mut file = part.file.lock();
            match file.writer.as_mut().map(|w| w.sync()) {
                Some(Err(e)) => {
                    part.dirty.store(true, Ordering::Release);
                    Err(e)
                }
                _ => Ok(()),
            }
        })
    }

    /// Ends appends (later batches keep their values inline), gives back
    /// the blocks reserved past each stream's end (`FileWrite::trim`),
    /// syncs what was appended, and closes the files.
    pub fn seal(&self) -> std::io::Result<()> {
        self.sealed.store(true, Ordering::Release);
        if self.created.swap(false, Ordering::AcqRel)
            && let Err(e) = self.reaper.fs.sync_dir(&self.reaper.dir)
        {
            self.created.store(true, Ordering::Release);
            return Err(e);
        }
        let open: Vec<&Part> = self.parts.iter().collect();
        each_at_once(&open, |part| {
            let mut file = part.file.lock();
            if let Some(w) = file.writer.as_mut() {
                // Trimmed first: a staged stream's trim writes it out and
                // its truncation's fsync flushes the data too, so the sync
                // after finds nothing left to flush (one device flush per
                // stream, not two).
                w.trim()?;
                if part.dirty.swap(false, Ordering::AcqRel)
                    && let Err(e) = w.sync()
                {
                    part.dirty.store(true, Ordering::Release);
                    return Err(e);
                }
            }
            // Every byte is in the file now (`trim` wrote the ring out):
            // readers no longer look at the ring, and its slot may take
            // another stream's bytes.
            file.writer = None;
            if let (Some(slot), Some(slots)) = (file.slot.take(), &self.reaper.stream_stages) {
                slots.give(slot);
            }
            Ok(())
        })
    }

    /// `plain`, stream `number` just created, reopened for direct appends
    /// staged through a free ring slot (`io/stage.rs`), with the reader
    /// that sees the ring and the slot; `plain` as it is where streams are
    /// not staged (`Reaper::stream_stages`) or the backend cannot stage
    /// (`Fs::open_staged`). Staged, an append is a copy into memory the
    /// ring reuses, and the stream reaches its file in whole chunks of
    /// direct writes; through the page cache, the contest's writers spent
    /// about 40 % of their CPU in `pwrite` (a new page-cache page for
    /// every 4 KiB value).
    fn staged(&self, number: u64, plain: Box<dyn FileWrite>) -> Staged {
        let Some(slots) = self.reaper.stream_stages.as_ref().filter(|_| self.stage) else {
            return (plain, None, None);
        };
        let slot = slots.take();
        let path = files::stream(&self.reaper.dir, number);
        let stage = files::stream_stage(&self.reaper.dir, slot);
        match self.reaper.fs.open_staged(
            &path,
            &stage,
            number,
            (
                crate::limits::STREAM_RING_BYTES,
                crate::limits::STREAM_CHUNK_BYTES,
            ),
            &self.reaper.rings,
        ) {
            Ok(Some(staged)) => {
                let reader = staged.reader();
                (staged, reader, Some(slot))
            }
            _ => {
                slots.give(slot);
                (plain, None, None)
            }
        }
    }

    /// Partition bounds for the next journal, cut at quantiles of the
    /// keys sampled here: `partitions - 1` keys, fewer if the sample
    /// holds fewer distinct keys.
    pub fn next_bounds(&self, partitions: usize) -> Vec<Vec<u8>> {
        let mut sample = std::mem::take(&mut *self.sample.lock());
        if partitions < 2 || sample.len() < partitions {
            return Vec::new();
        }
        sample.sort_unstable();
        let mut bounds: Vec<Vec<u8>> = (1..partitions)
            .map(|i| sample[i * sample.len() / partitions].clone())
            .collect();
        bounds.dedup();
        bounds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{Fs, MemFs};
    use std::path::Path;

    fn streams(bounds: &[&str]) -> (Arc<MemFs>, Streams) {
        let fs = Arc::new(MemFs::new());
        let dir = Path::new("/db");
        fs.create_dir_all(dir).expect("mkdir");
        let reaper = Arc::new(Reaper::new(
            fs.clone(),
            dir.to_path_buf(),
            0,
            Box::new(|_| {}),
        ));
        let bounds: Vec<Vec<u8>> = bounds.iter().map(|b| b.as_bytes().to_vec()).collect();
        let partitions = bounds.len() + 1;
        (fs, Streams::new(&reaper, 5, 10, bounds, partitions, false))
    }

    /// Values of at least `min` bytes are separated, in every keyspace.
    fn rule(min: usize) -> Separation {
        Separation::new(min, Default::default())
    }

    fn batch(ops: &[(&str, usize)]) -> Vec<u8> {
        let mut rep = codec::new_payload();
        for (key, len) in ops {
            codec::push_op(
                &mut rep,
                0,
                Kind::Put,
                key.as_bytes(),
                &vec![key.as_bytes()[0]; *len],
            );
        }
        codec::set_count(&mut rep, ops.len() as u32);
        rep
    }

    #[test]
    fn values_go_to_their_key_range_and_small_ones_stay() {
        let (fs, s) = streams(&["m"]);
        let rep = batch(&[("a", 4096), ("b", 10), ("z", 5000)]);
        let placed = s.place(&rep, &rule(1024)).expect("two values placed");
        let ops = codec::decode(&placed).expect("decodes").ops;
        assert_eq!(ops[0].kind, Kind::Pointer);
        assert_eq!(ops[1].kind, Kind::Put);
        assert_eq!(ops[2].kind, Kind::Pointer);
        let a = ValuePtr::decode(ops[0].value).expect("pointer");
        let z = ValuePtr::decode(ops[2].value).expect("pointer");
        assert_eq!((a.segment, z.segment), (10, 11));
        let read = |p: &ValuePtr| {
            let r = fs
                .open(&files::stream(Path::new("/db"), p.segment))
                .expect("open");
            let mut buf = vec![0u8; p.len as usize];
            r.read_exact_at(&mut buf, p.offset).expect("read");
            buf
        };
        assert!(a.matches(&read(&a)) && z.matches(&read(&z)));
        // The second 4 KiB value of a stream starts on a page.
        let again = s
            .place(&batch(&[("c", 4096)]), &rule(1024))
            .expect("placed");
        let c = ValuePtr::decode(codec::decode(&again).expect("decodes").ops[0].value)
            .expect("pointer");
        assert_eq!(c.offset % 4096, 0);
        assert!(s.place(&batch(&[("a", 100)]), &rule(1024)).is_none());
    }

    #[test]
    fn a_sealed_set_places_nothing() {
        let (_fs, s) = streams(&[]);
        assert!(s.place(&batch(&[("a", 2000)]), &rule(1024)).is_some());
        s.seal().expect("seal");
        assert!(s.place(&batch(&[("a", 2000)]), &rule(1024)).is_none());
    }

    /// Blocks a stream reserved ahead of its appends are given back when
    /// it is sealed: a journal's streams would otherwise hold up to a MiB
    /// each of space no value uses.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_sealed_stream_keeps_no_reserved_blocks() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let fs: Arc<dyn Fs> = Arc::new(crate::io::PosixFs);
        let reaper = Arc::new(Reaper::new(
            fs,
            tmp.path().to_path_buf(),
            0,
            Box::new(|_| {}),
        ));
        let s = Streams::new(&reaper, 5, 10, Vec::new(), 1, false);
        s.place(&batch(&[("a", 4096)]), &rule(1024))
            .expect("placed");
        let path = files::stream(tmp.path(), 10);
        let blocks = || std::fs::metadata(&path).expect("stat").blocks() * 512;
        let reserved = blocks();
        s.seal().expect("seal");
        let kept = blocks();
        assert!(
            kept <= 8192,
            "{kept} bytes kept after the seal ({reserved} before)"
        );
    }

    /// Staged streams: a value is read back through the stream's reader
    /// while only its ring holds it, and a sealed stream's ring slot is
    /// taken by the next journal's stream instead of a new one.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_sealed_stream_gives_its_ring_slot_to_the_next() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fs: Arc<dyn Fs> = Arc::new(crate::io::PosixFs);
        let reaper = Arc::new(Reaper {
            stream_stages: Some(StageSlots::default()),
            ..Reaper::new(fs, tmp.path().to_path_buf(), 0, Box::new(|_| {}))
        });
        let slots = || {
            let mut names: Vec<String> = std::fs::read_dir(tmp.path())
                .expect("list")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("STAGE-"))
                .collect();
            names.sort();
            names
        };
        let first = Streams::new(&reaper, 5, 10, vec![b"m".to_vec()], 2, true);
        let placed = first
            .place(&batch(&[("a", 4096), ("z", 4096)]), &rule(1024))
            .expect("placed");
        assert_eq!(slots(), ["STAGE-000", "STAGE-001"], "one slot per stream");
        let ops = codec::decode(&placed).expect("decodes").ops;
        let a = ValuePtr::decode(ops[0].value).expect("pointer");
        let on_disk = std::fs::metadata(files::stream(tmp.path(), a.segment)).expect("stat");
        assert!(on_disk.len() < 4096, "the value is in the ring only");
        let seg = first.segment(a.segment).expect("segment");
        let got = seg.read(&a, false).expect("read").expect("found");
        assert!(a.matches(&got), "read back out of the ring");
        first.seal().expect("seal");
        let sealed = std::fs::metadata(files::stream(tmp.path(), a.segment)).expect("stat");
        assert_eq!(
            sealed.len(),
            a.offset + u64::from(a.len),
            "wholly in its file"
        );
        let next = Streams::new(&reaper, 20, 30, Vec::new(), 1, true);
        next.place(&batch(&[("b", 4096)]), &rule(1024))
            .expect("placed");
        assert_eq!(slots(), ["STAGE-000", "STAGE-001"], "a slot reused");
    }

    #[test]
    fn each_at_once_calls_every_part_and_returns_a_failure() {
        use std::sync::atomic::AtomicUsize;
        let parts: Vec<usize> = (0..20).collect();
        let calls: Vec<AtomicUsize> = (0..20).map(|_| AtomicUsize::new(0)).collect();
        let threads = Mutex::new(std::collections::HashSet::new());
        let got = each_at_once(&parts, |&i| {
            calls[i].fetch_add(1, Ordering::Relaxed);
            threads.lock().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_millis(2));
            if i == 3 || i == 11 {
                Err(std::io::Error::other(format!("part {i}")))
            } else {
                Ok(())
            }
        });
        assert!(got.is_err(), "a failure is returned");
        assert!(
            calls.iter().all(|c| c.load(Ordering::Relaxed) == 1),
            "each part once"
        );
        assert!(threads.lock().len() > 1, "on several threads");
        assert!(each_at_once(&parts[..1], |_| Ok(())).is_ok());
        assert!(each_at_once::<usize>(&[], |_| Ok(())).is_ok());
    }

    #[test]
    fn bounds_are_quantiles_of_the_sample() {
        let (_fs, s) = streams(&[]);
        for i in 0..1000u32 {
            let key = format!("{i:04}");
            s.place(&batch(&[(key.as_str(), 1024)]), &rule(1024))
                .expect("placed");
        }
        let bounds = s.next_bounds(4);
        assert_eq!(bounds.len(), 3);
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        let mid = String::from_utf8(bounds[1].clone()).expect("utf-8");
        let mid: u32 = mid.parse().expect("number");
        assert!((400..600).contains(&mid), "median cut at {mid}");
    }
}
