//! `cairn bench`: device limits, workloads, peers, timelines.
//!
//! Every figure this tool prints is meant to be read as a ratio within one
//! run: an engine against the device limits measured first in the same run
//! (`device`), and engines against each other on the same workload
//! (`engine`). Absolute numbers on shared virtual machines are noise.
//!
//! Modules:
//! - `device`: direct-IO probes of the disk under the scratch directory.
//! - `engine`: the `Engine` trait and adapters (CairnDB and its control
//!   variants; peers behind cargo features).
//! - `workloads`: dbbench, synctx, ycsb, contest, txn-scaling, keyspaces,
//!   checkpoint, follower, replicated.
//! - `monitor`: the per-second timeline (ops, MB/s, CPU, disk, RSS).
//! - `report`: the summary table, JSON lines, plots.

pub mod device;
pub mod engine;
pub mod monitor;
pub mod peers;
pub mod report;
pub mod wire;
pub mod workloads;

use std::sync::atomic::{AtomicU64, Ordering};

/// Errors in the bench tool: anything printable.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub type BenchResult<T> = Result<T, BenchError>;

/// Counters a running phase bumps and the monitor samples every second.
#[derive(Default)]
pub struct Progress {
    /// Operations completed (puts, gets, scanned keys, batches, ...).
    pub ops: AtomicU64,
    /// User bytes moved (keys + values written or read).
    pub bytes: AtomicU64,
}

