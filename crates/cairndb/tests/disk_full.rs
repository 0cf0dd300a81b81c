//! A full disk on real file systems: a tmpfs and an ext4 image on a loop
//! device, each small and mounted by the test (root only; without root or
//! the tools the test prints why and returns).
//!
//! For a range of free space left beside a ballast file, a fresh database
//! is filled with a mix of inline and separated values (some writes
//! synced) until the disk is full. The space runs out at a different stage
//! each time: at open (the staging ring, the first journal), while the
//! journal grows, in a flush, a compaction, a value-GC move or a manifest
//! roll. Each run checks what docs/durability.md §Full disk promises:
//!
//! - the process survives and every failure is a typed error (a shared
//!   mapping written where the file system has no block to give raises
//!   SIGBUS and kills the process: the staging ring must be allocated
//!   before it is mapped);
//! - an open that fails for lack of space leaves no file behind that was
//!   not there before it;
//! - once the ballast is removed the database opens, and every
//!   acknowledged write is there.

use cairndb::{Db, Error, Options, WriteOptions};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A small file system mounted for one test, unmounted on drop.
struct Mount {
    dir: PathBuf,
    image: Option<PathBuf>,
}

impl Mount {
    fn base(kind: &str) -> PathBuf {
        std::env::temp_dir().join(format!("cairndb-diskfull-{kind}-{}", std::process::id()))
    }

    fn run(cmd: &mut Command) -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn tmpfs(tag: &str, bytes: u64) -> Result<Mount, String> {
        let dir = Self::base(&format!("tmpfs-{tag}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let m = Mount { dir, image: None };
        Self::run(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
                .arg("tmpfs")
                .arg(&m.dir),
        )?;
        Ok(m)
    }

    fn ext4(tag: &str, bytes: u64) -> Result<Mount, String> {
        let dir = Self::base(&format!("ext4-{tag}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let image = dir.with_extension("img");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(bytes))
            .map_err(|e| e.to_string())?;
        let m = Mount {
            dir,
            image: Some(image.clone()),
        };
        Self::run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image))?;
        Self::run(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&m.dir),
        )?;
        Ok(m)
    }

    /// Fills the file system with a ballast file, then gives `free` bytes
    /// of it back. Returns the ballast's path.
    fn leave_free(&self, free: u64) -> PathBuf {
        let path = self.dir.join("ballast");
        let mut f = std::fs::File::create(&path).expect("ballast");
        let chunk = vec![0xa5u8; 64 << 10];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("ballast: {e}"),
            }
        }
        // A partial write may have filled the last block: flush then trim.
        let _ = f.flush();
        let len = f.metadata().expect("ballast len").len();
        f.set_len(len.saturating_sub(free)).expect("trim ballast");
        f.sync_all().expect("sync ballast");
        path
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
        if let Some(image) = &self.image {
            let _ = std::fs::remove_file(image);
        }
    }
}

