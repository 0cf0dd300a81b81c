//! The user-facing iterator: visibility by snapshot, newest version per key,
//! tombstones hidden, bounds, and both directions.
//!
//! An [`Iter`] owns a [`ReadView`] and a snapshot seqno. `next` and
//! `next_back` each drive their own merge cursor (built on first use); they
//! stop when they meet, so the two ends together yield each key once. Each
//! end reads ahead a window of entries and loads their separated values
//! together ([`Ahead`], `ReadView::load_start`); a long scan loads the next
//! window while the caller consumes the current one.

use super::ReadView;
use super::chunk::Value;
use super::cursor::{Cursor, Dir, LevelCursor, MemCursor, MergeCursor, table_cursor};
use super::prefetch::Loading;
use super::share::Scan;
use super::stream_share::key_point;
use super::window_share::{Found, Lead, SharedWindow, WindowKey};
use crate::Result;
use crate::format::key::{self, Kind};
use crate::format::vptr::{VPTR_LEN_MAX, ValuePtr};
use crate::io::How;
use crate::limits::SEQNO_MAX;
use crate::write::batch::check_key;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

/// A key and its value, as yielded by iterators.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// A snapshot-consistent, double-ended iterator over a key range. Yields
/// `Err` once (then ends) if a table cannot be read.
///
/// It needs no registered snapshot: the memtables it holds keep every
/// version, and the version it holds keeps its table files from deletion.
pub struct Iter {
    view: ReadView,
    /// The keyspace iterated.
    keyspace: u32,
    snapshot: u64,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    front: Option<Front>,
    back: Option<Back>,
    front_last: Option<Vec<u8>>,
    back_last: Option<Vec<u8>>,
    /// Entries read ahead of each end, values loaded.
    front_ahead: Ahead,
    back_ahead: Ahead,
    done: bool,
    /// This scan in the database's `ChunkShare`.
    scan: Scan,
    /// The entry `next_ref` lent out last.
    lent: Option<Entry>,
    /// Where the front's next merge starts instead of the lower bound
    /// (`seek`), and the back's instead of the upper bound
    /// (`seek_for_prev`).
    front_from: Option<Vec<u8>>,
    back_from: Option<Vec<u8>>,
    /// Where the front's next merge starts instead: after this key, the
    /// last of a window taken from the database's `WindowShare`.
    front_after: Option<Vec<u8>>,
    /// The front's last window was shared (`window_share.rs`): the next
    /// one is looked for there too, so entries are not taken from the
    /// merge directly (`front_direct`).
    sharing: bool,
}

impl Drop for Iter {
    fn drop(&mut self) {
        // Let go of the shared chunks its entries hold first, so that
        // leaving can reuse their buffers (`ChunkShare::recycle`).
        self.lent = None;
        for ahead in [&mut self.front_ahead, &mut self.back_ahead] {
            ahead.queue.clear();
            ahead.shared = None;
            ahead.inflight = None;
        }
        self.view.share.leave(&self.scan);
    }
}

/// Entries an end of the iterator has read ahead, values already loaded.
///
/// Each refill reads up to `window` entries (and `WINDOW_BYTES_MAX` bytes
/// of values) from the merge, then loads the separated values among them
/// together (`ReadView::load_start`: one request per run of neighbouring
/// values, runs read in parallel). The window starts at one entry, so a
/// short scan reads nothing it does not yield, and doubles per refill up
/// to `WINDOW_MAX`, so a long scan keeps the device busy.
struct Ahead {
    queue: VecDeque<Result<Entry>>,
    window: usize,
    /// Entries asked of the merge so far (the windows' sizes).
    taken: usize,
    /// The merge has ended (or failed): nothing more to take from it.
    ended: bool,
    /// The next window, its values loading while `queue` is consumed.
    inflight: Option<Window>,
    /// A shared window (`window_share.rs`) and the index of its next entry
    /// to yield: yielded before `queue`, which is empty while it lasts, and
    /// lent by `next_ref` with no copy.
    shared: Option<(Arc<SharedWindow>, usize)>,
}

impl Ahead {
    fn new() -> Self {
        Ahead {
            queue: VecDeque::new(),
            window: 1,
            taken: 0,
            ended: false,
            inflight: None,
            shared: None,
        }
    }

    /// Entries of the shared window not yielded yet.
    fn shared_left(&self) -> usize {
        self.shared
            .as_ref()
            .map_or(0, |(w, at)| w.entries.len() - at)
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.shared_left() == 0
    }

    /// The next entry: of the shared window (a copy of its key and a
    /// reference to its value's chunk), else of the queue.
    fn pop(&mut self) -> Option<Result<Entry>> {
        if let Some((w, at)) = &mut self.shared {
            if let Some((k, v)) = w.entries.get(*at) {
                *at += 1;
                return Some(Ok((k.clone(), v.clone())));
            }
            self.shared = None;
        }
        self.queue.pop_front()
    }
}

