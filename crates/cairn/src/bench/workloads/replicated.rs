//! `replicated`: synced puts through a three-node cairn-raft cluster on
//! this machine against synced puts into one CairnDB (issue 40).
//!
//! Two phases, measured in `ROUNDS` alternating slices (one database and
//! one cluster for all of them, so machine drift spreads over both; each
//! row adds its slices up):
//! 1. `one db, synced puts xC`: C threads put one key after another
//!    (16-byte keys, `value_len`-byte values), each put its own synced
//!    batch. Concurrent puts share fsyncs by group commit.
//! 2. `3-node cluster, synced puts xC`: three `cairn_raft::service` nodes
//!    in this process, on loopback ports, each over its own CairnDB in the
//!    scratch directory, with the service's default configuration; C
//!    client tasks (`cairn_raft::client::Client`, HTTP) put one key after
//!    another. A put is answered once a quorum has appended it (a synced
//!    write on the leader and on a follower) and the leader has applied
//!    it; the leader groups concurrent puts into one entry
//!    (`cairn_raft::service`'s proposer). Its limit is row 1's rate; the
//!    target, `TARGET`, is half of it.
//!
//! 3. `3 dbs, quorum synced puts xC`: what the cluster's storage alone
//!    allows on this machine: three CairnDB databases (the nodes'
//!    options), C writer threads each putting every put synced into the
//!    first database while two helper threads of its own put it synced
//!    into the other two; a put is answered once the first and one of the
//!    others have it, as a Raft leader answers once it and one follower
//!    have appended. No network, no consensus, no JSON: the cluster
//!    cannot beat this row, so `3 dbs / one db` bounds the cluster's
//!    ratio from above on a machine whose three nodes share one disk.
//!
//! All sides run in this process on the same disk, so the cluster's
//! three nodes share the CPU and the device that one database has alone.
//! Checked afterwards: the cluster's nodes all reach the leader's applied
//! index, and a sample of keys read back through the leader
//! (linearizable reads) and from the database holds what was put.
//!
//! Engines other than `cairndb` get a SKIP row: the cluster stores in
//! CairnDB, and the ratio compares it with the same engine alone.

use super::{Ctx, Outcome, make_key, parallel_for};
use crate::bench::BenchResult;
use cairn_raft::client::Client;
use cairn_raft::service::{Node, config};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const WORKLOAD: &str = "replicated";
const KEY_LEN: usize = 16;
/// Slices per phase.
const ROUNDS: usize = 3;
/// Cluster puts per second over one database's: at least.
pub const TARGET: f64 = 0.5;
/// Nodes in the cluster.
const NODES: u64 = 3;
/// Longest the cluster may take to elect a leader or catch up.
const WAIT_MAX: Duration = Duration::from_secs(30);
/// Keys read back per phase.
const CHECKED_MAX: u64 = 200;

#[derive(Debug, Clone)]
pub struct Config {
    /// Concurrent writers on each side.
    pub clients: usize,
    /// Seconds per phase, all its slices together.
    pub secs: f64,
    pub value_len: usize,
}

/// The value of key `i`: its index in hex, then filler, `len` bytes of
/// ASCII (the service's values are strings).
fn value(i: u64, len: usize) -> String {
    let mut v = format!("{i:016x}");
    while v.len() < len {
        v.push(char::from(b'a' + (v.len() % 26) as u8));
    }
    v.truncate(len.max(16));
    v
}

/// Key `i` of writer `w`: writers take disjoint keys.
fn key_index(w: usize, i: u64) -> u64 {
    (w as u64) << 40 | i
}

/// The key as the service takes it (a string; `make_key`'s bytes in hex
/// would be 32 bytes, so the index is printed to `KEY_LEN` digits).
fn service_key(i: u64) -> String {
    format!("{i:0KEY_LEN$x}")
}

