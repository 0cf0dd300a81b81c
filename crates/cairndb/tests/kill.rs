//! Real process kill test: a child process writes random batches on the
//! real file system and reports each acknowledgement over a pipe; the
//! parent SIGKILLs it after a random 5–500 ms, reopens the directory and
//! checks the durability contract for a process crash (docs/durability.md):
//! every acknowledged write is present, synced or not; batches are atomic;
//! nothing that was never written appears.
//!
//! How it works:
//! - The child is this test binary re-executed with `--exact
//!   kill_child_writer`; that test does nothing unless `CAIRNDB_KILL_CHILD_*`
//!   is set. It writes batches `first, first + 1, ...` forever with a tiny
//!   memtable and small tables, so flushes and background compactions run
//!   while it is killed, and prints `ack <id>` after each `Db::write`
//!   returns `Ok`.
//! - A batch's contents are a pure function of (seed, batch id), so the
//!   parent rebuilds them. Every value carries its batch id, its position in
//!   the batch and a checksum of (key, batch id, position, content), so each
//!   value of a scan is checked on its own as well.
//! - The writer is single-threaded: with `k` the last acknowledged batch,
//!   the reopened database must hold exactly the model after batch `k` or
//!   after batch `k + 1` (in flight when killed: it may have committed).
//!   The whole scan is compared with the model, and a sample of point reads.
//! - The next child continues on the same directory from the verified
//!   state; a fresh directory is started every `DIR_ITERS` iterations.
//!
//! Knobs: `CAIRNDB_KILL_ITERS` (kills, default 100), `CAIRNDB_KILL_SEED`
//! (default from the clock; printed). Thousands of kills:
//!
//! ```text
//! CAIRNDB_KILL_ITERS=5000 cargo test --release -p cairndb --test kill -- --nocapture
//! ```
//!
//! Only on Unix (`Child::kill` is SIGKILL there).
#![cfg(unix)]

use cairndb::{Db, Options, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The child's test name, re-executed with `--exact`.
const CHILD_TEST: &str = "kill_child_writer";
const ENV_DIR: &str = "CAIRNDB_KILL_CHILD_DIR";
const ENV_SEED: &str = "CAIRNDB_KILL_CHILD_SEED";
const ENV_FIRST: &str = "CAIRNDB_KILL_CHILD_FIRST";
/// Start of the child's acknowledgement lines (`ack <batch id>`).
const ACK: &str = "ack ";

/// Distinct keys; a quarter of the operations hit the first `KEYS_HOT`,
/// so consecutive batches (and ops within one batch) overwrite each other.
const KEYS: u64 = 4000;
const KEYS_HOT: u64 = 64;
const BATCH_OPS_MAX: usize = 100;
/// Small values are up to this long; one batch in 20 also carries one
/// value of 16–200 KiB (several memtables' worth).
const VALUE_SMALL_MAX: usize = 120;
const VALUE_BIG: std::ops::RangeInclusive<usize> = (16 << 10)..=(200 << 10);
/// Iterations sharing one directory before a fresh one is started.
const DIR_ITERS: usize = 20;
/// Point reads checked per iteration (on top of the full scan).
const GETS_PER_ITER: usize = 64;
/// The child gives up (and so fails loudly) after this long: a safety net
/// should the parent vanish without the pipe breaking.
const CHILD_LIFETIME_MAX: Duration = Duration::from_secs(120);

/// Bytes of a value around its content: batch id (8), op index (4),
/// checksum (8).
const VALUE_OVERHEAD: usize = 20;

/// Set for a child writing with `Options::journal_direct`, to the name
/// of its `Mode`.
const ENV_DIRECT: &str = "CAIRNDB_KILL_CHILD_DIRECT";

/// How the child writes (`options`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The buffered journal with value streams.
    Buffered,
    /// The direct journal holding every value.
    Direct,
    /// The direct journal with value streams, each staged through a ring
    /// slot of its own.
    DirectStreams,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Buffered => "buffered",
            Mode::Direct => "direct",
            Mode::DirectStreams => "direct-streams",
        }
    }
}

