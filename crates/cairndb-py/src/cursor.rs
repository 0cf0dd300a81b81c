//! plyvel's `Iterator` and `RawIterator`: bidirectional cursors built on
//! the engine's range iterators.
//!
//! The engine's `Iter` walks a fixed range from either end. A cursor here
//! is a position between two keys (a *gap*); stepping forward from a gap
//! reads a fresh range from the gap up with `next`, stepping back reads a
//! fresh range from the gap down with `next_back`. The range iterator is
//! kept while the cursor keeps moving the same way, so a scan in one
//! direction costs one engine iterator; a change of direction or a seek
//! starts another. Every range is read from the one snapshot taken when
//! the cursor was made, so the cursor sees one consistent state however it
//! moves.

use crate::db::View;
use crate::{CLOSED_ITER, OrPy, arg_bytes, py_error};
use cairndb::{Iter, KeyValue};
use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::collections::VecDeque;
use std::ops::Bound as Limit;

/// What an iterator yields, over which keys.
pub(crate) struct Spec {
    pub(crate) lo: Limit<Vec<u8>>,
    pub(crate) hi: Limit<Vec<u8>>,
    /// A `PrefixedDB`'s prefix: added to seek targets, stripped from
    /// yielded keys.
    pub(crate) db_prefix: Vec<u8>,
    pub(crate) include_key: bool,
    pub(crate) include_value: bool,
    /// `next()` moves down, `prev()` up.
    pub(crate) reverse: bool,
}

/// Where a cursor stands: between two keys of the range.
enum Gap {
    /// Before every key.
    Start,
    /// After every key.
    End,
    /// Just before this key: forward yields the first key >= it, back the
    /// last key < it.
    Before(Vec<u8>),
    /// Just after this key: forward yields the first key > it, back the
    /// last key <= it.
    After(Vec<u8>),
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Dir {
    Forward,
    Backward,
}

/// The key of a bound, if it has one.
fn key_of(b: &Limit<Vec<u8>>) -> Option<&[u8]> {
    match b {
        Limit::Included(k) | Limit::Excluded(k) => Some(k),
        Limit::Unbounded => None,
    }
}

/// The tighter of two lower bounds.
fn max_lower(a: Limit<Vec<u8>>, b: &Limit<Vec<u8>>) -> Limit<Vec<u8>> {
    match (key_of(&a), key_of(b)) {
        (_, None) => a,
        (None, Some(_)) => b.clone(),
        (Some(x), Some(y)) if x > y || (x == y && matches!(a, Limit::Excluded(_))) => a,
        _ => b.clone(),
    }
}

/// The tighter of two upper bounds.
fn min_upper(a: Limit<Vec<u8>>, b: &Limit<Vec<u8>>) -> Limit<Vec<u8>> {
    match (key_of(&a), key_of(b)) {
        (_, None) => a,
        (None, Some(_)) => b.clone(),
        (Some(x), Some(y)) if x < y || (x == y && matches!(a, Limit::Excluded(_))) => a,
        _ => b.clone(),
    }
}

/// Whether no key lies between `lo` and `hi`.
fn empty(lo: &Limit<Vec<u8>>, hi: &Limit<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Limit::Included(l), Limit::Included(h)) => l > h,
        (Limit::Included(l) | Limit::Excluded(l), Limit::Included(h) | Limit::Excluded(h)) => {
            l >= h
        }
        _ => false,
    }
}

/// Entries a cursor reads ahead of its gap at most, in the direction it
/// moves, so that most steps of a scan take no engine call (and no
/// release of the GIL).
const AHEAD_ENTRIES_MAX: usize = 64;
/// Bytes of keys and values read ahead at most.
const AHEAD_BYTES_MAX: usize = 256 << 10;

/// A cursor over `spec`'s range of `view`.
pub(crate) struct Cursor {
    view: View,
    spec: Spec,
    gap: Gap,
    /// The engine iterator serving moves in one direction from `gap`.
    active: Option<(Dir, Iter)>,
    /// Entries `active` yielded that the cursor has not stepped over yet:
    /// the next ones past `gap` in `active`'s direction, as (key length,
    /// value length), their bytes one after another in `ahead_bytes` from
    /// `ahead_at` on (one buffer, reused, instead of two allocations per
    /// entry).
    ahead: VecDeque<(usize, usize)>,
    ahead_bytes: Vec<u8>,
    ahead_at: usize,
    /// Refills of `ahead` from `active` so far.
    refills: u32,
    /// The value of the entry the cursor stepped over last (its key is
    /// `gap`'s).
    value: Vec<u8>,
}

