//! CairnDB's own C functions (`include/cairndb.h`): transactions,
//! keyspaces, writes with a sync flag, flush, compaction and stats. They
//! follow the LevelDB API's conventions (errptr, `malloc`ed results).

use crate::db::{db_ref, hand_out, read_snapshot};
use crate::options::{free_box, write_options};
use crate::{
    bytes, c_str, call, leveldb_readoptions_t, leveldb_t, leveldb_writebatch_t,
    leveldb_writeoptions_t, malloc_string, quiet, status,
};
use cairndb::{Keyspace, Transaction, WriteOptions};
use libc::{c_char, c_int, c_uchar, size_t};

/// `cairndb_txn_commit` succeeded.
pub const CAIRNDB_OK: c_int = 0;
/// `cairndb_txn_commit` lost to a concurrent commit; nothing was written.
pub const CAIRNDB_CONFLICT: c_int = 1;
/// `cairndb_txn_commit` failed otherwise (see `*errptr`).
pub const CAIRNDB_ERROR: c_int = 2;

/// `cairndb_txn_t`: an optimistic transaction. One thread at a time.
pub struct cairndb_txn_t {
    txn: Transaction,
}

/// `cairndb_keyspace_t`: a handle to a named keyspace.
pub struct cairndb_keyspace_t {
    ks: Keyspace,
}

/// The transaction `t` points to.
///
/// # Safety
/// `t` is NULL or a live transaction used by no other thread.
unsafe fn txn<'a>(t: *mut cairndb_txn_t) -> Result<&'a mut Transaction, String> {
    if t.is_null() {
        return Err("Invalid argument: NULL transaction".into());
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { &mut (*t).txn })
}

/// The keyspace `k` points to.
///
/// # Safety
/// `k` is NULL or a live keyspace handle.
unsafe fn keyspace<'a>(k: *const cairndb_keyspace_t) -> Result<&'a Keyspace, String> {
    if k.is_null() {
        return Err("Invalid argument: NULL keyspace".into());
    }
    // SAFETY: the caller's contract; `Keyspace` is `Sync`.
    Ok(unsafe { &(*k).ks })
}

fn sync_options(sync: c_uchar) -> WriteOptions {
    WriteOptions { sync: sync != 0 }
}

