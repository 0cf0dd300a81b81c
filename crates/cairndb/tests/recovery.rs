//! Recovery contracts: what survives a power cut or a process crash, how a
//! torn or damaged journal is treated, what damaged tables and metadata
//! produce, and the open-time options. Randomized tests print their seed.

mod common;

use cairndb::io::{Fs, MemFs, PosixFs};
use cairndb::{Db, Error, Options, WriteBatch, WriteOptions};
use common::{Image, files_with, mem_opts, quiesce, record_offsets, restore, scan, snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/db";

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn batch_key(batch: usize, j: usize) -> Vec<u8> {
    format!("b{batch:05}-{j:02}").into_bytes()
}

fn batch_value(batch: usize, j: usize) -> Vec<u8> {
    format!("v{batch}-{j}-{}", "x".repeat(batch % 50)).into_bytes()
}

/// Groups a scan by batch id and checks each present batch is whole and
/// holds the written values. Returns the present batch ids, ascending.
fn present_batches(rows: &[(Vec<u8>, Vec<u8>)], sizes: &[usize], ctx: &str) -> Vec<usize> {
    let mut by_batch: BTreeMap<usize, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
    for (k, v) in rows {
        let s = std::str::from_utf8(k).expect("utf8 key");
        let id: usize = s[1..6].parse().expect("batch id");
        let j: usize = s[7..9].parse().expect("op index");
        by_batch.entry(id).or_default().push((j, v.clone()));
    }
    for (id, ops) in &by_batch {
        assert!(*id < sizes.len(), "{ctx}: batch {id} was never written");
        assert_eq!(ops.len(), sizes[*id], "{ctx}: batch {id} is partial");
        for (j, v) in ops {
            assert_eq!(v, &batch_value(*id, *j), "{ctx}: wrong value in batch {id}");
        }
    }
    by_batch.into_keys().collect()
}

#[test]
fn synced_writes_survive_power_cut() {
    let mut lost_some = 0;
    for seed in 0..12u64 {
        let ctx = format!("seed {seed}");
        let mut rng = StdRng::seed_from_u64(seed);
        let fs = MemFs::new();
        let opts = Options {
            // Small memtables: seals, journal switches and flushes happen
            // during the run; no compaction thread so the cut is quiescent.
            background_compaction: false,
            ..mem_opts(&fs, 8 << 10)
        };
        let db = Db::open(dir(), opts.clone()).expect("open");
        let n = 400;
        let mut sizes = Vec::new();
        let mut last_synced = None;
        for id in 0..n {
            let size = rng.random_range(1..8);
            let mut b = WriteBatch::new();
            for j in 0..size {
                b.put(batch_key(id, j), batch_value(id, j))
                    .expect("batch put");
            }
            sizes.push(size);
            let sync = rng.random_bool(0.2);
            db.write(b, &WriteOptions { sync }).expect("write");
            if sync {
                last_synced = Some(id);
            }
        }
        quiesce(&db);
        // Power fails while the handle is open; nothing runs afterwards.
        fs.power_cut();
        drop(db);
        fs.power_cut();
        let db = Db::open(dir(), opts).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let rows = scan(&db).unwrap_or_else(|e| panic!("{ctx}: scan: {e}"));
        let present = present_batches(&rows, &sizes, &ctx);
        // A prefix in write order: no holes.
        let prefix: Vec<usize> = (0..present.len()).collect();
        assert_eq!(present, prefix, "{ctx}: surviving batches are not a prefix");
        if let Some(s) = last_synced {
            assert!(
                present.len() > s,
                "{ctx}: synced batch {s} lost ({} survive)",
                present.len()
            );
        }
        if present.len() < n {
            lost_some += 1;
        }
        // Point reads agree with the scan.
        for id in [0, n / 2, n - 1] {
            let want = (id < present.len()).then(|| batch_value(id, 0));
            assert_eq!(
                db.get(batch_key(id, 0)).expect("get"),
                want,
                "{ctx}: get {id}"
            );
        }
    }
    assert!(
        lost_some > 0,
        "no seed lost an unsynced write: the power cut was not exercised"
    );
}

#[test]
fn process_crash_keeps_unsynced_writes_memfs() {
    let fs = MemFs::new();
    let opts = Options {
        background_compaction: false,
        ..mem_opts(&fs, 16 << 10)
    };
    let db = Db::open(dir(), opts.clone()).expect("open");
    for i in 0..2000u32 {
        db.put(format!("k{i:05}"), i.to_le_bytes()).expect("put");
    }
    quiesce(&db);
    // A crashed process runs no destructor: copy what the OS would hold
    // (every appended byte) and leak the handle so close() never syncs.
    let image = snapshot(&fs, dir());
    std::mem::forget(db);
    let crashed = restore(&image, dir());
    let db = Db::open(dir(), mem_opts(&crashed, 16 << 10)).expect("reopen");
    let rows = scan(&db).expect("scan");
    assert_eq!(rows.len(), 2000);
    for (i, (k, v)) in rows.iter().enumerate() {
        assert_eq!(k, format!("k{i:05}").as_bytes());
        assert_eq!(v, &(i as u32).to_le_bytes());
    }
}

#[test]
fn process_crash_keeps_unsynced_writes_posix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        memtable_bytes: 16 << 10,
        ..Options::default()
    };
    let db = Db::open(tmp.path(), opts.clone()).expect("open");
    for i in 0..1000u32 {
        db.put(format!("k{i:05}"), i.to_le_bytes()).expect("put");
    }
    drop(db);
    let db = Db::open(tmp.path(), opts).expect("reopen");
    for i in 0..1000u32 {
        assert_eq!(
            db.get(format!("k{i:05}")).expect("get"),
            Some(i.to_le_bytes().to_vec())
        );
    }
    assert_eq!(scan(&db).expect("scan").len(), 1000);
}

