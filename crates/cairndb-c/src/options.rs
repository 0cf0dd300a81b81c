//! Options, read and write options, comparators, filter policies, caches
//! and environments.
//!
//! How LevelDB's options map onto CairnDB (`cairndb::Options`):
//!
//! | LevelDB option           | CairnDB                                           |
//! |--------------------------|---------------------------------------------------|
//! | create_if_missing        | `create_if_missing` (default false, as LevelDB)   |
//! | error_if_exists          | `error_if_exists`                                 |
//! | comparator               | bytewise orderings: probed at open, others refused |
//! | filter_policy            | CairnDB builds its own filters; a Bloom policy of 16 or more bits per key gets 16-bit fingerprints (`filter_bits`), any other policy the default 8 |
//! | write_buffer_size        | `memtable_bytes` (at least 64 KiB)                |
//! | max_open_files           | `open_tables_max` (at least 1)                    |
//! | cache (LRU capacity)     | `block_cache_bytes`                               |
//! | block_size               | `block_bytes` (clamped to 64 B ..= 64 MiB)        |
//! | block_restart_interval   | `block_restart_interval` (clamped to 1..=64)      |
//! | max_file_size            | `table_bytes`                                     |
//! | compression              | 0: none; 1 (snappy): LZ4; others refused at open  |
//! | paranoid_checks, env, info_log | ignored (CairnDB always checks checksums) |
//!
//! Unset options keep CairnDB's defaults, except `create_if_missing`.
//! Read options: `verify_checksums` and `fill_cache` are ignored (CairnDB
//! always verifies, and caches what it reads); `snapshot` is honoured.

use crate::{c_str, quiet};
use cairndb::{Compression, Options};
use libc::{c_char, c_int, c_uchar, c_void, size_t};
use std::sync::Arc;

/// The name of LevelDB's bytewise comparator: the one ordering CairnDB
/// has.
pub const BYTEWISE_COMPARATOR: &[u8] = b"leveldb.BytewiseComparator";

/// `leveldb_options_t`: the options `leveldb_open` reads.
pub struct leveldb_options_t {
    create_if_missing: bool,
    error_if_exists: bool,
    /// Borrowed: the caller keeps it alive until `leveldb_open` returns.
    comparator: *const leveldb_comparator_t,
    write_buffer_size: Option<usize>,
    max_open_files: Option<usize>,
    cache_bytes: Option<usize>,
    block_size: Option<usize>,
    block_restart_interval: Option<usize>,
    max_file_size: Option<u64>,
    compression: Option<c_int>,
    /// Bits per key of the Bloom filter policy set, if one is.
    bloom_bits: Option<c_int>,
}

pub const LEVELDB_NO_COMPRESSION: c_int = 0;
pub const LEVELDB_SNAPPY_COMPRESSION: c_int = 1;

