//! openraft's `RaftNetwork` over HTTP: each Raft RPC is a POST of its
//! request as JSON to the target's `/raft/...` endpoint, answered with the
//! JSON of `Result<response, RaftError>` (served by `api.rs`).
//!
//! Snapshots go as openraft's chunks (`install_snapshot`; the chunk size
//! is `Config::snapshot_max_chunk_size`); the chunk bytes are a JSON array
//! of numbers, several times their size: a limit of this first version.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use openraft::BasicNode;
use openraft::error::{
    Infallible, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{NodeId, TypeConfig};

/// Paths of the Raft RPC endpoints, shared with the server.
pub(crate) const PATH_APPEND: &str = "/raft/append";
pub(crate) const PATH_VOTE: &str = "/raft/vote";
pub(crate) const PATH_SNAPSHOT: &str = "/raft/snapshot";

/// Makes an HTTP client per target node; the clients share one
/// connection pool.
#[derive(Clone, Debug, Default)]
pub struct HttpNetwork {
    client: reqwest::Client,
    cut_off: CutOff,
}

/// The partition test hook: while set, every Raft RPC this node sends
/// fails as `Unreachable` before it leaves, and every one it receives is
/// refused (`api.rs`), as if the node's links were cut. Set only through
/// [`super::Node::set_cut_off`] or `POST /debug/partition`.
#[derive(Clone, Debug, Default)]
pub(crate) struct CutOff(Arc<AtomicBool>);

impl CutOff {
    pub(crate) fn set(&self, cut: bool) {
        self.0.store(cut, Ordering::SeqCst);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl HttpNetwork {
    /// A network whose partition hook is `cut_off`.
    pub(crate) fn with_cut_off(cut_off: CutOff) -> Self {
        HttpNetwork {
            client: reqwest::Client::new(),
            cut_off,
        }
    }
}

/// The client of one target node.
#[derive(Clone, Debug)]
pub struct HttpConnection {
    client: reqwest::Client,
    target: NodeId,
    addr: String,
    cut_off: CutOff,
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpConnection {
        HttpConnection {
            client: self.client.clone(),
            target,
            addr: node.addr.clone(),
            cut_off: self.cut_off.clone(),
        }
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl HttpConnection {
    /// POSTs `req` to `path` on the target and decodes its answer. A
    /// refused connection is `Unreachable` (openraft backs off); other
    /// transport failures are `Network` (it retries); an error the target's
    /// Raft returned is `RemoteError`.
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: Error + DeserializeOwned,
    {
        if self.cut_off.is_set() {
            let e = std::io::Error::other("cut off by the partition test hook");
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let url = format!("http://{}{path}", self.addr);
        let sent = self
            .client
            .post(url)
            .json(req)
            .timeout(option.hard_ttl())
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        let answer: Result<Resp, RaftError<NodeId, E>> = resp
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for HttpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, Infallible> {
        self.call(PATH_APPEND, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(PATH_SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, Infallible> {
        self.call(PATH_VOTE, &rpc, &option).await
    }
}
