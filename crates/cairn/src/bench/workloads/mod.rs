//! Workloads and what they share: self-verifying values, the phase runner
//! (monitor + row), key generators.
//!
//! Every value a workload writes can be checked when read back without
//! remembering it: it carries the key's index and a CRC-32C of itself
//! (`make_value` / `check_value`). A read that fails the check, a missing
//! key that must exist, or a scan out of order turns the phase into a FAIL
//! row instead of a figure.

pub mod checkpoint;
pub mod contest;
pub mod dbbench;
pub mod follower;
pub mod keyspaces;
#[cfg(feature = "replicated")]
pub mod replicated;
pub mod synctx;
pub mod txn_scaling;
pub mod ycsb;

use super::engine::{self, Engine, EngineConfig};
use super::monitor::{self, Monitor, Sample};
use super::{BenchResult, Progress, Row};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Longest `Ctx::measure_disk` waits for a directory to stop changing.
const DISK_SETTLE_MAX: Duration = Duration::from_secs(5);
/// How long a directory's size must hold for `Ctx::measure_disk`.
const DISK_STILL: Duration = Duration::from_secs(1);

/// Everything a workload needs to run phases on one engine.
pub struct Ctx {
    /// Engine name, as `engine::open` takes it.
    pub engine_name: String,
    pub engine_cfg: EngineConfig,
    /// The open database (`None` between `fresh`/`reopen` steps).
    engine: Option<Arc<dyn Engine>>,
    /// Scratch directory of this engine; databases live in subdirectories.
    pub root: PathBuf,
    /// Directory of the current database.
    pub dir: PathBuf,
    generation: u32,
    /// Whether dropping this context deletes `root`.
    owns_root: bool,
    pub progress: Arc<Progress>,
    pub disk: Option<String>,
    pub quiet: bool,
    /// Rows and timelines produced so far.
    pub rows: Vec<Row>,
    pub timelines: Vec<(String, Vec<Sample>)>,
}

/// What a phase reports back to the runner.
#[derive(Debug, Default)]
pub struct Outcome {
    pub ops: u64,
    /// User bytes moved (read or written).
    pub user_bytes: u64,
    /// User bytes written (for write amplification), if the phase writes.
    pub written_bytes: u64,
    pub failure: Option<String>,
    pub latency_us: Option<(f64, f64)>,
    /// A remark for the row (`Row::note`).
    pub note: Option<String>,
    /// Add the device bytes read per user byte to the note (read
    /// phases: 1.0 means each byte the phase counts came from the device
    /// once; shared scans and the page cache bring it below the number of
    /// scanners).
    pub note_device_reads: bool,
}

impl Ctx {
    pub fn new(
        engine_name: &str,
        engine_cfg: EngineConfig,
        root: PathBuf,
        disk: Option<String>,
        quiet: bool,
    ) -> Self {
        Ctx {
            engine_name: engine_name.to_owned(),
            engine_cfg,
            engine: None,
            dir: root.join("db0"),
            root,
            generation: 0,
            owns_root: true,
            progress: Arc::new(Progress::default()),
            disk,
            quiet,
            rows: Vec::new(),
            timelines: Vec::new(),
        }
    }

    /// A context on the existing database at `dir`, opened now; dropping it
    /// leaves the files (for a child process working on its parent's data).
    pub fn attach(
        engine_name: &str,
        engine_cfg: EngineConfig,
        dir: PathBuf,
        disk: Option<String>,
        quiet: bool,
    ) -> BenchResult<Self> {
        let mut ctx = Ctx::new(engine_name, engine_cfg, dir.clone(), disk, quiet);
        ctx.owns_root = false;
        ctx.dir = dir;
        ctx.reopen()?;
        Ok(ctx)
    }

    /// The open engine.
    pub fn db(&self) -> BenchResult<Arc<dyn Engine>> {
        self.engine
            .clone()
            .ok_or_else(|| "no database is open".into())
    }