impl leveldb_options_t {
    /// The CairnDB options these ask for, or a LevelDB-style message
    /// saying why they cannot be had.
    ///
    /// # Safety
    /// The comparator set, if any, is still alive.
    pub(crate) unsafe fn to_cairndb(&self) -> Result<Options, String> {
        // LevelDB records the comparator's name and refuses an open under
        // another; CairnDB does the same (`Options::comparator_name`),
        // LevelDB's bytewise name standing for no comparator.
        let mut comparator_name = BYTEWISE_COMPARATOR.to_vec();
        if !self.comparator.is_null() {
            // SAFETY: the caller's contract: the comparator set on these
            // options is alive.
            let cmp = unsafe { &*self.comparator };
            let name = cmp.name();
            if name != BYTEWISE_COMPARATOR
                && let Some((a, b, got)) = cmp.differs_from_bytewise()
            {
                return Err(format!(
                    "Invalid argument: comparator {:?} is not supported: it orders {:?} and {:?} as {got}, where bytewise order gives {}; CairnDB orders keys bytewise only (use no comparator, or one that compares like memcmp with the shorter key first)",
                    String::from_utf8_lossy(&name),
                    String::from_utf8_lossy(a),
                    String::from_utf8_lossy(b),
                    a.cmp(b) as i8,
                ));
            }
            comparator_name = name;
        }
        let comparator_name = String::from_utf8(comparator_name)
            .ok()
            .filter(|n| (1..=255).contains(&n.len()))
            .ok_or("Invalid argument: a comparator's name must be 1 to 255 bytes of UTF-8")?;
        let mut o = Options {
            create_if_missing: self.create_if_missing,
            error_if_exists: self.error_if_exists,
            comparator_name: Some(comparator_name),
            ..Options::default()
        };
        if let Some(n) = self.write_buffer_size {
            o.memtable_bytes = n.max(64 << 10);
        }
        if let Some(n) = self.max_open_files {
            o.open_tables_max = n.max(1);
        }
        if let Some(n) = self.cache_bytes {
            o.block_cache_bytes = n;
        }
        if let Some(n) = self.block_size {
            o.block_bytes = n.clamp(64, 64 << 20);
        }
        if let Some(n) = self.block_restart_interval {
            o.block_restart_interval = n.clamp(1, 64);
        }
        if let Some(n) = self.max_file_size {
            o.table_bytes = n.max(1);
        }
        // LevelDB's Bloom filter at 10 bits per key gives about 1 % false
        // positives, CairnDB's 8-bit fingerprints 0.4 %; from 16 bits per
        // key (about 0.05 %) the 16-bit ones (0.0015 %) are the match.
        if self.bloom_bits.is_some_and(|b| b >= 16) {
            o.filter_bits = 16;
        }
        match self.compression {
            None => {}
            Some(LEVELDB_NO_COMPRESSION) => o.compression = Compression::None,
            Some(LEVELDB_SNAPPY_COMPRESSION) => o.compression = Compression::Lz4,
            Some(other) => {
                return Err(format!(
                    "Invalid argument: compression {other} is not supported (0: none, 1: snappy, which CairnDB serves with LZ4)"
                ));
            }
        }
        Ok(o)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_options_create() -> *mut leveldb_options_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_options_t {
            create_if_missing: false,
            error_if_exists: false,
            comparator: std::ptr::null(),
            write_buffer_size: None,
            max_open_files: None,
            cache_bytes: None,
            block_size: None,
            block_restart_interval: None,
            max_file_size: None,
            compression: None,
            bloom_bits: None,
        }))
    })
}

/// Runs `f` on the struct `p` points to, unless `p` is NULL.
///
/// # Safety
/// `p` is NULL or a live handle of its type, used by no other thread.
unsafe fn with<T>(p: *mut T, f: impl FnOnce(&mut T)) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's contract: a live handle this thread may change.
    let r = unsafe { &mut *p };
    quiet((), || f(r));
}

/// Frees the box behind `p`, unless `p` is NULL.
///
/// # Safety
/// `p` is NULL or came from `Box::into_raw` of this crate and is not
/// used again.
pub(crate) unsafe fn free_box<T>(p: *mut T) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's contract: `p` is an unfreed `Box::into_raw`.
    let b = unsafe { Box::from_raw(p) };
    quiet((), || drop(b));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_destroy(o: *mut leveldb_options_t) {
    // SAFETY: `o` was made by leveldb_options_create and is destroyed once.
    unsafe { free_box(o) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_comparator(
    o: *mut leveldb_options_t,
    cmp: *mut leveldb_comparator_t,
) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.comparator = cmp) }
}

/// CairnDB builds its own filter per table (`Options::filter`, on by
/// default) and never calls the policy; a Bloom policy's bits per key
/// choose the size of its fingerprints (`Options::filter_bits`: 16 from
/// 16 bits per key). The policy is not kept: it may be destroyed at once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_filter_policy(
    o: *mut leveldb_options_t,
    policy: *mut leveldb_filterpolicy_t,
) {
    // SAFETY: `policy` is NULL or a live policy handle (C API contract).
    let bloom_bits = unsafe { policy.as_ref() }.and_then(|p| p.bloom_bits);
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.bloom_bits = bloom_bits) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_create_if_missing(
    o: *mut leveldb_options_t,
    v: c_uchar,
) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.create_if_missing = v != 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_error_if_exists(
    o: *mut leveldb_options_t,
    v: c_uchar,
) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.error_if_exists = v != 0) }
}

