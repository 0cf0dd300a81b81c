//! Where snapshots and the state machine's data live: each in a keyspace
//! of its own generation, so that a snapshot is streamed to and from the
//! database piece by piece and an installed snapshot replaces the data by
//! switching one name.
//!
//! - The data: keyspace `kv` at first, then `kv.N` after each install
//!   (`N` from a counter shared with snapshots). `raft_meta` key `sm.kv`
//!   names the current one (absent: `kv`).
//! - A snapshot's data: keyspace `raft_snapshot.N`, keys the piece
//!   number (8 bytes big-endian), values [`PIECE_BYTES`] of the data
//!   stream (`codec` format) each, the last one shorter. `raft_meta` key
//!   `sm.snapshot.stored` names the current snapshot's keyspace and
//!   length, next to its metadata in `sm.snapshot.meta`.
//!
//! A generation is a `Generation`: the keyspace handle and whether it is
//! recorded (current). Builders, readers of a snapshot and installs hold
//! it by `Arc`; once it is neither current nor held, the last holder drops
//! its keyspace (one synced manifest edit; the data leaves in the
//! background). A keyspace of either family that the records do not name
//! is left from a crash or a drop that did not happen, and is dropped when
//! the store opens.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use cairndb::{Db, Keyspace};
use serde::{Deserialize, Serialize};

/// Bytes of snapshot data per stored piece (the last piece of a snapshot
/// may be shorter).
pub const PIECE_BYTES: usize = 1 << 20;

/// Family of the state machine's data keyspaces (`kv`, `kv.N`).
pub(crate) const KV_FAMILY: &str = crate::KV_KEYSPACE;
/// Family of the snapshot data keyspaces (`raft_snapshot.N`).
pub(crate) const SNAPSHOT_FAMILY: &str = "raft_snapshot";

/// The name of generation `n` of `family`: the bare family name for 0.
pub(crate) fn generation_name(family: &str, n: u64) -> String {
    if n == 0 {
        family.to_owned()
    } else {
        format!("{family}.{n}")
    }
}

/// The family and generation a keyspace name is of, if it is one.
pub(crate) fn parse_generation(name: &str) -> Option<(&'static str, u64)> {
    for family in [KV_FAMILY, SNAPSHOT_FAMILY] {
        if name == family {
            return Some((family, 0));
        }
        if let Some(n) = name
            .strip_prefix(family)
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|&n| n > 0 && generation_name(family, n) == name)
        {
            return Some((family, n));
        }
    }
    None
}

/// What `sm.snapshot.stored` records: where the current snapshot's data
/// is and how long it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stored {
    pub keyspace: String,
    pub len: u64,
}

/// One keyspace generation (the state machine's data, or one snapshot's
/// data). Dropping the last `Arc` of a generation that is not current
/// drops its keyspace.
pub(crate) struct Generation {
    db: Db,
    pub ks: Keyspace,
    current: AtomicBool,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("keyspace", &self.ks.name())
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish()
    }
}

impl Generation {
    /// The generation in keyspace `name` (created if missing), current
    /// or not.
    pub fn open(db: &Db, name: &str, current: bool) -> Result<Arc<Generation>, cairndb::Error> {
        Ok(Arc::new(Generation {
            ks: db.keyspace(name)?,
            db: db.clone(),
            current: AtomicBool::new(current),
        }))
    }

    pub fn name(&self) -> &str {
        self.ks.name()
    }

    /// Marks it recorded as current (kept) or replaced (dropped once
    /// released).
    pub fn set_current(&self, current: bool) {
        self.current.store(current, Ordering::Release);
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.current.load(Ordering::Acquire) {
            // A failure leaves the keyspace to the next open, which drops
            // every generation the records do not name.
            let _ = self.db.drop_keyspace(self.ks.name());
        }
    }
}

/// The key of piece `n`.
fn piece_key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// The piece `SnapshotData` has in memory.
#[derive(Debug, Default)]
struct Piece {
    /// Which piece `bytes` is; `None`: none loaded.
    index: Option<u64>,
    bytes: Vec<u8>,
    /// Written to since it was loaded or stored.
    dirty: bool,
}

