//! Read-only and follower handles (`Db::open_read_only`,
//! `Db::open_follower`; docs/architecture.md §Followers).
//!
//! - `read_only_*`: a read-only handle opened several times at once, from
//!   threads and from a child process, reads what was written and leaves
//!   every file of the directory byte for byte as it was; it and a writer
//!   exclude each other with errors naming the lock.
//! - `follower_*`: a child process (this test binary re-executed with
//!   `--exact writer_child`, which does nothing unless
//!   `CAIRNDB_FOLLOW_CHILD_DIR` is set) writes at full speed with small
//!   memtables and journals, so flushes, compactions and journal recycling
//!   run, while this process follows it. The writer's `W` threads each
//!   write batches `c = 1, 2, ...` of two puts: `w/k{c % K}` = c and
//!   `w/last` = c (every value starts with `c`; one in 7 is 6 KiB, a
//!   separated value). So in any state read, `w/last` = L fixes every key
//!   of thread w: `k{i}` holds the largest c <= L with c % K == i. Each
//!   catch-up checks that exactly, and that L never goes back; a torn or
//!   mixed read (a batch half seen, a version with tables of another
//!   time than the journals) breaks it. The child reports each synced
//!   write with its wall-clock time; the parent measures how long each
//!   took to be seen (catch-up every 100 ms) and prints p50/p99. At the
//!   end the child makes a last synced write per thread, reports them and
//!   waits: one catch-up must show them all.
//!
//! `CAIRNDB_FOLLOW_SECS` sets the length of the follow run (default 20;
//! `follower_long` runs 180 s and is `#[ignore]`d).
#![cfg(unix)]
// A test: a failed unwrap is a failed check.
#![allow(clippy::unwrap_used)]

use cairndb::{Db, Options, WriteBatch, WriteOptions};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ENV_DIR: &str = "CAIRNDB_FOLLOW_CHILD_DIR";
const ENV_ROLE: &str = "CAIRNDB_FOLLOW_CHILD_ROLE";
/// Writer threads of the child.
const W: u64 = 2;
/// Keys per writer thread.
const K: u64 = 300;
/// One batch in this many is synced.
const SYNC_EVERY: u64 = 50;
/// One value in this many is large (separated).
const BIG_EVERY: u64 = 7;
const BIG_BYTES: usize = 6 << 10;

fn small_opts() -> Options {
    Options {
        memtable_bytes: 256 << 10,
        journal_bytes: 512 << 10,
        table_bytes: 256 << 10,
        level1_bytes: 1 << 20,
        ..Options::default()
    }
}

fn value(c: u64) -> Vec<u8> {
    let mut v = format!("{c:020}").into_bytes();
    if c.is_multiple_of(BIG_EVERY) {
        v.resize(BIG_BYTES, b'x');
    }
    v
}

fn counter(v: &[u8]) -> u64 {
    std::str::from_utf8(&v[..20]).unwrap().parse().unwrap()
}

fn key(w: u64, i: u64) -> Vec<u8> {
    format!("{w}/k{i:05}").into_bytes()
}

fn last_key(w: u64) -> Vec<u8> {
    format!("{w}/last").into_bytes()
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Every file under `dir` (recursively) with its bytes' hash.
fn hash_files(dir: &Path) -> BTreeMap<String, (u64, u64)> {
    use std::hash::{DefaultHasher, Hasher};
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                out.insert(format!("{}/", p.display()), (0, 0));
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let mut h = DefaultHasher::new();
                h.write(&bytes);
                out.insert(p.display().to_string(), (bytes.len() as u64, h.finish()));
            }
        }
    }
    out
}

/// The child: the writer (`writer`) or a read-only reader (`reader`).
#[test]
fn writer_child() {
    let Ok(dir) = std::env::var(ENV_DIR) else {
        return;
    };
    match std::env::var(ENV_ROLE).as_deref() {
        Ok("reader") => {
            let ro = Db::open_read_only(&dir, Options::default()).unwrap();
            let n = ro.iter().count();
            let v = ro.get(b"key-00042").unwrap().unwrap();
            println!("reader {n} {}", String::from_utf8_lossy(&v[..8]));
        }
        _ => run_writer(Path::new(&dir)),
    }
}

