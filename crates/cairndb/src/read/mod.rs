//! The read path: point lookups and iterators over a [`ReadView`].
//!
//! A lookup at snapshot `s` asks, in order, the active memtable, the sealed
//! memtables (newest first), the level-0 tables (newest first) and one table
//! per deeper level; the first that knows the key (a value or a tombstone
//! with seqno <= `s`) answers. Tables are consulted through their filter
//! first and opened lazily through the [`TableCache`].

pub mod chunk;
pub mod cursor;
pub mod iter;
pub mod policy;
pub mod prefetch;
pub mod share;
pub mod stream_share;
pub mod window_share;

use crate::cache::BlockCache;
use crate::format::key::{self, Kind};
use crate::format::table::Table;
use crate::format::vptr::ValuePtr;
use crate::io::Fs;
use crate::memtable::{Lookup, Memtable};
use crate::version::segments::SegmentFile;
use crate::version::{TableFile, Version, files};
use crate::{Error, Result};
use policy::{How, ReadPolicy, Served};
use std::path::PathBuf;
use std::sync::Arc;

/// Open table handles, bounded by `Options::open_tables_max`; a table is
/// opened (footer, index and filter read and verified) on first use.
pub struct TableCache {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    open: quick_cache::sync::Cache<u64, Arc<Table>>,
    blocks: Option<Arc<BlockCache>>,
    /// The database's identity (`Inner::db_id`), which tables of version 3
    /// must name; set by open once the manifest is read.
    db_id: std::sync::atomic::AtomicU64,
}