impl Progress {
    pub fn add(&self, ops: u64, bytes: u64) {
        self.ops.fetch_add(ops, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn reset(&self) {
        self.ops.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
    }
}

/// Outcome of one phase of one workload on one engine.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub engine: String,
    pub workload: String,
    pub phase: String,
    /// Operations done and the wall time they took.
    pub ops: u64,
    pub secs: f64,
    /// User bytes moved in the phase.
    pub user_bytes: u64,
    /// `None` if verification passed; the reason otherwise (a FAIL row).
    pub failure: Option<String>,
    /// The device limit this phase is compared with: (name, bytes/s or
    /// ops/s in the same unit as `rate()` of the phase).
    pub limit: Option<(String, f64)>,
    /// Device bytes written / user bytes written (from /proc/diskstats).
    pub write_amp: Option<f64>,
    /// Bytes on disk / live user bytes, after the phase.
    pub space_amp: Option<f64>,
    /// What the database directory took on disk after the phase, where
    /// measured (`Ctx::measure_disk`).
    pub disk: Option<monitor::DiskUsage>,
    /// Peak resident set size of the process so far, bytes.
    pub peak_rss: Option<u64>,
    /// Longest second without progress during the phase, if any stalled.
    pub stalls: u64,
    /// Latency percentiles in microseconds, where measured: (p50, p99).
    pub latency_us: Option<(f64, f64)>,
    /// Unit of `rate()`: "ops/s" or "MB/s".
    pub unit: &'static str,
    /// The ratio to `limit` the project aims for (at least), if it has
    /// set one: the summary marks the row pass or fail. A miss is a
    /// finding, not a failed run (figures on shared machines drift).
    pub target: Option<f64>,
    /// A remark on the row, such as how many commits met a conflict.
    pub note: Option<String>,
    /// Why the phase did not run on this engine (an adapter without
    /// transactions, ...): a SKIP row with no figures.
    pub skipped: Option<String>,
    /// CPU cores other processes (and the hypervisor) took during the
    /// phase: a figure measured beside them is not one of this machine.
    pub others_cpu: Option<f64>,
    /// CPU seconds the benchmark's process (engine and client) used in
    /// the phase: per operation, a figure that drifts far less than rates
    /// on a shared machine.
    pub own_cpu_secs: Option<f64>,
}

impl Row {
    /// Appends `note` to the row's note, after a "; ".
    pub fn add_note(&mut self, note: String) {
        self.note = Some(match self.note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
    }
}

impl Row {
    /// Throughput in the row's unit.
    pub fn rate(&self) -> f64 {
        let secs = self.secs.max(1e-9);
        if self.unit == "MB/s" {
            self.user_bytes as f64 / secs / 1e6
        } else {
            self.ops as f64 / secs
        }
    }
    /// Throughput over the device limit, if one applies.
    pub fn ratio(&self) -> Option<f64> {
        self.limit.as_ref().map(|(_, l)| self.rate() / l.max(1e-9))
    }
    /// Whether the row reaches its target ratio; `None` without a target
    /// or a measured limit.
    pub fn target_met(&self) -> Option<bool> {
        Some(self.ratio()? >= self.target?)
    }
    /// The process's CPU per operation, in microseconds, where measured.
    pub fn cpu_us_per_op(&self) -> Option<f64> {
        let secs = self.own_cpu_secs?;
        (self.ops > 0).then(|| secs * 1e6 / self.ops as f64)
    }
}

/// `cairn bench` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Workloads to run, comma-separated: dbbench, synctx, ycsb,
    /// txn-scaling, contest, keyspaces, checkpoint, follower, replicated
    /// (built with the cargo feature `replicated`). Without it, the
    /// default suite runs all but keyspaces, checkpoint, follower and
    /// replicated, with `contest` scaled down (1 GiB under a 512 MiB cap)
    /// so the suite takes minutes.
    #[arg(long, value_delimiter = ',')]
    pub workloads: Option<Vec<String>>,
    /// Engines to run side by side, comma-separated: cairndb, its
    /// controls cairndb-inline (no key-value separation), cairndb-nogc
    /// (value GC's null policy), cairndb-direct (flushed values read
    /// with direct IO), cairndb-append (no journal pre-writing),
    /// cairndb-norecycle (no journal recycling) and
    /// cairndb-buffered-journal (the journal written through the page
    /// cache instead of with direct IO), cairndb-cold (written values
    /// not read back into the page cache after writes pause),
    /// cairndb-nosettle (compactions beside writes settle nothing for
    /// scans), cairndb-nostreams (unsynced values in their journal
    /// records, not in value streams by key range), cairndb-lz4 (LZ4
    /// whatever --compression says), and the peers rocksdb,
    /// lmdb, fjall, redb, sled (each needs its cargo feature).
    #[arg(long, value_delimiter = ',', default_value = "cairndb")]
    pub engines: Vec<String>,
    /// Worker threads for multi-threaded phases.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// dbbench: number of keys.
    #[arg(long, default_value_t = 500_000)]
    pub num: u64,
    /// dbbench: value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// dbbench and ycsb: values that compress to about RATIO of their
    /// size (in (0, 1]; 0.5 is 2:1, db_bench's `compression_ratio`), made
    /// of runs of random bytes repeated within each value. Without it,
    /// values are incompressible.
    #[arg(long, value_name = "RATIO")]
    pub compressible: Option<f64>,
    /// Table compression for every engine that has it: none, lz4, or
    /// zstd (level 3). LMDB, redb and sled (whose zstd cannot be built
    /// beside CairnDB's) have none and ignore it, and fjall has no zstd;
    /// each row of dbbench's load says what its engine applied.
    #[arg(long, value_enum, default_value_t = engine::Compression::None)]
    pub compression: engine::Compression,
    /// synctx: batches per phase.
    #[arg(long, default_value_t = 10_000)]
    pub synctx_batches: u64,
    /// synctx: concurrent committers in the multi-committer phases.
    #[arg(long, default_value_t = 8)]
    pub committers: usize,
    /// txn-scaling: keys preloaded (100-byte values).
    #[arg(long, default_value_t = 100_000)]
    pub txn_keys: u64,
    /// txn-scaling: thread counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16, 32, 64])]
    pub txn_threads: Vec<usize>,
    /// txn-scaling: seconds per thread count (read-only and read-write).
    #[arg(long, default_value_t = 1.5)]
    pub txn_secs: f64,
    /// txn-scaling: slices each point is measured in, cycling through the
    /// thread counts (and the two put phases), so machine drift spreads
    /// over all of them.
    #[arg(long, default_value_t = 5)]
    pub txn_rounds: usize,
    /// txn-scaling: puts in each plain-put phase.
    #[arg(long, default_value_t = 200_000)]
    pub txn_puts: u64,
    /// ycsb: records loaded.
    #[arg(long, default_value_t = 100_000)]
    pub ycsb_records: u64,
    /// ycsb: operations per workload.
    #[arg(long, default_value_t = 100_000)]
    pub ycsb_ops: u64,
    /// contest: keys (4 KiB values each); default 1,048,576 (4 GiB), or
    /// 262,144 (1 GiB) in the default suite.
    #[arg(long)]
    pub contest_keys: Option<u64>,
    /// contest: memory left for engine plus page cache, in MiB (a memory
    /// cgroup, else a balloon holding the rest; 0 disables the cap);
    /// default 2048, or 512 in the default suite.
    #[arg(long)]
    pub mem_cap_mib: Option<u64>,
    /// contest: how the settle phase settles: `compact` calls the
    /// engine's full compaction; `idle` leaves the engine idle and waits
    /// until its own background work has settled every value (CairnDB's
    /// `Options::settle_after_idle`; engines without it keep the
    /// compaction call).
    #[arg(long, value_enum, default_value_t = workloads::contest::Settle::Compact)]
    pub contest_settle: workloads::contest::Settle,
    /// contest: also run the phases the original contest did not have —
    /// fresh-range (a scan of freshly written values), overwrite, settle
    /// (a full compaction or idle settling), multi-read. Off by default:
    /// the contest runs as it was (write, process ended, read, range).
    #[arg(long)]
    pub contest_extras: bool,
    /// keyspaces: puts per keyspace count (1, 8, 64), all its slices
    /// together.
    #[arg(long, default_value_t = 3_000_000)]
    pub ks_ops: u64,
    /// keyspaces: MiB of 1 KiB values in the keyspace dropped while
    /// writes go on.
    #[arg(long, default_value_t = 1024)]
    pub ks_drop_mib: u64,
    /// checkpoint: MiB of 1 KiB values in the database checkpointed
    /// while writes go on.
    #[arg(long, default_value_t = 4096)]
    pub ckpt_mib: u64,
    /// follower: seconds of writes while the follower is timed.
    #[arg(long, default_value_t = 10.0)]
    pub follow_secs: f64,
    /// follower: the follower's catch-up period in milliseconds
    /// (`Options::follow_every`).
    #[arg(long, default_value_t = 100)]
    pub follow_every_ms: u64,
    /// replicated: concurrent writers, on the cluster and on the single
    /// database each.
    #[arg(long, default_value_t = 8)]
    pub repl_clients: usize,
    /// replicated: seconds of each side, all its slices together.
    #[arg(long, default_value_t = 15.0)]
    pub repl_secs: f64,
    /// Cache budget given to every engine, in MiB.
    #[arg(long, default_value_t = 64)]
    pub cache_mib: usize,
    /// Parent of the scratch directory (created, then removed).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Where results (JSON lines, plots) go; a run-<time> directory is
    /// created inside.
    #[arg(long, default_value = "bench-results")]
    pub out: std::path::PathBuf,
    /// Size of the device probe file, in MiB; default 1024, or the
    /// contest's data size when the contest runs and its data is larger
    /// (the device's limits over the span of the disk the workload uses).
    #[arg(long)]
    pub probe_mib: Option<u64>,
    /// Seconds per device probe point.
    #[arg(long, default_value_t = 1.0)]
    pub probe_secs: f64,
    /// Skip the device probe (ratios are then not printed).
    #[arg(long)]
    pub no_device: bool,
    /// Tiny sizes everywhere: a smoke run for CI.
    #[arg(long)]
    pub smoke: bool,
    /// No per-second timeline lines.
    #[arg(long)]
    pub quiet: bool,
    /// Seed for key choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl BenchArgs {
    /// The workloads to run and the contest's scale: the contest's own
    /// defaults when workloads were named, the suite's otherwise.
    fn resolve(&self) -> (Vec<String>, u64, u64) {
        let suite = self.workloads.is_none();
        let workloads = self.workloads.clone().unwrap_or_else(|| {
            ["dbbench", "synctx", "ycsb", "txn-scaling", "contest"]
                .map(String::from)
                .to_vec()
        });
        let keys = self
            .contest_keys
            .unwrap_or(if suite { 262_144 } else { 1_048_576 });
        let cap = self.mem_cap_mib.unwrap_or(if suite { 512 } else { 2048 });
        (workloads, keys, cap)
    }