impl Cursor {
    pub(crate) fn new(view: View, spec: Spec) -> Cursor {
        let gap = if spec.reverse { Gap::End } else { Gap::Start };
        Cursor {
            view,
            spec,
            gap,
            active: None,
            ahead: VecDeque::new(),
            ahead_bytes: Vec::new(),
            ahead_at: 0,
            refills: 0,
            value: Vec::new(),
        }
    }

    /// Whether a step `dir` is served from entries read ahead, without an
    /// engine call.
    fn ready(&self, dir: Dir) -> bool {
        !self.ahead.is_empty() && matches!(&self.active, Some((d, _)) if *d == dir)
    }

    /// Moves one key `dir`, returning it; `None` at the end of the range
    /// (the cursor then stands past it). On an error the cursor stays
    /// where it was.
    fn step_owned(&mut self, dir: Dir) -> cairndb::Result<Option<KeyValue>> {
        Ok(self
            .step(dir)?
            .then(|| self.last())
            .flatten()
            .map(|(k, v)| (k.to_vec(), v.to_vec())))
    }

    /// The key and value the cursor stepped over last.
    fn last(&self) -> Option<(&[u8], &[u8])> {
        match &self.gap {
            Gap::Before(k) | Gap::After(k) => Some((k, &self.value)),
            Gap::Start | Gap::End => None,
        }
    }

    /// Moves one key `dir`: true if it stepped over one (`last` has it),
    /// false at the end of the range (the cursor then stands past it). On
    /// an error the cursor stays where it was.
    fn step(&mut self, dir: Dir) -> cairndb::Result<bool> {
        if !matches!(&self.active, Some((d, _)) if *d == dir) {
            self.drop_active();
            let (lo, hi) = match (dir, &self.gap) {
                (Dir::Forward, Gap::End) | (Dir::Backward, Gap::Start) => return Ok(false),
                (Dir::Forward, Gap::Start) | (Dir::Backward, Gap::End) => {
                    (self.spec.lo.clone(), self.spec.hi.clone())
                }
                (Dir::Forward, Gap::Before(k)) => (
                    max_lower(Limit::Included(k.clone()), &self.spec.lo),
                    self.spec.hi.clone(),
                ),
                (Dir::Forward, Gap::After(k)) => (
                    max_lower(Limit::Excluded(k.clone()), &self.spec.lo),
                    self.spec.hi.clone(),
                ),
                (Dir::Backward, Gap::Before(k)) => (
                    self.spec.lo.clone(),
                    min_upper(Limit::Excluded(k.clone()), &self.spec.hi),
                ),
                (Dir::Backward, Gap::After(k)) => (
                    self.spec.lo.clone(),
                    min_upper(Limit::Included(k.clone()), &self.spec.hi),
                ),
            };
            if empty(&lo, &hi) {
                self.end(dir);
                return Ok(false);
            }
            self.active = Some((dir, self.view.range(lo, hi)));
        }
        if self.ahead.is_empty()
            && let Err(e) = self.refill(dir)
        {
            self.drop_active();
            return Err(e);
        }
        match self.ahead.pop_front() {
            Some((k_len, v_len)) => {
                let at = self.ahead_at;
                let (k, v) = (
                    &self.ahead_bytes[at..at + k_len],
                    &self.ahead_bytes[at + k_len..at + k_len + v_len],
                );
                self.ahead_at = at + k_len + v_len;
                // Reuse the gap's key buffer.
                let mut key = match std::mem::replace(&mut self.gap, Gap::Start) {
                    Gap::Before(b) | Gap::After(b) => b,
                    Gap::Start | Gap::End => Vec::new(),
                };
                key.clear();
                key.extend_from_slice(k);
                self.value.clear();
                self.value.extend_from_slice(v);
                self.gap = match dir {
                    Dir::Forward => Gap::After(key),
                    Dir::Backward => Gap::Before(key),
                };
                Ok(true)
            }
            None => {
                self.end(dir);
                Ok(false)
            }
        }
    }

