//! `contest`: the PolarDB-2018 engine contest workload, scaled.
//!
//! 8-byte keys, 4 KiB incompressible values, T threads. As the contest
//! ran it: write (each thread writes its share of the keys, in random
//! order); close the engine (the process ends); drop the page cache; a
//! fresh process reopens and reads every key once (each thread its share,
//! one read at a time); then every thread scans the whole key space in
//! order, twice. Nothing in between: no compaction call, no idle wait.
//! The scan phase counts the data once per pass: all threads scan
//! everything, so the floor is one sequential read of the data per pass.
//! The `total` row sets the three phases' time against the IO floor of
//! the same run: data ÷ sequential write + data ÷ 4 KiB random read at T
//! threads + one sequential read of the data per pass.
//!
//! With `--contest-extras`, phases the contest did not have run too:
//! fresh-range (after the write, page cache dropped, one thread scans
//! every key once), overwrite (every key once more, for steady-state write
//! and space amplification), settle (a full compaction with value GC, or
//! idle settling) before the close, and multi-read after the read.
//!
//! Like the original (2 GB of memory, page cache included, for 256 GB of
//! data), the phases run under a memory cap smaller than the data, so
//! buffered-IO engines are measured from the device, not from RAM: a
//! memory cgroup the benchmark moves into (`CgroupCap`), as a container
//! caps a process, or where that cannot be made, a resident "balloon"
//! allocation that holds all other memory (`Balloon`).
//!
//! The write phase and the read phases each run in a fresh process
//! (`cairn contest-phases`, hidden), as in the contest, where the engine
//! was killed between phases: nothing the writer process cached survives.
//! A child reports its rows and timelines back as JSON (`bench::wire`).
//! An engine that outgrows the memory cap has its process killed by the
//! kernel's OOM killer: its phases fail with a row that says so, and the
//! run goes on with the next engine.

use super::{
    Ctx, Outcome, Rng, Share, check_value, checked_scan, checked_visit, make_key, make_value,
    parallel,
};
use crate::bench::device::DeviceLimits;
use crate::bench::engine::{Compression, Engine, EngineConfig};
use crate::bench::monitor;
use crate::bench::{BenchResult, Progress, Row, wire};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of each value: 4 KiB, as in the contest.
pub const VALUE_LEN: usize = 4096;

#[derive(Debug, Clone)]
pub struct Config {
    pub keys: u64,
    pub threads: usize,
    pub value_len: usize,
    /// Memory for engine plus page cache, bytes; 0 disables the balloon.
    pub mem_cap: u64,
    pub seed: u64,
    pub settle: Settle,
    /// Run the phases the original contest did not have.
    pub extras: bool,
}

/// How the contest's settle phase settles the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Settle {
    /// A full compaction (`Engine::compact`).
    Compact,
    /// The engine's own background settling while idle
    /// (`Engine::wait_settled`), else a full compaction.
    Idle,
}

/// Keys per `multi_get` call in the multi-read phase.
const MULTI_READ_KEYS: u64 = 32;

/// Longest the settle phase waits for background settling.
const SETTLE_IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(1800);

/// Targets of the contest's phases, as ratios to their device limits
/// (issues 5 and 6): writes at 90 % of the best sequential write, point
/// reads at 90 % of 4 KiB random reads at the same thread count, scans of
/// settled values at 90 % of 1 MiB sequential reads, and one scan of
/// freshly written (unsettled) values at 70 % of 4 KiB random reads at
/// high queue depth.
const WRITE_TARGET: f64 = 0.9;
const READ_TARGET: f64 = 0.9;
const RANGE_TARGET: f64 = 0.9;
const FRESH_RANGE_TARGET: f64 = 0.7;
/// The three phases' total time against the run's IO floor (issue 34).
const TOTAL_TARGET: f64 = 0.8;
/// Range passes, as in the contest.
const PASSES: u64 = 2;

/// Sets the target of the row `ctx` added last.
fn set_target(ctx: &mut Ctx, target: f64) {
    if let Some(row) = ctx.rows.last_mut() {
        row.target = Some(target);
    }
}

/// A bijective mix of the key number, so keys are random 8-byte values
/// (as in the contest) yet every key can be named by its number.
fn key_of(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Writes back dirty pages and drops the page cache; false if not allowed
/// (not root, or no /proc/sys/vm/drop_caches).
pub fn drop_page_cache() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"3\n").is_ok()
}

