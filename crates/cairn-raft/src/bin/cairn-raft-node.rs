//! One node of the replicated key-value service:
//! `cairn-raft-node --id 1 --listen 127.0.0.1:7001 --dir /var/lib/node-1`.
//! Stops on Ctrl-C.
//!
//! Optional flags change the snapshot policy (tests use them to make a
//! restarted node catch up through a snapshot): `--snapshot-every N`
//! builds a snapshot every N applied entries (default 5000) and
//! `--logs-keep N` keeps N entries before the last snapshot when purging
//! (openraft's `max_in_snapshot_log_to_keep`, default 1000).
//! `CAIRN_RAFT_DEBUG_HOOKS=1` in the environment routes the partition test
//! hook `POST /debug/partition`.
//!
//! The node logs to stderr: warnings and errors by default, or what
//! `RUST_LOG` selects (`RUST_LOG=openraft=info` adds elections and
//! membership changes).

use std::process::ExitCode;

use cairn_raft::service::{Node, ServiceError, config};

/// What the node logs when RUST_LOG is unset.
const LOG_DEFAULT: &str = "warn";

const USAGE: &str = "usage: cairn-raft-node --id N --listen HOST:PORT --dir PATH [--snapshot-every N] [--logs-keep N]";

struct Args {
    id: u64,
    listen: String,
    dir: std::path::PathBuf,
    snapshot_every: Option<u64>,
    logs_keep: Option<u64>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut id, mut listen, mut dir) = (None, None, None);
    let (mut snapshot_every, mut logs_keep) = (None, None);
    let number = |flag: &str, v: &str| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--id" => id = Some(value.parse::<u64>().map_err(|e| format!("--id: {e}"))?),
            "--listen" => listen = Some(value),
            "--dir" => dir = Some(value.into()),
            "--snapshot-every" => snapshot_every = Some(number(&flag, &value)?),
            "--logs-keep" => logs_keep = Some(number(&flag, &value)?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        id: id.ok_or("--id is missing")?,
        listen: listen.ok_or("--listen is missing")?,
        dir: dir.ok_or("--dir is missing")?,
        snapshot_every,
        logs_keep,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(LOG_DEFAULT));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => return fail(ServiceError::Io(e)),
    };
    let mut config = config();
    if let Some(n) = args.snapshot_every {
        config.snapshot_policy = openraft::SnapshotPolicy::LogsSinceLast(n);
    }
    if let Some(n) = args.logs_keep {
        config.max_in_snapshot_log_to_keep = n;
    }
    let node = match Node::start(args.id, &args.dir, listener, config).await {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    eprintln!("node {} serving on {}", node.id(), node.addr());
    let _ = tokio::signal::ctrl_c().await;
    node.shutdown().await;
    ExitCode::SUCCESS
}

fn fail(e: ServiceError) -> ExitCode {
    eprintln!("cairn-raft-node: {e}");
    ExitCode::FAILURE
}
