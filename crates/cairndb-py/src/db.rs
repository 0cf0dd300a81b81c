//! `DB`, `PrefixedDB`, `WriteBatch` and `Snapshot`: plyvel's data classes
//! over one open `cairndb::Db`.
//!
//! Every object made from a database (prefixed views, keyspaces, batches,
//! snapshots, iterators) shares its `Core`. `DB.close()` empties the core
//! at once: later calls through any of them raise `RuntimeError`, as
//! plyvel's do once its database is closed. A core still referenced by
//! such an object keeps the engine open after the `DB` object itself is
//! collected without `close()`; the engine closes when the last reference
//! goes.

use crate::cursor::{Cursor, Iterator, RawIterator, Spec};
use crate::extras::{Keyspace, Transaction};
use crate::{CLOSED_DB, OrPy, arg_bytes, engine_err, opt_bytes, prefix_successor};
use cairndb::{Compression, Options, WriteOptions};
use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use std::ops::Bound as Limit;
use std::sync::Arc;

/// The open database every object made from one `DB` shares; `None`
/// once closed.
pub(crate) struct Core {
    db: RwLock<Option<cairndb::Db>>,
}

impl Core {
    /// The database, or `RuntimeError` if it was closed. The lock is held
    /// only to clone the handle, never across a call into the engine.
    pub(crate) fn db(&self) -> PyResult<cairndb::Db> {
        self.db
            .read()
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err(CLOSED_DB))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.db.read().is_none()
    }
}

/// A consistent read view: one engine snapshot, in one keyspace (`None`:
/// the default keyspace).
#[derive(Clone)]
pub(crate) struct View {
    pub(crate) core: Arc<Core>,
    pub(crate) snap: Arc<cairndb::Snapshot>,
    pub(crate) ks: Option<cairndb::Keyspace>,
}

impl View {
    pub(crate) fn get(&self, key: &[u8]) -> cairndb::Result<Option<Vec<u8>>> {
        if self.core.is_closed() {
            return Err(cairndb::Error::Closed);
        }
        match &self.ks {
            None => self.snap.get(key),
            Some(ks) => self.snap.get_in(ks, key),
        }
    }

    pub(crate) fn range(&self, lo: Limit<Vec<u8>>, hi: Limit<Vec<u8>>) -> cairndb::Iter {
        match &self.ks {
            None => self.snap.range((lo, hi)),
            Some(ks) => self.snap.range_in(ks, (lo, hi)),
        }
    }
}

/// What a data object (`DB`, `PrefixedDB`, `Keyspace`) reads and writes:
/// a keyspace of the database, under a key prefix that callers do not see.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) core: Arc<Core>,
    pub(crate) ks: Option<cairndb::Keyspace>,
    pub(crate) prefix: Vec<u8>,
}

impl Target {
    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }

    /// A snapshot of the database now, in this target's keyspace.
    pub(crate) fn view(&self) -> PyResult<View> {
        let db = self.core.db()?;
        Ok(View {
            core: self.core.clone(),
            snap: Arc::new(db.snapshot()),
            ks: self.ks.clone(),
        })
    }

    fn get(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        let db = self.core.db()?;
        let key = self.key(key);
        py.detach(|| match &self.ks {
            None => db.get(&key),
            Some(ks) => ks.get(&key),
        })
        .or_py(py)
    }

    fn write(&self, py: Python<'_>, key: &[u8], value: Option<&[u8]>, sync: bool) -> PyResult<()> {
        let db = self.core.db()?;
        let key = self.key(key);
        let opts = WriteOptions { sync };
        py.detach(|| match (&self.ks, value) {
            (None, Some(v)) => db.put_opt(&key, v, &opts),
            (None, None) => db.delete_opt(&key, &opts),
            (Some(ks), Some(v)) => ks.put_opt(&key, v, &opts),
            (Some(ks), None) => ks.delete_opt(&key, &opts),
        })
        .or_py(py)
    }
}

/// The value for `get`: the stored bytes or `default`.
fn found(py: Python<'_>, v: Option<Vec<u8>>, default: Option<Py<PyAny>>) -> Py<PyAny> {
    match v {
        Some(v) => PyBytes::new(py, &v).into_any().unbind(),
        None => default.unwrap_or_else(|| py.None()),
    }
}