/// Ignored: CairnDB always verifies checksums and refuses damaged data.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_paranoid_checks(
    _o: *mut leveldb_options_t,
    _v: c_uchar,
) {
}

/// Ignored: CairnDB uses its POSIX file system.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_env(
    _o: *mut leveldb_options_t,
    _env: *mut leveldb_env_t,
) {
}

/// Ignored: CairnDB keeps no info log.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_info_log(
    _o: *mut leveldb_options_t,
    _log: *mut leveldb_logger_t,
) {
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_write_buffer_size(
    o: *mut leveldb_options_t,
    n: size_t,
) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.write_buffer_size = Some(n)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_max_open_files(o: *mut leveldb_options_t, n: c_int) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe {
        with(o, |o| {
            o.max_open_files = Some(usize::try_from(n).unwrap_or(1))
        })
    }
}

/// The cache's capacity becomes CairnDB's block cache size; the cache
/// object itself is not used and may be destroyed at any time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_cache(
    o: *mut leveldb_options_t,
    c: *mut leveldb_cache_t,
) {
    if c.is_null() {
        return;
    }
    // SAFETY: `c` is a live cache handle (C API contract).
    let bytes = unsafe { (*c).capacity };
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.cache_bytes = Some(bytes)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_block_size(o: *mut leveldb_options_t, n: size_t) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.block_size = Some(n)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_block_restart_interval(
    o: *mut leveldb_options_t,
    n: c_int,
) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe {
        with(o, |o| {
            o.block_restart_interval = Some(usize::try_from(n).unwrap_or(1))
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_max_file_size(o: *mut leveldb_options_t, n: size_t) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.max_file_size = Some(n as u64)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_options_set_compression(o: *mut leveldb_options_t, c: c_int) {
    // SAFETY: `o` is a live options handle (C API contract).
    unsafe { with(o, |o| o.compression = Some(c)) }
}

/// `leveldb_comparator_t`: a caller's comparator. It is called only at
/// `leveldb_open`: its name, and, unless that is LevelDB's bytewise
/// comparator's, its compare function on the probe keys of
/// `cairndb::misorders` (`leveldb_options_t::to_cairndb`).
pub struct leveldb_comparator_t {
    state: *mut c_void,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
    compare: Option<CompareFn>,
    name: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
}

impl leveldb_comparator_t {
    /// The comparator's name (empty if it has no name function).
    fn name(&self) -> Vec<u8> {
        let Some(name) = self.name else {
            return Vec::new();
        };
        // SAFETY: the caller's function, called with the state it gave
        // for it, as LevelDB calls it.
        let p = unsafe { name(self.state) };
        // SAFETY: a comparator's name is a NUL-terminated string (or NULL).
        unsafe { c_str(p) }.map(<[u8]>::to_vec).unwrap_or_default()
    }

    /// The first pair of `cairndb::misorders`' probe keys this comparator
    /// orders otherwise than bytewise, with the sign it gave; `None` if it
    /// orders them all bytewise. A comparator without a compare function
    /// misorders the first pair.
    fn differs_from_bytewise(&self) -> Option<cairndb::Misordered> {
        let Some(compare) = self.compare else {
            return Some((b"", b"\x00", 0));
        };
        let probe = cairndb::misorders(|a, b| {
            // SAFETY: the caller's function, called with the state it gave
            // for it and two live buffers of the lengths passed, as
            // LevelDB calls it.
            let got = unsafe {
                compare(
                    self.state,
                    a.as_ptr().cast(),
                    a.len(),
                    b.as_ptr().cast(),
                    b.len(),
                )
            };
            Ok::<_, std::convert::Infallible>(i64::from(got))
        });
        match probe {
            Ok(found) => found,
            Err(never) => match never {},
        }
    }
}

pub type CompareFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, size_t, *const c_char, size_t) -> c_int;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_comparator_create(
    state: *mut c_void,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
    compare: Option<CompareFn>,
    name: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
) -> *mut leveldb_comparator_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_comparator_t {
            state,
            destructor,
            compare,
            name,
        }))
    })
}

