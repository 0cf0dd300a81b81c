//! Value GC: how much a merge may move values (`Moving`), and the values
//! files it moves them into, read in batches on the worker threads
//! (`Moves`).

use super::quiet::Quiet;
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::vptr::{ValuePtr, padding};
use crate::options::Compression;
use crate::version::files;
use crate::version::segments::SegmentFile;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Value bytes a background compaction may move: the floor
/// `value_gc_bytes_per_compaction`, or `value_gc_pace` times the journal
/// bytes appended since the compaction before it, whichever is more.
pub(super) fn gc_allowance(opts: &crate::Options, appended: u64) -> u64 {
    let paced = (appended as f64 * opts.value_gc_pace) as u64;
    opts.value_gc_bytes_per_compaction.max(paced)
}

/// How much a merge may move values (value GC and settling).
#[derive(Clone, Copy)]
pub(super) enum Moving<'a> {
    /// A background compaction: value GC moves at most `gc` bytes, and
    /// values still in journals settle up to `settle` bytes
    /// (`settle_allowance`; 0 unless scans read at random beside writes).
    /// Tables are not rewritten for either: a table alone moves down a
    /// level as it is.
    Paced { gc: u64, settle: u64 },
    /// A full compaction (`Db::compact`): every value in a journal
    /// settles, and value GC is not bounded.
    All,
    /// A settling step: as `All` while the database stays quiet, then
    /// nothing more moves.
    WhileQuiet(&'a Quiet<'a>),
    /// A settling step short scans paid for (`settle::ReadDue`): values
    /// still in journals settle up to this many bytes, beside reads and
    /// writes; a lone table is rewritten in place. No value GC.
    Bounded(u64),
}

impl Moving<'_> {
    /// Whether every value still in a journal is to move (a full
    /// compaction, a settling step): the step's tables are rewritten
    /// even alone.
    pub(super) fn settles(self) -> bool {
        !matches!(self, Moving::Paced { .. })
    }

    /// May a value out of a mostly dead segment move (value GC), after
    /// `moved` bytes have in all?
    pub(super) fn may_collect(self, moved: u64) -> bool {
        match self {
            Moving::Paced { gc, .. } => moved < gc,
            Moving::All => true,
            Moving::WhileQuiet(q) => q.holds(),
            Moving::Bounded(_) => false,
        }
    }

    /// May a value still in a journal settle, after `settled` bytes have?
    pub(super) fn may_settle(self, settled: u64) -> bool {
        match self {
            Moving::Paced { settle, .. } | Moving::Bounded(settle) => settled < settle,
            Moving::All => true,
            Moving::WhileQuiet(q) => q.holds(),
        }
    }
}

/// Files a merge created, deleted if it fails.
#[derive(Default)]
pub(super) struct Created {
    pub(super) tables: Vec<u64>,
    pub(super) values: Vec<u64>,
}

impl Created {
    /// Creates a new table (`values` false) or values file, recorded
    /// here; returns its number and writer.
    pub(super) fn create(
        &mut self,
        inner: &Inner,
        values: bool,
    ) -> Result<(u64, Box<dyn crate::io::FileWrite>)> {
        let number = inner.new_file_number();
        let (path, list) = if values {
            (files::values(&inner.dir, number), &mut self.values)
        } else {
            (files::table(&inner.dir, number), &mut self.tables)
        };
        list.push(number);
        let file = inner
            .fs
            .create(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        Ok((number, file))
    }
}

/// A values file being written by a compaction: values moved out of
/// segments that are mostly dead (value GC) or still in write order
/// (settling).
pub(super) struct ValuesOut {
    pub(super) number: u64,
    pub(super) file: Box<dyn crate::io::FileWrite>,
    /// Bytes written, padding included.
    bytes: u64,
}

/// Most moves read together, and most bytes they may hold.
pub(super) const MOVES_MAX: usize = 256;
pub(super) const MOVES_BYTES_MAX: u64 = 8 << 20;

/// A compaction's moves: the values the merge chose to move, in the order
/// it met them (key order), read in batches on the worker threads (many
/// device reads in flight instead of one), compressed there if the
/// keyspace compresses, and appended to the current values file. A value
/// gets its new pointer only when its batch is placed (`drain`): where it
/// lands and what it stores depend on how the values before it
/// compressed.
pub(super) struct Moves {
    pub(super) out: Vec<ValuesOut>,
    /// Values to move and not yet read: their segments and pointers.
    pending: Vec<(Arc<SegmentFile>, ValuePtr)>,
    pending_bytes: u64,
    /// Stored bytes of the values taken to move so far, as they were
    /// stored before (what their segments lose).
    pub(super) moved_bytes: u64,
    /// Stored bytes of the moved values per values file, padding not
    /// counted (the edit's `value_live`).
    pub(super) written: BTreeMap<u64, u64>,
    /// How raw values are stored as they move (the keyspace's tables'
    /// compression); values compressed already move as they are.
    compression: Compression,
    /// The last batch tried to compress values and none shrank: the next
    /// tries one value in `BARREN_SAMPLE`, so incompressible data costs
    /// little more than with compression off.
    barren: bool,
}

/// While values do not compress, one value in this many is tried.
const BARREN_SAMPLE: usize = 16;

impl Moves {
    pub(super) fn new(compression: Compression) -> Moves {
        Moves {
            out: Vec::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            moved_bytes: 0,
            written: BTreeMap::new(),
            compression,
            barren: false,
        }
    }

