//! LevelDB's C API (`include/leveldb/c.h`) over CairnDB, and CairnDB's own
//! C extras (`include/cairndb.h`).
//!
//! A C program written against LevelDB's header links against
//! `libcairndb_c.so` or `libcairndb_c.a` and runs unchanged, within the
//! differences listed in this crate's README (comparators that do not
//! order keys bytewise are refused, some options are accepted and
//! ignored; `leveldb_repair_db` is `Db::repair`, which moves damaged
//! tables into `lost/`).
//!
//! Conventions kept from LevelDB's C API:
//! - Handles are opaque pointers to the `leveldb_*_t` structs below, made
//!   by a `*_create` / `leveldb_open` function and freed by the matching
//!   `*_destroy` / `leveldb_close`.
//! - Keys and values are (pointer, length) pairs; booleans are
//!   `unsigned char`.
//! - A call that can fail takes `char** errptr`: on failure the message it
//!   pointed to (NULL or `malloc`ed) is freed and replaced by a `malloc`ed
//!   message; on success it is left alone.
//! - Buffers handed to the caller (`leveldb_get`, `leveldb_property_value`)
//!   are `malloc`ed; `free` or `leveldb_free` releases them.
//!
//! No Rust panic unwinds into C: every entry point runs its body under
//! [`call`] or [`quiet`], which turn a panic into an error message (or a
//! NULL / zero result where the function has no `errptr`).
//!
//! Thread safety: a `leveldb_t` may be used from any number of threads at
//! once, as in LevelDB; iterators, write batches, options and transactions
//! belong to one thread at a time.
//!
//! Map of the modules:
//! - `db`: open, close, reads and writes, snapshots, properties, sizes,
//!   compaction, destroy and repair
//! - `iter`: the bidirectional cursor over a snapshot
//! - `batch`: write batches
//! - `options`: options, read and write options, comparators, filter
//!   policies, caches, environments
//! - `extras`: the `cairndb_` functions (transactions, keyspaces, synced
//!   writes, stats)

// Every unsafe block says why it is sound (STYLE.md §3).
#![warn(clippy::undocumented_unsafe_blocks)]
#![allow(
    non_camel_case_types,
    reason = "the C API's type names are LevelDB's (leveldb_t, ...)"
)]
#![allow(
    clippy::missing_safety_doc,
    reason = "every exported function's contract is in include/leveldb/c.h or include/cairndb.h, written for its C callers"
)]

mod batch;
mod db;
mod extras;
mod iter;
mod options;

pub use batch::*;
pub use db::*;
pub use extras::*;
pub use iter::*;
pub use options::*;

use libc::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The LevelDB release whose C API this library implements.
pub const LEVELDB_MAJOR_VERSION: i32 = 1;
pub const LEVELDB_MINOR_VERSION: i32 = 23;

/// A CairnDB error as LevelDB words a `Status`: a category prefix
/// (`Invalid argument: `, `Corruption: `, `IO error: `) before the
/// engine's message, so C code that looks at the prefix keeps working.
pub(crate) fn status(e: &cairndb::Error) -> String {
    use cairndb::Error as E;
    match e {
        E::InvalidArgument(msg) => format!("Invalid argument: {msg}"),
        E::LimitExceeded { .. } => format!("Invalid argument: {e}"),
        E::Corruption { .. } => format!("Corruption: {e}"),
        E::Conflict(_) => format!("Conflict: {e}"),
        _ => format!("IO error: {e}"),
    }
}

/// Runs `f`, the body of an entry point with an `errptr`. Its `Err`
/// message, or a caught panic's, goes to `errptr` and `fallback` is
/// returned.
pub(crate) fn call<T>(
    errptr: *mut *mut c_char,
    fallback: T,
    f: impl FnOnce() -> Result<T, String>,
) -> T {
    // A panic leaves nothing of ours half-changed that a later call could
    // see: the engine's shared state is behind its own locks, and the
    // handles of this crate are only read or replaced whole.
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => {
            // SAFETY: `errptr` is this entry point's own argument, which the
            // C API's convention makes NULL or a valid `char**`.
            unsafe { set_error(errptr, &msg) };
            fallback
        }
        Err(panic) => {
            let msg = format!("IO error: internal error (panic): {}", panic_text(&*panic));
            // SAFETY: as above.
            unsafe { set_error(errptr, &msg) };
            fallback
        }
    }
}

/// Runs `f`, the body of an entry point without an `errptr`; a panic
/// returns `fallback`.
pub(crate) fn quiet<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "no message"
    }
}

/// Replaces the message `*errptr` points to (NULL or `malloc`ed) with a
/// `malloc`ed copy of `msg`. Does nothing if `errptr` is NULL.
///
/// # Safety
/// `errptr` is NULL or points to a `char*` that is NULL or was `malloc`ed.
pub(crate) unsafe fn set_error(errptr: *mut *mut c_char, msg: &str) {
    if errptr.is_null() {
        return;
    }
    let copy = malloc_string(msg);
    // SAFETY: `errptr` is non-NULL and, by the caller's contract, points
    // to a `char*` that is NULL or `malloc`ed, so freeing it is sound
    // (free(NULL) does nothing) and the slot may be overwritten.
    unsafe {
        libc::free((*errptr).cast());
        *errptr = copy;
    }
}

