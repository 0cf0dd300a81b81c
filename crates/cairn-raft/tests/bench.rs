//! Synced puts through a three-node cluster on one machine (three
//! `cairn-raft-node` processes, the client in this process) against
//! synced puts into one CairnDB, `CLIENTS` concurrent clients each. The
//! figures depend on the build profile; both sides use the same one.
//!
//! ```text
//! cargo test -p cairn-raft --release --test bench -- --ignored --nocapture
//! ```
//!
//! Each put has its own key and a 100-byte value. A Raft put is
//! acknowledged once a quorum has appended it (a synced write on the
//! leader and one follower) and the leader has applied it (not synced);
//! a CairnDB put once its journal write is synced. CairnDB's group commit
//! shares fsyncs among concurrent writers on both sides, and the leader
//! groups concurrent puts into one entry. `cairn bench --workloads
//! replicated` measures the same with the nodes in process.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairndb::{Db, Options, WriteOptions};
use common::Cluster;

const CLIENTS: usize = 8;
const RUN_TIME: Duration = Duration::from_secs(5);
const VALUE: [u8; 100] = [b'v'; 100];

fn single_db_puts_per_sec() -> f64 {
    let dir = tempfile::tempdir().expect("dir");
    let db = Db::open(dir.path(), Options::default()).expect("db");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (db, stop, done) = (db.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    db.put_opt(format!("c{c}-{seq}"), VALUE, &WriteOptions::synced())
                        .expect("put");
                    seq += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(RUN_TIME);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a writer");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

async fn cluster_puts_per_sec() -> f64 {
    let cluster = Cluster::start(3, &[]).await;
    let value = String::from_utf8(VALUE.to_vec()).expect("ASCII");
    cluster.client.put("warm-up", &value).await.expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (client, stop, done) = (cluster.client.clone(), stop.clone(), done.clone());
            let value = value.clone();
            tokio::spawn(async move {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    client
                        .put(&format!("c{c}-{seq}"), &value)
                        .await
                        .expect("put");
                    seq += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(RUN_TIME).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a client");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: cargo test -p cairn-raft --release --test bench -- --ignored --nocapture"]
async fn synced_puts_cluster_vs_one_db() {
    let single = tokio::task::spawn_blocking(single_db_puts_per_sec)
        .await
        .expect("the single-db run");
    let cluster = cluster_puts_per_sec().await;
    println!("{CLIENTS} clients, {RUN_TIME:?} each, 100-byte values, synced:");
    println!("  one CairnDB:                {single:>8.0} puts/s");
    println!("  3-node cluster, one machine: {cluster:>8.0} puts/s");
    println!("  ratio cluster / one db:     {:>8.3}", cluster / single);
}
