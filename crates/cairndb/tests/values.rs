//! Key-value separation: large values are written once, in the journal,
//! and memtables and tables point to them. Checked here: values read back
//! through every path (memtable, tables, iterators both ways, snapshots,
//! reopen, compaction); tables really do not hold them; a journal holding
//! values lives exactly as long as something can read them; damage and
//! missing segments are reported; recovery does not point at bytes no sync
//! covered.

mod common;

use cairndb::io::{Crash, Fs, MemFs};
use cairndb::{Db, Error, Options, ValueReads, WriteOptions};
use common::{files_with, scan};
use std::path::Path;
use std::sync::Arc;

const DIR: &str = "/db";
const N: usize = 120;
const BIG: usize = 4096;

fn dir() -> &'static Path {
    Path::new(DIR)
}

fn opts(fs: &MemFs, separation_min: usize) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 256 << 10,
        background_compaction: false,
        value_separation_min: separation_min,
        // These tests follow values in journals; tests/streams.rs follows
        // them in value streams.
        value_partitions: 0,
        ..Options::default()
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// A value of `len` bytes that names its key and generation.
fn value(i: usize, generation: u8, len: usize) -> Vec<u8> {
    let mut v = format!("{i}/{generation}/").into_bytes();
    v.extend((0..len.saturating_sub(v.len())).map(|j| b'a' + ((i + j) % 26) as u8 + generation));
    v
}

/// Even keys get 4 KiB values (separated), odd keys 40 bytes (inline).
fn len_of(i: usize) -> usize {
    if i.is_multiple_of(2) { BIG } else { 40 }
}

fn write_all(db: &Db, generation: u8) {
    for i in 0..N {
        db.put(key(i), value(i, generation, len_of(i)))
            .expect("put");
    }
}

/// Writes generation 0 in an order far from key order (odd keys down,
/// then even keys up): the journal holds the values in that order.
fn write_out_of_order(db: &Db) {
    for i in (0..N).rev().step_by(2).chain((0..N).step_by(2)) {
        db.put(key(i), value(i, 0, len_of(i))).expect("put");
    }
}

fn expected(generation: u8) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..N)
        .map(|i| (key(i), value(i, generation, len_of(i))))
        .collect()
}

fn check_reads(db: &Db, generation: u8, ctx: &str) {
    let want = expected(generation);
    for (k, v) in &want {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v), "{ctx}: get");
    }
    assert_eq!(scan(db).expect("scan"), want, "{ctx}: forward scan");
    assert_eq!(scan_back(db), want, "{ctx}: reverse scan");
    let mid: Vec<_> = db
        .range(key(10)..key(20))
        .collect::<cairndb::Result<_>>()
        .expect("range");
    assert_eq!(mid, want[10..20].to_vec(), "{ctx}: range");
}

/// Every entry, read with `next_back`, returned in ascending order.
fn scan_back(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut back: Vec<_> = db
        .iter()
        .rev()
        .collect::<cairndb::Result<_>>()
        .expect("reverse scan");
    back.reverse();
    back
}

fn table_bytes(db: &Db) -> u64 {
    db.stats().bytes_per_level.iter().sum()
}

#[test]
fn separated_values_read_back_through_every_path() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    check_reads(&db, 0, "memtable");
    db.flush().expect("flush");
    check_reads(&db, 0, "level 0");
    let stats = db.stats();
    let separated = (N / 2 * BIG) as u64;
    assert_eq!(
        stats.value_bytes_live, separated,
        "every large value is counted live"
    );
    assert_eq!(stats.value_segments, 1);
    // The table holds keys, pointers and the small values only.
    assert!(
        table_bytes(&db) < separated / 10,
        "table of {} bytes for {separated} bytes of separated values",
        table_bytes(&db)
    );
    db.compact().expect("compact");
    check_reads(&db, 0, "after compaction");
    assert_eq!(db.stats().value_bytes_live, separated, "nothing died");
    db.close().expect("close");
    let db = Db::open(dir(), opts(&fs, 1024)).expect("reopen");
    check_reads(&db, 0, "after reopen");
    drop(db);

    // The control: nothing separated, the table holds the values.
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, usize::MAX)).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    check_reads(&db, 0, "inline");
    assert_eq!(db.stats().value_segments, 0);
    assert!(table_bytes(&db) > separated);
}

/// Segment lifetime, with value GC off so that compactions move no value
/// and the journals themselves stay the segments.
#[test]
fn a_segment_lives_until_nothing_can_read_it() {
    let fs = MemFs::new();
    let o = Options {
        value_gc_live_ratio: 0.0,
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o.clone()).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    let first = files_with(&fs, dir(), ".journal")[0].clone();
    let first_path = dir().join(&first);
    assert_eq!(db.stats().value_segments, 1);

    // A snapshot pins the first generation through compaction.
    let snap = db.snapshot();
    write_all(&db, 1);
    db.flush().expect("flush");
    db.compact().expect("compact");
    assert_eq!(
        db.stats().value_segments,
        2,
        "the snapshot keeps generation 0"
    );
    for (k, v) in expected(0) {
        assert_eq!(snap.get(&k).expect("snapshot get"), Some(v));
    }
    drop(snap);

    // An iterator (no snapshot) holds the version it was made from.
    let mut it = db.iter();
    let first_row = it.next().expect("a row").expect("read");
    assert_eq!(first_row, expected(1)[0]);
    write_all(&db, 2);
    db.flush().expect("flush");
    db.compact().expect("compact");
    let stats = db.stats();
    assert_eq!(stats.value_segments, 1, "generations 0 and 1 are dead");
    assert_eq!(stats.value_bytes_live, (N / 2 * BIG) as u64);
    // The iterator's version still had generation 0 live.
    assert!(
        fs.exists(&first_path),
        "generation 0's journal outlives the iterator's version"
    );
    let rest: Vec<_> = it.collect::<cairndb::Result<_>>().expect("iterator reads");
    assert_eq!(
        rest,
        expected(1)[1..].to_vec(),
        "the iterator still reads generation 1"
    );
    assert!(!fs.exists(&first_path), "generation 0's journal is deleted");
    let journals = files_with(&fs, dir(), ".journal");
    assert_eq!(
        journals.len(),
        2,
        "once the iterator is gone only the live segment and the active journal remain: {journals:?}"
    );
    check_reads(&db, 2, "latest");
    db.close().expect("close");
    let db = Db::open(dir(), o).expect("reopen");
    check_reads(&db, 2, "reopened");
    assert_eq!(db.stats().value_segments, 1);
}

#[test]
fn deletes_free_values_too() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    for i in 0..N {
        db.delete(key(i)).expect("delete");
    }
    db.flush().expect("flush");
    db.compact().expect("compact");
    let stats = db.stats();
    assert_eq!((stats.value_segments, stats.value_bytes_live), (0, 0));
    assert_eq!(scan(&db).expect("scan"), vec![]);
}

/// Offset of `needle` in the only journal that holds it.
fn find_in_journals(fs: &MemFs, needle: &[u8]) -> (String, usize) {
    find_in(fs, ".journal", needle)
}

/// The first file whose name ends in `suffix` holding `needle`, and
/// where.
fn find_in(fs: &MemFs, suffix: &str, needle: &[u8]) -> (String, usize) {
    for name in files_with(fs, dir(), suffix) {
        let bytes = cairndb::io::read_all(fs, &dir().join(&name)).expect("read");
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            return (name, at);
        }
    }
    panic!("value not found in any {suffix} file");
}

/// Flushes and closes `db`, flips the bits `mask` of the byte `within`
/// bytes into stored value `victim` in its journal, and reopens.
fn damage_and_reopen(fs: &MemFs, db: Db, victim: &[u8], within: usize, mask: u8) -> Db {
    db.flush().expect("flush");
    db.close().expect("close");
    let (name, at) = find_in_journals(fs, victim);
    assert!(fs.mutate_byte(&dir().join(&name), at + within, |b| b ^ mask));
    Db::open(dir(), opts(fs, 1024)).expect("reopen")
}

