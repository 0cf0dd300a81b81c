//! The client against three nodes in this process: it finds the leader
//! from a follower's 421, and its calls (put, get, delete, range, batch,
//! stale reads, metrics) answer what the endpoints document.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_raft::Op;
use cairn_raft::client::{Client, ClientError};
use cairn_raft::service::{BATCH_OPS_MAX, Node, config};
use openraft::BasicNode;

const WAIT_MAX: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_follows_the_leader_and_its_calls_answer_as_documented() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let node = Node::start(i as u64 + 1, dir.path(), listener, config())
            .await
            .expect("the node starts");
        nodes.push(node);
    }
    let members: BTreeMap<u64, BasicNode> = nodes
        .iter()
        .map(|n| (n.id(), BasicNode::new(n.addr().to_string())))
        .collect();
    let raft = nodes[0].raft().clone();
    raft.initialize(members).await.expect("initialized");
    let start = Instant::now();
    let leader = loop {
        if let Some(l) = raft.metrics().borrow().current_leader {
            break l;
        }
        assert!(start.elapsed() < WAIT_MAX, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // Followers first: the first call must follow a 421 to the leader.
    let mut addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    addrs.sort_by_key(|a| *a == nodes[(leader - 1) as usize].addr().to_string());
    let client = Client::new(addrs.clone());

    assert_eq!(client.put("a b/c?", "1").await.expect("put"), None);
    assert_eq!(
        client.put("a b/c?", "2").await.expect("put"),
        Some("1".into())
    );
    assert_eq!(client.get("a b/c?").await.expect("get"), Some("2".into()));
    assert_eq!(
        client.delete("a b/c?").await.expect("delete"),
        Some("2".into())
    );
    assert_eq!(client.get("a b/c?").await.expect("get"), None);

    let set = |k: &str, v: &str| Op::Set {
        key: k.into(),
        value: v.into(),
    };
    let ops = [
        set("a", "1"),
        set("b", "2"),
        Op::Delete { key: "a".into() },
        set("c", "3"),
        set("b", "4"),
    ];
    assert_eq!(
        client.batch(&ops).await.expect("batch"),
        vec![None, None, Some("1".into()), None, Some("2".into())]
    );
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        client.range("", None, 10).await.expect("range"),
        vec![pair("b", "4"), pair("c", "3")]
    );
    assert_eq!(
        client.range("b", Some("c"), 10).await.expect("range"),
        vec![pair("b", "4")]
    );
    assert_eq!(
        client.range("a", None, 1).await.expect("range"),
        vec![pair("b", "4")]
    );

    // A key CairnDB would refuse is refused before it reaches the log,
    // where it would stop every node's state machine.
    let long = "k".repeat(cairndb::limits::KEY_LEN_MAX + 1);
    assert!(matches!(
        client.batch(&[set("ok", "1"), set(&long, "x")]).await,
        Err(ClientError::InvalidArgument(_))
    ));
    assert_eq!(client.get("ok").await.expect("get"), None);

    let too_many: Vec<Op> = (0..=BATCH_OPS_MAX)
        .map(|i| set(&i.to_string(), "x"))
        .collect();
    assert!(matches!(
        client.batch(&too_many).await,
        Err(ClientError::InvalidArgument(_))
    ));

    // Every node, followers included, answers stale reads once it has
    // applied the batch.
    for addr in &addrs {
        let start = Instant::now();
        while client.get_stale(addr, "c").await.expect("stale get") != Some("3".into()) {
            assert!(start.elapsed() < WAIT_MAX, "{addr} did not apply the batch");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            client
                .range_stale(addr, "", None, 10)
                .await
                .expect("stale range"),
            vec![pair("b", "4"), pair("c", "3")]
        );
        let m = client.metrics(addr).await.expect("metrics");
        assert_eq!(m.current_leader, Some(leader));
    }

    for n in nodes {
        n.shutdown().await;
    }
}
