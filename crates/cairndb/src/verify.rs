//! `Db::verify`: an integrity check of a live database.
//!
//! Opening a database already checks what open reads: CURRENT, every
//! manifest edit and every journal record replayed carry checksums, and a
//! bad one fails the open (recovery/mod.rs). What open does not read is
//! the bulk of the data: the blocks of every table, and the separated
//! values their pointers name. `verify` reads all of it from the files,
//! not from the block cache: each table is opened afresh (footer,
//! properties, filter and index checked), checked against its manifest
//! record, and walked entry by entry, so every data block's checksum is
//! checked, the keys are checked to be in strictly increasing internal
//! order, and every value pointer is followed and its value's checksum
//! checked. Writes may go on meanwhile: the tables verified are those of
//! the version current when `verify` began, which it keeps from deletion.
//!
//! A problem does not stop the walk: each is reported with the file and
//! offset the error names, and the next table is verified.

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::format::key::{self, Kind};
use crate::format::table::Table;
use crate::format::vptr::ValuePtr;
use crate::sync;
use crate::version::{TableFile, files};
use std::cmp::Ordering;
use std::sync::Arc;

/// Most problems a report keeps; past it, only their count grows.
pub const PROBLEMS_KEPT: usize = 100;

/// What [`crate::Db::verify`] read and found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Tables verified, and their bytes on disk.
    pub tables: u64,
    pub table_bytes: u64,
    /// Tables in the version verified, and their bytes (what a progress
    /// display counts towards).
    pub tables_total: u64,
    pub table_bytes_total: u64,
    /// Table entries read (versions and tombstones).
    pub entries: u64,
    /// Separated values read through their pointers, and their bytes.
    pub values: u64,
    pub value_bytes: u64,
    /// Problems found, each naming its file and offset (at most
    /// `PROBLEMS_KEPT`), and how many there were in all.
    pub problems: Vec<Error>,
    pub problem_count: u64,
}

impl VerifyReport {
    /// True if nothing was found wrong.
    pub fn is_ok(&self) -> bool {
        self.problem_count == 0
    }

    fn problem(&mut self, e: Error) {
        self.problem_count += 1;
        if self.problems.len() < PROBLEMS_KEPT {
            self.problems.push(e);
        }
    }
}

/// Verifies every table of the current version, calling `progress` after
/// each table.
pub(crate) fn verify(inner: &Inner, progress: &mut dyn FnMut(&VerifyReport)) -> VerifyReport {
    let view = inner.view();
    let files: Vec<sync::Arc<TableFile>> = view
        .version
        .levels
        .iter()
        .flatten()
        .map(sync::Arc::clone)
        .collect();
    let mut report = VerifyReport {
        tables_total: files.len() as u64,
        table_bytes_total: files.iter().map(|f| f.size).sum(),
        ..VerifyReport::default()
    };
    for file in &files {
        if let Err(e) = verify_table(inner, &view, file, &mut report) {
            report.problem(e);
        }
        report.tables += 1;
        report.table_bytes += file.size;
        progress(&report);
    }
    report
}

/// Reads one table whole; an error that stops the walk of the table is
/// returned, value problems are recorded and the walk goes on.
fn verify_table(
    inner: &Inner,
    view: &crate::read::ReadView,
    file: &TableFile,
    report: &mut VerifyReport,
) -> Result<()> {
    let path = files::table(&inner.dir, file.number);
    let handle = inner
        .fs
        .open(&path)
        .map_err(|e| Error::io(format!("opening table {}", path.display()), e))?;
    // No block cache: every block is read from the file and checked.
    let table = Arc::new(Table::open(handle, path.clone(), file.number, None)?);
    table.check_record(
        inner.db_id,
        file.size,
        file.entries,
        &file.smallest,
        &file.largest,
    )?;
    let mut cursor = table.cursor_forward(None);
    // The previous entry's internal key (empty before the first: every
    // internal key is longer than its tag).
    let mut previous: Vec<u8> = Vec::new();
    let mut entries = 0u64;
    while cursor.advance()? {
        entries += 1;
        let ikey = cursor.key();
        let Some((_, tag)) = key::split(ikey) else {
            return Err(Error::corruption(
                &path,
                0,
                format!("entry {entries}: internal key shorter than its tag"),
            ));
        };
        if !previous.is_empty() && key::compare(&previous, ikey) != Ordering::Less {
            return Err(Error::corruption(
                &path,
                0,
                format!("entry {entries}: keys out of order"),
            ));
        }
        previous.clear();
        previous.extend_from_slice(ikey);
        if key::tag_kind(tag) == Kind::Pointer as u8 {
            let Some(ptr) = ValuePtr::decode(cursor.value()) else {
                report.problem(Error::corruption(
                    &path,
                    0,
                    format!("entry {entries}: malformed value pointer"),
                ));
                continue;
            };
            match view.load_ptr(&ptr) {
                Ok(v) => {
                    report.values += 1;
                    report.value_bytes += v.len() as u64;
                }
                Err(e) => report.problem(e),
            }
        }
    }
    report.entries += entries;
    if entries != file.entries {
        return Err(Error::corruption(
            &path,
            0,
            format!(
                "holds {entries} entries, its manifest record says {}",
                file.entries
            ),
        ));
    }
    Ok(())
}
