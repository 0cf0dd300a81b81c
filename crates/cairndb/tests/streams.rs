//! Value streams (`Options::value_partitions`): separated values of
//! unsynced writes appended by key range to per-journal stream files, the
//! journal holding pointer ops. Checked here: values read back from the
//! memtable, tables and after reopen; synced writes keep their values in
//! the journal; keys are split by range once a journal has been sealed;
//! streams no table points into are deleted; a damaged value is
//! reported; a stream a synced record names must exist; an unsynced value
//! missing from its stream ends the journal there, as a torn tail does.

mod common;

use cairndb::io::{Crash, Fs, MemFs};
use cairndb::{Db, Error, Options, WriteOptions};
use common::files_with;
use std::path::Path;
use std::sync::Arc;

const BIG: usize = 4096;

fn dir() -> &'static Path {
    Path::new("/db")
}

fn opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 256 << 10,
        // A journal with its streams holds 128 values of 4 KiB.
        journal_bytes: 512 << 10,
        background_compaction: false,
        settle_after_idle: None,
        value_separation_min: 1024,
        value_partitions: 4,
        ..Options::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn value(i: usize, generation: u8) -> Vec<u8> {
    let mut v = format!("{i}/{generation}/").into_bytes();
    v.resize(BIG, b'a' + ((i + generation as usize) % 26) as u8);
    v
}

fn streams(fs: &MemFs) -> Vec<String> {
    files_with(fs, dir(), ".stream")
}

fn check(db: &Db, n: usize, generation: u8, what: &str) {
    for i in 0..n {
        assert_eq!(
            db.get(key(i)).expect("get"),
            Some(value(i, generation)),
            "{what}: key {i}"
        );
    }
    let rows: Vec<_> = db.iter().collect::<cairndb::Result<_>>().expect("scan");
    assert_eq!(rows.len(), n, "{what}: rows");
    for (i, (k, v)) in rows.into_iter().enumerate() {
        assert_eq!((k, v), (key(i), value(i, generation)), "{what}: row {i}");
    }
}

#[test]
fn unsynced_values_go_to_streams_by_key_range() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    let n = 600;
    // Far from key order, over several journals.
    for i in (0..n).map(|i| (i * 337) % n) {
        db.put(key(i), value(i, 0)).expect("put");
    }
    check(&db, n, 0, "memtables");
    assert!(!streams(&fs).is_empty(), "no value stream written");
    let journal_bytes: u64 = files_with(&fs, dir(), ".journal")
        .iter()
        .map(|j| fs.file_len(&dir().join(j)).unwrap_or(0))
        .sum();
    assert!(
        journal_bytes < (n * BIG / 10) as u64,
        "the journals hold the values ({journal_bytes} bytes)"
    );
    db.flush().expect("flush");
    check(&db, n, 0, "tables");
    // A journal after the first is cut by the keys of the one before:
    // one of its streams holds a key range, not every key.
    let s = db.stats();
    assert!(s.value_segments > 2, "{s:?}");
    db.close().expect("close");
    let db = Db::open(dir(), opts(&fs)).expect("reopen");
    check(&db, n, 0, "reopened");
    drop(db);
    // Every stream holds values of a narrower range than the whole.
    let mut narrow = 0;
    for name in streams(&fs) {
        let bytes = cairndb::io::read_all(&fs, &dir().join(&name)).expect("read");
        let firsts: Vec<usize> = bytes
            .chunks(BIG)
            .filter_map(|c| {
                let text = std::str::from_utf8(&c[..16]).ok()?;
                text.split('/').next()?.parse().ok()
            })
            .collect();
        if let (Some(lo), Some(hi)) = (firsts.iter().min(), firsts.iter().max())
            && firsts.len() > 20
            && hi - lo < n * 2 / 3
        {
            narrow += 1;
        }
    }
    assert!(
        narrow >= 2,
        "no stream holds a key range: {:?}",
        streams(&fs)
    );
}

#[test]
fn synced_writes_keep_their_values_in_the_journal() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    for i in 0..20 {
        db.put_opt(key(i), value(i, 0), &WriteOptions::synced())
            .expect("synced put");
    }
    assert_eq!(streams(&fs), Vec::<String>::new());
    db.put(key(20), value(20, 0)).expect("unsynced put");
    assert_eq!(streams(&fs).len(), 1);
    check(&db, 21, 0, "mixed");
}

