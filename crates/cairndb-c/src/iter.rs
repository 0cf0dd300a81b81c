//! `leveldb_iterator_t`: LevelDB's bidirectional cursor, built on
//! CairnDB's double-ended range iterators.
//!
//! The cursor reads one snapshot, taken when it is created (or the read
//! options' snapshot), so every position it takes is of the same instant.
//! It holds the entry it is on and the CairnDB iterator that continues in
//! the direction it last moved:
//! - `seek(k)`: a fresh `range(k..)`, read forward; `seek_to_first`
//!   likewise over everything.
//! - `seek_to_last`: a fresh iterator over everything, read with
//!   `next_back`.
//! - `next` after moving forward continues the iterator; after moving
//!   backward it starts `range(key..)` past the current key.
//! - `prev` after moving backward continues the iterator; after moving
//!   forward it starts `range(..key)`, read with `next_back`.
//!
//! An error from the engine ends the cursor (not valid) and is kept for
//! `leveldb_iter_get_error`; a later seek starts it afresh and clears it,
//! as in LevelDB.

use crate::db::{db_ref, read_snapshot};
use crate::{bytes, leveldb_readoptions_t, leveldb_t, quiet, set_error, status};
use cairndb::{Iter, Keyspace, Snapshot};
use libc::{c_char, c_uchar, size_t};
use std::ops::Bound;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Forward,
    Backward,
}

pub struct leveldb_iterator_t {
    snap: Arc<Snapshot>,
    /// The keyspace read (`None`: the default one).
    keyspace: Option<Keyspace>,
    /// The iterator continuing in `dir` from `current`.
    iter: Option<Iter>,
    dir: Dir,
    current: Option<(Vec<u8>, Vec<u8>)>,
    error: Option<String>,
}

impl leveldb_iterator_t {
    /// Starts `iter` reading `(lo, hi)` in direction `dir` and takes its
    /// first entry.
    fn start(&mut self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, dir: Dir) {
        self.iter = Some(match &self.keyspace {
            None => self.snap.range::<Vec<u8>, _>((lo, hi)),
            Some(ks) => self.snap.range_in::<Vec<u8>, _>(ks, (lo, hi)),
        });
        self.dir = dir;
        self.step();
    }

    /// Moves `iter` one entry in `dir`.
    fn step(&mut self) {
        let next = match (&mut self.iter, self.dir) {
            (None, _) => None,
            (Some(it), Dir::Forward) => it.next(),
            (Some(it), Dir::Backward) => it.next_back(),
        };
        self.current = match next {
            None => None,
            Some(Ok(kv)) => Some(kv),
            Some(Err(e)) => {
                self.error = Some(status(&e));
                None
            }
        };
        if self.current.is_none() {
            self.iter = None;
        }
    }

    fn seek_to_first(&mut self) {
        self.error = None;
        self.start(Bound::Unbounded, Bound::Unbounded, Dir::Forward);
    }

    fn seek_to_last(&mut self) {
        self.error = None;
        self.start(Bound::Unbounded, Bound::Unbounded, Dir::Backward);
    }

    fn seek(&mut self, key: &[u8]) {
        self.error = None;
        self.start(
            Bound::Included(key.to_vec()),
            Bound::Unbounded,
            Dir::Forward,
        );
    }

    fn next(&mut self) {
        match (&self.current, self.dir) {
            (None, _) => {}
            (Some(_), Dir::Forward) => self.step(),
            (Some((key, _)), Dir::Backward) => {
                let from = Bound::Excluded(key.clone());
                self.start(from, Bound::Unbounded, Dir::Forward);
            }
        }
    }

    fn prev(&mut self) {
        match (&self.current, self.dir) {
            (None, _) => {}
            (Some(_), Dir::Backward) => self.step(),
            (Some((key, _)), Dir::Forward) => {
                let to = Bound::Excluded(key.clone());
                self.start(Bound::Unbounded, to, Dir::Backward);
            }
        }
    }
}

/// A cursor over the database as of now (or as of the read options'
/// snapshot); not valid until positioned by a seek.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_create_iterator(
    db: *mut leveldb_t,
    options: *const leveldb_readoptions_t,
) -> *mut leveldb_iterator_t {
    // SAFETY: the caller's handles, passed on under the same contract.
    unsafe { create(db, None, options) }
}

