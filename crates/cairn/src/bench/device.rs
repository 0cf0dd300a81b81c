//! Device limits: what the disk under the scratch directory can do, measured
//! with the IO primitives the engine uses.
//!
//! Every probe uses O_DIRECT (`custom_flags(libc::O_DIRECT)`), 4096-byte
//! aligned buffers, positional reads and writes (`read_exact_at`,
//! `write_all_at`) and `File::sync_data` (fdatasync). Where O_DIRECT is not
//! supported (tmpfs on older kernels, some FUSE file systems) the probes fall
//! back to buffered IO and say so in `DeviceLimits::note`.
//!
//! Probes, in order:
//! 1. A sequential 1 MiB pass over a fallocated (unwritten-extent) file, then
//!    the same pass over a brand-new file: `write-fallocated` and
//!    `write-fresh` (= `seq_write_fresh`). The new file then stays as the
//!    probe file for the rest.
//! 2. Sequential writes over the now written file at 64 KiB .. 4 MiB blocks
//!    with 1 and 4 writers: `seq-write`; then at 1 and 4 MiB from buffers
//!    in huge pages: `seq-write huge-pages` (best of both = `seq_write`;
//!    see `Pages`).
//! 3. Sequential reads at the same blocks, readers and pages: `seq-read`,
//!    `seq-read huge-pages` (best = `seq_read`; a disk that serves one
//!    block size better on some runs than others counts at its best, as
//!    for writes).
//! 4. Uniform random reads: 4 KiB at `threads` threads (`rand_read_4k`) and at
//!    64 threads (`rand_read_4k_qd`), 16/64/128 KiB at `threads` threads.
//! 5. 4 KiB append + fdatasync, buffered (`fdatasync_per_sec`: each sync
//!    also commits the grown size to the file system's journal) and direct;
//!    then 4 KiB buffered writes over a pre-written file + fdatasync
//!    (`fdatasync_overwrite_per_sec`: data alone, as the engine's journal
//!    syncs after pre-writing, `Options::journal_prewrite`).
//! 6. fio, when installed, over the same probe file as a cross-check.
//!
//! Each timed point runs `secs_per_point`; the writing points end with an
//! fdatasync inside the timed interval. Space is bounded by the probe file
//! (`file_bytes`, rounded down to 16 MiB); all probe files are removed before
//! `probe` returns, also on error.

use super::BenchResult;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
/// Buffer and offset alignment for O_DIRECT.
const ALIGN: usize = 4096;
/// Smallest probe file accepted.
const MIN_FILE_BYTES: u64 = 64 * MIB as u64;
/// The probe file is rounded down to a multiple of this: 4 writers each
/// with a region holding whole 4 MiB blocks.
const FILE_GRAIN: u64 = 16 * MIB as u64;
/// Threads of the high-queue-depth random-read point.
const QD_THREADS: usize = 64;
const SEQ_BLOCKS: [usize; 4] = [64 * KIB, 256 * KIB, MIB, 4 * MIB];
const SEQ_THREADS: [usize; 2] = [1, 4];
/// Blocks of the sequential points also run from huge-page buffers.
const HUGE_BLOCKS: [usize; 2] = [MIB, 4 * MIB];
/// Ends the name of a point run from huge-page buffers.
const HUGE_SUFFIX: &str = "huge-pages";
const RAND_READ_EXTRA_BLOCKS: [usize; 3] = [16 * KIB, 64 * KIB, 128 * KIB];
const SYNC_BLOCK: usize = 4 * KIB;
/// Cap on the fdatasync probe's file (it stops early when reached).
const SYNC_MAX_BYTES: u64 = 64 * MIB as u64;

/// What to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Threads of the workloads that will be compared with the limits.
    pub threads: usize,
    /// Size of the probe file in bytes.
    pub file_bytes: u64,
    /// Seconds per probe point.
    pub secs_per_point: f64,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            threads: 4,
            file_bytes: 1 << 30,
            secs_per_point: 1.0,
        }
    }
}