/// Entries taken from a merge whose values are loading, or entries with
/// their values loaded already (`ready`, in place of `raw`).
struct Window {
    raw: Vec<Raw>,
    loading: Option<Loading>,
    /// The merge failed after `raw`: queued after them.
    failed: Option<crate::Error>,
    ready: Option<Ready>,
}

impl Window {
    /// A window whose entries are loaded already.
    fn ready(ready: Ready) -> Window {
        Window {
            raw: Vec::new(),
            loading: None,
            failed: None,
            ready: Some(ready),
        }
    }
}

/// A window's entries paired, in order, with `loaded`, the values its
/// pointer entries loaded (one each); inline values come from the entries.
fn pair_values(raw: Vec<Raw>, loaded: Vec<Result<Value>>) -> impl Iterator<Item = Result<Entry>> {
    let mut loaded = loaded.into_iter();
    raw.into_iter().map(move |(user, kind, stored)| {
        let value = if kind == Kind::Pointer as u8 {
            loaded
                .next()
                .expect("a window loads one value per pointer entry")
        } else {
            Ok(Value::Owned(stored.into_vec()))
        };
        value.map(|v| (user, v))
    })
}

/// A window's entries, values loaded.
enum Ready {
    /// A window in the database's `WindowShare`, built by this scan or
    /// another.
    Shared(Arc<SharedWindow>),
    /// Built here and not shared (a value could not be read).
    Own(Vec<Result<Entry>>),
}

/// What a seek counts, in point reads (`ReadPolicy::probed_level0`), for
/// each level-0 table past the first that holds the place it starts at:
/// it reads at least one block of each, and compares every entry it
/// returns against each.
const SEEK_PROBES: u64 = 8;

/// Most entries one refill reads ahead.
pub const WINDOW_MAX: usize = 256;
/// Most value bytes one refill reads ahead. With the window in flight
/// behind it (`PREFETCH_WINDOW_MIN`), an iterator end holds at most twice
/// this in values, and values lent out of shared chunks keep at most as
/// much again of their chunks alive (`Run::slice_chunks` lends only from
/// runs the values fill at least half of).
pub const WINDOW_BYTES_MAX: usize = 4 << 20;
/// Window size from which the next window's values are loaded while the
/// current one is consumed (if the current one had separated values):
/// only a scan past its first 127 entries (windows of 1 + 2 + ... + 64)
/// reads ahead of what it yields, so a short scan (a seek and the next
/// 100, say) reads nothing it does not yield, and a long one at most one
/// window more. At 64, a seek and the next 100 values of 4 KiB loaded 228
/// values instead of 100, and `dbbench` seekrandom ran at half the rate.
pub const PREFETCH_WINDOW_MIN: usize = 128;

/// Largest window while the page cache holds every value lately read
/// and the scan has taken fewer than `PREFETCH_WINDOW_MIN` entries.
pub const TRUSTED_WINDOW_MAX: usize = 8;

/// An entry with its value loaded (owned, or lent out of a shared chunk).
type Entry = (UserKey, Value);

/// An entry whose value is not loaded yet: user key, kind, stored value.
type Raw = (UserKey, u8, Stored);

/// A user key read ahead: inline up to 32 bytes, so a scan over short
/// keys allocates nothing per entry for them (a heap key per entry was
/// about 8 % of a four-thread scan's CPU samples, in malloc and free).
type UserKey = SmallVec<[u8; 32]>;

/// A value as its table or memtable stores it: a value pointer is kept
/// inline (no allocation per entry of a scan), a longer value on the heap.
type Stored = SmallVec<[u8; VPTR_LEN_MAX]>;

struct Front {
    merge: MergeCursor,
    skip: Option<Vec<u8>>,
}

impl Front {
    /// The user key and stored value the merge stands on.
    fn entry(&self) -> (&[u8], &[u8]) {
        let (user, _) =
            key::split(self.merge.key()).expect("advance_front only stops on a whole key");
        (user, self.merge.value())
    }
}

struct Back {
    merge: MergeCursor,
    pending: Option<Raw>,
    exhausted: bool,
}

impl Iter {
    pub(crate) fn new(
        view: ReadView,
        keyspace: u32,
        snapshot: u64,
        lower: Bound<Vec<u8>>,
        upper: Bound<Vec<u8>>,
    ) -> Self {
        let refused = bounds_refused(&lower, &upper);
        let scan = view.share.scan();
        let end = match &upper {
            Bound::Included(k) | Bound::Excluded(k) => key_point(k),
            Bound::Unbounded => u64::MAX,
        };
        scan.set_reach(keyspace, end);
        let mut it = Iter {
            scan,
            view,
            keyspace,
            snapshot,
            lower,
            upper,
            front: None,
            back: None,
            front_last: None,
            back_last: None,
            front_ahead: Ahead::new(),
            back_ahead: Ahead::new(),
            done: false,
            lent: None,
            front_from: None,
            back_from: None,
            front_after: None,
            sharing: false,
        };
        if let Some(e) = refused {
            it.refuse(e);
        }
        it
    }