/// A database whose newest journal holds `n` records (one put each, key
/// `k{i}`), never flushed. Returns its image and the journal's name.
fn journal_image(n: usize) -> (Image, String) {
    journal_image_with(n, &WriteOptions::default())
}

/// The directory after a process crash with `n` puts in the newest
/// journal: every appended byte, and no clean close (which would vouch
/// for the journal's end, making every cut below `Corruption`).
fn journal_image_with(n: usize, wo: &WriteOptions) -> (Image, String) {
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open");
    for i in 0..n {
        db.put_opt(format!("k{i:03}"), format!("value-{i}"), wo)
            .expect("put");
    }
    let mut image = snapshot(&fs, dir());
    std::mem::forget(db);
    let journal = files_with(&fs, dir(), ".journal").pop().expect("a journal");
    // Zeros pre-written ahead of synced appends are not records.
    let bytes = image.get_mut(&journal).expect("journal");
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    bytes.truncate(end);
    assert_eq!(record_offsets(&image[&journal]).len(), n);
    (image, journal)
}

fn keys_of(db: &Db) -> Vec<String> {
    scan(db)
        .expect("scan")
        .into_iter()
        .map(|(k, v)| {
            let k = String::from_utf8(k).expect("utf8");
            assert_eq!(
                v,
                format!(
                    "value-{}",
                    &k[1..].trim_start_matches('0').parse::<usize>().unwrap_or(0)
                )
                .into_bytes()
            );
            k
        })
        .collect()
}

#[test]
fn torn_journal_tail_is_cut() {
    let n = 20;
    let (image, journal) = journal_image(n);
    let records = record_offsets(&image[&journal]);
    for (r, &(start, end)) in records.iter().enumerate() {
        // Inside the header, at the payload start, in the payload, one short.
        for cut in [
            start + 1,
            start + 10,
            start + 16,
            (start + end) / 2,
            end - 1,
        ] {
            let fs = restore(&image, dir());
            fs.truncate(&dir().join(&journal), cut);
            let db = Db::open(dir(), mem_opts(&fs, 4 << 20))
                .unwrap_or_else(|e| panic!("record {r} cut at {cut}: {e}"));
            let want: Vec<String> = (0..r).map(|i| format!("k{i:03}")).collect();
            assert_eq!(keys_of(&db), want, "record {r} cut at {cut}");
            // The cut tail is gone for good: writes after it survive reopen.
            db.put("after", "x").expect("put after");
            drop(db);
            let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("second reopen");
            assert_eq!(db.get("after").expect("get"), Some(b"x".to_vec()));
            assert_eq!(scan(&db).expect("scan").len(), r + 1);
        }
    }
}

/// Synced records carry durability marks: damage to a record that a later
/// record marks as synced is lost acknowledged data, reported loudly.
#[test]
fn damaged_synced_journal_record_is_corruption() {
    let (image, journal) = journal_image_with(10, &WriteOptions::synced());
    let records = record_offsets(&image[&journal]);
    // First record's payload, first record's header, a middle record.
    for offset in [16 + 2, 4, records[5].0 + 20] {
        let mut img = image.clone();
        img.get_mut(&journal).expect("journal")[offset] ^= 0x10;
        let fs = restore(&img, dir());
        match Db::open(dir(), mem_opts(&fs, 4 << 20)) {
            Err(Error::Corruption { file, .. }) => {
                assert_eq!(file, dir().join(&journal), "flip at {offset}")
            }
            Err(e) => panic!("flip at {offset}: expected Corruption, got {e}"),
            Ok(_) => panic!("flip at {offset}: open succeeded over lost data"),
        }
    }
}

/// Unsynced pages reach the device in any order, so intact records after
/// a damaged unsynced one are unsynced too: the log ends at the damage.
#[test]
fn damage_among_unsynced_records_cuts_the_log_there() {
    let (image, journal) = journal_image(10);
    let records = record_offsets(&image[&journal]);
    for r in [0, 5, 9] {
        for offset in [records[r].0 + 4, records[r].0 + 20] {
            let mut img = image.clone();
            img.get_mut(&journal).expect("journal")[offset] ^= 0x10;
            let fs = restore(&img, dir());
            let db = Db::open(dir(), mem_opts(&fs, 4 << 20))
                .unwrap_or_else(|e| panic!("flip at {offset}: {e}"));
            let want: Vec<String> = (0..r).map(|i| format!("k{i:03}")).collect();
            assert_eq!(keys_of(&db), want, "flip at {offset}");
        }
    }
}

