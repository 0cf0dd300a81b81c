//! What CairnDB has beyond LevelDB, in plyvel's style: transactions,
//! keyspaces and `stats()`.

use crate::db::{Core, Data, Target, iter_spec};
use crate::{OrPy, arg_bytes, engine_err};
use cairndb::{KeyValue, TxnIter, WriteOptions};
use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use std::ops::Bound as Limit;
use std::sync::Arc;

/// An optimistic transaction (`DB.transaction()`): reads see the database
/// as of its start plus its own writes; writes are buffered until
/// `commit()`, which raises `cairndb.ConflictError` (writing nothing) if
/// a concurrent commit wrote a key it wrote (serializable: or changed
/// anything it read). As a context manager it commits when the block
/// ends and rolls back if the block raised. After `commit()` or
/// `rollback()` every call raises `RuntimeError`.
#[pyclass(frozen, module = "cairndb")]
pub struct Transaction {
    core: Arc<Core>,
    txn: Mutex<Option<cairndb::Transaction>>,
    sync: bool,
}

const TXN_ENDED: &str = "transaction already committed or rolled back";

impl Transaction {
    pub(crate) fn new(core: Arc<Core>, txn: cairndb::Transaction, sync: bool) -> Transaction {
        Transaction {
            core,
            txn: Mutex::new(Some(txn)),
            sync,
        }
    }

    fn with_txn<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut cairndb::Transaction) -> cairndb::Result<T> + Send,
    ) -> PyResult<T> {
        self.core.db()?;
        let r = py.detach(|| self.txn.lock().as_mut().map(f));
        match r {
            None => Err(PyRuntimeError::new_err(TXN_ENDED)),
            Some(r) => r.or_py(py),
        }
    }
}

#[pymethods]
impl Transaction {
    #[pyo3(signature = (key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let key = arg_bytes(key, "key")?;
        let v = self.with_txn(py, |t| t.get(&key))?;
        Ok(match v {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// `get`, and the commit fails if another commit writes `key` first.
    #[pyo3(signature = (key, default=None))]
    fn get_for_update(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let key = arg_bytes(key, "key")?;
        let v = self.with_txn(py, |t| t.get_for_update(&key))?;
        Ok(match v {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = arg_bytes(key, "key")?;
        let value = arg_bytes(value, "value")?;
        self.with_txn(py, |t| t.put(&key, &value))
    }

    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = arg_bytes(key, "key")?;
        self.with_txn(py, |t| t.delete(&key))
    }

    /// A forward iterator over what this transaction sees (its writes over
    /// its snapshot), with `DB.iterator`'s range arguments. `reverse=True`
    /// is not supported (`ValueError`): the engine's transaction scan goes
    /// forward only.
    #[pyo3(signature = (*, reverse=false, start=None, stop=None, include_start=true,
        include_stop=false, prefix=None, include_key=true, include_value=true))]
    #[allow(clippy::too_many_arguments)]
    fn iterator(
        &self,
        py: Python<'_>,
        reverse: bool,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        include_start: bool,
        include_stop: bool,
        prefix: Option<&Bound<'_, PyAny>>,
        include_key: bool,
        include_value: bool,
    ) -> PyResult<TxnIterator> {
        if reverse {
            return Err(PyValueError::new_err(
                "a transaction iterator goes forward only",
            ));
        }
        let spec = iter_spec(
            &[],
            false,
            start,
            stop,
            include_start,
            include_stop,
            prefix,
            include_key,
            include_value,
        )?;
        let (lo, hi): (Limit<Vec<u8>>, Limit<Vec<u8>>) = (spec.lo, spec.hi);
        let it = self.with_txn(py, |t| t.range((lo, hi)))?;
        Ok(TxnIterator {
            core: self.core.clone(),
            it: Mutex::new(Some(it)),
            include_key: spec.include_key,
            include_value: spec.include_value,
        })
    }

