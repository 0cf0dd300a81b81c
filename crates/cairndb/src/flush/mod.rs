//! Flush: a sealed memtable becomes a level-0 table.
//!
//! Steps (`flush_oldest`): write the table and fdatasync it, sync the
//! directory, log an edit that adds the table and raises the journal floor
//! past the memtable's journal (and counts the separated values the table
//! points to in it), install the new version and drop the memtable. The
//! journal is kept while tables point into it; otherwise it is deleted
//! once no reader holds the memtable. A crash before the edit is synced
//! leaves an orphan table (deleted on open) and the journal (replayed).

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::key::{self, Kind};
use crate::format::manifest::{Edit, TableRecord};
use crate::format::table::{TableOptions, TableWriter};
use crate::format::vptr::ValuePtr;
use crate::io::Fs;
use crate::memtable::Memtable;
use crate::txn::registry::ReadPoints;
use crate::version::files;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A memtable written as tables, one per keyspace it holds entries of.
#[derive(Default)]
pub(crate) struct Flushed {
    /// The tables, at level 0.
    pub records: Vec<TableRecord>,
    /// The highest seqno in the memtable (of a dropped keyspace's entries
    /// too, which no table holds), 0 for an empty one.
    pub max_seqno: u64,
    /// Bytes of separated values the tables point to, per segment.
    pub value_live: Vec<(u64, u64)>,
}

/// Writes `mem` as level-0 tables in `dir`: one per keyspace, numbered by
/// `number`, built as `opts_for` says; the entries of a keyspace it
/// answers `None` for (dropped) are left out. The number of every file
/// created goes to `created` first, so a caller can remove them after a
/// failure.
///
/// A version no read point of `reads` reads is left out, as compaction
/// leaves it out (`compaction::merge`): no snapshot or transaction can
/// read it, and readers that took their view before the flush read the
/// memtable itself. A key overwritten thousands of times in one memtable
/// (a zipfian update load) becomes one entry, not thousands that every
/// scan passing it would step over until a compaction merged them away.
/// Tombstones stay: older versions may lie in deeper tables.
pub(crate) fn write_tables(
    fs: &dyn Fs,
    dir: &Path,
    mem: &Memtable,
    reads: &ReadPoints,
    number: &mut dyn FnMut() -> u64,
    opts_for: &dyn Fn(u32) -> Option<TableOptions>,
    created: &mut Vec<u64>,
) -> Result<Flushed> {
    let mut out = Flushed::default();
    if mem.is_empty() {
        return Ok(out);
    }
    let mut live = std::collections::BTreeMap::<u64, u64>::new();
    // The keyspace being written, and its table (`None`: dropped).
    let mut current: Option<(u32, Option<(u64, TableWriter)>)> = None;
    let mut finish = |table: Option<(u64, TableWriter)>, keyspace: u32| -> Result<()> {
        if let Some((number, writer)) = table {
            let summary = writer.finish()?;
            out.records.push(TableRecord {
                keyspace,
                level: 0,
                number,
                size: summary.file_size,
                entries: summary.entries,
                smallest: summary.smallest,
                largest: summary.largest,
            });
        }
        Ok(())
    };
    let mut max_seqno = 0;
    // The user key of the keyspace's previous entry and that entry's seqno
    // (entries come in internal order: by key, then newest first).
    let mut previous: Option<Vec<u8>> = None;
    let mut newer_seqno = u64::MAX;
    mem.for_each(|keyspace, ikey, value| {
        if current.as_ref().is_none_or(|(k, _)| *k != keyspace) {
            previous = None;
            if let Some((k, table)) = current.take() {
                finish(table, k)?;
            }
            let table = match opts_for(keyspace) {
                Some(opts) => {
                    let n = number();
                    created.push(n);
                    let path = files::table(dir, n);
                    let file = fs
                        .create(&path)
                        .map_err(|e| Error::io(format!("creating table {}", path.display()), e))?;
                    Some((
                        n,
                        TableWriter::new(file, path, &opts).owned_by(opts.db_id, n),
                    ))
                }
                None => None,
            };
            current = Some((keyspace, table));
        }
        let Some((user, tag)) = key::split(ikey) else {
            unreachable!("a memtable's keys carry their tags");
        };
        let seqno = key::tag_seqno(tag);
        max_seqno = max_seqno.max(seqno);
        match &mut previous {
            Some(p) if p.as_slice() == user => {
                let read = reads.reads(seqno, newer_seqno);
                newer_seqno = seqno;
                if !read {
                    return Ok(());
                }
            }
            _ => {
                let p = previous.get_or_insert_with(Vec::new);
                p.clear();
                p.extend_from_slice(user);
                newer_seqno = seqno;
            }
        }
        let Some((_, Some((_, writer)))) = &mut current else {
            return Ok(());
        };
        if key::tag_kind(tag) == Kind::Pointer as u8 {
            // Commits encode the pointers they insert, and replay
            // inserts only pointers it decoded.
            let ptr = ValuePtr::decode(value).expect("a memtable's value pointers decode");
            *live.entry(ptr.segment).or_default() += u64::from(ptr.len);
        }
        writer.add(ikey, value)
    })?;
    if let Some((k, table)) = current.take() {
        finish(table, k)?;
    }
    out.max_seqno = max_seqno;
    out.value_live = live.into_iter().collect();
    Ok(out)
}