#[test]
fn garbage_after_the_newest_journal_tail_is_ignored() {
    let (image, journal) = journal_image(10);
    let mut rng = StdRng::seed_from_u64(1);
    let random: Vec<u8> = (0..300).map(|_| rng.random()).collect();
    for garbage in [vec![0u8; 1], vec![0u8; 4096], random, vec![0xff; 17]] {
        let mut img = image.clone();
        img.get_mut(&journal)
            .expect("journal")
            .extend_from_slice(&garbage);
        let fs = restore(&img, dir());
        let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open with garbage tail");
        assert_eq!(keys_of(&db).len(), 10, "garbage of {} bytes", garbage.len());
    }
}

#[test]
fn corrupted_table_block_gives_corruption_not_wrong_data() {
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open");
    let n = 500;
    for i in 0..n {
        db.put(format!("key{i:04}"), format!("value{i:04}"))
            .expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let tables = files_with(&fs, dir(), ".table");
    assert_eq!(tables.len(), 1, "one flushed table: {tables:?}");
    let path = dir().join(&tables[0]);
    for off in [10, 11, 12] {
        assert!(fs.mutate_byte(&path, off, |b| b ^ 0x5a));
    }
    let opts = Options {
        block_cache_bytes: 0,
        ..mem_opts(&fs, 4 << 20)
    };
    let db = Db::open(dir(), opts).expect("open does not read data blocks");
    let mut errors = 0;
    for i in 0..n {
        match db.get(format!("key{i:04}")) {
            Ok(v) => assert_eq!(v, Some(format!("value{i:04}").into_bytes()), "key {i}"),
            Err(e) => {
                assert!(e.is_corruption(), "key {i}: {e}");
                errors += 1;
            }
        }
    }
    assert!(errors > 0, "no read noticed the damaged block");
    let err = scan(&db).expect_err("a scan over the damaged block must fail");
    assert!(err.is_corruption(), "{err}");
    let back: cairndb::Result<Vec<_>> = db.iter().rev().collect();
    assert!(back.expect_err("reverse scan must fail").is_corruption());
    // A scan that does not touch the damaged block still works.
    let tail: Vec<_> = db
        .range(b"key0450".as_slice()..)
        .collect::<cairndb::Result<_>>()
        .expect("scan of intact blocks");
    assert_eq!(tail.len(), 50);
}

fn small_db(fs: &MemFs) {
    let db = Db::open(dir(), mem_opts(fs, 4 << 20)).expect("open");
    for i in 0..100 {
        db.put(format!("k{i:03}"), "v").expect("put");
    }
    db.flush().expect("flush");
    db.put("unflushed", "v").expect("put");
    db.close().expect("close");
}

#[test]
fn missing_or_bad_current() {
    // Missing CURRENT with data files present.
    let fs = MemFs::new();
    small_db(&fs);
    fs.remove(&dir().join("CURRENT")).expect("remove CURRENT");
    match Db::open(dir(), mem_opts(&fs, 4 << 20)) {
        Err(e) => assert!(e.is_corruption(), "missing CURRENT: {e}"),
        Ok(_) => panic!("opened without CURRENT"),
    }

    let base = MemFs::new();
    small_db(&base);
    let image = snapshot(&base, dir());
    let contents: [&[u8]; 7] = [
        b"MANIFEST-999999\n",
        b"MANIFEST-999999",
        b"",
        b"\xff\xfe garbage",
        b"000001.journal\n",
        b"../MANIFEST-000001\n",
        // A well-formed line whose checksum does not match its name, as a
        // bit flip turning one manifest number into another would leave.
        b"MANIFEST-000003 00000000\n",
    ];
    for current in contents {
        let mut img = image.clone();
        img.insert("CURRENT".into(), current.to_vec());
        let fs = restore(&img, dir());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Db::open(dir(), mem_opts(&fs, 4 << 20)).map(drop)
        }));
        match r {
            Ok(Err(Error::Corruption { .. })) => {}
            Ok(Err(e)) => panic!("CURRENT {current:?}: unexpected error kind {e}"),
            Ok(Ok(())) => panic!("CURRENT {current:?}: open succeeded"),
            Err(_) => panic!("CURRENT {current:?}: open panicked"),
        }
    }

    // CURRENT in the first format (no checksum) is still read.
    let manifest_name = image
        .keys()
        .find(|n| n.starts_with("MANIFEST-"))
        .expect("manifest")
        .clone();
    let mut img = image.clone();
    img.insert("CURRENT".into(), format!("{manifest_name}\n").into_bytes());
    let fs = restore(&img, dir());
    Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("first-format CURRENT opens");

    // A garbage manifest named by CURRENT.
    let manifest = image
        .keys()
        .find(|n| n.starts_with("MANIFEST-"))
        .expect("manifest")
        .clone();
    for garbage in [vec![], vec![0u8; 64], b"not a manifest at all".to_vec()] {
        let mut img = image.clone();
        img.insert(manifest.clone(), garbage.clone());
        let fs = restore(&img, dir());
        match Db::open(dir(), mem_opts(&fs, 4 << 20)) {
            Err(e) => assert!(e.is_corruption(), "manifest {garbage:?}: {e}"),
            Ok(_) => panic!("opened with manifest {garbage:?}"),
        }
    }
}

#[test]
fn unreferenced_foreign_table_is_removed() {
    let fs = MemFs::new();
    small_db(&fs);
    let foreign = dir().join("000099.table");
    let mut f = fs.create(&foreign).expect("create");
    f.append(b"this is not a table").expect("append");
    f.sync().expect("sync");
    drop(f);
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open with a foreign file");
    assert_eq!(scan(&db).expect("scan").len(), 101);
    assert!(!fs.exists(&foreign), "unreferenced table left behind");
    // New files must not collide with the number it used.
    for i in 0..100 {
        db.put(format!("n{i:03}"), "w").expect("put");
    }
    db.flush().expect("flush");
    drop(db);
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("reopen");
    assert_eq!(scan(&db).expect("scan").len(), 201);
}

