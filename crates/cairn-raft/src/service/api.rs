//! The HTTP endpoints of a node: the application's (`/kv/{key}`), the
//! cluster administrator's (`/cluster/...`, `/metrics`) and Raft's own
//! RPCs (`/raft/...`, called by `network.rs` on other nodes).
//!
//! Reads: `GET /kv/{key}` and `GET /kv?from=&to=&limit=` (a range:
//! keys from `from`, inclusive, to `to`, exclusive, at most `limit` pairs,
//! answered as a JSON array of `[key, value]`) are linearizable; with
//! `stale=true` any node answers from its own state machine at once, which
//! may lag the leader (a follower read).
//!
//! Writes: `PUT`/`DELETE /kv/{key}`, and `POST /batch` with a JSON array
//! of [`Op`]s applied as one Raft entry.
//!
//! Test hook: `POST /debug/partition` with `true` or `false` cuts the node
//! off from its peers or heals it ([`super::network`]'s `CutOff`); it is
//! routed only when the environment variable [`DEBUG_HOOKS_ENV`] is `1`
//! when the node starts.
//!
//! Answers: a write answers 200 with the JSON of its [`Response`]; a read
//! answers 200 with the value as text, or 404; an error answers a JSON
//! object `{"error": text, "leader": {"id", "addr"} | null}` with 421
//! (Misdirected Request) when this node is not the leader (ask
//! `leader`), 400 for a bad request, and 503 otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{ForwardToLeader, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};

use super::network::{CutOff, PATH_APPEND, PATH_SNAPSHOT, PATH_VOTE};
use super::propose::Proposer;
use crate::{NodeId, Op, Request, StateMachine, TypeConfig};

/// What the handlers share.
pub(crate) struct App {
    pub raft: Raft<TypeConfig>,
    pub proposer: Proposer,
    pub state_machine: StateMachine,
    pub cut_off: CutOff,
}

/// The environment variable that, set to `1` when a node starts, routes
/// the test hook `POST /debug/partition`.
pub const DEBUG_HOOKS_ENV: &str = "CAIRN_RAFT_DEBUG_HOOKS";

/// Most pairs one range read answers; a larger `limit` is cut to it.
pub const RANGE_PAIRS_MAX: usize = 10_000;

/// Most ops one `POST /batch` may carry (400 beyond).
pub const BATCH_OPS_MAX: usize = 10_000;

/// Query of `GET /kv/{key}`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReadQuery {
    #[serde(default)]
    stale: bool,
}

/// Query of `GET /kv`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RangeQuery {
    #[serde(default)]
    from: String,
    to: Option<String>,
    limit: Option<usize>,
    #[serde(default)]
    stale: bool,
}

/// Body of `POST /cluster/add-learner`; also names the leader in an
/// error answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AddLearner {
    pub id: NodeId,
    pub addr: String,
}

/// Body of an error answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorBody {
    pub error: String,
    /// The leader to ask instead, when this node knows it.
    pub leader: Option<AddLearner>,
}

/// Largest request body a node accepts: a value to set, or a Raft RPC
/// (up to `max_payload_entries` entries, or a snapshot chunk of
/// `snapshot_max_chunk_size` bytes, which JSON writes as up to four
/// characters a byte). axum's default, 2 MB, would refuse an append
/// carrying a few large values, and replication would stop there.
pub const BODY_BYTES_MAX: usize = 64 << 20;

pub(crate) fn router(app: Arc<App>, debug_hooks: bool) -> Router {
    let router = Router::new()
        .route("/kv", get(range))
        .route("/kv/{key}", get(read).put(set).delete(delete))
        .route("/batch", post(batch))
        .route("/cluster/init", post(init))
        .route("/cluster/add-learner", post(add_learner))
        .route("/cluster/change-membership", post(change_membership))
        .route("/metrics", get(metrics))
        .route(PATH_APPEND, post(raft_append))
        .route(PATH_VOTE, post(raft_vote))
        .route(PATH_SNAPSHOT, post(raft_snapshot));
    let router = if debug_hooks {
        router.route("/debug/partition", post(partition))
    } else {
        router
    };
    router
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .with_state(app)
}

/// The answer for a failed Raft call: 421 with the leader if the call
/// must go to the leader, else 503.
fn raft_error<E>(e: RaftError<NodeId, E>) -> HttpResponse
where
    E: std::error::Error + openraft::TryAsRef<ForwardToLeader<NodeId, BasicNode>>,
{
    error_answer(e.to_string(), e.forward_to_leader::<BasicNode>())
}

fn error_answer(
    error: String,
    forward: Option<&ForwardToLeader<NodeId, BasicNode>>,
) -> HttpResponse {
    let Some(forward) = forward else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ErrorBody {
                error,
                leader: None,
            }),
        )
            .into_response();
    };
    let leader = forward
        .leader_id
        .zip(forward.leader_node.as_ref())
        .map(|(id, node)| AddLearner {
            id,
            addr: node.addr.clone(),
        });
    (
        StatusCode::MISDIRECTED_REQUEST,
        Json(ErrorBody { error, leader }),
    )
        .into_response()
}

/// Proposes `request` through the node's proposer, which groups it with
/// the writes that arrive beside it into one Raft entry.
async fn write(app: &App, request: Request) -> HttpResponse {
    match app.proposer.write(request).await {
        Ok(response) => Json(response).into_response(),
        Err(e) => raft_error(e),
    }
}

