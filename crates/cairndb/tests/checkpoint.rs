//! Checkpoints (`Db::checkpoint`): a copy at one seqno while writes go on,
//! opened while the source keeps being written; keyspaces; journals
//! copied rather than linked (the source recycles them in place); the
//! cost is the mutable part, not the database.

use cairndb::io::{Fs, MemFs};
use cairndb::{Db, Error, Options, WriteOptions};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WRITERS: usize = 4;

fn key(t: usize, i: u64) -> Vec<u8> {
    format!("w{t}-{i:08}").into_bytes()
}

/// Small values inline, every fourth one separated (above 1 KiB), so the
/// checkpoint holds tables, journals with separated values and streams.
fn value(t: usize, i: u64) -> Vec<u8> {
    let len = if i.is_multiple_of(4) { 1500 } else { 40 };
    let mut v = format!("{t}:{i}:").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

/// Writers at full speed: each puts `w{t}-{i}` for i = 0, 1, ... and
/// overwrites `last-{t}` with i in the same batch, then counts i as
/// acknowledged. Returns the counters, the stop flag and the threads.
fn start_writers(
    db: &Db,
) -> (
    Arc<Vec<AtomicU64>>,
    Arc<AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
) {
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..WRITERS)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut b = cairndb::WriteBatch::new();
                    b.put(key(t, i), value(t, i)).expect("put");
                    b.put(format!("last-{t}"), i.to_string()).expect("put");
                    // Every 16th synced: values in the journal itself.
                    let opts = WriteOptions {
                        sync: i.is_multiple_of(16),
                    };
                    db.write(b, &opts).expect("write");
                    i += 1;
                    acked[t].store(i, Ordering::Release);
                }
            })
        })
        .collect();
    (acked, stop, threads)
}

fn counts(acked: &[AtomicU64]) -> Vec<u64> {
    acked.iter().map(|a| a.load(Ordering::Acquire)).collect()
}

/// Checks that `ck` holds, per writer, exactly the prefix 0..n of its
/// writes with `before[t] <= n <= after[t] + 1` (the write in flight when
/// `after` was read may be in), and `last-{t}` = n - 1. Returns the n.
fn check_prefixes(ck: &Db, before: &[u64], after: &[u64]) -> Vec<u64> {
    let mut held = Vec::new();
    for t in 0..WRITERS {
        let prefix = format!("w{t}-");
        let mut n = 0u64;
        for kv in ck.prefix(&prefix) {
            let (k, v) = kv.expect("scan the checkpoint");
            assert_eq!(k, key(t, n), "writer {t}: the checkpoint skips a write");
            assert_eq!(v, value(t, n), "writer {t}: wrong value of write {n}");
            n += 1;
        }
        assert!(
            n >= before[t],
            "writer {t}: {n} writes in the checkpoint, {} were acknowledged before it",
            before[t]
        );
        assert!(
            n <= after[t] + 1,
            "writer {t}: {n} writes in the checkpoint, only {} acknowledged when it returned",
            after[t]
        );
        let last = ck.get(format!("last-{t}")).expect("get last");
        let want = n.checked_sub(1).map(|l| l.to_string().into_bytes());
        assert_eq!(
            last, want,
            "writer {t}: last-{t} is not of the same instant"
        );
        held.push(n);
    }
    held
}

#[test]
fn a_checkpoint_under_full_speed_writers_holds_exactly_the_writes_up_to_its_seqno() {
    let root = tempfile::tempdir().expect("tempdir");
    let (src, ck_dir) = (root.path().join("db"), root.path().join("ck"));
    let opts = Options {
        memtable_bytes: 256 << 10,
        journal_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Db::open(&src, opts.clone()).expect("open");
    let (acked, stop, threads) = start_writers(&db);
    // Let the database grow: several flushes, tables, streams.
    let until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < until || db.stats().flushes < 3 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = counts(&acked);
    let made = db.checkpoint_with_stats(&ck_dir).expect("checkpoint");
    let after = counts(&acked);
    assert!(
        made.files_linked > 0,
        "tables are hard-linked on one file system: {made:?}"
    );
    // The checkpoint opens while the source keeps being written.
    let ck = Db::open(&ck_dir, opts.clone()).expect("open the checkpoint");
    assert_eq!(
        ck.stats().last_seqno,
        made.seqno,
        "its seqno is the checkpoint's"
    );
    let held = check_prefixes(&ck, &before, &after);
    assert!(held.iter().sum::<u64>() > 0);
    // It is a database of its own: writes to it do not reach the source.
    ck.put("only-in-checkpoint", "1").expect("put");
    ck.close().expect("close the checkpoint");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let total = counts(&acked);
    assert_eq!(db.get("only-in-checkpoint").expect("get"), None);
    db.close().expect("close");
    // Reopened after the source moved on (compactions, recycled
    // journals), it still holds the same writes.
    let ck = Db::open(&ck_dir, opts).expect("reopen the checkpoint");
    assert_eq!(
        check_prefixes(
            &ck,
            &held,
            &held.iter().map(|n| n.saturating_sub(1)).collect::<Vec<_>>()
        ),
        held
    );
    assert!(total.iter().zip(&held).all(|(t, h)| t >= h));
}

fn mem_opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 64 << 10,
        journal_bytes: 256 << 10,
        journal_recycle: true,
        ..Options::default()
    }
}