    /// Makes `e` the first and only item from either end.
    pub(crate) fn refuse(&mut self, e: crate::Error) {
        for ahead in [&mut self.front_ahead, &mut self.back_ahead] {
            ahead.queue.clear();
            ahead.shared = None;
            ahead.queue.push_back(Err(e.duplicate()));
            ahead.ended = true;
        }
    }

    fn merge(&self, dir: Dir, start: Option<Vec<u8>>) -> Result<MergeCursor> {
        self.merge_of(dir, start, true)
    }

    /// A merge over the view's memtables, and its tables if `tables`.
    fn merge_of(&self, dir: Dir, start: Option<Vec<u8>>, tables: bool) -> Result<MergeCursor> {
        let v = &self.view;
        let mut children: Vec<Box<dyn Cursor>> = Vec::new();
        for mem in std::iter::once(&v.mem).chain(v.sealed.iter()) {
            children.push(Box::new(MemCursor::new(
                mem.clone(),
                self.keyspace,
                dir,
                start.clone(),
                self.snapshot,
            )));
        }
        if !tables {
            return Ok(MergeCursor::new(children, dir));
        }
        // Level-0 tables that hold the place a seek starts at: it reads a
        // block or more of each.
        let mut level0: u64 = 0;
        for file in v.version.levels[0]
            .iter()
            .filter(|f| f.keyspace == self.keyspace)
        {
            let table = v.tables.get(file)?;
            children.push(Box::new(table_cursor(&table, dir, start.as_deref())));
            if start
                .as_deref()
                .is_none_or(|s| file.covers(self.keyspace, key::user_key(s)))
            {
                level0 += 1;
            }
        }
        v.policy
            .probed_level0(level0.saturating_sub(1) * SEEK_PROBES);
        for level in 1..v.version.levels.len() {
            let files = v.version.level_of(level, self.keyspace);
            if files.is_empty() {
                continue;
            }
            children.push(Box::new(LevelCursor::new(
                files.to_vec(),
                v.tables.clone(),
                dir,
                start.clone(),
            )));
        }
        Ok(MergeCursor::new(children, dir))
    }