    /// Closes and deletes the current database and opens an empty one.
    pub fn fresh(&mut self) -> BenchResult<()> {
        self.next_dir();
        self.engine = Some(Arc::from(engine::open(
            &self.engine_name,
            &self.dir,
            &self.engine_cfg,
        )?));
        Ok(())
    }

    /// Closes and deletes the current database and moves to a new, empty
    /// directory without opening it (for a child process to create the
    /// database there).
    pub fn next_dir(&mut self) -> &std::path::Path {
        self.engine = None;
        let _ = std::fs::remove_dir_all(&self.dir);
        self.generation += 1;
        self.dir = self.root.join(format!("db{}", self.generation));
        &self.dir
    }

    /// Closes the current database and opens it again.
    pub fn reopen(&mut self) -> BenchResult<()> {
        self.engine = None;
        self.engine = Some(Arc::from(engine::open(
            &self.engine_name,
            &self.dir,
            &self.engine_cfg,
        )?));
        Ok(())
    }

    /// Closes the current database (its files stay).
    pub fn close(&mut self) {
        self.engine = None;
    }

    /// Flushes, then records bytes on disk / `live_bytes` as the space
    /// amplification of the last row.
    pub fn flush_and_measure_space(&mut self, live_bytes: u64) -> BenchResult<()> {
        self.db()?.flush()?;
        let disk = monitor::dir_bytes(&self.dir);
        if let Some(row) = self.rows.last_mut() {
            row.space_amp = Some(disk as f64 / live_bytes.max(1) as f64);
        }
        Ok(())
    }

    /// Records in the last row what the database directory takes on
    /// disk, once it has kept the same size for `DISK_STILL` (an engine
    /// may delete the files a flush or compaction made obsolete after
    /// the call returned; waits at most `DISK_SETTLE_MAX`), and that
    /// over `live_bytes` as the row's space amplification. The caller
    /// flushes or compacts first.
    pub fn measure_disk(&mut self, live_bytes: u64) {
        let deadline = Instant::now() + DISK_SETTLE_MAX;
        let mut usage = monitor::dir_usage(&self.dir);
        let mut since = Instant::now();
        while Instant::now() < deadline && since.elapsed() < DISK_STILL {
            std::thread::sleep(Duration::from_millis(200));
            let now = monitor::dir_usage(&self.dir);
            if now != usage {
                since = Instant::now();
            }
            usage = now;
        }
        if let Some(row) = self.rows.last_mut() {
            row.disk = Some(usage);
            row.space_amp = Some(usage.bytes as f64 / live_bytes.max(1) as f64);
        }
    }

