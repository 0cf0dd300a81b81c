//! Shared scans (`read/share.rs`): long scans over settled values read
//! each chunk of a values file once, however many scanners need it at the
//! same time. Checked here through `Stats::scan_chunk_reads`: two scans
//! interleaved read what one scan reads, both ways; scanners on threads
//! all get every value right; damage in a shared chunk is reported at its
//! key.

mod common;

use cairndb::io::MemFs;
use cairndb::{Db, Error, KeyValue, Options};
use common::files_with;
use std::path::Path;
use std::sync::Arc;

const BIG: usize = 4096;
/// 96 MiB of values: more than the share keeps (16 chunks of 4 MiB).
const N: usize = 24576;
/// Bytes of one chunk of the share.
const CHUNK: u64 = cairndb::limits::SCAN_CHUNK_BYTES;

fn dir() -> &'static Path {
    Path::new("/db")
}

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("{i}/").into_bytes();
    v.extend((0..BIG - v.len()).map(|j| b'a' + ((i * 7 + j) % 26) as u8));
    v
}

/// A database holding `n` 4 KiB values, settled into values files by a
/// full compaction (written in an order far from key order first).
fn settled(fs: &MemFs, n: usize) -> Db {
    let o = Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 1 << 20,
        // Values files roll over at this size: `N` values fill two.
        journal_bytes: 64 << 20,
        background_compaction: false,
        value_separation_min: 1024,
        ..Options::default()
    };
    let db = Db::open(dir(), o).expect("open");
    for i in (0..n).map(|i| (i * 4099) % n) {
        db.put(key(i), value(i)).expect("put");
    }
    db.compact().expect("compact");
    assert!(!files_with(fs, dir(), ".values").is_empty(), "settled");
    db
}

/// Scans the whole database of `N` entries once, checking each.
fn scan_all(db: &Db) {
    let mut n = 0;
    for kv in db.iter() {
        assert_eq!(kv.expect("entry"), (key(n), value(n)), "entry {n}");
        n += 1;
    }
    assert_eq!(n, N);
}

fn reads(db: &Db) -> u64 {
    db.stats().scan_chunk_reads
}

/// Steps `scans` in turn, one entry each, checking every entry against
/// `want(step)`, until all end; returns how many entries each yielded.
type Scan<'a> = Box<dyn Iterator<Item = cairndb::Result<KeyValue>> + 'a>;

fn interleave(scans: &mut [Scan<'_>], want: impl Fn(usize) -> usize) -> Vec<usize> {
    let mut yielded = vec![0; scans.len()];
    let mut live = scans.len();
    while live > 0 {
        live = 0;
        for (s, n) in scans.iter_mut().zip(&mut yielded) {
            if let Some(kv) = s.next() {
                let i = want(*n);
                assert_eq!(kv.expect("entry"), (key(i), value(i)), "entry {n}");
                *n += 1;
                live += 1;
            }
        }
    }
    yielded
}

#[test]
fn interleaved_scans_read_each_chunk_once() {
    let fs = MemFs::new();
    let db = settled(&fs, N);
    // A short scan reads only what it yields, not whole chunks.
    let before = reads(&db);
    assert_eq!(db.range(key(100)..).take(127).count(), 127);
    assert_eq!(reads(&db), before, "a scan of 127 entries read chunks");

    let before = reads(&db);
    scan_all(&db);
    let alone = reads(&db) - before;
    let chunks = (N * BIG) as u64 / CHUNK;
    assert!(
        alone >= chunks - 2 && alone <= chunks + 4,
        "a lone scan read {alone} chunks for {chunks} chunks' worth of values"
    );
    // Dropped chunks give their buffers to the next reads: fewer buffers
    // than chunks, and a second scan needs few new ones (a chunk dropped
    // while the scan still holds it comes back only once let go).
    let new = db.stats().scan_new_buffers;
    assert!(
        new > 0 && new < chunks,
        "{new} new buffers for {chunks} chunks"
    );
    scan_all(&db);
    let again = db.stats().scan_new_buffers - new;
    assert!(again < chunks / 4, "a second scan took {again} new buffers");
    let ahead = |db: &Db| db.stats().scan_chunks_read_ahead;
    assert!(
        ahead(&db) > chunks / 2,
        "a long scan reads ahead: {}",
        ahead(&db)
    );

    // Two forward scans side by side, then two backward: together they
    // read what one reads (without sharing: twice as much).
    for backward in [false, true] {
        let before = reads(&db);
        let ahead_before = ahead(&db);
        let mut scans: Vec<Scan<'_>> = if backward {
            vec![Box::new(db.iter().rev()), Box::new(db.iter().rev())]
        } else {
            vec![Box::new(db.iter()), Box::new(db.iter())]
        };
        let counts = interleave(&mut scans, |n| if backward { N - 1 - n } else { n });
        assert_eq!(counts, [N, N]);
        let both = reads(&db) - before;
        assert!(
            both <= alone + 2,
            "backward {backward}: two scans read {both} chunks, one alone {alone}"
        );
        // Most chunks the pair read (those the share no longer kept) were
        // read ahead of them, downward for backward scans. (Not all: the
        // chunks the lone scan left are kept for the pair while it is
        // within reach of them, so a read ahead may find no room.)
        let read_ahead = ahead(&db) - ahead_before;
        assert!(
            read_ahead * 2 >= both,
            "backward {backward}: {read_ahead} of {both} chunks read ahead"
        );
    }
}

