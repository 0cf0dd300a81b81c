//! Running one compaction: merging input tables into new tables of the
//! output level, moving values as `Moving` allows, and logging the edit.

use super::gc::{Created, Moves, Moving};
use super::pick::{Compaction, L0_DROPS_MIN};
use super::warm::warm_later;
use crate::cache::BlockCache;
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::key::{self, Kind};
use crate::format::manifest::{Edit, TableRecord};
use crate::format::table::{TableOptions, TableWriter};
use crate::format::vptr::ValuePtr;
use crate::limits::LEVELS;
use crate::read::cursor::{Cursor, Dir, MergeCursor, table_cursor};
use crate::sync;
use crate::version::segments::SegmentFile;
use crate::version::{TableFile, Version, files};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Runs compaction `c` into the next level, or, for a settling step of
/// one table below level 0, into its own level.
pub(super) fn compact(inner: &Inner, v: &Version, c: Compaction, moving: Moving) -> Result<()> {
    let in_place = c.level > 0 && moving.settles();
    let out_level = if in_place { c.level } else { c.level + 1 };
    let mut edit = Edit::default();
    let trivial = c.below.is_empty() && c.inputs.len() == 1 && !moving.settles();
    if trivial {
        let f = &c.inputs[0];
        edit.removed.push((c.level, f.number));
        edit.added.push(f.record(out_level));
    } else {
        edit.removed
            .extend(c.inputs.iter().map(|f| (c.level, f.number)));
        edit.removed
            .extend(c.below.iter().map(|f| (out_level, f.number)));
        let all: Vec<_> = c.inputs.iter().chain(&c.below).cloned().collect();
        match merge(inner, v, c.keyspace, &all, out_level, moving, c.warm)? {
            Some(merged) => {
                if c.level == 0 {
                    let read: u64 = c.inputs.iter().map(|f| f.entries).sum();
                    let new_keys = (merged.dropped as f64) < L0_DROPS_MIN * read as f64;
                    inner.l0_new_keys.store(new_keys, Ordering::Relaxed);
                }
                merged.into_edit(&mut edit)
            }
            None => return Ok(()),
        }
        // Damaged inputs can point into segments the version does not
        // hold: the files the merge wrote go, as after a failed merge.
        if let Err(detail) = v.check_value_dead(&edit.value_dead, &edit.value_live) {
            remove_outputs(inner, &edit);
            return Err(Error::corruption(&inner.dir, 0, detail));
        }
    }
    let moved: Vec<u64> = edit.value_live.iter().map(|&(n, _)| n).collect();
    log_merge(inner, edit, !trivial)?;
    inner.counters.compactions.fetch_add(1, Ordering::Relaxed);
    warm_later(inner, &moved);
    Ok(())
}

/// Logs a compaction's edit. If a full device made the manifest refuse it
/// (nothing appended), the files the merge wrote — the tables the edit
/// adds and the values files it moved values to, when `merged` (not a
/// trivial move, whose table is the input's) — are deleted, as after a
/// failed merge, and the compaction is retried later.
pub(super) fn log_merge(inner: &Inner, edit: Edit, merged: bool) -> Result<()> {
    let outputs = Edit {
        added: edit.added.clone(),
        value_live: edit.value_live.clone(),
        ..Edit::default()
    };
    inner.log_and_apply(edit, |_| {}).inspect_err(|e| {
        if merged && inner.manifest_refused(e) {
            remove_outputs(inner, &outputs);
        }
    })
}

/// Deletes the tables `edit` adds and the values files it moves values
/// to: the files a merge wrote that no version will name.
fn remove_outputs(inner: &Inner, edit: &Edit) {
    for t in &edit.added {
        let _ = inner.fs.remove(&files::table(&inner.dir, t.number));
    }
    for &(n, _) in &edit.value_live {
        let _ = inner.fs.remove(&files::values(&inner.dir, n));
    }
}