/// The error for a damaged value names the file it lies in: its journal,
/// or, once a compaction moved it, its values file.
#[test]
fn a_damaged_value_names_its_file() {
    for settled in [false, true] {
        let fs = MemFs::new();
        let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
        write_all(&db, 0);
        db.flush().expect("flush");
        if settled {
            db.compact().expect("compact");
        }
        db.close().expect("close");
        let suffix = if settled { ".values" } else { ".journal" };
        let (name, at) = find_in(&fs, suffix, &value(4, 0, BIG));
        assert!(fs.mutate_byte(&dir().join(&name), at + 100, |b| b ^ 0x04));
        let db = Db::open(dir(), opts(&fs, 1024)).expect("reopen");
        match db.get(key(4)) {
            Err(Error::Corruption { file, detail, .. }) => {
                assert!(detail.contains("checksum"), "{detail}");
                assert_eq!(file, dir().join(&name), "settled: {settled}");
            }
            other => panic!("damaged value: expected corruption, got {other:?}"),
        }
    }
}

#[test]
fn a_damaged_value_is_reported_not_returned() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    let db = damage_and_reopen(&fs, db, &value(4, 0, BIG), 2000, 0x10);
    match db.get(key(4)) {
        Err(Error::Corruption { detail, .. }) => assert!(detail.contains("checksum"), "{detail}"),
        other => panic!("damaged value: expected corruption, got {other:?}"),
    }
    assert_eq!(db.get(key(6)).expect("other value"), Some(value(6, 0, BIG)));
    assert!(scan(&db).is_err(), "a scan over the damage fails");
}

#[test]
fn a_missing_segment_fails_open() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    db.close().expect("close");
    let (name, _) = find_in_journals(&fs, &value(0, 0, BIG));
    fs.remove(&dir().join(&name)).expect("remove");
    match Db::open(dir(), opts(&fs, 1024)) {
        Err(Error::Corruption { detail, .. }) => assert!(detail.contains("segment"), "{detail}"),
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("opened without its values"),
    }
}

#[test]
fn journals_close_at_journal_bytes() {
    let fs = MemFs::new();
    let o = Options {
        journal_bytes: 64 << 10,
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    let segments = db.stats().value_segments;
    // 60 values of 4 KiB (240 KiB) in journals of at most 64 KiB (+ one
    // group): at least 4 of them.
    assert!(segments >= 4, "{segments} segments");
    check_reads(&db, 0, "many segments");
}

/// Synced values are vouched for and stay in place: a power cut, then a
/// reopen that copies none of them. (Values no sync vouched for stay in
/// place only where the open finds them on the device:
/// `recovery.rs::an_open_after_a_crash_keeps_unsynced_values_where_they_lie`
/// and `an_open_after_a_lost_fsync_copies_the_values_the_device_lacks`.)
#[test]
fn synced_values_stay_in_place_after_a_power_cut() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    for i in 0..N {
        db.put_opt(key(i), value(i, 0, len_of(i)), &WriteOptions::synced())
            .expect("put");
    }
    let crashed = fs.crash_image(Crash::Clean, 0);
    drop(db);
    let db = Db::open(dir(), opts(&crashed, 1024)).expect("open after power cut");
    check_reads(&db, 0, "synced, after a power cut");
    let live = db.stats().value_bytes_live;
    // Every large value is followed by a record (the last key is odd,
    // small) whose durability mark vouches for it.
    assert_eq!(live, (N / 2 * BIG) as u64, "synced values are not copied");
}

/// Bytes of the journal and values files in the directory.
fn segment_file_bytes(fs: &MemFs) -> u64 {
    let mut names = files_with(fs, dir(), ".journal");
    names.extend(files_with(fs, dir(), ".values"));
    names
        .iter()
        .map(|n| fs.file_len(&dir().join(n)).expect("length"))
        .sum()
}

/// Overwrites three quarters of the large values, then compacts: with value
/// GC the live values left in the old segments move to a values file and
/// the segments are freed; under the null policy (GC off) they stay.
#[test]
fn value_gc_moves_live_values_and_frees_segments() {
    let run = |gc: f64| {
        let fs = MemFs::new();
        let o = Options {
            journal_bytes: 64 << 10,
            value_gc_live_ratio: gc,
            ..opts(&fs, 1024)
        };
        let db = Db::open(dir(), o.clone()).expect("open");
        write_all(&db, 0);
        db.flush().expect("flush");
        let mut want = expected(0);
        for (i, row) in want.iter_mut().enumerate() {
            if i % 8 != 0 {
                row.1 = value(i, 1, len_of(i));
                db.put(&row.0, &row.1).expect("overwrite");
            }
        }
        db.flush().expect("flush");
        db.compact().expect("compact");
        // A second pass: the first may have run before enough was dead.
        db.compact().expect("compact");
        assert_eq!(scan(&db).expect("scan"), want, "gc {gc}");
        for (k, v) in &want {
            assert_eq!(db.get(k).expect("get").as_ref(), Some(v), "gc {gc}");
        }
        let live = db.stats().value_bytes_live;
        let on_disk = segment_file_bytes(&fs);
        let values_files = files_with(&fs, dir(), ".values").len();
        db.close().expect("close");
        let db = Db::open(dir(), o).expect("reopen");
        assert_eq!(scan(&db).expect("scan after reopen"), want, "gc {gc}");
        (live, on_disk, values_files)
    };
    let (live, on_disk, moved_files) = run(0.5);
    let (null_live, null_disk, null_files) = run(0.0);
    assert_eq!(live, null_live, "the same values are live either way");
    assert!(moved_files > 0, "GC wrote no values file");
    assert_eq!(null_files, 0, "the null policy moves nothing");
    let amp = on_disk as f64 / live as f64;
    let null_amp = null_disk as f64 / null_live as f64;
    println!("space amplification: value GC {amp:.2}, null policy {null_amp:.2}");
    assert!(
        amp < 1.3 && null_amp > 1.5,
        "space amplification with GC {amp:.2}, without {null_amp:.2}"
    );
}

/// On the real file system, with direct reads, flushed values are read
/// with direct IO (one aligned read around each value), fresh ones through
/// the page cache; both must return the value whatever its alignment and
/// length, including a value that ends the file.
#[test]
fn direct_reads_on_the_real_file_system() {
    reads_on_the_real_file_system(ValueReads::Direct);
}

/// The same through the page cache.
#[test]
fn buffered_reads_on_the_real_file_system() {
    reads_on_the_real_file_system(ValueReads::PageCache);
}

/// The same from the page cache where it holds the value, else directly.
#[test]
fn cached_else_direct_reads_on_the_real_file_system() {
    reads_on_the_real_file_system(ValueReads::CachedElseDirect);
}

/// Options on the real file system: no background compaction, values of
/// `separation_min` bytes and more separated, read as `reads` says.
fn real_fs_opts(reads: ValueReads, separation_min: usize) -> Options {
    Options {
        background_compaction: false,
        value_separation_min: separation_min,
        value_reads: reads,
        ..Options::default()
    }
}

/// Drops the page cache's copy of every file in `dir` (synced first, so
/// the pages are clean and the kernel lets them go).
fn drop_cached_pages(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("list") {
        let file = std::fs::File::open(entry.expect("entry").path()).expect("open");
        file.sync_all().expect("sync");
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
    }
}

