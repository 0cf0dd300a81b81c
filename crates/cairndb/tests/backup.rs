//! Backups (`cairndb::backup::BackupDir`): made while writers run at full
//! speed and restored to exactly the backup's seqno; incremental (a second
//! backup writes only new files, counted in the store itself); damage
//! named by `verify`; delete keeps what other backups need; keyspaces.

use cairndb::backup::BackupDir;
use cairndb::io::{Fs, MemFs};
use cairndb::{Db, Error, Options, WriteOptions};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WRITERS: usize = 3;

fn key(t: usize, i: u64) -> Vec<u8> {
    format!("w{t}-{i:08}").into_bytes()
}

fn value(t: usize, i: u64) -> Vec<u8> {
    let len = if i.is_multiple_of(3) { 2000 } else { 50 };
    let mut v = format!("{t}:{i}:").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

#[test]
fn a_backup_under_full_speed_writers_restores_exactly_its_writes() {
    let root = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        memtable_bytes: 256 << 10,
        journal_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Db::open(root.path().join("db"), opts.clone()).expect("open");
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (db, acked, stop) = (db.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let opts = WriteOptions {
                        sync: i.is_multiple_of(8),
                    };
                    db.put_opt(key(t, i), value(t, i), &opts).expect("put");
                    i += 1;
                    acked[t].store(i, Ordering::Release);
                }
            })
        })
        .collect();
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until || db.stats().flushes < 2 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let backups = BackupDir::open(root.path().join("backups")).expect("backup dir");
    let before: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
    let info = backups.create(&db).expect("backup");
    let after: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
    assert_eq!(backups.verify(info.id).expect("verify"), info);
    // Restored while the source is still written to.
    let target = root.path().join("restored");
    backups.restore(info.id, &target).expect("restore");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    let restored = Db::open(&target, opts).expect("open the restored database");
    assert_eq!(restored.stats().last_seqno, info.seqno);
    for t in 0..WRITERS {
        let mut n = 0u64;
        for kv in restored.prefix(format!("w{t}-")) {
            let (k, v) = kv.expect("scan");
            assert_eq!(k, key(t, n), "writer {t}: a write is missing");
            assert_eq!(v, value(t, n), "writer {t}: wrong value of write {n}");
            n += 1;
        }
        assert!(
            n >= before[t],
            "writer {t}: {n} < {} acknowledged before",
            before[t]
        );
        assert!(
            n <= after[t] + 1,
            "writer {t}: {n} > {} acknowledged after",
            after[t]
        );
    }
    assert_eq!(backups.list().expect("list"), [info]);
}

fn mem_opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 64 << 10,
        // A fixed shape: no compaction or settling behind the test's back
        // rewrites tables between two backups.
        background_compaction: false,
        settle_after_idle: None,
        ..Options::default()
    }
}

/// Bytes of every file in the backup store (`files/`).
fn store_bytes(fs: &MemFs, dir: &Path) -> u64 {
    let store = dir.join("files");
    fs.list(&store)
        .expect("list")
        .iter()
        .map(|n| fs.file_len(&store.join(n)).expect("len"))
        .sum()
}

fn fill(db: &Db, from: u32, to: u32) {
    for i in from..to {
        db.put(format!("k{i:06}"), vec![(i % 251) as u8; 1200])
            .expect("put");
    }
}

#[test]
fn a_second_backup_copies_only_what_is_new() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    fill(&db, 0, 3000);
    db.compact().expect("compact");
    let backups = BackupDir::open_with(Arc::new(fs.clone()), "/backups").expect("open");
    let first = backups.create(&db).expect("first backup");
    assert_eq!(store_bytes(&fs, Path::new("/backups")), first.bytes_copied);
    assert!(first.bytes > 3000 * 1200, "{first:?}");
    assert_eq!(
        first.bytes_copied, first.bytes,
        "the first backup copies all"
    );
    fill(&db, 3000, 3100);
    let second = backups.create(&db).expect("second backup");
    let grown = store_bytes(&fs, Path::new("/backups")) - first.bytes_copied;
    assert_eq!(
        grown, second.bytes_copied,
        "the store grew by what it reports"
    );
    assert!(
        second.bytes_copied * 10 < second.bytes,
        "only new files are copied: {second:?}"
    );
    assert!(second.files_copied < second.files);
    assert!(second.seqno > first.seqno);
    // Each restores to its own state.
    for (info, keys) in [(&first, 3000), (&second, 3100)] {
        let target = format!("/restored-{}", info.id);
        backups.restore(info.id, &target).expect("restore");
        let r = Db::open(&target, mem_opts(&fs)).expect("open restored");
        assert_eq!(r.iter().count(), keys);
        for i in (0..keys as u32).step_by(97) {
            assert_eq!(
                r.get(format!("k{i:06}")).expect("get"),
                Some(vec![(i % 251) as u8; 1200])
            );
        }
        assert_eq!(r.stats().last_seqno, info.seqno);
    }
    assert_eq!(
        backups
            .list()
            .expect("list")
            .iter()
            .map(|b| b.id)
            .collect::<Vec<_>>(),
        [first.id, second.id]
    );
}

