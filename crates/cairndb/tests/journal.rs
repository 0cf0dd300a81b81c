//! Journal pre-writing (`Options::journal_prewrite`): synced commits that
//! would grow the journal write zeros ahead of themselves once, so later
//! synced commits overwrite allocated blocks. Checked here: synced commits
//! pre-write and unsynced ones never do; the option turns it off; close
//! and sealing cut the zeros off again; a power cut while appends overwrite
//! pre-written blocks keeps every synced write and opens cleanly; the same
//! on the real file system. Also: large synced groups, whose memtable
//! inserts run on a worker during the sync, publish whole or not at all.

mod common;

use cairndb::io::{Crash, Fault, FaultKind, MemFs, OpKind};
use cairndb::{Db, Error, Options, WriteBatch, WriteOptions};
use common::files_with;
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/db";

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn opts(fs: &MemFs, prewrite: bool) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        background_compaction: false,
        journal_prewrite: prewrite,
        ..Options::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("{i}:").into_bytes();
    v.resize(300 + i % 700, b'a' + (i % 26) as u8);
    v
}

const SYNCED: WriteOptions = WriteOptions { sync: true };
const UNSYNCED: WriteOptions = WriteOptions { sync: false };

/// The open journal (the newest `.journal` file) and its size.
fn journal_len(fs: &MemFs) -> u64 {
    let mut names = files_with(fs, dir(), ".journal");
    names.sort();
    let newest = names.last().expect("a journal");
    fs.file_len(&dir().join(newest)).expect("journal length")
}

#[test]
fn synced_commits_prewrite_and_close_cuts_the_zeros_off() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, true)).expect("open");
    let n = 400;
    let mut appended = 0u64;
    for i in 0..n {
        db.put_opt(key(i), value(i), &SYNCED).expect("put");
        appended += value(i).len() as u64;
    }
    let prewrites = db.stats().journal_prewrites;
    // Each pre-write covers 64 groups' worth of bytes: far fewer than one
    // per commit, and at least one.
    assert!(
        prewrites >= 1 && prewrites <= n as u64 / 16,
        "{prewrites} pre-writes for {n} synced commits"
    );
    let before = journal_len(&fs);
    assert!(
        before > appended,
        "journal {before} B for {appended} B of values"
    );
    assert_eq!(before % (16 << 10), 0, "pre-written to a 16 KiB multiple");
    db.close().expect("close");
    let after = journal_len(&fs);
    assert!(after < before, "close left {after} of {before} bytes");
    let db = Db::open(dir(), opts(&fs, true)).expect("reopen");
    for i in 0..n {
        assert_eq!(db.get(key(i)).expect("get"), Some(value(i)), "key {i}");
    }
}

#[test]
fn unsynced_writes_and_the_option_off_never_prewrite() {
    for (prewrite, wo) in [(true, UNSYNCED), (false, SYNCED)] {
        let fs = MemFs::new();
        let db = Db::open(dir(), opts(&fs, prewrite)).expect("open");
        for i in 0..200 {
            db.put_opt(key(i), value(i), &wo).expect("put");
        }
        assert_eq!(db.stats().journal_prewrites, 0, "prewrite {prewrite}");
        let before = journal_len(&fs);
        db.close().expect("close");
        assert_eq!(journal_len(&fs), before, "nothing to cut off");
    }
}