    /// Runs one phase under the monitor and records its row.
    pub fn phase(
        &mut self,
        workload: &str,
        phase: &str,
        unit: &'static str,
        limit: Option<(String, f64)>,
        f: impl FnOnce(&Arc<dyn Engine>, &Arc<Progress>) -> BenchResult<Outcome>,
    ) -> &Row {
        // A limit of 0 was not measured (`--no-device`): no ratio then.
        let limit = limit.filter(|(_, l)| *l > 0.0);
        let name = self
            .engine
            .as_ref()
            .map_or(self.engine_name.as_str(), |e| e.name());
        let label = format!("{name}/{workload}/{phase}");
        self.progress.reset();
        let monitor = Monitor::start(&label, self.progress.clone(), self.disk.clone(), self.quiet);
        let start = Instant::now();
        let outcome = match self.db() {
            Ok(db) => f(&db, &self.progress),
            Err(e) => Err(e),
        };
        let outcome = outcome.unwrap_or_else(|e| Outcome {
            failure: Some(format!("error: {e}")),
            ..Outcome::default()
        });
        let secs = start.elapsed().as_secs_f64();
        if outcome.written_bytes > 0 {
            // Count the phase's writeback in its device bytes (not in its
            // time): otherwise short phases leave their writes in the page
            // cache and show no amplification at all.
            // SAFETY: sync(2) takes no arguments and cannot fail.
            unsafe { libc::sync() };
        }
        let stats = monitor.stop();
        let write_amp = (outcome.written_bytes > 0 && self.disk.is_some())
            .then(|| stats.disk_write_bytes as f64 / outcome.written_bytes as f64);
        let mut note = outcome.note;
        if outcome.note_device_reads && self.disk.is_some() && outcome.user_bytes > 0 {
            let mut reads = format!(
                "device read {:.2}x the data",
                stats.disk_read_bytes as f64 / outcome.user_bytes as f64
            );
            // How much of the phase the device had nothing to do: a
            // read-bound phase below the device's rate with the device
            // idle part of the time is waiting on its own reads.
            if stats.wall_secs > 0.0 {
                reads.push_str(&format!(
                    ", device busy {:.0} % of the phase",
                    100.0 * (stats.disk_busy_secs / stats.wall_secs).min(1.0)
                ));
            }
            note = Some(match note {
                Some(n) => format!("{n}; {reads}"),
                None => reads,
            });
        }
        self.rows.push(Row {
            engine: self.engine_name.clone(),
            workload: workload.to_owned(),
            phase: phase.to_owned(),
            ops: outcome.ops,
            secs,
            user_bytes: outcome.user_bytes,
            failure: outcome.failure,
            limit,
            write_amp,
            space_amp: None,
            disk: None,
            peak_rss: Some(stats.peak_rss),
            stalls: stats.stalled_seconds,
            latency_us: outcome.latency_us,
            unit,
            target: None,
            note,
            skipped: None,
            others_cpu: Some(stats.others_cpu),
            own_cpu_secs: Some(stats.own_cpu_secs),
        });
        self.timelines.push((label, stats.samples));
        let row = self.rows.last();
        row.expect("a row was just pushed")
    }

    /// Merges the rows recorded since row `from` that share a workload and
    /// phase into one row each, in order of first appearance, and their
    /// timelines into one each (end to end). For phases measured in
    /// interleaved slices, so that drift on a shared machine spreads over
    /// every phase instead of favouring the one that ran in a quiet
    /// moment. Operations, seconds, bytes and stalls add up, the peak RSS
    /// is the largest, write amplification is weighted by bytes, the first
    /// failure wins, the CPU others took is averaged over time and the
    /// process's own adds up; latency, limit, target and note are the
    /// first slice's (set them after merging).
    pub fn merge_since(&mut self, from: usize) {
        let slices = self.rows.split_off(from.min(self.rows.len()));
        let mut merged: Vec<Row> = Vec::new();
        for r in slices {
            let Some(m) = merged
                .iter_mut()
                .find(|m| m.workload == r.workload && m.phase == r.phase)
            else {
                merged.push(r);
                continue;
            };
            m.others_cpu = match (m.others_cpu, r.others_cpu) {
                (Some(a), Some(b)) => Some((a * m.secs + b * r.secs) / (m.secs + r.secs).max(1e-9)),
                (a, b) => a.or(b),
            };
            m.own_cpu_secs = match (m.own_cpu_secs, r.own_cpu_secs) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            m.write_amp = match (m.write_amp, r.write_amp) {
                (Some(a), Some(b)) => {
                    let (wa, wb) = (m.user_bytes as f64, r.user_bytes as f64);
                    Some((a * wa + b * wb) / (wa + wb).max(1.0))
                }
                (a, b) => a.or(b),
            };
            m.ops += r.ops;
            m.secs += r.secs;
            m.user_bytes += r.user_bytes;
            m.stalls += r.stalls;
            m.peak_rss = m.peak_rss.max(r.peak_rss);
            m.space_amp = r.space_amp.or(m.space_amp);
            m.disk = r.disk.or(m.disk);
            if m.failure.is_none() {
                m.failure = r.failure;
            }
        }
        let engine = self
            .engine
            .as_ref()
            .map_or(self.engine_name.as_str(), |e| e.name());
        let labels: Vec<String> = merged
            .iter()
            .map(|m| format!("{engine}/{}/{}", m.workload, m.phase))
            .collect();
        self.rows.append(&mut merged);
        for label in labels {
            let mut parts = Vec::new();
            self.timelines.retain_mut(|(l, samples)| {
                if *l == label {
                    parts.push(std::mem::take(samples));
                    false
                } else {
                    true
                }
            });
            let mut joined: Vec<Sample> = Vec::new();
            for part in parts {
                let offset = joined.last().map_or(0.0, |s| s.t);
                joined.extend(part.into_iter().map(|s| Sample {
                    t: s.t + offset,
                    ..s
                }));
            }
            self.timelines.push((label, joined));
        }
    }