pub fn run(ctx: &mut Ctx, cfg: &Config) -> BenchResult<()> {
    if ctx.engine_name != "cairndb" {
        ctx.skip(
            WORKLOAD,
            "all phases",
            "the cluster stores in CairnDB: compared with cairndb alone",
        );
        return Ok(());
    }
    ctx.fresh()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cluster = runtime.block_on(Cluster::start(&ctx.root))?;
    let clients = cfg.clients.max(1);
    let slice = Duration::from_secs_f64((cfg.secs / ROUNDS as f64).max(0.05));
    let single_phase = format!("one db, synced puts x{clients}");
    let cluster_phase = format!("{NODES}-node cluster, synced puts x{clients}");
    let quorum_phase = format!("{NODES} dbs, quorum synced puts x{clients}");
    let quorum = Quorum::open(&ctx.root, clients)?;
    // Next key index of each writer, on each side, across slices.
    let single_next: Arc<Vec<AtomicU64>> =
        Arc::new((0..clients).map(|_| AtomicU64::new(0)).collect());
    let cluster_next: Arc<Vec<AtomicU64>> =
        Arc::new((0..clients).map(|_| AtomicU64::new(0)).collect());
    let quorum_next: Arc<Vec<AtomicU64>> =
        Arc::new((0..clients).map(|_| AtomicU64::new(0)).collect());
    let first = ctx.rows.len();
    let log_before = cluster.last_log_index();
    for _ in 0..ROUNDS {
        ctx.phase(WORKLOAD, &single_phase, "ops/s", None, |db, progress| {
            let counts = parallel_for(clients, slice, |w, stop| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let i = single_next[w].fetch_add(1, Ordering::Relaxed);
                    let k = make_key(key_index(w, i), KEY_LEN);
                    let v = value(key_index(w, i), cfg.value_len).into_bytes();
                    db.write_batch(&[(k, Some(v))], true)?;
                    progress.add(1, (KEY_LEN + cfg.value_len) as u64);
                    n += 1;
                }
                Ok(n)
            })?;
            let ops: u64 = counts.iter().sum();
            Ok(Outcome {
                ops,
                user_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                written_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                ..Outcome::default()
            })
        });
        ctx.phase(WORKLOAD, &cluster_phase, "ops/s", None, |_, progress| {
            let ops = runtime.block_on(cluster.put_for(
                clients,
                slice,
                cfg.value_len,
                &cluster_next,
                progress,
            ))?;
            Ok(Outcome {
                ops,
                user_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                written_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                ..Outcome::default()
            })
        });
        ctx.phase(WORKLOAD, &quorum_phase, "ops/s", None, |_, progress| {
            let counts = parallel_for(clients, slice, |w, stop| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let i = quorum_next[w].fetch_add(1, Ordering::Relaxed);
                    let k = make_key(key_index(w, i), KEY_LEN);
                    let v = value(key_index(w, i), cfg.value_len).into_bytes();
                    quorum.put(w, i, k, v)?;
                    progress.add(1, (KEY_LEN + cfg.value_len) as u64);
                    n += 1;
                }
                Ok(n)
            })?;
            let ops: u64 = counts.iter().sum();
            Ok(Outcome {
                ops,
                user_bytes: ops * (KEY_LEN + cfg.value_len) as u64,
                written_bytes: ops * (KEY_LEN + cfg.value_len) as u64 * NODES,
                ..Outcome::default()
            })
        });
    }
    ctx.merge_since(first);
    let entries = cluster.last_log_index() - log_before;
    // Checks: the database and the cluster hold what was put.
    let db = ctx.db()?;
    let mut checked = Ok(());
    'check: for (w, next) in single_next.iter().enumerate() {
        let n = next.load(Ordering::Relaxed);
        for i in (0..n).step_by((n / (CHECKED_MAX / clients as u64).max(1)).max(1) as usize) {
            let k = make_key(key_index(w, i), KEY_LEN);
            let want = value(key_index(w, i), cfg.value_len).into_bytes();
            if db.get(&k)?.as_deref() != Some(want.as_slice()) {
                checked = Err(format!("one db: key {} lost its value", key_index(w, i)));
                break 'check;
            }
        }
    }
    let cluster_checked = runtime.block_on(cluster.check(&cluster_next, cfg.value_len, clients));
    let quorum_checked = quorum.check(&quorum_next, cfg.value_len, clients);
    runtime.block_on(cluster.shutdown());
    let rows = &mut ctx.rows[first..];
    let under_ceiling = rows_ratio(rows);
    let base = rows
        .first()
        .filter(|r| r.failure.is_none())
        .map(|r| r.rate());
    if let Some(single) = rows.first_mut()
        && let Err(e) = checked
    {
        single.failure = Some(e);
    }
    if let Some(row) = rows.get_mut(1) {
        if let Some(base) = base {
            row.limit = Some((format!("one db x{clients}"), base));
            row.target = Some(TARGET);
        }
        row.note = Some(format!(
            "{} puts in {entries} log entries ({:.1} an entry)",
            row.ops,
            row.ops as f64 / entries.max(1) as f64
        ));
        if let Err(e) = cluster_checked
            && row.failure.is_none()
        {
            row.failure = Some(e);
        }
    }
    if let Some(row) = rows.get_mut(2) {
        if let Some(base) = base {
            row.limit = Some((format!("one db x{clients}"), base));
        }
        row.note = Some(format!(
            "the cluster's storage alone: its ceiling here (cluster {under_ceiling:.2} of it)"
        ));
        if let Err(e) = quorum_checked
            && row.failure.is_none()
        {
            row.failure = Some(e);
        }
    }
    Ok(())
}