    /// Reads entries from the active iterator into `ahead`: one on its
    /// first refill, so a cursor used for a single step (a seek, a `prev`)
    /// reads no more, then twice as many each time up to
    /// `AHEAD_ENTRIES_MAX` (and `AHEAD_BYTES_MAX` bytes).
    fn refill(&mut self, dir: Dir) -> cairndb::Result<()> {
        let want = (1usize << self.refills.min(16)).min(AHEAD_ENTRIES_MAX);
        self.refills += 1;
        let Some((_, it)) = self.active.as_mut() else {
            return Ok(());
        };
        debug_assert!(self.ahead.is_empty());
        self.ahead_bytes.clear();
        self.ahead_at = 0;
        let (ahead, bytes) = (&mut self.ahead, &mut self.ahead_bytes);
        let mut push = |k: &[u8], v: &[u8]| {
            bytes.extend_from_slice(k);
            bytes.extend_from_slice(v);
            ahead.push_back((k.len(), v.len()));
            k.len() + v.len()
        };
        let mut failed = None;
        let (mut n, mut len) = (0, 0);
        while n < want && len < AHEAD_BYTES_MAX {
            n += 1;
            // Forward, the engine lends each entry (no allocation);
            // backward it hands out owned ones.
            let more = match dir {
                Dir::Forward => match it.next_ref() {
                    Some(Ok((k, v))) => {
                        len += push(k, v);
                        true
                    }
                    Some(Err(e)) => {
                        failed = Some(e);
                        false
                    }
                    None => false,
                },
                Dir::Backward => match it.next_back() {
                    Some(Ok((k, v))) => {
                        len += push(&k, &v);
                        true
                    }
                    Some(Err(e)) => {
                        failed = Some(e);
                        false
                    }
                    None => false,
                },
            };
            if !more {
                break;
            }
        }
        if let Some(e) = failed {
            self.ahead.clear();
            return Err(e);
        }
        Ok(())
    }

    fn drop_active(&mut self) {
        self.active = None;
        self.ahead.clear();
        self.refills = 0;
    }

    fn end(&mut self, dir: Dir) {
        self.drop_active();
        self.gap = match dir {
            Dir::Forward => Gap::End,
            Dir::Backward => Gap::Start,
        };
    }

    fn seek(&mut self, gap: Gap) {
        self.drop_active();
        self.gap = gap;
    }
}

/// plyvel's `Iterator`: `next()` / `for` yields entries in key order (or
/// reverse), `prev()` steps back (returning again what `next()` returned
/// last), `seek(target)`, `seek_to_start()`, `seek_to_stop()`, `close()`,
/// and a `with` block that closes it.
///
/// It reads the snapshot taken when it was made. Once its database is
/// closed, or it is, every call raises `RuntimeError`. Safe to share
/// between threads (each call moves it under a lock, with the GIL
/// released while the engine reads).
#[pyclass(frozen, module = "cairndb")]
pub struct Iterator {
    cursor: Mutex<Option<Cursor>>,
    strip: usize,
    include_key: bool,
    include_value: bool,
    reverse: bool,
}

/// Why a cursor call did not reach the engine.
enum Refused {
    Closed,
}

impl Iterator {
    pub(crate) fn new(cursor: Cursor) -> Iterator {
        Iterator {
            strip: cursor.spec.db_prefix.len(),
            include_key: cursor.spec.include_key,
            include_value: cursor.spec.include_value,
            reverse: cursor.spec.reverse,
            cursor: Mutex::new(Some(cursor)),
        }
    }

