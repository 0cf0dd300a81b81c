//! Helpers shared by the integration tests: whole-directory images of a
//! `MemFs` (for crash simulation and byte-level damage) and small readers.
#![allow(dead_code)]

use cairndb::io::{Fs, MemFs};
use cairndb::{Db, Options};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// File name → bytes of every file in a directory.
pub type Image = BTreeMap<String, Vec<u8>>;

/// Copies every file of `dir` (live bytes, synced or not) out of `fs`.
/// Callers make sure no background work is changing the directory.
pub fn snapshot(fs: &MemFs, dir: &Path) -> Image {
    let mut image = Image::new();
    for name in fs.list(dir).expect("list") {
        let file = fs.open(&dir.join(&name)).expect("open for image");
        let mut buf = vec![0u8; file.len() as usize];
        file.read_exact_at(&mut buf, 0).expect("read for image");
        image.insert(name, buf);
    }
    image
}

/// A fresh `MemFs` holding `image` in `dir`, all of it durable.
pub fn restore(image: &Image, dir: &Path) -> MemFs {
    let fs = MemFs::new();
    fs.create_dir_all(dir).expect("mkdir");
    for (name, bytes) in image {
        let mut f = fs.create(&dir.join(name)).expect("create");
        f.append(bytes).expect("append");
        f.sync().expect("sync");
    }
    fs.sync_dir(dir).expect("sync dir");
    fs
}

/// Options on `fs` with a memtable of `memtable` bytes.
pub fn mem_opts(fs: &MemFs, memtable: usize) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: memtable,
        ..Options::default()
    }
}

/// Every key/value pair, or the first error.
pub fn scan(db: &Db) -> cairndb::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    db.iter().collect()
}

/// Names in `dir` of the given extension, sorted (file numbers are
/// zero-padded, so this is numeric order).
pub fn files_with(fs: &MemFs, dir: &Path, ext: &str) -> Vec<String> {
    let mut v: Vec<String> = fs
        .list(dir)
        .expect("list")
        .into_iter()
        .filter(|n| n.ends_with(ext))
        .collect();
    v.sort();
    v
}

/// Offsets of the records of a journal or manifest image (16-byte header,
/// payload length at bytes 4..8), stopping at the first incomplete one.
pub fn record_offsets(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 16 <= data.len() {
        let len = u32::from_le_bytes(data[pos + 4..pos + 8].try_into().expect("4 bytes")) as usize;
        let end = pos + 16 + len;
        if end > data.len() {
            break;
        }
        out.push((pos, end));
        pos = end;
    }
    out
}

/// Waits until no sealed memtable is waiting for the flush thread, then a
/// little longer for the thread to finish deleting the flushed journal.
pub fn quiesce(db: &Db) {
    for _ in 0..2000 {
        if db.stats().sealed_memtables == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(
        db.stats().sealed_memtables,
        0,
        "flush thread never caught up"
    );
    std::thread::sleep(std::time::Duration::from_millis(30));
}
pub mod plan;

/// The value of environment variable `name` as a number, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