/// plyvel's `iterator(...)` arguments turned into key bounds (with the
/// target's prefix), as plyvel does: `prefix` excludes `start`/`stop` and
/// overrides `include_start`/`include_stop`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn iter_spec(
    db_prefix: &[u8],
    reverse: bool,
    start: Option<&Bound<'_, PyAny>>,
    stop: Option<&Bound<'_, PyAny>>,
    include_start: bool,
    include_stop: bool,
    prefix: Option<&Bound<'_, PyAny>>,
    include_key: bool,
    include_value: bool,
) -> PyResult<Spec> {
    let start = opt_bytes(start, "start")?;
    let stop = opt_bytes(stop, "stop")?;
    let prefix = opt_bytes(prefix, "prefix")?;
    let join = |k: &[u8]| [db_prefix, k].concat();
    let upper_of = |p: &[u8]| match prefix_successor(p) {
        Some(s) => Limit::Excluded(s),
        None => Limit::Unbounded,
    };
    let (lo, hi) = if let Some(p) = prefix {
        if start.is_some() || stop.is_some() {
            return Err(PyTypeError::new_err(
                "'prefix' cannot be used together with 'start' or 'stop'",
            ));
        }
        let p = join(&p);
        let hi = upper_of(&p);
        (Limit::Included(p), hi)
    } else {
        let lo = match start {
            Some(s) if include_start => Limit::Included(join(&s)),
            Some(s) => Limit::Excluded(join(&s)),
            None if db_prefix.is_empty() => Limit::Unbounded,
            None => Limit::Included(db_prefix.to_vec()),
        };
        let hi = match stop {
            Some(s) if include_stop => Limit::Included(join(&s)),
            Some(s) => Limit::Excluded(join(&s)),
            None => upper_of(db_prefix),
        };
        (lo, hi)
    };
    Ok(Spec {
        lo,
        hi,
        db_prefix: db_prefix.to_vec(),
        include_key,
        include_value,
        reverse,
    })
}

fn closed_snapshot() -> PyErr {
    PyRuntimeError::new_err("Cannot operate on closed LevelDB database")
}

/// The data methods plyvel's `DB` and `PrefixedDB` share (and CairnDB's
/// `Keyspace`): `get`, `put`, `delete`, `write_batch`, `iterator`,
/// `raw_iterator`, `snapshot`, `prefixed_db`. Not made directly.
#[pyclass(subclass, frozen, module = "cairndb", name = "_Data")]
pub struct Data {
    pub(crate) target: Target,
    /// The `DB` object of a prefixed view (`None` for a `DB`, which is its
    /// own).
    db: Option<Py<PyAny>>,
}

impl Data {
    pub(crate) fn new(target: Target, db: Option<Py<PyAny>>) -> Data {
        Data { target, db }
    }
}