fn opts() -> Options {
    Options {
        memtable_bytes: 256 << 10,
        journal_bytes: 1 << 20,
        journal_ring_bytes: 2 << 20,
        table_bytes: 256 << 10,
        level1_bytes: 1 << 20,
        l0_compaction_trigger: 2,
        l0_compaction_trigger_new_keys: 2,
        block_cache_bytes: 1 << 20,
        ..Options::default()
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// A failure the full disk may legitimately cause: out of space, or the
/// handle poisoned by an earlier such failure, or closed.
fn expected(e: &Error) -> bool {
    e.is_no_space() || matches!(e, Error::Poisoned(_) | Error::Closed)
}

/// One run: `free` bytes left, then writes until the disk is full.
/// Returns whether the handle took writes again once space returned, and
/// a line for the report.
fn run(mount: &Mount, free: u64, sync_every: u64) -> (bool, String) {
    let ballast = mount.leave_free(free);
    let dir = mount.dir.join("db");
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut stage = "open";
    let mut acked = 0usize;
    let mut first_error = String::new();
    let mut soft = false;
    match Db::open(&dir, opts()) {
        Err(e) => {
            assert!(expected(&e), "free {free}: open: unexpected error {e}");
        }
        Ok(db) => {
            stage = "writes";
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ free;
            for i in 0..200_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = format!("k{:016x}", x % 50_000).into_bytes();
                let len = if i.is_multiple_of(3) { 100 } else { 3000 };
                let value: Vec<u8> = (0..len).map(|j| (x >> (j % 56)) as u8 ^ j as u8).collect();
                let sync = sync_every > 0 && i.is_multiple_of(sync_every);
                match db.put_opt(&key, &value, &WriteOptions { sync }) {
                    Ok(()) => {
                        model.insert(key, value);
                        acked += 1;
                    }
                    Err(e) => {
                        assert!(expected(&e), "free {free}: put {i}: unexpected error {e}");
                        first_error = e.to_string();
                        stage = "full";
                        break;
                    }
                }
            }
            assert_eq!(stage, "full", "free {free}: the disk never filled");
            // Space returns. A write refused while the journal was left as
            // it was (its pre-write failed) leaves the handle usable: the
            // same handle takes synced writes again. One refused after the
            // journal's tail was written (a failed sync) poisons it.
            std::fs::remove_file(&ballast).expect("remove ballast");
            for i in 0..64u32 {
                let key = format!("soft{i:04}").into_bytes();
                let value = vec![i as u8; 2000];
                // Background work paused by the full disk retries within
                // a second (durability.md §Full disk); meanwhile a write
                // that needs a flush still gets the no-space error.
                let started = std::time::Instant::now();
                let put = loop {
                    match db.put_opt(&key, &value, &WriteOptions::synced()) {
                        Err(e) if e.is_no_space() && started.elapsed().as_secs() < 5 => {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        other => break other,
                    }
                };
                match put {
                    Ok(()) => {
                        model.insert(key, value);
                        soft = true;
                    }
                    // Only a failed write of bytes already in the journal
                    // or the manifest poisons; every group and every edit
                    // reserves its blocks first, so a full disk should not
                    // get that far on these file systems.
                    Err(Error::Poisoned(why)) if i == 0 => {
                        assert!(
                            why.contains("No space") || why.contains("os error 28"),
                            "free {free}: poisoned by something else than the full disk: {why}"
                        );
                        break;
                    }
                    Err(e) => panic!("free {free}: a write once space returned: {e}"),
                }
            }
            mount.leave_free(0);
            // More work on a full disk: errors, never a crash.
            for r in [db.flush(), db.compact(), db.put(b"after", b"full")] {
                if let Err(e) = r {
                    assert!(
                        expected(&e),
                        "free {free}: after full: unexpected error {e}"
                    );
                }
            }
            let _ = db.close();
        }
    }
    let ballast = mount.dir.join("ballast");
    // Opens on the still-full disk fail cleanly, or succeed; a failed one
    // leaves nothing behind.
    for attempt in 0..2 {
        let before = names(&dir);
        match Db::open(&dir, opts()) {
            Ok(db) => {
                let _ = db.close();
            }
            Err(e) => {
                // Any typed error but `Corruption`: a full disk must never
                // read as damaged files. (Usually the no-space error; any
                // other is printed, for the record.)
                assert!(
                    !e.is_corruption(),
                    "free {free}: open #{attempt} on a full disk: {e}"
                );
                if !expected(&e) {
                    println!("free {free}: open #{attempt} on a full disk: {e}");
                }
                let after = names(&dir);
                let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
                assert!(
                    new.is_empty(),
                    "free {free}: a failed open left {new:?} behind"
                );
            }
        }
    }
    std::fs::remove_file(&ballast).expect("remove ballast");
    let db = Db::open(&dir, opts())
        .unwrap_or_else(|e| panic!("free {free}: open after freeing space: {e}"));
    for (k, v) in &model {
        let got = db
            .get(k)
            .unwrap_or_else(|e| panic!("free {free}: get after freeing space: {e}"));
        assert_eq!(
            got.as_deref(),
            Some(v.as_slice()),
            "free {free}: acknowledged write of {} lost",
            String::from_utf8_lossy(k)
        );
    }
    // And it takes writes again.
    db.put_opt(b"after", b"space", &WriteOptions::synced())
        .unwrap_or_else(|e| panic!("free {free}: put after freeing space: {e}"));
    db.close().expect("close");
    std::fs::remove_dir_all(&dir).expect("remove db");
    let how = match (stage, soft) {
        ("open", _) => "open refused",
        (_, true) => "usable after",
        (_, false) => "poisoned",
    };
    (
        soft,
        format!(
            "free {free:>9}: {acked:>6} writes acknowledged, full at {stage} ({how}: {first_error})"
        ),
    )
}

fn sweep(kind: &str, mount: Result<Mount, String>) {
    let mount = match mount {
        Ok(m) => m,
        Err(why) => {
            println!("disk_full on {kind}: skipped, cannot mount a small file system: {why}");
            return;
        }
    };
    // Every group reserves its journal blocks before it is appended, so
    // a run that fills the disk while writing meets it there, where it is
    // a soft error: the handle takes writes again once space returns.
    // Manifest edits reserve their blocks too.
    // With synced writes among unsynced ones, and with unsynced writes
    // alone (whose journal bytes the staged journal writes out later, in
    // the background).
    for (sync_every, what) in [(17, "every 17th put synced"), (0, "no put synced")] {
        let mut filled = 0;
        let mut usable = 0;
        for free in [
            64 << 10,
            1 << 20,
            3 << 20,
            5 << 20,
            8 << 20,
            12 << 20,
            20 << 20,
        ] {
            let (soft, line) = run(&mount, free, sync_every);
            println!("{kind}, {what}: {line}");
            filled += usize::from(!line.contains("full at open"));
            usable += usize::from(soft);
        }
        assert_eq!(
            usable, filled,
            "{kind}, {what}: the handle took writes again after {usable} of {filled} full disks"
        );
    }
}

/// Held by each test here: one at a time, so a child process one test
/// starts (and the `mount` commands) cannot hold a copy of another's
/// descriptors, and with them its space, at the moment it frees a file.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn a_full_tmpfs_gives_errors_and_loses_nothing() {
    let _one = one_at_a_time();
    sweep("tmpfs", Mount::tmpfs("sweep", 48 << 20));
}

#[test]
fn a_full_ext4_gives_errors_and_loses_nothing() {
    let _one = one_at_a_time();
    sweep("ext4", Mount::ext4("sweep", 64 << 20));
}

/// Where `crash_child_writer` writes, when it is run as a child.
const ENV_CHILD_DIR: &str = "CAIRNDB_DISKFULL_CHILD_DIR";
/// Unsynced puts the child makes, and the size of each separated value.
const CHILD_PUTS: usize = 6000;
const CHILD_VALUE_LEN: usize = 3000;

fn crash_opts() -> Options {
    Options {
        journal_ring_bytes: 2 << 20,
        ..Options::default()
    }
}

fn child_value(i: usize) -> Vec<u8> {
    (0..CHILD_VALUE_LEN)
        .map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7)) as u8)
        .collect()
}

