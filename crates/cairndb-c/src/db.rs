//! The database handle: open and close, reads and writes, snapshots,
//! properties, approximate sizes, compaction, destroy and repair.

use crate::options::{free_box, write_options};
use crate::{
    bytes, c_str, call, leveldb_options_t, leveldb_readoptions_t, leveldb_writebatch_t,
    leveldb_writeoptions_t, malloc_string, quiet, status,
};
use cairndb::Db;
use libc::{c_char, c_int, size_t};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// `leveldb_t`: an open database.
pub struct leveldb_t {
    pub(crate) db: Db,
}

/// `leveldb_snapshot_t`: a consistent view, shared with the read options
/// and iterators made from it (see `leveldb_readoptions_t`).
pub struct leveldb_snapshot_t {
    pub(crate) snap: Arc<cairndb::Snapshot>,
}

/// The database `db` points to.
///
/// # Safety
/// `db` is NULL or a live handle from `leveldb_open`.
pub(crate) unsafe fn db_ref<'a>(db: *const leveldb_t) -> Result<&'a Db, String> {
    if db.is_null() {
        return Err("Invalid argument: NULL database handle".into());
    }
    // SAFETY: the caller's contract: a live handle, which `Db` lets any
    // number of threads share.
    Ok(unsafe { &(*db).db })
}

/// The path named by the C string `name`.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn path<'a>(name: *const c_char) -> Result<&'a Path, String> {
    // SAFETY: the caller's contract.
    match unsafe { c_str(name) } {
        Some(n) if !n.is_empty() => Ok(Path::new(OsStr::from_bytes(n))),
        _ => Err("Invalid argument: no database name given".into()),
    }
}

/// The snapshot read options `o` name, if any.
///
/// # Safety
/// `o` is NULL or a live read options handle.
pub(crate) unsafe fn read_snapshot(
    o: *const leveldb_readoptions_t,
) -> Option<Arc<cairndb::Snapshot>> {
    if o.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: a live handle.
    unsafe { (*o).snapshot.clone() }
}

/// Opens (or creates, with `create_if_missing`) the database in the
/// directory `name`. NULL and `*errptr` set on failure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_open(
    options: *const leveldb_options_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) -> *mut leveldb_t {
    call(errptr, std::ptr::null_mut(), || {
        if options.is_null() {
            return Err("Invalid argument: NULL options".into());
        }
        // SAFETY: `options` is a live handle, and its comparator (if set)
        // is alive while leveldb_open runs (C API contract).
        let opts = unsafe { (*options).to_cairndb() }?;
        // SAFETY: `name` is a NUL-terminated string (C API contract).
        let dir = unsafe { path(name) }?;
        let db = Db::open(dir, opts).map_err(|e| status(&e))?;
        Ok(Box::into_raw(Box::new(leveldb_t { db })))
    })
}

/// Closes the database (syncing its journal, stopping its threads) and
/// frees the handle. Iterators and snapshots should be released first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_close(db: *mut leveldb_t) {
    if db.is_null() {
        return;
    }
    // SAFETY: made by leveldb_open, closed once (C API contract).
    let db = unsafe { Box::from_raw(db) };
    // LevelDB's close reports nothing; an error here (a failed final
    // sync) leaves what the next open recovers.
    quiet((), || drop(db.db.close()));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_put(
    db: *mut leveldb_t,
    options: *const leveldb_writeoptions_t,
    key: *const c_char,
    keylen: size_t,
    val: *const c_char,
    vallen: size_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: live handles and readable (pointer, length) pairs (C API
        // contract).
        let (db, opts, key, val) = unsafe {
            (
                db_ref(db)?,
                write_options(options),
                bytes(key, keylen),
                bytes(val, vallen),
            )
        };
        db.put_opt(key, val, &opts).map_err(|e| status(&e))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_delete(
    db: *mut leveldb_t,
    options: *const leveldb_writeoptions_t,
    key: *const c_char,
    keylen: size_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: live handles and a readable (pointer, length) pair (C
        // API contract).
        let (db, opts, key) = unsafe { (db_ref(db)?, write_options(options), bytes(key, keylen)) };
        db.delete_opt(key, &opts).map_err(|e| status(&e))
    })
}

/// Applies the batch atomically; the batch is left as it was.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_write(
    db: *mut leveldb_t,
    options: *const leveldb_writeoptions_t,
    batch: *mut leveldb_writebatch_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        if batch.is_null() {
            return Err("Invalid argument: NULL write batch".into());
        }
        // SAFETY: live handles (C API contract); the batch is only read.
        let (db, opts, batch) = unsafe { (db_ref(db)?, write_options(options), &*batch) };
        let b = batch.to_cairndb().map_err(|e| status(&e))?;
        db.write(b, &opts).map_err(|e| status(&e))
    })
}