/// `CachedElseDirect`: a flushed value the page cache holds is read from
/// it without waiting for the device; once the pages are dropped, with a
/// direct read. The same bytes either way, and `Stats` counts which. The
/// values are written through the page cache (the buffered journal), so
/// it holds them all at first.
#[test]
fn cached_else_direct_takes_the_page_cache_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Through `pread`: pages a map has touched stay in the page cache
    // whatever `drop_cached_pages` asks (see the test after this one).
    let opts = Options {
        journal_direct: false,
        map_values: false,
        ..real_fs_opts(ValueReads::CachedElseDirect, 100)
    };
    let db = Db::open(tmp.path(), opts).expect("open");
    let n = 50;
    for i in 0..n {
        db.put(key(i), value(i, 0, 3000 + i * 101)).expect("put");
    }
    db.flush().expect("flush");
    let read_all = |ctx: &str| {
        for i in 0..n {
            let got = db.get(key(i)).expect("get");
            assert!(got == Some(value(i, 0, 3000 + i * 101)), "{ctx}: value {i}");
        }
        db.stats()
    };
    let start = db.stats();
    assert_eq!(start.value_reads, ValueReads::CachedElseDirect);
    // Just written through the page cache: every value is there.
    let warm = read_all("cached");
    assert_eq!(warm.value_reads_cached - start.value_reads_cached, n as u64);
    assert_eq!(warm.value_reads_direct, start.value_reads_direct);
    drop_cached_pages(tmp.path());
    let cold = read_all("dropped");
    let (cached, direct) = (
        cold.value_reads_cached - warm.value_reads_cached,
        cold.value_reads_direct - warm.value_reads_direct,
    );
    assert_eq!(cached + direct, n as u64);
    assert!(direct > 0, "no read went to the device: {cached} cached");
    // Direct reads leave the page cache as it was: the next round still
    // misses it.
    let again = read_all("again");
    assert!(again.value_reads_direct > cold.value_reads_direct);
    assert_eq!(again.value_reads_buffered, 0, "flushed values only");
}

/// `Auto` reads through the page cache while the values fit in the
/// available memory (a few KiB here, on any machine that runs tests):
/// copied out of memory maps of their files while the page cache holds
/// them, else with `pread`.
#[test]
fn auto_reads_small_data_through_the_page_cache() {
    for map_values in [true, false] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let o = Options {
            map_values,
            ..real_fs_opts(ValueReads::Auto, 100)
        };
        let db = Db::open(tmp.path(), o).expect("open");
        for i in 0..10 {
            db.put(key(i), value(i, 0, 500)).expect("put");
        }
        db.flush().expect("flush");
        for i in 0..10 {
            assert_eq!(db.get(key(i)).expect("get"), Some(value(i, 0, 500)));
        }
        let s = db.stats();
        assert_eq!(s.value_reads, ValueReads::PageCache);
        assert_eq!(s.value_reads_direct, 0);
        let mapped = if map_values { s.value_reads_mapped } else { 0 };
        assert_eq!(s.value_reads_mapped, mapped, "maps off: none mapped");
        assert_eq!(s.value_reads_cached, mapped);
        assert_eq!(s.value_reads_buffered + mapped, 10);
    }
}

fn mapped_opts(reads: ValueReads) -> Options {
    Options {
        map_values: true,
        ..real_fs_opts(reads, 100)
    }
}

/// Memory maps of flushed segments (`Options::map_values`): point reads,
/// scans and `multi_get` of values the page cache holds are copied out of
/// the maps, the same bytes as through `pread`; under `CachedElseDirect`
/// values the page cache does not hold are read with direct IO.
#[test]
fn mapped_reads_on_the_real_file_system() {
    for reads in [ValueReads::PageCache, ValueReads::CachedElseDirect] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let n = 300;
        let len = |i: usize| 700 + i * 37 % 5000;
        {
            let db = Db::open(tmp.path(), mapped_opts(reads)).expect("open");
            // Out of key order: scans meet scattered values.
            for j in 0..n {
                let i = j * 7 % n;
                db.put(key(i), value(i, 0, len(i))).expect("put");
            }
            db.close().expect("close");
        }
        drop_cached_pages(tmp.path());
        let db = Db::open(tmp.path(), mapped_opts(reads)).expect("reopen");
        let want: Vec<_> = (0..n).map(|i| (key(i), value(i, 0, len(i)))).collect();
        let check = |db: &Db, ctx: &str| {
            let got = db.prefix("k").collect::<cairndb::Result<Vec<_>>>();
            assert!(got.expect("scan") == want, "{reads:?} {ctx}: scan");
            for i in (0..n).step_by(7) {
                let got = db.get(key(i)).expect("get");
                assert!(got == Some(value(i, 0, len(i))), "{reads:?} {ctx}: get {i}");
            }
            let keys: Vec<Vec<u8>> = (0..n).step_by(3).map(key).collect();
            for (k, got) in keys.iter().zip(db.multi_get(&keys)) {
                let i = (0..n).find(|&i| key(i) == *k).expect("a key written");
                assert!(
                    got.expect("multi_get") == Some(value(i, 0, len(i))),
                    "{ctx}"
                );
            }
            db.stats()
        };
        // Read from the device: under `CachedElseDirect` directly (the
        // page cache holds nothing, so nothing is mapped); under
        // `PageCache` partly out of the maps, whose faults read the pages.
        let cold = check(&db, "cold");
        if reads == ValueReads::CachedElseDirect {
            assert_eq!(cold.value_reads_mapped, 0, "{cold:?}");
            assert!(cold.value_reads_direct > 0, "{cold:?}");
        }
        // ... and once the page cache holds the files, out of the maps.
        for entry in std::fs::read_dir(tmp.path()).expect("list") {
            let _ = std::fs::read(entry.expect("entry").path()).expect("read");
        }
        let warm = check(&db, "warm");
        assert!(
            warm.value_reads_mapped > cold.value_reads_mapped,
            "{reads:?}: nothing mapped: {warm:?}"
        );
        let (mapped, other) = (
            warm.value_reads_mapped - cold.value_reads_mapped,
            warm.value_reads_direct + warm.value_reads_buffered
                - cold.value_reads_direct
                - cold.value_reads_buffered,
        );
        assert_eq!(other, 0, "{reads:?}: {mapped} mapped, {other} read");
        db.close().expect("close");
        // Maps off (the default): the same reads, none of them mapped.
        let db = Db::open(tmp.path(), real_fs_opts(reads, 100)).expect("reopen");
        assert_eq!(check(&db, "unmapped").value_reads_mapped, 0);
    }
}

/// A file of values cut short while the database was closed: once open,
/// reads of the values it no longer holds are `Corruption` errors (the
/// file's map ends where the file now ends, so those reads go to `pread`;
/// touching the map past the end would end the process with SIGBUS), and
/// the values before the cut are still copied out of the map.
#[test]
fn a_values_file_cut_short_is_an_error_not_a_crash() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The journal written through the page cache, which then holds it.
    let o = Options {
        value_partitions: 0,
        journal_direct: false,
        ..mapped_opts(ValueReads::PageCache)
    };
    let n = 64;
    {
        let db = Db::open(tmp.path(), o.clone()).expect("open");
        for i in 0..n {
            db.put(key(i), value(i, 0, BIG)).expect("put");
        }
        db.flush().expect("flush");
        db.close().expect("close");
    }
    // The file holding the values: cut it just after the first.
    let (first, last) = (value(0, 0, BIG), value(n - 1, 0, BIG));
    let mut cut = false;
    for entry in std::fs::read_dir(tmp.path()).expect("list") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("read");
        let find = |v: &[u8]| bytes.windows(64).position(|w| w == &v[..64]);
        if let (Some(_), Some(at)) = (find(&first), find(&last)) {
            let keep = find(&value(1, 0, BIG));
            assert!(keep.is_some_and(|k| k < at), "values in write order");
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(keep.expect("checked") as u64))
                .expect("truncate");
            cut = true;
        }
    }
    assert!(cut, "no file holds the values");
    let db = Db::open(tmp.path(), o).expect("reopen");
    assert_eq!(
        db.get(key(0)).expect("before the cut"),
        Some(value(0, 0, BIG))
    );
    assert_eq!(db.stats().value_reads_mapped, 1, "{:?}", db.stats());
    for i in [1, n / 2, n - 1] {
        let got = db.get(key(i));
        assert!(
            matches!(got, Err(Error::Corruption { .. })),
            "value {i} past the cut: {got:?}"
        );
    }
    let scanned: Vec<_> = db.prefix("k").collect();
    assert!(scanned[0].is_ok(), "the first value is whole");
    assert!(
        scanned
            .iter()
            .any(|r| matches!(r, Err(Error::Corruption { .. }))),
        "a scan past the cut names the damage"
    );
}

