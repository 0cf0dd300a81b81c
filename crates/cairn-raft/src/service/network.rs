//! openraft's `RaftNetwork` over HTTP: each Raft RPC is a POST of its
//! request as JSON to the target's `/raft/...` endpoint, answered with the
//! JSON of `Result<response, RaftError>` (served by `api.rs`).
//!
//! Snapshots go as openraft's chunks (`install_snapshot`; the chunk size
//! is `Config::snapshot_max_chunk_size`); the chunk bytes are a JSON array
//! of numbers, several times their size: a limit of this first version.

use std::error::Error;

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
}

/// The client of one target node.
#[derive(Clone, Debug)]
pub struct HttpConnection {
    client: reqwest::Client,
    target: NodeId,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpConnection {
        HttpConnection {
            client: self.client.clone(),
            target,
            addr: node.addr.clone(),
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