    /// The probe file's size in bytes: `--probe-mib`, else 1 GiB, or the
    /// contest's data when it is larger. On this VM the disk served 4 KiB
    /// random reads 16–35 % faster over a 1 GiB file than over a 4 GiB one
    /// (docs/benchmarks.md, "Probe size" explains it): a probe smaller than the data
    /// would hold the workload to a limit it cannot reach.
    fn probe_bytes(&self, workloads: &[String], contest_keys: u64) -> u64 {
        if let Some(mib) = self.probe_mib {
            return mib << 20;
        }
        let contest = workloads.iter().any(|w| w == "contest");
        let data = contest_keys * (8 + workloads::contest::VALUE_LEN as u64);
        let data = if contest {
            data.next_multiple_of(16 << 20)
        } else {
            0
        };
        data.max(1 << 30)
    }

    fn apply_smoke(&mut self) {
        if self.smoke {
            self.num = self.num.min(20_000);
            self.synctx_batches = self.synctx_batches.min(200);
            self.ycsb_records = self.ycsb_records.min(5_000);
            self.ycsb_ops = self.ycsb_ops.min(5_000);
            self.txn_keys = self.txn_keys.min(5_000);
            self.txn_secs = self.txn_secs.min(0.05);
            self.txn_rounds = 1;
            self.txn_puts = self.txn_puts.min(10_000);
            self.ks_ops = self.ks_ops.min(6_000);
            self.ks_drop_mib = self.ks_drop_mib.min(8);
            self.ckpt_mib = self.ckpt_mib.min(8);
            self.follow_secs = self.follow_secs.min(0.5);
            self.repl_secs = self.repl_secs.min(1.5);
            self.contest_keys = Some(self.contest_keys.unwrap_or(4_096).min(4_096));
            self.mem_cap_mib = Some(0);
            self.probe_mib = Some(self.probe_mib.unwrap_or(64).min(64));
            self.probe_secs = self.probe_secs.min(0.2);
        }
    }
}

/// Removes the scratch directory however the run ends.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the selected workloads on the selected engines, after probing the
/// device, and prints, saves and plots the results. Fails if any phase
/// failed verification.
pub fn run(mut args: BenchArgs) -> BenchResult<()> {
    args.apply_smoke();
    let (workload_names, contest_keys, mem_cap_mib) = args.resolve();
    for e in &args.engines {
        if !engine::available().contains(&e.as_str()) {
            return Err(format!(
                "engine {e} is not in this build (available: {})",
                engine::available().join(", ")
            )
            .into());
        }
    }
    if let Some(min) = engine::separation_override()? {
        let min = if min == usize::MAX {
            "max".to_owned()
        } else {
            min.to_string()
        };
        println!(
            "{}={min}: the separation threshold of every CairnDB variant but cairndb-inline",
            engine::SEPARATION_ENV
        );
    }
    let fill = workloads::Fill::compressible(args.compressible, args.seed)?;
    if let Some(ratio) = args.compressible {
        println!(
            "--compressible {ratio}: dbbench and ycsb values compress to about {ratio} of their size"
        );
    }
    if args.compression != engine::Compression::None {
        println!(
            "--compression {}: tables compressed by every engine that can (dbbench's load rows say what each applied)",
            args.compression.name()
        );
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = Scratch(parent.join(format!("cairn-bench-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0)?;
    let disk = monitor::disk_for_path(&scratch.0);
    println!(
        "cairn bench: workloads {:?} on engines {:?}, {} threads, scratch {} (disk {})",
        workload_names,
        args.engines,
        args.threads,
        scratch.0.display(),
        disk.as_deref().unwrap_or("unknown")
    );

    let device = if args.no_device {
        device::DeviceLimits::default()
    } else {
        let probe_dir = scratch.0.join("probe");
        std::fs::create_dir_all(&probe_dir)?;
        let d = device::probe(
            &probe_dir,
            &device::ProbeOptions {
                threads: args.threads,
                file_bytes: args.probe_bytes(&workload_names, contest_keys),
                secs_per_point: args.probe_secs,
            },
        )?;
        let _ = std::fs::remove_dir_all(&probe_dir);
        device::print(&d);
        d
    };

    let cfg = engine::EngineConfig {
        cache_bytes: args.cache_mib << 20,
        compression: args.compression,
        ..engine::EngineConfig::default()
    };
    let mut rows = Vec::new();
    let mut timelines = Vec::new();
    for workload in &workload_names {
        for engine_name in &args.engines {
            let root = scratch.0.join(format!("{engine_name}-{workload}"));
            let mut ctx =
                workloads::Ctx::new(engine_name, cfg.clone(), root, disk.clone(), args.quiet);
            let result = match workload.as_str() {
                "dbbench" => workloads::dbbench::run(
                    &mut ctx,
                    &workloads::dbbench::Config {
                        num: args.num,
                        threads: args.threads,
                        key_len: 16,
                        value_len: args.value_size,
                        fill,
                        seed: args.seed,
                    },
                    &device,
                ),
                "synctx" => workloads::synctx::run(
                    &mut ctx,
                    &workloads::synctx::Config {
                        batches: args.synctx_batches,
                        keys_per_batch: 100,
                        value_len: 100,
                        key_space: 1_000_000,
                        committers: args.committers,
                        seed: args.seed,
                    },
                    &device,
                ),
                "ycsb" => workloads::ycsb::run(
                    &mut ctx,
                    &workloads::ycsb::Config {
                        records: args.ycsb_records,
                        ops: args.ycsb_ops,
                        threads: args.threads,
                        value_len: 1024,
                        fill,
                        seed: args.seed,
                    },
                ),
                "txn-scaling" => workloads::txn_scaling::run(
                    &mut ctx,
                    &workloads::txn_scaling::Config {
                        keys: args.txn_keys.max(1),
                        value_len: 100,
                        threads: {
                            let mut t = args.txn_threads.clone();
                            t.sort_unstable();
                            t.dedup();
                            t
                        },
                        secs: args.txn_secs,
                        rounds: args.txn_rounds,
                        puts: args.txn_puts,
                        seed: args.seed,
                    },
                ),
                "keyspaces" => workloads::keyspaces::run(
                    &mut ctx,
                    &workloads::keyspaces::Config {
                        ops: args.ks_ops,
                        threads: args.threads.max(1),
                        value_len: args.value_size,
                        drop_bytes: args.ks_drop_mib << 20,
                        seed: args.seed,
                    },
                ),
                #[cfg(feature = "replicated")]
                "replicated" => workloads::replicated::run(
                    &mut ctx,
                    &workloads::replicated::Config {
                        clients: args.repl_clients.max(1),
                        secs: args.repl_secs,
                        value_len: args.value_size.max(16),
                    },
                ),
                #[cfg(not(feature = "replicated"))]
                "replicated" => Err("the replicated workload is built with the cargo feature \
                     `replicated`: cargo run --release -p cairn --features replicated -- bench ..."
                    .into()),
                "checkpoint" => workloads::checkpoint::run(
                    &mut ctx,
                    &workloads::checkpoint::Config {
                        mib: args.ckpt_mib,
                        threads: args.threads.max(1),
                        value_len: 1024,
                        seed: args.seed,
                    },
                ),
                "follower" => workloads::follower::run(
                    &mut ctx,
                    &workloads::follower::Config {
                        secs: args.follow_secs,
                        threads: args.threads.max(1),
                        value_len: args.value_size,
                        every: std::time::Duration::from_millis(args.follow_every_ms),
                        seed: args.seed,
                    },
                ),
                "contest" => workloads::contest::run(
                    &mut ctx,
                    &workloads::contest::Config {
                        keys: contest_keys,
                        threads: args.threads.max(1),
                        value_len: workloads::contest::VALUE_LEN,
                        mem_cap: mem_cap_mib << 20,
                        seed: args.seed,
                        settle: args.contest_settle,
                        extras: args.contest_extras,
                    },
                    &device,
                ),
                other => Err(format!("unknown workload {other}").into()),
            };
            if let Err(e) = result {
                ctx.rows.push(Row {
                    engine: engine_name.clone(),
                    workload: workload.clone(),
                    phase: "setup".into(),
                    failure: Some(e.to_string()),
                    unit: "ops/s",
                    ..Row::default()
                });
            }
            rows.append(&mut ctx.rows);
            timelines.append(&mut ctx.timelines);
        }
    }

    report::print_summary(&device, &rows);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = args.out.join(format!("run-{stamp}"));
    std::fs::create_dir_all(&out)?;
    report::write_jsonl(&out.join("results.jsonl"), &device, &rows)?;
    report::plot(&out, &timelines, &rows)?;
    println!("results: {}", out.display());
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.failure
                .as_ref()
                .map(|f| format!("{}/{}/{}: {f}", r.engine, r.workload, r.phase))
        })
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "{} phase(s) FAILED:\n  {}",
            failed.len(),
            failed.join("\n  ")
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::BenchArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn args(extra: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(extra.iter().copied()))
            .expect("arguments parse")
            .args
    }

    #[test]
    fn the_probe_spans_the_contest_data() {
        let names = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let keys = 1_048_576;
        let data = keys * (8 + super::workloads::contest::VALUE_LEN as u64);
        let a = args(&[]);
        assert_eq!(a.probe_bytes(&names(&["dbbench", "synctx"]), keys), 1 << 30);
        let contest = a.probe_bytes(&names(&["dbbench", "contest"]), keys);
        assert!(contest >= data && contest < data + (16 << 20), "{contest}");
        assert_eq!(contest % (16 << 20), 0);
        assert_eq!(a.probe_bytes(&names(&["contest"]), 1_000), 1 << 30);
        let explicit = args(&["--probe-mib", "300"]);
        assert_eq!(explicit.probe_bytes(&names(&["contest"]), keys), 300 << 20);
    }
}