fn reads_on_the_real_file_system(reads: ValueReads) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = real_fs_opts(reads, 100);
    let db = Db::open(tmp.path(), o.clone()).expect("open");
    let lens = [100, 4095, 4096, 4097, 8191, 12288, 70_000, 333];
    for (i, &len) in lens.iter().enumerate() {
        db.put(key(i), value(i, 0, len)).expect("put");
    }
    let check = |db: &Db, ctx: &str| {
        for (i, &len) in lens.iter().enumerate() {
            assert_eq!(
                db.get(key(i)).expect("get"),
                Some(value(i, 0, len)),
                "{ctx}: value {i}"
            );
        }
    };
    check(&db, "memtable");
    db.flush().expect("flush");
    check(&db, "flushed");
    db.close().expect("close");
    let db = Db::open(tmp.path(), o).expect("reopen");
    check(&db, "reopened");
    assert!(db.stats().value_segments >= 1);
}

/// Scans load separated values a window at a time: neighbouring values in
/// one read. Counted here through the simulated file system: a full scan
/// reads the journal far fewer times than it yields separated values.
#[test]
fn scans_read_neighbouring_values_together() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reads.clone();
    fs.set_hook(Some(Arc::new(move |op: &cairndb::io::OpInfo| {
        if op.op == cairndb::io::OpKind::Read && op.path.to_string_lossy().ends_with(".journal") {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    })));
    for (dir_name, rev) in [("forward", false), ("reverse", true)] {
        reads.store(0, std::sync::atomic::Ordering::SeqCst);
        let got = if rev {
            scan_back(&db)
        } else {
            scan(&db).expect("scan")
        };
        assert_eq!(got, expected(0), "{dir_name} scan");
        let n = reads.load(std::sync::atomic::Ordering::SeqCst);
        let separated = N / 2;
        assert!(
            n * 4 <= separated,
            "{dir_name}: {n} journal reads for {separated} separated values"
        );
    }
    fs.set_hook(None);
}

/// A damaged value in a window read ahead while the one before it is
/// consumed (past the first 127 entries of a scan), both ways: the scan
/// yields every entry before it, then the error, then ends.
#[test]
fn a_damaged_value_read_ahead_ends_a_scan_at_its_key() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    let n = 500;
    for i in 0..n {
        db.put(key(i), value(i, 0, BIG)).expect("put");
    }
    let victim = 300;
    let db = damage_and_reopen(&fs, db, &value(victim, 0, BIG), 100, 0x01);
    let forward: Vec<_> = db.iter().collect();
    let mut backward: Vec<_> = db.iter().rev().collect();
    for (got, before, dir) in [
        (&forward, victim, "forward"),
        (&mut backward, n - 1 - victim, "backward"),
    ] {
        assert_eq!(
            got.len(),
            before + 1,
            "{dir}: entries before the damage, then the error"
        );
        for (j, g) in got[..before].iter().enumerate() {
            let i = if dir == "forward" { j } else { n - 1 - j };
            assert_eq!(
                g.as_ref().expect("entry before the damage"),
                &(key(i), value(i, 0, BIG)),
                "{dir}"
            );
        }
        match &got[before] {
            Err(Error::Corruption { detail, .. }) => {
                assert!(detail.contains("checksum"), "{detail}")
            }
            other => panic!("{dir}: expected corruption at the damaged key, got {other:?}"),
        }
    }
}

/// A damaged value inside a read-ahead window: the scan yields every entry
/// before it, then the error, then ends.
#[test]
fn a_damaged_value_ends_a_scan_at_its_key() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    let victim = 80;
    let db = damage_and_reopen(&fs, db, &value(victim, 0, BIG), 100, 0x01);
    let got: Vec<_> = db.iter().collect();
    let want = expected(0);
    assert_eq!(
        got.len(),
        victim + 1,
        "entries before the damage, then the error"
    );
    for (g, w) in got.iter().zip(&want[..victim]) {
        assert_eq!(g.as_ref().expect("entry before the damage"), w);
    }
    match &got[victim] {
        Err(Error::Corruption { detail, .. }) => assert!(detail.contains("checksum"), "{detail}"),
        other => panic!("expected corruption at the damaged key, got {other:?}"),
    }
}

/// Direct scans over values far from key order, on the real file system:
/// each window's reads go to the kernel as one io_uring batch (Linux),
/// the values match what was written, and a damaged value is reported at
/// its key after every entry before it.
#[test]
fn batched_direct_scans_on_the_real_file_system() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = real_fs_opts(ValueReads::Direct, 1024);
    let db = Db::open(tmp.path(), o.clone()).expect("open");
    let n = 2000;
    // Neighbouring keys end up about 1,000 values apart in the journal,
    // each followed by 16 KiB of a value no scan below reads: every value
    // scanned is a device run of its own.
    for j in 0..n {
        let i = j * 1001 % n;
        db.put(key(i), value(i, 0, BIG)).expect("put");
        db.put(format!("z{i:05}"), vec![b'z'; 4 * BIG])
            .expect("put");
    }
    db.flush().expect("flush");
    let want: Vec<_> = (0..n).map(|i| (key(i), value(i, 0, BIG))).collect();
    let scan = |db: &Db| db.prefix("k").collect::<cairndb::Result<Vec<_>>>();
    let got = scan(&db).expect("scan");
    assert_eq!(got.len(), n);
    assert!(
        got == want,
        "a scattered scan differs from what was written"
    );
    let stats = db.stats();
    if cfg!(target_os = "linux") {
        assert!(
            stats.value_read_batches > 0,
            "no window was read as one batch (io_uring refused here?): {stats:?}"
        );
    }
    db.close().expect("close");
    // Flip a byte inside the value of `victim` where the journal holds it.
    let victim = 1200;
    let needle = value(victim, 0, BIG);
    let mut damaged = false;
    for entry in std::fs::read_dir(tmp.path()).expect("list") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("read");
        if let Some(at) = bytes.windows(64).position(|w| w == &needle[..64]) {
            bytes[at + 100] ^= 0x01;
            std::fs::write(&path, &bytes).expect("write");
            damaged = true;
        }
    }
    assert!(damaged, "the victim's value was not found in any file");
    let db = Db::open(tmp.path(), o).expect("reopen");
    let got: Vec<_> = db.prefix("k").collect();
    assert_eq!(
        got.len(),
        victim + 1,
        "entries before the damage, then the error"
    );
    for (g, w) in got.iter().zip(&want[..victim]) {
        assert!(g.as_ref().expect("entry before the damage") == w);
    }
    assert!(
        matches!(&got[victim], Err(Error::Corruption { .. })),
        "expected corruption at the damaged key, got {:?}",
        got[victim].as_ref().map(|(k, _)| k.clone())
    );
}

