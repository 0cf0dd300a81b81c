//! The per-second timeline of a phase: throughput from the `Progress`
//! counters, process CPU from /proc/self/stat, disk traffic of the device
//! under the scratch directory from /proc/diskstats, and RSS from
//! /proc/self/status; over the whole phase, the CPU that everything else
//! on the machine took (/proc/stat, steal included), so that a figure
//! measured on a busy shared machine says so.
//!
//! A sampler thread wakes at every whole second since `Monitor::start`,
//! records a `Sample`, and (unless quiet) prints one dstat-like line to
//! stderr:
//!
//! ```text
//! [cairndb/dbbench/fillrandom] t=  3s    123,456 ops/s    12.3 MB/s  cpu usr  95% sys  20%  disk r 0.0 w 210.5 MB/s  rss 123 MiB
//! ```
//!
//! A second in which no operation completed, after the phase's first
//! operation, is a stall and is flagged `STALL`.

use super::Progress;
use super::report::thousands;
use std::io::{IsTerminal, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One second of a phase.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the phase started (end of the interval sampled).
    pub t: f64,
    pub ops_per_sec: f64,
    /// User bytes per second, in MB (1e6 bytes).
    pub mb_per_sec: f64,
    /// Process CPU time over the interval, % of one core.
    pub cpu_user: f64,
    pub cpu_sys: f64,
    /// Device traffic, in MB (1e6 bytes) per second; 0 without a disk.
    pub disk_read_mb_per_sec: f64,
    pub disk_write_mb_per_sec: f64,
    pub rss_bytes: u64,
    /// True if no operation completed in this second (after the phase's
    /// first operation; a final partial second is never a stall).
    pub stalled: bool,
}

/// What the monitor saw over a whole phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseStats {
    pub samples: Vec<Sample>,
    /// Seconds flagged as stalls.
    pub stalled_seconds: u64,
    /// VmHWM at the end of the phase: the process's peak RSS so far, bytes.
    pub peak_rss: u64,
    /// Device bytes read and written between start and stop (all processes;
    /// 0 without a disk).
    // Not every caller reads it (write amplification needs only writes).
    #[allow(dead_code)]
    pub disk_read_bytes: u64,
    pub disk_write_bytes: u64,
    /// Seconds the disk had a request in flight (all processes; 0 without
    /// a disk), and the phase's wall time as the sampler saw it.
    pub disk_busy_secs: f64,
    pub wall_secs: f64,
    /// CPU used by other processes (and stolen by the hypervisor) during
    /// the phase, in cores: machine busy time minus this process's, over
    /// the wall time.
    pub others_cpu: f64,
    /// CPU this process used during the phase (all its threads, user and
    /// system), in seconds.
    pub own_cpu_secs: f64,
}

impl PhaseStats {
    /// The longest run of consecutive stalled seconds.
    #[allow(dead_code)] // API for the runner (`Row::stalls`).
    pub fn longest_stall(&self) -> u64 {
        let (mut best, mut run) = (0u64, 0u64);
        for s in &self.samples {
            run = if s.stalled { run + 1 } else { 0 };
            best = best.max(run);
        }
        best
    }
}

/// Linux `dev_t` → (major, minor), glibc encoding.
fn split_dev(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0x00ff);
    (major, minor)
}

/// The block device holding `path`, as named in /proc/diskstats (a
/// partition's own name if the filesystem is on a partition).
///
/// Matches the major:minor of the filesystem's device; if none matches
/// (btrfs, overlay, device-mapper names), falls back to the source of the
/// longest mount point containing `path` in /proc/self/mountinfo.
pub fn disk_for_path(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let (major, minor) = split_dev(meta.dev());
    let stats = std::fs::read_to_string("/proc/diskstats").ok()?;
    let names: Vec<(u64, u64, &str)> = stats
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?))
        })
        .collect();
    if let Some((_, _, name)) = names
        .iter()
        .find(|(ma, mi, _)| *ma == major && *mi == minor)
    {
        return Some((*name).to_owned());
    }
    let source = mount_source(path)?;
    let dev = std::fs::canonicalize(&source).unwrap_or(source);
    let base = dev.file_name()?.to_str()?;
    names
        .iter()
        .find(|(_, _, n)| *n == base)
        .map(|(_, _, n)| (*n).to_owned())
}