    /// Commits atomically (synced if the transaction was begun with
    /// `sync=True`), or raises `cairndb.ConflictError` having written
    /// nothing.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.core.db()?;
        let opts = WriteOptions { sync: self.sync };
        let r = py.detach(|| self.txn.lock().take().map(|t| t.commit_opt(&opts)));
        match r {
            None => Err(PyRuntimeError::new_err(TXN_ENDED)),
            Some(r) => r.map(drop).map_err(|e| engine_err(py, e)),
        }
    }

    /// Discards the buffered writes. Rolling back an ended transaction
    /// does nothing.
    fn rollback(&self, py: Python<'_>) {
        let t = py.detach(|| self.txn.lock().take());
        if let Some(t) = t {
            t.rollback();
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc_value=None, _traceback=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.rollback(py);
            return Ok(false);
        }
        if self.txn.lock().is_some() {
            self.commit(py)?;
        }
        Ok(false)
    }
}

/// The iterator of `Transaction.iterator`: forward only.
#[pyclass(frozen, module = "cairndb")]
pub struct TxnIterator {
    core: Arc<Core>,
    it: Mutex<Option<TxnIter>>,
    include_key: bool,
    include_value: bool,
}

#[pymethods]
impl TxnIterator {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.core.db()?;
        let got: Option<Option<cairndb::Result<KeyValue>>> =
            py.detach(|| self.it.lock().as_mut().map(Iterator::next));
        let Some(got) = got else {
            return Err(PyRuntimeError::new_err(crate::CLOSED_ITER));
        };
        let Some((k, v)) = got.transpose().or_py(py)? else {
            return Ok(None);
        };
        let (k, v) = (PyBytes::new(py, &k), PyBytes::new(py, &v));
        Ok(Some(match (self.include_key, self.include_value) {
            (true, true) => PyTuple::new(py, [k, v])?.into_any().unbind(),
            (true, false) => k.into_any().unbind(),
            (false, true) => v.into_any().unbind(),
            (false, false) => py.None(),
        }))
    }

    fn close(&self, py: Python<'_>) {
        let it = py.detach(|| self.it.lock().take());
        drop(it);
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }
}

/// A keyspace (`DB.keyspace(name)`): a separate ordered key space of the
/// database with `DB`'s data methods (`get`, `put`, `delete`,
/// `write_batch`, `iterator`, `raw_iterator`, `snapshot`, `prefixed_db`).
/// After `DB.drop_keyspace(name)` its calls raise `cairndb.Error`.
#[pyclass(extends = Data, frozen, module = "cairndb")]
pub struct Keyspace {
    name: String,
}

impl Keyspace {
    pub(crate) fn create(
        py: Python<'_>,
        core: Arc<Core>,
        ks: cairndb::Keyspace,
        db: Py<PyAny>,
    ) -> PyResult<Py<Keyspace>> {
        let name = ks.name().to_owned();
        let target = Target {
            core,
            ks: Some(ks),
            prefix: Vec::new(),
        };
        let init =
            PyClassInitializer::from(Data::new(target, Some(db))).add_subclass(Keyspace { name });
        Py::new(py, init)
    }
}

#[pymethods]
impl Keyspace {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    fn __repr__(&self) -> String {
        format!("<cairndb.Keyspace {:?}>", self.name)
    }
}

/// `Db::stats` as a dict of its main fields.
pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &cairndb::Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tables_per_level", s.tables_per_level.clone())?;
    d.set_item("bytes_per_level", s.bytes_per_level.clone())?;
    d.set_item("memtable_bytes", s.memtable_bytes)?;
    d.set_item("sealed_memtables", s.sealed_memtables)?;
    d.set_item("open_tables", s.open_tables)?;
    d.set_item("table_memory_bytes", s.table_memory_bytes)?;
    d.set_item("block_cache_bytes", s.block_cache_bytes)?;
    d.set_item("last_seqno", s.last_seqno)?;
    d.set_item("flushes", s.flushes)?;
    d.set_item("compactions", s.compactions)?;
    d.set_item("stall_micros", s.stall_micros)?;
    d.set_item("slowdown_micros", s.slowdown_micros)?;
    d.set_item("write_groups", s.write_groups)?;
    d.set_item("write_group_batches", s.write_group_batches)?;
    d.set_item("table_entries", s.table_entries)?;
    d.set_item("value_segments", s.value_segments)?;
    d.set_item("value_bytes_live", s.value_bytes_live)?;
    d.set_item("pinned", s.pinned)?;
    d.set_item("write_error", s.write_error.clone())?;
    Ok(d)
}