/// Every Rust allocation in this library, the engine's included, goes
/// to libc's `malloc` family: `System` on Unix allocates with `malloc`
/// (or `posix_memalign` for alignments above 16, which `free` also
/// takes) and grows with `realloc`. So a `Vec<u8>` the engine returns can
/// be handed to C as it is, for the caller's `free` (`vec_for_c`), instead
/// of being copied into a second buffer. A Rust program that links this
/// crate and sets a global allocator of its own fails to build (two
/// global allocators), rather than getting buffers `free` cannot take.
#[global_allocator]
static MALLOC: std::alloc::System = std::alloc::System;

/// `v`'s buffer, for C to `free`: the bytes are not copied (see
/// `MALLOC`). An empty vector owns no buffer, so it gets a fresh 1-byte
/// one (a non-NULL pointer, as LevelDB returns for an empty value); NULL
/// if that `malloc` fails.
pub(crate) fn vec_for_c(v: Vec<u8>) -> *mut c_char {
    if v.capacity() == 0 {
        return malloc_bytes(&[]);
    }
    let mut v = std::mem::ManuallyDrop::new(v);
    // The buffer came from `malloc` or `realloc` (`MALLOC`); ownership
    // passes to the caller, who frees it with `free`/`leveldb_free`.
    v.as_mut_ptr().cast()
}

/// A `malloc`ed copy of `bytes` (at least one byte allocated, so an empty
/// value is a non-NULL pointer), or NULL if `malloc` fails.
pub(crate) fn malloc_bytes(bytes: &[u8]) -> *mut c_char {
    // SAFETY: malloc may be called with any size; the result is checked.
    let p = unsafe { libc::malloc(bytes.len().max(1)) }.cast::<u8>();
    if !p.is_null() {
        // SAFETY: `p` is a fresh allocation of at least `bytes.len()`
        // bytes, which cannot overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }
    p.cast()
}

/// A `malloc`ed NUL-terminated copy of `s` (interior NULs become `?`),
/// or NULL if `malloc` fails.
pub(crate) fn malloc_string(s: &str) -> *mut c_char {
    let mut bytes: Vec<u8> = s.bytes().map(|b| if b == 0 { b'?' } else { b }).collect();
    bytes.push(0);
    malloc_bytes(&bytes)
}

/// The `len` bytes at `ptr`, or an empty slice if `len` is 0 or `ptr` is
/// NULL.
///
/// # Safety
/// Unless `len` is 0 or `ptr` NULL, `ptr` is valid for reads of `len`
/// bytes that stay unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if len == 0 || ptr.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract: `ptr` points to `len` readable bytes.
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}

/// The NUL-terminated string at `ptr` as bytes, or `None` if `ptr` is
/// NULL.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that stays
/// unchanged for `'a`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char) -> Option<&'a [u8]> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: a NUL-terminated string.
    Some(unsafe { std::ffi::CStr::from_ptr(ptr) }.to_bytes())
}

/// Frees `ptr` with `free`. For buffers this library `malloc`ed
/// (`leveldb_get`, `leveldb_property_value`, error messages).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_free(ptr: *mut libc::c_void) {
    // SAFETY: the caller passes NULL or a pointer this library malloc'ed.
    unsafe { libc::free(ptr) }
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_major_version() -> libc::c_int {
    LEVELDB_MAJOR_VERSION
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_minor_version() -> libc::c_int {
    LEVELDB_MINOR_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in an entry point's body becomes an error message in
    /// `errptr` (replacing the one there) and the fallback result.
    #[test]
    fn a_panic_becomes_an_error() {
        let mut err: *mut c_char = malloc_string("an earlier error");
        let r = call(&mut err, 7, || -> Result<i32, String> { panic!("boom") });
        assert_eq!(r, 7);
        // SAFETY: `err` was just set to a malloc'ed NUL-terminated message.
        let msg = unsafe { c_str(err) }.map(<[u8]>::to_vec);
        assert_eq!(
            msg.as_deref(),
            Some(&b"IO error: internal error (panic): boom"[..])
        );
        assert_eq!(quiet(3, || -> i32 { panic!("boom") }), 3);
        // SAFETY: malloc'ed by set_error, freed once.
        unsafe { libc::free(err.cast()) };
    }

    /// What C threads may share: a `leveldb_t` (its `Db`), and read
    /// options or iterators' snapshots, which several threads may read
    /// through at once (LevelDB lets them share `const` read options).
    #[test]
    fn shared_handles_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<cairndb::Db>();
        shareable::<cairndb::Snapshot>();
        shareable::<cairndb::Keyspace>();
    }

    #[test]
    fn errors_carry_leveldb_status_words() {
        let e = cairndb::Error::InvalidArgument("bad".into());
        assert_eq!(status(&e), "Invalid argument: bad");
        assert!(status(&cairndb::Error::Closed).starts_with("IO error: "));
    }
}