/// The source device of the mount holding `path`, from /proc/self/mountinfo.
fn mount_source(path: &Path) -> Option<PathBuf> {
    let path = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(usize, PathBuf)> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(mount_point) = f.get(4) else {
            continue;
        };
        let mount_point = unescape_mount(mount_point);
        // Fields after " - ": fstype, source, options.
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let Some(source) = f.get(sep + 2) else {
            continue;
        };
        if !source.starts_with("/dev/") || !path.starts_with(&mount_point) {
            continue;
        }
        let depth = Path::new(&mount_point).components().count();
        if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
            best = Some((depth, PathBuf::from(unescape_mount(source))));
        }
    }
    best.map(|(_, s)| s)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `kB` field of /proc/self/status, in bytes.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kb * 1024)
    })
}

/// Peak resident set size of this process so far (VmHWM), bytes; 0 if
/// unknown.
pub fn peak_rss() -> u64 {
    status_kb("VmHWM").unwrap_or(0)
}

/// Current resident set size of this process (VmRSS), bytes; 0 if unknown.
pub fn current_rss() -> u64 {
    status_kb("VmRSS").unwrap_or(0)
}

/// Sum of the sizes of the regular files under `path` (recursive, symlinks
/// not followed); the size of `path` itself if it is a file. Unreadable
/// entries count as 0 (files may vanish under a running compaction).
pub fn dir_bytes(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_file() {
        return meta.len();
    }
    if !meta.is_dir() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries.flatten().map(|e| dir_bytes(&e.path())).sum()
}

/// What a database directory takes on disk (`dir_usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Sum of the regular files' lengths (`dir_bytes`): what the engine
    /// wrote or preallocated, holes of sparse files included.
    pub bytes: u64,
    /// Sum of the blocks allocated to them (`st_blocks` × 512): what
    /// the file system holds for them, holes excluded and preallocated
    /// (`fallocate`d) space included.
    pub allocated: u64,
}

/// `DiskUsage` of the regular files under `path` (recursive, symlinks not
/// followed), or of `path` itself if it is a file. Unreadable entries
/// count as 0, as in `dir_bytes`.
pub fn dir_usage(path: &Path) -> DiskUsage {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return DiskUsage::default();
    };
    if meta.is_file() {
        return DiskUsage {
            bytes: meta.len(),
            allocated: meta.blocks() * 512,
        };
    }
    if !meta.is_dir() {
        return DiskUsage::default();
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return DiskUsage::default();
    };
    entries
        .flatten()
        .map(|e| dir_usage(&e.path()))
        .fold(DiskUsage::default(), |a, b| DiskUsage {
            bytes: a.bytes + b.bytes,
            allocated: a.allocated + b.allocated,
        })
}

/// The live status line of a quiet phase: a spinner with the latest
/// second's figures, redrawn in place; hidden (all calls are no-ops) when
/// not quiet or when stderr is not a terminal, as in CI.
fn status_line(quiet: bool) -> indicatif::ProgressBar {
    if !quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let style = indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
    let bar = indicatif::ProgressBar::new_spinner().with_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The CPU time of every thread of this process so far, nanoseconds.
pub fn process_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// Process CPU time (user, system) in clock ticks, from /proc/self/stat.
fn cpu_ticks() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0, 0);
    };
    // The command name (field 2) may hold spaces and parentheses: fields
    // are counted from the last ')'. After it comes field 3 (state), so
    // utime (14) and stime (15) are the 12th and 13th there.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return (0, 0);
    };
    let mut f = rest.split_whitespace().skip(11);
    let user = f.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    let sys = f.next().and_then(|x| x.parse().ok()).unwrap_or(0);
    (user, sys)
}

/// Busy CPU time of the whole machine in clock ticks, from /proc/stat:
/// user, nice, system, irq, softirq and steal (not idle or iowait).
fn machine_busy_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let f: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    [0, 1, 2, 5, 6, 7]
        .iter()
        .map(|&i| f.get(i).copied().unwrap_or(0))
        .sum()
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Bytes (read, written) of `disk` so far, from /proc/diskstats.
pub fn disk_bytes(disk: Option<&str>) -> (u64, u64) {
    let c = disk_counters(disk);
    (c.read, c.written)
}