/// The child of `an_open_after_a_crash_needs_little_free_space`: makes
/// `CHILD_PUTS` unsynced puts, says so, and waits to be killed. Does
/// nothing when run as an ordinary test.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(ENV_CHILD_DIR) else {
        return;
    };
    let db = Db::open(&dir, crash_opts()).expect("child: open");
    for i in 0..CHILD_PUTS {
        db.put(format!("k{i:06}"), child_value(i))
            .expect("child: put");
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nwritten").expect("child: write");
    out.flush().expect("child: flush");
    std::thread::sleep(std::time::Duration::from_secs(60));
    panic!("child: never killed");
}

/// A crash leaves megabytes of unsynced separated values in the newest
/// journal's value stream; then the disk fills. The open that follows
/// syncs them and finds them on the device, so it writes tables of keys
/// and pointers, and copies only the values that were still in the
/// stream's staging ring (under 1 MiB), and succeeds with a few MiB free
/// (it needed free space for a second copy of every such value: 38 MB on
/// a 55 MB file system). Every acknowledged write is there, on the full
/// disk and after space returns.
fn crash_then_open_on_a_full_disk(kind: &str, mount: Result<Mount, String>) {
    let mount = match mount {
        Ok(m) => m,
        Err(why) => {
            println!("crash on a full {kind}: skipped, cannot mount a small file system: {why}");
            return;
        }
    };
    let dir = mount.dir.join("db");
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(&exe)
        .args([
            "--exact",
            "crash_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_CHILD_DIR, &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start child {}: {e}", exe.display()));
    let stdout = child.stdout.take().expect("child stdout");
    let written = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|l| l == "written");
    child.kill().expect("kill child");
    let status = child.wait().expect("wait for child");
    assert!(written, "{kind}: the child did not write ({status})");
    let ballast = mount.leave_free(6 << 20);
    let before: u64 = names(&dir)
        .iter()
        .filter(|n| n.ends_with(".table"))
        .map(|n| std::fs::metadata(dir.join(n)).map_or(0, |m| m.len()))
        .sum();
    let db = Db::open(&dir, crash_opts())
        .unwrap_or_else(|e| panic!("{kind}: open after the crash with 6 MiB free: {e}"));
    let tables: u64 = names(&dir)
        .iter()
        .filter(|n| n.ends_with(".table"))
        .map(|n| std::fs::metadata(dir.join(n)).map_or(0, |m| m.len()))
        .sum::<u64>()
        - before;
    println!(
        "{kind}: open after a crash with {} MiB of unsynced values and 6 MiB free wrote {tables} bytes of tables",
        (CHILD_PUTS * CHILD_VALUE_LEN) >> 20
    );
    let check = |db: &Db, when: &str| {
        for i in 0..CHILD_PUTS {
            let got = db
                .get(format!("k{i:06}"))
                .unwrap_or_else(|e| panic!("{kind}: get {when}: {e}"));
            assert!(
                got.as_deref() == Some(child_value(i).as_slice()),
                "{kind}: acknowledged put {i} lost {when}"
            );
        }
    };
    check(&db, "on the full disk");
    db.close().expect("close");
    std::fs::remove_file(&ballast).expect("remove ballast");
    let db = Db::open(&dir, crash_opts()).expect("reopen");
    check(&db, "after space returned");
    db.close().expect("close");
}

#[test]
fn an_open_after_a_crash_needs_little_free_space() {
    let _one = one_at_a_time();
    crash_then_open_on_a_full_disk("tmpfs", Mount::tmpfs("crash", 48 << 20));
    crash_then_open_on_a_full_disk("ext4", Mount::ext4("crash", 64 << 20));
}
