//! `cairn`: the CairnDB command-line tool.
//!
//! `cairn demo` loads, reads and scans a database in a scratch directory and
//! prints what it did and how fast; the full benchmark tool (`cairn bench`)
//! is its own piece of work.

mod bench;
mod tools;

use cairndb::{Db, Options, WriteBatch, WriteOptions};

use clap::{Parser, Subcommand};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The tool, like db_bench with jemalloc, runs on a fast allocator: glibc's
/// `free` was ~13 % of a demo profile. The library itself does not choose.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "cairn", version, about = "CairnDB command-line tool")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Benchmark: device limits first, then workloads on one or more
    /// engines, as ratios within one run.
    Bench(bench::BenchArgs),
    /// Load, read back, scan and recover a database in a scratch directory.
    Demo(DemoArgs),
    /// The database's shape: levels, memtables, separated values, space.
    Stats(tools::kv::DbArgs),
    /// Print a key's value (exit status 1 if absent).
    Get(tools::kv::GetArgs),
    /// Set a key's value (synced).
    Put(tools::kv::PutArgs),
    /// Delete a key (synced).
    Delete(tools::kv::DeleteArgs),
    /// Print entries in key order (a range, a prefix, or all).
    Scan(tools::kv::ScanArgs),
    /// Write every keyspace's entries to a portable, checksummed dump file.
    Dump(tools::dump::DumpArgs),
    /// Load a dump file into a new or empty database.
    Load(tools::dump::LoadArgs),
    /// Read every table and separated value, checking every checksum
    /// (exit status 1 if anything is wrong).
    Verify(tools::kv::DbArgs),
    /// Merge every table into one sorted level.
    Compact(tools::kv::DbArgs),
    /// Copy a database at one seqno into a new directory (hard links
    /// where it can).
    Checkpoint(tools::backup::CheckpointArgs),
    /// Incremental backups: create, list, verify, delete, restore.
    Backup(tools::backup::BackupArgs),
    /// Rebuild a database whose manifest is lost or damaged from its
    /// tables and journals; damaged tables go to DB/lost/ (exit status 1
    /// if anything was lost).
    Repair(tools::repair::RepairArgs),
    /// (internal) hold memory resident until stdin closes (memory cap).
    #[command(hide = true)]
    Balloon { bytes: u64 },
    /// (internal) some of the contest's phases, in a fresh process.
    #[command(hide = true)]
    ContestPhases(bench::workloads::contest::PhasesArgs),
    /// (internal) one txn-scaling point alone, for a profiler.
    #[command(hide = true)]
    TxnProbe(bench::workloads::txn_scaling::ProbeArgs),
    /// (internal) fill a database without closing it, then wait to be killed.
    #[command(hide = true)]
    FillAndWait { dir: PathBuf, keys: u64 },
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Number of keys (16-byte keys, 100-byte values).
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Database directory (default: a fresh directory under the system
    /// temp dir, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the database directory afterwards.
    #[arg(long)]
    keep: bool,
    /// Seed for the key order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

const VALUE_LEN: usize = 100;

fn key_of(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("{i:016}").as_bytes());
    k
}