/// Refuses a key CairnDB would refuse. Checked before the request is
/// proposed: once in the log, a request the state machine cannot apply
/// would stop Raft on every node (a storage error is fatal to openraft).
fn check_key(key: &str) -> Result<(), HttpResponse> {
    if key.len() > cairndb::limits::KEY_LEN_MAX {
        let max = cairndb::limits::KEY_LEN_MAX;
        return Err(bad_request(format!(
            "a key of {} bytes, over {max}",
            key.len()
        )));
    }
    Ok(())
}

async fn set(State(app): State<Arc<App>>, Path(key): Path<String>, value: String) -> HttpResponse {
    if let Err(refused) = check_key(&key) {
        return refused;
    }
    write(&app, Request::Set { key, value }).await
}

async fn delete(State(app): State<Arc<App>>, Path(key): Path<String>) -> HttpResponse {
    if let Err(refused) = check_key(&key) {
        return refused;
    }
    write(&app, Request::Delete { key }).await
}

async fn batch(State(app): State<Arc<App>>, Json(ops): Json<Vec<Op>>) -> HttpResponse {
    if ops.len() > BATCH_OPS_MAX {
        let error = format!("a batch of {} ops, over {BATCH_OPS_MAX}", ops.len());
        return bad_request(error);
    }
    for op in &ops {
        let (Op::Set { key, .. } | Op::Delete { key }) = op;
        if let Err(refused) = check_key(key) {
            return refused;
        }
    }
    write(&app, Request::Batch { ops }).await
}

fn bad_request(error: String) -> HttpResponse {
    (
        StatusCode::BAD_REQUEST,
        Json(ErrorBody {
            error,
            leader: None,
        }),
    )
        .into_response()
}

/// A linearizable read: this node confirms it is still the leader (a
/// heartbeat round to a quorum) and waits until it has applied what was
/// committed when the read arrived, then reads its state machine. With
/// `?stale=true` it reads at once, whatever its role.
async fn read(
    State(app): State<Arc<App>>,
    Path(key): Path<String>,
    Query(q): Query<ReadQuery>,
) -> HttpResponse {
    if !q.stale
        && let Err(e) = app.raft.ensure_linearizable().await
    {
        return raft_error(e);
    }
    match app.state_machine.get(&key) {
        Ok(Some(v)) => v.into_response(),
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(e) => error_answer(e.to_string(), None),
    }
}

/// A range read, linearizable as `read` is unless `stale`.
async fn range(State(app): State<Arc<App>>, Query(q): Query<RangeQuery>) -> HttpResponse {
    if !q.stale
        && let Err(e) = app.raft.ensure_linearizable().await
    {
        return raft_error(e);
    }
    let limit = q.limit.unwrap_or(RANGE_PAIRS_MAX).min(RANGE_PAIRS_MAX);
    match app.state_machine.range(&q.from, q.to.as_deref(), limit) {
        Ok(pairs) => Json(pairs).into_response(),
        Err(e) => error_answer(e.to_string(), None),
    }
}

/// The partition test hook: `true` cuts this node off, `false` heals it.
async fn partition(State(app): State<Arc<App>>, Json(cut): Json<bool>) -> HttpResponse {
    app.cut_off.set(cut);
    Json(cut).into_response()
}

/// What a node cut off by the test hook answers a peer's Raft RPC: an
/// error the caller cannot decode as an answer, so it sees a network
/// failure.
fn refused() -> HttpResponse {
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// Initializes a new cluster with the given members (`{"1": {"addr":
/// "127.0.0.1:7001"}, ...}`); called once, on one node.
async fn init(
    State(app): State<Arc<App>>,
    Json(members): Json<BTreeMap<NodeId, BasicNode>>,
) -> HttpResponse {
    match app.raft.initialize(members).await {
        Ok(()) => Json(()).into_response(),
        Err(e) => error_answer(e.to_string(), None),
    }
}

/// Adds a learner and waits until it has caught up with the log.
async fn add_learner(State(app): State<Arc<App>>, Json(l): Json<AddLearner>) -> HttpResponse {
    match app
        .raft
        .add_learner(l.id, BasicNode::new(l.addr), true)
        .await
    {
        Ok(r) => Json(r.log_id).into_response(),
        Err(e) => raft_error(e),
    }
}

/// Makes the given nodes (learners already) the voters.
async fn change_membership(
    State(app): State<Arc<App>>,
    Json(voters): Json<BTreeSet<NodeId>>,
) -> HttpResponse {
    match app.raft.change_membership(voters, false).await {
        Ok(r) => Json(r.log_id).into_response(),
        Err(e) => raft_error(e),
    }
}

async fn metrics(State(app): State<Arc<App>>) -> HttpResponse {
    Json(app.raft.metrics().borrow().clone()).into_response()
}

async fn raft_append(
    State(app): State<Arc<App>>,
    Json(rpc): Json<AppendEntriesRequest<TypeConfig>>,
) -> HttpResponse {
    if app.cut_off.is_set() {
        return refused();
    }
    Json(app.raft.append_entries(rpc).await).into_response()
}

async fn raft_vote(
    State(app): State<Arc<App>>,
    Json(rpc): Json<VoteRequest<NodeId>>,
) -> HttpResponse {
    if app.cut_off.is_set() {
        return refused();
    }
    Json(app.raft.vote(rpc).await).into_response()
}

async fn raft_snapshot(
    State(app): State<Arc<App>>,
    Json(rpc): Json<InstallSnapshotRequest<TypeConfig>>,
) -> HttpResponse {
    if app.cut_off.is_set() {
        return refused();
    }
    Json(app.raft.install_snapshot(rpc).await).into_response()
}
