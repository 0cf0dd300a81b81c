//! A replicated key-value service: a Raft node over [`crate::open`]'s
//! storage, serving HTTP (axum) and talking to its peers over HTTP
//! (reqwest).
//!
//! ```no_run
//! # async fn run() -> Result<(), cairn_raft::service::ServiceError> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7001").await.map_err(cairn_raft::service::ServiceError::Io)?;
//! let node = cairn_raft::service::Node::start(1, "/var/lib/node-1", listener, cairn_raft::service::config()).await?;
//! // POST /cluster/init, then PUT/GET/DELETE /kv/{key} ...
//! node.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Endpoints (`api.rs` says what each answers): `PUT`, `GET`, `DELETE`
//! `/kv/{key}` (a `GET` is linearizable: `Raft::ensure_linearizable`
//! first); `POST /cluster/init`, `/cluster/add-learner`,
//! `/cluster/change-membership`; `GET /metrics`; `GET /kv` (a range),
//! `POST /batch`; and Raft's RPCs under `/raft/`. Writes and reads go to
//! the leader: another node answers 421 and names the leader, except
//! reads with `?stale=true`. [`crate::client::Client`] finds the leader
//! and follows the 421s.

mod api;
mod network;
mod propose;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::serve::ListenerExt;
use openraft::error::Fatal;
use openraft::{Config, ConfigError, Raft};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use api::{
    AddLearner, BATCH_OPS_MAX, BODY_BYTES_MAX, DEBUG_HOOKS_ENV, ErrorBody, RANGE_PAIRS_MAX,
};
use network::CutOff;
pub use network::{HttpConnection, HttpNetwork};
pub use propose::{GROUP_BYTES_MAX, GROUP_OPS_MAX, PROPOSALS_IN_FLIGHT_MAX};

use crate::{NodeId, OpenError, StateMachine, TypeConfig};

/// Why a node did not start.
#[derive(Debug)]
pub enum ServiceError {
    /// The store did not open.
    Open(OpenError),
    /// The Raft configuration is invalid.
    Config(ConfigError),
    /// Raft did not start (it read its storage and failed). Boxed:
    /// openraft's storage error inside is large.
    Raft(Box<Fatal<NodeId>>),
    /// Binding or reading the listener's address failed.
    Io(std::io::Error),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Open(e) => e.fmt(f),
            ServiceError::Config(e) => write!(f, "raft configuration: {e}"),
            ServiceError::Raft(e) => write!(f, "raft did not start: {e}"),
            ServiceError::Io(e) => write!(f, "listener: {e}"),
        }
    }
}

impl std::error::Error for ServiceError {}

/// The Raft configuration nodes start with: openraft's defaults, a
/// snapshot every 5000 applied entries, heartbeats every 100 ms and
/// elections after 300 to 600 ms of silence (a loopback or LAN cluster),
/// snapshot chunks of 1 MiB (a JSON body of at most about 4 MiB, well
/// under `BODY_BYTES_MAX`), and at most `APPEND_ENTRIES_MAX` entries per
/// append RPC.
pub fn config() -> Config {
    Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(5000),
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        max_payload_entries: APPEND_ENTRIES_MAX,
        ..Config::default()
    }
}

/// Bytes of snapshot data per `install_snapshot` RPC.
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// Entries per append RPC (openraft's `max_payload_entries`; its default
/// is 300). An entry is a group of writes of up to `GROUP_BYTES_MAX` key
/// and value bytes, which JSON writes as up to six bytes each (`\u0000`),
/// so that an RPC of grouped entries stays under `BODY_BYTES_MAX`; one
/// RPC of 64 groups already carries tens of thousands of small writes. A
/// write larger than a group is an entry alone and is not bounded so.
pub const APPEND_ENTRIES_MAX: u64 = 64;

const _: () = assert!(SNAPSHOT_CHUNK_BYTES as usize * 4 + (1 << 20) < BODY_BYTES_MAX); // a chunk as a JSON array of numbers, with room to spare, fits a body
const _: () =
    assert!(APPEND_ENTRIES_MAX as usize * (GROUP_BYTES_MAX * 6 + (64 << 10)) < BODY_BYTES_MAX); // an RPC of full groups, escaped, with room for the JSON around each, fits a body

/// A running node: its Raft and its HTTP server.
pub struct Node {
    id: NodeId,
    addr: SocketAddr,
    raft: Raft<TypeConfig>,
    state_machine: StateMachine,
    cut_off: CutOff,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Node {
    /// Opens (creating if missing) the store in `dir`, starts Raft node
    /// `id` over it with `config`, and serves HTTP on `listener`. Peers
    /// reach the node at the listener's address, which is what
    /// `/cluster/init` and `/cluster/add-learner` should name.
    pub async fn start(
        id: NodeId,
        dir: impl AsRef<Path>,
        listener: tokio::net::TcpListener,
        config: Config,
    ) -> Result<Node, ServiceError> {
        let addr = listener.local_addr().map_err(ServiceError::Io)?;
        let config = Arc::new(config.validate().map_err(ServiceError::Config)?);
        let (log_store, state_machine) =
            crate::open(dir, cairndb::Options::default()).map_err(ServiceError::Open)?;
        let cut_off = CutOff::default();
        let raft = Raft::new(
            id,
            config,
            HttpNetwork::with_cut_off(cut_off.clone()),
            log_store,
            state_machine.clone(),
        )
        .await
        .map_err(|e| ServiceError::Raft(Box::new(e)))?;
        let app = Arc::new(api::App {
            raft: raft.clone(),
            proposer: propose::Proposer::start(raft.clone()),
            state_machine: state_machine.clone(),
            cut_off: cut_off.clone(),
        });
        let debug_hooks = std::env::var(DEBUG_HOOKS_ENV).is_ok_and(|v| v == "1");
        let (stop_server, stopped) = oneshot::channel::<()>();
        // Answers go out at once, not held back by Nagle's algorithm for
        // the client's acknowledgement of the previous segment.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            axum::serve(listener, api::router(app, debug_hooks))
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Node {
            id,
            addr,
            raft,
            state_machine,
            cut_off,
            stop_server,
            server,
        })
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The address the node serves HTTP on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    /// The node's state machine, as applied here (a read of it is not
    /// linearizable; `GET /kv/{key}` on the leader is).
    pub fn state_machine(&self) -> &StateMachine {
        &self.state_machine
    }

    /// The partition test hook (what `POST /debug/partition` sets): while
    /// `cut` is true the node sends no Raft RPC and refuses those it
    /// receives, as if its links were cut; its clients still reach it.
    pub fn set_cut_off(&self, cut: bool) {
        self.cut_off.set(cut);
    }

    /// Stops the HTTP server and Raft. The store is closed once the last
    /// request in flight has finished.
    pub async fn shutdown(self) {
        let _ = self.stop_server.send(());
        let _ = self.raft.shutdown().await;
        let _ = self.server.await;
    }
}