    /// Records a row measured outside the engine (a device figure beside
    /// the engine's rows): `ops` in `secs`, against `limit`.
    pub fn measured(
        &mut self,
        workload: &str,
        phase: &str,
        (ops, secs): (u64, f64),
        limit: Option<(String, f64)>,
        note: String,
    ) {
        self.rows.push(Row {
            engine: self.engine_name.clone(),
            workload: workload.to_owned(),
            phase: phase.to_owned(),
            ops,
            secs,
            limit: limit.filter(|(_, l)| *l > 0.0),
            unit: "ops/s",
            note: Some(note),
            ..Row::default()
        });
    }

    /// Records that `phase` of `workload` did not run on this engine, and
    /// why (a SKIP row without figures).
    pub fn skip(&mut self, workload: &str, phase: &str, reason: &str) {
        self.rows.push(Row {
            engine: self.engine_name.clone(),
            workload: workload.to_owned(),
            phase: phase.to_owned(),
            skipped: Some(reason.to_owned()),
            unit: "ops/s",
            ..Row::default()
        });
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.engine = None;
        if self.owns_root {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Puts per batch of `spawn_writers`' writers.
pub const WRITER_BATCH: u64 = 16;

/// The writes `spawn_writers` makes.
pub struct WriterLoad {
    pub threads: usize,
    pub seed: u64,
    /// Lowest key index written.
    pub key_base: u64,
    pub value_len: usize,
}

/// Writers for a phase that times one call while writes go on:
/// `load.threads` threads, each committing unsynced batches of
/// `WRITER_BATCH` puts of random new keys (16 bytes, index at or above
/// `key_base`) with `value_len`-byte values through `write` until `stop`
/// is set, adding the puts to `written`.
pub fn spawn_writers<'scope, 'env>(
    s: &'scope std::thread::Scope<'scope, 'env>,
    load: &WriterLoad,
    stop: &'env AtomicBool,
    written: &'env std::sync::atomic::AtomicU64,
    write: &'env (dyn Fn(&[engine::BatchOp]) -> BenchResult<()> + Sync),
) -> Vec<std::thread::ScopedJoinHandle<'scope, BenchResult<()>>> {
    let &WriterLoad {
        threads,
        seed,
        key_base,
        value_len,
    } = load;
    (0..threads.max(1))
        .map(|t| {
            s.spawn(move || -> BenchResult<()> {
                let mut rng = Rng::new(seed ^ t as u64);
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<engine::BatchOp> = (0..WRITER_BATCH)
                        .map(|_| {
                            let k = key_base + rng.below(1 << 40);
                            (make_key(k, 16), Some(make_value(k, 0, value_len)))
                        })
                        .collect();
                    write(&batch)?;
                    written.fetch_add(WRITER_BATCH, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect()
}

/// Key `i` as a fixed-width big-endian integer padded to `len` bytes, so
/// key order is index order.
pub fn make_key(i: u64, len: usize) -> Vec<u8> {
    let mut k = vec![0u8; len.max(8)];
    let at = k.len() - 8;
    k[at..].copy_from_slice(&i.to_be_bytes());
    k.truncate(len.max(8));
    k
}

/// The index a key made by `make_key` encodes.
pub fn key_index(key: &[u8]) -> Option<u64> {
    let at = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key[at..].try_into().ok()?))
}

/// A value of `len` bytes (>= 16) for key index `i`, version `version`:
/// index (8) | version (4) | pseudo-random fill | CRC-32C of all before (4).
/// Fill bytes do not compress (`Fill::Random`).
pub fn make_value(i: u64, version: u32, len: usize) -> Vec<u8> {
    Fill::Random.value(i, version, len)
}

/// How a workload fills its values between the key stamp and the CRC
/// (`--compressible`). Either way a value is checked by `check_value`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Fill {
    /// Pseudo-random bytes that no compressor can shrink: every run
    /// before `--compressible` existed, and the workloads without it.
    #[default]
    Random,
    /// Values that compress to about `ratio` (in (0, 1]) of their length,
    /// db_bench's `compression_ratio` (0.5: 2:1). As db_bench builds its
    /// values, the fill is made of pieces of `FILL_PIECE` bytes, each a
    /// run of random bytes repeated to the piece's length, so that every
    /// repeat lies within any compressor's window and no value repeats
    /// another. Unlike db_bench's, which draws printable characters, the
    /// random bytes take all 256 values, so that Zstandard's entropy
    /// coding finds nothing LZ4 misses. The runs are long enough that the
    /// whole value holds about `ratio × len` bytes of information (stamp
    /// and CRC included): Zstandard compresses it to about `ratio`, LZ4
    /// to some 0.05 more (the cost of coding a match per piece). Drawn
    /// from `seed`, the key index and the version: the same run gives the
    /// same values.
    Compressible { ratio: f64, seed: u64 },
}

/// Length of the pieces a compressible fill is made of (db_bench's).
pub const FILL_PIECE: usize = 100;

/// Bytes of a value that are not fill: the stamp (key index, version)
/// and the CRC.
const VALUE_OVERHEAD: usize = 16;

/// Of those, about how many a compressor cannot shrink: the CRC and the
/// key index's low bytes (its high bytes and the version are mostly
/// zeros).
const VALUE_OVERHEAD_UNIQUE: usize = 8;

impl Fill {
    /// `Fill::Compressible` at `ratio`, if there is one; `Err` if the
    /// ratio is not in (0, 1].
    pub fn compressible(ratio: Option<f64>, seed: u64) -> Result<Fill, String> {
        match ratio {
            None => Ok(Fill::Random),
            Some(r) if r > 0.0 && r <= 1.0 => Ok(Fill::Compressible { ratio: r, seed }),
            Some(r) => Err(format!("--compressible {r}: the ratio must be in (0, 1]")),
        }
    }

    /// The value of key index `i`, version `version`, `len` bytes (at
    /// least 16): index (8) | version (4) | fill | CRC-32C of all before (4).
    pub fn value(self, i: u64, version: u32, len: usize) -> Vec<u8> {
        let len = len.max(VALUE_OVERHEAD);
        let mut v = vec![0u8; len];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v[8..12].copy_from_slice(&version.to_le_bytes());
        let fill = &mut v[12..len - 4];
        match self {
            Fill::Random => random_fill(fill, i, version),
            Fill::Compressible { ratio, seed } => {
                // Bytes of the fill that do not repeat: the value's share,
                // less what the stamp and CRC hold.
                let unique =
                    ((ratio * len as f64).round() as usize).saturating_sub(VALUE_OVERHEAD_UNIQUE);
                let mut rng = Rng::new(mix64(mix64(seed) ^ i) ^ u64::from(version));
                compressible_fill(fill, unique, &mut rng);
            }
        }
        let crc = crc_fast::crc32_iscsi(&v[..len - 4]);
        v[len - 4..].copy_from_slice(&crc.to_le_bytes());
        v
    }
}

/// The incompressible fill of `make_value`: no 8-byte word repeats within
/// a value or across keys and versions.
fn random_fill(fill: &mut [u8], i: u64, version: u32) {
    let mut x =
        i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(version).rotate_left(32) ^ 0x5851_f42d;
    for chunk in fill.chunks_mut(8) {
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// Fills `fill` piece by piece (`FILL_PIECE` bytes, the last shorter):
/// each piece begins with its share of `unique` random bytes (at least
/// one), which then repeat to the piece's end.
fn compressible_fill(fill: &mut [u8], unique: usize, rng: &mut Rng) {
    let total = fill.len();
    for piece in fill.chunks_mut(FILL_PIECE) {
        let n = piece.len();
        let run = (unique * n).div_ceil(total).clamp(1, n);
        for chunk in piece[..run].chunks_mut(8) {
            chunk.copy_from_slice(&rng.next_u64().to_le_bytes()[..chunk.len()]);
        }
        // Doubling copies: `piece[..done]` always holds whole repeats of
        // the run, so copying its start extends the pattern.
        let mut done = run;
        while done < n {
            let k = done.min(n - done);
            piece.copy_within(..k, done);
            done += k;
        }
    }
}

/// splitmix64's finalizer: a seed, key index and version mixed into one
/// generator seed, so that nearby inputs give unrelated streams.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which values a scan checks in full (`checked_scan`): those whose key
/// index is `part` modulo `of`; the rest by their length and the key
/// index they carry. Scanners that each read every key split the full
/// checks with `Share { part: t, of: T }`: together they check every
/// value in full once per pass, and no value's CRC is computed T times.
#[derive(Clone, Copy, Debug)]
pub struct Share {
    pub part: u64,
    pub of: u64,
}

impl Share {
    /// Every value checked in full.
    pub const ALL: Share = Share { part: 0, of: 1 };

    fn full(self, i: u64) -> bool {
        self.of <= 1 || i % self.of == self.part
    }
}

/// Scans up to `limit` entries from `from`, checking that key indexes
/// ascend strictly and that each value is one `make_value` wrote for its
/// key (in full or by its stamp, as `share` says); calls `each` with
/// every key index. Returns the entries seen. The first entry that fails
/// a check ends the scan with its reason.
pub fn checked_scan(
    db: &dyn Engine,
    from: &[u8],
    limit: usize,
    share: Share,
    each: impl FnMut(u64),
) -> BenchResult<usize> {
    checked_visit(|f| db.scan(from, limit, f), share, each)
}

/// `checked_scan` over the entries `visit` hands its visitor (which
/// returns false to stop), however they are produced: an engine's scan,
/// or entries in memory for the client alone.
pub fn checked_visit(
    visit: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> bool) -> BenchResult<usize>,
    share: Share,
    mut each: impl FnMut(u64),
) -> BenchResult<usize> {
    let mut prev: Option<u64> = None;
    let mut bad = None;
    let seen = visit(&mut |key, v| {
        let r = key_index(key)
            .filter(|&k| prev.is_none_or(|p| k > p))
            .ok_or_else(|| {
                format!(
                    "scan out of order after key {}",
                    prev.map_or("-".into(), |p| p.to_string())
                )
            })
            .and_then(|k| {
                if share.full(k) {
                    check_value(k, v)
                } else {
                    check_stamp(k, v)
                }
                .map(|()| k)
            });
        match r {
            Ok(k) => {
                prev = Some(k);
                each(k);
                true
            }
            Err(e) => {
                bad = Some(e);
                false
            }
        }
    })?;
    match bad {
        Some(e) => Err(e.into()),
        None => Ok(seen),
    }
}

/// Checks a value read for key index `i`; `Err(reason)` if it is not a
/// value `make_value` wrote for that key.
pub fn check_value(i: u64, v: &[u8]) -> Result<(), String> {
    if v.len() < 16 {
        return Err(format!("key {i}: value of {} bytes is too short", v.len()));
    }
    let (body, crc) = v.split_at(v.len() - 4);
    if crc_fast::crc32_iscsi(body).to_le_bytes() != crc {
        return Err(format!("key {i}: value checksum mismatch"));
    }
    check_stamp(i, v)
}

/// The cheap part of `check_value`: the value is long enough and carries
/// key index `i`, its CRC unchecked.
pub fn check_stamp(i: u64, v: &[u8]) -> Result<(), String> {
    let idx = v
        .get(..8)
        .filter(|_| v.len() >= 16)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| format!("key {i}: value of {} bytes is too short", v.len()))?;
    if idx != i {
        return Err(format!("key {i}: value belongs to key {idx}"));
    }
    Ok(())
}

/// A fast seeded generator (splitmix64); workloads need many random numbers
/// per operation and reproducible sequences per thread.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x2545_f491_4f6c_dd1d)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipfian choice over `0..n` with exponent `theta` (YCSB's generator, after
/// Gray et al., "Quickly generating billion-record synthetic databases"),
/// scrambled by a hash so hot items are spread over the key space.
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Self {
        let n = n.max(1);
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }
    /// The rank (0 = hottest) of the next item.
    pub fn rank(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
    /// The next item, scrambled over `0..n`.
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let r = self.rank(rng);
        // FNV-1a over the rank's bytes, then reduced to the range.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in r.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h % self.n
    }
}

/// p50 and p99 of latencies in nanoseconds, in microseconds.
pub fn percentiles(mut ns: Vec<u64>) -> Option<(f64, f64)> {
    if ns.is_empty() {
        return None;
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    Some((at(0.5), at(0.99)))
}

/// Runs `f(thread_index)` on `threads` threads; the first error wins.
pub fn parallel<T: Send>(
    threads: usize,
    f: impl Fn(usize) -> BenchResult<T> + Sync,
) -> BenchResult<Vec<T>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                let f = &f;
                s.spawn(move || f(t))
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.join().map_err(|_| "a workload thread panicked")??);
        }
        Ok(out)
    })
}