/// Snapshot data: a seekable stream over the pieces of a snapshot
/// keyspace, the `SnapshotData` of [`crate::TypeConfig`]. Reading it
/// reads one piece at a time from the database; writing it (a snapshot
/// being built or received) stores each piece as it fills, unsynced, and
/// the rest on `flush` or `shutdown`. It holds one piece in memory,
/// whatever the size of the snapshot.
///
/// The tokio IO traits are served by CairnDB calls made in the poll call
/// itself: a get or an unsynced put of one piece, at most [`PIECE_BYTES`].
#[derive(Debug)]
pub struct SnapshotData {
    generation: Arc<Generation>,
    /// The store the data belongs to ([`crate::Shared::token`]).
    owner: Arc<()>,
    len: u64,
    pos: u64,
    piece: Piece,
}

fn db_error(e: cairndb::Error) -> io::Error {
    io::Error::other(e)
}

impl SnapshotData {
    /// The data of `len` bytes in `generation`, read from the start.
    pub(crate) fn new(generation: Arc<Generation>, owner: Arc<()>, len: u64) -> SnapshotData {
        SnapshotData {
            generation,
            owner,
            len,
            pos: 0,
            piece: Piece::default(),
        }
    }

    /// Length of the data in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn generation(&self) -> &Arc<Generation> {
        &self.generation
    }

    /// Whether the data is stored in the store `token` names.
    pub(crate) fn is_of(&self, token: &Arc<()>) -> bool {
        Arc::ptr_eq(&self.owner, token)
    }

    /// Stores the piece in memory if it was written to.
    fn store_piece(&mut self) -> io::Result<()> {
        if let (true, Some(n)) = (self.piece.dirty, self.piece.index) {
            self.generation
                .ks
                .put(piece_key(n), &self.piece.bytes)
                .map_err(db_error)?;
            self.piece.dirty = false;
        }
        Ok(())
    }

    /// Makes piece `n` the one in memory.
    fn load(&mut self, n: u64) -> io::Result<()> {
        if self.piece.index == Some(n) {
            return Ok(());
        }
        self.store_piece()?;
        let start = n * PIECE_BYTES as u64;
        // A piece before the end that was never written (a write after a
        // seek past the end) reads as zeros, as a file's hole does.
        let want = self.len.saturating_sub(start).min(PIECE_BYTES as u64) as usize;
        let stored = self.generation.ks.get(piece_key(n)).map_err(db_error)?;
        let mut bytes: Vec<u8> = stored.unwrap_or_default();
        if bytes.len() > PIECE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "snapshot piece {n} of {} is {} bytes, more than a piece",
                    self.generation.name(),
                    bytes.len()
                ),
            ));
        }
        if bytes.len() < want {
            bytes.resize(want, 0);
        }
        self.piece = Piece {
            index: Some(n),
            bytes,
            dirty: false,
        };
        Ok(())
    }
}

impl Read for SnapshotData {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let n = self.pos / PIECE_BYTES as u64;
        self.load(n)?;
        let at = (self.pos % PIECE_BYTES as u64) as usize;
        let end = (self.len - n * PIECE_BYTES as u64).min(PIECE_BYTES as u64) as usize;
        assert!(at < end && end <= self.piece.bytes.len());
        let take = buf.len().min(end - at);
        buf[..take].copy_from_slice(&self.piece.bytes[at..at + take]);
        self.pos += take as u64;
        Ok(take)
    }
}

impl Write for SnapshotData {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let n = self.pos / PIECE_BYTES as u64;
        self.load(n)?;
        let at = (self.pos % PIECE_BYTES as u64) as usize;
        let take = buf.len().min(PIECE_BYTES - at);
        let bytes = &mut self.piece.bytes;
        if bytes.len() < at + take {
            bytes.resize(at + take, 0);
        }
        bytes[at..at + take].copy_from_slice(&buf[..take]);
        self.piece.dirty = true;
        self.pos += take as u64;
        self.len = self.len.max(self.pos);
        if at + take == PIECE_BYTES {
            // A full piece goes out at once: memory holds one piece.
            self.store_piece()?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.store_piece()
    }
}

