//! The Raft type configuration and the application's requests and
//! responses. Requests are persisted (inside log entries, as JSON): a
//! variant or field renamed here no longer reads old logs.

use serde::{Deserialize, Serialize};

/// A node's id in the cluster.
pub type NodeId = u64;

/// A change to the key-value state machine, proposed through
/// `Raft::client_write`. Persisted in log entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Sets `key` to `value`.
    Set { key: String, value: String },
    /// Removes `key` (removing a missing key is not an error).
    Delete { key: String },
    /// Applies `ops` in order as one entry: all of them or none are in
    /// the state machine after any crash.
    Batch { ops: Vec<Op> },
}

/// One change of a [`Request::Batch`]. Persisted in log entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Sets `key` to `value`.
    Set { key: String, value: String },
    /// Removes `key`.
    Delete { key: String },
}

/// What applying one entry answered. For `Set` and `Delete`, the value the
/// key held before; for `Batch`, one such value per op; blank and
/// membership entries answer `Ok`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The key's value before the request (`None`: it had none).
    Previous(Option<String>),
    /// A blank or membership entry was applied.
    Ok,
    /// For a `Batch`: the value each op's key held just before that op,
    /// in the order of the ops.
    Batch(Vec<Option<String>>),
}

openraft::declare_raft_types!(
    /// The type configuration of a CairnDB-backed Raft node: `u64` node
    /// ids, nodes with an address string (`BasicNode { addr }`), snapshot
    /// data streamed from the database ([`crate::SnapshotData`]).
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = crate::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);