/// A lone forward scan over several values files reads ahead across each
/// file's end into the next file, which no scan crossed before: every
/// chunk but the first two is read ahead of the scan (a scan reads ahead
/// once it has moved from one chunk to the next and so has a direction).
#[test]
fn a_first_scan_reads_ahead_into_the_next_values_file() {
    let fs = MemFs::new();
    let db = settled(&fs, N);
    let files = files_with(&fs, dir(), ".values").len();
    assert!(files >= 2, "{files} values files");
    let (reads_before, ahead_before) = (reads(&db), db.stats().scan_chunks_read_ahead);
    scan_all(&db);
    let read = reads(&db) - reads_before;
    let ahead = db.stats().scan_chunks_read_ahead - ahead_before;
    assert_eq!(
        ahead,
        read - 2,
        "{read} chunks read over {files} values files, {ahead} of them ahead"
    );
}

/// Reads ahead go on by themselves while a scan stays where it is (busy
/// with what it has), so the device keeps working for it; and they stop a
/// few chunks on (`STREAM_AHEAD`, 6), so a scan that stops costs little.
#[test]
fn reads_ahead_go_on_a_few_chunks_past_a_scan_that_holds_still() {
    let fs = MemFs::new();
    let db = settled(&fs, N);
    let before = reads(&db);
    let per_chunk = (CHUNK / BIG as u64) as usize;
    let mut it = db.iter();
    // Into the second chunk: the scan has moved forward once.
    for n in 0..per_chunk + 100 {
        assert_eq!(
            it.next().expect("entry").expect("entry"),
            (key(n), value(n))
        );
    }
    // Wait for the reads in flight (and those they start) to end.
    let mut last = reads(&db);
    let mut still = 0;
    for _ in 0..500 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let now = reads(&db);
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still >= 20 {
            break;
        }
    }
    let read = last - before;
    // The scan took chunk 1, and its iterator's windows reach at most one
    // chunk further: reads started by the scan alone (three past the
    // chunk of its last run) end by chunk 5, six past it by chunk 7 at
    // least and chunk 8 at most.
    assert!(
        (8..=9).contains(&read),
        "{read} chunks read for a scan holding still in chunk 1"
    );
    drop(it);
}

#[test]
fn scanners_on_threads_all_see_every_value() {
    let fs = MemFs::new();
    let db = settled(&fs, N);
    std::thread::scope(|s| {
        for t in 0..4 {
            let db = &db;
            s.spawn(move || {
                for pass in 0..2 {
                    let got: Vec<_> = if t % 2 == 0 {
                        db.iter().map(|kv| kv.expect("entry")).collect()
                    } else {
                        let mut v: Vec<_> = db.iter().rev().map(|kv| kv.expect("entry")).collect();
                        v.reverse();
                        v
                    };
                    assert_eq!(got.len(), N, "thread {t} pass {pass}");
                    for (i, kv) in got.iter().enumerate() {
                        assert!(
                            *kv == (key(i), value(i)),
                            "thread {t} pass {pass}: entry {i}"
                        );
                    }
                }
            });
        }
    });
    let s = db.stats();
    assert!(s.scan_chunk_reads > 0, "{s:?}");
}