/// A value derived from the key index, so every read can be verified.
fn value_of(i: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xdead_beef;
    for chunk in v.chunks_mut(8) {
        x ^= x >> 31;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    v
}

fn rate(n: u64, d: Duration) -> String {
    format!("{:>10.0} ops/s", n as f64 / d.as_secs_f64().max(1e-9))
}

struct Scratch {
    path: PathBuf,
    remove: bool,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn demo(args: DemoArgs) -> Result<(), Box<dyn std::error::Error>> {
    let scratch = match &args.dir {
        Some(d) => Scratch {
            path: d.clone(),
            remove: false,
        },
        None => Scratch {
            path: std::env::temp_dir().join(format!("cairn-demo-{}", std::process::id())),
            remove: !args.keep,
        },
    };
    let dir = scratch.path.join("db");
    let n = args.keys;
    println!(
        "cairn demo: {n} keys (16-byte keys, {VALUE_LEN}-byte values) in {}",
        dir.display()
    );

    let mut order: Vec<u64> = (0..n).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(args.seed));

    let db = Db::open(&dir, Options::default())?;
    let t = Instant::now();
    for &i in &order {
        db.put(key_of(i), value_of(i))?;
    }
    let fill = t.elapsed();
    println!(
        "fillrandom   {} ({n} puts, unsynced, {:.2?})",
        rate(n, fill),
        fill
    );

    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(args.seed + 1));
    let t = Instant::now();
    let mut wrong = 0u64;
    for &i in &order {
        if db.get(key_of(i))?.as_deref() != Some(&value_of(i)[..]) {
            wrong += 1;
        }
    }
    let read = t.elapsed();
    println!(
        "readrandom   {} ({n} gets from memtable and tables, {:.2?})",
        rate(n, read),
        read
    );

    let t = Instant::now();
    let mut count = 0u64;
    for kv in db.iter() {
        let (k, v) = kv?;
        if k[..] != key_of(count)[..] || v[..] != value_of(count)[..] {
            wrong += 1;
        }
        count += 1;
    }
    let scan = t.elapsed();
    println!(
        "readseq      {} (full scan, {count} keys, {:.2?})",
        rate(count, scan),
        scan
    );

    let t = Instant::now();
    let mut rcount = 0u64;
    for kv in db.iter().rev() {
        let (k, _) = kv?;
        rcount += 1;
        if k[..] != key_of(n - rcount)[..] {
            wrong += 1;
        }
    }
    let rscan = t.elapsed();
    println!(
        "readreverse  {} (reverse scan, {rcount} keys, {:.2?})",
        rate(rcount, rscan),
        rscan
    );

    let t = Instant::now();
    let mut synced = 0u64;
    while t.elapsed() < Duration::from_secs(2) && synced < 10_000 {
        let mut b = WriteBatch::new();
        b.put(key_of(synced % n.max(1)), value_of(synced % n.max(1)))?;
        db.write(b, &WriteOptions::synced())?;
        synced += 1;
    }
    let sync_time = t.elapsed();
    println!(
        "fillsync     {} (synced single-key batches, {synced} writes)",
        rate(synced, sync_time)
    );

    let t = Instant::now();
    db.compact()?;
    println!("compact      {:.2?} (full compaction)", t.elapsed());
    let stats = db.stats();
    println!(
        "shape        tables per level {:?}, bytes per level {:?}",
        stats.tables_per_level, stats.bytes_per_level
    );
    db.close()?;

    let open_after_kill = kill_and_reopen(&scratch.path.join("killed"), n.min(300_000))?;
    println!(
        "recovery     {:.2?} to open after kill -9 with a full memtable ({} keys unflushed)",
        open_after_kill.0, open_after_kill.1
    );

    if wrong > 0 || count != n || rcount != n {
        return Err(format!(
            "verification FAILED: {wrong} wrong values, {count}/{rcount} of {n} keys scanned"
        )
        .into());
    }
    println!("verified     every value read and scanned matched what was written");
    Ok(())
}

/// Fills a database in a child process that is then SIGKILLed with its
/// memtable full and unflushed; returns the time to reopen it and the
/// number of keys the child acknowledged.
fn kill_and_reopen(dir: &Path, keys: u64) -> Result<(Duration, u64), Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("fill-and-wait")
        .arg(dir)
        .arg(keys.to_string())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    child.kill()?;
    child.wait()?;
    let acked: u64 = line
        .trim()
        .strip_prefix("filled ")
        .ok_or("child failed")?
        .parse()?;
    let t = Instant::now();
    let db = Db::open(dir, Options::default())?;
    let took = t.elapsed();
    for i in (0..acked).step_by(997) {
        if db.get(key_of(i))?.as_deref() != Some(&value_of(i)[..]) {
            return Err(format!("key {i} acknowledged before the kill is missing").into());
        }
    }
    db.close()?;
    Ok((took, acked))
}

fn fill_and_wait(dir: &Path, keys: u64) -> Result<(), Box<dyn std::error::Error>> {
    let db = Db::open(dir, Options::default())?;
    for i in 0..keys {
        db.put(key_of(i), value_of(i))?;
    }
    let mut out = std::io::stdout();
    writeln!(out, "filled {keys}")?;
    out.flush()?;
    std::thread::sleep(Duration::from_secs(60));
    Ok(())
}

/// A benchmark's error as the other commands' errors are.
fn unsend(e: bench::BenchError) -> Box<dyn std::error::Error> {
    e
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Cmd::Bench(a) => bench::run(a).map_err(unsend),
        Cmd::Balloon { bytes } => bench::workloads::contest::balloon_main(bytes).map_err(unsend),
        Cmd::ContestPhases(a) => bench::workloads::contest::phases_main(a).map_err(unsend),
        Cmd::TxnProbe(a) => bench::workloads::txn_scaling::probe(&a).map_err(unsend),
        Cmd::Demo(a) => demo(a),
        Cmd::Stats(a) => tools::kv::stats(a),
        Cmd::Get(a) => match tools::kv::get(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Cmd::Put(a) => tools::kv::put(a),
        Cmd::Delete(a) => tools::kv::delete(a),
        Cmd::Scan(a) => tools::kv::scan(a),
        Cmd::Dump(a) => tools::dump::dump(a),
        Cmd::Load(a) => tools::dump::load(a),
        Cmd::Verify(a) => match tools::kv::verify(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Cmd::Compact(a) => tools::kv::compact(a),
        Cmd::Checkpoint(a) => tools::backup::checkpoint(a),
        Cmd::Backup(a) => tools::backup::backup(a),
        Cmd::Repair(a) => match tools::repair::repair(a) {
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::from(1),
            Err(e) => Err(e),
        },
        Cmd::FillAndWait { dir, keys } => fill_and_wait(&dir, keys),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // 2, as grep does: `get`, `verify` and `repair` exit with 1 for
        // a missing key or a damaged database, which is an answer, not a
        // failure.
        Err(e) => {
            eprintln!("cairn: {e}");
            ExitCode::from(2)
        }
    }
}