/// Writes `value` (or NULL if `None`) as a `malloc`ed buffer and its
/// length to `vallen`.
///
/// # Safety
/// `vallen` is NULL or writable.
pub(crate) unsafe fn hand_out(
    value: Option<Vec<u8>>,
    vallen: *mut size_t,
) -> Result<*mut c_char, String> {
    let (p, n) = match value {
        None => (std::ptr::null_mut(), 0),
        Some(v) => {
            let n = v.len();
            let p = crate::vec_for_c(v);
            if p.is_null() {
                return Err("IO error: out of memory for the value".into());
            }
            (p, n)
        }
    };
    if !vallen.is_null() {
        // SAFETY: the caller's contract: `vallen` is writable.
        unsafe { *vallen = n };
    }
    Ok(p)
}

/// The value of `key`: a `malloc`ed buffer of `*vallen` bytes, or NULL
/// (with `*vallen` 0) if the key is absent or on error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_get(
    db: *mut leveldb_t,
    options: *const leveldb_readoptions_t,
    key: *const c_char,
    keylen: size_t,
    vallen: *mut size_t,
    errptr: *mut *mut c_char,
) -> *mut c_char {
    if !vallen.is_null() {
        // SAFETY: `vallen` is writable (C API contract).
        unsafe { *vallen = 0 };
    }
    call(errptr, std::ptr::null_mut(), || {
        // SAFETY: live handles and a readable (pointer, length) pair (C
        // API contract).
        let (db, snap, key) = unsafe { (db_ref(db)?, read_snapshot(options), bytes(key, keylen)) };
        let value = match snap {
            Some(s) => s.get(key),
            None => db.get(key),
        }
        .map_err(|e| status(&e))?;
        // SAFETY: `vallen` is writable (C API contract).
        unsafe { hand_out(value, vallen) }
    })
}

/// A snapshot of the database as of now; release it with
/// `leveldb_release_snapshot`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_create_snapshot(db: *mut leveldb_t) -> *const leveldb_snapshot_t {
    quiet(std::ptr::null(), || {
        // SAFETY: `db` is a live handle (C API contract).
        let Ok(db) = (unsafe { db_ref(db) }) else {
            return std::ptr::null();
        };
        Box::into_raw(Box::new(leveldb_snapshot_t {
            snap: Arc::new(db.snapshot()),
        }))
        .cast_const()
    })
}

/// Frees the snapshot handle. Iterators and read options still holding
/// it keep its view until they are destroyed or given another.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_release_snapshot(
    _db: *mut leveldb_t,
    snapshot: *const leveldb_snapshot_t,
) {
    // SAFETY: made by leveldb_create_snapshot, released once (C API
    // contract).
    unsafe { free_box(snapshot.cast_mut()) }
}

/// The value of a property as a `malloc`ed string, or NULL for an
/// unknown name. Known: `leveldb.stats`, `leveldb.num-files-at-level<N>`,
/// `leveldb.sstables`, `leveldb.approximate-memory-usage`, and
/// `cairndb.stats` (every counter of `cairndb::Stats`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_property_value(
    db: *mut leveldb_t,
    propname: *const c_char,
) -> *mut c_char {
    quiet(std::ptr::null_mut(), || {
        // SAFETY: a live handle and a NUL-terminated name (C API contract).
        let (Ok(db), Some(name)) = (unsafe { db_ref(db) }, unsafe { c_str(propname) }) else {
            return std::ptr::null_mut();
        };
        match property(db, name) {
            Some(text) => malloc_string(&text),
            None => std::ptr::null_mut(),
        }
    })
}

fn property(db: &Db, name: &[u8]) -> Option<String> {
    use std::fmt::Write;
    let name = std::str::from_utf8(name).ok()?;
    if let Some(level) = name.strip_prefix("leveldb.num-files-at-level") {
        let level: usize = level.parse().ok()?;
        let stats = db.stats();
        return Some(stats.tables_per_level.get(level)?.to_string());
    }
    let stats = db.stats();
    let mut out = String::new();
    match name {
        "leveldb.stats" => {
            // LevelDB's layout, with the columns CairnDB counts.
            out.push_str("                               Compactions\n");
            out.push_str("Level  Files Size(MB)\n");
            out.push_str("--------------------\n");
            for (level, (files, bytes)) in stats
                .tables_per_level
                .iter()
                .zip(&stats.bytes_per_level)
                .enumerate()
            {
                if *files > 0 {
                    let _ = writeln!(
                        out,
                        "{level:>3} {files:>8} {:>8.0}",
                        *bytes as f64 / 1048576.0
                    );
                }
            }
            let _ = writeln!(
                out,
                "memtable bytes: {}, sealed memtables: {}, flushes: {}, compactions: {}, last seqno: {}",
                stats.memtable_bytes,
                stats.sealed_memtables,
                stats.flushes,
                stats.compactions,
                stats.last_seqno
            );
        }
        "leveldb.sstables" => {
            // CairnDB's stats count tables per level; they do not list them.
            for (level, (files, bytes)) in stats
                .tables_per_level
                .iter()
                .zip(&stats.bytes_per_level)
                .enumerate()
            {
                let _ = writeln!(out, "--- level {level} ---");
                let _ = writeln!(out, " {files} tables, {bytes} bytes");
            }
        }
        "leveldb.approximate-memory-usage" => {
            let bytes = stats.memtable_bytes as u64
                + stats.table_memory_bytes as u64
                + stats.block_cache_bytes;
            out = bytes.to_string();
        }
        "cairndb.stats" => out = crate::extras::stats_text(&stats),
        _ => return None,
    }
    Some(out)
}