#[test]
fn streams_no_table_points_into_are_deleted() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    let n = 300;
    for i in 0..n {
        db.put(key(i), value(i, 0)).expect("put");
    }
    db.flush().expect("flush");
    let first = streams(&fs);
    assert!(!first.is_empty());
    for i in 0..n {
        db.put(key(i), value(i, 1)).expect("put");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    let left = streams(&fs);
    assert!(
        first.iter().all(|s| !left.contains(s)),
        "dead streams remain: {first:?} in {left:?}"
    );
    check(&db, n, 1, "overwritten");
}

#[test]
fn a_damaged_value_in_a_stream_is_reported_not_returned() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    for i in 0..50 {
        db.put(key(i), value(i, 0)).expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let victim = value(7, 0);
    let (name, at) = streams(&fs)
        .into_iter()
        .find_map(|name| {
            let bytes = cairndb::io::read_all(&fs, &dir().join(&name)).ok()?;
            let at = bytes.windows(victim.len()).position(|w| w == victim)?;
            Some((name, at))
        })
        .expect("the value is in a stream");
    assert!(fs.mutate_byte(&dir().join(&name), at + 100, |b| b ^ 0x10));
    let db = Db::open(dir(), opts(&fs)).expect("reopen");
    match db.get(key(7)) {
        Err(Error::Corruption { file, .. }) => {
            assert!(file.to_string_lossy().ends_with(".stream"), "{file:?}")
        }
        other => panic!("a damaged value read back as {other:?}"),
    }
    assert_eq!(db.get(key(8)).expect("get"), Some(value(8, 0)));
}

#[test]
fn a_stream_a_synced_record_names_must_exist() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    for i in 0..30 {
        db.put(key(i), value(i, 0)).expect("put");
    }
    // The clean close vouches for every record: replay keeps pointers.
    db.close().expect("close");
    let victim = streams(&fs).pop().expect("a stream");
    fs.remove(&dir().join(&victim)).expect("remove");
    match Db::open(dir(), opts(&fs)) {
        Err(Error::Corruption { detail, .. }) => {
            assert!(detail.contains("value stream"), "{detail}")
        }
        other => panic!(
            "open without a stream a synced record names: {:?}",
            other.err()
        ),
    }
}

#[test]
fn an_unsynced_value_missing_from_its_stream_ends_the_journal_there() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs)).expect("open");
    let n = 40;
    for i in 0..n {
        db.put(key(i), value(i, 0)).expect("put");
    }
    // What a kill -9 leaves (everything written), then the stream loses
    // its tail from value 30 on, as a power cut may leave unsynced pages.
    let image = fs.crash_image(Crash::All, 1);
    drop(db);
    let names = files_with(&image, dir(), ".stream");
    assert_eq!(names.len(), 1, "the first journal has one stream");
    let path = dir().join(&names[0]);
    let bytes = cairndb::io::read_all(&image, &path).expect("read");
    let cut = bytes
        .windows(BIG)
        .position(|w| w == value(30, 0))
        .expect("value 30");
    image.truncate(&path, cut + 100);
    let db = Db::open(
        dir(),
        Options {
            fs: Arc::new(image),
            ..opts(&fs)
        },
    )
    .expect("reopen");
    for i in 0..n {
        let want = (i < 30).then(|| value(i, 0));
        assert_eq!(db.get(key(i)).expect("get"), want, "key {i}");
    }
    // The database goes on.
    db.put(key(n), value(n, 0)).expect("put");
    assert_eq!(db.get(key(n)).expect("get"), Some(value(n, 0)));
}