/// The limits measured, in bytes/s unless named otherwise.
#[derive(Debug, Clone, Default)]
pub struct DeviceLimits {
    /// Best sequential direct-IO write bandwidth over block sizes and
    /// depths, on a pre-written file.
    pub seq_write: f64,
    /// The first sequential pass (1 MiB blocks, 1 writer, final fdatasync
    /// included) over a freshly created, never written file.
    pub seq_write_fresh: f64,
    /// 4 KiB random direct-IO reads, `threads` threads, one read at a time each.
    pub rand_read_4k: f64,
    /// CPU time this process spent per read of the `rand_read_4k` point,
    /// in microseconds (system calls, the kernel's IO path, wake-ups):
    /// what a point read costs before any engine work.
    pub rand_read_4k_cpu_us: f64,
    /// 4 KiB random direct-IO reads at a high queue depth (64 threads).
    pub rand_read_4k_qd: f64,
    /// Sequential direct-IO reads: the best point over 64 KiB .. 4 MiB
    /// blocks and 1 or 4 readers.
    pub seq_read: f64,
    /// fdatasync calls per second, each after a 4 KiB buffered append.
    pub fdatasync_per_sec: f64,
    /// fdatasync calls per second, each after a 4 KiB buffered write over
    /// a pre-written, synced file (no size or allocation to commit).
    pub fdatasync_overwrite_per_sec: f64,
    /// Every probe point: (name, block bytes, threads/depth, bytes/s).
    pub points: Vec<(String, usize, usize, f64)>,
    /// fio's figures for the same probes, where fio is installed: (name, bytes/s).
    pub fio: Vec<(String, f64)>,
    /// Whether the probes used O_DIRECT (false: buffered fallback, see `note`).
    pub direct_io: bool,
    /// Size of the probe file actually used, bytes.
    pub file_bytes: u64,
    /// `threads` the probe ran with.
    pub threads: usize,
    /// Caveats: buffered fallback, probes skipped, fio failures.
    pub note: Option<String>,
}

impl DeviceLimits {
    fn add_note(&mut self, s: impl Into<String>) {
        let s = s.into();
        match &mut self.note {
            Some(n) => {
                n.push_str("; ");
                n.push_str(&s);
            }
            None => self.note = Some(s),
        }
    }

    fn push(&mut self, name: &str, block: usize, threads: usize, rate: f64) {
        self.points.push((name.to_string(), block, threads, rate));
    }

    /// The best point named `name`, if any.
    fn best(&self, name: &str) -> Option<&(String, usize, usize, f64)> {
        self.points
            .iter()
            .filter(|p| {
                p.0 == name
                    || p.0
                        .strip_prefix(name)
                        .is_some_and(|rest| rest == format!(" {HUGE_SUFFIX}"))
            })
            .max_by(|a, b| a.3.total_cmp(&b.3))
    }
}

