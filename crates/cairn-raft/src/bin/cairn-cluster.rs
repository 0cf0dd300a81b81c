//! Administers a cluster of `cairn-raft-node`s over HTTP:
//!
//! ```text
//! cairn-cluster --nodes 127.0.0.1:7001 init 1=127.0.0.1:7001 2=127.0.0.1:7002 3=127.0.0.1:7003
//! cairn-cluster --nodes 127.0.0.1:7001,127.0.0.1:7002 add 4 127.0.0.1:7004
//! cairn-cluster --nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 status
//! ```
//!
//! - `init` asks the first node of `--nodes` to initialize a new cluster
//!   of the given members (once, on an empty cluster).
//! - `add` finds the leader among `--nodes`, adds the node as a learner
//!   (waiting until it has caught up), then makes it a voter beside the
//!   current voters.
//! - `status` prints each node's view: role, term, leader, last applied
//!   index and voters.
//!
//! It is here, in cairn-raft, rather than as `cairn cluster` in the
//! `cairn` tool, so that `cairn` does not depend on the HTTP and Raft
//! crates; the subcommands are the ones issue 40 names.

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use cairn_raft::client::Client;
use cairn_raft::service::AddLearner;

const USAGE: &str =
    "usage: cairn-cluster --nodes ADDR[,ADDR...] init ID=ADDR... | add ID ADDR | status";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (nodes, command) = match args.as_slice() {
        [flag, nodes, command @ ..] if flag == "--nodes" => (nodes, command),
        _ => return usage("--nodes is missing"),
    };
    let addrs: Vec<&str> = nodes.split(',').filter(|a| !a.is_empty()).collect();
    if addrs.is_empty() {
        return usage("--nodes names no address");
    }
    let client = Client::new(addrs);
    let done = match command {
        [c, members @ ..] if c == "init" && !members.is_empty() => init(&client, members).await,
        [c, id, addr] if c == "add" => match id.parse() {
            Ok(id) => add(&client, id, addr).await,
            Err(e) => return usage(&format!("ID: {e}")),
        },
        [c] if c == "status" => status(&client).await,
        _ => return usage("unknown command"),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(e: &str) -> ExitCode {
    eprintln!("{e}\n{USAGE}");
    ExitCode::from(2)
}

async fn init(client: &Client, members: &[String]) -> Result<(), String> {
    let mut map = BTreeMap::new();
    for m in members {
        let (id, addr) = m
            .split_once('=')
            .ok_or_else(|| format!("{m}: expected ID=ADDR"))?;
        let id: u64 = id.parse().map_err(|e| format!("{m}: {e}"))?;
        map.insert(id, serde_json::json!({ "addr": addr }));
    }
    let body = serde_json::to_string(&map).map_err(|e| e.to_string())?;
    client
        .post_to(&client.addrs()[0], "/cluster/init", body)
        .await
        .map_err(|e| e.to_string())?;
    println!("initialized a cluster of {} nodes", map.len());
    Ok(())
}

/// The leader's address, as the first node that names one says.
async fn leader(client: &Client) -> Result<(u64, String), String> {
    for addr in client.addrs() {
        let Ok(m) = client.metrics(addr).await else {
            continue;
        };
        let Some(id) = m.current_leader else {
            continue;
        };
        if let Some(node) = m.membership_config.membership().get_node(&id) {
            return Ok((id, node.addr.clone()));
        }
    }
    Err("no node named a leader".into())
}

async fn add(client: &Client, id: u64, addr: &str) -> Result<(), String> {
    let (_, leader) = leader(client).await?;
    let learner = AddLearner {
        id,
        addr: addr.to_owned(),
    };
    let body = serde_json::to_string(&learner).map_err(|e| e.to_string())?;
    client
        .post_to(&leader, "/cluster/add-learner", body)
        .await
        .map_err(|e| format!("add-learner: {e}"))?;
    let m = client.metrics(&leader).await.map_err(|e| e.to_string())?;
    let mut voters: BTreeSet<u64> = m.membership_config.membership().voter_ids().collect();
    voters.insert(id);
    let body = serde_json::to_string(&voters).map_err(|e| e.to_string())?;
    client
        .post_to(&leader, "/cluster/change-membership", body)
        .await
        .map_err(|e| format!("change-membership: {e}"))?;
    println!("node {id} at {addr} is a voter; voters now {voters:?}");
    Ok(())
}

async fn status(client: &Client) -> Result<(), String> {
    println!(
        "{:<22} {:>4} {:<10} {:>6} {:>7} {:>10}  voters",
        "address", "id", "role", "term", "leader", "applied"
    );
    let mut answered = 0;
    for addr in client.addrs() {
        match client.metrics(addr).await {
            Ok(m) => {
                answered += 1;
                let voters: Vec<u64> = m.membership_config.membership().voter_ids().collect();
                println!(
                    "{addr:<22} {:>4} {:<10} {:>6} {:>7} {:>10}  {voters:?}",
                    m.id,
                    format!("{:?}", m.state),
                    m.current_term,
                    m.current_leader.map_or("-".into(), |l| l.to_string()),
                    m.last_applied.map_or("-".into(), |l| l.index.to_string()),
                );
            }
            Err(e) => println!("{addr:<22} unreachable: {e}"),
        }
    }
    if answered == 0 {
        return Err("no node answered".into());
    }
    Ok(())
}