/// What /proc/diskstats counts for one disk.
#[derive(Clone, Copy, Default)]
struct DiskCounters {
    read: u64,
    written: u64,
    /// Milliseconds the disk had at least one request in flight
    /// (`io_ticks`).
    busy_ms: u64,
}

fn disk_counters(disk: Option<&str>) -> DiskCounters {
    let Some(disk) = disk else {
        return DiskCounters::default();
    };
    std::fs::read_to_string("/proc/diskstats")
        .ok()
        .and_then(|stats| parse_counters(&stats, disk))
        .unwrap_or_default()
}

/// `disk`'s line of /proc/diskstats text (sectors of 512 bytes).
fn parse_counters(stats: &str, disk: &str) -> Option<DiskCounters> {
    stats.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(2) == Some(&disk)).then(|| {
            let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
            DiskCounters {
                read: field(5) * 512,
                written: field(9) * 512,
                busy_ms: field(12),
            }
        })
    })
}

/// Counters at one instant.
#[derive(Clone, Copy)]
struct Snapshot {
    at: Instant,
    ops: u64,
    bytes: u64,
    cpu_user: u64,
    cpu_sys: u64,
    /// The process's CPU time, nanoseconds (finer than the ticks).
    cpu_ns: u64,
    disk_read: u64,
    disk_write: u64,
    disk_busy_ms: u64,
    machine_busy: u64,
}

impl Snapshot {
    fn take(progress: &Progress, disk: Option<&str>) -> Snapshot {
        let machine_busy = machine_busy_ticks();
        let (cpu_user, cpu_sys) = cpu_ticks();
        let disk_counters = disk_counters(disk);
        Snapshot {
            at: Instant::now(),
            ops: progress.ops.load(Ordering::Relaxed),
            bytes: progress.bytes.load(Ordering::Relaxed),
            cpu_user,
            cpu_sys,
            cpu_ns: process_cpu_ns(),
            disk_read: disk_counters.read,
            disk_write: disk_counters.written,
            disk_busy_ms: disk_counters.busy_ms,
            machine_busy,
        }
    }
}

/// One dstat-like line for a sample.
fn format_line(label: &str, s: &Sample, partial: bool) -> String {
    let t = if partial {
        format!("{:.1}", s.t)
    } else {
        format!("{:.0}", s.t)
    };
    let mut line = format!(
        "[{label}] t={t:>4}s {:>10} ops/s {:>7.1} MB/s  cpu usr {:>3.0}% sys {:>3.0}%  disk r {:.1} w {:.1} MB/s  rss {} MiB",
        thousands(s.ops_per_sec.round() as u64),
        s.mb_per_sec,
        s.cpu_user,
        s.cpu_sys,
        s.disk_read_mb_per_sec,
        s.disk_write_mb_per_sec,
        thousands(s.rss_bytes >> 20),
    );
    if s.stalled {
        line.push_str("  STALL");
    }
    line
}

/// The sampler thread's state.
struct Sampler {
    label: String,
    progress: Arc<Progress>,
    disk: Option<String>,
    quiet: bool,
    /// With `quiet`, a one-line live status on a terminal instead of a
    /// line per second (hidden when stderr is not a terminal).
    bar: indicatif::ProgressBar,
    tick: f64,
    start: Snapshot,
    prev: Snapshot,
    samples: Vec<Sample>,
}