/// Measures the device limits of the file system holding `dir`. `dir` must
/// exist; the probe files are created in it and removed before returning.
pub fn probe(dir: &Path, opts: &ProbeOptions) -> BenchResult<DeviceLimits> {
    if opts.file_bytes < MIN_FILE_BYTES {
        return Err(format!(
            "device probe: file_bytes {} is below the minimum of {} MiB",
            opts.file_bytes,
            MIN_FILE_BYTES >> 20
        )
        .into());
    }
    if !(opts.secs_per_point > 0.0 && opts.secs_per_point.is_finite()) {
        return Err(format!(
            "device probe: secs_per_point must be > 0, got {}",
            opts.secs_per_point
        )
        .into());
    }
    let threads = opts.threads.max(1);
    let secs = opts.secs_per_point;
    let len = opts.file_bytes / FILE_GRAIN * FILE_GRAIN;
    let mut files = Cleanup::new(dir);
    let mut out = DeviceLimits {
        file_bytes: len,
        threads,
        ..DeviceLimits::default()
    };

    // Does O_DIRECT work here?
    let check = files.path("check");
    let direct = match direct_io_works(&check).map_err(ctx("O_DIRECT check"))? {
        Ok(()) => true,
        Err(why) => {
            out.add_note(format!(
                "O_DIRECT unsupported ({why}); all probes use buffered IO, so read \
                 figures are page-cache figures and writes are timed up to fdatasync"
            ));
            false
        }
    };
    files.remove(&check);
    out.direct_io = direct;

    // 1a. Fallocated file: direct writes into unwritten extents.
    let falloc = files.path("fallocated");
    {
        let file = open(&falloc, direct, true).map_err(ctx("create fallocated file"))?;
        match fallocate(&file, len) {
            Ok(()) => {
                let rate = write_pass(&file, len).map_err(ctx("fallocated pass"))?;
                out.push("write-fallocated", MIB, 1, rate);
            }
            Err(e) => out.add_note(format!(
                "fallocate unsupported ({e}); no write-fallocated point"
            )),
        }
    }
    files.remove(&falloc);
    settle(dir);

    // 1b. Fresh file: the first pass, which also pre-writes the probe file.
    let main = files.path("main");
    let file = open(&main, direct, true).map_err(ctx("create probe file"))?;
    out.seq_write_fresh = write_pass(&file, len).map_err(ctx("fresh pass"))?;
    out.push("write-fresh", MIB, 1, out.seq_write_fresh);

    // 2. Sequential overwrites, then 3. sequential reads: 4 KiB pages at
    // every block, huge pages at the large ones.
    for (dir, name) in [(Dir::Write, "seq-write"), (Dir::Read, "seq-read")] {
        let points = SEQ_BLOCKS
            .iter()
            .map(|&b| (b, Pages::Small))
            .chain(HUGE_BLOCKS.iter().map(|&b| (b, Pages::Huge)));
        for (block, pages) in points {
            for &t in &SEQ_THREADS {
                let rate = seq_points(&file, len, block, t, secs, dir, pages).map_err(ctx(name))?;
                let label = match pages {
                    Pages::Small => name.to_string(),
                    Pages::Huge => format!("{name} {HUGE_SUFFIX}"),
                };
                out.push(&label, block, t, rate);
                let best = match dir {
                    Dir::Write => &mut out.seq_write,
                    Dir::Read => &mut out.seq_read,
                };
                *best = best.max(rate);
            }
        }
    }

    // 4. Random reads.
    let (cpu, at) = (super::monitor::process_cpu_ns(), Instant::now());
    out.rand_read_4k =
        rand_reads(&file, len, 4 * KIB, threads, secs).map_err(ctx("random read"))?;
    let reads = out.rand_read_4k * at.elapsed().as_secs_f64() / (4 * KIB) as f64;
    if reads >= 1.0 {
        let cpu_ns = super::monitor::process_cpu_ns().saturating_sub(cpu);
        out.rand_read_4k_cpu_us = cpu_ns as f64 / 1e3 / reads;
    }
    out.push("rand-read", 4 * KIB, threads, out.rand_read_4k);
    out.rand_read_4k_qd =
        rand_reads(&file, len, 4 * KIB, QD_THREADS, secs).map_err(ctx("random read"))?;
    out.push("rand-read", 4 * KIB, QD_THREADS, out.rand_read_4k_qd);
    for &block in &RAND_READ_EXTRA_BLOCKS {
        let rate = rand_reads(&file, len, block, threads, secs).map_err(ctx("random read"))?;
        out.push("rand-read", block, threads, rate);
    }
    drop(file);

    // 5. Append + fdatasync, buffered (headline) and direct. Run before the
    // probe file is deleted: on a `discard` mount the journal commit after a
    // large unlink may carry its discards into the first fdatasyncs.
    let sync = files.path("sync");
    let syncs = sync_rate(&sync, false, false, secs, SYNC_MAX_BYTES.min(len))
        .map_err(ctx("fdatasync probe"))?;
    files.remove(&sync);
    settle(dir);
    out.fdatasync_per_sec = syncs;
    out.push(
        "append+fdatasync buffered",
        SYNC_BLOCK,
        1,
        syncs * SYNC_BLOCK as f64,
    );
    if direct {
        let syncs = sync_rate(&sync, true, false, secs, SYNC_MAX_BYTES.min(len))
            .map_err(ctx("fdatasync probe"))?;
        files.remove(&sync);
        out.push(
            "append+fdatasync direct",
            SYNC_BLOCK,
            1,
            syncs * SYNC_BLOCK as f64,
        );
    }
    let syncs = sync_rate(&sync, false, true, secs, SYNC_MAX_BYTES.min(len))
        .map_err(ctx("fdatasync probe"))?;
    files.remove(&sync);
    settle(dir);
    out.fdatasync_overwrite_per_sec = syncs;
    out.push(
        "overwrite+fdatasync buffered",
        SYNC_BLOCK,
        1,
        syncs * SYNC_BLOCK as f64,
    );

    // 6. fio cross-check, over the probe file.
    match run_fio(&main, len, direct, threads, secs) {
        Ok(v) => out.fio = v,
        Err(e) => out.add_note(format!("fio failed: {e}")),
    }
    files.remove(&main);
    // Let the unlink's commit (and discards) finish before the caller's
    // workloads start timing.
    settle(dir);
    Ok(out)
}