/// Calls the comparator's destructor with its state, then frees it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_comparator_destroy(cmp: *mut leveldb_comparator_t) {
    if cmp.is_null() {
        return;
    }
    // SAFETY: `cmp` was made by leveldb_comparator_create and is
    // destroyed once (C API contract).
    let cmp = unsafe { Box::from_raw(cmp) };
    if let Some(d) = cmp.destructor {
        // SAFETY: the caller's destructor, called once with its state, as
        // LevelDB does when a comparator is destroyed.
        unsafe { d(cmp.state) };
    }
}

/// `leveldb_filterpolicy_t`: kept to be destroyed, and for a Bloom
/// policy its bits per key; CairnDB builds its own filters.
pub struct leveldb_filterpolicy_t {
    state: *mut c_void,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `Some` for `leveldb_filterpolicy_create_bloom`'s.
    bloom_bits: Option<c_int>,
}

pub type CreateFilterFn = unsafe extern "C" fn(
    *mut c_void,
    *const *const c_char,
    *const size_t,
    c_int,
    *mut size_t,
) -> *mut c_char;
pub type KeyMayMatchFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, size_t, *const c_char, size_t) -> c_uchar;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_filterpolicy_create(
    state: *mut c_void,
    destructor: Option<unsafe extern "C" fn(*mut c_void)>,
    _create_filter: Option<CreateFilterFn>,
    _key_may_match: Option<KeyMayMatchFn>,
    _name: Option<unsafe extern "C" fn(*mut c_void) -> *const c_char>,
) -> *mut leveldb_filterpolicy_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_filterpolicy_t {
            state,
            destructor,
            bloom_bits: None,
        }))
    })
}

/// A policy that stands for LevelDB's Bloom filter; CairnDB's own filters
/// (binary fuse) take its place, with 16-bit fingerprints from 16 bits
/// per key (`leveldb_options_set_filter_policy`).
#[unsafe(no_mangle)]
pub extern "C" fn leveldb_filterpolicy_create_bloom(
    bits_per_key: c_int,
) -> *mut leveldb_filterpolicy_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_filterpolicy_t {
            state: std::ptr::null_mut(),
            destructor: None,
            bloom_bits: Some(bits_per_key),
        }))
    })
}

/// Calls the policy's destructor with its state (for one made by
/// `leveldb_filterpolicy_create`), then frees it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t) {
    if p.is_null() {
        return;
    }
    // SAFETY: `p` was made by a leveldb_filterpolicy_create* function and
    // is destroyed once (C API contract).
    let p = unsafe { Box::from_raw(p) };
    if let Some(d) = p.destructor {
        // SAFETY: the caller's destructor, called once with its state.
        unsafe { d(p.state) };
    }
}

/// `leveldb_readoptions_t`: the snapshot to read at, if any.
pub struct leveldb_readoptions_t {
    /// A share of the snapshot set, so the options never point at a
    /// released one: releasing the `leveldb_snapshot_t` while these
    /// options still name it keeps its versions until the options are
    /// destroyed or given another snapshot.
    pub(crate) snapshot: Option<Arc<cairndb::Snapshot>>,
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_readoptions_t { snapshot: None }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t) {
    // SAFETY: made by leveldb_readoptions_create, destroyed once.
    unsafe { free_box(o) }
}

/// Ignored: CairnDB verifies every checksum it reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_readoptions_set_verify_checksums(
    _o: *mut leveldb_readoptions_t,
    _v: c_uchar,
) {
}

/// Ignored: CairnDB caches the blocks it reads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_readoptions_set_fill_cache(
    _o: *mut leveldb_readoptions_t,
    _v: c_uchar,
) {
}

/// Reads through these options see `snap` (NULL: the latest state).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_readoptions_set_snapshot(
    o: *mut leveldb_readoptions_t,
    snap: *const crate::leveldb_snapshot_t,
) {
    let snapshot = if snap.is_null() {
        None
    } else {
        // SAFETY: `snap` is a live snapshot handle (C API contract).
        Some(unsafe { (*snap).snap.clone() })
    };
    // SAFETY: `o` is a live read options handle (C API contract).
    unsafe { with(o, |o| o.snapshot = snapshot) }
}

/// `leveldb_writeoptions_t`.
pub struct leveldb_writeoptions_t {
    pub(crate) sync: bool,
}

