//! A client of the replicated key-value service: given the addresses of
//! some nodes, it finds the leader, follows 421 answers to the leader they
//! name, and retries across leader changes with bounded backoff.
//!
//! ```no_run
//! # async fn run() -> Result<(), cairn_raft::client::ClientError> {
//! let client = cairn_raft::client::Client::new(["127.0.0.1:7001", "127.0.0.1:7002"]);
//! client.put("apple", "red").await?;
//! assert_eq!(client.get("apple").await?, Some("red".into()));
//! # Ok(()) }
//! ```
//!
//! What is retried: a request that did not reach a node (the connection
//! was refused), and one a node refused without acting on it (421: not
//! the leader); reads also when their answer was lost or the node failed
//! them (503), as a read changes nothing. A write whose answer was lost
//! after it was sent (the connection broke, the node died, the answer
//! timed out) or that the leader failed (503) is not sent again: it may
//! still be applied, now or after a leader change, and sending it again
//! could apply it twice, after a later write of the same key. Such a call
//! returns [`ClientError::Ambiguous`]; read back to learn the outcome.
//!
//! Why a 421 to a write is safe to retry: a node answers it when it is
//! not the leader, before proposing anything, or (openraft 0.9,
//! `DeleteConflictLog`) for a proposed entry its log dropped for a new
//! leader's, which a committed entry never is. A leader that steps down
//! with a proposal pending answers it once the entry is applied, or drops
//! it as above.
//!
//! Sharing: a `Client` is `Send + Sync` and cheap to clone (clones share
//! the connection pool and the remembered leader).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::{BasicNode, RaftMetrics};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use crate::service::ErrorBody;
use crate::{NodeId, Op, Response};