#[pymethods]
impl Data {
    /// The value of `key`, or `default` if it has none. `verify_checksums`
    /// and `fill_cache` are accepted and ignored: CairnDB always verifies
    /// the checksum of what it reads, and caches blocks itself.
    #[pyo3(signature = (key, default=None, *, verify_checksums=None, fill_cache=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
        verify_checksums: Option<bool>,
        fill_cache: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (verify_checksums, fill_cache);
        let key = arg_bytes(key, "key")?;
        let v = self.target.get(py, &key)?;
        Ok(found(py, v, default))
    }

    /// Sets `key` to `value`; with `sync=True` the call returns once the
    /// write survives power loss (without, it survives a process crash).
    #[pyo3(signature = (key, value, *, sync=None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sync: Option<bool>,
    ) -> PyResult<()> {
        let key = arg_bytes(key, "key")?;
        let value = arg_bytes(value, "value")?;
        self.target
            .write(py, &key, Some(&value), sync.unwrap_or(false))
    }

    /// Deletes `key`; deleting a missing key is not an error.
    #[pyo3(signature = (key, *, sync=None))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: Option<bool>) -> PyResult<()> {
        let key = arg_bytes(key, "key")?;
        self.target.write(py, &key, None, sync.unwrap_or(false))
    }

    /// A `WriteBatch` that writes atomically to this database (or view).
    #[pyo3(signature = (*, transaction=false, sync=None))]
    fn write_batch(&self, transaction: bool, sync: Option<bool>) -> PyResult<WriteBatch> {
        self.target.core.db()?;
        Ok(WriteBatch {
            target: self.target.clone(),
            transaction,
            sync: sync.unwrap_or(false),
            ops: Mutex::new(Vec::new()),
        })
    }

    fn __iter__(&self) -> PyResult<Iterator> {
        let view = self.target.view()?;
        let spec = iter_spec(
            &self.target.prefix,
            false,
            None,
            None,
            true,
            false,
            None,
            true,
            true,
        )?;
        Ok(Iterator::new(Cursor::new(view, spec)))
    }

    /// An `Iterator` over a snapshot taken now (or over `snapshot`, a
    /// `Snapshot` of this database — a CairnDB extra). See plyvel's
    /// `DB.iterator`; `verify_checksums` and `fill_cache` are ignored.
    #[pyo3(signature = (*, reverse=false, start=None, stop=None, include_start=true,
        include_stop=false, prefix=None, include_key=true, include_value=true,
        verify_checksums=None, fill_cache=None, snapshot=None))]
    #[allow(clippy::too_many_arguments)]
    fn iterator(
        &self,
        reverse: bool,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        include_start: bool,
        include_stop: bool,
        prefix: Option<&Bound<'_, PyAny>>,
        include_key: bool,
        include_value: bool,
        verify_checksums: Option<bool>,
        fill_cache: Option<bool>,
        snapshot: Option<&Bound<'_, Snapshot>>,
    ) -> PyResult<Iterator> {
        let _ = (verify_checksums, fill_cache);
        let spec = iter_spec(
            &self.target.prefix,
            reverse,
            start,
            stop,
            include_start,
            include_stop,
            prefix,
            include_key,
            include_value,
        )?;
        let view = match snapshot {
            Some(s) => s.get().view()?,
            None => self.target.view()?,
        };
        Ok(Iterator::new(Cursor::new(view, spec)))
    }

    /// A `RawIterator` (LevelDB's cursor API) over a snapshot taken now.
    /// Keys are the database's own; on a prefixed view they keep the prefix
    /// and the cursor is not limited to it.
    #[pyo3(signature = (*, verify_checksums=None, fill_cache=None))]
    fn raw_iterator(
        &self,
        verify_checksums: Option<bool>,
        fill_cache: Option<bool>,
    ) -> PyResult<RawIterator> {
        let _ = (verify_checksums, fill_cache);
        Ok(RawIterator::new(self.target.view()?))
    }

    /// A `Snapshot`: a consistent view of the database as of now.
    fn snapshot(&self) -> PyResult<Snapshot> {
        Ok(Snapshot::new(
            self.target.view()?,
            self.target.prefix.clone(),
        ))
    }

    /// A `PrefixedDB` whose keys are this object's keys under `prefix`.
    fn prefixed_db(slf: &Bound<'_, Self>, prefix: &Bound<'_, PyAny>) -> PyResult<Py<PrefixedDB>> {
        let py = slf.py();
        let this = slf.get();
        let prefix = arg_bytes(prefix, "prefix")?;
        let mut target = this.target.clone();
        target.prefix.extend_from_slice(&prefix);
        let db = match &this.db {
            Some(db) => db.clone_ref(py),
            None => slf.clone().into_any().unbind(),
        };
        let init = PyClassInitializer::from(Data::new(target, Some(db))).add_subclass(PrefixedDB);
        Py::new(py, init)
    }
}

/// A CairnDB database with plyvel's `DB` API (`import cairndb as plyvel`).
///
/// Options plyvel takes and CairnDB maps: `create_if_missing`,
/// `error_if_exists`; `write_buffer_size` → memtable bytes; `lru_cache_size`
/// → block cache bytes; `block_size`, `block_restart_interval`;
/// `max_open_files` → tables kept open; `max_file_size` → table bytes;
/// `compression` (`'snappy'`, CairnDB has no snappy: LZ4, its fast
/// compressor; `None`: none; also `'lz4'` and `'zstd'`);
/// `bloom_filter_bits` (CairnDB always builds a table filter, a binary fuse
/// filter: 16 or more bits per key get 16-bit fingerprints, anything else
/// the default 8-bit ones). `paranoid_checks` is ignored: every block
/// is checksummed and checked when read. CairnDB orders keys bytewise: a
/// custom `comparator` (given with its `comparator_name`, as plyvel
/// requires) is called at open on every pair of a fixed set of probe keys
/// and accepted if it orders them all bytewise; any other raises
/// `NotImplementedError` naming a pair it orders otherwise.
#[pyclass(extends = Data, frozen, module = "cairndb", name = "DB")]
pub struct DB {
    name: Py<PyAny>,
}