#[test]
fn reopen_after_compaction_into_many_levels() {
    let fs = MemFs::new();
    let opts = Options {
        table_bytes: 4 << 10,
        level1_bytes: 8 << 10,
        block_bytes: 512,
        ..mem_opts(&fs, 8 << 10)
    };
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = BTreeMap::new();
    let db = Db::open(dir(), opts.clone()).expect("open");
    for round in 0..4 {
        for _ in 0..1500 {
            let k = format!("key{:05}", rng.random_range(0..3000)).into_bytes();
            if rng.random_bool(0.85) {
                let v = format!("r{round}-{}", rng.random::<u32>()).into_bytes();
                db.put(&k, &v).expect("put");
                model.insert(k, v);
            } else {
                db.delete(&k).expect("delete");
                model.remove(&k);
            }
        }
        db.flush().expect("flush");
    }
    db.compact().expect("compact");
    let levels = db.stats().tables_per_level;
    let used = levels.iter().filter(|&&n| n > 0).count();
    assert!(
        levels[1..].iter().sum::<usize>() > 1,
        "not spread over levels: {levels:?}"
    );
    let want: Vec<_> = model.clone().into_iter().collect();
    assert_eq!(scan(&db).expect("scan"), want);
    drop(db);
    let db = Db::open(dir(), opts).expect("reopen");
    assert_eq!(
        db.stats().tables_per_level,
        levels,
        "shape changed over reopen ({used} levels)"
    );
    assert_eq!(scan(&db).expect("scan after reopen"), want);
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v));
    }
}

#[test]
fn open_options_and_lock() {
    let fs = MemFs::new();
    let missing = Options {
        create_if_missing: false,
        ..mem_opts(&fs, 1 << 20)
    };
    match Db::open("/nowhere", missing) {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("create_if_missing=false on a missing dir: {other:?}"),
    }
    assert!(!fs.exists(Path::new("/nowhere/CURRENT")));

    let exclusive = Options {
        error_if_exists: true,
        ..mem_opts(&fs, 1 << 20)
    };
    let db = Db::open(dir(), exclusive.clone()).expect("error_if_exists on a new db");
    db.put("a", "1").expect("put");
    // A second handle on the same directory while the first is open.
    match Db::open(dir(), mem_opts(&fs, 1 << 20)) {
        Err(Error::Io { .. }) => {}
        other => panic!("second open of a locked db: {other:?}"),
    }
    drop(db);
    match Db::open(dir(), exclusive) {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("error_if_exists on an existing db: {other:?}"),
    }
    let existing_only = Options {
        create_if_missing: false,
        ..mem_opts(&fs, 1 << 20)
    };
    let db = Db::open(dir(), existing_only).expect("open existing with create_if_missing=false");
    assert_eq!(db.get("a").expect("get"), Some(b"1".to_vec()));

    // The same on real files: the lock is a real advisory lock.
    let tmp = tempfile::tempdir().expect("tempdir");
    let posix = || Options {
        fs: Arc::new(PosixFs),
        ..Options::default()
    };
    let db = Db::open(tmp.path(), posix()).expect("open");
    assert!(matches!(
        Db::open(tmp.path(), posix()),
        Err(Error::Io { .. })
    ));
    drop(db);
    Db::open(tmp.path(), posix()).expect("reopen after the first handle closed");
}

#[test]
fn journal_replay_is_bounded_by_the_memtable_size() {
    let fs = MemFs::new();
    let big = Options {
        background_compaction: false,
        ..mem_opts(&fs, 8 << 20)
    };
    let db = Db::open(dir(), big).expect("open");
    let n = 4000;
    for i in 0..n {
        db.put(format!("key{i:05}"), vec![i as u8; 100])
            .expect("put");
    }
    assert_eq!(
        db.stats().tables_per_level.iter().sum::<usize>(),
        0,
        "nothing flushed yet"
    );
    drop(db); // crash: everything is in one journal
    let small = Options {
        background_compaction: false,
        ..mem_opts(&fs, 32 << 10)
    };
    let db = Db::open(dir(), small).expect("reopen");
    let tables: usize = db.stats().tables_per_level.iter().sum();
    // ~450 KB of data through 32 KiB memtables.
    assert!(
        tables >= 8,
        "replay held the journal in too few memtables: {tables} tables"
    );
    assert!(db.stats().memtable_bytes < 32 << 10);
    let rows = scan(&db).expect("scan");
    assert_eq!(rows.len(), n);
    for (i, (k, v)) in rows.iter().enumerate() {
        assert_eq!(k, format!("key{i:05}").as_bytes());
        assert_eq!(v, &vec![i as u8; 100]);
    }
}

