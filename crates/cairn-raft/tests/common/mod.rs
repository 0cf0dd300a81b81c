//! A cluster of `cairn-raft-node` child processes on loopback ports, for
//! the failover and partition tests. Each node has a directory and a port
//! for its whole life, so a killed node restarts on the same state and
//! address. Children are killed when the cluster is dropped, so a failed
//! test leaves no process behind.
//!
//! Ports: a node's first start listens on port 0 and the harness reads
//! the address it bound from its log ("serving on ADDR"), so no port is
//! chosen by one process and bound by another (two tests picking the same
//! released port would join each other's clusters). A restart asks for
//! that address again. A test that panics prints every node's log.

#![allow(dead_code, reason = "each test file uses part of the harness")]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_raft::client::Client;
use cairn_raft::service::DEBUG_HOOKS_ENV;

/// Longest any condition is waited for.
pub const WAIT_MAX: Duration = Duration::from_secs(30);

pub struct Proc {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    pub nodes: Vec<Proc>,
    /// Extra flags every node starts with (the snapshot policy).
    flags: Vec<String>,
    _root: tempfile::TempDir,
    pub client: Client,
}

/// What a node prints to its log once it serves, before its address.
const SERVING_ON: &str = " serving on ";

/// Where a node listens before it has bound a port of its own.
const ANY_PORT: &str = "127.0.0.1:0";

fn log_path(p: &Proc) -> PathBuf {
    p.dir.with_extension("log")
}

/// The address in the last "serving on" line of `log`.
fn served_addr(log: &str) -> Option<String> {
    let line = log.lines().rev().find(|l| l.contains(SERVING_ON))?;
    let (_, addr) = line.split_once(SERVING_ON)?;
    Some(addr.trim().to_string())
}

impl Cluster {
    /// Starts `n` nodes (ids 1..=n) with `flags`, initializes them as one
    /// cluster and waits until all agree on a leader.
    pub async fn start(n: u64, flags: &[&str]) -> Cluster {
        let cluster = Cluster::start_uninitialized(n, flags).await;
        let members: BTreeMap<u64, serde_json::Value> = cluster
            .nodes
            .iter()
            .map(|p| (p.id, serde_json::json!({ "addr": p.addr })))
            .collect();
        let init = serde_json::to_string(&members).expect("json");
        cluster
            .client
            .post_to(&cluster.nodes[0].addr, "/cluster/init", init)
            .await
            .expect("init answers");
        cluster.wait_for_leader(None).await;
        cluster
    }

    /// Starts `n` nodes (ids 1..=n) with `flags`, each on its own.
    pub async fn start_uninitialized(n: u64, flags: &[&str]) -> Cluster {
        let root = tempfile::tempdir().expect("a temporary directory");
        let mut nodes: Vec<Proc> = (1..=n)
            .map(|id| Proc {
                id,
                addr: ANY_PORT.to_string(),
                dir: root.path().join(format!("node-{id}")),
                child: None,
            })
            .collect();
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        for p in &mut nodes {
            p.child = Some(start_child(p, &flags));
        }
        for p in &mut nodes {
            p.addr = bound_addr(p);
        }
        let client = Client::new(nodes.iter().map(|p| p.addr.clone()));
        let cluster = Cluster {
            nodes,
            flags,
            _root: root,
            client,
        };
        for p in &cluster.nodes {
            cluster.wait_answers(p).await;
        }
        cluster
    }

    pub fn proc(&self, id: u64) -> &Proc {
        &self.nodes[(id - 1) as usize]
    }

    /// Starts node `id` (again) on its directory and port, and waits until
    /// it answers.
    pub async fn spawn(&mut self, id: u64) {
        let flags = self.flags.clone();
        let p = &mut self.nodes[(id - 1) as usize];
        assert!(p.child.is_none(), "node {id} is running");
        assert!(p.addr != ANY_PORT, "node {id} has served before");
        p.child = Some(start_child(p, &flags));
        let p = &self.nodes[(id - 1) as usize];
        self.wait_answers(p).await;
    }