    /// Runs `f` on the cursor with the GIL released.
    fn with_cursor<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Cursor) -> cairndb::Result<T> + Send,
    ) -> PyResult<T> {
        let r = py.detach(|| {
            let mut guard = self.cursor.lock();
            match guard.as_mut() {
                Some(c) if !c.view.core.is_closed() => Ok(f(c)),
                _ => {
                    // A closed database closes its iterators.
                    guard.take();
                    Err(Refused::Closed)
                }
            }
        });
        match r {
            Err(Refused::Closed) | Ok(Err(cairndb::Error::Closed)) => {
                Err(PyRuntimeError::new_err(CLOSED_ITER))
            }
            Ok(r) => r.or_py(py),
        }
    }

    fn item(&self, py: Python<'_>, k: &[u8], v: &[u8]) -> Py<PyAny> {
        let key = || PyBytes::new(py, k.get(self.strip..).unwrap_or_default());
        let value = || PyBytes::new(py, v);
        match (self.include_key, self.include_value) {
            (true, true) => PyTuple::new(py, [key(), value()])
                .map(|t| t.into_any().unbind())
                .unwrap_or_else(|_| py.None()),
            (true, false) => key().into_any().unbind(),
            (false, true) => value().into_any().unbind(),
            (false, false) => py.None(),
        }
    }

    fn move_once(&self, py: Python<'_>, forward: bool) -> PyResult<Option<Py<PyAny>>> {
        let dir = if forward != self.reverse {
            Dir::Forward
        } else {
            Dir::Backward
        };
        // A step over an entry already read ahead takes no engine call: it
        // is taken with the GIL held (the lock is never held by a thread
        // waiting for the GIL, so this cannot deadlock).
        if let Some(mut guard) = self.cursor.try_lock()
            && let Some(c) = guard.as_mut()
            && c.ready(dir)
            && !c.view.core.is_closed()
        {
            let moved = c.step(dir).or_py(py)?;
            return Ok(c.last().filter(|_| moved).map(|(k, v)| self.item(py, k, v)));
        }
        let got = self.with_cursor(py, |c| c.step_owned(dir))?;
        Ok(got.map(|(k, v)| self.item(py, &k, &v)))
    }
}

#[pymethods]
impl Iterator {
    fn __iter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        if slf.get().cursor.lock().is_none() {
            return Err(PyRuntimeError::new_err(CLOSED_ITER));
        }
        Ok(slf)
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.move_once(py, true)
    }

    /// Moves one step back and returns that entry; `StopIteration` at the
    /// start.
    fn prev(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.move_once(py, false)?
            .ok_or_else(|| PyStopIteration::new_err(()))
    }

    /// Rewinds: `next()` then yields the first entry of the range (for
    /// a reverse iterator, `prev()` does).
    fn seek_to_start(&self, py: Python<'_>) -> PyResult<()> {
        self.with_cursor(py, |c| {
            c.seek(Gap::Start);
            Ok(())
        })
    }

    /// Moves past the end of the range.
    fn seek_to_stop(&self, py: Python<'_>) -> PyResult<()> {
        self.with_cursor(py, |c| {
            c.seek(Gap::End);
            Ok(())
        })
    }

    /// Moves to just before the first key >= `target` in the range: a
    /// forward `next()` yields it; a reverse iterator's `next()` yields
    /// the last key before it, as plyvel's does.
    fn seek(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = arg_bytes(target, "target")?;
        self.with_cursor(py, |c| {
            let mut k = c.spec.db_prefix.clone();
            k.extend_from_slice(&target);
            c.seek(Gap::Before(k));
            Ok(())
        })
    }

    /// Closes the iterator; later calls raise `RuntimeError`.
    fn close(&self, py: Python<'_>) {
        let cursor = py.detach(|| self.cursor.lock().take());
        drop(cursor);
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// plyvel's `RawIterator`, LevelDB's cursor: `valid()`, `seek_to_first()`,
/// `seek_to_last()`, `seek(target)`, `next()`, `prev()`, `key()`,
/// `value()`, `item()`, `close()`. Reading the current entry or moving
/// from an invalid position raises `cairndb.IteratorInvalidError`.
#[pyclass(frozen, module = "cairndb")]
pub struct RawIterator {
    state: Mutex<Option<Raw>>,
}

struct Raw {
    cursor: Cursor,
    /// The entry the cursor is at, if valid.
    current: Option<KeyValue>,
}

impl RawIterator {
    pub(crate) fn new(view: View) -> RawIterator {
        let spec = Spec {
            lo: Limit::Unbounded,
            hi: Limit::Unbounded,
            db_prefix: Vec::new(),
            include_key: true,
            include_value: true,
            reverse: false,
        };
        RawIterator {
            state: Mutex::new(Some(Raw {
                cursor: Cursor::new(view, spec),
                current: None,
            })),
        }
    }

    /// Runs `f` on the cursor with the GIL released (`f` may read).
    fn with_raw<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Raw) -> Result<T, RawErr> + Send,
    ) -> PyResult<T> {
        let r = py.detach(|| self.locked(f));
        raw_err(py, r)
    }

    /// Runs `f`, which must not read (no engine call), on the cursor with
    /// the GIL held: the lock is never held by a thread waiting for the
    /// GIL, so this cannot deadlock.
    fn with_raw_held<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Raw) -> Result<T, RawErr>,
    ) -> PyResult<T> {
        raw_err(py, self.locked(f))
    }

    fn locked<T>(&self, f: impl FnOnce(&mut Raw) -> Result<T, RawErr>) -> Result<T, RawErr> {
        let mut guard = self.state.lock();
        match guard.as_mut() {
            Some(r) if !r.cursor.view.core.is_closed() => f(r),
            _ => {
                guard.take();
                Err(RawErr::Closed)
            }
        }
    }

    /// Places the cursor at `gap` and moves it once `dir`.
    fn position(&self, py: Python<'_>, gap: Gap, dir: Dir) -> PyResult<()> {
        let mut gap = Some(gap);
        self.with_raw(py, move |r| {
            if let Some(g) = gap.take() {
                r.cursor.seek(g);
            }
            r.current = None;
            r.current = r.cursor.step_owned(dir).map_err(RawErr::Engine)?;
            Ok(())
        })
    }

    /// Moves from the current entry one key `dir`.
    fn advance(&self, py: Python<'_>, dir: Dir) -> PyResult<()> {
        self.with_raw(py, |r| {
            let Some((k, _)) = r.current.take() else {
                return Err(RawErr::Invalid);
            };
            // Keep the running engine iterator if it already goes `dir`
            // from this key; else restart from the key.
            let going =
                r.cursor.ready(dir) || matches!(&r.cursor.active, Some((d, _)) if *d == dir);
            if !going {
                r.cursor.seek(match dir {
                    Dir::Forward => Gap::After(k),
                    Dir::Backward => Gap::Before(k),
                });
            }
            r.current = r.cursor.step_owned(dir).map_err(RawErr::Engine)?;
            Ok(())
        })
    }

    fn current(&self, py: Python<'_>) -> PyResult<KeyValue> {
        self.with_raw_held(py, |r| r.current.clone().ok_or(RawErr::Invalid))
    }
}