/// A value damaged in a values file, read through a shared chunk: a
/// forward scan and a backward one each yield every entry before it, then
/// the error; the chunk kept for both holds the damage, and each reports
/// it rather than a value.
#[test]
fn damage_in_a_shared_chunk_is_reported_at_its_key() {
    let fs = MemFs::new();
    let n = 1024;
    let db = settled(&fs, n);
    let victim = 700;
    let needle = value(victim);
    let mut hit = None;
    for name in files_with(&fs, dir(), ".values") {
        let bytes = cairndb::io::read_all(&fs, &dir().join(&name)).expect("read");
        if let Some(at) = bytes.windows(needle.len()).position(|w| w == needle) {
            hit = Some((name, at));
        }
    }
    let (name, at) = hit.expect("the value is in a values file");
    assert!(fs.mutate_byte(&dir().join(&name), at + 2000, |b| b ^ 0x10));
    for backward in [false, true] {
        let got: Vec<_> = if backward {
            db.iter().rev().collect()
        } else {
            db.iter().collect()
        };
        let before = if backward { n - 1 - victim } else { victim };
        assert_eq!(got.len(), before + 1, "backward {backward}");
        match &got[before] {
            Err(Error::Corruption { detail, .. }) => {
                assert!(detail.contains("checksum"), "{detail}")
            }
            other => panic!("backward {backward}: expected corruption, got {other:?}"),
        }
    }
    assert!(reads(&db) > 0);
}

/// On the real file system, through the page cache, with direct reads
/// (aligned chunks, the last one cut where the file ends) and from the
/// page cache else directly: values of uneven sizes, settled, scanned both
/// ways by two scanners at once.
#[test]
fn shared_scans_on_the_real_file_system() {
    use cairndb::ValueReads;
    for direct in [
        ValueReads::PageCache,
        ValueReads::Direct,
        ValueReads::CachedElseDirect,
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let o = Options {
            background_compaction: false,
            value_separation_min: 1024,
            value_reads: direct,
            ..Options::default()
        };
        let db = Db::open(tmp.path(), o).expect("open");
        let n = 3000;
        let sized = |i: usize| {
            let mut v = value(i);
            v.resize(1500 + (i * 37) % 3500, b'z');
            v
        };
        for i in (0..n).map(|i| (i * 4099) % n) {
            db.put(key(i), sized(i)).expect("put");
        }
        db.compact().expect("compact");
        std::thread::scope(|s| {
            for backward in [false, true] {
                let db = &db;
                s.spawn(move || {
                    let mut got: Vec<_> = if backward {
                        db.iter().rev().collect::<cairndb::Result<_>>()
                    } else {
                        db.iter().collect::<cairndb::Result<_>>()
                    }
                    .expect("scan");
                    if backward {
                        got.reverse();
                    }
                    assert_eq!(got.len(), n, "{direct:?} backward {backward}");
                    for (i, kv) in got.iter().enumerate() {
                        assert!(*kv == (key(i), sized(i)), "{direct:?}: entry {i}");
                    }
                });
            }
        });
        assert!(reads(&db) > 0, "{direct:?}: no chunk was shared");
    }
}

/// `Iter::next_ref` lends the values of a long scan out of the shared
/// chunks themselves: two scanners side by side get the same bytes at the
/// same address (a copy each would differ), and every entry is what
/// `next` yields.
#[test]
fn borrowed_scans_lend_values_out_of_shared_chunks() {
    let fs = MemFs::new();
    let db = settled(&fs, N);
    let (mut a, mut b) = (db.iter(), db.iter());
    let mut same_bytes = 0;
    for i in 0..N {
        let (ka, va) = a.next_ref().expect("a ended early").expect("a");
        let (kb, vb) = b.next_ref().expect("b ended early").expect("b");
        assert!(ka == key(i) && va == value(i), "a: entry {i}");
        assert!(kb == key(i) && vb == value(i), "b: entry {i}");
        if va.as_ptr() == vb.as_ptr() {
            same_bytes += 1;
        }
    }
    assert!(a.next_ref().is_none() && b.next_ref().is_none());
    // All but the first 127 entries (read before the scan reads ahead)
    // and the few values that straddle two chunks.
    assert!(
        same_bytes > N * 9 / 10,
        "{same_bytes} of {N} values lent out of one chunk to both"
    );
    let owned: Vec<_> = db.iter().map(|kv| kv.expect("entry")).collect();
    let mut lent = Vec::new();
    let mut iter = db.iter();
    while let Some(kv) = iter.next_ref() {
        let (k, v) = kv.expect("entry");
        lent.push((k.to_vec(), v.to_vec()));
    }
    assert!(owned == lent, "next and next_ref yield the same entries");
}