    async fn wait_answers(&self, p: &Proc) {
        let start = Instant::now();
        while self.client.metrics(&p.addr).await.is_err() {
            assert!(
                start.elapsed() < WAIT_MAX,
                "node {} did not answer on {}",
                p.id,
                p.addr
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kills node `id` with SIGKILL (no shutdown of any kind) and reaps it.
    pub fn kill(&mut self, id: u64) {
        let p = &mut self.nodes[(id - 1) as usize];
        let mut child = p.child.take().expect("node is running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }

    pub fn running(&self) -> impl Iterator<Item = &Proc> {
        self.nodes.iter().filter(|p| p.child.is_some())
    }

    /// Waits until every running member names the same leader, other than
    /// `not`, and that leader calls itself leader; returns its id.
    pub async fn wait_for_leader(&self, not: Option<u64>) -> u64 {
        let start = Instant::now();
        loop {
            if let Some(l) = self.agreed_leader().await
                && Some(l) != not
            {
                return l;
            }
            if start.elapsed() >= WAIT_MAX {
                panic!("no leader for {WAIT_MAX:?}:\n{}", self.states().await);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Each running node's state, term, vote and leader as it reports
    /// them, one line per node (for a failure message).
    async fn states(&self) -> String {
        let mut out = String::new();
        for p in self.running() {
            let line = match self.client.metrics(&p.addr).await {
                Ok(m) => format!(
                    "node {} at {}: {:?}, term {}, vote {}, leader {:?}, applied {:?}",
                    p.id,
                    p.addr,
                    m.state,
                    m.current_term,
                    m.vote,
                    m.current_leader,
                    m.last_applied.map(|l| l.index)
                ),
                Err(e) => format!("node {} at {}: no metrics: {e}", p.id, p.addr),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    async fn agreed_leader(&self) -> Option<u64> {
        let mut leader = None;
        for p in self.running() {
            let m = self.client.metrics(&p.addr).await.ok()?;
            if m.membership_config
                .membership()
                .voter_ids()
                .next()
                .is_none()
            {
                continue; // not initialized, nor added: no member yet
            }
            let l = m.current_leader?;
            if leader.is_some_and(|x| x != l) {
                return None;
            }
            leader = Some(l);
        }
        let l = leader?;
        let m = self.client.metrics(&self.proc(l).addr).await.ok()?;
        (m.current_leader == Some(l) && m.state.is_leader()).then_some(l)
    }

    /// Waits until every running node has applied as far as the leader has
    /// (call it once writes have stopped).
    pub async fn wait_caught_up(&self) {
        let start = Instant::now();
        loop {
            let mut applied = Vec::new();
            for p in self.running() {
                let m = self.client.metrics(&p.addr).await.ok();
                applied.push(m.and_then(|m| m.last_applied).map(|l| l.index));
            }
            if applied.iter().all(|a| a.is_some() && *a == applied[0]) {
                return;
            }
            assert!(
                start.elapsed() < WAIT_MAX,
                "nodes did not catch up: applied {applied:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every pair node `id` has applied, read page by page with stale range
    /// reads (the node alone answers, as it has applied).
    pub async fn pairs(&self, id: u64) -> BTreeMap<String, String> {
        let addr = &self.proc(id).addr;
        let mut out = BTreeMap::new();
        let mut from = String::new();
        loop {
            let page = self
                .client
                .range_stale(addr, &from, None, cairn_raft::service::RANGE_PAIRS_MAX)
                .await
                .expect("a stale range read");
            let Some((last, _)) = page.last() else {
                return out;
            };
            from = format!("{last}\0");
            out.extend(page);
        }
    }

    /// Cuts node `id` off from its peers (`true`) or heals it (`false`).
    pub async fn partition(&self, id: u64, cut: bool) {
        self.client
            .post_to(&self.proc(id).addr, "/debug/partition", cut.to_string())
            .await
            .expect("the partition hook answers");
    }
}

/// Starts node `p` on its address, its log appended to.
fn start_child(p: &Proc, flags: &[String]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(p))
        .expect("a log file");
    Command::new(env!("CARGO_BIN_EXE_cairn-raft-node"))
        .args(["--id", &p.id.to_string(), "--listen", &p.addr, "--dir"])
        .arg(&p.dir)
        .args(flags)
        .env(DEBUG_HOOKS_ENV, "1")
        // Elections and membership changes, for the log a failure prints.
        .env("RUST_LOG", "warn,openraft::engine=info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the node binary starts")
}

/// Waits until node `p`, started on port 0, logs the address it bound.
fn bound_addr(p: &mut Proc) -> String {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(log_path(p)).unwrap_or_default();
        if let Some(addr) = served_addr(&log) {
            return addr;
        }
        let child = p.child.as_mut().expect("node is running");
        if let Some(status) = child.try_wait().expect("the node's status") {
            panic!("node {} exited ({status}) before serving:\n{log}", p.id);
        }
        assert!(
            start.elapsed() < WAIT_MAX,
            "node {} logged no address:\n{log}",
            p.id
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for p in &self.nodes {
                let log = std::fs::read_to_string(log_path(p)).unwrap_or_default();
                eprintln!("---- node {} at {}: its log ----\n{log}", p.id, p.addr);
            }
        }
        for p in &mut self.nodes {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
