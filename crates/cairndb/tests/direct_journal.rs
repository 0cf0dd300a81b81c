//! The direct journal (`Options::journal_direct`) on the real file system:
//! values read back while their bytes are only in the staging ring, across
//! journal seals and reopen; unsynced writes recovered from the ring after
//! a simulated kill -9 (the directory's files copied while the handle is
//! open: what another process sees of them is what survives the kill),
//! and lost without the ring (so the check can fail); synced writes in the
//! journal file alone; the ring file removed when the option goes off.
//! Real process kills with the option on are in `tests/kill.rs`.
#![cfg(unix)]

mod common;

use cairndb::{Db, Options, WriteBatch, WriteOptions};
use std::path::Path;

fn opts(memtable: usize) -> Options {
    Options {
        journal_direct: true,
        journal_ring_bytes: 2 << 20,
        stage_streams: Some(true),
        memtable_bytes: memtable,
        ..Options::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// 4 KiB values (separated: they live in the journal) and, every 7th, a
/// small inline one.
fn value(i: usize, round: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(7) { 40 } else { 4096 };
    let mut v = format!("{i}/{round}:").into_bytes();
    v.resize(len, b'a' + ((i + round) % 26) as u8);
    v
}

fn put(db: &Db, i: usize, round: usize, sync: bool) {
    let mut b = WriteBatch::new();
    b.put(key(i), value(i, round)).expect("direct journal test");
    db.write(b, &WriteOptions { sync })
        .expect("direct journal test");
}

fn check(db: &Db, n: usize, round: usize) {
    for i in 0..n {
        let got = db.get(key(i)).expect("direct journal test");
        assert!(
            got.as_deref() == Some(&value(i, round)[..]),
            "key {i} round {round}: got {:?}",
            got.map(|v| String::from_utf8_lossy(&v[..v.len().min(16)]).into_owned())
        );
    }
}

/// Copies the files of `from` to `to`, the staging rings first (a ring's
/// `flushed` must not run ahead of the copy of its file), without LOCK.
fn copy_dir(from: &Path, to: &Path, with_stage: bool) {
    std::fs::create_dir_all(to).expect("direct journal test");
    let mut names: Vec<String> = std::fs::read_dir(from)
        .expect("direct journal test")
        .map(|e| {
            e.expect("direct journal test")
                .file_name()
                .into_string()
                .expect("direct journal test")
        })
        .filter(|n| n != "LOCK" && (with_stage || !n.starts_with("STAGE")))
        .collect();
    // The journal's ring (`STAGE`) and the value streams' (`STAGE-NNN`).
    names.sort_by_key(|n| !n.starts_with("STAGE"));
    for n in names {
        std::fs::copy(from.join(&n), to.join(&n)).expect("direct journal test");
    }
}

#[test]
fn values_read_back_from_ring_and_file_across_seals_and_reopen() {
    let dir = tempfile::tempdir().expect("direct journal test");
    // 3,000 puts of ~4 KiB: the ring wraps many times, journals are sealed
    // (memtable of 256 KiB of pointers) and flushed to tables.
    let n = 3000;
    {
        let db = Db::open(dir.path(), opts(256 << 10)).expect("direct journal test");
        for i in 0..n {
            put(&db, i, 0, i % 500 == 0);
            // Read back at once: the value is in the ring.
            assert_eq!(
                db.get(key(i)).expect("direct journal test"),
                Some(value(i, 0))
            );
        }
        check(&db, n, 0);
        let scanned = common::scan(&db).expect("direct journal test");
        assert_eq!(scanned.len(), n);
        db.close().expect("direct journal test");
    }
    assert!(dir.path().join("STAGE").exists());
    let db = Db::open(dir.path(), opts(256 << 10)).expect("direct journal test");
    check(&db, n, 0);
    drop(db);
    // Off again: the ring file goes.
    let db = Db::open(
        dir.path(),
        Options {
            journal_direct: false,
            ..opts(256 << 10)
        },
    )
    .expect("direct journal test");
    check(&db, n, 0);
    assert!(!dir.path().join("STAGE").exists());
}

#[test]
fn unsynced_writes_survive_a_kill_through_the_ring() {
    let dir = tempfile::tempdir().expect("direct journal test");
    let n = 1500;
    // A memtable big enough that the journal is never sealed: only the
    // ring and the chunks the flusher wrote hold these writes.
    let db = Db::open(dir.path(), opts(64 << 20)).expect("direct journal test");
    for i in 0..n {
        put(&db, i, 1, false);
    }
    // As after kill -9 now: the files as the kernel holds them.
    let killed = tempfile::tempdir().expect("direct journal test");
    copy_dir(dir.path(), killed.path(), true);
    let without_ring = tempfile::tempdir().expect("direct journal test");
    copy_dir(dir.path(), without_ring.path(), false);
    drop(db);

    let db = Db::open(killed.path(), opts(64 << 20)).expect("direct journal test");
    check(&db, n, 1);
    drop(db);
    // Without the ring the last writes are gone: the ring is what kept them.
    let db = Db::open(without_ring.path(), opts(64 << 20)).expect("direct journal test");
    let missing = (0..n)
        .filter(|&i| db.get(key(i)).expect("direct journal test").is_none())
        .count();
    assert!(missing > 0, "every write was in the journal file already");
    // What is there is a prefix, and right.
    for i in 0..n - missing {
        assert_eq!(
            db.get(key(i)).expect("direct journal test"),
            Some(value(i, 1))
        );
    }
}

#[test]
fn synced_writes_are_in_the_journal_file() {
    let dir = tempfile::tempdir().expect("direct journal test");
    let db = Db::open(dir.path(), opts(64 << 20)).expect("direct journal test");
    for i in 0..300 {
        put(&db, i, 2, i == 299);
    }
    // The ring lost (a power cut takes the page cache): the synced write
    // and everything before it are in the journal file.
    let copy = tempfile::tempdir().expect("direct journal test");
    copy_dir(dir.path(), copy.path(), false);
    drop(db);
    let db = Db::open(copy.path(), opts(64 << 20)).expect("direct journal test");
    check(&db, 300, 2);
}

/// Sealed journals on `dir` whose every byte the page cache holds, and
/// sealed journals in all (the newest journal is the one being written),
/// leaving out the `skip_oldest` oldest; a journal removed while it looks
/// counts as neither.
fn cached_sealed_journals(dir: &Path, skip_oldest: usize) -> (usize, usize) {
    use cairndb::io::{Fs, PosixFs};
    let mut journals: Vec<_> = std::fs::read_dir(dir)
        .expect("direct journal test")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    journals.sort();
    journals.pop();
    let sealed = journals.get(skip_oldest..).unwrap_or_default();
    let cached = sealed
        .iter()
        .filter(|p| PosixFs.open(p).is_ok_and(|r| r.cached(0, r.len())))
        .count();
    (cached, sealed.len())
}

/// Small journals (many seals), values read through the page cache, and
/// `warm_written_values` as asked: the read-back tests' database.
fn warm_opts(warm: bool) -> Options {
    Options {
        journal_bytes: 1 << 20,
        value_reads: cairndb::ValueReads::PageCache,
        warm_written_values: warm,
        ..opts(256 << 10)
    }
}

/// Whether this kernel tells what the page cache holds (`cachestat`): a
/// file just read must show as cached.
fn page_cache_visible() -> bool {
    use cairndb::io::{Fs, PosixFs};
    let probe = tempfile::tempdir().expect("direct journal test");
    let file = probe.path().join("probe");
    std::fs::write(&file, vec![7u8; 64 << 10]).expect("direct journal test");
    let r = PosixFs.open(&file).expect("direct journal test");
    let _ = std::fs::read(&file);
    r.cached(0, r.len())
}

/// `warm_written_values`: while values are read through the page cache,
/// each sealed journal is read into it in the background once writes
/// pause, so the first reads of its values need not wait for the device.
/// Without the option the direct journal leaves them out of the page
/// cache.
#[test]
fn sealed_journals_are_read_into_the_page_cache_when_asked() {
    if !page_cache_visible() {
        eprintln!("skipped: this kernel cannot tell what the page cache holds");
        return;
    }
    for warm in [false, true] {
        let dir = tempfile::tempdir().expect("direct journal test");
        let db = Db::open(dir.path(), warm_opts(warm)).expect("direct journal test");
        for i in 0..1200 {
            put(&db, i, 0, false);
        }
        db.flush().expect("direct journal test");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (mut cached, mut sealed) = cached_sealed_journals(dir.path(), 0);
        while warm && cached < sealed && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(50));
            (cached, sealed) = cached_sealed_journals(dir.path(), 0);
        }
        assert!(sealed >= 3, "journals sealed: {sealed}");
        if warm {
            assert_eq!(cached, sealed, "every sealed journal read in");
        } else {
            assert_eq!(cached, 0, "written directly, none is in the page cache");
        }
        check(&db, 1200, 0);
    }
}