/// Prints the probe points and the headline limits.
pub fn print(limits: &DeviceLimits) {
    let mb = |b: f64| b / 1e6;
    println!(
        "Device limits ({}, 4096-aligned buffers, probe file {} MiB, {} threads)",
        if limits.direct_io {
            "O_DIRECT"
        } else {
            "BUFFERED IO"
        },
        limits.file_bytes >> 20,
        limits.threads
    );
    println!(
        "  {:<27} {:>8} {:>4} {:>10} {:>10}",
        "probe", "block", "thr", "MB/s", "IOPS"
    );
    for (name, block, threads, rate) in &limits.points {
        println!(
            "  {:<27} {:>8} {:>4} {:>10.1} {:>10.0}",
            name,
            size_str(*block),
            threads,
            mb(*rate),
            rate / (*block).max(1) as f64
        );
    }
    let which = |name: &str| match limits.best(name) {
        Some((point, b, t, _)) => format!("best {name} point: {point} {} x {t}", size_str(*b)),
        None => "no point".to_string(),
    };
    println!("Headline limits:");
    println!(
        "  {:<18} {:>10.1} MB/s  ({}; over the pre-written file, fdatasync at end of each point)",
        "seq_write",
        mb(limits.seq_write),
        which("seq-write")
    );
    println!(
        "  {:<18} {:>10.1} MB/s  (write-fresh: first 1 MiB x 1 pass over a new file, incl. fdatasync)",
        "seq_write_fresh",
        mb(limits.seq_write_fresh)
    );
    println!(
        "  {:<18} {:>10.1} MB/s  (rand-read 4 KiB x {}, one read at a time each; {:.0} IOPS; {:.1} µs of CPU per read)",
        "rand_read_4k",
        mb(limits.rand_read_4k),
        limits.threads,
        limits.rand_read_4k / 4096.0,
        limits.rand_read_4k_cpu_us
    );
    println!(
        "  {:<18} {:>10.1} MB/s  (rand-read 4 KiB x {QD_THREADS} threads; {:.0} IOPS)",
        "rand_read_4k_qd",
        mb(limits.rand_read_4k_qd),
        limits.rand_read_4k_qd / 4096.0
    );
    println!(
        "  {:<18} {:>10.1} MB/s  ({})",
        "seq_read",
        mb(limits.seq_read),
        which("seq-read")
    );
    println!(
        "  {:<18} {:>10.0} /s    (append+fdatasync buffered: 4 KiB buffered append, then fdatasync)",
        "fdatasync_per_sec", limits.fdatasync_per_sec
    );
    println!(
        "  {:<18} {:>10.0} /s    (overwrite+fdatasync buffered: 4 KiB over a pre-written file, then fdatasync)",
        "fdatasync_overwrite", limits.fdatasync_overwrite_per_sec
    );
    if let Some(f) = limits.best("write-fallocated") {
        println!(
            "  unwritten-extent tax: write-fallocated {:.1} MB/s vs write-fresh {:.1} MB/s vs seq-write 1 MiB x 1 {:.1} MB/s",
            mb(f.3),
            mb(limits.seq_write_fresh),
            limits
                .points
                .iter()
                .find(|p| p.0 == "seq-write" && p.1 == MIB && p.2 == 1)
                .map_or(0.0, |p| mb(p.3))
        );
    }
    if !limits.fio.is_empty() {
        println!("fio cross-check (psync, same probe file):");
        for (name, rate) in &limits.fio {
            println!("  {:<27} {:>10.1} MB/s", name, mb(*rate));
        }
    }
    if let Some(n) = &limits.note {
        println!("note: {n}");
    }
}

fn size_str(b: usize) -> String {
    if b >= MIB && b.is_multiple_of(MIB) {
        format!("{} MiB", b / MIB)
    } else if b >= KIB && b.is_multiple_of(KIB) {
        format!("{} KiB", b / KIB)
    } else {
        format!("{b} B")
    }
}

/// Maps an IO error to a bench error naming the probe.
fn ctx(what: &'static str) -> impl FnOnce(io::Error) -> super::BenchError {
    move |e| format!("device probe: {what}: {e}").into()
}

