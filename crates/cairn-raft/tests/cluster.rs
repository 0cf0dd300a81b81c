//! Three nodes in one process on loopback ports: a cluster is formed
//! over HTTP, writes and linearizable reads go through the leader, the
//! followers apply what the leader committed, and a node added after the
//! log was purged catches up from a snapshot sent over HTTP.
//!
//! Every wait is bounded (`WAIT_MAX`); requests go only to 127.0.0.1.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_raft::Response;
use cairn_raft::service::{AddLearner, ErrorBody, Node, config};
use openraft::{BasicNode, RaftMetrics};
use reqwest::StatusCode;
use serde_json::json;

/// Longest any condition is waited for.
const WAIT_MAX: Duration = Duration::from_secs(20);

async fn start(id: u64, dir: &tempfile::TempDir, cfg: openraft::Config) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    Node::start(id, dir.path(), listener, cfg)
        .await
        .expect("the node starts")
}

fn url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.addr())
}

/// Polls `what` until it holds, for at most `WAIT_MAX`.
async fn wait_until<F: FnMut() -> bool>(what: &str, mut f: F) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT_MAX, "waited {WAIT_MAX:?} for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn metrics(http: &reqwest::Client, node: &Node) -> RaftMetrics<u64, BasicNode> {
    http.get(url(node, "/metrics"))
        .send()
        .await
        .expect("metrics answer")
        .json()
        .await
        .expect("metrics decode")
}

async fn put(http: &reqwest::Client, node: &Node, key: &str, value: &str) -> Response {
    let r = http
        .put(url(node, &format!("/kv/{key}")))
        .body(value.to_owned())
        .send()
        .await
        .expect("put answers");
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.expect("a Response")
}

async fn get(http: &reqwest::Client, node: &Node, key: &str) -> (StatusCode, String) {
    let r = http
        .get(url(node, &format!("/kv/{key}")))
        .send()
        .await
        .expect("get answers");
    (r.status(), r.text().await.expect("a body"))
}

/// Initializes `nodes[0]` alone, adds the others as learners, makes all
/// voters; returns once node 1 leads the three.
async fn form_cluster(http: &reqwest::Client, nodes: &[Node]) {
    let leader = &nodes[0];
    let init: BTreeMap<u64, BasicNode> =
        [(leader.id(), BasicNode::new(leader.addr().to_string()))].into();
    let r = http
        .post(url(leader, "/cluster/init"))
        .json(&init)
        .send()
        .await
        .expect("init answers");
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);
    let raft = leader.raft().clone();
    wait_until("node 1 to lead", || {
        raft.metrics().borrow().current_leader == Some(leader.id())
    })
    .await;
    for n in &nodes[1..] {
        let body = AddLearner {
            id: n.id(),
            addr: n.addr().to_string(),
        };
        let r = http
            .post(url(leader, "/cluster/add-learner"))
            .json(&body)
            .send()
            .await
            .expect("add-learner answers");
        assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);
    }
    let voters: Vec<u64> = nodes.iter().map(Node::id).collect();
    let r = http
        .post(url(leader, "/cluster/change-membership"))
        .json(&voters)
        .send()
        .await
        .expect("change-membership answers");
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_write_and_read_through_the_leader() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(start(i as u64 + 1, dir, config()).await);
    }
    let http = reqwest::Client::new();
    form_cluster(&http, &nodes).await;
    let leader = &nodes[0];
    let m = metrics(&http, leader).await;
    assert_eq!(m.current_leader, Some(1));
    let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
    assert_eq!(voters, vec![1, 2, 3]);

    assert_eq!(
        put(&http, leader, "apple", "red").await,
        Response::Previous(None)
    );
    assert_eq!(
        put(&http, leader, "apple", "green").await,
        Response::Previous(Some("red".into()))
    );
    assert_eq!(
        get(&http, leader, "apple").await,
        (StatusCode::OK, "green".into())
    );
    let r = http
        .delete(url(leader, "/kv/apple"))
        .send()
        .await
        .expect("delete answers");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<Response>().await.expect("a Response"),
        Response::Previous(Some("green".into()))
    );
    assert_eq!(get(&http, leader, "apple").await.0, StatusCode::NOT_FOUND);
    for i in 0..19 {
        put(&http, leader, &format!("k{i:02}"), &format!("v{i}")).await;
    }
    // A value larger than axum's default body limit, in the request and
    // in the append that replicates it.
    let big = "x".repeat(3 << 20);
    put(&http, leader, "k19", &big).await;
    assert_eq!(
        get(&http, leader, "k19").await,
        (StatusCode::OK, big.clone())
    );

    // A follower sends clients to the leader.
    let r = http
        .get(url(&nodes[1], "/kv/k00"))
        .send()
        .await
        .expect("follower answers");
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
    let body: ErrorBody = r.json().await.expect("an error body");
    assert_eq!(
        body.leader,
        Some(AddLearner {
            id: 1,
            addr: leader.addr().to_string()
        })
    );
    let r = http
        .put(url(&nodes[2], "/kv/x"))
        .body("y")
        .send()
        .await
        .expect("follower answers");
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);

    // The followers apply everything the leader applied.
    let applied = leader.raft().metrics().borrow().last_applied;
    for n in &nodes[1..] {
        let raft = n.raft().clone();
        wait_until("a follower to apply", || {
            raft.metrics().borrow().last_applied >= applied
        })
        .await;
        let pairs = n.state_machine().pairs().expect("pairs");
        assert_eq!(pairs.len(), 20, "node {}", n.id());
        assert_eq!(pairs[0], ("k00".to_string(), "v0".to_string()));
        assert_eq!(pairs[19].1.len(), big.len());
    }
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_learner_catches_up_from_a_snapshot() {
    // Snapshots every 10 entries, and the log purged right behind them.
    let cfg = openraft::Config {
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(10),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        // Several chunks per snapshot.
        snapshot_max_chunk_size: 64 << 10,
        ..config()
    };
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let first = start(1, &dirs[0], cfg.clone()).await;
    let http = reqwest::Client::new();
    let r = http
        .post(url(&first, "/cluster/init"))
        .json(&json!({"1": {"addr": first.addr().to_string()}}))
        .send()
        .await
        .expect("init answers");
    assert_eq!(r.status(), StatusCode::OK);
    let raft = first.raft().clone();
    wait_until("node 1 to lead", || {
        raft.metrics().borrow().current_leader == Some(1)
    })
    .await;
    let value = |i: usize| format!("v{i}-{}", "y".repeat(8 << 10));
    for i in 0..35 {
        put(&http, &first, &format!("k{i:02}"), &value(i)).await;
    }
    wait_until("the log to be purged behind a snapshot", || {
        raft.metrics()
            .borrow()
            .purged
            .is_some_and(|p| p.index >= 20)
    })
    .await;

    let late = start(2, &dirs[1], cfg).await;
    let r = http
        .post(url(&first, "/cluster/add-learner"))
        .json(&AddLearner {
            id: 2,
            addr: late.addr().to_string(),
        })
        .send()
        .await
        .expect("add-learner answers");
    assert_eq!(r.status(), StatusCode::OK, "{:?}", r.text().await);
    let applied = raft.metrics().borrow().last_applied;
    let late_raft = late.raft().clone();
    wait_until("the learner to apply", || {
        late_raft.metrics().borrow().last_applied >= applied
    })
    .await;
    let snapshot = late_raft.metrics().borrow().snapshot;
    assert!(snapshot.is_some(), "the learner installed a snapshot");
    let pairs = late.state_machine().pairs().expect("pairs");
    assert_eq!(pairs.len(), 35);
    assert_eq!(pairs[34], ("k34".to_string(), value(34)));
    late.shutdown().await;
    first.shutdown().await;
}

