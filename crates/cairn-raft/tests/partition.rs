//! A leader cut off from its peers (the `/debug/partition` test hook: its
//! Raft RPCs fail both ways, its clients still reach it) must not answer
//! a linearizable read, since the other two may have elected a leader and
//! taken writes it has not seen; they do, and once healed the old leader
//! follows the new one and catches up.

mod common;

use std::time::{Duration, Instant};

use cairn_raft::client::Client;
use common::{Cluster, WAIT_MAX};
use reqwest::StatusCode;

/// How long the cut-off leader's read is given; it must not succeed.
const READ_TIME: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_off_leader_serves_no_linearizable_read_and_rejoins_after() {
    let cluster = Cluster::start(3, &[]).await;
    cluster
        .client
        .put("before", "1")
        .await
        .expect("a write before the cut");
    let old = cluster.wait_for_leader(None).await;
    let old_addr = cluster.proc(old).addr.clone();
    cluster.partition(old, true).await;

    // The others elect a leader and take a write the old one never sees.
    let others = Client::new(
        cluster
            .running()
            .filter(|p| p.id != old)
            .map(|p| p.addr.clone()),
    );
    // Wait for their election first: until then they name the old leader,
    // and a write sent there would hang and end of unknown outcome.
    let start = Instant::now();
    loop {
        let m = others.metrics(&others.addrs()[0]).await.expect("metrics");
        if m.current_leader.is_some_and(|l| l != old) {
            break;
        }
        assert!(
            start.elapsed() < WAIT_MAX,
            "the other two elected no leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    others
        .put("during", "2")
        .await
        .expect("the other two take a write");
    let m = others.metrics(&others.addrs()[0]).await.expect("metrics");
    let new = m.current_leader.expect("a new leader");
    assert_ne!(new, old);

    // The old leader, asked directly, does not answer the read with a
    // value: ensure_linearizable cannot reach a quorum.
    let http = reqwest::Client::new();
    let started = Instant::now();
    let read = http
        .get(format!("http://{old_addr}/kv/during"))
        .timeout(READ_TIME)
        .send()
        .await;
    let outcome = match read {
        Err(e) => {
            assert!(e.is_timeout(), "{e}");
            "timed out".to_owned()
        }
        Ok(r) => {
            let status = r.status();
            assert!(
                status != StatusCode::OK && status != StatusCode::NOT_FOUND,
                "a cut-off node answered a linearizable read: {status}"
            );
            format!("{status}: {}", r.text().await.unwrap_or_default())
        }
    };
    println!(
        "the cut-off leader's read failed after {} ms: {outcome}",
        started.elapsed().as_millis()
    );
    // A stale read shows why that matters: it lacks the new write.
    assert_eq!(
        cluster
            .client
            .get_stale(&old_addr, "during")
            .await
            .expect("a stale read"),
        None
    );

    cluster.partition(old, false).await;
    let start = Instant::now();
    while cluster
        .client
        .get_stale(&old_addr, "during")
        .await
        .ok()
        .flatten()
        != Some("2".into())
    {
        assert!(
            start.elapsed() < WAIT_MAX,
            "node {old} did not catch up after the heal"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leader = cluster.wait_for_leader(None).await;
    let m = cluster.client.metrics(&old_addr).await.expect("metrics");
    assert_eq!(m.current_leader, Some(leader));
    assert_eq!(
        cluster.client.get("during").await.expect("a read"),
        Some("2".into())
    );
    assert_eq!(
        cluster.client.get("before").await.expect("a read"),
        Some("1".into())
    );
}
