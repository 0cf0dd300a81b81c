//! The C API's iterator against a model: seeded random seeks, steps and
//! direction changes on a `leveldb_iterator_t`, each position compared
//! with a cursor over a `BTreeMap` holding what the iterator's snapshot
//! should see. The database mixes flushed tables, the memtable, deletes,
//! and writes made after the iterator was created (which it must not
//! see). A failure prints its seed.

#![allow(clippy::unwrap_used, reason = "test code")]

use cairndb_c::*;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::ops::Bound;

/// xorshift64*: a small seeded generator, enough for picking operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A key of 0 to 3 bytes from a 4-letter alphabet: many prefixes and
    /// neighbours, the empty key included.
    fn key(&mut self) -> Vec<u8> {
        let len = self.below(4);
        (0..len).map(|_| b'a' + self.below(4) as u8).collect()
    }
}

/// Where the model cursor is: a key of the map, or nowhere.
type Pos = Option<Vec<u8>>;

fn first_from(map: &BTreeMap<Vec<u8>, Vec<u8>>, lo: Bound<&[u8]>) -> Pos {
    map.range::<[u8], _>((lo, Bound::Unbounded))
        .next()
        .map(|(k, _)| k.clone())
}

fn last_before(map: &BTreeMap<Vec<u8>, Vec<u8>>, hi: Bound<&[u8]>) -> Pos {
    map.range::<[u8], _>((Bound::Unbounded, hi))
        .next_back()
        .map(|(k, _)| k.clone())
}

fn put(db: *mut leveldb_t, map: Option<&mut BTreeMap<Vec<u8>, Vec<u8>>>, k: &[u8], v: &[u8]) {
    let mut err = std::ptr::null_mut();
    // SAFETY: a live database and buffers valid for their lengths.
    unsafe {
        leveldb_put(
            db,
            std::ptr::null(),
            k.as_ptr().cast(),
            k.len(),
            v.as_ptr().cast(),
            v.len(),
            &mut err,
        )
    };
    assert!(err.is_null());
    if let Some(map) = map {
        map.insert(k.to_vec(), v.to_vec());
    }
}

fn delete(db: *mut leveldb_t, map: Option<&mut BTreeMap<Vec<u8>, Vec<u8>>>, k: &[u8]) {
    let mut err = std::ptr::null_mut();
    // SAFETY: a live database and a key valid for its length.
    unsafe { leveldb_delete(db, std::ptr::null(), k.as_ptr().cast(), k.len(), &mut err) };
    assert!(err.is_null());
    if let Some(map) = map {
        map.remove(k);
    }
}

/// The iterator's entry, or `None` if it is not valid.
fn at(it: *mut leveldb_iterator_t) -> Option<(Vec<u8>, Vec<u8>)> {
    // SAFETY: a live iterator; the key and value are copied before it
    // moves.
    unsafe {
        if leveldb_iter_valid(it) == 0 {
            return None;
        }
        let (mut klen, mut vlen) = (0, 0);
        let k = leveldb_iter_key(it, &mut klen);
        let v = leveldb_iter_value(it, &mut vlen);
        Some((
            std::slice::from_raw_parts(k.cast::<u8>(), klen).to_vec(),
            std::slice::from_raw_parts(v.cast::<u8>(), vlen).to_vec(),
        ))
    }
}

fn run(seed: u64, dir: &std::path::Path) {
    let mut rng = Rng(seed | 1);
    let name = CString::new(dir.to_str().unwrap()).unwrap();
    let mut err = std::ptr::null_mut();
    // SAFETY: handles are used while alive and destroyed once.
    let (opts, db) = unsafe {
        let opts = leveldb_options_create();
        leveldb_options_set_create_if_missing(opts, 1);
        let db = leveldb_open(opts, name.as_ptr(), &mut err);
        (opts, db)
    };
    assert!(err.is_null() && !db.is_null());
    let mut map = BTreeMap::new();
    for round in 0..3 {
        for _ in 0..40 {
            let k = rng.key();
            if rng.below(4) == 0 {
                delete(db, Some(&mut map), &k);
            } else {
                put(
                    db,
                    Some(&mut map),
                    &k,
                    format!("v{round}-{}", rng.below(100)).as_bytes(),
                );
            }
        }
        if round < 2 {
            // SAFETY: a live database.
            unsafe { cairndb_flush(db, &mut err) };
            assert!(err.is_null());
        }
    }
    // SAFETY: a live database.
    let it = unsafe { leveldb_create_iterator(db, std::ptr::null()) };
    // Writes after the iterator's creation: not seen by it.
    for _ in 0..20 {
        let k = rng.key();
        if rng.below(2) == 0 {
            delete(db, None, &k);
        } else {
            put(db, None, &k, b"later");
        }
    }
    let mut pos: Pos = None;
    let mut trace = Vec::new();
    for step in 0..400 {
        let op = rng.below(10);
        // SAFETY: a live iterator, and a key valid for its length.
        unsafe {
            match op {
                0 => {
                    leveldb_iter_seek_to_first(it);
                    pos = first_from(&map, Bound::Unbounded);
                    trace.push("first".to_owned());
                }
                1 => {
                    leveldb_iter_seek_to_last(it);
                    pos = last_before(&map, Bound::Unbounded);
                    trace.push("last".to_owned());
                }
                2 | 3 => {
                    let k = rng.key();
                    leveldb_iter_seek(it, k.as_ptr().cast(), k.len());
                    pos = first_from(&map, Bound::Included(&k));
                    trace.push(format!("seek {:?}", String::from_utf8_lossy(&k)));
                }
                4..=6 => {
                    if let Some(p) = &pos {
                        leveldb_iter_next(it);
                        pos = first_from(&map, Bound::Excluded(p));
                        trace.push("next".to_owned());
                    }
                }
                _ => {
                    if let Some(p) = &pos {
                        leveldb_iter_prev(it);
                        pos = last_before(&map, Bound::Excluded(p));
                        trace.push("prev".to_owned());
                    }
                }
            }
        }
        let want = pos.as_ref().map(|k| (k.clone(), map[k].clone()));
        assert_eq!(
            at(it),
            want,
            "seed {seed}, step {step}, after {:?}",
            &trace[trace.len().saturating_sub(6)..]
        );
    }
    // SAFETY: a live iterator; errptr convention.
    unsafe { leveldb_iter_get_error(it, &mut err) };
    assert!(err.is_null());
    // SAFETY: each handle destroyed once, the iterator before the database.
    unsafe {
        leveldb_iter_destroy(it);
        leveldb_close(db);
        leveldb_options_destroy(opts);
    }
}

#[test]
fn iterator_follows_the_model() {
    let seeds: Vec<u64> = match std::env::var("CURSOR_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (1..=12).collect(),
    };
    for seed in seeds {
        let dir = tempfile::tempdir().unwrap();
        run(seed, dir.path());
    }
}