/// True if no level below `out_level` may hold `user_key` of `keyspace`.
pub(super) fn is_base_level(v: &Version, out_level: usize, keyspace: u32, user_key: &[u8]) -> bool {
    (out_level + 1..LEVELS).all(|l| v.find(l, keyspace, user_key).is_none())
}

/// What a merge wrote.
#[derive(Default)]
pub(super) struct Merged {
    tables: Vec<TableRecord>,
    /// Separated value bytes, per segment, of the pointers it dropped or
    /// moved away.
    dead: Vec<(u64, u64)>,
    /// Value bytes, per values file, it moved there.
    moved: Vec<(u64, u64)>,
    /// Entries it dropped: shadowed versions no snapshot reads, tombstones
    /// with nothing left to hide.
    dropped: u64,
}

impl Merged {
    pub(super) fn into_edit(self, edit: &mut Edit) {
        edit.added = self.tables;
        edit.value_dead = self.dead;
        edit.value_live = self.moved;
    }
}

/// Merges `inputs` into new tables for `out_level`, moving values as
/// `moving` allows: value GC moves values out of mostly dead segments,
/// and settling (`Moving::settles`) also moves every separated value
/// still in a journal to a values file, in key order. Under the null
/// policy (`value_gc_live_ratio` 0) nothing moves. `None`: a settling
/// step saw foreground work before it moved anything and gave up, leaving
/// nothing behind.
pub(super) fn merge(
    inner: &Inner,
    v: &Version,
    keyspace: u32,
    inputs: &[sync::Arc<TableFile>],
    out_level: usize,
    moving: Moving,
    warm: bool,
) -> Result<Option<Merged>> {
    let mut created = Created::default();
    let merged = merge_into(
        inner,
        v,
        keyspace,
        inputs,
        out_level,
        moving,
        warm,
        &mut created,
    );
    if let Ok(Some(m)) = &merged {
        inner.counters.table_bytes.fetch_add(
            m.tables.iter().map(|r| r.size).sum::<u64>(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    if !matches!(merged, Ok(Some(_))) {
        // Frees the space of the outputs written so far (the next open
        // would delete them anyway): a full device is retried later.
        for n in &created.tables {
            let _ = inner.fs.remove(&files::table(&inner.dir, *n));
        }
        for n in &created.values {
            let _ = inner.fs.remove(&files::values(&inner.dir, *n));
        }
    }
    merged
}

/// `merge`, recording every file it creates in `created`. Every input is
/// of `keyspace`, and so is every output.
#[allow(clippy::too_many_arguments)]
pub(super) fn merge_into(
    inner: &Inner,
    v: &Version,
    keyspace: u32,
    inputs: &[sync::Arc<TableFile>],
    out_level: usize,
    moving: Moving,
    warm: bool,
    created: &mut Created,
) -> Result<Option<Merged>> {
    assert!(
        inputs.iter().all(|f| f.keyspace == keyspace),
        "a merge never mixes keyspaces"
    );
    // Compactions are picked among live keyspaces of `v`.
    let (table_opts, table_bytes) = inner
        .table_opts_for(v, keyspace)
        .unwrap_or_else(|| (inner.table_opts.clone(), inner.opts.table_bytes));
    let reads = inner.read_points();
    let oldest_snapshot = reads.oldest();
    // Value bytes moved out of journals by settling (also in `moves`).
    let mut settled = 0u64;
    let mut merged = open_inputs(inner, inputs)?;
    let mut out = Outputs {
        inner,
        warm: if warm { inner.blocks.clone() } else { None },
        opts: &table_opts,
        table_bytes,
        keyspace,
        level: out_level,
        writer: None,
        tables: Vec::new(),
        waiting: Vec::new(),
        bytes: Vec::new(),
    };
    let mut current: Option<Vec<u8>> = None;
    // The next entry written starts a user key (tables end only there).
    let mut key_starts = false;
    // Seqno of the previous (newer) entry of the current user key.
    let mut newer_seqno = u64::MAX;
    let mut dead = std::collections::BTreeMap::<u64, u64>::new();
    let mut dropped = 0u64;
    let mut moves = Moves::new(table_opts.compression);
    // A settling step cut short gives up unless it has moved as many value
    // bytes as its inputs hold: finishing would rewrite the tables for
    // less than that. At close it always gives up.
    let input_bytes: u64 = inputs.iter().map(|f| f.size).sum();
    while merged.advance()? {
        if let Moving::WhileQuiet(q) = moving
            && !q.holds()
            && (moves.moved_bytes < input_bytes || q.closing())
        {
            return Ok(None);
        }
        let ikey = merged.key();
        let (user, tag) = key::split(ikey)
            .ok_or_else(|| Error::corruption(&inner.dir, 0, "internal key shorter than its tag"))?;
        let seqno = key::tag_seqno(tag);
        if current.as_deref() != Some(user) {
            current = Some(user.to_vec());
            key_starts = true;
            newer_seqno = u64::MAX;
        }
        if seqno >= newer_seqno {
            // Two inputs hold one key at one seqno (or out of order): a
            // damaged table whose checksums still pass.
            return Err(Error::corruption(
                &inner.dir,
                0,
                format!(
                    "compaction inputs hold a key twice at seqno {seqno} (tables {:?})",
                    inputs.iter().map(|f| f.number).collect::<Vec<_>>()
                ),
            ));
        }
        let shadowed = !reads.reads(seqno, newer_seqno);
        let dead_tombstone = key::tag_kind(tag) == Kind::Delete as u8
            && seqno <= oldest_snapshot
            && is_base_level(v, out_level, keyspace, user);
        newer_seqno = seqno;
        if shadowed || dead_tombstone {
            dropped += 1;
            if key::tag_kind(tag) == Kind::Pointer as u8 {
                let ptr = ValuePtr::decode(merged.value()).ok_or_else(|| {
                    Error::corruption(&inner.dir, 0, "malformed value pointer in a table")
                })?;
                *dead.entry(ptr.segment).or_default() += u64::from(ptr.len);
            }
            continue;
        }
        let starts = std::mem::take(&mut key_starts);
        let is_pointer = key::tag_kind(tag) == Kind::Pointer as u8;
        let move_one = is_pointer
            .then(|| value_to_move(inner, v, moving, &moves, settled, merged.value()))
            .flatten();
        if let Some((ptr, seg, settles)) = move_one {
            if settles {
                settled += u64::from(ptr.len);
            }
            *dead.entry(ptr.segment).or_default() += u64::from(ptr.len);
            let slot = moves.add(seg, ptr);
            out.add(ikey, starts, Out::Moved(slot), created)?;
        } else {
            out.add(ikey, starts, Out::Stored(merged.value()), created)?;
        }
        if moves.full() || out.bytes.len() >= WAITING_BYTES_MAX {
            let placed = moves.drain(inner, created)?;
            out.release(&placed, created)?;
        }
    }
    let placed = moves.drain(inner, created)?;
    out.release(&placed, created)?;
    let outputs = out.finish()?;
    let moved = std::mem::take(&mut moves.written);
    assert!(
        moved.values().sum::<u64>() <= moves.moved_bytes,
        "moved values store no more bytes than they did"
    );
    assert!(
        settled <= moves.moved_bytes,
        "settled values are moved values"
    );
    make_durable(inner, moves, settled, !outputs.is_empty())?;
    Ok(Some(Merged {
        tables: outputs,
        dead: dead.into_iter().collect(),
        moved: moved.into_iter().collect(),
        dropped,
    }))
}

/// Most bytes of keys and values a merge holds back while moves before
/// them are read.
const WAITING_BYTES_MAX: usize = 8 << 20;

/// An output entry's value: as the input stores it, or the new pointer of
/// the `n`th value of the moves' pending batch.
enum Out<'a> {
    Stored(&'a [u8]),
    Moved(usize),
}

/// An entry held back: its key and value in `Outputs::bytes`.
struct Waiting {
    key: std::ops::Range<usize>,
    /// `Ok`: the value's bytes; `Err(n)`: the new pointer of the `n`th
    /// move of the batch.
    value: std::result::Result<std::ops::Range<usize>, usize>,
    /// The entry starts a user key.
    starts: bool,
}

/// A merge's output tables, written in key order, a new table started at
/// a user key once the current one is full. An entry whose value moves,
/// and every entry after it, waits until its batch of moves is placed
/// (`release`): its pointer (the place, length and checksum of a value
/// that may be compressed) is known only then.
struct Outputs<'a> {
    inner: &'a Inner,
    /// The cache the outputs' data blocks go into as they are written
    /// (`Compaction::warm`).
    warm: Option<Arc<BlockCache>>,
    opts: &'a TableOptions,
    table_bytes: u64,
    keyspace: u32,
    level: usize,
    writer: Option<(u64, TableWriter)>,
    tables: Vec<TableRecord>,
    waiting: Vec<Waiting>,
    /// Keys and values of `waiting`, back to back.
    bytes: Vec<u8>,
}

impl Outputs<'_> {
    /// Adds the entry `ikey` (`starts`: the first of its user key) with
    /// `value`: written now if nothing waits and its value is known, else
    /// held back.
    fn add(&mut self, ikey: &[u8], starts: bool, value: Out, created: &mut Created) -> Result<()> {
        if self.waiting.is_empty()
            && let Out::Stored(v) = value
        {
            return self.write(ikey, starts, v, created);
        }
        let key = self.bytes.len()..self.bytes.len() + ikey.len();
        self.bytes.extend_from_slice(ikey);
        let value = match value {
            Out::Stored(v) => {
                let at = self.bytes.len();
                self.bytes.extend_from_slice(v);
                Ok(at..self.bytes.len())
            }
            Out::Moved(n) => Err(n),
        };
        self.waiting.push(Waiting { key, value, starts });
        Ok(())
    }

    /// Writes the entries held back, the moved values' pointers taken
    /// from `placed` (`Moves::drain`, which placed the batch they wait
    /// for).
    fn release(&mut self, placed: &[ValuePtr], created: &mut Created) -> Result<()> {
        let waiting = std::mem::take(&mut self.waiting);
        let bytes = std::mem::take(&mut self.bytes);
        let mut ptr_buf = Vec::with_capacity(crate::format::vptr::VPTR_LEN_MAX);
        let mut used = 0;
        for w in &waiting {
            let value = match &w.value {
                Ok(r) => &bytes[r.clone()],
                Err(n) => {
                    assert_eq!(*n, used, "moves are placed in the order they were taken");
                    used += 1;
                    ptr_buf.clear();
                    placed[*n].encode(&mut ptr_buf);
                    &ptr_buf[..]
                }
            };
            self.write(&bytes[w.key.clone()], w.starts, value, created)?;
        }
        assert_eq!(used, placed.len(), "every placed move is written");
        // Keep the buffers for the next batch.
        self.waiting = waiting;
        self.waiting.clear();
        self.bytes = bytes;
        self.bytes.clear();
        Ok(())
    }

    fn write(
        &mut self,
        ikey: &[u8],
        starts: bool,
        value: &[u8],
        created: &mut Created,
    ) -> Result<()> {
        if starts
            && let Some((_, w)) = &self.writer
            && w.estimated_size() >= self.table_bytes
            && let Some(full) = self.writer.take()
        {
            self.tables.push(finish(full, self.keyspace, self.level)?);
        }
        let w = match &mut self.writer {
            Some((_, w)) => w,
            None => {
                &mut self
                    .writer
                    .insert(new_table(
                        self.inner,
                        self.opts,
                        self.warm.clone(),
                        created,
                    )?)
                    .1
            }
        };
        w.add(ikey, value)
    }

    /// The tables written, the last one finished.
    fn finish(mut self) -> Result<Vec<TableRecord>> {
        assert!(self.waiting.is_empty(), "no entry is left waiting");
        if let Some(last) = self.writer.take() {
            self.tables.push(finish(last, self.keyspace, self.level)?);
        }
        Ok(self.tables)
    }
}

/// A merging cursor over the tables `inputs`.
fn open_inputs(inner: &Inner, inputs: &[sync::Arc<TableFile>]) -> Result<MergeCursor> {
    let mut children: Vec<Box<dyn Cursor>> = Vec::with_capacity(inputs.len());
    for f in inputs {
        let table = inner.tables.get(f)?;
        children.push(Box::new(table_cursor(&table, Dir::Forward, None)));
    }
    Ok(MergeCursor::new(children, Dir::Forward))
}

/// A new output table (its number recorded in `created`).
fn new_table(
    inner: &Inner,
    opts: &TableOptions,
    warm: Option<Arc<BlockCache>>,
    created: &mut Created,
) -> Result<(u64, TableWriter)> {
    let (number, file) = created.create(inner, false)?;
    let path = files::table(&inner.dir, number);
    let mut writer = TableWriter::new(file, path, opts).owned_by(opts.db_id, number);
    if let Some(cache) = warm {
        writer = writer.caching(cache, number);
    }
    Ok((number, writer))
}

/// Whether the value the pointer `stored` names moves, and how: value GC
/// moves a value out of a segment that is mostly dead to this
/// compaction's values file; settling also moves every value still in a
/// journal (written in arrival order), so the values file holds them in
/// key order. The null policy (ratio 0) moves nothing. A background
/// compaction moves at most its allowances, a settling step only while
/// the database is quiet; later ones move the rest. Returns the pointer,
/// its segment, and whether the move settles.
fn value_to_move(
    inner: &Inner,
    v: &Version,
    moving: Moving,
    moves: &Moves,
    settled: u64,
    stored: &[u8],
) -> Option<(ValuePtr, std::sync::Arc<SegmentFile>, bool)> {
    let gc = inner.opts.value_gc_live_ratio;
    let collected = moves.moved_bytes - settled;
    if gc <= 0.0 || !(moving.may_collect(collected) || moving.may_settle(settled)) {
        return None;
    }
    let p = ValuePtr::decode(stored)?;
    let seg = v.segments.get(&p.segment)?;
    let collect = seg.mostly_dead(gc) && moving.may_collect(collected);
    let settle = !collect && seg.file.in_write_order() && moving.may_settle(settled);
    (collect || settle).then(|| (p, seg.file.clone(), settle))
}

/// Makes a merge's outputs durable before the edit that names them: the
/// moved values appended and synced (`settled` of them out of journals),
/// and the directory synced if the merge created files (`tables`: it
/// wrote any).
fn make_durable(inner: &Inner, mut moves: Moves, settled: u64, tables: bool) -> Result<()> {
    assert!(moves.drained(), "every move is placed before its edit");
    inner
        .counters
        .value_bytes_moved
        .fetch_add(moves.moved_bytes, Ordering::Relaxed);
    inner
        .counters
        .value_bytes_settled
        .fetch_add(settled, Ordering::Relaxed);
    for o in &mut moves.out {
        o.file.sync().map_err(|e| {
            Error::io(
                format!("syncing {}", files::values(&inner.dir, o.number).display()),
                e,
            )
        })?;
    }
    if tables || !moves.out.is_empty() {
        inner
            .sync_dir()
            .map_err(|e| Error::io("syncing the database directory", e))?;
    }
    Ok(())
}

pub(super) fn finish(
    (number, w): (u64, TableWriter),
    keyspace: u32,
    level: usize,
) -> Result<TableRecord> {
    let s = w.finish()?;
    Ok(TableRecord {
        keyspace,
        level,
        number,
        size: s.file_size,
        entries: s.entries,
        smallest: s.smallest,
        largest: s.largest,
    })
}