/// The CairnDB write options `o` asks for (NULL: the defaults).
///
/// # Safety
/// `o` is NULL or a live write options handle.
pub(crate) unsafe fn write_options(o: *const leveldb_writeoptions_t) -> cairndb::WriteOptions {
    if o.is_null() {
        return cairndb::WriteOptions::default();
    }
    // SAFETY: the caller's contract: a live handle.
    let sync = unsafe { (*o).sync };
    cairndb::WriteOptions { sync }
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_writeoptions_t { sync: false }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t) {
    // SAFETY: made by leveldb_writeoptions_create, destroyed once.
    unsafe { free_box(o) }
}

/// `sync`: the write returns once it is durable on the device (survives
/// power loss); otherwise it survives a crash of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: c_uchar) {
    // SAFETY: `o` is a live write options handle (C API contract).
    unsafe { with(o, |o| o.sync = v != 0) }
}

/// `leveldb_cache_t`: an LRU capacity, which `leveldb_options_set_cache`
/// copies into CairnDB's block cache size.
pub struct leveldb_cache_t {
    capacity: usize,
}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_cache_create_lru(capacity: size_t) -> *mut leveldb_cache_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_cache_t { capacity }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_cache_destroy(c: *mut leveldb_cache_t) {
    // SAFETY: made by leveldb_cache_create_lru, destroyed once.
    unsafe { free_box(c) }
}

/// `leveldb_env_t`: a token; CairnDB always uses its POSIX file system.
pub struct leveldb_env_t {
    _private: u8,
}

/// `leveldb_logger_t`: never made by this library (LevelDB's C API has
/// no constructor for it either); declared for the signatures.
pub enum leveldb_logger_t {}

#[unsafe(no_mangle)]
pub extern "C" fn leveldb_create_default_env() -> *mut leveldb_env_t {
    quiet(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(leveldb_env_t { _private: 0 }))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_env_destroy(env: *mut leveldb_env_t) {
    // SAFETY: made by leveldb_create_default_env, destroyed once.
    unsafe { free_box(env) }
}

/// A directory for tests, created if missing: `$TEST_TMPDIR`, else
/// `<temp dir>/cairndb-test-<uid>`. `malloc`ed; NULL if it cannot be
/// created.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn leveldb_env_get_test_directory(_env: *mut leveldb_env_t) -> *mut c_char {
    quiet(std::ptr::null_mut(), || {
        let dir = match std::env::var_os("TEST_TMPDIR") {
            Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
            // SAFETY: geteuid has no preconditions and cannot fail.
            _ => std::env::temp_dir().join(format!("cairndb-test-{}", unsafe { libc::geteuid() })),
        };
        if std::fs::create_dir_all(&dir).is_err() {
            return std::ptr::null_mut();
        }
        crate::malloc_string(&dir.to_string_lossy())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fingerprint size a policy set on fresh options asks for.
    fn filter_bits_with(policy: *mut leveldb_filterpolicy_t) -> u8 {
        let o = leveldb_options_create();
        // SAFETY: `o` and `policy` (or NULL) are live handles made here,
        // each destroyed once below.
        unsafe {
            leveldb_options_set_filter_policy(o, policy);
            leveldb_filterpolicy_destroy(policy);
            let bits = (*o).to_cairndb().expect("options").filter_bits;
            leveldb_options_destroy(o);
            bits
        }
    }

    #[test]
    fn a_bloom_policy_of_16_bits_or_more_asks_for_16_bit_fingerprints() {
        assert_eq!(filter_bits_with(leveldb_filterpolicy_create_bloom(10)), 8);
        assert_eq!(filter_bits_with(leveldb_filterpolicy_create_bloom(16)), 16);
        assert_eq!(filter_bits_with(leveldb_filterpolicy_create_bloom(24)), 16);
        assert_eq!(filter_bits_with(std::ptr::null_mut()), 8);
        // SAFETY: no state and no callbacks: nothing is ever called.
        let custom =
            unsafe { leveldb_filterpolicy_create(std::ptr::null_mut(), None, None, None, None) };
        assert_eq!(filter_bits_with(custom), 8);
    }
}