#[test]
fn snapshot_pins_old_versions_across_compaction() {
    let fs = MemFs::new();
    let opts = Options {
        table_bytes: 4 << 10,
        level1_bytes: 8 << 10,
        ..mem_opts(&fs, 8 << 10)
    };
    let db = Db::open(dir(), opts).expect("open");
    let mut old = BTreeMap::new();
    for i in 0..1000 {
        let (k, v) = (
            format!("k{i:04}").into_bytes(),
            format!("old{i}").into_bytes(),
        );
        db.put(&k, &v).expect("put");
        old.insert(k, v);
    }
    db.flush().expect("flush");
    let snap = db.snapshot();
    let mut new = old.clone();
    for i in 0..1000 {
        let k = format!("k{i:04}").into_bytes();
        match i % 3 {
            0 => {
                db.delete(&k).expect("delete");
                new.remove(&k);
            }
            1 => {
                let v = format!("new{i}").into_bytes();
                db.put(&k, &v).expect("put");
                new.insert(k, v);
            }
            _ => {}
        }
    }
    for i in 0..200 {
        let (k, v) = (format!("z{i:04}").into_bytes(), b"added".to_vec());
        db.put(&k, &v).expect("put");
        new.insert(k, v);
    }
    db.compact().expect("compact");
    db.compact().expect("second compact");
    let old_rows: Vec<_> = old.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let snap_rows: Vec<_> = snap
        .iter()
        .collect::<cairndb::Result<_>>()
        .expect("snapshot scan");
    assert_eq!(snap_rows, old_rows, "snapshot scan after compaction");
    let mut rev: Vec<_> = snap
        .iter()
        .rev()
        .collect::<cairndb::Result<_>>()
        .expect("rev");
    rev.reverse();
    assert_eq!(rev, old_rows);
    for (k, v) in &old {
        assert_eq!(snap.get(k).expect("snapshot get").as_ref(), Some(v));
    }
    assert_eq!(snap.get("z0000").expect("get"), None);
    let new_rows: Vec<_> = new.into_iter().collect();
    assert_eq!(scan(&db).expect("scan"), new_rows);
    drop(snap);
    db.compact().expect("compact without snapshot");
    assert_eq!(scan(&db).expect("scan"), new_rows);
}

#[test]
fn a_flush_writes_only_the_versions_a_snapshot_can_read() {
    // A key overwritten many times in one memtable: the table its flush
    // writes holds the newest version, and the one a live snapshot reads,
    // not every version in between (each one a step for every scan that
    // passes the key until a compaction merges them away).
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs, 64 << 20)).expect("open");
    for i in 0..500u32 {
        db.put("hot", i.to_be_bytes()).expect("put");
    }
    let snap = db.snapshot();
    for i in 500..1000u32 {
        db.put("hot", i.to_be_bytes()).expect("put");
    }
    db.put("cold", "x").expect("put");
    db.flush().expect("flush");
    assert_eq!(
        db.stats().table_entries,
        3,
        "the newest version of each key, and the one the snapshot reads"
    );
    assert_eq!(
        snap.get("hot").expect("snapshot get"),
        Some(499u32.to_be_bytes().to_vec())
    );
    assert_eq!(
        db.get("hot").expect("get"),
        Some(999u32.to_be_bytes().to_vec())
    );
    drop(snap);
    for i in 0..1000u32 {
        db.put("hot", i.to_be_bytes()).expect("put");
    }
    db.delete("cold").expect("delete");
    db.flush().expect("flush");
    assert_eq!(
        db.stats().table_entries,
        5,
        "one version of each key per table, the tombstone kept"
    );
    drop(db);
    let db = Db::open(dir(), mem_opts(&fs, 64 << 20)).expect("reopen");
    assert_eq!(
        db.get("hot").expect("get"),
        Some(999u32.to_be_bytes().to_vec())
    );
    assert_eq!(db.get("cold").expect("get"), None);
}

#[test]
fn damaged_last_manifest_edit_is_corruption_not_stale_data() {
    // Regression: a damaged last edit read like a torn one and was dropped,
    // reviving the version before it (whose journal had been deleted).
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open");
    db.put("k", "old").expect("put");
    db.flush().expect("flush");
    db.put("k", "new").expect("put");
    db.flush().expect("flush"); // adds the table holding "new"
    db.close().expect("close"); // last edit: the clean close
    let image = snapshot(&fs, dir());
    let manifest = image
        .keys()
        .find(|n| n.starts_with("MANIFEST-"))
        .expect("manifest")
        .clone();
    let edits = record_offsets(&image[&manifest]);
    // The clean close, damaged, reads as a torn last edit: ignored, and
    // nothing is lost (the journal is replayed as after a crash).
    let close = *edits.last().expect("edits");
    for off in [close.0, close.1 - 1] {
        let mut img = image.clone();
        img.get_mut(&manifest).expect("manifest")[off] ^= 1;
        let db = Db::open(dir(), mem_opts(&restore(&img, dir()), 4 << 20))
            .unwrap_or_else(|e| panic!("clean close flipped at {off}: {e}"));
        assert_eq!(db.get("k").expect("get"), Some(b"new".to_vec()));
    }
    let last = edits[edits.len() - 2];
    for off in [last.0, last.0 + 17, last.1 - 1] {
        let mut img = image.clone();
        img.get_mut(&manifest).expect("manifest")[off] ^= 1;
        let fs = restore(&img, dir());
        match Db::open(dir(), mem_opts(&fs, 4 << 20)) {
            Err(e) => assert!(e.is_corruption(), "flip at {off}: {e}"),
            Ok(db) => panic!("flip at {off}: opened, k = {:?}", db.get("k")),
        }
    }
}

