//! The proposer: groups the writes that arrive on a node together into one
//! Raft entry.
//!
//! Why: openraft 0.9 appends each `client_write` as its own entry, and its
//! core awaits that append's flush (one synced CairnDB write) before it
//! takes the next message. One entry per client write therefore costs one
//! fsync per write on the leader, one after the other, and the followers
//! one RPC and one fsync per few entries. Grouped, a whole group costs one
//! leader fsync, and each append RPC carries many writes.
//!
//! How: handlers queue their request with [`Proposer::write`]; one task
//! takes the first queued request, waits until fewer than
//! `PROPOSALS_IN_FLIGHT_MAX` groups are proposed and unanswered, then
//! takes every request queued meanwhile, up to `GROUP_OPS_MAX` ops and
//! `GROUP_BYTES_MAX` bytes, and proposes them as one entry. A request
//! that is alone goes as it is; several go as one `Request::Batch` of all
//! their ops, in queue order, and each gets the previous values of its
//! own ops back as the answer it would have had alone (a `Batch` answers
//! its slice; a `Set` or `Delete` its one value). Nothing waits for a
//! group to fill: under light load each write is its own entry at once,
//! and grouping grows with the load (the writes that queue while earlier
//! groups are in flight).
//!
//! What stays true: the requests of one group are applied together, in
//! queue order, each exactly as it would be alone (a later op of a group
//! sees an earlier one's value, as `apply` stages them in order), so a
//! client's own batch is still atomic. Requests queued together are
//! concurrent (none was answered before another was sent), so any order
//! among them is a linearizable one; groups in flight together are
//! concurrent in the same way. A group's entry is committed or dropped
//! whole, so the client's retry rules (a 421 is safe to retry) hold for
//! each request of it. A group is logged as a `Batch` entry: the log
//! format does not change.
//!
//! Sharing: a `Proposer` is cheap to clone; clones share the queue.

use std::sync::Arc;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::{BasicNode, Raft};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::api::BATCH_OPS_MAX;
use crate::{NodeId, Op, Request, Response, TypeConfig};

/// Groups proposed and not yet answered at once. Two let the leader
/// append the next group while the previous one is replicated and
/// applied; more make the groups smaller (the writes queued meanwhile are
/// shared among more of them). With 8 clients on a loopback cluster
/// (`cairn bench --workloads replicated`): 1 in flight made entries of 4
/// puts, 2 of 2.6, 4 of 1.5, 8 of 1.0; on a busy machine 2 gave the
/// most puts per second (each entry costs every node CPU), on an idle
/// one 4 did by a little.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 2;
/// Most ops one group carries (a request with more goes alone: at most
/// `BATCH_OPS_MAX`, as the handlers admit).
pub const GROUP_OPS_MAX: usize = 1024;
/// Most key and value bytes one group carries (a larger request goes
/// alone). Bounds the JSON of an append RPC: see `config`.
pub const GROUP_BYTES_MAX: usize = 64 << 10;
/// Requests queued for the proposer at most; handlers wait beyond.
pub const QUEUE_MAX: usize = 4096;

const _: () = assert!(GROUP_OPS_MAX <= BATCH_OPS_MAX); // a group is no larger than a batch a client may send
const _: () = assert!(PROPOSALS_IN_FLIGHT_MAX >= 1); // something is proposed

/// What a write answers: its response, or why Raft did not take it.
pub(crate) type WriteResult =
    Result<Response, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>;

/// The queue of a node's writes; see the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct Proposer {
    queue: mpsc::Sender<Pending>,
}

/// A queued write and where its answer goes.
#[derive(Debug)]
struct Pending {
    request: Request,
    reply: oneshot::Sender<WriteResult>,
}

impl Pending {
    fn ops(&self) -> usize {
        match &self.request {
            Request::Set { .. } | Request::Delete { .. } => 1,
            Request::Batch { ops } => ops.len(),
        }
    }

    fn bytes(&self) -> usize {
        let op = |op: &Op| match op {
            Op::Set { key, value } => key.len() + value.len(),
            Op::Delete { key } => key.len(),
        };
        match &self.request {
            Request::Set { key, value } => key.len() + value.len(),
            Request::Delete { key } => key.len(),
            Request::Batch { ops } => ops.iter().map(op).sum(),
        }
    }
}

fn stopped() -> RaftError<NodeId, ClientWriteError<NodeId, BasicNode>> {
    RaftError::Fatal(Fatal::Stopped)
}

impl Proposer {
    /// Starts the proposing task of `raft`. It ends once every clone of
    /// the returned proposer is dropped and the queue is empty.
    pub(crate) fn start(raft: Raft<TypeConfig>) -> Proposer {
        let (queue, rx) = mpsc::channel(QUEUE_MAX);
        tokio::spawn(propose_all(raft, rx));
        Proposer { queue }
    }