/// plyvel's rules for `comparator` and `comparator_name` (both or
/// neither; a callable; a bytes name), then CairnDB's: the comparator
/// must order the probe keys of `cairndb::misorders` bytewise. Returns the name the database is
/// opened under (`Options::comparator_name`): the one given, else
/// LevelDB's bytewise comparator's.
fn check_comparator(
    comparator: Option<&Bound<'_, PyAny>>,
    name: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let (cmp, name) = match (comparator, name) {
        (None, None) => return Ok(cairndb::BYTEWISE_COMPARATOR.to_owned()),
        (Some(c), Some(n)) => (c, n),
        _ => {
            return Err(PyValueError::new_err(
                "'comparator' and 'comparator_name' must be specified together",
            ));
        }
    };
    if !cmp.is_callable() {
        return Err(PyTypeError::new_err("'comparator' must be a callable"));
    }
    let name = name
        .cast::<PyBytes>()
        .map_err(|_| PyTypeError::new_err("'comparator_name' must be a bytestring"))?
        .as_bytes()
        .to_vec();
    let name = String::from_utf8(name)
        .ok()
        .filter(|n| (1..=255).contains(&n.len()))
        .ok_or_else(|| {
            PyValueError::new_err("'comparator_name' must be 1 to 255 bytes of UTF-8")
        })?;
    let py = cmp.py();
    let probe = cairndb::misorders(|a, b| {
        cmp.call1((PyBytes::new(py, a), PyBytes::new(py, b)))?
            .extract::<i64>()
    })?;
    if let Some((a, b, got)) = probe {
        return Err(PyNotImplementedError::new_err(format!(
            "comparator {:?} is not supported: it orders {:?} and {:?} as {got}, where bytewise \
             order gives {}; CairnDB orders keys bytewise only",
            name,
            String::from_utf8_lossy(a),
            String::from_utf8_lossy(b),
            a.cmp(b) as i64,
        )));
    }
    Ok(name)
}

fn compression_of(c: Option<&Bound<'_, PyAny>>) -> PyResult<Compression> {
    let Some(c) = c.filter(|c| !c.is_none()) else {
        return Ok(Compression::None);
    };
    let s: String = if let Ok(b) = c.cast::<PyBytes>() {
        String::from_utf8_lossy(b.as_bytes()).into_owned()
    } else {
        c.extract()
            .map_err(|_| PyTypeError::new_err("'compression' must be None or a string"))?
    };
    match s.as_str() {
        "snappy" | "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd(3)),
        _ => Err(PyValueError::new_err(
            "'compression' must be None, 'snappy' (LZ4 in CairnDB), 'lz4' or 'zstd'",
        )),
    }
}