fn raw_err<T>(py: Python<'_>, r: Result<T, RawErr>) -> PyResult<T> {
    r.map_err(|e| match e {
        RawErr::Closed | RawErr::Engine(cairndb::Error::Closed) => {
            PyRuntimeError::new_err(CLOSED_ITER)
        }
        RawErr::Invalid => py_error(py, "IteratorInvalidError", "iterator is not valid".into()),
        RawErr::Engine(e) => crate::engine_err(py, e),
    })
}

enum RawErr {
    Closed,
    Invalid,
    Engine(cairndb::Error),
}

#[pymethods]
impl RawIterator {
    fn valid(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_raw_held(py, |r| Ok(r.current.is_some()))
    }

    fn seek_to_first(&self, py: Python<'_>) -> PyResult<()> {
        self.position(py, Gap::Start, Dir::Forward)
    }

    fn seek_to_last(&self, py: Python<'_>) -> PyResult<()> {
        self.position(py, Gap::End, Dir::Backward)
    }

    /// Moves to the first key >= `target` (invalid if there is none).
    fn seek(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = arg_bytes(target, "target")?.into_owned();
        self.position(py, Gap::Before(target), Dir::Forward)
    }

    /// Moves to the last key <= `target` (invalid if there is none);
    /// RocksDB's `SeekForPrev`, a CairnDB extra.
    fn seek_for_prev(&self, py: Python<'_>, target: &Bound<'_, PyAny>) -> PyResult<()> {
        let target = arg_bytes(target, "target")?.into_owned();
        self.position(py, Gap::After(target), Dir::Backward)
    }

    fn next(&self, py: Python<'_>) -> PyResult<()> {
        self.advance(py, Dir::Forward)
    }

    fn prev(&self, py: Python<'_>) -> PyResult<()> {
        self.advance(py, Dir::Backward)
    }

    fn key<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let (k, _) = self.current(py)?;
        Ok(PyBytes::new(py, &k))
    }

    fn value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let (_, v) = self.current(py)?;
        Ok(PyBytes::new(py, &v))
    }

    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (k, v) = self.current(py)?;
        PyTuple::new(py, [PyBytes::new(py, &k), PyBytes::new(py, &v)])
    }

    fn close(&self, py: Python<'_>) {
        let state = py.detach(|| self.state.lock().take());
        drop(state);
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }
}