impl TableCache {
    pub fn new(
        fs: Arc<dyn Fs>,
        dir: PathBuf,
        capacity: usize,
        blocks: Option<Arc<BlockCache>>,
    ) -> Self {
        TableCache {
            fs,
            dir,
            open: quick_cache::sync::Cache::new(capacity.max(1)),
            blocks,
            db_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub fn set_db_id(&self, id: u64) {
        self.db_id.store(id, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self, file: &TableFile) -> Result<Arc<Table>> {
        self.open.get_or_insert_with(&file.number, || {
            let path = files::table(&self.dir, file.number);
            let handle = self
                .fs
                .open(&path)
                .map_err(|e| Error::io(format!("opening table {}", path.display()), e))?;
            let table = Table::open(handle, path, file.number, self.blocks.clone())?;
            let db_id = self.db_id.load(std::sync::atomic::Ordering::Relaxed);
            table.check_record(
                db_id,
                file.size,
                file.entries,
                &file.smallest,
                &file.largest,
            )?;
            Ok(Arc::new(table))
        })
    }

    /// Open tables and the bytes their indexes and filters hold.
    pub fn memory(&self) -> (usize, usize) {
        let bytes = self.open.iter().map(|(_, t)| t.memory_bytes()).sum();
        (self.open.len(), bytes)
    }

    pub fn evict(&self, number: u64) {
        self.open.remove(&number);
    }
}

/// What one read sees: the memtables and the version at one instant
/// (`ViewParts`, shared by every view of that instant), and how its
/// flushed values are read.
#[derive(Clone)]
pub struct ReadView {
    parts: Arc<ViewParts>,
    /// How flushed values are read in this view (`Options::value_reads`
    /// resolved when the view was taken).
    pub reads: How,
}

impl std::ops::Deref for ReadView {
    type Target = ViewParts;
    fn deref(&self) -> &ViewParts {
        &self.parts
    }
}

impl ReadView {
    pub fn new(parts: Arc<ViewParts>, reads: How) -> ReadView {
        ReadView { parts, reads }
    }
}

/// The memtables and the version at one instant, and the handles reads
/// need: built once per change of the database's state
/// (`Inner::refresh_view`), so that taking a view is one reference count,
/// not one per field and a vector copied (a point read of cached data
/// spent an eighth of its time taking and dropping its view).
pub struct ViewParts {
    pub mem: Arc<Memtable>,
    /// Sealed memtables, oldest first.
    pub sealed: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    /// `State::table_seqno_max` when the view was taken.
    pub table_seqno_max: u64,
    pub tables: Arc<TableCache>,
    /// How flushed values are read, and the database's counts.
    pub policy: Arc<ReadPolicy>,
    /// Reader threads for values a scan loads from the device.
    pub workers: Arc<crate::pool::WorkerPool>,
    /// Chunks of flushed segments that long scans share.
    pub share: Arc<share::ChunkShare>,
    /// Set once the database is closing (`Inner::closing`): reads
    /// through this view answer `Error::Closed`.
    pub closed: Arc<std::sync::atomic::AtomicBool>,
}

impl ReadView {
    /// Seqno of the newest version of `user_key` (a put or a tombstone) in
    /// this view if it is above `since`, else `None`. Versions newer than
    /// the oldest pinned snapshot are never dropped by compaction, so this
    /// is exact for any seqno a live transaction compares it with. Tables
    /// are skipped when none can hold a version above `since` (the usual
    /// case: a transaction's snapshot is newer than the last flush).
    pub fn newest_seqno_after(
        &self,
        keyspace: u32,
        user_key: &[u8],
        since: u64,
    ) -> Result<Option<u64>> {
        for mem in self.memtables() {
            if let Some(s) = mem.newest_seqno(keyspace, user_key) {
                return Ok((s > since).then_some(s));
            }
        }
        if self.table_seqno_max <= since {
            return Ok(None);
        }
        for file in self.tables_for(keyspace, user_key) {
            let table = self.tables.get(file)?;
            if let Some((tag, _)) = table.get(user_key, crate::limits::SEQNO_MAX)? {
                let s = key::tag_seqno(tag);
                return Ok((s > since).then_some(s));
            }
        }
        Ok(None)
    }

    /// `Closed` once the database is closing: files this view names may
    /// belong to another handle by now.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(crate::Error::Closed);
        }
        Ok(())
    }

    /// The memtables, newest first: the active one, then the sealed ones.
    fn memtables(&self) -> impl Iterator<Item = &Arc<Memtable>> {
        std::iter::once(&self.mem).chain(self.sealed.iter().rev())
    }

    /// The tables that may hold `user_key` of `keyspace`, newest first:
    /// those of level 0 whose range covers it, newest first, then the one
    /// of each deeper level whose range holds it.
    fn tables_for<'a>(
        &'a self,
        keyspace: u32,
        user_key: &'a [u8],
    ) -> impl Iterator<Item = &'a crate::sync::Arc<TableFile>> {
        let level0 = self.version.levels[0].iter().rev();
        let deeper = (1..self.version.levels.len())
            .filter_map(move |l| self.version.find(l, keyspace, user_key));
        level0
            .filter(move |f| f.covers(keyspace, user_key))
            .chain(deeper)
    }

    /// `KeyspaceDropped` if `keyspace` (named `name`) no longer exists in
    /// this view.
    pub fn check_keyspace(&self, keyspace: u32, name: &str) -> Result<()> {
        if self.version.keyspaces.exists(keyspace) {
            return Ok(());
        }
        Err(Error::KeyspaceDropped(name.to_owned()))
    }

    /// The value of `user_key` of `keyspace` at `snapshot`, or `None` if
    /// absent/deleted.
    pub fn get(&self, keyspace: u32, user_key: &[u8], snapshot: u64) -> Result<Option<Vec<u8>>> {
        match self.find(keyspace, user_key, snapshot)? {
            Some(Lookup::Found(v)) => Ok(Some(v)),
            Some(Lookup::Pointer(p)) => self.load(&p).map(Some),
            Some(Lookup::Deleted) | None => Ok(None),
        }
    }

    /// The newest entry of `user_key` of `keyspace` at `snapshot`:
    /// memtables, then level
    /// 0 newest first, then one table per deeper level. A separated value
    /// is returned as its encoded pointer, not read.
    pub fn find(&self, keyspace: u32, user_key: &[u8], snapshot: u64) -> Result<Option<Lookup>> {
        self.check_open()?;
        for mem in self.memtables() {
            if let Some(found) = mem.get(keyspace, user_key, snapshot) {
                return Ok(Some(found));
            }
        }
        let mut consulted = 0;
        let mut found = None;
        for file in self.tables_for(keyspace, user_key) {
            consulted += 1;
            let table = self.tables.get(file)?;
            if let Some((tag, value)) = table.get(user_key, snapshot)? {
                found = Some(match Kind::from_u8(key::tag_kind(tag)) {
                    Some(Kind::Put) => Lookup::Found(value),
                    Some(Kind::Pointer) => Lookup::Pointer(value),
                    _ => Lookup::Deleted,
                });
                break;
            }
        }
        // The level-0 tables come first: each one consulted past the
        // first is counted for compaction (`ReadPolicy::probed_level0`).
        if consulted > 1 {
            let level0 = self.version.levels[0]
                .iter()
                .filter(|f| f.covers(keyspace, user_key))
                .count();
            self.policy
                .probed_level0(consulted.min(level0).saturating_sub(1) as u64);
        }
        Ok(found)
    }

    /// The values of `user_keys` at `snapshot`, in their order, each as
    /// `get` would return it. The separated values among them are read
    /// together, as a scan reads a window (`load_start`): sorted by place,
    /// neighbours in one request, the rest in flight at once.
    pub fn get_many(
        &self,
        keyspace: u32,
        user_keys: &[&[u8]],
        snapshot: u64,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        let mut out: Vec<Option<Result<Option<Vec<u8>>>>> = Vec::with_capacity(user_keys.len());
        let (mut at, mut pointers) = (Vec::new(), Vec::new());
        for (i, k) in user_keys.iter().enumerate() {
            out.push(match self.find(keyspace, k, snapshot) {
                Ok(Some(Lookup::Found(v))) => Some(Ok(Some(v))),
                Ok(Some(Lookup::Pointer(p))) => {
                    at.push(i);
                    pointers.push(p);
                    None
                }
                Ok(Some(Lookup::Deleted) | None) => Some(Ok(None)),
                Err(e) => Some(Err(e)),
            });
        }
        // A scan's window at a time: bounded buffers and batches.
        let scan = self.share.scan();
        let mut at = at.into_iter();
        let mut pointers = pointers.into_iter().peekable();
        while pointers.peek().is_some() {
            let window: Vec<Vec<u8>> = pointers.by_ref().take(iter::WINDOW_MAX).collect();
            let loading = self.load_start(&window, false, &scan);
            // Results first: `zip` then takes no index past the window.
            for (v, i) in self.load_finish(loading).into_iter().zip(at.by_ref()) {
                out[i] = Some(v.map(|v| Some(v.into_vec())));
            }
        }
        self.share.leave(&scan);
        out.into_iter()
            .map(|v| v.expect("every pointer's window was loaded"))
            .collect()
    }

    /// The segment file numbered `number`, and whether it is flushed:
    /// from the version (complete, maybe only on the device) or the
    /// memtable whose journal it is (maybe still written to; its bytes
    /// are in the page cache).
    pub(crate) fn segment(&self, number: u64) -> Option<(&Arc<SegmentFile>, bool)> {
        if let Some(s) = self.version.segment(number) {
            return Some((s, true));
        }
        std::iter::once(&self.mem)
            .chain(self.sealed.iter())
            .find_map(|m| m.segment_of(number))
            .map(|s| (s, false))
    }

    /// The value `ptr` names in `seg`, read as this view's `reads` says if
    /// the segment is `flushed`; a journal still written to is read
    /// through the page cache, where its newest bytes alone are.
    /// `Ok(None)` if it does not match its pointer (`SegmentFile::read`).
    fn read_value(
        &self,
        seg: &SegmentFile,
        ptr: &ValuePtr,
        flushed: bool,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let how = if flushed { self.reads } else { How::PageCache };
        // A mapped segment: the value copied out of the map (`io/map.rs`);
        // under `CachedElseDirect` only if `mincore` says the page cache
        // holds it, else read directly.
        let map = (flushed && self.policy.maps && how != How::Direct)
            .then(|| seg.mapped())
            .flatten();
        if let Some(map) = map {
            let len = ptr.len as usize;
            let ask = how == How::CachedElseDirect && self.policy.ask_cache();
            let got = match how {
                How::PageCache => map.get(ptr.offset, len),
                _ if ask => map.resident(ptr.offset, len),
                _ => None,
            };
            if ask {
                self.policy.asked_cache(got.is_some());
            }
            match got {
                Some(v) if ptr.matches(v) => {
                    self.policy.count_mapped();
                    return Ok(Some(v.to_vec()));
                }
                // A mismatch is read again below, which names damage.
                Some(_) => {}
                None if how == How::CachedElseDirect => {
                    self.policy.count(Served::Direct);
                    return seg.read(ptr, true);
                }
                // Past the map's end: `pread` names what is missing.
                None => {}
            }
        }
        if how == How::CachedElseDirect && self.policy.ask_cache() {
            let cached = seg.read_cached(ptr)?;
            self.policy.asked_cache(cached.is_some());
            if let Some(v) = cached {
                self.policy.count(Served::Cached);
                return Ok(Some(v));
            }
        }
        let direct = how.direct_misses();
        self.policy.count(if direct {
            Served::Direct
        } else {
            Served::Buffered
        });
        seg.read(ptr, direct)
    }

    /// Reads the separated value an encoded `ValuePtr` names.
    pub fn load(&self, encoded: &[u8]) -> Result<Vec<u8>> {
        let ptr = ValuePtr::decode(encoded)
            .ok_or_else(|| Error::corruption(&self.tables.dir, 0, "malformed value pointer"))?;
        self.load_ptr(&ptr)
    }

    /// Reads the separated value `ptr` names.
    pub fn load_ptr(&self, ptr: &ValuePtr) -> Result<Vec<u8>> {
        let ptr = *ptr;
        let Some((seg, flushed)) = self.segment(ptr.segment) else {
            return Err(Error::corruption(
                files::journal(&self.tables.dir, ptr.segment),
                ptr.offset,
                "a value pointer names a segment the database does not hold",
            ));
        };
        // The file the value lies in, for the errors below (named only
        // when one happens): a journal, or the values file a compaction
        // moved it to.
        let path = || seg.path();
        match self.read_value(seg, &ptr, flushed) {
            Ok(Some(v)) => ptr.unpack(v).map_err(|detail| {
                Error::corruption(
                    path(),
                    ptr.offset,
                    format!(
                        "separated value of {} stored bytes does not decompress: {detail}",
                        ptr.len
                    ),
                )
            }),
            Ok(None) => Err(Error::corruption(
                path(),
                ptr.offset,
                format!("separated value of {} bytes fails its checksum", ptr.len),
            )),
            // The segment is shorter than when the pointer was made: it
            // was truncated (segments are never shortened by the engine).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Error::corruption(
                path(),
                ptr.offset,
                format!(
                    "separated value of {} bytes lies past the end of its segment",
                    ptr.len
                ),
            )),
            Err(e) => Err(Error::io(
                format!("reading a value from {}", path().display()),
                e,
            )),
        }
    }
}
