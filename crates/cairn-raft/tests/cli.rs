//! `cairn-cluster init`, `add` and `status` against node processes.

mod common;

use std::process::Command;

use common::Cluster;

fn cairn_cluster(nodes: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn-cluster"))
        .args(["--nodes", nodes])
        .args(args)
        .output()
        .expect("cairn-cluster runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cairn-cluster {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_add_and_status() {
    let cluster = Cluster::start_uninitialized(4, &[]).await;
    let addr = |id: u64| cluster.proc(id).addr.clone();
    let members: Vec<String> = (1..=3).map(|id| format!("{id}={}", addr(id))).collect();
    let members: Vec<&str> = members.iter().map(String::as_str).collect();
    let first = addr(1);
    let out =
        tokio::task::block_in_place(|| cairn_cluster(&first, &[&["init"], &members[..]].concat()));
    assert!(out.contains("3 nodes"), "{out}");
    cluster.wait_for_leader(None).await;

    let three = (1..=3).map(addr).collect::<Vec<_>>().join(",");
    let fourth = addr(4);
    let out = tokio::task::block_in_place(|| cairn_cluster(&three, &["add", "4", &fourth]));
    assert!(out.contains("voters now {1, 2, 3, 4}"), "{out}");

    let all = (1..=4).map(addr).collect::<Vec<_>>().join(",");
    let out = tokio::task::block_in_place(|| cairn_cluster(&all, &["status"]));
    println!("{out}");
    assert_eq!(out.matches("[1, 2, 3, 4]").count(), 4, "{out}");
    assert_eq!(out.matches("Leader").count(), 1, "{out}");
}
