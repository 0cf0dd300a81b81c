//! Names of the files in a database directory (format.md §Directory).
//!
//! | name               | what                                   |
//! |--------------------|----------------------------------------|
//! | `CURRENT`          | the name of the live manifest, one line |
//! | `MANIFEST-NNNNNN`  | version edits                           |
//! | `NNNNNN.journal`   | write-ahead journal                     |
//! | `NNNNNN.table`     | sorted table                            |
//! | `NNNNNN.values`    | values a compaction moved out of a journal |
//! | `NNNNNN.stream`    | one partition's unsynced values of one journal |
//! | `NNNNNN.free`      | a journal file kept for reuse as a new journal |
//! | `LOCK`             | held by the open handle                 |
//! | `STAGE`            | the direct journal's staging ring       |
//! | `STAGE-NNN`        | a staging ring slot of value streams    |
//! | `*.tmp`            | a file being written; deleted on open   |
//!
//! All numbers come from one counter (`next_file` in the manifest).

use std::path::{Path, PathBuf};

pub fn current(dir: &Path) -> PathBuf {
    dir.join("CURRENT")
}
pub fn manifest_name(n: u64) -> String {
    format!("MANIFEST-{n:06}")
}
pub fn journal(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.journal"))
}
pub fn table(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.table"))
}
pub fn values(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.values"))
}
pub fn stream(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.stream"))
}
pub fn stage(dir: &Path) -> PathBuf {
    dir.join("STAGE")
}
/// Staging ring slot `slot` of the value streams (format.md §Stage ring).
pub fn stream_stage(dir: &Path, slot: u64) -> PathBuf {
    dir.join(format!("STAGE-{slot:03}"))
}
pub fn free(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:06}.free"))
}

/// What a directory entry is, by name.
#[derive(Debug, PartialEq, Eq)]
pub enum FileKind {
    Current,
    Manifest(u64),
    Journal(u64),
    Table(u64),
    Values(u64),
    Stream(u64),
    Free(u64),
    Temp,
    Lock,
    Stage,
    /// A value streams' staging ring slot, by slot number.
    StreamStage(u64),
    Other,
}

pub fn parse(name: &str) -> FileKind {
    if name == "CURRENT" {
        return FileKind::Current;
    }
    if name == "LOCK" {
        return FileKind::Lock;
    }
    if name == "STAGE" {
        return FileKind::Stage;
    }
    if let Some(n) = name.strip_prefix("STAGE-").and_then(|s| s.parse().ok()) {
        return FileKind::StreamStage(n);
    }
    if name.ends_with(".tmp") {
        return FileKind::Temp;
    }
    if let Some(n) = name.strip_prefix("MANIFEST-").and_then(|s| s.parse().ok()) {
        return FileKind::Manifest(n);
    }
    if let Some(n) = name.strip_suffix(".journal").and_then(|s| s.parse().ok()) {
        return FileKind::Journal(n);
    }
    if let Some(n) = name.strip_suffix(".table").and_then(|s| s.parse().ok()) {
        return FileKind::Table(n);
    }
    if let Some(n) = name.strip_suffix(".values").and_then(|s| s.parse().ok()) {
        return FileKind::Values(n);
    }
    if let Some(n) = name.strip_suffix(".stream").and_then(|s| s.parse().ok()) {
        return FileKind::Stream(n);
    }
    if let Some(n) = name.strip_suffix(".free").and_then(|s| s.parse().ok()) {
        return FileKind::Free(n);
    }
    FileKind::Other
}

/// The contents of CURRENT naming manifest `n`: the name, a space, the
/// masked CRC-32C of the name as 8 lowercase hex digits, a newline
/// (format.md §CURRENT).
pub fn current_contents(n: u64) -> String {
    let name = manifest_name(n);
    let crc = crate::format::coding::crc(name.as_bytes());
    format!("{name} {crc:08x}\n")
}

/// The manifest name in CURRENT's contents, if they are well formed and
/// their checksum holds. Also accepts the first format (`NAME\n`, no
/// checksum), written before CURRENT had one.
pub fn parse_current(text: &[u8]) -> Option<&str> {
    let line = std::str::from_utf8(text).ok()?.strip_suffix('\n')?;
    let name = match line.split_once(' ') {
        Some((name, crc)) => {
            let crc = u32::from_str_radix(crc, 16)
                .ok()
                .filter(|_| crc.len() == 8)?;
            (crate::format::coding::crc(name.as_bytes()) == crc).then_some(name)?
        }
        None => line,
    };
    matches!(parse(name), FileKind::Manifest(_)).then_some(name)
}