    /// True if some key in this iterator's range has a version (a put or
    /// a tombstone) newer than `since`: a phantom check for transactions.
    /// Reads every version in the range, newest per key first.
    pub(crate) fn changed_since(&self, since: u64) -> Result<bool> {
        let start = match &self.lower {
            Bound::Included(k) | Bound::Excluded(k) => {
                Some(key::seek_key(k, crate::limits::SEQNO_MAX))
            }
            Bound::Unbounded => None,
        };
        // Tables hold no version above `since` unless a flush put one there.
        let tables = self.view.table_seqno_max > since;
        let mut merge = self.merge_of(Dir::Forward, start, tables)?;
        while merge.advance()? {
            let Some((user, tag)) = key::split(merge.key()) else {
                continue;
            };
            if self.past_upper(user) {
                break;
            }
            if !self.below_lower(user) && key::tag_seqno(tag) > since {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn past_upper(&self, user_key: &[u8]) -> bool {
        past(&self.upper, user_key)
    }

    fn below_lower(&self, user_key: &[u8]) -> bool {
        match &self.lower {
            Bound::Included(l) => user_key < l.as_slice(),
            Bound::Excluded(l) => user_key <= l.as_slice(),
            Bound::Unbounded => false,
        }
    }

    /// Moves the front's merge to the next entry with a value (a put or a
    /// pointer) and returns its kind, or `None` at the end of the range.
    /// The entry stays in the merge ([`Iter::front_entry`]): nothing is
    /// copied.
    fn advance_front(&mut self) -> Result<Option<u8>> {
        if self.front.is_none() {
            let from = self.front_from.take().filter(|t| !self.below_lower(t));
            let after = self.front_after.take();
            let (start, skip) = match (after, from, &self.lower) {
                (Some(t), _, _) => (Some(key::seek_key(&t, self.snapshot)), Some(t)),
                (None, Some(t), _) => (Some(key::seek_key(&t, self.snapshot)), None),
                (None, None, Bound::Included(k)) => (Some(key::seek_key(k, self.snapshot)), None),
                (None, None, Bound::Excluded(k)) => {
                    (Some(key::seek_key(k, self.snapshot)), Some(k.clone()))
                }
                (None, None, Bound::Unbounded) => (None, None),
            };
            let merge = self.merge(Dir::Forward, start)?;
            self.front = Some(Front { merge, skip });
        }
        loop {
            let Some(front) = self.front.as_mut() else {
                return Ok(None);
            };
            if !front.merge.advance()? {
                return Ok(None);
            }
            let Some((user, tag)) = key::split(front.merge.key()) else {
                continue;
            };
            if key::tag_seqno(tag) > self.snapshot || front.skip.as_deref() == Some(user) {
                continue;
            }
            let kind = key::tag_kind(tag);
            remember(&mut front.skip, user);
            if past(&self.upper, user) {
                return Ok(None);
            }
            if key::kind_has_value(kind) {
                return Ok(Some(kind));
            }
        }
    }

    /// The user key and stored value of the entry the front's merge
    /// stands on after [`Iter::advance_front`] returned a kind.
    fn front_entry(&self) -> (&[u8], &[u8]) {
        self.front
            .as_ref()
            .expect("advance_front built the front before it found an entry")
            .entry()
    }

    /// The next entry from the front with a value (a put or a pointer).
    fn raw_front(&mut self) -> Result<Option<Raw>> {
        let Some(kind) = self.advance_front()? else {
            return Ok(None);
        };
        let (user, stored) = self.front_entry();
        Ok(Some((
            UserKey::from_slice(user),
            kind,
            Stored::from_slice(stored),
        )))
    }

    /// The next entry from the back with a value (a put or a pointer).
    fn raw_back(&mut self) -> Result<Option<Raw>> {
        if self.back.is_none() {
            let from = self.back_from.take().filter(|t| !self.past_upper(t));
            let start = match (from, &self.upper) {
                (Some(t), _) => Some(key::encode(&t, key::make_tag(0, 0))),
                (None, Bound::Included(k)) => Some(key::encode(k, key::make_tag(0, 0))),
                (None, Bound::Excluded(k)) => Some(key::seek_key(k, SEQNO_MAX)),
                (None, Bound::Unbounded) => None,
            };
            let merge = self.merge(Dir::Backward, start)?;
            self.back = Some(Back {
                merge,
                pending: None,
                exhausted: false,
            });
        }
        loop {
            let Some(back) = self.back.as_mut() else {
                return Ok(None);
            };
            let entry = if back.exhausted {
                None
            } else if back.merge.advance()? {
                key::split(back.merge.key()).map(|(u, t)| (UserKey::from_slice(u), t))
            } else {
                back.exhausted = true;
                None
            };
            let entry = match entry {
                Some((user, _)) if self.below_lower(&user) => {
                    if let Some(b) = self.back.as_mut() {
                        b.exhausted = true;
                    }
                    None
                }
                other => other,
            };
            let Some(back) = self.back.as_mut() else {
                return Ok(None);
            };
            match entry {
                None => {
                    return Ok(back
                        .pending
                        .take()
                        .filter(|(_, kind, _)| key::kind_has_value(*kind)));
                }
                Some((user, tag)) => {
                    if key::tag_seqno(tag) > self.snapshot {
                        continue;
                    }
                    let newer = (
                        user,
                        key::tag_kind(tag),
                        Stored::from_slice(back.merge.value()),
                    );
                    let same_key = back.pending.as_ref().is_some_and(|p| p.0 == newer.0);
                    let finished = back.pending.replace(newer);
                    if same_key {
                        continue;
                    }
                    if let Some(raw) = finished
                        && key::kind_has_value(raw.1)
                    {
                        return Ok(Some(raw));
                    }
                }
            }
        }
    }

    /// The next entry from one end, refilling its read-ahead if empty.
    fn step(&mut self, dir: Dir) -> Option<Result<Entry>> {
        if let Err(e) = self.view.check_open() {
            return Some(Err(e));
        }
        if self.ahead(dir).is_empty() {
            self.refill(dir);
        }
        self.ahead(dir).pop()
    }

    fn ahead(&mut self, dir: Dir) -> &mut Ahead {
        match dir {
            Dir::Forward => &mut self.front_ahead,
            Dir::Backward => &mut self.back_ahead,
        }
    }

    /// Queues the next window of entries of one end with their values: the
    /// window in flight if there is one, else one read now. Then, for long
    /// scans, starts loading the window after it, so that its device reads
    /// overlap the caller's use of this one. A failure is queued after the
    /// entries before it.
    fn refill(&mut self, dir: Dir) {
        self.refill_from(dir, Vec::new());
    }

    /// [`Iter::refill`], the window read now (there must be none in
    /// flight if `seed` is not empty) starting with the entries `seed`.
    fn refill_from(&mut self, dir: Dir, seed: Vec<Raw>) {
        debug_assert!(seed.is_empty() || self.ahead(dir).inflight.is_none());
        let window = match self.ahead(dir).inflight.take() {
            Some(w) => w,
            None => match self.take_window(dir, false, seed) {
                Some(w) => w,
                None => return,
            },
        };
        // Only a window with separated values has reads to overlap; for
        // inline values, taking the next window early is only extra work.
        let size = self.ahead(dir).window;
        let next = (size > PREFETCH_WINDOW_MIN && window.loading.is_some())
            .then(|| self.take_window(dir, true, Vec::new()))
            .flatten();
        self.queue_window(dir, window);
        self.ahead(dir).inflight = next;
    }

    /// Takes up to a window of entries from one end's merge, after those
    /// of `seed` (already taken from it), and starts loading their
    /// separated values (`overlap`: every device read on the worker
    /// threads, the caller has other work meanwhile); `None` once the
    /// merge has ended.
    fn take_window(&mut self, dir: Dir, overlap: bool, seed: Vec<Raw>) -> Option<Window> {
        let cached = self.view.reads == How::PageCache && self.view.policy.trusting();
        let ahead = self.ahead(dir);
        if ahead.ended {
            debug_assert!(seed.is_empty(), "entries were taken from an ended merge");
            return None;
        }
        let window = ahead.window;
        // Values the page cache holds are read one after another on this
        // thread anyway: a window buys nothing there but the values read
        // past where a short scan stops (a third of all a YCSB E scan
        // read, with windows doubling to 64). So while the cache is
        // trusted (`ReadPolicy::trust_cache`), the first
        // `PREFETCH_WINDOW_MIN` entries come in windows of at most
        // `TRUSTED_WINDOW_MAX`.
        ahead.window = if cached && ahead.taken < PREFETCH_WINDOW_MIN {
            (window * 2).min(TRUSTED_WINDOW_MAX)
        } else {
            (window * 2).min(WINDOW_MAX)
        };
        ahead.taken += window;
        if window == WINDOW_MAX {
            // Past its first 255 entries: a long scan, whose scattered
            // value reads ride on the page cache beside other long scans
            // (`ReadView::load_start`).
            self.view.share.mark_long(&self.scan);
        }
        // A long scan's window may have been built by another scan at
        // this point of this view (`window_share.rs`).
        let share = self.view.share.clone();
        let mut lead = None;
        if let Some(key) = self.window_key(dir, window, &seed) {
            let mut help = true;
            loop {
                match share.windows.find(key.clone(), &self.view.parts, help) {
                    Found::Ready(w) => return Some(self.take_shared(w)),
                    Found::Lead(l) => {
                        lead = Some(l);
                        break;
                    }
                    Found::Alone => break,
                    Found::Help(end) => {
                        help = false;
                        if let Some(next) = share.windows.lead(key.next(&end), &self.view.parts) {
                            self.build_ahead(next, end, window);
                        }
                    }
                }
            }
        }
        if dir == Dir::Forward {
            self.sharing = false;
        }
        let (raw, failed, ended) = self.gather(dir, window, seed);
        self.ahead(dir).ended = ended;
        if let (Some(l), Some((last, _, _)), None, false) = (&lead, raw.last(), &failed, ended) {
            l.cut(last);
        }
        // A window to share loads as one read ahead does (`overlap`): its
        // values come out of kept chunks if they are there, and it is
        // published only if they all were (`publish`).
        let loading = self.load(&raw, overlap || lead.is_some(), dir);
        let window = Window {
            raw,
            loading,
            failed,
            ready: None,
        };
        Some(match lead {
            Some(lead) => self.publish(lead, window, ended),
            None => window,
        })
    }

    /// Starts loading the separated values of `raw`
    /// (`ReadView::load_start`), if it has any.
    fn load(&self, raw: &[Raw], overlap: bool, dir: Dir) -> Option<Loading> {
        let pointers: Vec<&[u8]> = raw
            .iter()
            .filter(|(_, kind, _)| *kind == Kind::Pointer as u8)
            .map(|(_, _, stored)| stored.as_slice())
            .collect();
        if let (Some(first), Some(last)) = (raw.first(), raw.last()) {
            let (a, b) = (key_point(&first.0), key_point(&last.0));
            self.scan
                .set_window(a.min(b), a.max(b), dir == Dir::Forward);
        }
        (!pointers.is_empty()).then(|| self.view.load_start(&pointers, overlap, &self.scan))
    }

    /// Up to `window` entries (and `WINDOW_BYTES_MAX` bytes of values)
    /// from one end's merge after those of `seed` (already taken from
    /// it), the error it failed with, and whether it ended.
    fn gather(
        &mut self,
        dir: Dir,
        window: usize,
        seed: Vec<Raw>,
    ) -> (Vec<Raw>, Option<crate::Error>, bool) {
        let mut bytes: usize = seed.iter().map(value_bytes).sum();
        let mut raw = seed;
        while raw.len() < window && bytes < WINDOW_BYTES_MAX {
            let got = match dir {
                Dir::Forward => self.raw_front(),
                Dir::Backward => self.raw_back(),
            };
            match got {
                Ok(Some(entry)) => {
                    bytes += value_bytes(&entry);
                    raw.push(entry);
                }
                Ok(None) => return (raw, None, true),
                Err(e) => return (raw, Some(e), true),
            }
        }
        (raw, None, false)
    }

    /// Builds and publishes through `lead` the window after `end`, the
    /// last key of a window another scan is loading, before this scan
    /// waits for that one (`Found::Help`). The front's merge is moved for
    /// it and put back after.
    fn build_ahead(&mut self, lead: Lead<'_>, end: Vec<u8>, window: usize) {
        let own = (self.front.take(), self.front_after.replace(end));
        let (raw, failed, ended) = self.gather(Dir::Forward, window, Vec::new());
        if let (Some((last, _, _)), None, false) = (raw.last(), &failed, ended) {
            lead.cut(last);
        }
        let loading = self.load(&raw, true, Dir::Forward);
        let w = Window {
            raw,
            loading,
            failed,
            ready: None,
        };
        // Unpublished, it is dropped: the scans that come there build it.
        drop(self.publish(lead, w, ended));
        (self.front, self.front_after) = own;
    }

    /// Where the front's next window would start in the database's
    /// `WindowShare`, if it is one scans share: a long scan's full window
    /// from the front of an iterator whose back is unused (a window
    /// could cross it), after a key it has passed, while another long
    /// scan runs. A lone scan keeps loading its next window while it
    /// yields this one (`Iter::refill`), which a shared window, built
    /// when a scan reaches it, does not.
    fn window_key(&self, dir: Dir, window: usize, seed: &[Raw]) -> Option<WindowKey> {
        if dir != Dir::Forward
            || window != WINDOW_MAX
            || !seed.is_empty()
            || self.back.is_some()
            || self.back_last.is_some()
            || self.view.share.long_scans() < 2
        {
            return None;
        }
        let after = match &self.front {
            Some(front) => front.skip.as_deref(),
            None => self.front_after.as_deref(),
        }?;
        Some(WindowKey::new(
            &self.view.parts,
            self.keyspace,
            self.snapshot,
            &self.upper,
            after,
        ))
    }

    /// Takes `w`, a window another scan built at the front's next point:
    /// the front's merge, now behind it, starts again after its last key
    /// when the front next reads alone.
    fn take_shared(&mut self, w: Arc<SharedWindow>) -> Window {
        let (last, _) = w.entries.last().expect("a shared window is not empty");
        if self.scan.is_long() {
            let (first, _) = w.entries.first().expect("a shared window is not empty");
            self.view.share.streams.at(&self.scan, key_point(first));
        }
        self.front = None;
        self.front_after = Some(last.to_vec());
        self.front_ahead.ended = w.ended;
        self.sharing = true;
        Window::ready(Ready::Shared(w))
    }

    /// `w`, built here where other scans may take it: its values loaded
    /// and published through `lead` if they were all read on this thread
    /// and whole; else left as it is (`lead` dropped, so scans that wait
    /// for it build their own).
    fn publish(&mut self, lead: Lead<'_>, w: Window, ended: bool) -> Window {
        let Window {
            raw,
            loading: Some(loading),
            failed: None,
            ready: None,
        } = w
        else {
            return w;
        };
        if !loading.settled() {
            return Window {
                raw,
                loading: Some(loading),
                failed: None,
                ready: None,
            };
        }
        let entries: Vec<Result<Entry>> =
            pair_values(raw, self.view.load_finish(loading)).collect();
        let ready = if entries.iter().all(|e| e.is_ok()) {
            let entries = entries.into_iter().flatten().collect();
            let shared = Arc::new(SharedWindow { entries, ended });
            lead.publish(shared.clone());
            self.sharing = true;
            Ready::Shared(shared)
        } else {
            Ready::Own(entries)
        };
        Window::ready(ready)
    }

    /// Waits for a window's values and queues its entries.
    fn queue_window(&mut self, dir: Dir, w: Window) {
        match w.ready {
            Some(Ready::Shared(shared)) => {
                let ahead = self.ahead(dir);
                if ahead.is_empty() {
                    ahead.shared = Some((shared, 0));
                } else {
                    let entries = shared.entries.iter();
                    ahead
                        .queue
                        .extend(entries.map(|(k, v)| Ok((k.clone(), v.clone()))));
                }
                return;
            }
            Some(Ready::Own(entries)) => {
                self.ahead(dir).queue.extend(entries);
                return;
            }
            None => {}
        }
        let loaded = w
            .loading
            .map(|l| self.view.load_finish(l))
            .unwrap_or_default();
        let ahead = self.ahead(dir);
        ahead.queue.extend(pair_values(w.raw, loaded));
        if let Some(e) = w.failed {
            ahead.queue.push_back(Err(e));
        }
    }
}

/// Bytes a refill counts for an entry: its value, separated or not.
fn value_bytes((user, kind, stored): &Raw) -> usize {
    let value = if *kind == Kind::Pointer as u8 {
        ValuePtr::decode(stored).map_or(stored.len(), |p| p.len as usize)
    } else {
        stored.len()
    };
    user.len() + value
}

/// How [`Iter::front_direct`] found the front's next entry.
enum Direct {
    /// The front's merge stands on it, a value stored inline
    /// ([`Iter::front_entry`]).
    Inline,
    /// Its value is separated: a window starting with it is queued.
    Queued,
    /// The front has ended.
    End,
}

impl Iter {
    /// The front's next entry taken straight from its merge, when nothing
    /// is read ahead of it (`None`: take it from the read-ahead queue).
    /// An entry whose value is inline is left in the merge, so `next_ref`
    /// lends it and `next` copies it once, with no queue between: a scan
    /// of inline values (a seek and the next 100 of `dbbench`
    /// seekrandom) moves no entry through a window. Separated values
    /// (YCSB E's 1 KiB records) still go through windows to be loaded.
    fn front_direct(&mut self) -> Option<Result<Direct>> {
        let ahead = &self.front_ahead;
        if self.done || self.sharing || !ahead.is_empty() || ahead.inflight.is_some() || ahead.ended
        {
            return None;
        }
        if let Err(e) = self.view.check_open() {
            // As from the queue: the error once, then the end.
            self.done = true;
            return Some(Err(e));
        }
        let kind = match self.advance_front() {
            Ok(Some(kind)) => kind,
            Ok(None) => {
                self.front_ahead.ended = true;
                self.done = true;
                return Some(Ok(Direct::End));
            }
            Err(e) => {
                self.front_ahead.ended = true;
                self.done = true;
                return Some(Err(e));
            }
        };
        let front = self
            .front
            .as_ref()
            .expect("advance_front built the front before it found an entry");
        let (user, stored) = front.entry();
        if self
            .back_last
            .as_ref()
            .is_some_and(|b| user >= b.as_slice())
        {
            // The back yielded this key already: the ends have met.
            self.done = true;
            return Some(Ok(Direct::End));
        }
        if kind == Kind::Pointer as u8 {
            let raw = (UserKey::from_slice(user), kind, Stored::from_slice(stored));
            self.refill_from(Dir::Forward, vec![raw]);
            return Some(Ok(Direct::Queued));
        }
        remember(&mut self.front_last, user);
        self.lent = None;
        Some(Ok(Direct::Inline))
    }

    /// The next entry from the front, as `next` yields it, with its value
    /// as loaded.
    fn next_entry(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        match self.step(Dir::Forward) {
            Some(Err(e)) => {
                self.done = true;
                Some(Err(e))
            }
            Some(Ok((k, v)))
                if self
                    .back_last
                    .as_ref()
                    .is_none_or(|b| k.as_slice() < b.as_slice()) =>
            {
                remember(&mut self.front_last, &k);
                Some(Ok((k, v)))
            }
            _ => {
                self.done = true;
                None
            }
        }
    }

    /// The next entry from the front, like `next`, but lent: the key and
    /// value stay the iterator's until the next call. A value a long scan
    /// read through a shared chunk (§Shared scans in docs/architecture.md)
    /// is lent out of the chunk itself, so scanners that only look at
    /// values pay no copy for them.
    ///
    /// ```no_run
    /// # fn demo(db: &cairndb::Db) -> cairndb::Result<()> {
    /// let mut iter = db.iter();
    /// let mut bytes = 0;
    /// while let Some(entry) = iter.next_ref() {
    ///     let (key, value) = entry?;
    ///     bytes += key.len() + value.len();
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn next_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        match self.front_direct() {
            Some(Ok(Direct::Inline)) => return Some(Ok(self.front_entry())),
            Some(Ok(Direct::End)) => return None,
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(Direct::Queued)) | None => {}
        }
        if let Some(i) = self.shared_next() {
            let (w, _) = self
                .front_ahead
                .shared
                .as_ref()
                .expect("shared_next found the front's shared window");
            let (k, v) = &w.entries[i];
            return Some(Ok((k.as_slice(), v.as_slice())));
        }
        match self.next_entry()? {
            Err(e) => Some(Err(e)),
            Ok(entry) => {
                let (k, v) = self.lent.insert(entry);
                Some(Ok((k.as_slice(), v.as_slice())))
            }
        }
    }

    /// Moves the front past the next entry of its shared window and
    /// returns its index, if it has one to yield as `next_entry` would
    /// (else `next_entry` takes over: the window is used up, the ends
    /// have met, or the database is closing).
    fn shared_next(&mut self) -> Option<usize> {
        if self.done || self.view.check_open().is_err() {
            return None;
        }
        let (w, at) = self.front_ahead.shared.as_mut()?;
        let i = *at;
        let (k, _) = w.entries.get(i)?;
        if self
            .back_last
            .as_ref()
            .is_some_and(|b| k.as_slice() >= b.as_slice())
        {
            return None;
        }
        *at += 1;
        remember(&mut self.front_last, k);
        self.lent = None;
        Some(i)
    }

    /// Moves the iterator so that `next` yields the first key at or after
    /// `target` within its range (from its lower bound if `target` is
    /// below it), at the same snapshot, and `next_back` starts again from
    /// its upper bound. The iterator keeps its view of the memtables and
    /// tables, so a seek costs less than a new `range` (what a
    /// seek-heavy reader, such as a join or a secondary index lookup,
    /// wants). A `target` longer than the key limit makes the next item
    /// from either end an `Err`.
    ///
    /// ```no_run
    /// # fn demo(db: &cairndb::Db) -> cairndb::Result<()> {
    /// let mut iter = db.iter();
    /// for start in [&b"apple"[..], b"kiwi", b"plum"] {
    ///     iter.seek(start);
    ///     let first_ten: Vec<_> = iter.by_ref().take(10).collect::<Result<_, _>>()?;
    ///     # let _ = first_ten;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn seek(&mut self, target: impl AsRef<[u8]>) {
        let target = target.as_ref();
        self.restart();
        match check_key(target) {
            Ok(()) => self.front_from = Some(target.to_vec()),
            Err(e) => self.refuse(e),
        }
    }