#[test]
fn sealing_a_journal_cuts_its_zeros_off() {
    let fs = MemFs::new();
    // Values separated: closed journals stay as value segments after
    // their memtables flush, so every one can be looked at.
    let o = Options {
        journal_bytes: 64 << 10,
        value_separation_min: 64,
        ..opts(&fs, true)
    };
    let db = Db::open(dir(), o.clone()).expect("open");
    for i in 0..600 {
        db.put_opt(key(i), value(i), &SYNCED).expect("put");
    }
    assert!(db.stats().journal_prewrites >= 2);
    let mut names = files_with(&fs, dir(), ".journal");
    names.sort();
    assert!(names.len() >= 3, "journals: {names:?}");
    // Every closed journal ends at its last record: its last byte belongs
    // to a value, never a pre-written zero.
    for name in &names[..names.len() - 1] {
        let path = dir().join(name);
        let len = fs.file_len(&path).expect("len") as usize;
        let mut last = 0u8;
        fs.mutate_byte(&path, len - 1, |b| {
            last = b;
            b
        });
        assert_ne!(last, 0, "{name} ends in a zero ({len} bytes)");
    }
    drop(db);
    let db = Db::open(dir(), o).expect("reopen");
    for i in 0..600 {
        assert_eq!(db.get(key(i)).expect("get"), Some(value(i)), "key {i}");
    }
}

/// Power cuts while unsynced and synced commits overwrite pre-written
/// blocks: every synced write is back, and no torn page makes open fail.
#[test]
fn a_power_cut_over_prewritten_blocks_keeps_every_synced_write() {
    for seed in 0..24u64 {
        let fs = MemFs::with_seed(seed);
        let db = Db::open(dir(), opts(&fs, true)).expect("open");
        let n = 150 + (seed as usize * 7) % 100;
        let mut durable = 0;
        for i in 0..n {
            let sync = i % 3 == 0 || i % 7 == 0;
            let wo = if sync { SYNCED } else { UNSYNCED };
            db.put_opt(key(i), value(i), &wo).expect("put");
            if sync {
                durable = i + 1;
            }
        }
        assert!(db.stats().journal_prewrites >= 1);
        let crash = match seed % 3 {
            0 => Crash::Clean,
            1 => Crash::Torn,
            _ => Crash::All,
        };
        let image = fs.crash_image(crash, seed);
        drop(db);
        let db = Db::open(dir(), opts(&image, true))
            .unwrap_or_else(|e| panic!("seed {seed} {crash:?}: open failed: {e}"));
        for i in 0..durable {
            assert_eq!(
                db.get(key(i)).expect("get"),
                Some(value(i)),
                "seed {seed} {crash:?}: synced key {i} of {durable}"
            );
        }
        // Whatever survived past the last sync is a prefix of the writes.
        let mut gone = false;
        for i in durable..n {
            match db.get(key(i)).expect("get") {
                Some(v) => {
                    assert!(!gone, "seed {seed} {crash:?}: key {i} after a hole");
                    assert_eq!(v, value(i));
                }
                None => gone = true,
            }
        }
    }
}

#[test]
fn prewriting_on_the_real_file_system() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = Options {
        background_compaction: false,
        ..Options::default()
    };
    let db = Db::open(tmp.path(), o.clone()).expect("open");
    for i in 0..300 {
        db.put_opt(key(i), value(i), &SYNCED).expect("put");
    }
    assert!(db.stats().journal_prewrites >= 1);
    let journal = || {
        let mut j: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("list")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "journal"))
            .collect();
        j.sort();
        let p = j.pop().expect("a journal");
        (p.clone(), std::fs::metadata(&p).expect("stat").len())
    };
    let (path, before) = journal();
    let bytes = std::fs::read(&path).expect("read");
    assert_eq!(
        bytes.last(),
        Some(&0),
        "the pre-written tail reads as zeros"
    );
    db.close().expect("close");
    let after = std::fs::metadata(&path).expect("stat").len();
    assert!(after < before, "close left {after} of {before} bytes");
    let db = Db::open(tmp.path(), o).expect("reopen");
    for i in 0..300 {
        assert_eq!(db.get(key(i)).expect("get"), Some(value(i)), "key {i}");
    }
}