#[test]
fn repeated_power_cuts_right_after_recovery() {
    // Each open writes a new journal, manifest and CURRENT; a cut right
    // after must find all of them durable, and the old files must not
    // come back to life in a harmful way.
    let fs = MemFs::new();
    let opts = Options {
        background_compaction: false,
        ..mem_opts(&fs, 8 << 10)
    };
    let mut synced = Vec::new();
    for round in 0..8 {
        let db = Db::open(dir(), opts.clone()).unwrap_or_else(|e| panic!("round {round}: {e}"));
        for (k, v) in &synced {
            assert_eq!(db.get(k).expect("get").as_ref(), Some(v), "round {round}");
        }
        if round % 2 == 0 {
            fs.power_cut(); // cut before any write of this round
            drop(db);
            continue;
        }
        for i in 0..200 {
            let (k, v) = (
                format!("r{round}-{i:03}"),
                format!("v{round}-{i}").into_bytes(),
            );
            let sync = i % 10 == 9;
            db.put_opt(&k, &v, &WriteOptions { sync }).expect("put");
            if sync {
                synced.push((k.into_bytes(), v));
            }
        }
        quiesce(&db);
        fs.power_cut();
        drop(db);
    }
    let db = Db::open(dir(), opts).expect("final open");
    for (k, v) in &synced {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v));
    }
}

/// Regression: a crash right after a new empty journal was created (while
/// opening, or while sealing a memtable) left the torn journal second to
/// last, and the next open reported Corruption although nothing had been
/// written after the torn record.
#[test]
fn torn_journal_followed_by_an_empty_journal_is_cut() {
    let (image, journal) = journal_image(10);
    let records = record_offsets(&image[&journal]);
    let (start, end) = records[7];
    let fs = restore(&image, dir());
    fs.truncate(&dir().join(&journal), (start + end) / 2);
    let number: u64 = journal
        .trim_end_matches(".journal")
        .parse()
        .expect("number");
    let mut empty = fs
        .create(&dir().join(format!("{:06}.journal", number + 1)))
        .expect("create empty journal");
    empty.sync().expect("sync");
    drop(empty);
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open with a trailing empty journal");
    let want: Vec<String> = (0..7).map(|i| format!("k{i:03}")).collect();
    assert_eq!(keys_of(&db), want);
    drop(db);

    // With a write in the later journal, the torn record is a hole: refuse.
    let fs = restore(&image, dir());
    fs.truncate(&dir().join(&journal), (start + end) / 2);
    let later =
        snapshot(&restore(&image, dir()), dir())[&journal][records[8].0..records[8].1].to_vec();
    // Records are framed for their journal's number: move it to the next.
    let id = Db::open(dir(), mem_opts(&restore(&image, dir()), 4 << 20))
        .expect("open a copy")
        .id();
    let later = cairndb::fuzzing::reframe_journal_record(&later, number + 1, id).expect("record");
    let mut next = fs
        .create(&dir().join(format!("{:06}.journal", number + 1)))
        .expect("create");
    next.append(&later).expect("append");
    next.sync().expect("sync");
    drop(next);
    match Db::open(dir(), mem_opts(&fs, 4 << 20)) {
        Err(e) => assert!(e.is_corruption(), "{e}"),
        Ok(_) => panic!("a torn journal before a journal with writes was accepted"),
    }
}

/// Regression: a torn record whose value holds the bytes of a journal
/// record (a stored copy of a journal, say) was read as damage in the
/// middle of the log, and open failed.
#[test]
fn record_image_inside_a_torn_value_is_not_damage() {
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("open");
    db.put("a", "plain").expect("put");
    db.put("b", "plain").expect("put");
    drop(db);
    let journal = files_with(&fs, dir(), ".journal").pop().expect("journal");
    let copy = snapshot(&fs, dir())[&journal].clone();
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("reopen");
    let mut value = copy.clone();
    value.extend_from_slice(&[0x55; 64]); // room to tear after the image
    db.put("c", &value)
        .expect("put value holding record images");
    // A process crash: no clean close vouches for the journal's end.
    let fs = restore(&snapshot(&fs, dir()), dir());
    std::mem::forget(db);
    let journal = files_with(&fs, dir(), ".journal").pop().expect("journal");
    let len = fs.file_len(&dir().join(&journal)).expect("len") as usize;
    fs.truncate(&dir().join(&journal), len - 10);
    let db = Db::open(dir(), mem_opts(&fs, 4 << 20)).expect("torn tail is cut, not damage");
    assert_eq!(db.get("c").expect("get"), None);
    assert_eq!(db.get("a").expect("get"), Some(b"plain".to_vec()));
}

#[test]
fn create_if_missing_false_on_an_empty_directory() {
    let fs = MemFs::new();
    fs.create_dir_all(dir()).expect("mkdir");
    let o = Options {
        create_if_missing: false,
        ..mem_opts(&fs, 4 << 20)
    };
    assert!(matches!(Db::open(dir(), o), Err(Error::InvalidArgument(_))));
    assert!(
        files_with(&fs, dir(), "")
            .iter()
            .all(|n| n == "LOCK" || n.is_empty())
    );
}