/// Options for `N` values on real files in `dir`, read with
/// `CachedElseDirect`; the values written far from key order (so they stay
/// where they were written: in journals, or with `value_partitions` in
/// value streams), flushed, and the database closed.
fn written_scattered(dir: &Path, value_partitions: usize) -> Options {
    let opts = Options {
        value_reads: cairndb::ValueReads::CachedElseDirect,
        background_compaction: false,
        settle_after_idle: None,
        warm_written_values: false,
        memtable_bytes: 1 << 20,
        value_partitions,
        ..Options::default()
    };
    let db = Db::open(dir, opts.clone()).expect("open");
    for i in (0..N).map(|i| (i * 2749) % N) {
        db.put(key(i), value(i)).expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    opts
}

/// Values still in journals, in write order, scanned by two long scans at
/// once: their scattered reads go through the page cache, where one
/// scan's read serves the other, instead of each reading every value
/// directly. Alone, a scan keeps the policy it was given (direct reads of
/// what the page cache lacks). On real files: the simulated file system
/// has no page cache to tell apart.
#[test]
fn long_scans_together_share_scattered_reads_through_the_page_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Values in journals; value streams are read whole by any long scan
    // (`a_long_scan_reads_value_streams_whole`).
    let opts = written_scattered(tmp.path(), 0);
    let db = Db::open(tmp.path(), opts).expect("reopen");
    scan_all(&db);
    let alone = db.stats();
    assert_eq!(
        alone.value_reads_buffered, 0,
        "a lone scan read through the page cache"
    );
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| scan_all(&db));
        }
    });
    let together = db.stats();
    let buffered = together.value_reads_buffered - alone.value_reads_buffered;
    assert!(
        buffered > 0,
        "two long scans read no value through the page cache ({} direct)",
        together.value_reads_direct - alone.value_reads_direct
    );
}

/// Values written far from key order into value streams, on real files
/// with direct reads: a long scan takes each flushed stream whole, a chunk
/// per request, instead of reading each value alone as it does for values
/// in journals (`long_scans_together_share_scattered_reads_through_the_page_cache`);
/// only its first window, before it counts as long, reads values one by
/// one.
#[test]
fn a_long_scan_reads_value_streams_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let opts = written_scattered(tmp.path(), 32);
    let stream_bytes: u64 = std::fs::read_dir(tmp.path())
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".stream"))
        .map(|e| e.metadata().expect("stat").len())
        .sum();
    assert!(
        stream_bytes > (N * BIG / 2) as u64,
        "{stream_bytes} bytes of streams"
    );

    let db = Db::open(tmp.path(), opts).expect("reopen");
    scan_all(&db);
    let s = db.stats();
    let reads = s.value_reads_direct + s.value_reads_cached + s.value_reads_buffered;
    assert!(
        reads < N as u64 / 8,
        "a long scan over value streams made {reads} reads for {N} values"
    );
    assert!(
        s.scan_stream_bytes_read > stream_bytes / 2 && s.scan_stream_bytes_read <= stream_bytes,
        "{} bytes of {stream_bytes} read whole",
        s.scan_stream_bytes_read
    );
    // Every chunk read went into a buffer: a new one, or one a chunk
    // read before left.
    assert!(
        s.scan_stream_new_buffers > 0 && s.scan_stream_new_buffers <= s.scan_stream_chunk_reads,
        "{} new buffers for {} chunk reads",
        s.scan_stream_new_buffers,
        s.scan_stream_chunk_reads
    );
}