/// The flush thread: flushes sealed memtables, oldest first, until shutdown.
pub(crate) fn run(inner: &Inner) {
    let mut backoff = RETRY_MIN;
    loop {
        {
            let mut bg = inner.bg.lock();
            loop {
                if bg.shutdown {
                    return;
                }
                if bg.error.is_none() && !inner.state.read().sealed.is_empty() {
                    break;
                }
                inner.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
                // Files followers held when they became obsolete.
                parking_lot::MutexGuard::unlocked(&mut bg, || inner.reaper.retry_deferred());
            }
        }
        match flush_oldest(inner) {
            Ok(()) => {
                backoff = RETRY_MIN;
                inner.background_succeeded();
            }
            Err(e) => {
                if inner.background_failed(e) {
                    pause(inner, backoff);
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
            }
        }
        inner.notify_bg();
    }
}

/// First and longest wait before background work retries after running
/// out of space.
pub(crate) const RETRY_MIN: Duration = Duration::from_millis(20);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(1);

/// Waits `d` (or until shutdown) before a paused background job retries.
pub(crate) fn pause(inner: &Inner, d: Duration) {
    let mut bg = inner.bg.lock();
    if !bg.shutdown {
        inner.bg_cv.wait_for(&mut bg, d);
    }
}

fn flush_oldest(inner: &Inner) -> Result<()> {
    let (mem, floor) = {
        let s = inner.state.read();
        let Some(mem) = s.sealed.first().cloned() else {
            return Ok(());
        };
        // The journal of the next memtable still unflushed after this one.
        let floor = s.sealed.get(1).unwrap_or(&s.mem).journal();
        (mem, floor)
    };
    let version = inner.state.read().version.clone();
    let mut created = Vec::new();
    let remove_created = |created: &[u64]| {
        for n in created {
            let _ = inner.fs.remove(&files::table(&inner.dir, *n));
        }
    };
    let written = write_tables(
        &*inner.fs,
        &inner.dir,
        &mem,
        &inner.read_points(),
        &mut || inner.new_file_number(),
        &|keyspace| inner.table_opts_for(&version, keyspace).map(|(o, _)| o),
        &mut created,
    )
    .and_then(|w| {
        inner
            .sync_dir()
            .map_err(|e| Error::io("syncing the database directory", e))?;
        Ok(w)
    })
    // Frees the space of partial tables (the next open would delete them
    // anyway); the memtable stays sealed for a retry.
    .inspect_err(|_| remove_created(&created))?;
    drop(version);
    inner.counters.table_bytes.fetch_add(
        written.records.iter().map(|r| r.size).sum::<u64>(),
        std::sync::atomic::Ordering::Relaxed,
    );
    let flushed_max = written.max_seqno;
    let edit = Edit {
        journal: Some(floor),
        last_seqno: (!mem.is_empty()).then_some(written.max_seqno),
        added: written.records,
        value_live: written.value_live,
        ..Edit::default()
    };
    inner
        .log_and_apply(edit, |state| {
            // With the table, in the same install: a view that lacks the
            // memtable sees the seqnos it moved to the table.
            state.table_seqno_max = state.table_seqno_max.max(flushed_max);
            debug_assert!(
                state
                    .sealed
                    .first()
                    .is_some_and(|m| std::sync::Arc::ptr_eq(m, &mem))
            );
            state.sealed.remove(0);
        })
        .inspect_err(|e| {
            // Refused by a full device: the tables go, as after a failed
            // write; the memtable stays sealed for the retry.
            if inner.manifest_refused(e) {
                remove_created(&created);
            }
        })?;
    inner.counters.flushes.fetch_add(1, Ordering::Relaxed);
    inner.lend_memtable_room();
    // The journal is below the floor now: unless tables point into it, it
    // goes when the last reader of the memtable does.
    // So do its value streams (no later memtable points into them).
    {
        let state = inner.state.read();
        let streams = mem.streams().into_iter().flat_map(|s| s.segments());
        for seg in mem.segment().into_iter().chain(streams) {
            if state.version.segment(seg.number).is_none() {
                seg.mark_obsolete();
            }
        }
    }
    Ok(())
}

/// Seals the memtable if it holds anything, then waits until every sealed
/// memtable is flushed or background work fails.
pub(crate) fn flush_and_wait(inner: &Inner) -> Result<()> {
    inner.check_writable()?;
    if !inner.state.read().mem.is_empty() {
        inner.seal_memtable()?;
    }
    let mut bg = inner.bg.lock();
    loop {
        if let Some(e) = bg.error.as_ref().or(bg.paused.as_ref()) {
            return Err(e.duplicate());
        }
        if bg.shutdown {
            return Err(Error::Closed);
        }
        if inner.state.read().sealed.is_empty() {
            return Ok(());
        }
        inner.bg_cv.wait_for(&mut bg, Duration::from_millis(50));
    }
}
