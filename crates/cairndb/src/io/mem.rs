//! An in-memory file system for tests, with a durable image for simulated
//! power cuts.
//!
//! Each file keeps its bytes and the length known durable (files are only
//! appended to, so the durable image is a prefix). The directory has a live
//! namespace and a durable one; `sync_dir` copies the live entries of that
//! directory into the durable namespace. [`MemFs::power_cut`] replaces the
//! live state with the durable one: unsynced appends vanish, unsynced
//! creations, renames and removals revert. Richer damage (torn sectors,
//! garbage, injected errors) belongs to the testkit's fault-injecting
//! backend, which builds on the same trait.

use super::{DirLock, FileRead, FileWrite, Fs};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Default)]
struct Node {
    data: Mutex<NodeData>,
}

#[derive(Default)]
struct NodeData {
    bytes: Vec<u8>,
    synced_len: usize,
}

#[derive(Default)]
struct State {
    live: BTreeMap<PathBuf, Arc<Node>>,
    durable: BTreeMap<PathBuf, Arc<Node>>,
    dirs: BTreeSet<PathBuf>,
}

/// An in-memory [`Fs`]. Cloning gives another handle to the same files.
#[derive(Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
    locks: Arc<Mutex<BTreeSet<PathBuf>>>,
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power cut: only what was synced (file bytes by
    /// `FileWrite::sync`, names by `Fs::sync_dir`) survives. Open handles
    /// keep working on the surviving nodes; callers drop their databases
    /// before calling this.
    pub fn power_cut(&self) {
        let mut state = self.state.lock();
        state.live = state.durable.clone();
        for node in state.live.values() {
            let mut data = node.data.lock();
            let keep = data.synced_len;
            data.bytes.truncate(keep);
        }
        self.locks.lock().clear();
    }

    /// Test hook: replaces the byte at `offset` of `path` with `f(byte)`,
    /// in both the live and the durable image. Returns false if out of range.
    pub fn mutate_byte(&self, path: &Path, offset: usize, f: impl FnOnce(u8) -> u8) -> bool {
        let state = self.state.lock();
        let Some(node) = state.live.get(path) else {
            return false;
        };
        let mut data = node.data.lock();
        match data.bytes.get_mut(offset) {
            Some(b) => {
                *b = f(*b);
                true
            }
            None => false,
        }
    }

    /// Test hook: cuts `path` to `len` bytes (live and durable).
    pub fn truncate(&self, path: &Path, len: usize) {
        let state = self.state.lock();
        if let Some(node) = state.live.get(path) {
            let mut data = node.data.lock();
            data.bytes.truncate(len);
            data.synced_len = data.synced_len.min(len);
        }
    }

    /// Size of `path`, if it exists.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        let state = self.state.lock();
        state
            .live
            .get(path)
            .map(|n| n.data.lock().bytes.len() as u64)
    }

    fn node(&self, path: &Path) -> io::Result<Arc<Node>> {
        self.state
            .lock()
            .live
            .get(path)
            .cloned()
            .ok_or_else(|| not_found(path))
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

struct MemWrite {
    node: Arc<Node>,
}

impl FileWrite for MemWrite {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.node.data.lock().bytes.extend_from_slice(data);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        let mut d = self.node.data.lock();
        d.synced_len = d.bytes.len();
        Ok(())
    }
    fn len(&self) -> u64 {
        self.node.data.lock().bytes.len() as u64
    }
}

struct MemRead {
    node: Arc<Node>,
}

impl FileRead for MemRead {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.node.data.lock();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(buf.len());
        match end.and_then(|end| d.bytes.get(start..end)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end of file",
            )),
        }
    }
    fn len(&self) -> u64 {
        self.node.data.lock().bytes.len() as u64
    }
}

struct MemLock {
    locks: Arc<Mutex<BTreeSet<PathBuf>>>,
    dir: PathBuf,
}
impl DirLock for MemLock {}
impl Drop for MemLock {
    fn drop(&mut self) {
        self.locks.lock().remove(&self.dir);
    }
}

impl Fs for MemFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.state.lock().dirs.insert(dir.to_path_buf());
        Ok(())
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn FileWrite>> {
        let node = Arc::new(Node::default());
        self.state
            .lock()
            .live
            .insert(path.to_path_buf(), node.clone());
        Ok(Box::new(MemWrite { node }))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn FileRead>> {
        Ok(Arc::new(MemRead {
            node: self.node(path)?,
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        let node = state.live.remove(from).ok_or_else(|| not_found(from))?;
        state.live.insert(to.to_path_buf(), node);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.state
            .lock()
            .live
            .remove(path)
            .map(drop)
            .ok_or_else(|| not_found(path))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let state = self.state.lock();
        Ok(state
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        let State { live, durable, .. } = &mut *state;
        durable.retain(|p, _| p.parent() != Some(dir));
        for (p, n) in live.iter().filter(|(p, _)| p.parent() == Some(dir)) {
            durable.insert(p.clone(), n.clone());
        }
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let state = self.state.lock();
        state.live.contains_key(path) || state.dirs.contains(path)
    }
    fn lock(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let mut locks = self.locks.lock();
        if !locks.insert(dir.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "database is locked by another handle",
            ));
        }
        Ok(Box::new(MemLock {
            locks: self.locks.clone(),
            dir: dir.to_path_buf(),
        }))
    }
}