/// `multi_get` answers each key as `get` does (inline and separated
/// values, from the memtable and from tables, missing and deleted keys,
/// an invalid key failing alone), on the simulated file system and on the
/// real one, where scattered values are read as one batch.
#[test]
fn multi_get_answers_as_get_does() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mem = MemFs::new();
    for real in [false, true] {
        let o = if real {
            real_fs_opts(ValueReads::Direct, 1024)
        } else {
            opts(&mem, 1024)
        };
        let db = Db::open(if real { tmp.path() } else { dir() }, o).expect("open");
        let n = 1200;
        for j in 0..n {
            let i = j * 601 % n;
            db.put(key(i), value(i, 0, len_of(i))).expect("put");
            db.put(format!("z{i:05}"), vec![b'z'; 4 * BIG])
                .expect("put");
        }
        db.flush().expect("flush");
        for i in (0..n).step_by(7) {
            db.delete(key(i)).expect("delete");
        }
        for i in (0..n).step_by(11) {
            db.put(key(i), value(i, 1, len_of(i))).expect("put");
        }
        // Over two windows of separated values (`WINDOW_MAX` 256).
        let mut keys: Vec<Vec<u8>> = (0..n + 20).rev().map(key).collect();
        keys.insert(5, vec![b'x'; 1 << 20]);
        let before = db.stats().value_read_batches;
        let got = db.multi_get(&keys);
        assert_eq!(got.len(), keys.len());
        for (k, g) in keys.iter().zip(&got) {
            match db.get(k) {
                Ok(want) => assert!(
                    g.as_ref().ok() == Some(&want),
                    "real {real}: key {:?}",
                    String::from_utf8_lossy(&k[..k.len().min(8)])
                ),
                Err(_) => assert!(g.is_err(), "an invalid key fails alone"),
            }
        }
        assert!(got[5].is_err() && got[4].is_ok() && got[6].is_ok());
        if real && cfg!(target_os = "linux") {
            assert!(
                db.stats().value_read_batches > before,
                "multi_get read no batch: {:?}",
                db.stats()
            );
        }
    }
}

/// Scans on the real file system (page-cache hits read in place, misses
/// and direct reads from several threads) over values written in random order across flushed segments,
/// a sealed-off journal and the memtable, with overwrites and deletes:
/// forward, reverse, bounded and from both ends, all as a model says.
#[test]
fn scans_over_scattered_values_match_a_model() {
    scans_match_a_model(ValueReads::PageCache);
}

/// The same with flushed values read with direct IO.
#[test]
fn direct_scans_over_scattered_values_match_a_model() {
    scans_match_a_model(ValueReads::Direct);
}

/// The same from the page cache where it holds them, else directly.
#[test]
fn cached_else_direct_scans_over_scattered_values_match_a_model() {
    scans_match_a_model(ValueReads::CachedElseDirect);
}

fn scans_match_a_model(reads: ValueReads) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let o = Options {
        memtable_bytes: 1 << 20,
        ..real_fs_opts(reads, 200)
    };
    let db = Db::open(tmp.path(), o).expect("open");
    let mut model = std::collections::BTreeMap::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for round in 0..3u8 {
        for _ in 0..700 {
            let i = (next() % 900) as usize;
            if next() % 10 == 0 {
                db.delete(key(i)).expect("delete");
                model.remove(&key(i));
            } else {
                let v = value(i, round, 50 + (next() % 9000) as usize);
                db.put(key(i), &v).expect("put");
                model.insert(key(i), v);
            }
        }
        if round < 2 {
            db.flush().expect("flush");
        }
    }
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scan(&db).expect("scan"), want, "forward");
    assert_eq!(scan_back(&db), want, "reverse");
    let bounded: Vec<_> = db
        .range(key(100)..key(700))
        .collect::<cairndb::Result<_>>()
        .expect("range");
    let bounded_want: Vec<_> = model
        .range(key(100)..key(700))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(bounded, bounded_want, "bounded");
    // Both ends of one iterator, alternating: each key once.
    let mut it = db.iter();
    let (mut front, mut rear) = (Vec::new(), Vec::new());
    loop {
        let f = it.next().transpose().expect("front");
        let b = it.next_back().transpose().expect("back");
        front.extend(f.clone());
        rear.extend(b.clone());
        if f.is_none() && b.is_none() {
            break;
        }
    }
    rear.reverse();
    front.extend(rear);
    assert_eq!(front, want, "both ends");
}

/// A full compaction settles separated values: every value still in a
/// journal moves to a values file in key order, 4 KiB values each on a
/// page of its own (so a point read is one page and a scan reads the file
/// front to back). The journals are freed; under the null policy (value
/// GC off) nothing moves.
#[test]
fn a_full_compaction_settles_values_in_key_order() {
    for gc in [0.5, 0.0] {
        let fs = MemFs::new();
        let o = Options {
            journal_bytes: 64 << 10,
            value_gc_live_ratio: gc,
            ..opts(&fs, 1024)
        };
        let db = Db::open(dir(), o.clone()).expect("open");
        write_out_of_order(&db);
        let want: Vec<_> = (0..N).map(|i| (key(i), value(i, 0, len_of(i)))).collect();
        db.compact().expect("compact");
        assert_eq!(scan(&db).expect("scan"), want, "gc {gc}");
        let values = files_with(&fs, dir(), ".values");
        if gc == 0.0 {
            assert!(values.is_empty(), "the null policy moved values");
            continue;
        }
        assert_eq!(
            db.stats().value_segments,
            values.len(),
            "only values files hold values"
        );
        assert_settled_in_key_order(&fs, &values);
        db.close().expect("close");
        let db = Db::open(dir(), o).expect("reopen");
        assert_eq!(scan(&db).expect("scan after reopen"), want);
    }
}

/// Checks that the values files `values` hold every large value once, in
/// key order across the files, each on a page boundary.
fn assert_settled_in_key_order(fs: &MemFs, values: &[String]) {
    let mut seen = Vec::new();
    for name in values {
        let bytes = common::snapshot(fs, dir())[name].clone();
        assert_eq!(bytes.len() % BIG, 0, "{name}: {} bytes", bytes.len());
        for page in bytes.chunks(BIG) {
            let head = String::from_utf8_lossy(&page[..12]).to_string();
            let i: usize = head
                .split('/')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{name}: page starts {head:?}"));
            assert_eq!(page, &value(i, 0, BIG)[..], "{name}: value of key {i}");
            seen.push(i);
        }
    }
    let large: Vec<usize> = (0..N).filter(|&i| len_of(i) == BIG).collect();
    assert_eq!(
        seen, large,
        "values files hold every large value once, in key order"
    );
}

/// Polls `db` until `done` holds of its stats, for at most `secs`.
fn wait_for(db: &Db, secs: u64, done: impl Fn(&cairndb::Stats) -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if done(&db.stats()) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    done(&db.stats())
}