/// Commits the removal of a probe file (fsync of the directory), so that
/// its journal commit, and on a `discard` mount the discards, do not land
/// inside the next timed probe. Best effort.
fn settle(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Probe files in the scratch directory, removed on drop.
struct Cleanup {
    dir: PathBuf,
    paths: Vec<PathBuf>,
}

impl Cleanup {
    fn new(dir: &Path) -> Self {
        Cleanup {
            dir: dir.to_path_buf(),
            paths: Vec::new(),
        }
    }

    /// A path for a probe file, tracked for removal.
    fn path(&mut self, name: &str) -> PathBuf {
        let p = self
            .dir
            .join(format!("cairn-probe-{}-{name}.dat", std::process::id()));
        if !self.paths.contains(&p) {
            self.paths.push(p.clone());
        }
        p
    }

    /// Removes a probe file now, to free its space (errors ignored; the
    /// drop tries again).
    fn remove(&self, p: &Path) {
        let _ = fs::remove_file(p);
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
    }
}

/// A buffer aligned to `ALIGN`, as O_DIRECT requires, filled with a
/// pattern: an anonymous mapping of its own (fresh pages, page-aligned);
/// made with `Pages::Huge`, aligned to a huge page and advised to be backed
/// by transparent huge pages, as the engine's scan buffers are.
struct AlignedBuf {
    mem: memmap2::MmapMut,
    /// Where the aligned bytes start in `mem`.
    skip: usize,
    len: usize,
}

/// A transparent huge page (x86-64 and most arm64 kernels).
const HUGE_PAGE: usize = 2 << 20;

impl AlignedBuf {
    /// `len` bytes (at least `ALIGN`), filled with a pseudo-random pattern
    /// so that no layer below can compress or deduplicate it away.
    fn new(len: usize, seed: u64) -> io::Result<Self> {
        Self::with_pages(len, seed, Pages::Small)
    }

    /// `new`, in huge pages if `pages` says so.
    fn with_pages(len: usize, seed: u64, pages: Pages) -> io::Result<Self> {
        let len = len.max(ALIGN);
        // A mapping is page-aligned (ALIGN); huge pages need more.
        let extra = if pages == Pages::Huge { HUGE_PAGE } else { 0 };
        let mem = memmap2::MmapOptions::new().len(len + extra).map_anon()?;
        let skip = if pages == Pages::Huge {
            let skip = mem.as_ptr().align_offset(HUGE_PAGE).min(extra);
            // Before the first touch, so the fill's faults take huge pages.
            // A kernel without transparent huge pages refuses the advice:
            // the point then runs from small pages, as the engine's scan
            // buffers would.
            let _ = mem.advise_range(memmap2::Advice::HugePage, skip, len);
            skip
        } else {
            0
        };
        let mut buf = AlignedBuf { mem, skip, len };
        let mut rng = SplitMix(seed);
        for chunk in buf.as_mut_slice().chunks_mut(8) {
            let x = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
        Ok(buf)
    }

    fn as_slice(&self) -> &[u8] {
        &self.mem[self.skip..self.skip + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.mem[self.skip..self.skip + self.len]
    }
}

/// The pages behind a probe's buffers. A direct request from 4 KiB pages
/// reaches the device as one segment per page (this virtual disk takes
/// at most 254 per request, so a 4 MiB read becomes five requests); from
/// huge pages, as a few large segments (one request). Which the device
/// serves faster differs with depth and disk, and the engine's scans read
/// into huge pages (`read::share::Chunk`), so the sequential probes try
/// both and the limit is the best of them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pages {
    Small,
    Huge,
}

/// splitmix64: offsets and buffer patterns; no need for a crypto RNG.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn open(path: &Path, direct: bool, create: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if create {
        o.create(true).truncate(true);
    }
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// `Ok(Err(why))` if O_DIRECT open, write or read is refused with EINVAL
/// (the file system does not support it); other IO errors are errors.
fn direct_io_works(path: &Path) -> io::Result<Result<(), String>> {
    let einval = |e: &io::Error| e.raw_os_error() == Some(libc::EINVAL);
    let file = match open(path, true, true) {
        Ok(f) => f,
        Err(e) if einval(&e) => return Ok(Err(format!("open: {e}"))),
        Err(e) => return Err(e),
    };
    let mut buf = AlignedBuf::new(ALIGN, 1)?;
    match file.write_all_at(buf.as_slice(), 0) {
        Err(e) if einval(&e) => return Ok(Err(format!("write: {e}"))),
        r => r?,
    }
    match file.read_exact_at(buf.as_mut_slice(), 0) {
        Err(e) if einval(&e) => return Ok(Err(format!("read: {e}"))),
        r => r?,
    }
    Ok(Ok(()))
}

fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(io::Error::other)?;
    // SAFETY: the descriptor is open (owned by `file`, borrowed for the
    // call) and fallocate takes no pointers.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One sequential pass of 1 MiB writes over `[0, len)`, then fdatasync;
/// bytes/s including the sync.
fn write_pass(file: &File, len: u64) -> io::Result<f64> {
    let buf = AlignedBuf::new(MIB, 7)?;
    let start = Instant::now();
    let mut off = 0;
    while off < len {
        file.write_all_at(buf.as_slice(), off)?;
        off += MIB as u64;
    }
    file.sync_data()?;
    Ok(len as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Runs `threads` workers until `secs` have passed; worker `i` gets
/// `(i, deadline)` and returns the bytes it moved. `finish` runs after the
/// workers, inside the timed interval. Returns bytes/s.
fn run_timed<W, F>(threads: usize, secs: f64, work: W, finish: F) -> io::Result<f64>
where
    W: Fn(usize, Instant) -> io::Result<u64> + Sync,
    F: FnOnce() -> io::Result<()>,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let results: Vec<std::thread::Result<io::Result<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let w = &work;
                s.spawn(move || w(i, deadline))
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let mut total = 0u64;
    for r in results {
        match r {
            Ok(Ok(b)) => total += b,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("probe thread panicked")),
        }
    }
    finish()?;
    Ok(total as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

#[derive(Clone, Copy, PartialEq)]
enum Dir {
    Read,
    Write,
}

/// Reads `files` whole with direct IO, `block` bytes per request, by
/// `threads` readers taking the files in turn; returns bytes read per
/// second. For setting a scan beside the device reading the very bytes the
/// scan read, at nearly the same moment: this VM's disk serves data read
/// or written a short while ago far faster than the rest, and the probe's points read their file
/// over and over. Into huge pages, as the engine's scans read (`Pages`).
pub fn read_files_direct(files: &[PathBuf], block: usize, threads: usize) -> io::Result<f64> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    let reader = |seed: u64| -> io::Result<u64> {
        let mut buf = AlignedBuf::with_pages(block, seed, Pages::Huge)?;
        let mut bytes = 0u64;
        while let Some(path) = files.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)?;
            let mut at = 0u64;
            loop {
                let n = file.read_at(buf.as_mut_slice(), at)?;
                bytes += n as u64;
                at += n as u64;
                if n < block {
                    break;
                }
            }
        }
        Ok(bytes)
    };
    let total = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|i| {
                let reader = &reader;
                s.spawn(move || reader(11 + i as u64))
            })
            .collect();
        let mut total = 0u64;
        for h in handles {
            total += h
                .join()
                .map_err(|_| io::Error::other("reader thread panicked"))??;
        }
        Ok::<u64, io::Error>(total)
    })?;
    Ok(total as f64 / start.elapsed().as_secs_f64().max(1e-9))
}

