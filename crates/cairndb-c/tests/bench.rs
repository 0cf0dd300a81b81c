//! The cost of the C API over the Rust one, measured in one run: puts and
//! gets of 100-byte values with 16-byte keys through the exported
//! `leveldb_put` / `leveldb_get` (called from Rust, as C calls them:
//! options handles, errptr, a `malloc`ed copy of each value that is then
//! freed) against `Db::put` / `Db::get`, each on a fresh database. Each
//! side runs five times, interleaved, and its fastest run counts (the
//! machines this runs on are shared). Prints ns/op and the C / Rust
//! ratio. Not a CI test:
//!
//! ```text
//! cargo test -p cairndb-c --release --test bench -- --ignored --nocapture
//! ```

#![allow(clippy::unwrap_used, reason = "test code")]

use cairndb::{Db, Options};
use cairndb_c::*;
use std::ffi::CString;
use std::time::{Duration, Instant};

const OPS: usize = 100_000;
const ROUNDS: usize = 5;
const VALUE: [u8; 100] = [b'v'; 100];

fn key(i: usize) -> [u8; 16] {
    let mut k = [0u8; 16];
    // Spread the keys (a multiplicative hash), as random-order writes.
    let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    k[..8].copy_from_slice(&x.to_be_bytes());
    k[8..].copy_from_slice(&(i as u64).to_be_bytes());
    k
}

/// (put time, get time) through the Rust API.
fn rust_side(dir: &std::path::Path) -> (Duration, Duration) {
    let db = Db::open(dir, Options::default()).unwrap();
    let t = Instant::now();
    for i in 0..OPS {
        db.put(key(i), VALUE).unwrap();
    }
    let put = t.elapsed();
    let t = Instant::now();
    for i in 0..OPS {
        let v = db.get(key(i)).unwrap();
        assert_eq!(v.as_deref().map(<[u8]>::len), Some(100));
    }
    let get = t.elapsed();
    db.close().unwrap();
    (put, get)
}

/// (put time, get time) through the C API.
fn c_side(dir: &std::path::Path) -> (Duration, Duration) {
    let name = CString::new(dir.to_str().unwrap()).unwrap();
    let mut err: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: the calls follow the C API's contract: handles are used
    // while alive and destroyed once, buffers are valid for their
    // lengths, and every malloc'ed result is freed.
    unsafe {
        let opts = leveldb_options_create();
        leveldb_options_set_create_if_missing(opts, 1);
        let db = leveldb_open(opts, name.as_ptr(), &mut err);
        assert!(err.is_null() && !db.is_null());
        let wo = leveldb_writeoptions_create();
        let ro = leveldb_readoptions_create();
        let t = Instant::now();
        for i in 0..OPS {
            let k = key(i);
            leveldb_put(
                db,
                wo,
                k.as_ptr().cast(),
                k.len(),
                VALUE.as_ptr().cast(),
                VALUE.len(),
                &mut err,
            );
            assert!(err.is_null());
        }
        let put = t.elapsed();
        let t = Instant::now();
        for i in 0..OPS {
            let k = key(i);
            let mut len = 0;
            let v = leveldb_get(db, ro, k.as_ptr().cast(), k.len(), &mut len, &mut err);
            assert!(err.is_null() && !v.is_null() && len == 100);
            leveldb_free(v.cast());
        }
        let get = t.elapsed();
        leveldb_readoptions_destroy(ro);
        leveldb_writeoptions_destroy(wo);
        leveldb_close(db);
        leveldb_options_destroy(opts);
        (put, get)
    }
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64 / OPS as f64
}

#[test]
#[ignore = "a measurement; run with --release -- --ignored --nocapture"]
fn c_api_against_rust_api() {
    let mut rust = (Duration::MAX, Duration::MAX);
    let mut c = (Duration::MAX, Duration::MAX);
    for round in 0..ROUNDS {
        let r = rust_side(tempfile::tempdir().unwrap().path());
        let k = c_side(tempfile::tempdir().unwrap().path());
        println!(
            "round {round}: rust put {:.0} get {:.0} ns/op; c put {:.0} get {:.0} ns/op",
            ns(r.0),
            ns(r.1),
            ns(k.0),
            ns(k.1)
        );
        rust = (rust.0.min(r.0), rust.1.min(r.1));
        c = (c.0.min(k.0), c.1.min(k.1));
    }
    println!(
        "{OPS} ops, 16-byte keys, 100-byte values (best of {ROUNDS}): put: C {:.0} ns/op, Rust {:.0} ns/op, C/Rust {:.2}; get: C {:.0} ns/op, Rust {:.0} ns/op, C/Rust {:.2}",
        ns(c.0),
        ns(rust.0),
        ns(c.0) / ns(rust.0),
        ns(c.1),
        ns(rust.1),
        ns(c.1) / ns(rust.1),
    );
}