impl Sampler {
    fn sample(&mut self, partial: bool) {
        let now = Snapshot::take(&self.progress, self.disk.as_deref());
        let dt = now.at.duration_since(self.prev.at).as_secs_f64().max(1e-6);
        let ops = now.ops.saturating_sub(self.prev.ops);
        let started = self.prev.ops > self.start.ops;
        let cpu = |a: u64, b: u64| a.saturating_sub(b) as f64 / self.tick / dt * 100.0;
        let mb = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt / 1e6;
        let s = Sample {
            t: now.at.duration_since(self.start.at).as_secs_f64(),
            ops_per_sec: ops as f64 / dt,
            mb_per_sec: mb(now.bytes, self.prev.bytes),
            cpu_user: cpu(now.cpu_user, self.prev.cpu_user),
            cpu_sys: cpu(now.cpu_sys, self.prev.cpu_sys),
            disk_read_mb_per_sec: mb(now.disk_read, self.prev.disk_read),
            disk_write_mb_per_sec: mb(now.disk_write, self.prev.disk_write),
            rss_bytes: current_rss(),
            stalled: ops == 0 && started && !partial,
        };
        if !self.quiet {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}", format_line(&self.label, &s, partial));
        } else {
            self.bar.set_message(format_line(&self.label, &s, partial));
        }
        self.samples.push(s);
        self.prev = now;
    }

    fn run(mut self, stop: mpsc::Receiver<()>) -> PhaseStats {
        let mut next = 1u64;
        loop {
            let deadline = self.start.at + Duration::from_secs(next);
            let wait = deadline.saturating_duration_since(Instant::now());
            match stop.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {
                    self.sample(false);
                    // Skip seconds missed if the thread was starved.
                    let elapsed = self.start.at.elapsed().as_secs();
                    next = (next + 1).max(elapsed + 1);
                }
                Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        // The final partial second, unless the last tick just happened.
        if self.prev.at.elapsed() >= Duration::from_millis(50) || self.samples.is_empty() {
            self.sample(true);
        }
        self.bar.finish_and_clear();
        let end = self.prev;
        let own =
            (end.cpu_user + end.cpu_sys).saturating_sub(self.start.cpu_user + self.start.cpu_sys);
        let others = end
            .machine_busy
            .saturating_sub(self.start.machine_busy)
            .saturating_sub(own);
        let wall = end.at.duration_since(self.start.at).as_secs_f64();
        PhaseStats {
            others_cpu: if wall > 0.0 {
                others as f64 / self.tick / wall
            } else {
                0.0
            },
            own_cpu_secs: end.cpu_ns.saturating_sub(self.start.cpu_ns) as f64 / 1e9,
            stalled_seconds: self.samples.iter().filter(|s| s.stalled).count() as u64,
            samples: self.samples,
            peak_rss: peak_rss(),
            disk_read_bytes: end.disk_read.saturating_sub(self.start.disk_read),
            disk_write_bytes: end.disk_write.saturating_sub(self.start.disk_write),
            disk_busy_secs: end.disk_busy_ms.saturating_sub(self.start.disk_busy_ms) as f64 / 1e3,
            wall_secs: wall,
        }
    }
}

/// Samples a phase every second on its own thread, from `start` to `stop`.
pub struct Monitor {
    stop: mpsc::Sender<()>,
    thread: Option<JoinHandle<PhaseStats>>,
}