/// Binds `addr` again, retrying while the old socket lets go of it.
async fn rebind(addr: std::net::SocketAddr) -> tokio::net::TcpListener {
    let start = Instant::now();
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) => assert!(start.elapsed() < WAIT_MAX, "rebinding {addr}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_follower_keeps_its_state_and_catches_up() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(start(i as u64 + 1, dir, config()).await);
    }
    let http = reqwest::Client::new();
    form_cluster(&http, &nodes).await;
    for i in 0..10 {
        put(&http, &nodes[0], &format!("a{i}"), "before").await;
    }
    let applied = nodes[0].raft().metrics().borrow().last_applied;
    let raft3 = nodes[2].raft().clone();
    wait_until("node 3 to apply", || {
        raft3.metrics().borrow().last_applied >= applied
    })
    .await;

    // Node 3 stops; the other two still make a quorum.
    let third = nodes.pop().expect("node 3");
    let addr = third.addr();
    third.shutdown().await;
    for i in 0..10 {
        put(&http, &nodes[0], &format!("b{i}"), "while away").await;
    }

    // It comes back from its directory with what it had applied, and
    // the leader brings it up to date.
    let listener = rebind(addr).await;
    let third = Node::start(3, dirs[2].path(), listener, config())
        .await
        .expect("node 3 restarts");
    let pairs = third.state_machine().pairs().expect("pairs");
    assert!(pairs.len() >= 10, "kept its state: {} pairs", pairs.len());
    let applied = nodes[0].raft().metrics().borrow().last_applied;
    let raft3 = third.raft().clone();
    wait_until("node 3 to catch up", || {
        raft3.metrics().borrow().last_applied >= applied
    })
    .await;
    assert_eq!(third.state_machine().pairs().expect("pairs").len(), 20);
    assert_eq!(
        get(&http, &nodes[0], "b9").await,
        (StatusCode::OK, "while away".into())
    );
    third.shutdown().await;
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_go_on_through_a_new_leader_after_the_leader_stops() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(start(i as u64 + 1, dir, config()).await);
    }
    let http = reqwest::Client::new();
    form_cluster(&http, &nodes).await;
    put(&http, &nodes[0], "before", "1").await;

    let old = nodes.remove(0);
    old.shutdown().await;
    let (r2, r3) = (nodes[0].raft().clone(), nodes[1].raft().clone());
    wait_until("a new leader", || {
        let (l2, l3) = (
            r2.metrics().borrow().current_leader,
            r3.metrics().borrow().current_leader,
        );
        l2.is_some_and(|l| l != 1) && l2 == l3
    })
    .await;
    let leader_id = r2.metrics().borrow().current_leader.expect("a leader");
    let leader = nodes
        .iter()
        .find(|n| n.id() == leader_id)
        .expect("the leader is node 2 or 3");
    assert_eq!(
        get(&http, leader, "before").await,
        (StatusCode::OK, "1".into())
    );
    assert_eq!(
        put(&http, leader, "before", "2").await,
        Response::Previous(Some("1".into()))
    );
    assert_eq!(
        get(&http, leader, "before").await,
        (StatusCode::OK, "2".into())
    );
    for n in nodes {
        n.shutdown().await;
    }
}