/// Sequential IO of `block` bytes: `threads` workers, each looping over its
/// own disjoint region of the file. Writes end with an fdatasync.
fn seq_points(
    file: &File,
    len: u64,
    block: usize,
    threads: usize,
    secs: f64,
    dir: Dir,
    pages: Pages,
) -> io::Result<f64> {
    let region = len / threads as u64 / block as u64 * block as u64;
    let blocks = region / block as u64;
    if blocks == 0 {
        return Err(io::Error::other("probe file too small for the block size"));
    }
    let work = |i: usize, deadline: Instant| -> io::Result<u64> {
        let mut buf = AlignedBuf::with_pages(block, 100 + i as u64, pages)?;
        let base = region * i as u64;
        let (mut k, mut bytes) = (0u64, 0u64);
        loop {
            let off = base + k * block as u64;
            match dir {
                Dir::Write => file.write_all_at(buf.as_slice(), off)?,
                Dir::Read => file.read_exact_at(buf.as_mut_slice(), off)?,
            }
            bytes += block as u64;
            k = (k + 1) % blocks;
            if Instant::now() >= deadline {
                return Ok(bytes);
            }
        }
    };
    let finish = || match dir {
        Dir::Write => file.sync_data(),
        Dir::Read => Ok(()),
    };
    run_timed(threads, secs, work, finish)
}

/// Uniform random reads of `block` bytes at block-aligned offsets,
/// `threads` workers each with one read in flight.
fn rand_reads(file: &File, len: u64, block: usize, threads: usize, secs: f64) -> io::Result<f64> {
    let blocks = len / block as u64;
    let work = |i: usize, deadline: Instant| -> io::Result<u64> {
        let mut buf = AlignedBuf::new(block, 0)?;
        let mut rng = SplitMix(0x5eed ^ ((i as u64) << 32) ^ block as u64);
        let mut bytes = 0u64;
        loop {
            let off = rng.next_u64() % blocks * block as u64;
            file.read_exact_at(buf.as_mut_slice(), off)?;
            bytes += block as u64;
            if Instant::now() >= deadline {
                return Ok(bytes);
            }
        }
    };
    run_timed(threads, secs, work, || Ok(()))
}