impl Monitor {
    /// Starts sampling every second; prints a line per second to stderr
    /// unless `quiet`. `disk` is a /proc/diskstats device name (see
    /// `disk_for_path`); without one, disk figures are 0.
    pub fn start(
        label: &str,
        progress: Arc<Progress>,
        disk: Option<String>,
        quiet: bool,
    ) -> Monitor {
        // Reset the kernel's peak-RSS mark (VmHWM) so each phase reports
        // its own peak, not the process's; needs Linux >= 4.0.
        let _ = std::fs::write("/proc/self/clear_refs", b"5");
        let start = Snapshot::take(&progress, disk.as_deref());
        let sampler = Sampler {
            label: label.to_owned(),
            progress,
            disk,
            quiet,
            bar: status_line(quiet),
            tick: ticks_per_sec(),
            start,
            prev: start,
            samples: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cairn-monitor".into())
            .spawn(move || sampler.run(rx))
            .ok();
        Monitor { stop: tx, thread }
    }

    /// Stops the sampler after a final partial sample and returns what it
    /// saw. Returns empty stats if the thread could not be spawned or panicked.
    pub fn stop(mut self) -> PhaseStats {
        let _ = self.stop.send(());
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_else(|| PhaseStats {
                peak_rss: peak_rss(),
                ..PhaseStats::default()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn diskstats_line_gives_bytes_and_busy_time() {
        let stats = "\
 254       0 vda 1000 5 2048 300 400 7 4096 500 0 1234 900 0 0 0 0
 254       1 vda1 1 0 8 0 0 0 0 0 0 4 0 0 0 0 0\n";
        let c = parse_counters(stats, "vda").expect("vda is listed");
        assert_eq!(
            (c.read, c.written, c.busy_ms),
            (2048 * 512, 4096 * 512, 1234)
        );
        assert_eq!(parse_counters(stats, "vda1").map(|c| c.busy_ms), Some(4));
        assert!(parse_counters(stats, "vdb").is_none());
    }

    #[test]
    fn dev_split() {
        // 254:0 as stat reports it (0xfe00), and large numbers.
        assert_eq!(split_dev(0xfe00), (254, 0));
        for (ma, mi) in [
            (8u32, 17u32),
            (259, 3),
            (4095, 0x000f_ffff),
            (0x1234, 0x0abc_def0),
        ] {
            assert_eq!(
                split_dev(libc::makedev(ma, mi)),
                (u64::from(ma), u64::from(mi))
            );
        }
    }

    #[test]
    fn finds_disk_of_root_and_crate() {
        let root = disk_for_path(Path::new("/"));
        let here = disk_for_path(Path::new(env!("CARGO_MANIFEST_DIR")));
        assert!(
            root.is_some() || here.is_some(),
            "no disk for / nor the crate dir"
        );
        let disk = here.or(root);
        let (r, w) = disk_bytes(disk.as_deref());
        assert!(r + w > 0, "{disk:?} shows no traffic in /proc/diskstats");
    }

    #[test]
    fn proc_readers() {
        assert!(peak_rss() > 0);
        assert!(current_rss() > 0 && current_rss() <= peak_rss());
        let (u, s) = cpu_ticks();
        let _ = (u, s);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a"), [0u8; 100]).expect("write");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/b"), [0u8; 23]).expect("write");
        assert_eq!(dir_bytes(dir.path()), 123);
        assert_eq!(dir_bytes(&dir.path().join("a")), 100);
        assert_eq!(dir_bytes(&dir.path().join("missing")), 0);
        assert_eq!(unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
    }

    #[test]
    fn busy_phase_has_no_stall() {
        let progress = Arc::new(Progress::default());
        let disk = disk_for_path(Path::new("/"));
        let m = Monitor::start("test/busy", progress.clone(), disk, true);
        let p = progress.clone();
        let worker = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_millis(2200);
            while Instant::now() < end {
                p.add(10, 1000);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        worker.join().expect("worker");
        let stats = m.stop();
        let full: Vec<_> = stats.samples.iter().filter(|s| s.t > 0.9).collect();
        assert!(full.len() >= 2, "{stats:?}");
        assert!(
            stats.samples.iter().all(|s| s.ops_per_sec > 0.0),
            "{stats:?}"
        );
        assert!(stats.samples.iter().any(|s| s.mb_per_sec > 0.0));
        assert_eq!(stats.stalled_seconds, 0, "{stats:?}");
        assert!(stats.peak_rss > 0);
        assert!(stats.samples.iter().all(|s| s.rss_bytes > 0));
    }

    #[test]
    fn idle_phase_after_first_op_stalls() {
        let progress = Arc::new(Progress::default());
        let m = Monitor::start("test/idle", progress.clone(), None, false);
        std::thread::sleep(Duration::from_millis(100));
        progress.add(1, 10);
        std::thread::sleep(Duration::from_millis(2100));
        let stats = m.stop();
        assert!(stats.samples.len() >= 2, "{stats:?}");
        assert!(!stats.samples[0].stalled, "first second had the op");
        assert!(stats.stalled_seconds >= 1, "{stats:?}");
        assert!(stats.longest_stall() >= 1);
        assert_eq!(stats.disk_write_bytes, 0);
    }

    #[test]
    fn nothing_started_is_not_a_stall() {
        let progress = Arc::new(Progress::default());
        let m = Monitor::start("test/none", progress, None, true);
        std::thread::sleep(Duration::from_millis(1100));
        let stats = m.stop();
        assert_eq!(stats.stalled_seconds, 0, "{stats:?}");
        assert!(!stats.samples.is_empty());
    }
}