#[pymethods]
impl DB {
    #[new]
    #[pyo3(signature = (name, *, create_if_missing=false, error_if_exists=false,
        paranoid_checks=None, write_buffer_size=None, max_open_files=None,
        lru_cache_size=None, block_size=None, block_restart_interval=None,
        max_file_size=None, compression=None, bloom_filter_bits=0, comparator=None,
        comparator_name=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        create_if_missing: bool,
        error_if_exists: bool,
        paranoid_checks: Option<bool>,
        write_buffer_size: Option<usize>,
        max_open_files: Option<usize>,
        lru_cache_size: Option<usize>,
        block_size: Option<usize>,
        block_restart_interval: Option<usize>,
        max_file_size: Option<u64>,
        compression: Option<&Bound<'_, PyAny>>,
        bloom_filter_bits: i64,
        comparator: Option<&Bound<'_, PyAny>>,
        comparator_name: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let _ = paranoid_checks;
        let comparator_name = check_comparator(
            comparator.filter(|c| !c.is_none()),
            comparator_name.filter(|c| !c.is_none()),
        )?;
        let path: std::path::PathBuf = py
            .import("os")?
            .call_method1("fsdecode", (name,))?
            .extract()?;
        let mut opts = Options {
            create_if_missing,
            error_if_exists,
            comparator_name: Some(comparator_name),
            ..Options::default()
        };
        // plyvel's default compression is 'snappy'; `None` here means the
        // argument was left out, not `compression=None`.
        opts.compression = match compression {
            None => Compression::Lz4,
            Some(c) => compression_of(Some(c))?,
        };
        if let Some(n) = write_buffer_size {
            opts.memtable_bytes = n;
        }
        if let Some(n) = max_open_files {
            opts.open_tables_max = n;
        }
        if let Some(n) = lru_cache_size {
            opts.block_cache_bytes = n;
        }
        // LevelDB's Bloom filter at 16 bits per key gives about 0.05 %
        // false positives: CairnDB's 16-bit fingerprints (0.0015 %) match
        // it; below that its 8-bit ones (0.4 %) beat the usual 10 (1 %).
        if bloom_filter_bits >= 16 {
            opts.filter_bits = 16;
        }
        if let Some(n) = block_size {
            opts.block_bytes = n;
        }
        if let Some(n) = block_restart_interval {
            opts.block_restart_interval = n;
        }
        if let Some(n) = max_file_size {
            opts.table_bytes = n;
        }
        let db = py.detach(|| cairndb::Db::open(&path, opts)).or_py(py)?;
        let core = Arc::new(Core {
            db: RwLock::new(Some(db)),
        });
        let target = Target {
            core,
            ks: None,
            prefix: Vec::new(),
        };
        Ok(
            PyClassInitializer::from(Data::new(target, None)).add_subclass(DB {
                name: name.clone().unbind(),
            }),
        )
    }

    /// The name (path) the database was opened with.
    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyAny> {
        self.name.clone_ref(py)
    }

    #[getter]
    fn closed(slf: &Bound<'_, Self>) -> bool {
        target(slf).core.is_closed()
    }

    /// Closes the database: syncs the journal and stops background work.
    /// Iterators, snapshots, batches, prefixed views and keyspaces made
    /// from it raise `RuntimeError` from then on. Closing twice is allowed.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let db = target(slf).core.db.write().take();
        match db {
            Some(db) => py.detach(|| db.close()).or_py(py),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(slf: &Bound<'_, Self>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        DB::close(slf)?;
        Ok(false)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get().name.bind(slf.py()).repr()?;
        let closed = if DB::closed(slf) { " (closed)" } else { "" };
        Ok(format!("<cairndb.DB with name {name}{closed}>"))
    }

    /// LevelDB's properties, answered from `Db::stats`:
    /// `leveldb.stats` (tables and bytes per level, memtable, counters),
    /// `leveldb.num-files-at-level<N>`, `leveldb.sstables` (a summary per
    /// level: CairnDB does not list table files),
    /// `leveldb.approximate-memory-usage`; `cairndb.stats` (every counter).
    /// `None` for any other name.
    fn get_property(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyBytes>,
    ) -> PyResult<Option<Py<PyBytes>>> {
        let py = slf.py();
        let db = target(slf).core.db()?;
        let stats = py.detach(|| db.stats());
        let name = String::from_utf8_lossy(name.as_bytes()).into_owned();
        let text = property(&stats, &name);
        Ok(text.map(|t| PyBytes::new(py, t.as_bytes()).unbind()))
    }

    /// Compacts the whole database (CairnDB compacts everything at once:
    /// `start` and `stop` are accepted and the range is not narrowed).
    #[pyo3(signature = (*, start=None, stop=None))]
    fn compact_range(
        slf: &Bound<'_, Self>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        opt_bytes(start, "start")?;
        opt_bytes(stop, "stop")?;
        let db = target(slf).core.db()?;
        py.detach(|| db.compact()).or_py(py)
    }

    /// An estimate of the bytes keys in `[start, stop)` take; see
    /// `approximate_sizes`.
    fn approximate_size(
        slf: &Bound<'_, Self>,
        start: &Bound<'_, PyAny>,
        stop: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let py = slf.py();
        let start = arg_bytes(start, "start")?.into_owned();
        let stop = arg_bytes(stop, "stop")?.into_owned();
        let db = target(slf).core.db()?;
        py.detach(|| range_bytes(&db, start, stop)).or_py(py)
    }

    /// For each `(start, stop)` tuple, the bytes of the keys and values in
    /// `[start, stop)` as stored now, uncompressed: CairnDB's public API
    /// has no per-range size of its files, so this counts the live entries
    /// with a scan (its cost grows with the range). LevelDB's figure is
    /// the on-disk size of the files covering the range and leaves out the
    /// memtable; this one counts what is live wherever it is.
    #[pyo3(signature = (*ranges))]
    fn approximate_sizes(slf: &Bound<'_, Self>, ranges: &Bound<'_, PyTuple>) -> PyResult<Vec<u64>> {
        let py = slf.py();
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges.iter() {
            let (start, stop): (Bound<'_, PyAny>, Bound<'_, PyAny>) = r.extract()?;
            out.push(DB::approximate_size(slf, &start, &stop)?);
        }
        let _ = py;
        Ok(out)
    }

    // CairnDB extras.

    /// Starts an optimistic transaction (snapshot isolation; with
    /// `serializable=True`, serializable). Use it as a context manager:
    /// it commits when the block ends, and rolls back if it raised.
    #[pyo3(signature = (*, serializable=false, sync=false))]
    fn transaction(slf: &Bound<'_, Self>, serializable: bool, sync: bool) -> PyResult<Transaction> {
        let core = target(slf).core.clone();
        let db = core.db()?;
        let txn = if serializable {
            db.begin_serializable()
        } else {
            db.begin()
        };
        Ok(Transaction::new(core, txn, sync))
    }

    /// The keyspace named `name`, created if missing: a separate ordered
    /// key space with the same data methods as `DB`.
    fn keyspace(slf: &Bound<'_, Self>, name: &str) -> PyResult<Py<Keyspace>> {
        let py = slf.py();
        let core = target(slf).core.clone();
        let db = core.db()?;
        let ks = py.detach(|| db.keyspace(name)).or_py(py)?;
        Keyspace::create(py, core, ks, slf.clone().into_any().unbind())
    }

    /// Drops the keyspace named `name`; False if there was none.
    fn drop_keyspace(slf: &Bound<'_, Self>, name: &str) -> PyResult<bool> {
        let py = slf.py();
        let db = target(slf).core.db()?;
        py.detach(|| db.drop_keyspace(name)).or_py(py)
    }

    /// The names of the keyspaces, "default" first.
    fn keyspaces(slf: &Bound<'_, Self>) -> PyResult<Vec<String>> {
        Ok(target(slf).core.db()?.keyspaces())
    }

    /// Writes the memtable out to a table and waits for it.
    fn flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let db = target(slf).core.db()?;
        py.detach(|| db.flush()).or_py(py)
    }

    /// The engine's shape and counters, as a dict.
    fn stats<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let db = target(slf).core.db()?;
        let s = py.detach(|| db.stats());
        crate::extras::stats_dict(py, &s)
    }
}