#[test]
fn verify_names_a_damaged_file_and_restore_refuses_it() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    fill(&db, 0, 500);
    let backups = BackupDir::open_with(Arc::new(fs.clone()), "/backups").expect("open");
    let info = backups.create(&db).expect("backup");
    backups.verify(info.id).expect("an intact backup verifies");
    let table = backups
        .files(info.id)
        .expect("files")
        .into_iter()
        .find(|f| f.name.ends_with(".table"))
        .expect("a table");
    let stored = Path::new("/backups/files").join(format!(
        "{}-{}-{:08x}",
        table.name, table.size, table.crc32c
    ));
    assert!(
        fs.mutate_byte(&stored, 100, |b| b ^ 0x20),
        "damage the copy"
    );
    let err = backups.verify(info.id).expect_err("damage is found");
    match &err {
        Error::Corruption { file, detail, .. } => {
            assert_eq!(file, &stored, "{err}");
            assert!(detail.contains(&table.name), "{err}");
        }
        e => panic!("expected Corruption, got {e}"),
    }
    let err = backups
        .restore(info.id, "/restored")
        .expect_err("restore checks");
    assert!(err.is_corruption(), "{err}");
    // Damaged metadata is refused too.
    let meta = Path::new("/backups/backup-000001");
    assert!(fs.mutate_byte(meta, 20, |b| b ^ 1));
    let err = backups.list().expect_err("metadata checksum");
    assert!(err.is_corruption(), "{err}");
}

#[test]
fn delete_keeps_the_files_other_backups_need() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    let users = db.keyspace("users").expect("users");
    fill(&db, 0, 1000);
    users.put("alice", "1").expect("put");
    let backups = BackupDir::open_with(Arc::new(fs.clone()), "/backups").expect("open");
    let first = backups.create(&db).expect("first");
    // The source moves on: a compaction replaces every table.
    fill(&db, 1000, 1200);
    users.put("bob", "2").expect("put");
    db.compact().expect("compact");
    let second = backups.create(&db).expect("second");
    backups.delete(first.id).expect("delete");
    let err = backups.verify(first.id).expect_err("deleted");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // The store holds exactly the second backup's files.
    let mut want: Vec<String> = backups
        .files(second.id)
        .expect("files")
        .iter()
        .map(|f| format!("{}-{}-{:08x}", f.name, f.size, f.crc32c))
        .collect();
    want.sort();
    want.dedup();
    let mut have = fs.list(Path::new("/backups/files")).expect("list");
    have.sort();
    assert_eq!(have, want);
    backups.verify(second.id).expect("verify");
    backups.restore(second.id, "/restored").expect("restore");
    let r = Db::open("/restored", mem_opts(&fs)).expect("open");
    assert_eq!(r.keyspaces(), ["default", "users"]);
    let users = r.keyspace("users").expect("users");
    assert_eq!(users.get("alice").expect("get"), Some(b"1".to_vec()));
    assert_eq!(users.get("bob").expect("get"), Some(b"2".to_vec()));
    assert_eq!(r.iter().count(), 1200);
    // A restore goes only into an empty directory.
    let err = backups
        .restore(second.id, "/restored")
        .expect_err("not empty");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// A create that fails before its metadata is in place leaves no backup;
/// the files it stored are reused by the next create and removed by a
/// delete once no backup lists them. And once a create returned, a power
/// cut keeps the backup whole (store files, metadata and names synced).
#[test]
fn a_failed_create_leaves_no_backup_and_a_power_cut_keeps_a_made_one() {
    use cairndb::io::{Crash, Fault, FaultKind, OpKind};
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs)).expect("open");
    fill(&db, 0, 800);
    let backups = BackupDir::open_with(Arc::new(fs.clone()), "/backups").expect("open");
    let first = backups.create(&db).expect("first");
    fill(&db, 800, 1000);
    // The metadata's rename into place fails.
    fs.inject(Fault {
        path_contains: Some("backup-000002".into()),
        ..Fault::once(OpKind::Rename, FaultKind::Eio)
    });
    let err = backups
        .create(&db)
        .expect_err("the metadata cannot be renamed");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert_eq!(backups.list().expect("list"), std::slice::from_ref(&first));
    let second = backups.create(&db).expect("second");
    assert_eq!(second.id, 2);
    assert!(
        second.files_copied <= 4,
        "the failed create's data files are reused: {second:?}"
    );
    // A power cut now: the backups made are whole on the device.
    let image = fs.crash_image(Crash::Clean, 0);
    let on_image = BackupDir::open_with(Arc::new(image.clone()), "/backups").expect("open");
    assert_eq!(
        on_image.list().expect("list after the cut"),
        [first.clone(), second.clone()]
    );
    on_image.verify(second.id).expect("verify after the cut");
    on_image.restore(second.id, "/restored").expect("restore");
    let r = Db::open(
        "/restored",
        Options {
            fs: Arc::new(image),
            ..mem_opts(&fs)
        },
    )
    .expect("open");
    assert_eq!(r.iter().count(), 1000);
    // Deleting the first leaves exactly the second's files in the store.
    backups.delete(first.id).expect("delete");
    let mut want: Vec<String> = backups
        .files(second.id)
        .expect("files")
        .iter()
        .map(|f| format!("{}-{}-{:08x}", f.name, f.size, f.crc32c))
        .collect();
    want.sort();
    want.dedup();
    let mut have = fs.list(Path::new("/backups/files")).expect("list");
    have.sort();
    assert_eq!(have, want);
}