    /// Moves the iterator so that `next_back` yields the last key at or
    /// before `target` within its range (from its upper bound if `target`
    /// is above it), at the same snapshot, and `next` starts again from
    /// its lower bound. The backward twin of [`Iter::seek`].
    pub fn seek_for_prev(&mut self, target: impl AsRef<[u8]>) {
        let target = target.as_ref();
        self.restart();
        match check_key(target) {
            Ok(()) => self.back_from = Some(target.to_vec()),
            Err(e) => self.refuse(e),
        }
    }

    /// Both ends as a new iterator over the same view and range has them.
    fn restart(&mut self) {
        self.lent = None;
        self.front = None;
        self.back = None;
        self.front_last = None;
        self.back_last = None;
        self.front_ahead = Ahead::new();
        self.back_ahead = Ahead::new();
        self.front_from = None;
        self.back_from = None;
        self.front_after = None;
        self.sharing = false;
        self.done = false;
        if let Some(e) = bounds_refused(&self.lower, &self.upper) {
            self.refuse(e);
        }
    }
}

/// A bound longer than any key is refused as a key would be (`Db::get`):
/// the first item from either end is then the error.
fn bounds_refused(lower: &Bound<Vec<u8>>, upper: &Bound<Vec<u8>>) -> Option<crate::Error> {
    [lower, upper].into_iter().find_map(|b| match b {
        Bound::Included(k) | Bound::Excluded(k) => check_key(k).err(),
        Bound::Unbounded => None,
    })
}