/// 4 KiB writes to a new file, each followed by fdatasync, for `secs` (or
/// until `max_bytes`); returns fdatasyncs per second. With `overwrite` the
/// file is first written to `max_bytes` and synced (untimed), so the timed
/// writes land on allocated blocks inside the file's size.
fn sync_rate(
    path: &Path,
    direct: bool,
    overwrite: bool,
    secs: f64,
    max_bytes: u64,
) -> io::Result<f64> {
    let file = open(path, direct, true)?;
    if overwrite {
        prefill(&file, max_bytes)?;
    }
    let (n, took) = timed_syncs(&file, secs, max_bytes)?;
    Ok(n as f64 / took)
}

/// Writes `[0, len)` of `file` and syncs it, size included.
fn prefill(file: &File, len: u64) -> io::Result<()> {
    let fill = AlignedBuf::new(MIB, 5)?;
    let mut at = 0;
    while at < len {
        file.write_all_at(fill.as_slice(), at)?;
        at += MIB as u64;
    }
    file.sync_all()
}

/// Writes of 1 MiB by the writer of [`sync_rate_beside`].
const BESIDE_BLOCK: usize = MIB;
/// The writer of [`sync_rate_beside`] wraps around after this many bytes.
const BESIDE_MAX_BYTES: u64 = 256 * MIB as u64;

/// The device's rate of 4 KiB overwrites + fdatasync (as
/// `fdatasync_overwrite_per_sec`) over `secs`, measured while a second
/// thread writes another file sequentially at `beside` bytes/s, in 1 MiB
/// writes (direct IO where it works, else each followed by fdatasync):
/// the way a store's flushes and compactions write tables beside its
/// journal. Returns the fdatasyncs made, the seconds they took and the
/// writer's achieved bytes/s.
pub fn sync_rate_beside(dir: &Path, beside: f64, secs: f64) -> io::Result<(u64, f64, f64)> {
    let mut files = Cleanup::new(dir);
    let sync_path = files.path("beside-sync");
    let file = open(&sync_path, false, true)?;
    prefill(&file, SYNC_MAX_BYTES)?;
    let bg_path = files.path("beside-writes");
    let direct = direct_io_works(&bg_path)?.is_ok();
    let bg = open(&bg_path, direct, true)?;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (syncs, written) = std::thread::scope(|s| {
        let writer = s.spawn(|| -> io::Result<u64> {
            let buf = AlignedBuf::new(BESIDE_BLOCK, 9)?;
            let start = Instant::now();
            let mut written = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(written as f64 / beside.max(1.0));
                let now = Instant::now();
                if due > now {
                    std::thread::sleep((due - now).min(Duration::from_millis(50)));
                    continue;
                }
                bg.write_all_at(buf.as_slice(), written % BESIDE_MAX_BYTES)?;
                if !direct {
                    bg.sync_data()?;
                }
                written += BESIDE_BLOCK as u64;
            }
            Ok(written)
        });
        let syncs = timed_syncs(&file, secs, SYNC_MAX_BYTES);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("background writer panicked")));
        (syncs, written)
    });
    drop((file, bg));
    files.remove(&sync_path);
    files.remove(&bg_path);
    settle(dir);
    let (n, took) = syncs?;
    Ok((n, took, written? as f64 / took))
}

/// 4 KiB writes over `file` from offset 0, each followed by fdatasync,
/// for `secs` (or until `max_bytes`); the fdatasyncs made and the seconds
/// they took.
fn timed_syncs(file: &File, secs: f64, max_bytes: u64) -> io::Result<(u64, f64)> {
    let buf = AlignedBuf::new(SYNC_BLOCK, 3)?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let (mut off, mut n) = (0u64, 0u64);
    loop {
        file.write_all_at(buf.as_slice(), off)?;
        file.sync_data()?;
        off += SYNC_BLOCK as u64;
        n += 1;
        if Instant::now() >= deadline || off >= max_bytes {
            break;
        }
    }
    Ok((n, start.elapsed().as_secs_f64().max(1e-9)))
}