fn target<'a>(slf: &'a Bound<'_, DB>) -> &'a Target {
    &slf.as_super().get().target
}

/// Live bytes (keys + values) in `[start, stop)`.
fn range_bytes(db: &cairndb::Db, start: Vec<u8>, stop: Vec<u8>) -> cairndb::Result<u64> {
    if start >= stop {
        return Ok(0);
    }
    let mut n = 0u64;
    let mut it = db.range(start..stop);
    while let Some(kv) = it.next_ref() {
        let (k, v) = kv?;
        n += (k.len() + v.len()) as u64;
    }
    Ok(n)
}

/// LevelDB's `GetProperty` names, answered from `stats`.
fn property(s: &cairndb::Stats, name: &str) -> Option<String> {
    if let Some(level) = name.strip_prefix("leveldb.num-files-at-level") {
        let level: usize = level.parse().ok()?;
        return Some(
            s.tables_per_level
                .get(level)
                .copied()
                .unwrap_or(0)
                .to_string(),
        );
    }
    let levels = || {
        let mut t = String::new();
        for (i, (n, b)) in s
            .tables_per_level
            .iter()
            .zip(&s.bytes_per_level)
            .enumerate()
        {
            t.push_str(&format!("{i:>5} {n:>8} {:>10.3}\n", *b as f64 / 1048576.0));
        }
        t
    };
    match name {
        "leveldb.stats" => Some(format!(
            "Level  Tables Size(MB)\n------------------------\n{}\
             memtable bytes: {}\nsealed memtables: {}\nflushes: {}\ncompactions: {}\n\
             stall micros: {}\nlast seqno: {}\n",
            levels(),
            s.memtable_bytes,
            s.sealed_memtables,
            s.flushes,
            s.compactions,
            s.stall_micros,
            s.last_seqno
        )),
        "leveldb.sstables" => Some(levels()),
        "leveldb.approximate-memory-usage" => Some(
            (s.memtable_bytes as u64 + s.block_cache_bytes + s.table_memory_bytes as u64)
                .to_string(),
        ),
        "cairndb.stats" => Some(format!("{s:#?}")),
        _ => None,
    }
}

