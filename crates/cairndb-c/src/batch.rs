//! Write batches: puts and deletes collected in order, applied atomically
//! by `leveldb_write`.
//!
//! The batch keeps its operations itself (CairnDB's `WriteBatch` has no
//! way to read them back, which `leveldb_writebatch_iterate` needs) and
//! builds a `cairndb::WriteBatch` at each write. LevelDB's adders return
//! nothing, so a key or value over CairnDB's limits (`cairndb::limits`) is
//! reported by the `leveldb_write` that carries it, which then writes
//! nothing.

use crate::options::free_box;
use crate::{bytes, quiet};
use libc::{c_char, c_void, size_t};

pub(crate) enum Op {
    Put { key: Vec<u8>, value: Vec<u8> },
    Delete { key: Vec<u8> },
}

/// `leveldb_writebatch_t`.
#[derive(Default)]
pub struct leveldb_writebatch_t {
    pub(crate) ops: Vec<Op>,
}

impl leveldb_writebatch_t {
    /// The CairnDB batch of these operations, or the first operation's
    /// error.
    pub(crate) fn to_cairndb(&self) -> cairndb::Result<cairndb::WriteBatch> {
        let mut b = cairndb::WriteBatch::new();
        for op in &self.ops {
            match op {
                Op::Put { key, value } => b.put(key, value)?,
                Op::Delete { key } => b.delete(key)?,
            }
        }
        Ok(b)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_writebatch_create() -> *mut leveldb_writebatch_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::<leveldb_writebatch_t>::default())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writebatch_destroy(b: *mut leveldb_writebatch_t) {
    // SAFETY: made by leveldb_writebatch_create, destroyed once.
    unsafe { free_box(b) }
}

/// Runs `f` on the batch `b` points to, unless `b` is NULL.
///
/// # Safety
/// `b` is NULL or a live batch used by no other thread.
unsafe fn with(b: *mut leveldb_writebatch_t, f: impl FnOnce(&mut leveldb_writebatch_t)) {
    if b.is_null() {
        return;
    }
    // SAFETY: the caller's contract: a live batch this thread may change.
    let b = unsafe { &mut *b };
    quiet((), || f(b));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writebatch_clear(b: *mut leveldb_writebatch_t) {
    // SAFETY: `b` is a live batch (C API contract).
    unsafe { with(b, |b| b.ops.clear()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writebatch_put(
    b: *mut leveldb_writebatch_t,
    key: *const c_char,
    klen: size_t,
    val: *const c_char,
    vlen: size_t,
) {
    // SAFETY: (key, klen) and (val, vlen) are readable (C API contract).
    let (key, value) = unsafe { (bytes(key, klen).to_vec(), bytes(val, vlen).to_vec()) };
    // SAFETY: `b` is a live batch (C API contract).
    unsafe { with(b, |b| b.ops.push(Op::Put { key, value })) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writebatch_delete(
    b: *mut leveldb_writebatch_t,
    key: *const c_char,
    klen: size_t,
) {
    // SAFETY: (key, klen) is readable (C API contract).
    let key = unsafe { bytes(key, klen).to_vec() };
    // SAFETY: `b` is a live batch (C API contract).
    unsafe { with(b, |b| b.ops.push(Op::Delete { key })) }
}

pub type PutFn = unsafe extern "C" fn(*mut c_void, *const c_char, size_t, *const c_char, size_t);
pub type DeletedFn = unsafe extern "C" fn(*mut c_void, *const c_char, size_t);

/// Calls `put` or `deleted` for each operation of the batch, in order.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writebatch_iterate(
    b: *const leveldb_writebatch_t,
    state: *mut c_void,
    put: Option<PutFn>,
    deleted: Option<DeletedFn>,
) {
    if b.is_null() {
        return;
    }
    // SAFETY: `b` is a live batch (C API contract).
    let b = unsafe { &*b };
    quiet((), || {
        for op in &b.ops {
            match op {
                Op::Put { key, value } => {
                    if let Some(put) = put {
                        // SAFETY: the caller's callback, with its state
                        // and buffers that live through the call.
                        unsafe {
                            put(
                                state,
                                key.as_ptr().cast(),
                                key.len(),
                                value.as_ptr().cast(),
                                value.len(),
                            )
                        }
                    }
                }
                Op::Delete { key } => {
                    if let Some(deleted) = deleted {
                        // SAFETY: as above.
                        unsafe { deleted(state, key.as_ptr().cast(), key.len()) }
                    }
                }
            }
        }
    })
}

/// Appends the operations of `src` to `dst` (`src` may be `dst`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writebatch_append(
    dst: *mut leveldb_writebatch_t,
    src: *const leveldb_writebatch_t,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: `src` is a live batch (C API contract). This shared borrow
    // ends with the copy, before `dst` (which may be the same batch) is
    // borrowed mutably.
    let src = unsafe { &*src };
    let copied: Vec<Op> = quiet(Vec::new(), || {
        src.ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value } => Op::Put {
                    key: key.clone(),
                    value: value.clone(),
                },
                Op::Delete { key } => Op::Delete { key: key.clone() },
            })
            .collect()
    });
    // SAFETY: `dst` is a live batch (C API contract).
    unsafe { with(dst, |d| d.ops.extend(copied)) }
}