/// `Db::open`, retried for up to 10 s while the lock is held: the tests
/// of this binary run in parallel, and a child one of them forks while
/// another's handle of a directory is open shares that handle's lock
/// until the child's exec closes it (long enough to matter on a loaded
/// machine).
fn open_writer(dir: &Path, opts: Options) -> Db {
    let started = Instant::now();
    loop {
        match Db::open(dir, opts.clone()) {
            Ok(db) => return db,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("retrying open: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

fn run_writer(dir: &Path) {
    let db = open_writer(dir, small_opts());
    println!("opened");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..W)
        .map(|w| {
            let (db, stop, out) = (db.clone(), stop.clone(), out.clone());
            std::thread::spawn(move || {
                let mut c = 0;
                let write = |c: u64, sync: bool| {
                    let mut b = WriteBatch::new();
                    b.put(key(w, c % K), value(c)).unwrap();
                    b.put(last_key(w), value(c)).unwrap();
                    db.write(b, &WriteOptions { sync }).unwrap();
                    if sync {
                        let mut o = out.lock().unwrap();
                        writeln!(o, "synced {w} {c} {}", now_nanos()).unwrap();
                        o.flush().unwrap();
                    }
                };
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    c += 1;
                    write(c, c.is_multiple_of(SYNC_EVERY));
                }
                c += 1;
                write(c, true);
                c
            })
        })
        .collect();
    // The parent writes a line to stop the writers, and closes stdin to
    // let this process close the database and exit.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let finals: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    {
        let mut o = out.lock().unwrap();
        let st = db.stats();
        writeln!(
            o,
            "stats flushes={} compactions={} journals_recycled={}",
            st.flushes, st.compactions, st.journals_recycled
        )
        .unwrap();
        writeln!(
            o,
            "final {}",
            finals
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        )
        .unwrap();
        o.flush().unwrap();
    }
    // Kept open (the writer's lock held) until the parent has checked.
    let _ = std::io::stdin().read_line(&mut line);
    drop(db);
}

fn child(dir: &Path, role: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "writer_child", "--nocapture", "--test-threads=1"])
        .env(ENV_DIR, dir)
        .env(ENV_ROLE, role);
    c
}