impl Seek for SnapshotData {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let pos = pos
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        self.pos = pos;
        Ok(pos)
    }
}

impl tokio::io::AsyncRead for SnapshotData {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let n = this.read(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for SnapshotData {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.get_mut().write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().store_piece())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.get_mut().store_piece())
    }
}

impl tokio::io::AsyncSeek for SnapshotData {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        self.get_mut().seek(to).map(|_| ())
    }

    fn poll_complete(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(db: &Db, name: &str) -> SnapshotData {
        let g = Generation::open(db, name, false).expect("keyspace");
        SnapshotData::new(g, Arc::new(()), 0)
    }

    fn all(d: &mut SnapshotData) -> Vec<u8> {
        d.seek(SeekFrom::Start(0)).expect("seek");
        let mut out = Vec::new();
        d.read_to_end(&mut out).expect("read");
        out
    }

    #[test]
    fn generation_names_parse_back() {
        for family in [KV_FAMILY, SNAPSHOT_FAMILY] {
            for n in [0, 1, 9, 10, u64::MAX] {
                assert_eq!(
                    parse_generation(&generation_name(family, n)),
                    Some((family, n))
                );
            }
        }
        for other in [
            "kv.",
            "kv.0",
            "kv.01",
            "kv.x",
            "kvx",
            "raft_meta",
            "raft_snapshot.-1",
        ] {
            assert_eq!(parse_generation(other), None, "{other}");
        }
    }

    #[test]
    fn pieces_hold_what_was_written_across_their_edges() {
        let dir = tempfile::tempdir().expect("dir");
        let db = Db::open(dir.path(), cairndb::Options::with_memory_budget(8 << 20)).expect("open");
        let mut d = data(&db, "raft_snapshot.1");
        let want: Vec<u8> = (0..PIECE_BYTES * 2 + 777)
            .map(|i| (i % 251) as u8)
            .collect();
        // Writes of odd sizes straddle the piece edges.
        for chunk in want.chunks(65_537) {
            d.write_all(chunk).expect("write");
        }
        d.flush().expect("flush");
        assert_eq!(d.len(), want.len() as u64);
        assert_eq!(all(&mut d), want);
        // A second handle over the same keyspace reads the stored pieces.
        let g = d.generation().clone();
        let mut again = SnapshotData::new(g, Arc::new(()), want.len() as u64);
        assert_eq!(all(&mut again), want);
        // A rewrite at an offset (a chunk sent again) changes only its bytes.
        let at = PIECE_BYTES as u64 - 3;
        d.seek(SeekFrom::Start(at)).expect("seek");
        d.write_all(&[0xaa; 6]).expect("rewrite");
        d.flush().expect("flush");
        let mut changed = want.clone();
        changed[at as usize..at as usize + 6].fill(0xaa);
        assert_eq!(all(&mut d), changed);
        assert_eq!(d.seek(SeekFrom::End(0)).expect("end"), want.len() as u64);
        assert!(d.seek(SeekFrom::Current(-(want.len() as i64) - 1)).is_err());
    }

    #[test]
    fn a_released_generation_that_is_not_current_is_dropped() {
        let dir = tempfile::tempdir().expect("dir");
        let db = Db::open(dir.path(), cairndb::Options::with_memory_budget(8 << 20)).expect("open");
        let kept = Generation::open(&db, "kv.1", true).expect("kv.1");
        let gone = Generation::open(&db, "kv.2", false).expect("kv.2");
        let held = gone.clone();
        drop(gone);
        assert!(db.keyspaces().contains(&"kv.2".to_string()), "still held");
        drop(held);
        drop(kept);
        let names = db.keyspaces();
        assert!(!names.contains(&"kv.2".to_string()), "{names:?}");
        assert!(names.contains(&"kv.1".to_string()), "{names:?}");
    }
}