/// A level-0 merge that drops nothing (the keys were new) rewrites level 1
/// for no gain but fewer tables to search, so the next waits for
/// `l0_compaction_trigger_new_keys` tables; once a merge drops overwritten
/// versions (dead values that value GC must learn of), level 0 compacts
/// at `l0_compaction_trigger` again.
#[test]
fn level_0_waits_longer_while_its_merges_meet_only_new_keys() {
    let fs = MemFs::new();
    let o = Options {
        l0_compaction_trigger: 2,
        l0_compaction_trigger_new_keys: 6,
        l0_slowdown_trigger: 8,
        l0_stop_trigger: 12,
        background_compaction: true,
        settle_after_idle: None,
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("open");
    // One level-0 table per call: 50 keys, interleaved with the other
    // rounds' so that every table overlaps level 1.
    let table = |round: usize, fill: u8| {
        for i in 0..50 {
            db.put(key(i * 16 + round), vec![fill; 2048]).expect("put");
        }
        db.flush().expect("flush");
    };
    let settled = |merges: u64| {
        wait_for(&db, 30, |s| {
            s.compactions == merges && s.tables_per_level[0] == 0
        })
    };
    // Until a merge has shown otherwise, level 0 compacts at 2 tables.
    table(0, 1);
    table(1, 1);
    assert!(settled(1), "first merge: {:?}", db.stats());
    // That merge dropped nothing: five more tables of new keys wait.
    for round in 2..7 {
        table(round, 1);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let s = db.stats();
    assert_eq!((s.compactions, s.tables_per_level[0]), (1, 5), "{s:?}");
    table(7, 1);
    assert!(settled(2), "merge at 6 tables: {:?}", db.stats());
    // Six tables overwriting rounds 0..6: their merge drops 300 versions.
    for round in 0..6 {
        table(round, 2);
    }
    assert!(settled(3), "merge of overwrites: {:?}", db.stats());
    // Overwrites found: two tables start a merge again.
    table(6, 3);
    table(7, 3);
    assert!(settled(4), "merge at 2 tables again: {:?}", db.stats());
    for round in 0..8 {
        let want = if round < 6 { 2 } else { 3 };
        for i in 0..50 {
            let k = key(i * 16 + round);
            assert_eq!(
                db.get(&k).expect("get"),
                Some(vec![want; 2048]),
                "round {round}"
            );
        }
    }
}

/// With `settle_after_idle`, the background thread settles values left in
/// journals once the database is idle, as a full compaction would: no
/// `Db::compact` call. Without it, nothing moves however long the
/// database idles.
#[test]
fn an_idle_database_settles_its_values_in_key_order() {
    for idle in [None, Some(std::time::Duration::from_millis(100))] {
        let fs = MemFs::new();
        let o = Options {
            journal_bytes: 64 << 10,
            background_compaction: true,
            settle_after_idle: idle,
            ..opts(&fs, 1024)
        };
        let db = Db::open(dir(), o.clone()).expect("open");
        write_out_of_order(&db);
        db.flush().expect("flush");
        let want = expected(0);
        let unsettled = (N / 2 * BIG) as u64;
        assert_eq!(db.stats().value_bytes_unsettled, unsettled);
        if idle.is_none() {
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let stats = db.stats();
            assert_eq!(stats.value_bytes_unsettled, unsettled, "settled unasked");
            assert_eq!((stats.value_bytes_moved, stats.settle_steps), (0, 0));
            continue;
        }
        assert!(
            wait_for(&db, 30, |s| s.value_bytes_unsettled == 0),
            "still unsettled: {:?}",
            db.stats()
        );
        let stats = db.stats();
        assert!(stats.settle_steps >= 1, "{stats:?}");
        assert_eq!(stats.value_bytes_moved, unsettled);
        assert_eq!(stats.tables_per_level[0], 0, "level 0 merged down");
        assert_eq!(scan(&db).expect("scan"), want);
        let values = files_with(&fs, dir(), ".values");
        assert_eq!(
            stats.value_segments,
            values.len(),
            "only values files hold values"
        );
        assert_settled_in_key_order(&fs, &values);
        db.close().expect("close");
        let db = Db::open(dir(), o).expect("reopen");
        assert_eq!(scan(&db).expect("scan after reopen"), want);
    }
}

/// With level 0 empty, settling takes the deeper tables that still point
/// into journals one at a time and rewrites each into its own level: one
/// step per table, the level stays sorted and disjoint, and the values
/// files again hold every value once, in key order.
#[test]
fn settling_rewrites_deeper_tables_in_place() {
    let fs = MemFs::new();
    let o = Options {
        journal_bytes: 64 << 10,
        table_bytes: 1024,
        l0_compaction_trigger: 1,
        l0_compaction_trigger_new_keys: 1,
        background_compaction: true,
        settle_after_idle: None,
        ..opts(&fs, 1024)
    };
    // Loaded without settling: background compactions move the tables
    // to level 1 and leave the values in the journals.
    let db = Db::open(dir(), o.clone()).expect("open");
    write_out_of_order(&db);
    db.flush().expect("flush");
    assert!(
        wait_for(&db, 30, |s| s.tables_per_level[0] == 0),
        "level 0 never emptied: {:?}",
        db.stats()
    );
    db.close().expect("close");
    let o = Options {
        settle_after_idle: Some(std::time::Duration::from_millis(100)),
        ..o
    };
    let db = Db::open(dir(), o).expect("reopen");
    let before = db.stats();
    let tables = before.tables_per_level[1];
    assert!(tables >= 3, "want several level-1 tables: {before:?}");
    assert_eq!(before.value_bytes_unsettled, (N / 2 * BIG) as u64);
    assert!(
        wait_for(&db, 30, |s| s.value_bytes_unsettled == 0),
        "still unsettled: {:?}",
        db.stats()
    );
    let after = db.stats();
    assert_eq!(after.tables_per_level[0], 0, "{after:?}");
    assert!(
        after.settle_steps >= 2,
        "one step per table that pointed into a journal: {after:?}"
    );
    assert_eq!(after.value_bytes_moved, (N / 2 * BIG) as u64);
    assert_eq!(scan(&db).expect("scan"), expected(0));
    check_reads(&db, 0, "settled in place");
    assert_settled_in_key_order(&fs, &files_with(&fs, dir(), ".values"));
}

/// `Db::settle_now` takes the steps idle settling takes, at once: level 0
/// merged down and then each deeper table still pointing into a journal
/// rewritten in place, until every value lies in values files in key
/// order; under the null policy it moves nothing.
#[test]
fn settle_now_takes_the_idle_steps_at_once() {
    for ratio in [0.0, 0.5] {
        let fs = MemFs::new();
        let o = Options {
            journal_bytes: 64 << 10,
            table_bytes: 1024,
            background_compaction: false,
            settle_after_idle: None,
            value_gc_live_ratio: ratio,
            ..opts(&fs, 1024)
        };
        let db = Db::open(dir(), o).expect("open");
        write_out_of_order(&db);
        db.flush().expect("flush");
        let unsettled = (N / 2 * BIG) as u64;
        assert_eq!(db.stats().value_bytes_unsettled, unsettled);
        let steps = db.settle_now().expect("settle now");
        let stats = db.stats();
        if ratio == 0.0 {
            assert_eq!(steps, 0);
            assert_eq!(stats.value_bytes_unsettled, unsettled, "null policy moved");
            continue;
        }
        assert!(steps >= 1, "{stats:?}");
        assert_eq!(stats.settle_steps, steps);
        assert_eq!(stats.value_bytes_unsettled, 0, "{stats:?}");
        assert_eq!(stats.value_bytes_moved, unsettled);
        assert_eq!(stats.tables_per_level[0], 0, "level 0 merged down");
        assert_eq!(scan(&db).expect("scan"), expected(0));
        check_reads(&db, 0, "settled now");
        assert_settled_in_key_order(&fs, &files_with(&fs, dir(), ".values"));
        assert_eq!(db.settle_now().expect("again"), 0, "nothing left to settle");
    }
}

/// A settling step that meets a damaged value fails alone: nothing it
/// wrote stays, writes go on, `Stats::settle_failures` counts it, and
/// the damage is still reported to the reader of that key only.
#[test]
fn a_failed_settling_step_does_not_stop_writes() {
    let fs = MemFs::new();
    let db = Db::open(dir(), opts(&fs, 1024)).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    db.close().expect("close");
    let victim = value(40, 0, BIG);
    let (name, at) = find_in_journals(&fs, &victim);
    assert!(fs.mutate_byte(&dir().join(&name), at + 100, |b| b ^ 0x01));
    let o = Options {
        background_compaction: true,
        settle_after_idle: Some(std::time::Duration::from_millis(100)),
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("reopen");
    assert!(
        wait_for(&db, 30, |s| s.settle_failures >= 1),
        "no failed step: {:?}",
        db.stats()
    );
    let stats = db.stats();
    assert_eq!(stats.write_error, None, "settling stopped writes");
    assert_eq!(
        stats.value_bytes_moved, 0,
        "a failed step left moves behind"
    );
    assert!(
        files_with(&fs, dir(), ".values").is_empty(),
        "values files left behind"
    );
    db.put(key(1), value(1, 1, 40))
        .expect("a write after the failed step");
    assert!(matches!(db.get(key(40)), Err(Error::Corruption { .. })));
    assert_eq!(db.get(key(42)).expect("get"), Some(value(42, 0, BIG)));
}

/// Keys of the settling-beside-scans tests.
const KEYS: usize = 4096;

/// A database with background compaction, no idle settling and
/// `settle_for_scans` at `ratio`, loaded with `KEYS` 4 KiB values (16 MiB)
/// in 1 MiB journals, in an order far from key order, and flushed.
fn loaded_out_of_order(ratio: f64) -> (MemFs, Db) {
    let fs = MemFs::new();
    let o = Options {
        journal_bytes: 1 << 20,
        memtable_bytes: 1 << 20,
        background_compaction: true,
        settle_after_idle: None,
        settle_for_scans: ratio,
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("open");
    for n in 0..KEYS {
        let i = n * 1237 % KEYS;
        db.put(key(i), value(i, 0, BIG)).expect("put");
    }
    db.flush().expect("flush");
    (fs, db)
}

/// `settle_for_scans`: while writes go on, the background compactions
/// they bring about also settle values still in journals, as far as scans
/// beside them read values at random from journals; with writes alone
/// nothing settles (a load pays no extra write for scans that never
/// come), and with the ratio at 0 scans change nothing either.
#[test]
fn scans_beside_writes_settle_values_while_writes_go_on() {
    // A scan window of 256 keys finds about 16 values in each journal,
    // 64 KiB apart, each read alone.
    for ratio in [0.0, 1.0] {
        let (_fs, db) = loaded_out_of_order(ratio);
        // Keys between the loaded ones, so that every level-0 merge meets
        // the loaded keys' tables.
        let between = |i: usize| format!("k{:05}x", i * 7919 % KEYS).into_bytes();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let written = std::sync::atomic::AtomicUsize::new(0);
        let write_until = |done: &dyn Fn(&cairndb::Stats) -> bool| {
            stop.store(false, std::sync::atomic::Ordering::Relaxed);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let i = written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        db.put(between(i), value(i, 1, BIG)).expect("put");
                    }
                });
                let met = wait_for(&db, 60, done);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                met
            })
        };
        // Writes alone: compactions run, nothing settles.
        let before = db.stats().compactions;
        assert!(
            write_until(&|s| s.compactions >= before + 4),
            "no compactions: {:?}",
            db.stats()
        );
        let s = db.stats();
        assert_eq!(
            (s.value_bytes_settled, s.value_bytes_scanned_scattered),
            (0, 0),
            "settled with no scan: {s:?}"
        );
        // Writes with a scanner beside them.
        let unsettled = s.value_bytes_unsettled;
        let written_before = written.load(std::sync::atomic::Ordering::Relaxed);
        let scanning = std::sync::atomic::AtomicBool::new(true);
        let (met, scans) = std::thread::scope(|sc| {
            let scanner = sc.spawn(|| {
                let mut scans = 0;
                while scanning.load(std::sync::atomic::Ordering::Relaxed) {
                    let n = db.range(key(0)..key(KEYS)).count();
                    assert!(n >= KEYS, "{n} entries scanned");
                    scans += 1;
                }
                scans
            });
            let before = db.stats().compactions;
            let met = write_until(&|s| {
                if ratio > 0.0 {
                    s.value_bytes_settled >= unsettled / 4
                } else {
                    s.compactions >= before + 8 && s.value_bytes_scanned_scattered > 0
                }
            });
            scanning.store(false, std::sync::atomic::Ordering::Relaxed);
            (met, scanner.join().expect("scanner"))
        });
        let s = db.stats();
        assert!(met, "ratio {ratio}, {scans} scans: {s:?}");
        assert!(s.value_bytes_scanned_scattered > 0, "{s:?}");
        if ratio == 0.0 {
            assert_eq!(s.value_bytes_settled, 0, "settled at ratio 0: {s:?}");
        } else {
            // At most the bytes scans read at random, one value more per
            // compaction (the allowance is checked before each move).
            assert!(
                s.value_bytes_settled
                    <= s.value_bytes_scanned_scattered + s.compactions * BIG as u64,
                "{s:?}"
            );
            // What settled left the journals: the bytes still there are
            // at most those before, plus those written meanwhile, less
            // those settled (writes go on, so the total may still grow).
            let added = (written.load(std::sync::atomic::Ordering::Relaxed) - written_before)
                as u64
                * BIG as u64;
            assert!(
                s.value_bytes_unsettled + s.value_bytes_settled <= unsettled + added,
                "{s:?}"
            );
        }
        // Everything reads back: the loaded keys and those written since.
        let n = written.load(std::sync::atomic::Ordering::Relaxed);
        for i in (0..KEYS).step_by(97) {
            assert_eq!(db.get(key(i)).expect("get"), Some(value(i, 0, BIG)));
        }
        let all: Vec<_> = db
            .range(key(0)..key(KEYS))
            .collect::<cairndb::Result<_>>()
            .expect("scan");
        assert_eq!(all.len(), KEYS + n.min(KEYS));
        for (k, v) in all.iter().filter(|(k, _)| !k.ends_with(b"x")) {
            let i: usize = std::str::from_utf8(&k[1..])
                .ok()
                .and_then(|d| d.parse().ok())
                .expect("a loaded key");
            assert_eq!(v, &value(i, 0, BIG));
        }
    }
}