/// A view of a `DB` whose keys all start with `prefix`, which its methods
/// add and its iterators strip (plyvel's `PrefixedDB`).
#[pyclass(extends = Data, frozen, module = "cairndb", name = "PrefixedDB")]
pub struct PrefixedDB;

#[pymethods]
impl PrefixedDB {
    #[getter]
    fn prefix<'py>(slf: &Bound<'py, Self>) -> Bound<'py, PyBytes> {
        PyBytes::new(slf.py(), &slf.as_super().get().target.prefix)
    }

    /// The `DB` this view is of.
    #[getter]
    fn db(slf: &Bound<'_, Self>) -> Py<PyAny> {
        let py = slf.py();
        match &slf.as_super().get().db {
            Some(db) => db.clone_ref(py),
            None => py.None(),
        }
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!(
            "<cairndb.PrefixedDB with prefix {}>",
            PrefixedDB::prefix(slf).repr()?
        ))
    }
}

/// A batch of puts and deletes written atomically by `write()` (or when
/// its `with` block ends; with `transaction=True`, not if the block
/// raised). As in plyvel, `write()` leaves the batch as it is; the `with`
/// block clears it after writing.
#[pyclass(frozen, module = "cairndb")]
pub struct WriteBatch {
    target: Target,
    transaction: bool,
    sync: bool,
    ops: Mutex<Vec<BatchOp>>,
}

/// A key of a `WriteBatch` (prefix included) with its value, or `None`
/// for a delete.
type BatchOp = (Vec<u8>, Option<Vec<u8>>);

#[pymethods]
impl WriteBatch {
    fn put(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.target.core.db()?;
        let key = self.target.key(&arg_bytes(key, "key")?);
        let value = arg_bytes(value, "value")?.into_owned();
        self.ops.lock().push((key, Some(value)));
        Ok(())
    }

    fn delete(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.target.core.db()?;
        let key = self.target.key(&arg_bytes(key, "key")?);
        self.ops.lock().push((key, None));
        Ok(())
    }

    fn clear(&self) -> PyResult<()> {
        self.target.core.db()?;
        self.ops.lock().clear();
        Ok(())
    }

    /// Adds the operations of `source`, another `WriteBatch`.
    fn append(&self, source: &Bound<'_, WriteBatch>) -> PyResult<()> {
        let theirs = source.get().ops.lock().clone();
        self.ops.lock().extend(theirs);
        Ok(())
    }

    /// The bytes of the keys and values in the batch.
    fn approximate_size(&self) -> usize {
        self.ops
            .lock()
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum()
    }

    /// Writes the batch atomically.
    fn write(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.target.core.db()?;
        let mut batch = cairndb::WriteBatch::new();
        let built: cairndb::Result<()> = (|| {
            for (k, v) in self.ops.lock().iter() {
                match (&self.target.ks, v) {
                    (None, Some(v)) => batch.put(k, v)?,
                    (None, None) => batch.delete(k)?,
                    (Some(ks), Some(v)) => batch.put_in(ks, k, v)?,
                    (Some(ks), None) => batch.delete_in(ks, k)?,
                }
            }
            Ok(())
        })();
        built.or_py(py)?;
        let opts = WriteOptions { sync: self.sync };
        py.detach(|| db.write(batch, &opts)).or_py(py)
    }

    fn __len__(&self) -> usize {
        self.ops.lock().len()
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().target.core.db()?;
        Ok(slf)
    }

    #[pyo3(signature = (exc_type, _exc_value=None, _traceback=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.target.core.db()?;
        let raised = exc_type.is_some_and(|t| !t.is_none());
        if !(self.transaction && raised) {
            self.write(py)?;
        }
        self.ops.lock().clear();
        Ok(false)
    }
}

/// A consistent view of the database at the instant it was taken
/// (plyvel's `Snapshot`): `get`, `iterator`, `raw_iterator`; `close()` or
/// `release()` (or a `with` block) lets the engine drop what only it
/// needed.
#[pyclass(frozen, module = "cairndb")]
pub struct Snapshot {
    view: Mutex<Option<View>>,
    prefix: Vec<u8>,
}

impl Snapshot {
    pub(crate) fn new(view: View, prefix: Vec<u8>) -> Snapshot {
        Snapshot {
            view: Mutex::new(Some(view)),
            prefix,
        }
    }

