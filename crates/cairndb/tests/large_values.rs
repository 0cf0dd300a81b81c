//! A large value is written with one copy of it in memory: the batch's.
//! The group commit appends a large batch's body from the batch itself
//! instead of copying it into the group's buffer (before, writing one
//! 512 MiB value peaked at about three times its size: the caller's value,
//! the batch, and the group buffer). A counting allocator measures the
//! peak above what the test itself holds.

use cairndb::{Db, Options, WriteOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; the counters are
// plain atomics and allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The counters are process-wide: the tests of this file take turns, so
/// one's allocations are not counted in another's peak.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_large_value_is_held_once_while_written() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const LEN: usize = 96 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(
        dir.path(),
        Options {
            journal_bytes: 256 << 20,
            ..Options::default()
        },
    )
    .expect("open");
    db.put(b"small", b"first").expect("put");
    let value: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    for (round, sync) in [false, true].into_iter().enumerate() {
        let key = format!("large{round}");
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        db.put_opt(&key, &value, &WriteOptions { sync })
            .expect("put large value");
        let above = PEAK.load(Ordering::Relaxed) - base;
        println!(
            "sync {sync}: peak {} MiB above the caller's {} MiB value",
            above >> 20,
            LEN >> 20
        );
        assert!(
            above < LEN + LEN / 4,
            "sync {sync}: writing a {LEN}-byte value allocated {above} bytes at peak"
        );
        assert_eq!(db.get(&key).expect("get").as_deref(), Some(&value[..]));
    }
    db.close().expect("close");
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get("large1").expect("get").as_deref(), Some(&value[..]));
    assert_eq!(
        db.get("small").expect("get").as_deref(),
        Some(&b"first"[..])
    );
}

/// Large batches (appended from their own buffers) mixed in groups with
/// small ones from concurrent writers: every value reads back from where
/// the commit said it lies, also after reopening (replay computes the
/// places again from the journal) and after a flush (tables point into
/// the journal).
#[test]
fn large_and_small_batches_share_groups() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || Options {
        journal_bytes: 512 << 20,
        value_separation_min: 1024,
        ..Options::default()
    };
    let db = Db::open(dir.path(), opts()).expect("open");
    let value = |t: usize, i: usize| -> Vec<u8> {
        let len = match i % 4 {
            0 => (1 << 20) + 4096 + t, // large: appended from the batch
            1 => 3000,                 // separated, copied into the group
            _ => 40,                   // inline
        };
        (0..len).map(|j| (j * 7 + t * 13 + i) as u8).collect()
    };
    std::thread::scope(|s| {
        for t in 0..4 {
            let db = &db;
            s.spawn(move || {
                for i in 0..24 {
                    let mut b = cairndb::WriteBatch::new();
                    b.put(format!("t{t}-{i:03}"), value(t, i))
                        .expect("batch put");
                    b.put(format!("t{t}-{i:03}-small"), b"x")
                        .expect("batch put");
                    db.write(b, &WriteOptions { sync: i % 3 == 0 })
                        .expect("write");
                }
            });
        }
    });
    let check = |db: &Db, what: &str| {
        for t in 0..4 {
            for i in 0..24 {
                let got = db.get(format!("t{t}-{i:03}")).expect("get");
                assert_eq!(got, Some(value(t, i)), "{what}: t{t}-{i:03}");
            }
        }
    };
    check(&db, "live");
    db.close().expect("close");
    let db = Db::open(dir.path(), opts()).expect("reopen");
    check(&db, "replayed");
    db.flush().expect("flush");
    check(&db, "flushed");
}