#[test]
fn a_checkpoint_keeps_keyspaces_and_links_journals_the_source_never_recycles() {
    let fs = MemFs::new();
    // No background compaction: journals become free at `compact` only,
    // and the writes after it recycle them.
    let opts = Options {
        background_compaction: false,
        ..mem_opts(&fs)
    };
    let db = Db::open("/db", opts).expect("open");
    let users = db.keyspace("users").expect("users");
    let gone = db.keyspace("gone").expect("gone");
    let sync = WriteOptions { sync: true };
    for i in 0..200u32 {
        // Synced 2 KiB values: separated, in the journals themselves.
        users
            .put_opt(format!("u{i:04}"), vec![i as u8; 2048], &sync)
            .expect("put");
        db.put(format!("d{i:04}"), format!("v{i}")).expect("put");
        gone.put(format!("g{i:04}"), "x").expect("put");
    }
    db.drop_keyspace("gone").expect("drop");
    let made = db.checkpoint_with_stats("/ck").expect("checkpoint");
    assert!(made.files_linked > 0, "{made:?}");
    assert_eq!(
        (made.files_copied, made.bytes_copied),
        (0, 0),
        "journals holding values are linked like every other file"
    );
    let journals = |dir: &str| -> Vec<String> {
        let mut names = fs.list(Path::new(dir)).expect("list");
        names.retain(|n| n.ends_with(".journal"));
        names.sort();
        names
    };
    let linked = journals("/ck");
    assert!(
        linked.len() > 1,
        "the checkpoint holds journals: {linked:?}"
    );
    // The source goes on: more synced values, a compaction that settles
    // every value out of the journals (they become free files), then
    // more journals, made from the free files: the journals the
    // checkpoint linked would be overwritten in place if they were
    // reused: the source must delete them instead.
    for i in 0..600u32 {
        users
            .put_opt(format!("u{i:04}"), vec![!(i as u8); 2048], &sync)
            .expect("put");
    }
    db.compact().expect("compact");
    for i in 0..600u32 {
        users
            .put_opt(format!("u{i:04}"), vec![!(i as u8); 2048], &sync)
            .expect("put");
    }
    db.flush().expect("flush");
    assert!(
        db.stats().journals_recycled > 0,
        "the source recycled journals: the test needs it"
    );
    let ck = Db::open("/ck", mem_opts(&fs)).expect("open the checkpoint");
    assert_eq!(ck.stats().last_seqno, made.seqno);
    assert_eq!(ck.keyspaces(), ["default", "users"]);
    let ck_users = ck.keyspace("users").expect("users");
    for i in 0..200u32 {
        assert_eq!(
            ck_users.get(format!("u{i:04}")).expect("get"),
            Some(vec![i as u8; 2048]),
            "value {i} of keyspace users"
        );
        assert_eq!(
            ck.get(format!("d{i:04}")).expect("get"),
            Some(format!("v{i}").into_bytes())
        );
    }
    assert_eq!(ck_users.iter().count(), 200);
    assert_eq!(ck.keyspace("gone").expect("gone").iter().count(), 0);
    // The source still reads its own newer values.
    assert_eq!(users.get("u0001").expect("get"), Some(vec![!1u8; 2048]));
}

#[test]
fn a_checkpoint_of_a_settled_database_links_and_copies_little() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    for i in 0..2000u32 {
        db.put(format!("k{i:05}"), vec![i as u8; 1500])
            .expect("put");
    }
    db.compact().expect("compact");
    db.put("one-more", "x").expect("put");
    let made = db.checkpoint_with_stats("/ck").expect("checkpoint");
    assert!(made.bytes_linked > 2000 * 1500, "{made:?}");
    assert!(
        made.bytes_copied * 20 < made.bytes_linked,
        "the copy is the mutable part: {made:?}"
    );
    let ck = Db::open("/ck", mem_opts(&fs)).expect("open");
    assert_eq!(ck.iter().count(), 2001);
    assert_eq!(
        ck.get("k01999").expect("get"),
        Some(vec![1999u32 as u8; 1500])
    );
}