    fn view(&self) -> PyResult<View> {
        let v = self.view.lock().clone().ok_or_else(closed_snapshot)?;
        if v.core.is_closed() {
            return Err(closed_snapshot());
        }
        Ok(v)
    }
}

#[pymethods]
impl Snapshot {
    #[pyo3(signature = (key, default=None, *, verify_checksums=None, fill_cache=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
        verify_checksums: Option<bool>,
        fill_cache: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (verify_checksums, fill_cache);
        let key = [self.prefix.as_slice(), &arg_bytes(key, "key")?].concat();
        let view = self.view()?;
        let v = py.detach(|| view.get(&key)).map_err(|e| match e {
            cairndb::Error::Closed => closed_snapshot(),
            e => engine_err(py, e),
        })?;
        Ok(found(py, v, default))
    }

    fn __iter__(&self) -> PyResult<Iterator> {
        let spec = iter_spec(
            &self.prefix,
            false,
            None,
            None,
            true,
            false,
            None,
            true,
            true,
        )?;
        Ok(Iterator::new(Cursor::new(self.view()?, spec)))
    }

    #[pyo3(signature = (*, reverse=false, start=None, stop=None, include_start=true,
        include_stop=false, prefix=None, include_key=true, include_value=true,
        verify_checksums=None, fill_cache=None))]
    #[allow(clippy::too_many_arguments)]
    fn iterator(
        &self,
        reverse: bool,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        include_start: bool,
        include_stop: bool,
        prefix: Option<&Bound<'_, PyAny>>,
        include_key: bool,
        include_value: bool,
        verify_checksums: Option<bool>,
        fill_cache: Option<bool>,
    ) -> PyResult<Iterator> {
        let _ = (verify_checksums, fill_cache);
        let spec = iter_spec(
            &self.prefix,
            reverse,
            start,
            stop,
            include_start,
            include_stop,
            prefix,
            include_key,
            include_value,
        )?;
        Ok(Iterator::new(Cursor::new(self.view()?, spec)))
    }

    #[pyo3(signature = (*, verify_checksums=None, fill_cache=None))]
    fn raw_iterator(
        &self,
        verify_checksums: Option<bool>,
        fill_cache: Option<bool>,
    ) -> PyResult<RawIterator> {
        let _ = (verify_checksums, fill_cache);
        Ok(RawIterator::new(self.view()?))
    }

    /// Releases the snapshot; later calls raise `RuntimeError`. Iterators
    /// made from it keep reading it until they are closed.
    fn close(&self) {
        self.view.lock().take();
    }

    fn release(&self) {
        self.close();
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close();
        false
    }
}

/// plyvel's `repair_db`, LevelDB's `RepairDB`: rebuilds the database in
/// directory `name` whose manifest is lost or damaged from its tables and
/// journals (`Db::repair`, docs/durability.md §Repair). Damaged tables
/// are moved into `name/lost/`, never deleted; what was lost is not an
/// error, as in plyvel. The database must not be open (`cairndb.IOError`
/// naming its `LOCK` otherwise); a missing directory raises
/// `cairndb.Error`. Of the options, `compression` and `write_buffer_size`
/// shape the tables written from journals; the others are accepted and
/// ignored, except a custom `comparator` (`NotImplementedError`).
#[pyfunction]
#[pyo3(signature = (name, **options))]
pub fn repair_db(
    py: Python<'_>,
    name: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let path: std::path::PathBuf = py
        .import("os")?
        .call_method1("fsdecode", (name,))?
        .extract()?;
    let mut opts = Options {
        compression: Compression::Lz4,
        ..Options::default()
    };
    if let Some(options) = options {
        for key in ["comparator", "comparator_name"] {
            if options.get_item(key)?.is_some_and(|c| !c.is_none()) {
                return Err(PyNotImplementedError::new_err(
                    "custom comparators are not supported: CairnDB orders keys bytewise",
                ));
            }
        }
        if let Some(c) = options.get_item("compression")? {
            opts.compression = compression_of(Some(&c))?;
        }
        if let Some(n) = options.get_item("write_buffer_size")?
            && !n.is_none()
        {
            opts.memtable_bytes = n.extract()?;
        }
    }
    py.detach(|| cairndb::Db::repair(&path, &opts)).or_py(py)?;
    Ok(())
}