/// `warm_written_values` while writes go on: a writer that never pauses
/// for long keeps the read-back waiting, unless values are being read;
/// then sealed journals are read into the page cache beside the writes.
/// The reader reads one value over and over (its own reads bring in at
/// most the pages around it), so a journal wholly in the page cache was
/// read back by the engine.
#[test]
fn sealed_journals_are_read_back_while_writes_go_on_if_values_are_read() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    if !page_cache_visible() {
        eprintln!("skipped: this kernel cannot tell what the page cache holds");
        return;
    }
    let dir = tempfile::tempdir().expect("direct journal test");
    let db = Db::open(dir.path(), warm_opts(true)).expect("direct journal test");
    put(&db, 1, 0, false);
    let stop = AtomicBool::new(false);
    // Journals wholly in the page cache, of those sealed after the
    // reader's (the oldest), seen while the writer still wrote.
    let seen = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut i = 2;
            while !stop.load(Ordering::Relaxed) {
                // ~16 MB/s: a 1 MiB journal sealed every ~65 ms, and no
                // pause near the 200 ms after which the read-back runs
                // anyway.
                for _ in 0..4 {
                    put(&db, i, 0, false);
                    i += 1;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            i
        });
        let until = Instant::now() + Duration::from_secs(10);
        let mut seen = (0, 0);
        while Instant::now() < until {
            for _ in 0..64 {
                let got = db.get(key(1)).expect("direct journal test");
                assert_eq!(got.as_deref(), Some(&value(1, 0)[..]));
            }
            seen = cached_sealed_journals(dir.path(), 1);
            if seen.0 >= 2 && seen.1 >= 3 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        let written = writer.join().expect("direct journal test");
        check_range(&db, 2..written);
        seen
    });
    assert!(seen.1 >= 3, "journals sealed: {}", seen.1);
    assert!(
        seen.0 >= 2,
        "journals read back while writing: {} of {}",
        seen.0,
        seen.1
    );
}