/// Flushed streams holding `n` values written far from key order.
fn flushed_scattered(fs: &MemFs, n: usize) -> Db {
    let db = Db::open(dir(), opts(fs)).expect("open");
    for i in (0..n).map(|i| (i * 337) % n) {
        db.put(key(i), value(i, 0)).expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    Db::open(dir(), opts(fs)).expect("reopen")
}

/// Long scans take flushed streams whole, once between them: four
/// scanners at once read at most the streams' bytes (each scanning alone
/// would read them four times), a fifth reads nothing more (the streams
/// are kept), and values come out of the shared chunks, not one read each.
#[test]
fn long_scans_take_each_stream_whole_once_between_them() {
    let fs = MemFs::new();
    let n = 2000;
    let db = flushed_scattered(&fs, n);
    let stream_bytes: u64 = streams(&fs)
        .iter()
        .map(|s| fs.file_len(&dir().join(s)).expect("len"))
        .sum();
    assert!(streams(&fs).len() > 8, "{:?}", streams(&fs));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| check(&db, n, 0, "four scans"));
        }
    });
    let s = db.stats();
    assert!(
        s.scan_stream_bytes_read > 0 && s.scan_stream_bytes_read <= stream_bytes,
        "four scans read {} bytes of streams holding {stream_bytes}",
        s.scan_stream_bytes_read
    );
    let single = s.value_reads_direct + s.value_reads_buffered + s.value_reads_cached;
    // `check` also reads each value once with `get`, in every scanner.
    assert!(
        single < (5 * n) as u64,
        "{single} single value reads for {n} values scanned four times"
    );
    let rows: usize = db
        .iter()
        .map(|r| r.map(|_| 1))
        .sum::<cairndb::Result<_>>()
        .expect("scan");
    assert_eq!(rows, n);
    assert_eq!(db.stats().scan_stream_bytes_read, s.scan_stream_bytes_read);
}

/// A value damaged in a stream, met by a long scan taking the stream
/// whole: the scan yields every entry before it, then the error naming the
/// stream, not the damaged bytes.
#[test]
fn a_damaged_value_in_a_stream_is_reported_by_a_long_scan() {
    let fs = MemFs::new();
    let n = 2000;
    let victim = 1500;
    let db = flushed_scattered(&fs, n);
    drop(db);
    let needle = value(victim, 0);
    let (name, at) = streams(&fs)
        .into_iter()
        .find_map(|name| {
            let bytes = cairndb::io::read_all(&fs, &dir().join(&name)).ok()?;
            let at = bytes.windows(needle.len()).position(|w| w == needle)?;
            Some((name, at))
        })
        .expect("the value is in a stream");
    assert!(fs.mutate_byte(&dir().join(&name), at + 2000, |b| b ^ 0x10));
    let db = Db::open(dir(), opts(&fs)).expect("reopen");
    let got: Vec<_> = db.iter().collect();
    assert_eq!(got.len(), victim + 1);
    for (i, kv) in got[..victim].iter().enumerate() {
        assert_eq!(kv.as_ref().expect("entry"), &(key(i), value(i, 0)));
    }
    match &got[victim] {
        Err(Error::Corruption { file, .. }) => {
            assert!(file.to_string_lossy().ends_with(".stream"), "{file:?}")
        }
        other => panic!("a damaged value scanned as {other:?}"),
    }
    assert!(db.stats().scan_stream_chunk_reads > 0);
}

/// Long scans at the same point of the same view share their windows of
/// entries (`read/window_share.rs`): four threads scanning at once, and
/// two iterators stepped in turn on one thread (which must not wait on
/// each other), each yield every entry once and in order, and most
/// windows are taken by a scan that did not build them.
#[test]
fn long_scans_at_one_point_share_their_windows() {
    let fs = MemFs::new();
    let n = 4000;
    let db = flushed_scattered(&fs, n);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut i = 0;
                let mut it = db.iter();
                while let Some(entry) = it.next_ref() {
                    let (k, v) = entry.expect("entry");
                    assert_eq!((k, v), (&key(i)[..], &value(i, 0)[..]), "row {i}");
                    i += 1;
                }
                assert_eq!(i, n);
            });
        }
    });
    let s = db.stats();
    assert!(s.scan_windows_published > 0, "no window was shared");
    assert!(
        s.scan_windows_taken > 0,
        "{} windows built, none taken by another scan",
        s.scan_windows_published
    );
    let before = db.stats().scan_windows_taken;
    let (mut a, mut b) = (db.iter(), db.iter());
    for i in 0..n {
        for it in [&mut a, &mut b] {
            let (k, v) = it.next().expect("an entry").expect("entry");
            assert_eq!((k, v), (key(i), value(i, 0)), "row {i}");
        }
    }
    assert!(a.next().is_none() && b.next().is_none());
    assert!(
        db.stats().scan_windows_taken > before,
        "the second iterator built its own windows"
    );
}