/// `Direct`: the journal written with direct IO through the staging ring
/// (2 MiB, so it wraps often), and memtables of 256 KiB so journals grow
/// past whole chunks before they are sealed. `Buffered`: the buffered
/// journal with value streams (unsynced large values appended by key
/// range to stream files, the journal holding pointers to them).
/// `DirectStreams`: both, each stream written with direct IO through a
/// ring of its own (1 MiB), its values recovered from the ring where its
/// file lacks them.
fn options(mode: Mode) -> Options {
    let direct = mode != Mode::Buffered;
    Options {
        memtable_bytes: if direct { 256 << 10 } else { 48 << 10 },
        journal_direct: direct,
        value_partitions: if mode == Mode::Direct { 0 } else { 4 },
        journal_ring_bytes: 2 << 20,
        stage_streams: Some(mode == Mode::DirectStreams),
        table_bytes: 64 << 10,
        level1_bytes: 256 << 10,
        block_cache_bytes: 256 << 10,
        l0_compaction_trigger: 2,
        ..Options::default()
    }
}

#[derive(Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

struct Batch {
    ops: Vec<Op>,
    sync: bool,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// FNV-1a, 64-bit: enough to tell a damaged or misplaced value.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in (part.len() as u64).to_le_bytes().iter().chain(part.iter()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn key_name(i: u64) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

fn encode_value(key: &[u8], batch: u64, op: u32, content: &[u8]) -> Vec<u8> {
    let (b, o) = (batch.to_le_bytes(), op.to_le_bytes());
    let sum = fnv(&[key, &b, &o, content]);
    let mut v = Vec::with_capacity(content.len() + VALUE_OVERHEAD);
    v.extend_from_slice(&b);
    v.extend_from_slice(&o);
    v.extend_from_slice(content);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// (batch id, op index) of a value whose checksum matches `key`.
fn decode_value(key: &[u8], v: &[u8]) -> Result<(u64, u32), String> {
    if v.len() < VALUE_OVERHEAD {
        return Err(format!("value of {} bytes is too short", v.len()));
    }
    let (head, rest) = v.split_at(12);
    let (content, sum) = rest.split_at(rest.len() - 8);
    let (b, o) = head.split_at(8);
    let stored = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
    if fnv(&[key, b, o, content]) != stored {
        return Err(format!("checksum mismatch in a value of {} bytes", v.len()));
    }
    Ok((
        u64::from_le_bytes(b.try_into().expect("8 bytes")),
        u32::from_le_bytes(o.try_into().expect("4 bytes")),
    ))
}

/// Batch `id` of the run seeded `seed`: the same on both sides of the pipe.
fn batch(seed: u64, id: u64) -> Batch {
    let mut rng = StdRng::seed_from_u64(splitmix(seed ^ splitmix(id)));
    let n = rng.random_range(1..=BATCH_OPS_MAX);
    let big = rng.random_ratio(1, 20).then(|| rng.random_range(0..n));
    let sync = rng.random_ratio(1, 4);
    let ops = (0..n)
        .map(|i| {
            let k = if rng.random_ratio(1, 4) {
                rng.random_range(0..KEYS_HOT)
            } else {
                rng.random_range(0..KEYS)
            };
            let key = key_name(k);
            if rng.random_ratio(1, 8) {
                return Op::Delete(key);
            }
            let len = if big == Some(i) {
                rng.random_range(VALUE_BIG)
            } else {
                rng.random_range(0..=VALUE_SMALL_MAX)
            };
            let mut content = vec![0u8; len];
            rng.fill_bytes(&mut content);
            let value = encode_value(&key, id, i as u32, &content);
            Op::Put(key, value)
        })
        .collect();
    Batch { ops, sync }
}

fn apply(model: &mut Model, b: &Batch) {
    for op in &b.ops {
        match op {
            Op::Put(k, v) => {
                model.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                model.remove(k);
            }
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let s = std::env::var(name).ok()?;
    Some(
        s.parse()
            .unwrap_or_else(|e| panic!("{name}={s:?} is not a number: {e}")),
    )
}

/// The child: writes batches forever, acknowledging each on stdout. Does
/// nothing when run as an ordinary test.
#[test]
fn kill_child_writer() {
    let Ok(dir) = std::env::var(ENV_DIR) else {
        return;
    };
    let seed = env_u64(ENV_SEED).expect("child seed");
    let first = env_u64(ENV_FIRST).expect("child first batch id");
    let started = Instant::now();
    let mode = match std::env::var(ENV_DIRECT).as_deref() {
        Ok("direct") => Mode::Direct,
        Ok("direct-streams") => Mode::DirectStreams,
        Ok(other) => panic!("{ENV_DIRECT}={other:?} names no mode"),
        Err(_) => Mode::Buffered,
    };
    // The parent closed its handle on `dir` before starting this child,
    // but a sibling child the other kill loop forked at that moment holds
    // a copy of its descriptors (and so of the directory lock) until it
    // execs: a lock refused for that moment is waited out.
    let db = loop {
        match Db::open(&dir, options(mode)) {
            Err(cairndb::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::WouldBlock
                    && started.elapsed() < Duration::from_secs(5) =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other.expect("child: open"),
        }
    };
    let mut out = std::io::stdout().lock();
    // The harness has printed `test kill_child_writer ... ` without a
    // newline: end that line so every ack starts its own.
    writeln!(out).expect("child: write newline");
    for id in first.. {
        let b = batch(seed, id);
        let mut wb = WriteBatch::new();
        for op in b.ops {
            match op {
                Op::Put(k, v) => wb.put(k, v).expect("child: batch put"),
                Op::Delete(k) => wb.delete(k).expect("child: batch delete"),
            }
        }
        db.write(wb, &WriteOptions { sync: b.sync })
            .unwrap_or_else(|e| panic!("child: write of batch {id} failed: {e}"));
        // A broken pipe means the parent is gone: stop rather than run on.
        writeln!(out, "{ACK}{id}").expect("child: write ack");
        out.flush().expect("child: flush ack");
        assert!(
            started.elapsed() < CHILD_LIFETIME_MAX,
            "child: never killed after {CHILD_LIFETIME_MAX:?}"
        );
    }
}

/// One line of a value for messages: where it came from and its size.
fn describe(key: &[u8], v: Option<&Vec<u8>>) -> String {
    match v {
        None => "absent".to_owned(),
        Some(v) => match decode_value(key, v) {
            Ok((b, o)) => format!("batch {b} op {o} ({} bytes)", v.len()),
            Err(e) => format!("unverifiable value: {e}"),
        },
    }
}

/// The first key where `got` and `want` differ, with both sides.
fn first_difference(got: &Model, want: &Model) -> Option<(Vec<u8>, String, String)> {
    let mut keys: Vec<&Vec<u8>> = got.keys().chain(want.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter().find_map(|k| {
        let (g, w) = (got.get(k), want.get(k));
        (g != w).then(|| (k.clone(), describe(k, w), describe(k, g)))
    })
}

/// Which prefix the reopened database holds: `Ok(false)` for the model
/// after the last acknowledged batch, `Ok(true)` for one more; `Err` says
/// what differs.
fn verify(db: &Db, before: &Model, after: &Model, rng: &mut StdRng) -> Result<bool, String> {
    let rows: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .collect::<cairndb::Result<_>>()
        .map_err(|e| format!("scan failed: {e}"))?;
    for w in rows.windows(2) {
        if w[0].0 >= w[1].0 {
            return Err(format!(
                "scan out of order: {:?} then {:?}",
                String::from_utf8_lossy(&w[0].0),
                String::from_utf8_lossy(&w[1].0)
            ));
        }
    }
    for (k, v) in &rows {
        if let Err(e) = decode_value(k, v) {
            return Err(format!("key {:?}: {e}", String::from_utf8_lossy(k)));
        }
    }
    let got: Model = rows.into_iter().collect();
    let committed = if got == *before {
        false
    } else if got == *after {
        true
    } else {
        let (key, want, have) = first_difference(&got, before).expect("models differ");
        let want_after = describe(&key, after.get(&key));
        let differing = got
            .keys()
            .chain(before.keys())
            .filter(|k| got.get(*k) != before.get(*k))
            .count();
        return Err(format!(
            "key {:?}: expected {want} (after the last acknowledged batch) or {want_after} \
             (after the one in flight), got {have}; {differing} keys differ",
            String::from_utf8_lossy(&key)
        ));
    };
    let model = if committed { after } else { before };
    for _ in 0..GETS_PER_ITER {
        let key = key_name(rng.random_range(0..KEYS));
        let got = db
            .get(&key)
            .map_err(|e| format!("get {:?} failed: {e}", String::from_utf8_lossy(&key)))?;
        if got.as_ref() != model.get(&key) {
            return Err(format!(
                "get {:?}: expected {}, got {} (the scan agreed with the model)",
                String::from_utf8_lossy(&key),
                describe(&key, model.get(&key)),
                describe(&key, got.as_ref())
            ));
        }
    }
    Ok(committed)
}

/// What one killed child did: the batch ids it acknowledged, in order.
struct ChildRun {
    acks: Vec<u64>,
}

/// Runs a child on `dir` from batch `first`, kills it after `delay`.
fn run_child(
    dir: &Path,
    seed: u64,
    first: u64,
    delay: Duration,
    iter: usize,
    mode: Mode,
) -> ChildRun {
    let exe = std::env::current_exe().expect("current_exe");
    let mut command = Command::new(&exe);
    if mode != Mode::Buffered {
        command.env(ENV_DIRECT, mode.name());
    }
    let mut child = command
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(ENV_DIR, dir)
        .env(ENV_SEED, seed.to_string())
        .env(ENV_FIRST, first.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start child {}: {e}", exe.display()));
    let stdout = child.stdout.take().expect("child stdout");
    let mut stderr = child.stderr.take().expect("child stderr");
    // Read both pipes while the child runs so it never blocks on a full one.
    let acks = std::thread::spawn(move || {
        let mut acks = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix(ACK) {
                acks.push(id.parse::<u64>().expect("ack line holds a batch id"));
            }
        }
        acks
    });
    let errors = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    std::thread::sleep(delay);
    child.kill().expect("kill child");
    let status = child.wait().expect("wait for child");
    let acks = acks.join().expect("ack reader");
    let errors = errors.join().expect("stderr reader");
    assert_eq!(
        status.signal(),
        Some(9),
        "iteration {iter}: the child exited on its own ({status}) instead of being killed; \
         stderr:\n{errors}"
    );
    for (i, &id) in acks.iter().enumerate() {
        assert_eq!(
            id,
            first + i as u64,
            "iteration {iter}: acknowledgement {i} names batch {id}, expected {}",
            first + i as u64
        );
    }
    ChildRun { acks }
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e3
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    kill_loop(Mode::Buffered);
}

/// The same with the journal written by direct IO through the staging
/// ring (`Options::journal_direct`): unsynced writes acknowledged while
/// only in the ring must be recovered from it.
#[test]
fn kill_9_loses_no_acknowledged_write_direct_journal() {
    kill_loop(Mode::Direct);
}

/// The same with the value streams staged too: an unsynced value
/// acknowledged while only in its stream's ring must be recovered from it.
#[test]
fn kill_9_loses_no_acknowledged_write_staged_streams() {
    kill_loop(Mode::DirectStreams);
}

fn kill_loop(mode: Mode) {
    let iters = env_u64("CAIRNDB_KILL_ITERS").unwrap_or(100) as usize;
    let seed = env_u64("CAIRNDB_KILL_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970");
        splitmix(t.as_nanos() as u64)
    });
    println!(
        "kill test ({}): {iters} kills, seed {seed} \
         (CAIRNDB_KILL_SEED, CAIRNDB_KILL_ITERS)",
        mode.name()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tmp: Option<tempfile::TempDir> = None;
    let mut model = Model::new();
    let mut next = 1u64;
    let mut recovery: Vec<Duration> = Vec::with_capacity(iters);
    let mut violations: Vec<String> = Vec::new();
    let (mut verified, mut in_flight_committed, mut no_ack) = (0u64, 0u64, 0u64);
    // Shape of the reopened databases: proof that flushes and compactions
    // ran in the children.
    let (mut deepest_level, mut tables_max) = (0usize, 0usize);
    let started = Instant::now();
    for iter in 0..iters {
        if iter % DIR_ITERS == 0 || tmp.is_none() {
            tmp = Some(tempfile::tempdir().expect("tempdir"));
            model.clear();
        }
        let dir = tmp.as_ref().expect("tempdir").path().to_path_buf();
        let delay = Duration::from_millis(rng.random_range(5..=500));
        let run = run_child(&dir, seed, next, delay, iter, mode);
        // The model after every acknowledged batch, and after the one in flight.
        let last = run.acks.last().copied().unwrap_or(next - 1);
        for id in next..=last {
            apply(&mut model, &batch(seed, id));
        }
        verified += run.acks.len() as u64;
        no_ack += u64::from(run.acks.is_empty());
        let mut after = model.clone();
        apply(&mut after, &batch(seed, last + 1));

        let t = Instant::now();
        let db = match Db::open(&dir, options(mode)) {
            Ok(db) => db,
            Err(e) => {
                violations.push(format!(
                    "iteration {iter} seed {seed}: reopen failed after the child acknowledged \
                     batches {next}..={last}: {e} (directory kept: {})",
                    keep(&mut tmp)
                ));
                continue;
            }
        };
        recovery.push(t.elapsed());
        match verify(&db, &model, &after, &mut rng) {
            Ok(committed) => {
                let levels = db.stats().tables_per_level;
                let deepest = levels.iter().rposition(|&n| n > 0).unwrap_or(0);
                deepest_level = deepest_level.max(deepest);
                tables_max = tables_max.max(levels.iter().sum());
                next = last + 1;
                if committed {
                    in_flight_committed += 1;
                    model = after;
                    next += 1;
                }
                if let Err(e) = db.close() {
                    violations.push(format!(
                        "iteration {iter} seed {seed}: close after verifying failed: {e} \
                         (directory kept: {})",
                        keep(&mut tmp)
                    ));
                }
            }
            Err(msg) => {
                drop(db);
                violations.push(format!(
                    "iteration {iter} seed {seed}: after acknowledged batches {next}..={last} \
                     (kill at {delay:?}): {msg} (directory kept: {})",
                    keep(&mut tmp)
                ));
            }
        }
    }
    recovery.sort();
    let (p50, p99, max) = if recovery.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (
            percentile(&recovery, 50),
            percentile(&recovery, 99),
            percentile(&recovery, 100),
        )
    };
    println!(
        "kill test: {iters} kills in {:.1} s, {verified} acknowledged batches verified, \
         {in_flight_committed} in-flight batches found committed, {no_ack} kills before any ack, \
         {} violations; recovery (Db::open) p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms",
        started.elapsed().as_secs_f64(),
        violations.len()
    );
    println!("kill test: up to {tables_max} tables, deepest level {deepest_level}");
    for v in &violations {
        println!("  VIOLATION {v}");
    }
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations, first: {}",
        violations.len(),
        violations[0]
    );
}

/// Keeps the current directory for inspection (the next iteration starts a
/// fresh one) and returns its path.
fn keep(tmp: &mut Option<tempfile::TempDir>) -> String {
    match tmp.take() {
        Some(t) => t.keep().display().to_string(),
        None => "none".to_owned(),
    }
}