    /// Proposes `request` (in a group with others queued beside it) and
    /// answers what applying it answered, or the error of its group's
    /// proposal (`Fatal::Stopped` if the node is shutting down).
    pub(crate) async fn write(&self, request: Request) -> WriteResult {
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Pending { request, reply }).await.is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// The proposing task: forms groups and proposes each on its own task.
async fn propose_all(raft: Raft<TypeConfig>, mut queue: mpsc::Receiver<Pending>) {
    let in_flight = Arc::new(Semaphore::new(PROPOSALS_IN_FLIGHT_MAX));
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match queue.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return; // never closed
        };
        // 1. Everything queued while the previous groups were in flight.
        let (mut ops, mut bytes) = (first.ops(), first.bytes());
        let mut group = vec![first];
        while ops < GROUP_OPS_MAX && bytes < GROUP_BYTES_MAX {
            let Ok(next) = queue.try_recv() else { break };
            if ops + next.ops() > GROUP_OPS_MAX || bytes + next.bytes() > GROUP_BYTES_MAX {
                carried = Some(next);
                break;
            }
            ops += next.ops();
            bytes += next.bytes();
            group.push(next);
        }
        // 2. Proposed in queue order (the send to Raft's core is awaited
        // here), answered on a task of its own.
        let (request, shapes) = merge(&mut group);
        let proposed = raft.client_write_ff(request).await;
        tokio::spawn(async move {
            let result = match proposed {
                Ok(answer) => match answer.await {
                    Ok(r) => r.map(|r| r.data).map_err(RaftError::APIError),
                    Err(_) => Err(stopped()),
                },
                Err(fatal) => Err(RaftError::Fatal(fatal)),
            };
            answer_all(group, shapes, result);
            drop(permit);
        });
    }
}

/// How a request of a group was merged: which ops of the group's batch
/// are its own, and whether it was a batch itself.
struct Shape {
    ops: std::ops::Range<usize>,
    batch: bool,
}

/// The request to propose for `group`: its one request, or one batch of
/// all their ops; the requests are taken out of `group`.
fn merge(group: &mut [Pending]) -> (Request, Option<Vec<Shape>>) {
    let placeholder = || Request::Batch { ops: Vec::new() };
    if let [one] = group {
        return (std::mem::replace(&mut one.request, placeholder()), None);
    }
    let mut ops = Vec::new();
    let mut shapes = Vec::with_capacity(group.len());
    for p in group.iter_mut() {
        let start = ops.len();
        let batch = match std::mem::replace(&mut p.request, placeholder()) {
            Request::Set { key, value } => {
                ops.push(Op::Set { key, value });
                false
            }
            Request::Delete { key } => {
                ops.push(Op::Delete { key });
                false
            }
            Request::Batch { ops: more } => {
                ops.extend(more);
                true
            }
        };
        shapes.push(Shape {
            ops: start..ops.len(),
            batch,
        });
    }
    (Request::Batch { ops }, Some(shapes))
}

/// Sends each request of the group its answer.
fn answer_all(group: Vec<Pending>, shapes: Option<Vec<Shape>>, result: WriteResult) {
    let Some(shapes) = shapes else {
        for p in group {
            let _ = p.reply.send(result.clone());
        }
        return;
    };
    let previous = match result {
        Ok(Response::Batch(previous)) => previous,
        Ok(other) => panic!("a batch of a group was answered {other:?}"),
        Err(e) => {
            for p in group {
                let _ = p.reply.send(Err(e.clone()));
            }
            return;
        }
    };
    assert_eq!(
        previous.len(),
        shapes.last().map_or(0, |s| s.ops.end),
        "a batch answers one value per op"
    );
    for (p, shape) in group.into_iter().zip(shapes) {
        let mine = &previous[shape.ops];
        let response = if shape.batch {
            Response::Batch(mine.to_vec())
        } else {
            Response::Previous(mine[0].clone())
        };
        let _ = p.reply.send(Ok(response));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(request: Request) -> (Pending, oneshot::Receiver<WriteResult>) {
        let (reply, answer) = oneshot::channel();
        (Pending { request, reply }, answer)
    }

    fn set(k: &str, v: &str) -> Request {
        Request::Set {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn one_request_goes_as_it_is() {
        let (p, mut answer) = pending(set("a", "1"));
        let mut group = vec![p];
        let (request, shapes) = merge(&mut group);
        assert_eq!(request, set("a", "1"));
        answer_all(group, shapes, Ok(Response::Previous(Some("0".into()))));
        let got = answer.try_recv().expect("answered").expect("ok");
        assert_eq!(got, Response::Previous(Some("0".into())));
    }

    #[test]
    fn a_group_is_one_batch_and_each_request_gets_its_own_answer() {
        let batch = Request::Batch {
            ops: vec![
                Op::Set {
                    key: "b".into(),
                    value: "2".into(),
                },
                Op::Delete { key: "a".into() },
            ],
        };
        let (p1, mut a1) = pending(set("a", "1"));
        let (p2, mut a2) = pending(batch);
        let (p3, mut a3) = pending(Request::Delete { key: "c".into() });
        let mut group = vec![p1, p2, p3];
        let (request, shapes) = merge(&mut group);
        let Request::Batch { ops } = &request else {
            panic!("a batch: {request:?}");
        };
        assert_eq!(ops.len(), 4);
        assert_eq!(
            ops[0],
            Op::Set {
                key: "a".into(),
                value: "1".into()
            }
        );
        assert_eq!(ops[3], Op::Delete { key: "c".into() });
        let previous = vec![None, Some("x".into()), Some("1".into()), Some("y".into())];
        answer_all(group, shapes, Ok(Response::Batch(previous)));
        let ok =
            |a: &mut oneshot::Receiver<WriteResult>| a.try_recv().expect("answered").expect("ok");
        assert_eq!(ok(&mut a1), Response::Previous(None));
        assert_eq!(
            ok(&mut a2),
            Response::Batch(vec![Some("x".into()), Some("1".into())])
        );
        assert_eq!(ok(&mut a3), Response::Previous(Some("y".into())));
    }

    #[test]
    fn a_failed_group_fails_every_request() {
        let (p1, mut a1) = pending(set("a", "1"));
        let (p2, mut a2) = pending(set("b", "2"));
        let mut group = vec![p1, p2];
        let (_, shapes) = merge(&mut group);
        answer_all(group, shapes, Err(stopped()));
        assert!(a1.try_recv().expect("answered").is_err());
        assert!(a2.try_recv().expect("answered").is_err());
    }
}