/// A window is shared only between scans that see the same entries: a
/// scan of a snapshot taken before keys were overwritten, stepped in turn
/// with a scan of the database after (both of the same memtables and
/// tables, their windows starting after the same keys), each yields what
/// its own snapshot holds.
#[test]
fn scans_at_other_snapshots_do_not_take_each_others_windows() {
    let fs = MemFs::new();
    let n = 3000;
    let db = flushed_scattered(&fs, n);
    let snapshot = db.snapshot();
    for i in (0..n).filter(|i| i % 5 == 0) {
        db.put(key(i), value(i, 1)).expect("put");
    }
    let mut old = snapshot.iter();
    let mut new = db.iter();
    for i in 0..n {
        let (k, v) = old.next().expect("old entry").expect("entry");
        assert_eq!((k, v), (key(i), value(i, 0)), "old row {i}");
        let generation = if i % 5 == 0 { 1 } else { 0 };
        let (k, v) = new.next().expect("new entry").expect("entry");
        assert_eq!((k, v), (key(i), value(i, generation)), "new row {i}");
    }
    assert!(old.next().is_none() && new.next().is_none());
}

/// A long scan that takes a first chunk of a journal's stream reads that
/// journal's next stream ahead (the next key range's values): a scan
/// stopped within the first key range has read more streams than that
/// range has, and a whole scan still reads each stream once.
#[test]
fn a_long_scan_reads_the_next_key_ranges_streams_ahead() {
    let fs = MemFs::new();
    let n = 4000;
    let db = flushed_scattered(&fs, n);
    let total = streams(&fs).len() as u64;
    let mut it = db.iter();
    for i in 0..400 {
        let (k, _) = it.next().expect("an entry").expect("entry");
        assert_eq!(k, key(i));
    }
    // Reads ahead run on the worker threads: let them finish.
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The first key range holds about one stream in four (four
    // partitions; the first journal has one stream, over every key); with
    // the windows read ahead of the scan, 39 of 121 streams were read
    // without reading the next range's streams ahead, 68 with.
    let early = db.stats().scan_stream_chunk_reads;
    assert!(
        early > total * 7 / 16,
        "a scan in the first key range read {early} of {total} streams"
    );
    drop(it);
    assert_eq!(db.iter().count(), n);
    let all = db.stats().scan_stream_chunk_reads;
    assert!(
        all <= total,
        "two scans read {all} stream chunks for {total} streams of one chunk"
    );
}

/// The first journal after open has one stream (there is no sample to cut
/// it by); it is full once it has sampled enough keys to cut the next
/// one, not at `journal_bytes`, so a scan of any key range does not need
/// a whole journal's values.
#[test]
fn the_first_journal_ends_once_its_keys_can_cut_the_next() {
    let fs = MemFs::new();
    let db = Db::open(
        dir(),
        Options {
            memtable_bytes: 64 << 20,
            journal_bytes: 64 << 20,
            ..opts(&fs)
        },
    )
    .expect("open");
    let n = 2000;
    for i in (0..n).map(|i| (i * 337) % n) {
        db.put(key(i), value(i, 0)).expect("put");
    }
    // 8 MiB of values, far from the 64 MiB a journal holds: without the
    // cut, one journal with one stream.
    let names = streams(&fs);
    assert!(names.len() >= 3, "the first journal was not cut: {names:?}");
    let first = cairndb::io::read_all(&fs, &dir().join(&names[0])).expect("read");
    assert!(
        first.len() < n * BIG / 2,
        "the first stream holds {} of {} bytes",
        first.len(),
        n * BIG
    );
    check(&db, n, 0, "memtables");
    db.close().expect("close");
    let db = Db::open(dir(), opts(&fs)).expect("reopen");
    check(&db, n, 0, "reopened");
}