/// A synced group of many ops has its memtable inserts done on a worker
/// thread while the leader waits for the journal's sync. On return every
/// op is visible; after a failed sync none is (the inserts happened, but
/// their seqnos were never published), the handle refuses writes, and the
/// reopened database holds the batch whole or not at all.
#[test]
fn large_synced_batches_show_whole_on_return_and_not_after_a_failed_sync() {
    let fs = MemFs::new();
    // Without pre-writing, the next sync after the fault is the commit's.
    let db = Db::open(dir(), opts(&fs, false)).expect("open");
    let batch = |from: usize| {
        let mut b = WriteBatch::new();
        for i in from..from + 64 {
            b.put(key(i), value(i)).expect("put");
        }
        b
    };
    for round in 0..20 {
        db.write(batch(round * 64), &SYNCED).expect("write");
        for i in round * 64..round * 64 + 64 {
            assert_eq!(db.get(key(i)).expect("get"), Some(value(i)), "key {i}");
        }
    }
    let failed = 20 * 64;
    fs.inject(Fault {
        path_contains: Some(".journal".into()),
        ..Fault::once(OpKind::Sync, FaultKind::Eio)
    });
    match db.write(batch(failed), &SYNCED) {
        Err(Error::Io { .. }) => {}
        other => panic!("a failed journal sync gave {other:?}"),
    }
    for i in failed..failed + 64 {
        assert_eq!(db.get(key(i)).expect("get"), None, "unpublished key {i}");
    }
    assert_eq!(
        db.iter().count(),
        failed,
        "a scan shows only published keys"
    );
    assert!(matches!(db.put(key(0), value(0)), Err(Error::Poisoned(_))));
    drop(db);
    let db = Db::open(dir(), opts(&fs, false)).expect("reopen");
    for i in 0..failed {
        assert_eq!(db.get(key(i)).expect("get"), Some(value(i)), "key {i}");
    }
    let back = (failed..failed + 64)
        .filter(|&i| db.get(key(i)).expect("get").is_some())
        .count();
    assert!(back == 0 || back == 64, "{back} of 64 ops of one batch");
}

/// Options for the recycling tests: small memtables on `fs`, values
/// inline (so a flushed journal holds nothing live and becomes obsolete),
/// no compaction thread.
fn recycling_opts(fs: &MemFs, recycle: bool) -> Options {
    Options {
        memtable_bytes: 16 << 10,
        value_separation_min: usize::MAX,
        journal_recycle: recycle,
        ..opts(fs, true)
    }
}

/// Writes `n` puts overwriting 40 keys (key `i % 40` gets `value(i)`),
/// every third one synced; returns the index after the last synced one.
fn overwrite_keys(db: &Db, from: usize, n: usize) -> usize {
    let mut durable = 0;
    for i in from..from + n {
        let sync = i % 3 == 0;
        let wo = if sync { SYNCED } else { UNSYNCED };
        db.put_opt(key(i % 40), value(i), &wo).expect("put");
        if sync {
            durable = i + 1;
        }
    }
    durable
}

/// What the 40 keys hold after writes `0..upto`.
fn expected(upto: usize) -> Vec<Option<Vec<u8>>> {
    (0..40)
        .map(|k| (0..upto).rev().find(|i| i % 40 == k).map(value))
        .collect()
}

fn state(db: &Db) -> Vec<Option<Vec<u8>>> {
    (0..40).map(|k| db.get(key(k)).expect("get")).collect()
}

/// Flushed journals become free files (at most `FREE_JOURNALS_MAX`) and
/// new journals are made from them; every write survives reopens; with
/// the option off, journals are deleted and none is reused.
#[test]
fn obsolete_journals_are_recycled() {
    for recycle in [true, false] {
        let fs = MemFs::new();
        let db = Db::open(dir(), recycling_opts(&fs, recycle)).expect("open");
        overwrite_keys(&db, 0, 600);
        db.flush().expect("flush");
        let stats = db.stats();
        let free = files_with(&fs, dir(), ".free").len();
        if recycle {
            assert!(stats.journals_recycled >= 3, "{stats:?}");
            assert!(
                (1..=cairndb::limits::FREE_JOURNALS_MAX).contains(&free),
                "{free} free files"
            );
            assert_eq!(stats.journals_free, free);
        } else {
            assert_eq!((stats.journals_recycled, free), (0, 0), "{stats:?}");
        }
        assert!(files_with(&fs, dir(), ".journal").len() <= 2);
        assert_eq!(state(&db), expected(600));
        drop(db);
        let db = Db::open(dir(), recycling_opts(&fs, recycle)).expect("reopen");
        assert_eq!(state(&db), expected(600), "recycle {recycle}");
        overwrite_keys(&db, 600, 300);
        assert_eq!(state(&db), expected(900), "recycle {recycle}");
        if recycle {
            assert!(
                db.stats().journals_recycled >= 1,
                "free files found at open are reused"
            );
        }
    }
}