/// Runs `f(thread_index, stop)` on `threads` threads for `run_for`, then
/// raises `stop`, which each `f` must poll and return on; the first error
/// wins. For phases measured over a fixed time rather than a fixed count,
/// so that every thread count gets the same time and no straggler thread
/// runs alone at the end.
pub fn parallel_for<T: Send>(
    threads: usize,
    run_for: Duration,
    f: impl Fn(usize, &AtomicBool) -> BenchResult<T> + Sync,
) -> BenchResult<Vec<T>> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                let (f, stop) = (&f, &stop);
                s.spawn(move || f(t, stop))
            })
            .collect();
        std::thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.join().map_err(|_| "a workload thread panicked")??);
        }
        Ok(out)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_verify_and_damage_is_caught() {
        let v = make_value(42, 3, 100);
        assert_eq!(v.len(), 100);
        assert!(check_value(42, &v).is_ok());
        assert!(check_value(43, &v).is_err());
        let mut bad = v.clone();
        bad[50] ^= 1;
        assert!(check_value(42, &bad).is_err());
        assert_eq!(key_index(&make_key(7, 16)), Some(7));
        assert!(make_key(1, 16) < make_key(256, 16));
    }

    #[test]
    fn value_fills_do_not_repeat() {
        // No 8-byte word of the fill comes twice within a value or across
        // keys and versions, so neither a compressor nor a dedup finds
        // anything to shrink.
        let mut words = std::collections::HashSet::new();
        for (i, version) in [(0, 0), (1, 0), (0, 1), (u64::MAX, 7)] {
            let v = make_value(i, version, 4096);
            for w in v[12..4092].chunks_exact(8) {
                assert!(words.insert(w.to_vec()), "key {i} version {version}");
            }
        }
    }

    #[test]
    fn shared_scans_check_each_value_in_full_once() {
        for i in 0..1000u64 {
            let full = (0..4).filter(|&t| Share { part: t, of: 4 }.full(i)).count();
            assert_eq!(full, 1, "key {i}");
            assert!(Share::ALL.full(i));
        }
        // The stamp catches another key's value and a short one, not a
        // damaged fill: that is what the full checks are for.
        let v = make_value(42, 3, 100);
        assert!(check_stamp(42, &v).is_ok());
        assert!(check_stamp(43, &v).is_err());
        assert!(check_stamp(42, &v[..15]).is_err());
        let mut bad = v.clone();
        bad[50] ^= 1;
        assert!(check_stamp(42, &bad).is_ok());
        assert!(check_value(42, &bad).is_err());
    }

    /// Compressible values hold about `ratio` of their bytes unrepeated:
    /// Zstandard (level 3) shrinks a table-block-sized run of them to
    /// about that ratio and LZ4 to a little more (measured: 0.51 and
    /// 0.55 for 0.5), not much less (values that compressed far better
    /// would flatter compression) nor much more.
    #[test]
    fn compressible_values_compress_to_their_ratio() {
        for ratio in [0.5, 0.25, 0.75] {
            for len in [100, 1024, 4000] {
                let fill = Fill::compressible(Some(ratio), 7).unwrap();
                // Some 16 KiB of values, as a table block holds them
                // (keys aside).
                let count = (16 << 10) / len + 1;
                let raw: Vec<u8> = (0..count as u64)
                    .flat_map(|i| fill.value(i * 7919, 1, len))
                    .collect();
                let lz4 = lz4_flex::block::compress(&raw).len() as f64 / raw.len() as f64;
                let zstd = zstd::bulk::compress(&raw, 3).unwrap().len() as f64 / raw.len() as f64;
                // Zstandard finds the information content; LZ4 pays a
                // few bytes per piece for its matches.
                for (name, got, lo, hi) in [
                    ("zstd", zstd, ratio - 0.03, ratio + 0.05),
                    ("lz4", lz4, ratio, ratio + 0.09),
                ] {
                    assert!(
                        got > lo && got < hi,
                        "{name}, ratio {ratio}, {len}-byte values: compressed to {got:.3}"
                    );
                }
            }
        }
        // Incompressible values stay so, but for their stamps' zeros.
        let raw: Vec<u8> = (0..200u64).flat_map(|i| make_value(i, 0, 100)).collect();
        let lz4 = lz4_flex::block::compress(&raw).len() as f64 / raw.len() as f64;
        assert!(lz4 > 0.9, "{lz4}");
    }

    #[test]
    fn compressible_values_verify_and_follow_the_seed() {
        let a = Fill::compressible(Some(0.5), 1).unwrap();
        let b = Fill::compressible(Some(0.5), 2).unwrap();
        for len in [16, 17, 100, 101, 1024] {
            let v = a.value(42, 3, len);
            assert_eq!(v.len(), len);
            assert!(check_value(42, &v).is_ok());
            assert!(check_value(43, &v).is_err());
            assert_eq!(v, a.value(42, 3, len), "the same seed, the same value");
            if len > 16 {
                assert_ne!(v, b.value(42, 3, len), "another seed, another value");
                assert_ne!(v, a.value(42, 4, len), "another version, another value");
            }
        }
        assert_eq!(Fill::compressible(None, 1).unwrap(), Fill::Random);
        assert_eq!(Fill::Random.value(5, 1, 100), make_value(5, 1, 100));
        for bad in [0.0, -0.5, 1.5, f64::NAN] {
            assert!(Fill::compressible(Some(bad), 1).is_err(), "{bad}");
        }
        assert!(Fill::compressible(Some(1.0), 1).is_ok());
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(10_000, 0.99);
        let mut rng = Rng::new(1);
        let mut hits = vec![0u32; 10_000];
        for _ in 0..200_000 {
            hits[z.rank(&mut rng) as usize] += 1;
        }
        // rank 0 is by far the most popular; the tail is still reached
        assert!(hits[0] > hits[100] * 20, "{} vs {}", hits[0], hits[100]);
        assert!(hits[5000..].iter().any(|&h| h > 0));
        for _ in 0..1000 {
            assert!(z.next(&mut rng) < 10_000);
        }
    }
}