/// fio over the probe file: sequential 1 MiB write, random 4 KiB reads at
/// `threads` jobs, sequential 1 MiB read. Empty if fio is not installed.
fn run_fio(
    file: &Path,
    len: u64,
    direct: bool,
    threads: usize,
    secs: f64,
) -> Result<Vec<(String, f64)>, String> {
    match Command::new("fio").arg("--version").output() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("running fio: {e}")),
        Ok(_) => {}
    }
    // fio splits --filename on ':'.
    let filename = file.to_string_lossy().replace(':', "\\:");
    let runtime_ms = ((secs * 1000.0).round() as u64).max(1);
    let jobs: [(&str, &str, &str, usize); 3] = [
        ("seqwrite-1m", "write", "1M", 1),
        ("randread-4k", "randread", "4k", threads),
        ("read-1m", "read", "1M", 1),
    ];
    let mut out = Vec::new();
    for (name, rw, bs, numjobs) in jobs {
        let mut cmd = Command::new("fio");
        cmd.arg("--name=cairn-probe")
            .arg(format!("--filename={filename}"))
            .arg(format!("--direct={}", u8::from(direct)))
            .arg("--ioengine=psync")
            .arg(format!("--rw={rw}"))
            .arg(format!("--bs={bs}"))
            .arg(format!("--numjobs={numjobs}"))
            .arg(format!("--size={len}"))
            .arg(format!("--runtime={runtime_ms}ms"))
            .arg("--time_based")
            .arg("--group_reporting")
            .arg("--output-format=json");
        if rw == "write" {
            cmd.arg("--end_fsync=1");
        }
        let o = cmd.output().map_err(|e| format!("running fio: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "fio {name} exited with {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        let rate = parse_fio_bw(&String::from_utf8_lossy(&o.stdout))
            .ok_or_else(|| format!("fio {name}: no bandwidth in its JSON output"))?;
        out.push((format!("{name} x{numjobs}"), rate));
    }
    Ok(out)
}

/// Sum of read and write `bw_bytes` over the jobs of fio's JSON output
/// (which may follow non-JSON lines).
fn parse_fio_bw(stdout: &str) -> Option<f64> {
    let json = &stdout[stdout.find('{')?..];
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let jobs = v.get("jobs")?.as_array()?;
    let mut total = 0.0;
    for job in jobs {
        for dir in ["read", "write"] {
            total += job
                .get(dir)
                .and_then(|d| d.get("bw_bytes"))
                .and_then(|b| b.as_f64())
                .unwrap_or(0.0);
        }
    }
    (total > 0.0).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// Small and quick by default; CAIRN_PROBE_BYTES / CAIRN_PROBE_SECS /
    /// CAIRN_PROBE_THREADS (and `--nocapture`) for a real measurement.
    #[test]
    fn device_probe_runs_and_cleans_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = ProbeOptions {
            threads: env_or("CAIRN_PROBE_THREADS", 4),
            file_bytes: env_or("CAIRN_PROBE_BYTES", 64 << 20),
            secs_per_point: env_or("CAIRN_PROBE_SECS", 0.2),
        };
        let limits = probe(dir.path(), &opts).expect("probe");
        print(&limits);
        for (name, v) in [
            ("seq_write", limits.seq_write),
            ("seq_write_fresh", limits.seq_write_fresh),
            ("rand_read_4k", limits.rand_read_4k),
            ("rand_read_4k_qd", limits.rand_read_4k_qd),
            ("seq_read", limits.seq_read),
            ("fdatasync_per_sec", limits.fdatasync_per_sec),
            (
                "fdatasync_overwrite_per_sec",
                limits.fdatasync_overwrite_per_sec,
            ),
        ] {
            assert!(v > 0.0, "{name} = {v}");
        }
        assert!(!limits.points.is_empty());
        let left: Vec<_> = fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .expect("dir entry");
        assert!(left.is_empty(), "probe files left behind: {left:?}");
    }

    #[test]
    fn device_probe_rejects_small_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = ProbeOptions {
            file_bytes: 1 << 20,
            ..ProbeOptions::default()
        };
        assert!(probe(dir.path(), &opts).is_err());
    }

    #[test]
    fn device_fio_json_parse() {
        let s = "note: x\n{\"jobs\":[{\"read\":{\"bw_bytes\":100},\"write\":{\"bw_bytes\":0}},\
                 {\"read\":{\"bw_bytes\":50},\"write\":{\"bw_bytes\":0}}]}";
        assert_eq!(parse_fio_bw(s), Some(150.0));
        assert_eq!(parse_fio_bw("garbage"), None);
    }
}