/// `settle_for_scans` without writes: short scans over values in write
/// order pay for settling steps of their own, beside them, with no idle
/// wait and no write to ride on, and settle no more than they read at
/// random (plus one step); at ratio 0, or with point reads alone, nothing
/// moves.
#[test]
fn short_scans_settle_values_without_writes() {
    // A scan of 50 keys reads each value alone.
    for ratio in [0.0, 1.0] {
        let (fs, db) = loaded_out_of_order(ratio);
        let quiet = |db: &Db| {
            let s = db.stats();
            (s.compactions, s.value_bytes_settled)
        };
        // Let the load's own compactions finish.
        let mut last = quiet(&db);
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let now = quiet(&db);
            if now == last {
                break;
            }
            last = now;
        }
        let unsettled = db.stats().value_bytes_unsettled;
        assert!(unsettled >= (KEYS * BIG / 2) as u64, "{:?}", db.stats());
        let settled_before = db.stats().value_bytes_settled;
        // Point reads alone pay for nothing.
        for n in 0..KEYS {
            let i = n * 31 % KEYS;
            assert_eq!(db.get(key(i)).expect("get"), Some(value(i, 0, BIG)));
        }
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert_eq!(
            db.stats().value_bytes_settled,
            settled_before,
            "point reads settled values"
        );
        // Short scans, as YCSB E's: 50 keys from a random start.
        let mut scans = 0usize;
        let mut start = 17usize;
        let met = {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                start = (start * 7919 + 13) % (KEYS - 50);
                let got: Vec<_> = db
                    .range(key(start)..)
                    .take(50)
                    .collect::<cairndb::Result<_>>()
                    .expect("scan");
                for (n, (k, v)) in got.iter().enumerate() {
                    assert_eq!((k, v), (&key(start + n), &value(start + n, 0, BIG)));
                }
                scans += 1;
                let s = db.stats();
                let done = if ratio > 0.0 {
                    s.value_bytes_unsettled <= unsettled / 2
                } else {
                    s.value_bytes_scanned_scattered_short >= 4 * unsettled
                };
                if done || std::time::Instant::now() >= until {
                    break done;
                }
            }
        };
        let s = db.stats();
        assert!(met, "ratio {ratio}, {scans} scans: {s:?}");
        let settled = s.value_bytes_settled - settled_before;
        if ratio == 0.0 {
            assert_eq!(settled, 0, "settled at ratio 0: {s:?}");
            continue;
        }
        // Paid for by the scans' random reads, plus the step that
        // overdrew (at most what was due, 256 MiB at most, a value more).
        assert!(settled > 0, "{s:?}");
        assert!(
            settled <= 2 * s.value_bytes_scanned_scattered_short + BIG as u64,
            "{s:?}"
        );
        // Settled values lie in values files now, and all still read.
        assert!(!files_with(&fs, dir(), ".values").is_empty(), "{s:?}");
        let all: Vec<_> = db
            .range(key(0)..key(KEYS))
            .collect::<cairndb::Result<_>>()
            .expect("scan");
        assert_eq!(all.len(), KEYS);
        for (i, (k, v)) in all.iter().enumerate() {
            assert_eq!((k, v), (&key(i), &value(i, 0, BIG)));
        }
    }
}