fn check_range(db: &Db, keys: std::ops::Range<usize>) {
    for i in keys {
        let got = db.get(key(i)).expect("direct journal test");
        assert!(got.as_deref() == Some(&value(i, 0)[..]), "key {i}");
    }
}

/// With value streams (the default), each stream is written through a
/// ring slot of its own (`STAGE-NNN`): an unsynced value appended after
/// its stream's last direct write survives a kill in the ring, and is
/// lost without it while the journal's ring alone is kept. Values of
/// 20,000 bytes also straddle the point below which the stream's file
/// holds every byte (a chunk's end): their head is in the file, their
/// tail in the ring.
#[test]
fn unsynced_values_survive_a_kill_through_their_streams_ring() {
    for len in [4096, 20_000] {
        let stream_value = |i: usize| {
            let mut v = value(i, 3);
            v.resize(len, b'z');
            v
        };
        let dir = tempfile::tempdir().expect("direct journal test");
        // 4.8 MB of values into the first journal's one stream: its file
        // holds the whole MiB chunks, the ring the rest; the journal
        // (small pointer records) is in its own ring.
        let n = 4_800_000 / len;
        let db = Db::open(dir.path(), opts(64 << 20)).expect("direct journal test");
        for i in 0..n {
            db.put(key(i), stream_value(i))
                .expect("direct journal test");
        }
        assert!(dir.path().join("STAGE-000").exists(), "a stream ring slot");
        // Let the stream's flusher write its whole chunks, so the slot's
        // `flushed` is where the stream file ends, as after a kill.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let killed = tempfile::tempdir().expect("direct journal test");
        copy_dir(dir.path(), killed.path(), true);
        let journal_ring_only = tempfile::tempdir().expect("direct journal test");
        copy_dir(dir.path(), journal_ring_only.path(), true);
        for e in std::fs::read_dir(journal_ring_only.path()).expect("direct journal test") {
            let name = e.expect("direct journal test").file_name();
            if name.to_string_lossy().starts_with("STAGE-") {
                std::fs::remove_file(journal_ring_only.path().join(name))
                    .expect("direct journal test");
            }
        }
        drop(db);

        let db = Db::open(killed.path(), opts(64 << 20)).expect("direct journal test");
        for i in 0..n {
            let got = db.get(key(i)).expect("direct journal test");
            assert!(
                got.as_deref() == Some(&stream_value(i)[..]),
                "values of {len} bytes: key {i} not recovered"
            );
        }
        drop(db);
        let db = Db::open(journal_ring_only.path(), opts(64 << 20)).expect("direct journal test");
        let missing = (0..n)
            .filter(|&i| db.get(key(i)).expect("direct journal test").is_none())
            .count();
        assert!(
            missing > 0,
            "values of {len} bytes: every one was in its stream's file already"
        );
        for i in 0..n - missing {
            assert_eq!(
                db.get(key(i)).expect("direct journal test"),
                Some(stream_value(i))
            );
        }
    }
}