/// True if `user_key` lies above the upper bound `upper`.
fn past(upper: &Bound<Vec<u8>>, user_key: &[u8]) -> bool {
    match upper {
        Bound::Included(u) => user_key > u.as_slice(),
        Bound::Excluded(u) => user_key >= u.as_slice(),
        Bound::Unbounded => false,
    }
}

/// Sets `last` to `key`, reusing its buffer.
fn remember(last: &mut Option<Vec<u8>>, key: &[u8]) {
    let buf = last.get_or_insert_with(Vec::new);
    buf.clear();
    buf.extend_from_slice(key);
}

impl Iterator for Iter {
    type Item = Result<KeyValue>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.front_direct() {
            Some(Ok(Direct::Inline)) => {
                let (k, v) = self.front_entry();
                return Some(Ok((k.to_vec(), v.to_vec())));
            }
            Some(Ok(Direct::End)) => return None,
            Some(Err(e)) => return Some(Err(e)),
            Some(Ok(Direct::Queued)) | None => {}
        }
        self.next_entry()
            .map(|e| e.map(|(k, v)| (k.into_vec(), v.into_vec())))
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step(Dir::Backward) {
            Some(Err(e)) => {
                self.done = true;
                Some(Err(e))
            }
            Some(Ok((k, v)))
                if self
                    .front_last
                    .as_ref()
                    .is_none_or(|f| k.as_slice() > f.as_slice()) =>
            {
                remember(&mut self.back_last, &k);
                Some(Ok((k.into_vec(), v.into_vec())))
            }
            _ => {
                self.done = true;
                None
            }
        }
    }
}

/// The smallest key greater than every key starting with `prefix`, or
/// `None` if there is none (the prefix is empty or all 0xff).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}
