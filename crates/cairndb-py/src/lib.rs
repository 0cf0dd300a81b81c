//! `cairndb._cairndb`: CairnDB for Python with plyvel's API.
//!
//! The Python package `cairndb` (python/cairndb/) re-exports this module
//! and adds what is plain Python (the exception classes, `destroy_db`).
//! The map:
//! - `db.rs`: `DB`, `PrefixedDB`, `WriteBatch`, `Snapshot`, options.
//! - `cursor.rs`: `Iterator` and `RawIterator`, bidirectional cursors over
//!   the engine's range iterators.
//! - `extras.rs`: what CairnDB has beyond LevelDB: `Transaction`,
//!   `Keyspace`, `stats()`.
//!
//! Threads: every class is `frozen` and `Send + Sync`; mutable state sits
//! behind a `parking_lot::Mutex`. A mutex is only ever taken with the GIL
//! released (inside `Python::detach`), and released before the GIL is
//! taken back, so a thread waiting for the GIL never holds one and a thread
//! holding the GIL never waits for one held by a thread that waits for the
//! GIL.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyType};
use std::borrow::Cow;

mod cursor;
mod db;
mod extras;

/// The message of the `RuntimeError` raised by any call on a closed
/// database (plyvel's wording).
pub(crate) const CLOSED_DB: &str = "Database is closed";
/// The same for an iterator whose database or itself was closed.
pub(crate) const CLOSED_ITER: &str = "Database or iterator is closed";

/// `cairndb.<name>` from `cairndb/_errors.py`, built with `msg`; if the
/// module cannot be imported, the import error.
pub(crate) fn py_error(py: Python<'_>, name: &str, msg: String) -> PyErr {
    let ty = py
        .import("cairndb._errors")
        .and_then(|m| m.getattr(name))
        .and_then(|t| t.cast_into::<PyType>().map_err(PyErr::from));
    match ty {
        Ok(ty) => PyErr::from_type(ty, msg),
        Err(e) => e,
    }
}

/// Maps an engine error onto plyvel's exceptions: `Io` → `cairndb.IOError`
/// (also an `OSError`), `Corruption` → `cairndb.CorruptionError`,
/// `Conflict` → `cairndb.ConflictError`, `Closed` → `RuntimeError` (as
/// plyvel answers for a closed database), everything else `cairndb.Error`.
pub(crate) fn engine_err(py: Python<'_>, e: cairndb::Error) -> PyErr {
    let name = match &e {
        cairndb::Error::Closed => return PyRuntimeError::new_err(CLOSED_DB),
        cairndb::Error::Io { .. } => "IOError",
        cairndb::Error::Corruption { .. } => "CorruptionError",
        cairndb::Error::Conflict(_) => "ConflictError",
        _ => "Error",
    };
    py_error(py, name, e.to_string())
}

/// `Result<T, cairndb::Error>` → `PyResult<T>` once the GIL is held again.
pub(crate) trait OrPy<T> {
    fn or_py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrPy<T> for cairndb::Result<T> {
    fn or_py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| engine_err(py, e))
    }
}

/// The bytes of a key, value or prefix argument: `bytes` borrowed, any
/// other object with a byte buffer (`bytearray`, `memoryview`) copied.
/// `str` is refused with `TypeError`, as plyvel refuses it: keys are bytes,
/// and no encoding is guessed.
pub(crate) fn arg_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be bytes, not str (encode it first)"
        )));
    }
    match PyBuffer::<u8>::get(obj) {
        Ok(buf) => Ok(Cow::Owned(buf.to_vec(obj.py())?)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be a bytes-like object, not {}",
            obj.get_type().name()?
        ))),
    }
}

/// `arg_bytes` for an optional argument (`None` stays `None`).
pub(crate) fn opt_bytes(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(arg_bytes(o, what)?.into_owned())),
    }
}

/// The smallest key greater than every key starting with `prefix`, or
/// `None` if there is none (empty or all 0xff).
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

#[pymodule]
fn _cairndb(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<db::DB>()?;
    m.add_class::<db::PrefixedDB>()?;
    m.add_class::<db::WriteBatch>()?;
    m.add_class::<db::Snapshot>()?;
    m.add_class::<cursor::Iterator>()?;
    m.add_class::<cursor::RawIterator>()?;
    m.add_class::<extras::Transaction>()?;
    m.add_class::<extras::Keyspace>()?;
    m.add_class::<extras::TxnIterator>()?;
    m.add_class::<db::Data>()?;
    m.add_function(wrap_pyfunction!(db::repair_db, m)?)?;
    Ok(())
}
