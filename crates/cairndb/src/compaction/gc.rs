//! Value GC: how much a merge may move values (`Moving`), and the values
//! files it moves them into, read in batches on the worker threads
//! (`Moves`).

use super::quiet::Quiet;
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::vptr::{ValuePtr, padding};
use crate::version::files;
use crate::version::segments::SegmentFile;

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
/// segments that are mostly dead (value GC).
pub(super) struct ValuesOut {
    pub(super) number: u64,
    pub(super) file: Box<dyn crate::io::FileWrite>,
    /// Bytes given out: written, plus those of the moves still pending.
    bytes: u64,
}

/// Most moves read together, and most bytes they may hold.
pub(super) const MOVES_MAX: usize = 256;
pub(super) const MOVES_BYTES_MAX: u64 = 8 << 20;
/// Value GC's moves: each value gets its new place (the current values
/// file, at the next offset) as soon as the merge meets it, so the table
/// entry can be written at once; the values themselves are read in
/// batches on the worker threads (many device reads in flight instead of
/// one) and appended in the order their places were given.
#[derive(Default)]
pub(super) struct Moves {
    pub(super) out: Vec<ValuesOut>,
    /// Values given a place in `out.last()` and not yet copied, with the
    /// zero bytes to write before each.
    pending: Vec<(std::sync::Arc<SegmentFile>, ValuePtr, u64)>,
    pending_bytes: u64,
    /// Value bytes given a place so far.
    pub(super) moved_bytes: u64,
}

impl Moves {
    /// Gives the value `ptr` names (in `seg`) its place in this
    /// compaction's values file, starting a new file when the current one
    /// is full; returns the new pointer. The value is copied later
    /// (`drain`): same length and checksum, so the pointer is known now.
    pub(super) fn add(
        &mut self,
        inner: &Inner,
        seg: std::sync::Arc<SegmentFile>,
        ptr: ValuePtr,
        created: &mut Created,
    ) -> Result<ValuePtr> {
        if self
            .out
            .last()
            .is_none_or(|o| o.bytes >= inner.opts.journal_bytes)
        {
            self.drain(inner)?;
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
        let pad = padding(o.bytes, u64::from(ptr.len));
        let moved = ValuePtr {
            segment: o.number,
            offset: o.bytes + pad,
            ..ptr
        };
        o.bytes += pad + u64::from(ptr.len);
        self.pending_bytes += pad + u64::from(ptr.len);
        self.moved_bytes += u64::from(ptr.len);
        self.pending.push((seg, ptr, pad));
        if self.pending.len() >= MOVES_MAX || self.pending_bytes >= MOVES_BYTES_MAX {
            self.drain(inner)?;
        }
        Ok(moved)
    }

    /// Reads the pending values (on the worker threads) and appends them,
    /// in order, to the current values file.
    pub(super) fn drain(&mut self, inner: &Inner) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let (tx, rx) = crossbeam_channel::unbounded();
        for (i, (seg, ptr, _)) in pending.iter().enumerate() {
            let (seg, ptr, tx) = (seg.clone(), *ptr, tx.clone());
            inner.workers.run(move || {
                // From the page cache if it holds the value (a scan or a
                // reader just read it), else with a direct read.
                let got = match seg.read_cached(&ptr) {
                    Ok(Some(v)) => Ok(Some(v)),
                    _ => seg.read(&ptr, true),
                };
                let _ = tx.send((i, got));
            });
        }
        drop(tx);
        let mut values: Vec<Option<std::io::Result<Option<Vec<u8>>>>> =
            pending.iter().map(|_| None).collect();
        for (i, got) in rx.iter() {
            values[i] = Some(got);
        }
        let o = self
            .out
            .last_mut()
            .expect("pending moves were given places in an open values file");
        // The batch's values and padding, appended in one write.
        let mut buf = Vec::with_capacity(
            pending
                .iter()
                .map(|(_, p, pad)| *pad as usize + p.len as usize)
                .sum(),
        );
        for ((seg, ptr, pad), got) in pending.iter().zip(values) {
            let path = files::journal(&inner.dir, ptr.segment);
            // A value whose reader was lost (it panicked) is read here.
            let got = got.unwrap_or_else(|| seg.read(ptr, true));
            let value = match got {
                Ok(Some(v)) => v,
                Ok(None) => {
                    return Err(Error::corruption(
                        &path,
                        ptr.offset,
                        "a value being moved fails its checksum",
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(Error::corruption(
                        &path,
                        ptr.offset,
                        "a value being moved lies past the end of its segment",
                    ));
                }
                Err(e) => {
                    return Err(Error::io(
                        format!("reading a value to move from {}", path.display()),
                        e,
                    ));
                }
            };
            buf.resize(buf.len() + *pad as usize, 0);
            buf.extend_from_slice(&value);
        }
        o.file.append(&buf).map_err(|e| {
            Error::io(
                format!("writing {}", files::values(&inner.dir, o.number).display()),
                e,
            )
        })?;
        Ok(())
    }
}