/// After a clean close nothing is in flight: damage anywhere in the newest
/// journal is `Corruption` naming the journal and the offset, and a cut
/// one is too. Before clean closes were recorded, a flipped bit in the
/// middle of a journal of unsynced puts, closed cleanly, cut it there as a
/// torn tail and silently dropped every later put.
#[test]
fn damage_after_a_clean_close_is_corruption_not_a_cut() {
    let fs = MemFs::new();
    let db = Db::open(dir(), mem_opts(&fs, 64 << 20)).expect("open");
    for i in 0..5000u32 {
        db.put(format!("k{i:05}"), format!("value-{i}"))
            .expect("put");
    }
    db.close().expect("close");
    let image = snapshot(&fs, dir());
    let journal = files_with(&fs, dir(), ".journal").pop().expect("journal");
    let len = image[&journal].len();
    assert!(len > 100_000, "journal of {len} bytes");
    for (what, cut, flip) in [
        ("a bit flipped in the middle", None, Some(len / 2)),
        ("a bit flipped in the first record", None, Some(20)),
        ("cut in the middle", Some(len / 2), None),
        ("cut by one byte", Some(len - 1), None),
    ] {
        let mut img = image.clone();
        let bytes = img.get_mut(&journal).expect("journal");
        if let Some(at) = flip {
            bytes[at] ^= 0x08;
        }
        if let Some(at) = cut {
            bytes.truncate(at);
        }
        match Db::open(dir(), mem_opts(&restore(&img, dir()), 64 << 20)) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, dir().join(&journal), "{what}");
                let at = flip.or(cut).expect("a place") as u64;
                assert!(offset <= at, "{what}: reported at {offset}, damage at {at}");
            }
            Err(e) => panic!("{what}: expected Corruption, got {e}"),
            Ok(db) => panic!(
                "{what}: opened with {} of 5000 keys",
                scan(&db).expect("scan").len()
            ),
        }
    }
    // Gone altogether: reported, not read as an empty journal.
    let mut img = image.clone();
    img.remove(&journal);
    match Db::open(dir(), mem_opts(&restore(&img, dir()), 64 << 20)) {
        Err(e) => assert!(e.is_corruption(), "journal removed: {e}"),
        Ok(db) => panic!(
            "journal removed: opened with {} of 5000 keys",
            scan(&db).expect("scan").len()
        ),
    }
    // Undamaged, everything is there.
    let db = Db::open(dir(), mem_opts(&restore(&image, dir()), 64 << 20)).expect("reopen");
    assert_eq!(scan(&db).expect("scan").len(), 5000);
}

/// `Options::comparator_name`: a database created under a name refuses an
/// open under another, as LevelDB refuses a different comparator; the
/// name lives in the manifest through rolls, checkpoints and repair, and
/// a database created without one is LevelDB's bytewise comparator.
#[test]
fn a_database_refuses_an_open_under_another_comparator_name() {
    let fs = MemFs::new();
    let named = |name: Option<&str>| Options {
        comparator_name: name.map(str::to_owned),
        ..mem_opts(&fs, 64 << 10)
    };
    let refused = |dir: &str, name: &str, recorded: &str| {
        let Err(err) = Db::open(dir, named(Some(name))) else {
            panic!("{dir} opened under {name}");
        };
        assert!(
            matches!(err, Error::InvalidArgument(_))
                && err.to_string().contains(name)
                && err.to_string().contains(recorded),
            "{err}"
        );
    };
    let db = Db::open("/foo", named(Some("foo"))).expect("create under foo");
    for i in 0..2000u32 {
        db.put(format!("k{i:05}"), [7u8; 100]).expect("put");
    }
    db.flush().expect("flush");
    db.checkpoint("/foo-ck").expect("checkpoint");
    db.close().expect("close");
    refused("/foo", "bar", "foo");
    refused("/foo", cairndb::BYTEWISE_COMPARATOR, "foo");
    refused("/foo-ck", "bar", "foo");
    // Without a name nothing is checked; the name stays recorded.
    Db::open("/foo", named(None))
        .expect("unchecked")
        .close()
        .expect("close");
    let db = Db::open("/foo", named(Some("foo"))).expect("same name");
    assert_eq!(
        db.get("k00007").expect("get").as_deref(),
        Some(&[7u8; 100][..])
    );
    db.close().expect("close");
    // Repair keeps it, from the old manifest or, once that is gone, from
    // the name it is asked under.
    Db::repair("/foo", &named(None)).expect("repair");
    refused("/foo", "bar", "foo");
    for name in fs.list(Path::new("/foo")).expect("list") {
        if name.starts_with("MANIFEST") || name == "CURRENT" {
            fs.remove(&Path::new("/foo").join(name)).expect("remove");
        }
    }
    Db::repair("/foo", &named(Some("foo"))).expect("repair a lost manifest");
    refused("/foo", "bar", "foo");
    Db::open("/foo", named(Some("foo")))
        .expect("foo")
        .close()
        .expect("close");

    // Created unnamed and written: LevelDB's bytewise comparator.
    let db = Db::open("/plain", named(None)).expect("create");
    db.put("a", "b").expect("put");
    db.close().expect("close");
    refused("/plain", "foo", cairndb::BYTEWISE_COMPARATOR);
    Db::open("/plain", named(Some(cairndb::BYTEWISE_COMPARATOR)))
        .expect("bytewise")
        .close()
        .expect("close");
    // Created unnamed but never written: the first name given is taken.
    Db::open("/empty", named(None))
        .expect("create")
        .close()
        .expect("close");
    Db::open("/empty", named(Some("foo")))
        .expect("empty")
        .close()
        .expect("close");
    refused("/empty", "bar", "foo");
    let long = "x".repeat(256);
    assert!(matches!(
        Db::open("/other", named(Some(&long))),
        Err(Error::InvalidArgument(_))
    ));
}