/// The memory cap as a cgroup (v1 memory controller): a child of the
/// benchmark's own memory cgroup with `memory.limit_in_bytes` = cap, which
/// the benchmark moves into for the workload (the read phases' child
/// process starts in it too); memory and page cache charged from then on
/// count against the cap, as in a container. Unlike the balloon it
/// leaves the machine's free memory as it is: under a balloon of all but
/// 512 MiB, `/proc/buddyinfo` showed one free 2 MiB block and one 4 MiB
/// block left, and chunk buffers advised huge pages fell back to small
/// ones in some runs (reads into them split into five requests each,
/// range 1,303 and 1,826 MB/s against ~3,000). `None` where the
/// hierarchy is not there or not writable (not root, cgroup v2 only):
/// the balloon is used then. Left on drop.
pub struct CgroupCap {
    dir: PathBuf,
    back: PathBuf,
}

impl CgroupCap {
    pub fn enter(cap: u64) -> Option<CgroupCap> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = text.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let _id = fields.next()?;
            let controllers = fields.next()?;
            let path = fields.next()?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.trim_start_matches('/').to_owned())
        })?;
        let back = PathBuf::from("/sys/fs/cgroup/memory").join(path);
        let dir = back.join(format!("cairn-cap-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let pid = std::process::id().to_string();
        let entered = std::fs::write(dir.join("memory.limit_in_bytes"), cap.to_string()).is_ok()
            && std::fs::write(dir.join("cgroup.procs"), &pid).is_ok();
        if !entered {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(CgroupCap { dir, back })
    }
}

impl Drop for CgroupCap {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.back.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        // Its charges (page cache) move to the parent.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// How the memory cap is kept (`run`).
enum Cap {
    Cgroup(CgroupCap),
    Balloon(Balloon),
}

/// Memory held resident so that only `cap` bytes remain for the engine
/// and the page cache. The allocation lives in a child process (`cairn
/// balloon`): if memory runs out, the kernel's OOM killer picks that
/// largest process rather than the benchmark, and the run reports that the
/// cap was lost instead of dying. Released on drop.
pub struct Balloon {
    child: Child,
    pub bytes: u64,
}

fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl Balloon {
    /// Inflates to leave about `cap` bytes available; `None` if the
    /// machine already has less than `cap` available or the child fails.
    pub fn inflate(cap: u64) -> Option<Balloon> {
        let bytes = mem_available()?.checked_sub(cap)?;
        let mut child = Command::new(std::env::current_exe().ok()?)
            .arg("balloon")
            .arg(bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take()?)
            .read_line(&mut line)
            .ok()?;
        (line.trim() == "inflated").then_some(Balloon { child, bytes })
    }

    /// False if the balloon process died (the memory cap is gone).
    pub fn holding(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Balloon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cairn balloon BYTES`: allocates and touches BYTES, says "inflated",
/// and holds them until its standard input closes.
pub fn balloon_main(bytes: u64) -> BenchResult<()> {
    // In small pages: the buddy allocator then serves the balloon from the
    // smallest free blocks first and leaves the largest ones free, as a
    // machine with only the capped memory would have them (its huge pages
    // included). A balloon in huge pages, as the allocator gives a large
    // zeroed vector here, took every free 2 MiB block and left the engine
    // under test only fragments: its 4 MiB read buffers then fell back to
    // small pages, and each device read split into several requests.
    let len = usize::try_from(bytes)?.max(1);
    let mut pages = memmap2::MmapOptions::new().len(len).map_anon()?;
    #[cfg(target_os = "linux")]
    let _ = pages.advise(memmap2::Advice::NoHugePage);
    // Touch every page so the memory is really resident (no swap here).
    for i in (0..pages.len()).step_by(4096) {
        pages[i] = 1;
    }
    std::hint::black_box(&pages);
    println!("inflated");
    std::io::stdout().flush()?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    Ok(())
}

pub fn run(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) -> BenchResult<()> {
    let n = cfg.keys.max(1);
    let data = n * (8 + cfg.value_len) as u64;
    let cap = (cfg.mem_cap > 0)
        .then(|| {
            CgroupCap::enter(cfg.mem_cap)
                .map(Cap::Cgroup)
                .or_else(|| Balloon::inflate(cfg.mem_cap).map(Cap::Balloon))
        })
        .flatten();
    if !ctx.quiet || cap.is_some() {
        println!(
            "contest: {n} keys, {:.0} MiB of data, memory cap {} MiB ({})",
            data as f64 / (1 << 20) as f64,
            cfg.mem_cap >> 20,
            match &cap {
                Some(Cap::Cgroup(c)) => format!("memory cgroup {}", c.dir.display()),
                Some(Cap::Balloon(b)) => format!("balloon of {} MiB holds the rest", b.bytes >> 20),
                None => "none: cap disabled, or no cgroup and not enough memory".into(),
            }
        );
    }

    let client = client_alone(cfg)?;
    ctx.next_dir();
    if let Err(why) = run_child(ctx, cfg, dev, Phases::Write, cap.as_ref()) {
        fail_rows(ctx, &["write"], &why);
        return Ok(());
    }
    if let Some(row) = ctx
        .rows
        .iter_mut()
        .rev()
        .find(|r| r.workload == "contest" && r.phase == "write")
    {
        let of = if dev.seq_write > 0.0 {
            format!(" = {:.2} of seq write", client / dev.seq_write)
        } else {
            String::new()
        };
        let note = format!(
            "the client alone (same threads making the same keys and values, no engine) {:.1} MB/s{of}",
            client / 1e6
        );
        row.add_note(note);
    }
    read_and_total(ctx, cfg, dev, cap)
}

/// The write phase (with extras, also fresh-range, overwrite and settle)
/// on the empty database `ctx` has open, then the close: what the
/// `cairn contest-phases --phases write` process does.
fn write_phases(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) -> BenchResult<()> {
    let n = cfg.keys.max(1);
    let data = n * (8 + cfg.value_len) as u64;
    // Device bytes written from here to the end of the settle phase, for
    // the whole workload's write amplification.
    let written_before = monitor::disk_bytes(ctx.disk.as_deref()).1;
    ctx.phase(
        "contest",
        "write",
        "MB/s",
        Some(("seq write".into(), dev.seq_write / 1e6)),
        |db, p| put_every_key(db, p, cfg, 0),
    );
    set_target(ctx, WRITE_TARGET);
    if !cfg.extras {
        // As the contest: the writer's process ends here.
        ctx.close();
        if let Some(row) = ctx.rows.last_mut() {
            row.space_amp = Some(monitor::dir_bytes(&ctx.dir) as f64 / data.max(1) as f64);
        }
        return Ok(());
    }
    ctx.flush_and_measure_space(data)?;
    // The values lie in write order, random in key order: a scan of them
    // from the device reads at random, whatever the engine does.
    drop_page_cache();
    let entry = (8 + cfg.value_len) as u64;
    ctx.phase(
        "contest",
        "fresh-range",
        "MB/s",
        Some(("4K rand read x64".into(), dev.rand_read_4k_qd / 1e6)),
        |db, p| {
            scan_every_key(db, p, cfg.keys.max(1), entry, 0, Share::ALL)?;
            Ok(Outcome {
                ops: cfg.keys.max(1),
                user_bytes: data,
                note_device_reads: true,
                ..Outcome::default()
            })
        },
    );
    set_target(ctx, FRESH_RANGE_TARGET);
    overwrite_phases(ctx, cfg, dev)?;
    if ctx.disk.is_some() {
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
        let written = monitor::disk_bytes(ctx.disk.as_deref())
            .1
            .saturating_sub(written_before);
        let wamp = written as f64 / (2 * data) as f64;
        if let Some(row) = ctx.rows.last_mut() {
            let whole = format!(
                "whole workload (write, fresh-range, overwrite, settle) wamp {wamp:.2}: \
                 device bytes written per user byte written"
            );
            row.add_note(whole);
        }
    }
    ctx.close();
    Ok(())
}

/// Rows of `phases` that failed for `why` (a child process that died
/// and left none).
fn fail_rows(ctx: &mut Ctx, phases: &[&str], why: &str) {
    for phase in phases {
        ctx.rows.push(Row {
            engine: ctx.engine_name.clone(),
            workload: "contest".into(),
            phase: (*phase).to_owned(),
            failure: Some(why.to_owned()),
            unit: "MB/s",
            ..Row::default()
        });
    }
}

/// The engine is closed: drops the page cache, runs the read phases in a
/// fresh process, and adds the `total` row.
fn read_and_total(
    ctx: &mut Ctx,
    cfg: &Config,
    dev: &DeviceLimits,
    cap: Option<Cap>,
) -> BenchResult<()> {
    let dropped = drop_page_cache();
    println!(
        "contest: page cache {}",
        if dropped {
            "dropped"
        } else {
            "NOT dropped (needs root)"
        }
    );
    if let Err(why) = run_child(ctx, cfg, dev, Phases::Read, cap.as_ref()) {
        fail_rows(ctx, &["read", "range"], &why);
    }
    if let Some(Cap::Balloon(mut b)) = cap
        && !b.holding()
    {
        let lost = "the memory-cap balloon died (OOM?): figures are not under the cap";
        for row in ctx.rows.iter_mut().filter(|r| r.workload == "contest") {
            row.failure.get_or_insert_with(|| lost.to_owned());
        }
    }
    let engine = ctx
        .rows
        .iter()
        .rev()
        .find(|r| r.workload == "contest" && r.phase == "write")
        .map(|r| r.engine.clone());
    if let Some(total) = engine.and_then(|e| total_row(&ctx.rows, &e, cfg, dev)) {
        ctx.rows.push(total);
    }
    Ok(())
}

/// The contest's score: the time of its three phases (write, read, range)
/// against the IO floor of the same run — the data written at the
/// sequential write limit, read at the 4 KiB random read limit at the
/// contest's threads, and read once per range pass at the sequential read
/// limit. Reported as a row whose rate is the data moved (once per phase
/// and pass) per second of the phases and whose limit is the same at the
/// floor, so its ratio is floor time / phase time. `None` if a phase is
/// missing or failed.
pub fn total_row(rows: &[Row], engine: &str, cfg: &Config, dev: &DeviceLimits) -> Option<Row> {
    let data = cfg.keys.max(1) * (8 + cfg.value_len) as u64;
    let phase = |name: &str| {
        rows.iter().rev().find(|r| {
            r.engine == engine && r.workload == "contest" && r.phase == name && r.skipped.is_none()
        })
    };
    let (write, read, range) = (phase("write")?, phase("read")?, phase("range")?);
    if [write, read, range].iter().any(|r| r.failure.is_some()) {
        return None;
    }
    let secs = write.secs + read.secs + range.secs;
    let bytes = data * (2 + PASSES);
    let floor = [
        (dev.seq_write, data),
        (dev.rand_read_4k, data),
        (dev.seq_read, data * PASSES),
    ]
    .iter()
    .map(|&(rate, bytes)| (rate > 0.0).then(|| bytes as f64 / rate))
    .sum::<Option<f64>>();
    let note = match floor {
        Some(f) => format!(
            "write {:.1} s + read {:.1} s + range {:.1} s = {secs:.1} s; IO floor {f:.1} s \
             (data / seq write + data / 4K rand read x{} + {PASSES} x data / seq read)",
            write.secs,
            read.secs,
            range.secs,
            cfg.threads.max(1)
        ),
        None => format!(
            "write {:.1} s + read {:.1} s + range {:.1} s = {secs:.1} s (no device limits measured)",
            write.secs, read.secs, range.secs
        ),
    };
    Some(Row {
        engine: engine.to_owned(),
        workload: "contest".into(),
        phase: "total".into(),
        ops: write.ops + read.ops + range.ops,
        secs,
        user_bytes: bytes,
        limit: floor.map(|f| ("IO floor".to_owned(), bytes as f64 / f / 1e6)),
        unit: "MB/s",
        target: Some(TOTAL_TARGET),
        note: Some(note),
        ..Row::default()
    })
}

/// Puts every key once (value `version`), each thread its share in its
/// own random order, then flushes: the write and overwrite phases.
fn put_every_key(
    db: &Arc<dyn Engine>,
    p: &Arc<Progress>,
    cfg: &Config,
    version: u32,
) -> BenchResult<Outcome> {
    let n = cfg.keys.max(1);
    let entry = (8 + cfg.value_len) as u64;
    let groups_before = db.write_groups();
    each_key(cfg, version, |key, value| {
        db.put(&key, &value)?;
        p.add(1, entry);
        Ok(())
    })?;
    // How many writers' puts one journal append carried.
    let note = groups_before
        .zip(db.write_groups())
        .map(|((g0, b0), (g1, b1))| {
            let per = (b1 - b0) as f64 / (g1 - g0).max(1) as f64;
            format!("{per:.2} puts per journal append")
        });
    db.flush()?;
    Ok(Outcome {
        ops: n,
        user_bytes: n * entry,
        written_bytes: n * entry,
        note,
        ..Outcome::default()
    })
}

/// Makes every key and its value of `version`, `cfg.threads` threads
/// each taking its share in its own random order, and hands them to `f`.
fn each_key(
    cfg: &Config,
    version: u32,
    f: impl Fn(Vec<u8>, Vec<u8>) -> BenchResult<()> + Sync,
) -> BenchResult<()> {
    let n = cfg.keys.max(1);
    let threads = cfg.threads.max(1);
    parallel(threads, |t| {
        let seed = cfg.seed + 500 * u64::from(version) + t as u64;
        let mut rng = Rng::new(seed);
        let mut order: Vec<u64> = (t as u64..n).step_by(threads).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for i in order {
            let k = key_of(i);
            f(make_key(k, 8), make_value(k, version, cfg.value_len))?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The write phase's client with no engine: the same threads make the
/// same keys and values and drop them. User bytes per second: what no
/// engine's write phase can pass on this machine, since its client does
/// this work as well.
fn client_alone(cfg: &Config) -> BenchResult<f64> {
    let entry = (8 + cfg.value_len) as u64;
    let start = Instant::now();
    each_key(cfg, 0, |key, value| {
        std::hint::black_box((key, value));
        Ok(())
    })?;
    Ok((cfg.keys.max(1) * entry) as f64 / start.elapsed().as_secs_f64())
}

/// Overwrites every key once more (new values of the same size, each
/// thread in its own random order), then settles the data with a full
/// compaction. Rows: `overwrite` (write amplification of the overwrite
/// with the background work it caused; space amplification after it) and
/// `settle` (device bytes the compaction and value GC wrote per live
/// byte; space amplification after them).
fn overwrite_phases(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) -> BenchResult<()> {
    let data = cfg.keys.max(1) * (8 + cfg.value_len) as u64;
    ctx.phase(
        "contest",
        "overwrite",
        "MB/s",
        Some(("seq write".into(), dev.seq_write / 1e6)),
        |db, p| put_every_key(db, p, cfg, 1),
    );
    ctx.flush_and_measure_space(data)?;
    let settle = cfg.settle;
    ctx.phase("contest", "settle", "MB/s", None, move |db, _| {
        let waited = match settle {
            Settle::Idle => db.wait_settled(SETTLE_IDLE_WAIT)?,
            Settle::Compact => None,
        };
        let note = match waited {
            Some(true) => "settled in the background while idle (no compaction call); \
                 wamp: device bytes written per live byte"
                .to_owned(),
            Some(false) => format!(
                "background settling did not finish within {} s",
                SETTLE_IDLE_WAIT.as_secs()
            ),
            None if db.compact()? => {
                "full compaction with value GC; wamp: device bytes written per live byte".into()
            }
            None => "no compaction call for this engine: space as it left it".into(),
        };
        Ok(Outcome {
            ops: 1,
            user_bytes: data,
            written_bytes: data,
            note: Some(note),
            ..Outcome::default()
        })
    });
    ctx.flush_and_measure_space(data)
}

/// Which of the contest's phases a child process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Phases {
    /// The write phase on an empty database (with extras, also
    /// fresh-range, overwrite and settle), then the close.
    Write,
    /// The read phase (with extras, multi-read), then range.
    Read,
}

impl CgroupCap {
    /// Processes the kernel's OOM killer has killed in this cgroup.
    fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join("memory.oom_control")).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

/// Runs `phases` in a fresh `cairn contest-phases` process on the
/// database at `ctx.dir` and adds its rows and timelines. A child that
/// dies (an engine that outgrows the memory cap is killed by the OOM
/// killer) costs its own phases, not the run: `Err` says what happened.
fn run_child(
    ctx: &mut Ctx,
    cfg: &Config,
    dev: &DeviceLimits,
    phases: Phases,
    cap: Option<&Cap>,
) -> Result<(), String> {
    let result = ctx.root.join("contest-phases.json");
    let _ = std::fs::remove_file(&result);
    let exe = std::env::current_exe().map_err(|e| format!("no path to this program: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("contest-phases")
        .arg("--phases")
        .arg(match phases {
            Phases::Write => "write",
            Phases::Read => "read",
        })
        .arg("--engine")
        .arg(&ctx.engine_name)
        .arg("--dir")
        .arg(&ctx.dir)
        .arg("--result")
        .arg(&result)
        .arg("--keys")
        .arg(cfg.keys.to_string())
        .arg("--threads")
        .arg(cfg.threads.to_string())
        .arg("--value-len")
        .arg(cfg.value_len.to_string())
        .arg("--seed")
        .arg(cfg.seed.to_string())
        .arg("--settle")
        .arg(match cfg.settle {
            Settle::Compact => "compact",
            Settle::Idle => "idle",
        })
        .arg("--cache-bytes")
        .arg(ctx.engine_cfg.cache_bytes.to_string())
        .arg("--write-buffer-bytes")
        .arg(ctx.engine_cfg.write_buffer_bytes.to_string())
        .arg("--compression")
        .arg(ctx.engine_cfg.compression.name())
        .arg("--seq-write")
        .arg(dev.seq_write.to_string())
        .arg("--rand-read-4k")
        .arg(dev.rand_read_4k.to_string())
        .arg("--rand-read-4k-qd")
        .arg(dev.rand_read_4k_qd.to_string())
        .arg("--seq-read")
        .arg(dev.seq_read.to_string());
    if cfg.extras {
        cmd.arg("--extras");
    }
    if let Some(d) = &ctx.disk {
        cmd.arg("--disk").arg(d);
    }
    if ctx.quiet {
        cmd.arg("--quiet");
    }
    let kills_before = match cap {
        Some(Cap::Cgroup(c)) => c.oom_kills(),
        _ => None,
    };
    let status = cmd
        .status()
        .map_err(|e| format!("the phases' process did not start: {e}"))?;
    if !status.success() {
        let kills = match cap {
            Some(Cap::Cgroup(c)) => c.oom_kills().zip(kills_before).map(|(a, b)| a - b),
            _ => None,
        };
        let mut why = format!("the phases' process failed ({status})");
        if let Some(k) = kills.filter(|&k| k > 0) {
            why.push_str(&format!(
                "; the memory cgroup's OOM killer killed {k} process(es): the engine outgrew \
                 the {} MiB memory cap",
                cfg.mem_cap >> 20
            ));
        }
        return Err(why);
    }
    let mut read = || -> BenchResult<()> {
        let text = std::fs::read_to_string(&result)?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        for r in v["rows"].as_array().into_iter().flatten() {
            ctx.rows.push(wire::row_from_json(r)?);
        }
        for t in v["timelines"].as_array().into_iter().flatten() {
            let label = t["label"].as_str().unwrap_or("?").to_owned();
            ctx.timelines
                .push((label, wire::samples_from_json(&t["samples"])));
        }
        Ok(())
    };
    read().map_err(|e| format!("the phases' results could not be read: {e}"))
}

/// `cairn contest-phases`: some of the contest's phases in a fresh
/// process.
#[derive(clap::Args, Debug)]
pub struct PhasesArgs {
    #[arg(long, value_enum)]
    phases: Phases,
    #[arg(long)]
    engine: String,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    result: PathBuf,
    #[arg(long)]
    keys: u64,
    #[arg(long)]
    threads: usize,
    #[arg(long)]
    value_len: usize,
    #[arg(long)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = Settle::Compact)]
    settle: Settle,
    #[arg(long)]
    cache_bytes: usize,
    #[arg(long)]
    write_buffer_bytes: usize,
    /// The parent's `--compression`, for the tables this process writes.
    #[arg(long, value_enum, default_value_t = Compression::None)]
    compression: Compression,
    #[arg(long)]
    seq_write: f64,
    #[arg(long)]
    rand_read_4k: f64,
    #[arg(long)]
    rand_read_4k_qd: f64,
    #[arg(long)]
    seq_read: f64,
    /// Run the phases the contest did not have.
    #[arg(long)]
    extras: bool,
    #[arg(long)]
    disk: Option<String>,
    #[arg(long)]
    quiet: bool,
}

/// Entry point of `cairn contest-phases`.
pub fn phases_main(args: PhasesArgs) -> BenchResult<()> {
    let cfg = Config {
        keys: args.keys,
        threads: args.threads,
        value_len: args.value_len,
        // The parent holds the cap; this process runs inside it.
        mem_cap: 0,
        seed: args.seed,
        settle: args.settle,
        extras: args.extras,
    };
    let dev = DeviceLimits {
        seq_write: args.seq_write,
        rand_read_4k: args.rand_read_4k,
        rand_read_4k_qd: args.rand_read_4k_qd,
        seq_read: args.seq_read,
        ..DeviceLimits::default()
    };
    let engine_cfg = EngineConfig {
        cache_bytes: args.cache_bytes,
        write_buffer_bytes: args.write_buffer_bytes,
        compression: args.compression,
    };
    // On an empty directory the engine creates its database.
    let mut ctx = Ctx::attach(&args.engine, engine_cfg, args.dir, args.disk, args.quiet)?;
    match args.phases {
        Phases::Write => write_phases(&mut ctx, &cfg, &dev)?,
        Phases::Read => read_phases(&mut ctx, &cfg, &dev),
    }
    let timelines: Vec<_> = ctx
        .timelines
        .iter()
        .map(|(label, s)| serde_json::json!({"label": label, "samples": wire::samples_to_json(s)}))
        .collect();
    let out = serde_json::json!({
        "rows": ctx.rows.iter().map(wire::row_to_json).collect::<Vec<_>>(),
        "timelines": timelines,
    });
    std::fs::write(&args.result, out.to_string())?;
    Ok(())
}

/// Random read of every key once (then, with extras, multi-read), then
/// every thread scans all keys twice.
fn read_phases(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) {
    let n = cfg.keys.max(1);
    let threads = cfg.threads.max(1) as u64;
    let vl = cfg.value_len;
    let entry = (8 + vl) as u64;
    let data = n * entry;

    let read_limit = Some((format!("4K rand read x{threads}"), dev.rand_read_4k / 1e6));
    ctx.phase("contest", "read", "MB/s", read_limit, |db, p| {
        parallel(threads as usize, |t| {
            let mut rng = Rng::new(cfg.seed + 1000 + t as u64);
            let mut order: Vec<u64> = (t as u64..n).step_by(threads as usize).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for i in order {
                let k = key_of(i);
                let v = db
                    .get(&make_key(k, 8))?
                    .ok_or_else(|| format!("key {k:#x} is missing"))?;
                check_value(k, &v)?;
                p.add(1, entry);
            }
            Ok(())
        })?;
        // Every table has been read by now, so every index is loaded.
        Ok(Outcome {
            ops: n,
            user_bytes: data,
            note: db.index_memory().map(|(_, note)| note),
            note_device_reads: true,
            ..Outcome::default()
        })
    });
    set_target(ctx, READ_TARGET);

    if cfg.extras {
        multi_read(ctx, cfg, dev);
    }

    drop_page_cache();
    let passes = PASSES;
    let scan_limit = Some(("seq read".into(), dev.seq_read / 1e6));
    ctx.phase("contest", "range", "MB/s", scan_limit, |db, p| {
        parallel(threads as usize, |t| {
            // Each value is checked in full by one scanner a pass.
            let share = Share {
                part: t as u64,
                of: threads,
            };
            for pass in 0..passes {
                // Data is counted once per pass, not per thread.
                scan_every_key(db, p, n, entry / threads, pass, share)?;
            }
            Ok(())
        })?;
        Ok(Outcome {
            ops: n * passes,
            user_bytes: data * passes,
            note: db.scan_note(),
            note_device_reads: true,
            ..Outcome::default()
        })
    });
    set_target(ctx, RANGE_TARGET);
    note_range_client_alone(ctx, cfg, dev);
    note_same_files_read(ctx);
}

/// Keys the range phase's client alone checks from memory: 128 MiB of
/// 4 KiB values, more than the processor's caches, as the engine's
/// values are.
const CLIENT_SAMPLE_KEYS: u64 = 32 << 10;

/// The range phase's client with no engine: the same threads check the
/// same entries in key order, as many per pass as the phase, from a
/// sample of them held in memory (each thread its share checked in full,
/// the rest by stamp). Data bytes per second per pass, as the phase
/// counts them: what no engine's range phase can pass on this machine,
/// since its client does this work as well.
fn range_client_alone(cfg: &Config) -> BenchResult<f64> {
    let n = cfg.keys.max(1);
    let threads = cfg.threads.max(1) as u64;
    let sample = n.min(CLIENT_SAMPLE_KEYS);
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = (0..sample)
        .map(|i| {
            let k = key_of(i);
            (make_key(k, 8), make_value(k, 0, cfg.value_len))
        })
        .collect();
    entries.sort_unstable();
    let entries = &entries;
    let start = Instant::now();
    parallel(threads as usize, |t| {
        let share = Share {
            part: t as u64,
            of: threads,
        };
        for _ in 0..PASSES {
            let mut left = n;
            while left > 0 {
                let take = left.min(sample) as usize;
                checked_visit(
                    |f| {
                        let mut seen = 0;
                        for (k, v) in &entries[..take] {
                            seen += 1;
                            if !f(k, v) {
                                break;
                            }
                        }
                        Ok(seen)
                    },
                    share,
                    |k| {
                        std::hint::black_box(k);
                    },
                )?;
                left -= take as u64;
            }
        }
        Ok(())
    })?;
    let data = n * (8 + cfg.value_len) as u64 * PASSES;
    Ok(data as f64 / start.elapsed().as_secs_f64())
}

/// The range phase's user bytes per second, if it was the last row and
/// did not fail.
fn range_rate(ctx: &Ctx) -> Option<f64> {
    ctx.rows
        .last()
        .filter(|r| r.phase == "range" && r.failure.is_none() && r.secs > 0.0)
        .map(|r| r.user_bytes as f64 / r.secs)
}

/// Adds to the range row the client alone's rate (`range_client_alone`),
/// against the device's sequential read and the phase's rate.
fn note_range_client_alone(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) {
    let Some(rate) = range_rate(ctx) else {
        return;
    };
    let note = match range_client_alone(cfg) {
        Ok(client) => {
            let of = if dev.seq_read > 0.0 {
                format!(" = {:.2} of seq read", client / dev.seq_read)
            } else {
                String::new()
            };
            format!(
                "the client alone (same threads checking the same entries in key order from memory, no engine) \
                 {:.1} MB/s{of}; the scan {:.2} of it",
                client / 1e6,
                rate / client
            )
        }
        Err(e) => format!("the client alone failed: {e}"),
    };
    if let Some(row) = ctx.rows.last_mut() {
        row.add_note(note);
    }
}

/// A quarter of the keys again, each thread asking for `MULTI_READ_KEYS`
/// at a time (`Engine::multi_get`): what reads in flight together win
/// over one at a time. No target; the limit is the high-queue-depth one.
/// Not in the contest (`--contest-extras`).
fn multi_read(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) {
    let n = cfg.keys.max(1);
    let threads = cfg.threads.max(1) as u64;
    let entry = (8 + cfg.value_len) as u64;
    drop_page_cache();
    let multi_limit = Some(("4K rand read x64".into(), dev.rand_read_4k_qd / 1e6));
    let quarter = n.div_ceil(4);
    ctx.phase("contest", "multi-read", "MB/s", multi_limit, |db, p| {
        parallel(threads as usize, |t| {
            let mut rng = Rng::new(cfg.seed + 3000 + t as u64);
            let mine = quarter.div_ceil(threads);
            let mut left = mine;
            while left > 0 {
                let batch: Vec<u64> = (0..left.min(MULTI_READ_KEYS))
                    .map(|_| key_of(rng.below(n)))
                    .collect();
                let keys: Vec<Vec<u8>> = batch.iter().map(|&k| make_key(k, 8)).collect();
                let got = db.multi_get(&keys)?;
                for (&k, v) in batch.iter().zip(got) {
                    let v = v.ok_or_else(|| format!("key {k:#x} is missing"))?;
                    check_value(k, &v)?;
                    p.add(1, entry);
                }
                left -= batch.len() as u64;
            }
            Ok(())
        })?;
        let ops = quarter.div_ceil(threads) * threads;
        Ok(Outcome {
            ops,
            user_bytes: ops * entry,
            note: Some(format!(
                "{MULTI_READ_KEYS} keys per multi_get call, {threads} threads"
            )),
            note_device_reads: true,
            ..Outcome::default()
        })
    });
}

/// Blocks and readers of the read of the database's own files after the
/// range phase (`note_same_files_read`): the probe's best point on most
/// runs here.
const SAME_FILES_BLOCK: usize = 4 << 20;
const SAME_FILES_READERS: usize = 4;

/// Right after the range phase, the page cache dropped again, reads the
/// database's files (those of 1 MiB and more: values files, tables,
/// journals) whole with direct IO and notes the rate beside the scan's:
/// the device's sequential read of the very bytes the scan read, as
/// recently read as the scan's second pass found them. The target stays
/// against the probe's limit; this says how much of the gap is the disk.
fn note_same_files_read(ctx: &mut Ctx) {
    let Some(scan) = range_rate(ctx) else {
        return;
    };
    drop_page_cache();
    let files: Vec<PathBuf> = match std::fs::read_dir(&ctx.dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|e| {
                e.metadata()
                    .is_ok_and(|m| m.is_file() && m.len() >= 1 << 20)
            })
            .map(|e| e.path())
            .collect(),
        Err(_) => return,
    };
    let note = match crate::bench::device::read_files_direct(
        &files,
        SAME_FILES_BLOCK,
        SAME_FILES_READERS,
    ) {
        Ok(rate) if rate > 0.0 => format!(
            "the database's files read whole right after (direct, huge pages, {} MiB x {SAME_FILES_READERS}): \
             {:.1} MB/s, the scan {:.2} of it",
            SAME_FILES_BLOCK >> 20,
            rate / 1e6,
            scan / rate
        ),
        Ok(_) => return,
        Err(e) => format!("reading the database's files after the scan failed: {e}"),
    };
    if let Some(row) = ctx.rows.last_mut() {
        row.add_note(note);
    }
}

/// Scans every key once in order, checking order, count and each value
/// (in full as `check` says); counts `bytes` of progress per key. `pass`
/// names the pass in errors.
fn scan_every_key(
    db: &Arc<dyn Engine>,
    p: &Arc<Progress>,
    n: u64,
    bytes: u64,
    pass: u64,
    check: Share,
) -> BenchResult<()> {
    let seen = checked_scan(db.as_ref(), &[], usize::MAX, check, |_| p.add(1, bytes))
        .map_err(|e| format!("pass {pass}: {e}"))?;
    if seen as u64 != n {
        return Err(format!("pass {pass}: scan saw {seen} of {n} keys").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(phase: &str, secs: f64) -> Row {
        Row {
            engine: "e".into(),
            workload: "contest".into(),
            phase: phase.into(),
            secs,
            ops: 1,
            unit: "MB/s",
            ..Row::default()
        }
    }

    #[test]
    fn the_total_sets_the_three_phases_against_the_io_floor() {
        let cfg = Config {
            keys: 1000,
            threads: 8,
            value_len: 4088, // 4 KiB entries with the 8-byte key
            mem_cap: 0,
            seed: 0,
            settle: Settle::Compact,
            extras: false,
        };
        let data = 1000.0 * 4096.0;
        let dev = DeviceLimits {
            seq_write: data,          // 1 s
            rand_read_4k: data / 2.0, // 2 s
            seq_read: data * 2.0,     // 0.5 s a pass
            ..DeviceLimits::default()
        };
        let rows = vec![
            row("write", 2.0),
            row("read", 4.0),
            row("multi-read", 100.0), // not one of the three
            row("range", 4.0),
        ];
        let total = total_row(&rows, "e", &cfg, &dev).expect("a total");
        assert_eq!(total.phase, "total");
        assert!((total.secs - 10.0).abs() < 1e-9);
        // Floor 1 + 2 + 2 × 0.5 = 4 s against 10 s.
        let ratio = total.ratio().expect("a ratio");
        assert!((ratio - 0.4).abs() < 1e-9, "{ratio}");
        assert_eq!(total.target_met(), Some(false));
        // A failed or missing phase gives no total.
        let mut failed = rows.clone();
        failed[3].failure = Some("x".into());
        assert!(total_row(&failed, "e", &cfg, &dev).is_none());
        assert!(total_row(&rows[..2], "e", &cfg, &dev).is_none());
        assert!(total_row(&rows, "other", &cfg, &dev).is_none());
    }
}