/// A cursor over keyspace `keyspace` of `db` (the default one if `None`),
/// as of the read options' snapshot or now.
///
/// # Safety
/// `db` and `options` are NULL or live handles.
pub(crate) unsafe fn create(
    db: *mut leveldb_t,
    keyspace: Option<Keyspace>,
    options: *const leveldb_readoptions_t,
) -> *mut leveldb_iterator_t {
    quiet(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract: live handles.
        let (db, snap) = unsafe { (db_ref(db), read_snapshot(options)) };
        let Ok(db) = db else {
            return std::ptr::null_mut();
        };
        let snap = snap.unwrap_or_else(|| Arc::new(db.snapshot()));
        Box::into_raw(Box::new(leveldb_iterator_t {
            snap,
            keyspace,
            iter: None,
            dir: Dir::Forward,
            current: None,
            error: None,
        }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_destroy(it: *mut leveldb_iterator_t) {
    // SAFETY: made by leveldb_create_iterator, destroyed once.
    unsafe { crate::options::free_box(it) }
}

/// Runs `f` on the cursor `it` points to, unless `it` is NULL.
///
/// # Safety
/// `it` is NULL or a live cursor used by no other thread.
unsafe fn with(it: *mut leveldb_iterator_t, f: impl FnOnce(&mut leveldb_iterator_t)) {
    if it.is_null() {
        return;
    }
    // SAFETY: the caller's contract: a live cursor this thread may move.
    let it = unsafe { &mut *it };
    let moved = quiet(false, || {
        f(it);
        true
    });
    if !moved {
        it.iter = None;
        it.current = None;
        it.error = Some("IO error: internal error (panic) in the iterator".into());
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_valid(it: *const leveldb_iterator_t) -> c_uchar {
    if it.is_null() {
        return 0;
    }
    // SAFETY: `it` is a live cursor (C API contract).
    c_uchar::from(unsafe { (*it).current.is_some() })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_seek_to_first(it: *mut leveldb_iterator_t) {
    // SAFETY: `it` is a live cursor (C API contract).
    unsafe { with(it, leveldb_iterator_t::seek_to_first) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_seek_to_last(it: *mut leveldb_iterator_t) {
    // SAFETY: `it` is a live cursor (C API contract).
    unsafe { with(it, leveldb_iterator_t::seek_to_last) }
}

/// Positions the cursor at the first key at or after `k`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_seek(
    it: *mut leveldb_iterator_t,
    k: *const c_char,
    klen: size_t,
) {
    // SAFETY: (k, klen) is readable (C API contract).
    let key = unsafe { bytes(k, klen) };
    // SAFETY: `it` is a live cursor (C API contract).
    unsafe { with(it, |it| it.seek(key)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_next(it: *mut leveldb_iterator_t) {
    // SAFETY: `it` is a live cursor (C API contract).
    unsafe { with(it, leveldb_iterator_t::next) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_prev(it: *mut leveldb_iterator_t) {
    // SAFETY: `it` is a live cursor (C API contract).
    unsafe { with(it, leveldb_iterator_t::prev) }
}

/// The current key (valid until the cursor moves or is destroyed), or
/// NULL with length 0 if the cursor is not valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_key(
    it: *const leveldb_iterator_t,
    klen: *mut size_t,
) -> *const c_char {
    // SAFETY: `it` is NULL or a live cursor, `klen` writable (C API
    // contract).
    unsafe { current_part(it, klen, |(k, _)| k) }
}

/// The current value, like `leveldb_iter_key`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_value(
    it: *const leveldb_iterator_t,
    vlen: *mut size_t,
) -> *const c_char {
    // SAFETY: as in leveldb_iter_key.
    unsafe { current_part(it, vlen, |(_, v)| v) }
}

/// # Safety
/// `it` is NULL or a live cursor; `len` is NULL or writable.
unsafe fn current_part(
    it: *const leveldb_iterator_t,
    len: *mut size_t,
    part: impl FnOnce(&(Vec<u8>, Vec<u8>)) -> &Vec<u8>,
) -> *const c_char {
    let found = if it.is_null() {
        None
    } else {
        // SAFETY: the caller's contract: a live cursor.
        unsafe { (*it).current.as_ref() }.map(part)
    };
    let (p, n) = found.map_or((std::ptr::null(), 0), |b| (b.as_ptr().cast(), b.len()));
    if !len.is_null() {
        // SAFETY: the caller's contract: `len` is writable.
        unsafe { *len = n };
    }
    p
}

/// Sets `*errptr` to the error that ended the cursor, if any.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_iter_get_error(
    it: *const leveldb_iterator_t,
    errptr: *mut *mut c_char,
) {
    if it.is_null() {
        return;
    }
    // SAFETY: `it` is a live cursor (C API contract).
    if let Some(msg) = unsafe { (*it).error.as_deref() } {
        // SAFETY: `errptr` follows the errptr convention (C API contract).
        unsafe { set_error(errptr, msg) };
    }
}