fn fill(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let db = Db::open(dir, small_opts()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000u64 {
        let k = format!("key-{:05}", i % 1000).into_bytes();
        let v = value(i);
        db.put(&k, &v).unwrap();
        model.insert(k, v);
        if i % 97 == 0 {
            let k = format!("key-{:05}", (i * 7) % 1000).into_bytes();
            db.delete(&k).unwrap();
            model.remove(&k);
        }
    }
    let ks = db.keyspace("side").unwrap();
    ks.put(b"a", b"1").unwrap();
    db.put_opt(b"zz-synced", b"yes", &WriteOptions { sync: true })
        .unwrap();
    model.insert(b"zz-synced".to_vec(), b"yes".to_vec());
    // Not synced, not flushed: only in the journal (and staging ring).
    db.put(b"zz-last", b"tail").unwrap();
    model.insert(b"zz-last".to_vec(), b"tail".to_vec());
    db.close().unwrap();
    model
}

fn check_model(ro: &cairndb::ReadOnlyDb, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let got: BTreeMap<Vec<u8>, Vec<u8>> = ro.iter().map(|kv| kv.unwrap()).collect();
    assert_eq!(got.len(), model.len());
    assert!(got == *model, "read-only contents differ from the model");
    for (k, v) in model.iter().step_by(37) {
        assert_eq!(ro.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(ro.get_in("side", b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(
        ro.prefix(b"key-0001").count(),
        model.keys().filter(|k| k.starts_with(b"key-0001")).count()
    );
    let keys: Vec<&Vec<u8>> = model.keys().take(5).collect();
    for (r, k) in ro.multi_get(&keys).into_iter().zip(keys) {
        assert_eq!(r.unwrap().as_ref(), model.get(k));
    }
}

#[test]
fn read_only_handles_read_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let model = fill(dir);
    let before = hash_files(dir);
    let started = Instant::now();
    {
        let a = Db::open_read_only(dir, Options::default()).unwrap();
        let b = Db::open_read_only(dir, Options::default()).unwrap();
        check_model(&a, &model);
        std::thread::scope(|s| {
            s.spawn(|| check_model(&b, &model));
            s.spawn(|| check_model(&a, &model));
        });
        // A writer is refused while read-only handles are open, naming
        // them.
        let e = Db::open(dir, Options::default()).unwrap_err().to_string();
        assert!(e.contains("LOCK") && e.contains("read-only"), "{e}");
        // A child process opens it read-only too, at the same time.
        let out = child(dir, "reader").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}\n{err}");
        // The test harness may print on the same line first.
        let Some(line) = text
            .lines()
            .find_map(|l| l.find("reader ").map(|at| &l[at..]))
        else {
            panic!("no reader line from the child:\n{text}\n{err}");
        };
        assert_eq!(line, format!("reader {} 00000000", model.len()));
        // Catching up with nothing new changes nothing.
        let c = a.catch_up().unwrap();
        assert_eq!(c.seqno, c.seqno_before);
        check_model(&a, &model);
    }
    assert_eq!(hash_files(dir), before, "a read-only handle changed a file");
    println!("read-only checks took {:?}", started.elapsed());

    // A read-only open while a writer has the database is refused,
    // naming the lock and the writer's pid.
    let db = open_writer(dir, small_opts());
    let e = Db::open_read_only(dir, Options::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("LOCK") && e.contains(&std::process::id().to_string()),
        "{e}"
    );
    // So is a second writer.
    let e = Db::open(dir, Options::default()).unwrap_err().to_string();
    assert!(
        e.contains("LOCK") && e.contains(&std::process::id().to_string()),
        "{e}"
    );
    drop(db);
}

#[test]
fn read_only_of_a_missing_database_is_refused_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nothing");
    assert!(matches!(
        Db::open_read_only(&dir, Options::default()),
        Err(cairndb::Error::InvalidArgument(_))
    ));
    assert!(!dir.exists());
}

/// Checks the invariant of the module comment on a snapshot of `f`;
/// returns each writer thread's last counter.
fn check_state(f: &cairndb::ReadOnlyDb) -> Vec<u64> {
    let snap = f.snapshot();
    let mut lasts = Vec::new();
    for w in 0..W {
        let last = snap.get(last_key(w)).unwrap().map_or(0, |v| counter(&v));
        let prefix = format!("{w}/k");
        let mut seen = 0;
        for kv in snap.prefix(prefix.as_bytes()) {
            let (k, v) = kv.unwrap();
            let i: u64 = std::str::from_utf8(&k[prefix.len()..])
                .unwrap()
                .parse()
                .unwrap();
            let c = counter(&v);
            assert_eq!(
                v,
                value(c),
                "value of {} damaged",
                String::from_utf8_lossy(&k)
            );
            // The largest c' <= last with c' % K == i.
            let want = if last >= i { last - (last - i) % K } else { 0 };
            assert_eq!(
                c,
                want,
                "thread {w} key {i}: holds {c}, but last = {last} says {want} (seqno {})",
                snap.seqno()
            );
            seen += 1;
        }
        assert_eq!(
            seen,
            last.min(K),
            "thread {w}: keys present for last = {last}"
        );
        lasts.push(last);
    }
    lasts
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn follow_for(secs: u64, every: Option<Duration>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // The database exists before the follower opens it.
    Db::open(dir, small_opts()).unwrap().close().unwrap();
    let mut writer = child(dir, "writer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = writer.stdin.take();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = writer.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut opts = small_opts();
    opts.follow_every = every;
    // The writer may not have opened yet: the follower reads whatever
    // state the directory is in.
    let f = Db::open_follower(dir, opts).unwrap();
    // Once the writer has it, opening it as a writer or read-only is
    // refused, naming the lock and the writer's pid.
    let mut backlog = Vec::new();
    loop {
        let line = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        if line.contains("opened") {
            break;
        }
        backlog.push(line);
    }
    let named = |e: String| e.contains("LOCK") && e.contains(&writer.id().to_string());
    let e = Db::open(dir, small_opts()).unwrap_err();
    assert!(named(e.to_string()), "{e}");
    let e = Db::open_read_only(dir, Options::default()).unwrap_err();
    assert!(named(e.to_string()), "{e}");
    let mut last = vec![0u64; W as usize];
    let mut pending: Vec<(u64, u64, u128)> = Vec::new();
    let mut delays = Vec::new();
    let (mut catch_ups, mut checks, mut versions) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut finals = None;
    let mut stdin_after = None;
    let mut catch_up_times = Vec::new();
    let mut stats = String::new();
    while finals.is_none() {
        if started.elapsed() >= Duration::from_secs(secs)
            && let Some(mut s) = stdin.take()
        {
            writeln!(s, "stop").unwrap(); // stops the writer threads
            s.flush().unwrap();
            stdin_after = Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
        if every.is_none() {
            let t = Instant::now();
            let c = f.catch_up().unwrap();
            catch_up_times.push(t.elapsed());
            catch_ups += 1;
            versions += u64::from(c.new_version);
            assert!(c.seqno >= c.seqno_before);
        }
        let seen_at = now_nanos();
        let lasts = check_state(&f);
        checks += 1;
        for w in 0..W as usize {
            assert!(
                lasts[w] >= last[w],
                "thread {w} went back from {} to {}",
                last[w],
                lasts[w]
            );
        }
        last = lasts;
        for line in backlog
            .drain(..)
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            if let Some(at) = line.find("stats ") {
                stats = line[at..].to_string();
            }
            let line = ["synced ", "final "]
                .iter()
                .find_map(|m| line.find(m).map(|at| &line[at..]))
                .unwrap_or("");
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.first() {
                Some(&"synced") => pending.push((
                    parts[1].parse().unwrap(),
                    parts[2].parse().unwrap(),
                    parts[3].parse().unwrap(),
                )),
                Some(&"final") => {
                    finals = Some(
                        parts[1..]
                            .iter()
                            .map(|p| p.parse::<u64>().unwrap())
                            .collect::<Vec<_>>(),
                    )
                }
                _ => {}
            }
        }
        pending.retain(|&(w, c, t)| {
            if last[w as usize] >= c {
                // Seen by this check (or earlier, if the line came late:
                // then this over-counts).
                delays.push(Duration::from_nanos(seen_at.saturating_sub(t) as u64));
                false
            } else {
                true
            }
        });
        assert!(
            started.elapsed() < Duration::from_secs(secs + 120),
            "writer did not stop"
        );
    }
    let finals = finals.unwrap();
    // Every synced write, the last ones included, after one catch-up.
    f.catch_up().unwrap();
    let lasts = check_state(&f);
    assert_eq!(lasts, finals, "a synced write is missing after catch-up");
    // Let the writer close, then catch up with its clean close.
    drop(stdin_after.take());
    let status = writer.wait().unwrap();
    assert!(status.success());
    f.catch_up().unwrap();
    assert_eq!(check_state(&f), finals);
    drop(f);
    // The follower's record is gone, and a writer opens the database and
    // finds what the follower saw.
    let readers: Vec<_> = std::fs::read_dir(dir.join("readers")).unwrap().collect();
    assert!(readers.is_empty(), "a reader record was left");
    let db = open_writer(dir, small_opts());
    for w in 0..W {
        assert_eq!(
            counter(&db.get(last_key(w)).unwrap().unwrap()),
            finals[w as usize]
        );
    }
    delays.sort();
    catch_up_times.sort();
    println!(
        "writer {stats}; catch_up call: p50={:?} p99={:?}",
        percentile(&catch_up_times, 0.5),
        percentile(&catch_up_times, 0.99)
    );
    println!(
        "follow {secs}s ({}): writes {:?}, {catch_ups} catch-ups, {checks} checks, {versions} new versions; synced write -> seen: n={} p50={:?} p99={:?} max={:?}",
        if every.is_some() {
            "timer 100 ms"
        } else {
            "catch_up every 100 ms"
        },
        finals,
        delays.len(),
        percentile(&delays, 0.5),
        percentile(&delays, 0.99),
        delays.last().copied().unwrap_or_default(),
    );
}

fn follow_secs(default: u64) -> u64 {
    std::env::var("CAIRNDB_FOLLOW_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn follower_sees_a_writer_process_consistently() {
    follow_for(follow_secs(20), None);
}

#[test]
fn follower_with_a_timer() {
    follow_for(follow_secs(5), Some(Duration::from_millis(100)));
}

#[test]
#[ignore = "minutes: run with --ignored"]
fn follower_long() {
    follow_for(follow_secs(180), None);
}

fn tables_in(dir: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".table"))
        .collect()
}

/// The writer keeps the tables a follower's snapshot reads through a
/// compaction that retires them, and deletes them once the follower
/// lets go; a dead follower's record (its lock gone) holds nothing.
#[test]
fn writer_keeps_files_a_follower_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let opts = Options {
        background_compaction: false,
        ..small_opts()
    };
    let db = Db::open(dir, opts.clone()).unwrap();
    for round in 0..4u64 {
        for i in 0..500u64 {
            db.put(format!("k{i:04}"), value(round * 1000 + i)).unwrap();
        }
        db.flush().unwrap();
    }
    let f = Db::open_follower(dir, Options::default()).unwrap();
    let snap = f.snapshot();
    let held = tables_in(dir);
    assert!(held.len() >= 4, "{held:?}");
    db.compact().unwrap();
    // The compaction retired every table the follower's version names:
    // all still there.
    let now = tables_in(dir);
    assert!(
        held.is_subset(&now),
        "deleted under a follower: {held:?} -> {now:?}"
    );
    let got: Vec<_> = snap.iter().map(|kv| kv.unwrap()).collect();
    assert_eq!(got.len(), 500);
    assert!(got.iter().all(|(_, v)| counter(v) >= 3000));
    // The follower moves on and lets go of the old version: the writer's
    // flush thread deletes the old tables within its idle ticks.
    drop(snap);
    f.catch_up().unwrap();
    assert_eq!(f.iter().count(), 500);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tables_in(dir).is_disjoint(&held) {
        assert!(Instant::now() < deadline, "old tables never deleted");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A record left by a dead process (unlocked) holds nothing and is
    // removed by the writer's next deletion.
    drop(f);
    let stale = dir.join("readers").join("999999999.0.reader");
    std::fs::write(&stale, b"CAIRNRDR garbage").unwrap();
    let before = tables_in(dir);
    for i in 0..500u64 {
        db.put(format!("k{i:04}"), value(9000 + i)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    assert!(
        tables_in(dir).is_disjoint(&before),
        "a stale record held files"
    );
    assert!(!stale.exists(), "the stale record was not removed");
}

/// A read-only open of a database whose writer was killed mid-write
/// (kill -9): it shows every acknowledged write, the unsynced ones that
/// only the staging ring holds included, in a consistent state, and
/// leaves every file as the crash left it (no torn tail cut, nothing
/// replayed into tables) for the next writer's recovery, which then
/// finds the same state.
#[test]
fn read_only_after_a_killed_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut writer = child(dir, "writer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut synced = vec![0u64; W as usize];
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let mut n = 0;
    while n < 20 {
        let line = lines.next().unwrap().unwrap();
        if let Some(at) = line.find("synced ") {
            let parts: Vec<u64> = line[at + 7..]
                .split_whitespace()
                .take(2)
                .map(|p| p.parse().unwrap())
                .collect();
            synced[parts[0] as usize] = synced[parts[0] as usize].max(parts[1]);
            n += 1;
        }
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    let before = hash_files(dir);
    let ro = Db::open_read_only(dir, Options::default()).unwrap();
    let lasts = check_state(&ro);
    for w in 0..W as usize {
        assert!(
            lasts[w] >= synced[w],
            "thread {w}: synced {} missing ({})",
            synced[w],
            lasts[w]
        );
    }
    drop(ro);
    assert_eq!(hash_files(dir), before, "a read-only handle changed a file");
    let db = open_writer(dir, small_opts());
    for w in 0..W {
        let got = db.get(last_key(w)).unwrap().map_or(0, |v| counter(&v));
        assert_eq!(
            got, lasts[w as usize],
            "recovery and the read-only handle disagree"
        );
    }
}

/// A follower outlives its writer: the writer closes, a new one opens
/// (recovery writes a new manifest and starts a new journal; the old
/// journal, which the follower's record holds, is kept until the follower
/// moves on) and writes more; the follower's next catch-up reads the new
/// manifest whole and shows both.
#[test]
fn follower_across_a_writer_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let db = Db::open(dir, small_opts()).unwrap();
    for i in 0..200u64 {
        db.put(format!("a{i:04}"), value(i)).unwrap();
    }
    // A follower sees unsynced writes of a direct journal only once their
    // chunk is in the journal file; a sync puts them there.
    db.put_opt(b"a-sync", b"", &WriteOptions { sync: true })
        .unwrap();
    let f = Db::open_follower(dir, Options::default()).unwrap();
    assert_eq!(f.iter().count(), 201);
    let before = f.seqno();
    db.close().unwrap();
    let db = open_writer(dir, small_opts());
    for i in 0..200u64 {
        db.put(format!("b{i:04}"), value(i)).unwrap();
    }
    db.delete_opt(b"a0000", &WriteOptions { sync: true })
        .unwrap();
    let c = f.catch_up().unwrap();
    assert!(c.new_version && c.seqno > before, "{c:?}");
    assert_eq!(f.iter().count(), 400);
    assert_eq!(f.get(b"a0000").unwrap(), None);
    assert_eq!(counter(&f.get(b"b0199").unwrap().unwrap()), 199);
    drop(db);
    f.catch_up().unwrap();
    assert_eq!(f.iter().count(), 400);
}