/// Begins a transaction reading the database as of now plus its own
/// writes; `serializable` also checks what it read at commit.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_txn_begin(
    db: *mut leveldb_t,
    serializable: c_uchar,
) -> *mut cairndb_txn_t {
    quiet(std::ptr::null_mut(), || {
        // SAFETY: `db` is a live handle (header contract).
        let Ok(db) = (unsafe { db_ref(db) }) else {
            return std::ptr::null_mut();
        };
        let txn = if serializable != 0 {
            db.begin_serializable()
        } else {
            db.begin()
        };
        Box::into_raw(Box::new(cairndb_txn_t { txn }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_txn_get(
    t: *mut cairndb_txn_t,
    key: *const c_char,
    keylen: size_t,
    vallen: *mut size_t,
    errptr: *mut *mut c_char,
) -> *mut c_char {
    if !vallen.is_null() {
        // SAFETY: `vallen` is writable (header contract).
        unsafe { *vallen = 0 };
    }
    call(errptr, std::ptr::null_mut(), || {
        // SAFETY: a live transaction and a readable key (header contract).
        let (t, key) = unsafe { (txn(t)?, bytes(key, keylen)) };
        let value = t.get(key).map_err(|e| status(&e))?;
        // SAFETY: `vallen` is writable (header contract).
        unsafe { hand_out(value, vallen) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_txn_put(
    t: *mut cairndb_txn_t,
    key: *const c_char,
    keylen: size_t,
    val: *const c_char,
    vallen: size_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: a live transaction and readable buffers (header contract).
        let (t, key, val) = unsafe { (txn(t)?, bytes(key, keylen), bytes(val, vallen)) };
        t.put(key, val).map_err(|e| status(&e))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_txn_delete(
    t: *mut cairndb_txn_t,
    key: *const c_char,
    keylen: size_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: a live transaction and a readable key (header contract).
        let (t, key) = unsafe { (txn(t)?, bytes(key, keylen)) };
        t.delete(key).map_err(|e| status(&e))
    })
}

/// Commits and frees the transaction: `CAIRNDB_OK`, `CAIRNDB_CONFLICT`
/// (nothing written; run it again) or `CAIRNDB_ERROR`; `*errptr` is set
/// unless `CAIRNDB_OK`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_txn_commit(
    t: *mut cairndb_txn_t,
    options: *const leveldb_writeoptions_t,
    errptr: *mut *mut c_char,
) -> c_int {
    if t.is_null() {
        return call(errptr, CAIRNDB_ERROR, || {
            Err("Invalid argument: NULL transaction".into())
        });
    }
    // SAFETY: made by cairndb_txn_begin and ended once (header contract);
    // `options` is NULL or live.
    let (t, opts) = unsafe { (Box::from_raw(t), write_options(options)) };
    let mut code = CAIRNDB_ERROR;
    call(errptr, (), || match t.txn.commit_opt(&opts) {
        Ok(_) => {
            code = CAIRNDB_OK;
            Ok(())
        }
        Err(e) => {
            if e.is_conflict() {
                code = CAIRNDB_CONFLICT;
            }
            Err(status(&e))
        }
    });
    code
}

/// Drops the transaction's writes and frees it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_txn_rollback(t: *mut cairndb_txn_t) {
    if t.is_null() {
        return;
    }
    // SAFETY: made by cairndb_txn_begin and ended once (header contract).
    let t = unsafe { Box::from_raw(t) };
    quiet((), || t.txn.rollback());
}

/// The keyspace `name`, created if missing. NULL and `*errptr` set on
/// failure.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_open(
    db: *mut leveldb_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) -> *mut cairndb_keyspace_t {
    call(errptr, std::ptr::null_mut(), || {
        // SAFETY: a live handle and a NUL-terminated name (header contract).
        let (db, name) = unsafe { (db_ref(db)?, c_str(name)) };
        let name = name.ok_or("Invalid argument: NULL keyspace name")?;
        let name = std::str::from_utf8(name)
            .map_err(|_| "Invalid argument: a keyspace name must be UTF-8".to_owned())?;
        let ks = db.keyspace(name).map_err(|e| status(&e))?;
        Ok(Box::into_raw(Box::new(cairndb_keyspace_t { ks })))
    })
}

/// Frees the handle (the keyspace and its data stay).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_close(k: *mut cairndb_keyspace_t) {
    // SAFETY: made by cairndb_keyspace_open, closed once.
    unsafe { free_box(k) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_put(
    k: *mut cairndb_keyspace_t,
    options: *const leveldb_writeoptions_t,
    key: *const c_char,
    keylen: size_t,
    val: *const c_char,
    vallen: size_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: live handles and readable buffers (header contract).
        let (k, opts, key, val) = unsafe {
            (
                keyspace(k)?,
                write_options(options),
                bytes(key, keylen),
                bytes(val, vallen),
            )
        };
        k.put_opt(key, val, &opts).map_err(|e| status(&e))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_get(
    k: *mut cairndb_keyspace_t,
    options: *const leveldb_readoptions_t,
    key: *const c_char,
    keylen: size_t,
    vallen: *mut size_t,
    errptr: *mut *mut c_char,
) -> *mut c_char {
    if !vallen.is_null() {
        // SAFETY: `vallen` is writable (header contract).
        unsafe { *vallen = 0 };
    }
    call(errptr, std::ptr::null_mut(), || {
        // SAFETY: live handles and a readable key (header contract).
        let (k, snap, key) = unsafe { (keyspace(k)?, read_snapshot(options), bytes(key, keylen)) };
        let value = match snap {
            Some(s) => s.get_in(k, key),
            None => k.get(key),
        }
        .map_err(|e| status(&e))?;
        // SAFETY: `vallen` is writable (header contract).
        unsafe { hand_out(value, vallen) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_delete(
    k: *mut cairndb_keyspace_t,
    options: *const leveldb_writeoptions_t,
    key: *const c_char,
    keylen: size_t,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: live handles and a readable key (header contract).
        let (k, opts, key) = unsafe { (keyspace(k)?, write_options(options), bytes(key, keylen)) };
        k.delete_opt(key, &opts).map_err(|e| status(&e))
    })
}

/// A cursor over keyspace `ks` of `db` (the database it was opened
/// from), as of the read options' snapshot or now: a
/// `leveldb_iterator_t`, used and destroyed with the `leveldb_iter_*`
/// functions. NULL on a NULL handle. A keyspace dropped, or of another
/// database, shows as an error of the first seek
/// (`leveldb_iter_get_error`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_create_iterator(
    db: *mut leveldb_t,
    ks: *const cairndb_keyspace_t,
    options: *const leveldb_readoptions_t,
) -> *mut crate::leveldb_iterator_t {
    // SAFETY: `ks` is NULL or a live keyspace handle (header contract).
    let Ok(ks) = (unsafe { keyspace(ks) }) else {
        return std::ptr::null_mut();
    };
    let ks = quiet(None, || Some(ks.clone()));
    if ks.is_none() {
        return std::ptr::null_mut();
    }
    // SAFETY: `db` and `options` are NULL or live handles (header
    // contract).
    unsafe { crate::iter::create(db, ks, options) }
}

/// Drops the keyspace `name` and its data; 1 if it existed, 0 if not or
/// on error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_keyspace_drop(
    db: *mut leveldb_t,
    name: *const c_char,
    errptr: *mut *mut c_char,
) -> c_uchar {
    call(errptr, 0, || {
        // SAFETY: a live handle and a NUL-terminated name (header contract).
        let (db, name) = unsafe { (db_ref(db)?, c_str(name)) };
        let name = name.ok_or("Invalid argument: NULL keyspace name")?;
        let name = std::str::from_utf8(name)
            .map_err(|_| "Invalid argument: a keyspace name must be UTF-8".to_owned())?;
        db.drop_keyspace(name)
            .map(c_uchar::from)
            .map_err(|e| status(&e))
    })
}

/// `leveldb_put` with the sync flag as an argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_put(
    db: *mut leveldb_t,
    key: *const c_char,
    keylen: size_t,
    val: *const c_char,
    vallen: size_t,
    sync: c_uchar,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: a live handle and readable buffers (header contract).
        let (db, key, val) = unsafe { (db_ref(db)?, bytes(key, keylen), bytes(val, vallen)) };
        db.put_opt(key, val, &sync_options(sync))
            .map_err(|e| status(&e))
    })
}

/// `leveldb_delete` with the sync flag as an argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_delete(
    db: *mut leveldb_t,
    key: *const c_char,
    keylen: size_t,
    sync: c_uchar,
    errptr: *mut *mut c_char,
) {
    call(errptr, (), || {
        // SAFETY: a live handle and a readable key (header contract).
        let (db, key) = unsafe { (db_ref(db)?, bytes(key, keylen)) };
        db.delete_opt(key, &sync_options(sync))
            .map_err(|e| status(&e))
    })
}

/// `leveldb_write` with the sync flag as an argument.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_write(
    db: *mut leveldb_t,
    batch: *mut leveldb_writebatch_t,
    sync: c_uchar,
    errptr: *mut *mut c_char,
) {
    let opts = crate::leveldb_writeoptions_t { sync: sync != 0 };
    // SAFETY: the caller's handles, passed on under the same contract.
    unsafe { crate::leveldb_write(db, &opts, batch, errptr) }
}

/// Writes the memtable to a table and waits for it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_flush(db: *mut leveldb_t, errptr: *mut *mut c_char) {
    call(errptr, (), || {
        // SAFETY: a live handle (header contract).
        unsafe { db_ref(db) }?.flush().map_err(|e| status(&e))
    })
}

/// Compacts the whole database and waits, reporting errors (unlike
/// `leveldb_compact_range`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_compact(db: *mut leveldb_t, errptr: *mut *mut c_char) {
    call(errptr, (), || {
        // SAFETY: a live handle (header contract).
        unsafe { db_ref(db) }?.compact().map_err(|e| status(&e))
    })
}

/// Every counter of `cairndb::Stats`, one `name: value` per line, as a
/// `malloc`ed string (NULL on a NULL handle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cairndb_stats(db: *mut leveldb_t) -> *mut c_char {
    quiet(std::ptr::null_mut(), || {
        // SAFETY: a live handle (header contract).
        match unsafe { db_ref(db) } {
            Ok(db) => malloc_string(&stats_text(&db.stats())),
            Err(_) => std::ptr::null_mut(),
        }
    })
}

/// `stats` as text: one `name: value` line per field (lists on one line).
pub(crate) fn stats_text(stats: &cairndb::Stats) -> String {
    let pretty = format!("{stats:#?}");
    let mut lines: Vec<String> = Vec::new();
    for line in pretty.lines() {
        let depth = line.len() - line.trim_start().len();
        let text = line.trim();
        if depth == 4 {
            lines.push(text.trim_end_matches(',').to_owned());
        } else if depth > 4
            && let Some(last) = lines.last_mut()
        {
            last.push_str(text);
            if text.ends_with(',') {
                last.push(' ');
            }
        }
    }
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.replace(", ]", "]").replace(", }", " }"));
        out.push('\n');
    }
    out
}