/// The cluster's rate over the quorum row's (0 if either is missing).
fn rows_ratio(rows: &[crate::bench::Row]) -> f64 {
    match (rows.get(1), rows.get(2)) {
        (Some(c), Some(q)) if q.rate() > 0.0 => c.rate() / q.rate(),
        _ => 0.0,
    }
}

/// A put for a helper: which put of its writer, the key and the value.
type Job = (u64, Vec<u8>, Vec<u8>);

/// Three databases written as a Raft quorum writes: each writer puts into
/// the first itself and hands the put to two helper threads, one per
/// other database, answering once one of them is done too.
struct Quorum {
    dbs: Vec<cairndb::Db>,
    /// Per writer: the senders to its two helpers.
    helpers: Vec<[std::sync::mpsc::SyncSender<Job>; 2]>,
    /// Per writer: where its helpers report the put they finished (or
    /// their error).
    done: Vec<std::sync::Mutex<std::sync::mpsc::Receiver<Result<u64, String>>>>,
}

impl Quorum {
    fn open(root: &std::path::Path, writers: usize) -> BenchResult<Quorum> {
        let mut dbs = Vec::new();
        for n in 1..=NODES {
            let dir = root.join(format!("quorum-{n}"));
            dbs.push(cairndb::Db::open(dir, cairndb::Options::default())?);
        }
        let (mut helpers, mut done) = (Vec::new(), Vec::new());
        for _ in 0..writers {
            let (report, reports) = std::sync::mpsc::channel();
            let pair = [1, 2].map(|d| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(1024);
                let (db, report) = (dbs[d].clone(), report.clone());
                std::thread::spawn(move || {
                    for (i, k, v) in rx {
                        let r = db.put_opt(&k, &v, &cairndb::WriteOptions::synced());
                        let r = r.map(|()| i).map_err(|e| e.to_string());
                        if report.send(r).is_err() {
                            return;
                        }
                    }
                });
                tx
            });
            helpers.push(pair);
            done.push(std::sync::Mutex::new(reports));
        }
        Ok(Quorum { dbs, helpers, done })
    }

    /// Writer `w`'s put number `i`: synced into the first database here,
    /// and into the others by `w`'s helpers; returns once one of them has
    /// it too.
    fn put(&self, w: usize, i: u64, k: Vec<u8>, v: Vec<u8>) -> BenchResult<()> {
        for h in &self.helpers[w] {
            h.send((i, k.clone(), v.clone()))
                .map_err(|_| "a quorum helper stopped")?;
        }
        self.dbs[0].put_opt(&k, &v, &cairndb::WriteOptions::synced())?;
        let done = self.done[w].lock().map_err(|_| "poisoned")?;
        loop {
            // A report of an earlier put is the slower helper's: skipped.
            match done.recv().map_err(|_| "the quorum helpers stopped")? {
                Ok(got) if got == i => return Ok(()),
                Ok(_) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Every database holds a sample of what was put (helpers may still
    /// be finishing the last puts: waits for them first).
    fn check(self, next: &[AtomicU64], value_len: usize, clients: usize) -> Result<(), String> {
        let Quorum { dbs, helpers, done } = self;
        drop(helpers);
        for d in &done {
            let d = d.lock().map_err(|_| "poisoned")?;
            // Each helper's loop ends once its sender is gone and its
            // queue is empty, dropping its report sender.
            while let Ok(r) = d.recv() {
                r?;
            }
        }
        for (n, db) in dbs.iter().enumerate() {
            for (w, next) in next.iter().enumerate() {
                let top = next.load(Ordering::Relaxed);
                let step = (top / (CHECKED_MAX / clients as u64).max(1)).max(1);
                for i in (0..top).step_by(step as usize) {
                    let k = make_key(key_index(w, i), KEY_LEN);
                    let want = value(key_index(w, i), value_len).into_bytes();
                    let got = db.get(&k).map_err(|e| e.to_string())?;
                    if got.as_deref() != Some(want.as_slice()) {
                        return Err(format!("quorum db {}: key {} lost", n + 1, key_index(w, i)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Three nodes in this process and a client of them.
struct Cluster {
    nodes: Vec<Node>,
    client: Client,
}

impl Cluster {
    /// Starts the nodes over directories under `root`, initializes them as
    /// one cluster, and waits for a leader they all follow.
    async fn start(root: &std::path::Path) -> BenchResult<Cluster> {
        let mut nodes = Vec::new();
        for id in 1..=NODES {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let dir = root.join(format!("node-{id}"));
            nodes.push(Node::start(id, dir, listener, config()).await?);
        }
        let client = Client::new(nodes.iter().map(|n| n.addr().to_string()));
        let members: BTreeMap<u64, serde_json::Value> = nodes
            .iter()
            .map(|n| (n.id(), serde_json::json!({ "addr": n.addr().to_string() })))
            .collect();
        let init = serde_json::to_string(&members)?;
        client
            .post_to(&nodes[0].addr().to_string(), "/cluster/init", init)
            .await?;
        let start = Instant::now();
        loop {
            let leaders: Vec<Option<u64>> = nodes
                .iter()
                .map(|n| n.raft().metrics().borrow().current_leader)
                .collect();
            if let Some(l) = leaders[0]
                && leaders.iter().all(|x| *x == Some(l))
            {
                break;
            }
            if start.elapsed() > WAIT_MAX {
                return Err(format!("no leader after {WAIT_MAX:?}: {leaders:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The first put finds the leader (a follower answers 421).
        client.put("warm-up", "x").await?;
        Ok(Cluster { nodes, client })
    }

    /// `clients` tasks put for `run_for`, each continuing its own keys at
    /// `next`; returns the puts answered.
    async fn put_for(
        &self,
        clients: usize,
        run_for: Duration,
        value_len: usize,
        next: &Arc<Vec<AtomicU64>>,
        progress: &Arc<crate::bench::Progress>,
    ) -> BenchResult<u64> {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..clients)
            .map(|w| {
                let (client, stop, next) = (self.client.clone(), stop.clone(), next.clone());
                let progress = progress.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let i = next[w].fetch_add(1, Ordering::Relaxed);
                        let k = key_index(w, i);
                        client
                            .put(&service_key(k), &value(k, value_len))
                            .await
                            .map_err(|e| format!("put {k}: {e}"))?;
                        progress.add(1, (KEY_LEN + value_len) as u64);
                        n += 1;
                    }
                    Ok::<u64, String>(n)
                })
            })
            .collect();
        tokio::time::sleep(run_for).await;
        stop.store(true, Ordering::Relaxed);
        let mut ops = 0;
        for t in tasks {
            ops += t.await.map_err(|e| format!("a client task: {e}"))??;
        }
        Ok(ops)
    }

    /// Waits until every node has applied what the leader has, then reads
    /// a sample of the keys back through the leader.
    async fn check(
        &self,
        next: &Arc<Vec<AtomicU64>>,
        value_len: usize,
        clients: usize,
    ) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let applied: Vec<Option<u64>> = self
                .nodes
                .iter()
                .map(|n| n.raft().metrics().borrow().last_applied.map(|l| l.index))
                .collect();
            if applied.iter().all(|a| a.is_some() && *a == applied[0]) {
                break;
            }
            if start.elapsed() > WAIT_MAX {
                return Err(format!("nodes did not catch up: applied {applied:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (w, next) in next.iter().enumerate() {
            // A put whose slice ended while it was in flight was answered
            // anyway (the tasks finish their put): every index below
            // `next` was put.
            let n = next.load(Ordering::Relaxed);
            let step = (n / (CHECKED_MAX / clients as u64).max(1)).max(1);
            for i in (0..n).step_by(step as usize) {
                let k = key_index(w, i);
                let got = self
                    .client
                    .get(&service_key(k))
                    .await
                    .map_err(|e| format!("get {k}: {e}"))?;
                if got.as_deref() != Some(value(k, value_len).as_str()) {
                    return Err(format!("cluster: key {k} reads {got:?}"));
                }
            }
        }
        Ok(())
    }

    /// The index of the last entry in the longest log of the nodes.
    fn last_log_index(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|n| n.raft().metrics().borrow().last_log_index)
            .max()
            .unwrap_or(0)
    }

    /// Stops the nodes.
    async fn shutdown(self) {
        for n in self.nodes {
            n.shutdown().await;
        }
    }
}