#[test]
fn a_checkpoint_refuses_a_directory_with_files_and_takes_an_empty_one() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    db.put("a", "1").expect("put");
    // A database directory is not empty.
    let err = db.checkpoint("/db").expect_err("not empty");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    db.checkpoint("/ck").expect("checkpoint");
    let err = db.checkpoint("/ck").expect_err("not empty");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // An empty database checkpoints too.
    let empty = Db::open("/empty", mem_opts(&fs)).expect("open");
    assert_eq!(empty.checkpoint("/ck2").expect("checkpoint"), 0);
    let ck = Db::open(Path::new("/ck2"), mem_opts(&fs)).expect("open");
    assert_eq!(ck.iter().count(), 0);
}

/// Once `checkpoint` returns, a power cut (clean, or tearing what was not
/// synced) leaves the checkpoint whole: its copies, manifest, CURRENT and
/// names were synced. Fails if any of those syncs is left out.
#[test]
fn a_checkpoint_survives_a_power_cut_once_it_returned() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    let users = db.keyspace("users").expect("users");
    for i in 0..300u32 {
        // Synced separated values sit in journals, which are copied.
        users
            .put_opt(
                format!("u{i:04}"),
                vec![i as u8; 1500],
                &WriteOptions {
                    sync: i.is_multiple_of(2),
                },
            )
            .expect("put");
    }
    let seqno = db.checkpoint("/ck").expect("checkpoint");
    for (crash, seed) in [
        (cairndb::io::Crash::Clean, 0),
        (cairndb::io::Crash::Torn, 1),
        (cairndb::io::Crash::Torn, 2),
    ] {
        let image = fs.crash_image(crash, seed);
        let opts = Options {
            fs: Arc::new(image),
            ..mem_opts(&fs)
        };
        let ck = Db::open("/ck", opts).expect("open the checkpoint after a power cut");
        assert_eq!(ck.stats().last_seqno, seqno, "{crash:?}");
        let users = ck.keyspace("users").expect("users");
        for i in 0..300u32 {
            assert_eq!(
                users.get(format!("u{i:04}")).expect("get"),
                Some(vec![i as u8; 1500]),
                "{crash:?} seed {seed}: value {i}"
            );
        }
    }
}

/// A file system whose hard links always fail as across file systems
/// (`EXDEV`): the checkpoint copies every file instead.
struct NoLinks(MemFs);

impl cairndb::io::Fs for NoLinks {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn cairndb::io::FileWrite>> {
        self.0.create(path)
    }
    fn reuse(&self, from: &Path, to: &Path) -> std::io::Result<Box<dyn cairndb::io::FileWrite>> {
        self.0.reuse(from, to)
    }
    fn open(&self, path: &Path) -> std::io::Result<Arc<dyn cairndb::io::FileRead>> {
        self.0.open(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.rename(from, to)
    }
    fn hard_link(&self, _from: &Path, _to: &Path) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::CrossesDevices))
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.0.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.0.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn lock(&self, dir: &Path) -> std::io::Result<Box<dyn cairndb::io::DirLock>> {
        self.0.lock(dir)
    }
}

#[test]
fn where_links_fail_the_checkpoint_copies_and_is_the_same() {
    let fs = MemFs::new();
    let opts = Options {
        fs: Arc::new(NoLinks(fs.clone())),
        ..mem_opts(&fs)
    };
    let db = Db::open("/db", opts.clone()).expect("open");
    for i in 0..500u32 {
        db.put(format!("k{i:04}"), vec![i as u8; 1200])
            .expect("put");
    }
    db.compact().expect("compact");
    let made = db.checkpoint_with_stats("/ck").expect("checkpoint");
    assert_eq!(made.files_linked, 0, "{made:?}");
    assert!(made.bytes_copied > 500 * 1200, "{made:?}");
    // The copies are files of their own: damaging the source's tables
    // leaves the checkpoint intact.
    for name in fs.list(Path::new("/db")).expect("list") {
        if name.ends_with(".table") {
            let path = Path::new("/db").join(&name);
            let len = fs.file_len(&path).expect("len") as usize;
            for at in (0..len).step_by(512) {
                fs.mutate_byte(&path, at, |b| !b);
            }
        }
    }
    drop(db);
    let ck = Db::open("/ck", opts).expect("open the checkpoint");
    assert_eq!(ck.iter().count(), 500);
    for i in (0..500u32).step_by(7) {
        assert_eq!(
            ck.get(format!("k{i:04}")).expect("get"),
            Some(vec![i as u8; 1200])
        );
    }
}