    /// Takes the value `ptr` names (in `seg`) to move with the next
    /// batch; returns its index in that batch (`drain`'s result).
    pub(super) fn add(&mut self, seg: Arc<SegmentFile>, ptr: ValuePtr) -> usize {
        self.pending_bytes += u64::from(ptr.len);
        self.moved_bytes += u64::from(ptr.len);
        self.pending.push((seg, ptr));
        self.pending.len() - 1
    }

    /// True if the pending batch is as large as one may grow.
    pub(super) fn full(&self) -> bool {
        self.pending.len() >= MOVES_MAX || self.pending_bytes >= MOVES_BYTES_MAX
    }

    /// Reads the pending values (on the worker threads), compresses the
    /// raw ones if the keyspace compresses and they shrink, and appends
    /// them in order to the current values file, starting a new one
    /// (recorded in `created`) when it is full. Returns each value's new
    /// pointer, in the order `add` took them.
    pub(super) fn drain(&mut self, inner: &Inner, created: &mut Created) -> Result<Vec<ValuePtr>> {
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let (tx, rx) = crossbeam_channel::unbounded();
        let sample = if self.barren { BARREN_SAMPLE } else { 1 };
        let compression = self.compression;
        let how = move |i: usize| {
            if i.is_multiple_of(sample) {
                compression
            } else {
                Compression::None
            }
        };
        // Values compressed already move as they are: they are not tried.
        let tried = pending
            .iter()
            .enumerate()
            .filter(|(i, (_, p))| how(*i) != Compression::None && !p.compressed())
            .count();
        for (i, (seg, ptr)) in pending.iter().enumerate() {
            let (seg, ptr, tx, how) = (seg.clone(), *ptr, tx.clone(), how(i));
            inner.workers.run(move || {
                let _ = tx.send((i, read_packed(&seg, ptr, how)));
            });
        }
        drop(tx);
        let mut values: Vec<Option<Packed>> = pending.iter().map(|_| None).collect();
        for (i, got) in rx.iter() {
            values[i] = Some(got);
        }
        let mut placed = Vec::with_capacity(pending.len());
        // The values and padding for the current values file, appended in
        // one write (or one per file where the batch starts a new one).
        let mut buf = Vec::new();
        let mut shrank = 0;
        for (i, ((seg, ptr), got)) in pending.iter().zip(values).enumerate() {
            // A value whose reader was lost (it panicked) is read here.
            let got = got.unwrap_or_else(|| read_packed(seg, *ptr, how(i)));
            let (packed, stored) = checked_move(seg, ptr, got)?;
            if packed.compressed() && !ptr.compressed() {
                shrank += 1;
            }
            if self
                .out
                .last()
                .is_none_or(|o| o.bytes >= inner.opts.journal_bytes)
            {
                self.append(inner, &mut buf)?;
                let (number, file) = created.create(inner, true)?;
                self.out.push(ValuesOut {
                    number,
                    file,
                    bytes: 0,
                });
            }
            let o = self
                .out
                .last_mut()
                .expect("a values file was started above if none was open");
            let pad = padding(o.bytes, u64::from(packed.len));
            let to = ValuePtr {
                segment: o.number,
                offset: o.bytes + pad,
                ..packed
            };
            buf.resize(buf.len() + pad as usize, 0);
            buf.extend_from_slice(&stored);
            o.bytes += pad + u64::from(to.len);
            *self.written.entry(o.number).or_default() += u64::from(to.len);
            assert!(
                to.len <= ptr.len,
                "a moved value stores no more bytes than it did"
            );
            placed.push(to);
        }
        self.append(inner, &mut buf)?;
        assert_eq!(placed.len(), pending.len(), "every pending move is placed");
        assert!(shrank <= tried, "only values tried are compressed");
        if tried > 0 {
            self.barren = shrank == 0;
        }
        Ok(placed)
    }

    /// Appends `buf` (then cleared) to the current values file.
    fn append(&mut self, inner: &Inner, buf: &mut Vec<u8>) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let o = self
            .out
            .last_mut()
            .expect("bytes are placed only in an open values file");
        o.file.append(buf).map_err(|e| {
            Error::io(
                format!("writing {}", files::values(&inner.dir, o.number).display()),
                e,
            )
        })?;
        buf.clear();
        Ok(())
    }

    /// True if no move is waiting for `drain`.
    pub(super) fn drained(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A value read for a move: its pointer and stored bytes as they will be
/// written (compressed if they were packed), or why it could not be read
/// (`None`: it fails its checksum).
type Packed = std::io::Result<Option<(ValuePtr, Vec<u8>)>>;

/// Reads the value `ptr` names in `seg` — from the page cache if it holds
/// it (a scan or a reader just read it), else with a direct read — and
/// packs it as `how` says if it is raw and shrinks.
fn read_packed(seg: &SegmentFile, ptr: ValuePtr, how: Compression) -> Packed {
    let got = match seg.read_cached(&ptr) {
        Ok(Some(v)) => Ok(Some(v)),
        _ => seg.read(&ptr, true),
    };
    Ok(got?.map(|stored| {
        let mut packed = ptr;
        match packed.pack(how, &stored) {
            Some(smaller) => (packed, smaller),
            None => (ptr, stored),
        }
    }))
}

/// A moved value's read turned into its pointer and bytes, or the error
/// naming the file it lies in.
fn checked_move(seg: &SegmentFile, ptr: &ValuePtr, got: Packed) -> Result<(ValuePtr, Vec<u8>)> {
    match got {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(Error::corruption(
            seg.path(),
            ptr.offset,
            "a value being moved fails its checksum",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Error::corruption(
            seg.path(),
            ptr.offset,
            "a value being moved lies past the end of its segment",
        )),
        Err(e) => Err(Error::io(
            format!("reading a value to move from {}", seg.path().display()),
            e,
        )),
    }
}