/// Power cuts while journals are being made from free files and written
/// over their old lives' records: every synced write is back, the state is
/// that of a prefix of the writes (an old record replayed would show an
/// older value, or break the seqno chain and fail the open), also when the
/// cut comes right after a seal, before the new journal has any record.
#[test]
fn power_cuts_in_recycled_journals_keep_synced_writes_and_nothing_old() {
    let mut cut_after_recycling = 0;
    for seed in 0..36u64 {
        let fs = MemFs::with_seed(seed);
        let db = Db::open(dir(), recycling_opts(&fs, true)).expect("open");
        let n = 300 + (seed as usize * 37) % 400;
        let mut durable = overwrite_keys(&db, 0, n);
        let recycled = db.stats().journals_recycled;
        if seed % 4 == 3 {
            // Right after a seal that took a free file.
            db.flush().expect("flush");
            durable = n;
        }
        cut_after_recycling += usize::from(recycled > 0);
        let crash = match seed % 3 {
            0 => Crash::Clean,
            1 => Crash::Torn,
            _ => Crash::All,
        };
        let image = fs.crash_image(crash, seed);
        drop(db);
        let db = Db::open(dir(), recycling_opts(&image, true))
            .unwrap_or_else(|e| panic!("seed {seed} {crash:?}: open failed: {e}"));
        let got = state(&db);
        let prefix = (durable..=n).find(|&p| expected(p) == got);
        assert!(
            prefix.is_some(),
            "seed {seed} {crash:?}: state is no prefix from {durable} to {n}"
        );
    }
    assert!(
        cut_after_recycling >= 30,
        "{cut_after_recycling} runs recycled"
    );
}

/// A journal filling with unsynced writes is synced in the background
/// each `PRESYNC_BYTES` (8 MiB), at most one sync in flight, so sealing a
/// full journal waits only for its last few MiB; writes on either side of
/// the background syncs and the seal read back after reopening. Only the
/// buffered journal has them: the direct one leaves nothing in the page
/// cache to sync.
#[test]
fn filling_journals_are_synced_in_the_background() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = Options {
        background_compaction: false,
        journal_direct: false,
        journal_bytes: 20 << 20,
        value_separation_min: 1024,
        // The values in the journal, which they fill.
        value_partitions: 0,
        ..Options::default()
    };
    let big = |i: usize| {
        let mut v = format!("{i}:").into_bytes();
        v.resize(4096, b'a' + (i % 26) as u8);
        v
    };
    let n = 7_500; // ~30 MiB: a seal at 20 MiB, background syncs around it
    let db = Db::open(tmp.path(), o.clone()).expect("open");
    for i in 0..n {
        db.put(key(i), big(i)).expect("put");
    }
    let s = db.stats();
    assert!(s.journal_presyncs >= 2, "{s:?}");
    assert!(
        s.flushes + s.sealed_memtables as u64 >= 1,
        "no journal sealed: {s:?}"
    );
    db.close().expect("close");
    let db = Db::open(tmp.path(), o).expect("reopen");
    for i in (0..n).step_by(7) {
        assert_eq!(db.get(key(i)).expect("get"), Some(big(i)), "key {i}");
    }
    db.close().expect("close");
}