/// For each range `[start, limit)`, the bytes its keys take in tables
/// (`cairndb::Db::approximate_size`: data still in memtables is not
/// counted, as in LevelDB).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_approximate_sizes(
    db: *mut leveldb_t,
    num_ranges: c_int,
    range_start_key: *const *const c_char,
    range_start_key_len: *const size_t,
    range_limit_key: *const *const c_char,
    range_limit_key_len: *const size_t,
    sizes: *mut u64,
) {
    quiet((), || {
        // SAFETY: `db` is a live handle (C API contract).
        let Ok(db) = (unsafe { db_ref(db) }) else {
            return;
        };
        let n = usize::try_from(num_ranges).unwrap_or(0);
        if n == 0 || sizes.is_null() {
            return;
        }
        for i in 0..n {
            // SAFETY: each of the five arrays holds `num_ranges` elements,
            // and each key pointer with its length is readable (C API
            // contract).
            unsafe {
                let start = bytes(*range_start_key.add(i), *range_start_key_len.add(i));
                let limit = bytes(*range_limit_key.add(i), *range_limit_key_len.add(i));
                *sizes.add(i) = db.approximate_size(start, limit);
            }
        }
    })
}

/// Compacts the whole database (CairnDB compacts all or nothing): every
/// range asked for is compacted, and more. Errors are not reported, as
/// in LevelDB; the engine's stored background error shows in later
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_compact_range(
    db: *mut leveldb_t,
    _start_key: *const c_char,
    _start_key_len: size_t,
    _limit_key: *const c_char,
    _limit_key_len: size_t,
) {
    quiet((), || {
        // SAFETY: `db` is a live handle (C API contract).
        if let Ok(db) = unsafe { db_ref(db) } {
            let _ = db.compact();
        }
    })
}

/// Whether `name` is a file CairnDB makes in a database directory
/// (docs/format.md §Directory; `LOCK` aside, which goes last).
fn is_cairndb_file(name: &str) -> bool {
    let numbered = |suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    name == "CURRENT"
        || name == "STAGE"
        || name.ends_with(".tmp")
        || name
            .strip_prefix("MANIFEST-")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        || [".journal", ".table", ".values", ".stream", ".free"]
            .iter()
            .any(|s| numbered(s))
}

/// Deletes the database in directory `name`: takes its lock (failing if
/// it is open), removes the files CairnDB makes there, then the
/// directory if nothing else is left in it. A missing directory is not
/// an error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_destroy_db(
    _options: *const leveldb_options_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: `name` is a NUL-terminated string (C API contract).
        let dir = unsafe { path(name) }?;
        destroy(dir)
    })
}

fn destroy(dir: &Path) -> Result<(), String> {
    use cairndb::io::{Fs, PosixFs};
    let io = |what: &str, e: std::io::Error| format!("IO error: {what} {}: {e}", dir.display());
    if !dir.is_dir() {
        return Ok(());
    }
    let lock = PosixFs.lock(dir).map_err(|e| io("locking", e))?;
    let entries = std::fs::read_dir(dir).map_err(|e| io("listing", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("listing", e))?;
        let name = entry.file_name();
        if is_cairndb_file(&name.to_string_lossy()) {
            std::fs::remove_file(entry.path()).map_err(|e| io("removing a file of", e))?;
        }
    }
    drop(lock);
    match std::fs::remove_file(dir.join("LOCK")) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing the LOCK of", e)),
    }
    // Left in place if the caller keeps other files there.
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

/// Rebuilds the database in directory `name` whose manifest is lost or
/// damaged from its tables and journals (`Db::repair`, as LevelDB's
/// `RepairDB`): damaged tables are moved into `name/lost/`, journals are
/// replayed as far as they are intact, and a fresh manifest names every
/// table kept. The database must not be open. Sets `*errptr` if the
/// repair itself failed (the directory is missing or locked, a file
/// could not be read or written); what was lost is not an error, as in
/// LevelDB (the report goes nowhere: `cairn repair` prints it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_repair_db(
    options: *const leveldb_options_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        if options.is_null() {
            return Err("Invalid argument: NULL options".into());
        }
        // SAFETY: `options` is a live handle, and its comparator (if set)
        // is alive while leveldb_repair_db runs (C API contract).
        let opts = unsafe { (*options).to_cairndb() }?;
        // SAFETY: `name` is a NUL-terminated string (C API contract).
        let dir = unsafe { path(name) }?;
        Db::repair(dir, &opts).map_err(|e| status(&e))?;
        Ok(())
    })
}
