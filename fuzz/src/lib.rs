//! Shared by every fuzz target: an allocator that turns one oversized
//! allocation into a crash libFuzzer records.
//!
//! The targets build without a sanitizer (stable Rust has none), so
//! libFuzzer's `-malloc_limit_mb` has no hook to catch a single huge
//! allocation, and `-rss_limit_mb` misses a huge zeroed buffer that is
//! never touched. A decoder that sizes a buffer from untrusted bytes
//! without checking it against the input is exactly that bug, so every
//! allocation above [`ALLOC_MAX`] aborts the process with a message;
//! libFuzzer saves the input as a crash.
//!
//! A target links this by naming the crate (`use cairndb_fuzz as _;`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

/// Largest single allocation a fuzz input may cause. Inputs are at most
/// tens of KiB and the fuzzed databases use small options, so anything
/// near this is a size taken from the input without a bound.
pub const ALLOC_MAX: usize = 256 << 20;

/// [`System`], with the size check.
pub struct CappedAlloc;

fn check(size: usize) {
    if size > ALLOC_MAX {
        // No formatting machinery: it could allocate. Stderr is unbuffered.
        let mut digits = [0u8; 20];
        let mut n = size;
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let mut err = std::io::stderr();
        let _ = err.write_all(b"cairndb-fuzz: allocation of ");
        let _ = err.write_all(&digits[at..]);
        let _ = err.write_all(b" bytes exceeds ALLOC_MAX\n");
        std::process::abort();
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, after a check that only reads `size`; `System` upholds the
// `GlobalAlloc` contract.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;