/// A settling step short scans paid for rewrites its table whole, so it
/// settles at least 16 times the table's bytes (`SETTLE_PER_REWRITTEN_BYTE`),
/// not only the 16 MiB the scans paid for: with long keys a 2 MiB table
/// points to 40 MiB of values, and scans that paid for 17 MiB see
/// more than 30 MiB settle in one go, which they then owe.
#[test]
fn a_step_short_scans_paid_for_settles_enough_to_be_worth_its_rewrite() {
    const KEYS: usize = 10_000;
    // 200-byte keys that share only their first 6 bytes, so that the
    // tables are large beside their values.
    let long_key = |i: usize| {
        let mut k = key(i);
        let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        while k.len() < 200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            k.push(b'a' + (x % 26) as u8);
        }
        k
    };
    let fs = MemFs::new();
    let o = Options {
        journal_bytes: 1 << 20,
        memtable_bytes: 1 << 20,
        background_compaction: true,
        settle_after_idle: None,
        settle_for_scans: 1.0,
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("open");
    for n in 0..KEYS {
        let i = n * 1237 % KEYS;
        db.put(long_key(i), value(i, 0, BIG)).expect("put");
    }
    db.flush().expect("flush");
    let quiet = |db: &Db| {
        let mut last = db.stats();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(700));
            let now = db.stats();
            let same = |s: &cairndb::Stats| (s.compactions, s.settle_steps, s.value_bytes_settled);
            if same(&now) == same(&last) {
                return now;
            }
            last = now;
        }
    };
    let before = quiet(&db);
    let tables: u64 = before.bytes_per_level.iter().sum();
    let unsettled = before.value_bytes_unsettled;
    assert!(
        tables * 16 > 30 << 20 && unsettled > tables * 16,
        "tables {tables}, unsettled {unsettled}: {before:?}"
    );
    // Short scans from random starts, until they have paid for a step
    // (16 MiB read at random from journals) and a little more.
    let paid = before.value_bytes_scanned_scattered_short + (17 << 20);
    let mut start = 17usize;
    while db.stats().value_bytes_scanned_scattered_short < paid {
        start = (start * 7919 + 13) % (KEYS - 50);
        let mut n = 0;
        for entry in db.range(long_key(start)..).take(50) {
            entry.expect("scan");
            n += 1;
        }
        assert_eq!(n, 50);
    }
    let after = quiet(&db);
    let settled = after.value_bytes_settled - before.value_bytes_settled;
    assert!(
        settled >= tables * 16 - BIG as u64,
        "settled {settled} of {unsettled}, tables {tables}: {after:?}"
    );
    // One step past what was paid for, no more.
    let scanned =
        after.value_bytes_scanned_scattered_short - before.value_bytes_scanned_scattered_short;
    assert!(
        settled <= scanned + tables * 16 + BIG as u64,
        "settled {settled}, scanned {scanned}, tables {tables}: {after:?}"
    );
    for i in (0..KEYS).step_by(101) {
        assert_eq!(db.get(long_key(i)).expect("get"), Some(value(i, 0, BIG)));
    }
}

/// Settling waits while writes or reads of separated values go on, and
/// starts once they stop for `settle_after_idle`.
#[test]
fn settling_waits_while_the_database_is_busy() {
    let fs = MemFs::new();
    let idle = std::time::Duration::from_millis(600);
    let o = Options {
        journal_bytes: 64 << 10,
        background_compaction: true,
        settle_after_idle: Some(idle),
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("open");
    write_all(&db, 0);
    db.flush().expect("flush");
    let busy = |work: &dyn Fn(usize)| {
        let until = std::time::Instant::now() + 3 * idle;
        let mut i = 0;
        while std::time::Instant::now() < until {
            work(i);
            i += 1;
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    // Writes of new keys (no value becomes dead, so value GC has nothing
    // to move either), flushed now and then.
    busy(&|i| {
        db.put(format!("w{i:05}"), vec![b'w'; BIG]).expect("put");
        if i % 20 == 0 {
            db.flush().expect("flush");
        }
    });
    let stats = db.stats();
    assert_eq!(
        (stats.settle_steps, stats.value_bytes_moved),
        (0, 0),
        "settled during writes"
    );
    // Reads of separated values.
    db.flush().expect("flush");
    busy(&|i| {
        let k = key(2 * (i % (N / 2)));
        assert!(db.get(&k).expect("get").is_some());
    });
    let stats = db.stats();
    assert_eq!(
        (stats.settle_steps, stats.value_bytes_moved),
        (0, 0),
        "settled during reads"
    );
    assert!(stats.value_bytes_unsettled > 0);
    assert!(
        wait_for(&db, 30, |s| s.value_bytes_unsettled == 0),
        "never settled once idle: {:?}",
        db.stats()
    );
    let settled: Vec<_> = db
        .range(key(0)..key(N))
        .collect::<cairndb::Result<_>>()
        .expect("scan");
    assert!(settled == expected(0), "the settled range reads back");
    let written = db.prefix("w").count();
    assert!(written > 100, "{written} keys written while busy");
}

/// Background compactions move at most `value_gc_bytes_per_compaction`
/// of values each when not paced by writes (`value_gc_pace` 0; one value
/// more at most: the allowance is checked before each move); the rest
/// waits for later compactions, and every value still reads back.
#[test]
fn background_value_gc_moves_at_most_its_budget_per_compaction() {
    let fs = MemFs::new();
    let budget = 2 * BIG as u64;
    let o = Options {
        journal_bytes: 64 << 10,
        memtable_bytes: 64 << 10,
        l0_compaction_trigger: 2,
        background_compaction: true,
        value_gc_bytes_per_compaction: budget,
        value_gc_pace: 0.0,
        ..opts(&fs, 1024)
    };
    let db = Db::open(dir(), o).expect("open");
    let mut want = expected(0);
    write_all(&db, 0);
    // Value GC moves values only out of segments that earlier compactions
    // found mostly dead, so how soon it starts depends on how background
    // compactions fall: overwrite generation after generation (each one
    // makes more values dead and triggers more compactions) until it has.
    for generation in 1..40u8 {
        for (i, row) in want.iter_mut().enumerate() {
            if i % 4 != 0 {
                row.1 = value(i, generation, len_of(i));
                db.put(&row.0, &row.1).expect("overwrite");
            }
        }
        db.flush().expect("flush");
        common::quiesce(&db);
        if generation >= 3 && db.stats().value_bytes_moved > 0 {
            break;
        }
    }
    let s = db.stats();
    assert!(s.value_bytes_moved > 0, "value GC moved nothing: {s:?}");
    assert!(
        s.value_bytes_moved <= s.compactions * (budget + BIG as u64),
        "{} bytes moved by {} compactions",
        s.value_bytes_moved,
        s.compactions
    );
    assert_eq!(scan(&db).expect("scan"), want);
}