/// `n` unsynced puts of `len`-byte values (separated), then a crash of the
/// process: the file system as the crash left it (page cache and all) and
/// what was written. With `lose`, the puts are followed by a synced put
/// whose fsync of the first file named like it is lost (Linux's failed
/// writeback: `EIO`, the pages stay readable, the device never gets them).
fn crash_after_unsynced_values(
    streams: usize,
    n: usize,
    len: usize,
    lose: Option<&str>,
) -> (MemFs, Options, BTreeMap<Vec<u8>, Vec<u8>>) {
    let fs = MemFs::new();
    let opts = |fs: &MemFs| Options {
        background_compaction: false,
        value_partitions: streams,
        ..mem_opts(fs, 64 << 20)
    };
    let db = Db::open(dir(), opts(&fs)).expect("open");
    let mut written = BTreeMap::new();
    for i in 0..n {
        let key = format!("k{i:05}").into_bytes();
        let value: Vec<u8> = (0..len).map(|j| (i * 31 + j * 7) as u8).collect();
        db.put(&key, &value).expect("put");
        written.insert(key, value);
    }
    if let Some(lose) = lose {
        fs.inject(cairndb::io::Fault {
            path_contains: Some(lose.to_owned()),
            ..cairndb::io::Fault::once(cairndb::io::OpKind::Sync, cairndb::io::FaultKind::SyncLost)
        });
        db.put_opt(b"synced", vec![1u8; len], &WriteOptions::synced())
            .expect_err("the synced put's fsync is lost");
        assert_eq!(fs.fired().len(), 1, "the lost fsync fired");
    }
    let crashed = fs.after_process_crash();
    std::mem::forget(db);
    let o = opts(&crashed);
    (crashed, o, written)
}

fn table_bytes(fs: &MemFs) -> u64 {
    files_with(fs, dir(), ".table")
        .iter()
        .map(|t| fs.file_len(&dir().join(t)).expect("table length"))
        .sum()
}

fn assert_holds(db: &Db, written: &BTreeMap<Vec<u8>, Vec<u8>>, ctx: &str) {
    for (k, v) in written {
        let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
        assert!(
            got.as_deref() == Some(v.as_slice()),
            "{ctx}: {} lost or wrong",
            String::from_utf8_lossy(k)
        );
    }
}

/// Cuts the power under `db` (open on `fs` with `opts`), then checks that
/// a reopen holds `written`.
fn holds_after_a_power_cut(
    fs: &MemFs,
    db: Db,
    opts: Options,
    written: &BTreeMap<Vec<u8>, Vec<u8>>,
    ctx: &str,
) {
    let cut = fs.crash_image(cairndb::io::Crash::Clean, 0);
    drop(db);
    let opts = Options {
        fs: Arc::new(cut),
        ..opts
    };
    let db = Db::open(dir(), opts).expect("open after a power cut");
    assert_holds(&db, written, &format!("{ctx}: after a power cut"));
}

/// After a crash of the process, the separated values of records no sync
/// vouched for stay where they lie (the newest journal, or its value
/// streams) once the open has synced them and found them on the device:
/// the open writes tables of keys and pointers, not a second copy of the
/// values, so it needs little free space on a full disk (issue: an open
/// needed 38 MB free on a 55 MB file system, copying every unsynced
/// value into its tables). And the sync makes them durable: a power cut
/// right after the open loses none.
#[test]
fn an_open_after_a_crash_keeps_unsynced_values_where_they_lie() {
    for streams in [0, 32] {
        let (n, len) = (2000, 4000);
        let (fs, opts, written) = crash_after_unsynced_values(streams, n, len, None);
        let db = Db::open(dir(), opts.clone()).expect("open after the crash");
        assert_holds(&db, &written, "after the crash");
        let tables = table_bytes(&fs);
        assert!(
            tables < (n * len / 20) as u64,
            "streams {streams}: the open wrote {tables} bytes of tables for {} bytes of values",
            n * len
        );
        holds_after_a_power_cut(&fs, db, opts, &written, "right after the open");
    }
}

/// The device, not the page cache, says what stays in place: after a lost
/// fsync the page cache still shows the values, the open's own sync does
/// not write them again, and a table pointing at them would lose them at
/// the next power cut. The open copies them into its tables instead.
#[test]
fn an_open_after_a_lost_fsync_copies_the_values_the_device_lacks() {
    for (streams, lose) in [(0, ".journal"), (32, ".stream")] {
        let (n, len) = (500, 4000);
        let (fs, opts, written) = crash_after_unsynced_values(streams, n, len, Some(lose));
        let db = Db::open(dir(), opts.clone()).expect("open after the crash");
        assert_holds(&db, &written, "after the crash");
        let tables = table_bytes(&fs);
        assert!(
            tables > (n * len) as u64,
            "{lose}: the open wrote only {tables} bytes of tables for {} bytes of lost values",
            n * len
        );
        holds_after_a_power_cut(&fs, db, opts, &written, lose);
    }
}