/// Longest one call (all its attempts and backoffs) goes on; then it
/// returns [`ClientError::Unavailable`]. Two elections' worth and more.
pub const CALL_TIME_MAX: Duration = Duration::from_secs(15);
/// Most attempts of one call.
pub const ATTEMPTS_MAX: u32 = 200;
/// First pause after an attempt that found no leader; doubled each time.
pub const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest pause between attempts: short beside an election (hundreds of
/// milliseconds), so a client notices a new leader soon after it is
/// elected, and long enough that a few clients polling during an
/// election cost the nodes little.
pub const BACKOFF_MAX: Duration = Duration::from_millis(100);
/// Longest one HTTP request may take. A linearizable read on a leader cut
/// off from its quorum does not answer; this bounds it.
pub const REQUEST_TIME_MAX: Duration = Duration::from_secs(3);

const _: () = assert!(BACKOFF_MIN.as_millis() < BACKOFF_MAX.as_millis()); // the backoff grows
const _: () = assert!(REQUEST_TIME_MAX.as_millis() < CALL_TIME_MAX.as_millis()); // a call outlives a hung request

/// Why a call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// No node answered the call successfully within `CALL_TIME_MAX` or
    /// `ATTEMPTS_MAX` attempts (no leader, nodes down or cut off). A write
    /// may or may not have been applied. `last` is the last failure seen.
    Unavailable { attempts: u32, last: String },
    /// A write reached a node, but its outcome is unknown (the answer was
    /// lost, or the leader failed it): it may be applied or not, now or
    /// later. Not retried, so that it is not applied twice.
    Ambiguous(String),
    /// The node refused the request as malformed (400): retrying will not
    /// help.
    InvalidArgument(String),
    /// A node answered something this client cannot read.
    Protocol(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unavailable { attempts, last } => {
                write!(f, "no leader answered after {attempts} attempts: {last}")
            }
            ClientError::Ambiguous(e) => write!(f, "a write of unknown outcome: {e}"),
            ClientError::InvalidArgument(e) => write!(f, "invalid request: {e}"),
            ClientError::Protocol(e) => write!(f, "unreadable answer: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// The outcome of one attempt.
enum Attempt {
    /// The answer, with its status (200, or 404 for a missing key).
    Done(StatusCode, String),
    /// Ask this address next (a 421 naming the leader).
    Redirect(String),
    /// Try again after a pause, at the next address.
    Retry(String),
    /// Give up.
    Fail(ClientError),
}

/// A client of a cluster. See the module documentation.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    addrs: Arc<Vec<String>>,
    /// The address that answered last, or the leader a 421 named: tried
    /// first.
    leader: Arc<Mutex<Option<String>>>,
}

impl Client {
    /// A client of the nodes at `addrs` (`host:port`; at least one).
    /// Nothing is contacted until the first call.
    pub fn new<I, S>(addrs: I) -> Client
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let addrs: Vec<String> = addrs.into_iter().map(Into::into).collect();
        assert!(!addrs.is_empty(), "a client needs at least one address");
        Client {
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIME_MAX)
                .build()
                .unwrap_or_default(),
            addrs: Arc::new(addrs),
            leader: Arc::new(Mutex::new(None)),
        }
    }

    /// The addresses the client was given.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// Sets `key` to `value`; answers the previous value (see the module
    /// documentation on retries).
    pub async fn put(&self, key: &str, value: &str) -> Result<Option<String>, ClientError> {
        let body = self
            .call(Method::PUT, &kv_path(key), Some(value.to_owned()))
            .await?;
        previous(&body)
    }

    /// Removes `key`; answers the previous value.
    pub async fn delete(&self, key: &str) -> Result<Option<String>, ClientError> {
        let body = self.call(Method::DELETE, &kv_path(key), None).await?;
        previous(&body)
    }

    /// A linearizable read of `key` through the leader.
    pub async fn get(&self, key: &str) -> Result<Option<String>, ClientError> {
        self.call_read(&kv_path(key)).await
    }

    /// A read of `key` from the node at `addr` alone, as it has applied
    /// (`?stale=true`): not linearizable, and not retried elsewhere.
    pub async fn get_stale(&self, addr: &str, key: &str) -> Result<Option<String>, ClientError> {
        let path = format!("{}?stale=true", kv_path(key));
        match self.attempt(addr, Method::GET, &path, None).await {
            Attempt::Done(StatusCode::NOT_FOUND, _) => Ok(None),
            Attempt::Done(_, body) => Ok(Some(body)),
            Attempt::Redirect(e) | Attempt::Retry(e) => Err(ClientError::Unavailable {
                attempts: 1,
                last: e,
            }),
            Attempt::Fail(e) => Err(e),
        }
    }

    /// A linearizable range read through the leader: at most `limit`
    /// pairs (and at most `service::RANGE_PAIRS_MAX`) with keys from
    /// `from` (inclusive) to `to` (exclusive; `None`: the end).
    pub async fn range(
        &self,
        from: &str,
        to: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, ClientError> {
        let body = self
            .call(Method::GET, &range_path(from, to, limit, false), None)
            .await?;
        decode(&body)
    }

    /// A range read from the node at `addr` alone, as it has applied.
    pub async fn range_stale(
        &self,
        addr: &str,
        from: &str,
        to: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, ClientError> {
        let path = range_path(from, to, limit, true);
        match self.attempt(addr, Method::GET, &path, None).await {
            Attempt::Done(_, body) => decode(&body),
            Attempt::Redirect(e) | Attempt::Retry(e) => Err(ClientError::Unavailable {
                attempts: 1,
                last: e,
            }),
            Attempt::Fail(e) => Err(e),
        }
    }

    /// Applies `ops` as one Raft entry; answers each op's previous value.
    pub async fn batch(&self, ops: &[Op]) -> Result<Vec<Option<String>>, ClientError> {
        let json = serde_json::to_string(ops).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let body = self.call_json(Method::POST, "/batch", json).await?;
        match decode::<Response>(&body)? {
            Response::Batch(previous) => Ok(previous),
            other => Err(ClientError::Protocol(format!("a batch answered {other:?}"))),
        }
    }

    /// The Raft metrics of the node at `addr` (not retried).
    pub async fn metrics(&self, addr: &str) -> Result<RaftMetrics<NodeId, BasicNode>, ClientError> {
        match self.attempt(addr, Method::GET, "/metrics", None).await {
            Attempt::Done(_, body) => decode(&body),
            Attempt::Redirect(e) | Attempt::Retry(e) => Err(ClientError::Unavailable {
                attempts: 1,
                last: e,
            }),
            Attempt::Fail(e) => Err(e),
        }
    }

    /// Posts `json` to `path` on the node at `addr` (not retried): the
    /// cluster administration endpoints.
    pub async fn post_to(
        &self,
        addr: &str,
        path: &str,
        json: String,
    ) -> Result<String, ClientError> {
        match self
            .attempt_json(addr, Method::POST, path, Some(json))
            .await
        {
            Attempt::Done(_, body) => Ok(body),
            Attempt::Redirect(e) | Attempt::Retry(e) => Err(ClientError::Unavailable {
                attempts: 1,
                last: e,
            }),
            Attempt::Fail(e) => Err(e),
        }
    }

    async fn call_read(&self, path: &str) -> Result<Option<String>, ClientError> {
        match self.call_status(Method::GET, path, None, false).await? {
            (StatusCode::NOT_FOUND, _) => Ok(None),
            (_, body) => Ok(Some(body)),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<String, ClientError> {
        Ok(self.call_status(method, path, body, false).await?.1)
    }

    async fn call_json(
        &self,
        method: Method,
        path: &str,
        json: String,
    ) -> Result<String, ClientError> {
        Ok(self.call_status(method, path, Some(json), true).await?.1)
    }

    /// Sends the request to the remembered leader (else the first
    /// address), follows redirects, and on other failures moves to the
    /// next address after a growing pause; bounded by `ATTEMPTS_MAX` and
    /// `CALL_TIME_MAX`.
    async fn call_status(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
        json: bool,
    ) -> Result<(StatusCode, String), ClientError> {
        let start = Instant::now();
        let mut next = 0usize;
        let mut addr = self.remembered().unwrap_or_else(|| self.addrs[0].clone());
        let mut backoff = BACKOFF_MIN;
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS_MAX {
            if start.elapsed() > CALL_TIME_MAX {
                return Err(ClientError::Unavailable {
                    attempts: attempt,
                    last,
                });
            }
            let outcome = if json {
                self.attempt_json(&addr, method.clone(), path, body.clone())
                    .await
            } else {
                self.attempt(&addr, method.clone(), path, body.clone())
                    .await
            };
            match outcome {
                Attempt::Done(status, text) => {
                    self.remember(Some(addr));
                    return Ok((status, text));
                }
                Attempt::Fail(e) => return Err(e),
                Attempt::Redirect(leader) if leader != addr => {
                    addr = leader;
                    self.remember(Some(addr.clone()));
                    continue;
                }
                Attempt::Redirect(e) | Attempt::Retry(e) => {
                    last = format!("{addr}: {e}");
                    self.remember(None);
                }
            }
            if start.elapsed() + backoff > CALL_TIME_MAX {
                return Err(ClientError::Unavailable {
                    attempts: attempt,
                    last,
                });
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            addr = self.addrs[next % self.addrs.len()].clone();
            next += 1;
        }
        Err(ClientError::Unavailable {
            attempts: ATTEMPTS_MAX,
            last,
        })
    }

    async fn attempt(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Attempt {
        self.send(addr, method, path, body, false).await
    }

    async fn attempt_json(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Attempt {
        self.send(addr, method, path, body, true).await
    }

    async fn send(
        &self,
        addr: &str,
        method: Method,
        path: &str,
        body: Option<String>,
        json: bool,
    ) -> Attempt {
        let read = method == Method::GET;
        let mut req = self.http.request(method, format!("http://{addr}{path}"));
        if json {
            req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if read || e.is_connect() => return Attempt::Retry(e.to_string()),
            Err(e) => return Attempt::Fail(ClientError::Ambiguous(e.to_string())),
        };
        let status = resp.status();
        let text = match resp.text().await {
            Ok(t) => t,
            Err(e) if read => return Attempt::Retry(e.to_string()),
            Err(e) => return Attempt::Fail(ClientError::Ambiguous(e.to_string())),
        };
        match status {
            StatusCode::OK | StatusCode::NOT_FOUND => Attempt::Done(status, text),
            StatusCode::MISDIRECTED_REQUEST => match serde_json::from_str::<ErrorBody>(&text) {
                Ok(ErrorBody {
                    leader: Some(l), ..
                }) => Attempt::Redirect(l.addr),
                Ok(ErrorBody { error, .. }) => Attempt::Retry(error),
                Err(e) => Attempt::Fail(ClientError::Protocol(format!("a 421 answer: {e}"))),
            },
            StatusCode::BAD_REQUEST
            | StatusCode::UNPROCESSABLE_ENTITY
            | StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                Attempt::Fail(ClientError::InvalidArgument(text))
            }
            _ if read => Attempt::Retry(format!("{status}: {text}")),
            _ => Attempt::Fail(ClientError::Ambiguous(format!("{status}: {text}"))),
        }
    }

    fn remembered(&self) -> Option<String> {
        self.leader.lock().map(|l| l.clone()).unwrap_or(None)
    }

    fn remember(&self, addr: Option<String>) {
        if let Ok(mut l) = self.leader.lock() {
            *l = addr;
        }
    }
}

fn kv_path(key: &str) -> String {
    format!("/kv/{}", encode(key))
}

fn range_path(from: &str, to: Option<&str>, limit: usize, stale: bool) -> String {
    let mut path = format!("/kv?from={}&limit={limit}", encode(from));
    if let Some(to) = to {
        path.push_str("&to=");
        path.push_str(&encode(to));
    }
    if stale {
        path.push_str("&stale=true");
    }
    path
}

/// Percent-encodes everything but unreserved characters (RFC 3986), for a
/// key in a path segment or a query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode<T: DeserializeOwned>(body: &str) -> Result<T, ClientError> {
    serde_json::from_str(body).map_err(|e| ClientError::Protocol(format!("{e}: {body}")))
}

fn previous(body: &str) -> Result<Option<String>, ClientError> {
    match decode::<Response>(body)? {
        Response::Previous(p) => Ok(p),
        other => Err(ClientError::Protocol(format!("a write answered {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that reads a request and closes the connection without an
    /// answer: a put is sent once and returns `Ambiguous`.
    #[tokio::test]
    async fn a_write_whose_answer_is_lost_is_not_sent_again() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("address").to_string();
        let server = tokio::spawn(async move {
            let mut accepted = 0;
            while let Ok(Ok((mut conn, _))) =
                tokio::time::timeout(Duration::from_millis(500), listener.accept()).await
            {
                accepted += 1;
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
            }
            accepted
        });
        let client = Client::new([addr]);
        let put = client.put("k", "v").await;
        assert!(matches!(put, Err(ClientError::Ambiguous(_))), "{put:?}");
        assert_eq!(server.await.expect("server"), 1, "the put was sent again");
    }

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(encode("a-b_c.d~e9"), "a-b_c.d~e9");
        assert_eq!(encode("a b/c?é"), "a%20b%2Fc%3F%C3%A9");
        assert_eq!(
            range_path("a", Some("b c"), 5, true),
            "/kv?from=a&limit=5&to=b%20c&stale=true"
        );
    }
}
