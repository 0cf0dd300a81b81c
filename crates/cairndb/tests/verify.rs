//! `Db::verify`: a healthy database verifies clean with every table,
//! entry and separated value counted; a damaged table block or a damaged
//! separated value is reported, naming its file, while the walk goes on.

use cairndb::{Db, Options};
use std::path::{Path, PathBuf};

fn opts() -> Options {
    Options {
        create_if_missing: true,
        memtable_bytes: 256 << 10,
        ..Options::default()
    }
}

/// 2,000 keys: even ones with 100-byte values (inline), odd ones with
/// 2 KiB values (separated), flushed to tables, then half overwritten.
fn fill(dir: &Path) {
    let db = Db::open(dir, opts()).expect("open");
    for i in 0..2000u32 {
        let len = if i % 2 == 0 { 100 } else { 2048 };
        db.put(format!("key{i:05}"), vec![(i % 251) as u8; len])
            .expect("put");
    }
    for i in (0..2000u32).step_by(2) {
        db.put(format!("key{i:05}"), vec![7u8; 100]).expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
}

fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn a_healthy_database_verifies_clean_and_counts_everything() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    fill(&dir);
    let db = Db::open(&dir, opts()).expect("reopen");
    let mut calls = 0;
    let report = db.verify_with(|_| calls += 1).expect("verify");
    assert!(report.is_ok(), "problems: {:?}", report.problems);
    assert!(report.tables >= 1);
    assert_eq!(report.tables, report.tables_total);
    assert_eq!(calls, report.tables, "progress after each table");
    assert_eq!(
        report.entries,
        db.stats().table_entries,
        "every table entry read"
    );
    assert!(
        report.values >= 1000 && report.value_bytes >= 1000 * 2048,
        "every separated value read: {} values, {} bytes",
        report.values,
        report.value_bytes
    );
}

#[test]
fn a_damaged_table_block_is_reported_with_its_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    fill(&dir);
    let tables = files_with(&dir, "table");
    assert!(!tables.is_empty());
    // A byte of the first data block: open reads only footers and
    // indexes, so the database still opens.
    flip(&tables[0], 20);
    let db = Db::open(&dir, opts()).expect("reopen");
    let report = db.verify().expect("verify");
    assert!(!report.is_ok(), "a damaged block went unnoticed");
    let named = report.problems.iter().any(|e| {
        e.is_corruption()
            && e.to_string().contains(
                &*tables[0]
                    .file_name()
                    .expect("a file name")
                    .to_string_lossy(),
            )
    });
    assert!(named, "the damaged table is named: {:?}", report.problems);
    assert_eq!(
        report.tables, report.tables_total,
        "the walk goes on past the damaged table"
    );
}

#[test]
fn a_damaged_separated_value_is_reported_with_its_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    fill(&dir);
    let db = Db::open(&dir, opts()).expect("open");
    let clean = db.verify().expect("verify");
    assert!(clean.is_ok(), "problems: {:?}", clean.problems);
    db.close().expect("close");
    // The separated values lie in value streams, journals or values files
    // (docs/format.md); damage a byte in the middle of the largest such
    // file, inside some 2 KiB value.
    let mut holders: Vec<PathBuf> = files_with(&dir, "stream");
    holders.extend(files_with(&dir, "journal"));
    holders.extend(files_with(&dir, "values"));
    let biggest = holders
        .iter()
        .max_by_key(|p| std::fs::metadata(p).expect("meta").len())
        .expect("a file holds the values")
        .clone();
    // Values are 2 KiB of one repeated byte: find a run of them well past
    // the file's start and damage one byte inside it.
    let bytes = std::fs::read(&biggest).expect("read");
    let at = (bytes.len() / 4..bytes.len() - 64)
        .find(|&i| bytes[i..i + 64].iter().all(|&b| b == bytes[i]) && bytes[i] != 0)
        .expect("a value's bytes");
    flip(&biggest, at as u64 + 32);
    let db = Db::open(&dir, opts()).expect("reopen");
    let report = db.verify().expect("verify");
    assert!(!report.is_ok(), "a damaged value went unnoticed");
    let name = biggest
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .to_string();
    assert!(
        report
            .problems
            .iter()
            .any(|e| e.is_corruption() && e.to_string().contains(&name)),
        "the damaged file {name} is named: {:?}",
        report.problems
    );
    assert_eq!(report.problem_count, 1, "one value damaged, one problem");
}
