//! An in-memory file system for tests: simulated storage with a durable
//! image, realistic power-cut damage and injectable faults.
//!
//! Each file keeps its live bytes (what reads see, like the page cache)
//! and its durable bytes (what the device holds). `FileWrite::sync` copies
//! live to durable. The namespace has a live map and a durable map, plus
//! the log of creations, renames and removals since the directory was last
//! synced; `sync_dir` applies that log to the durable map.
//!
//! A power cut ([`MemFs::power_cut`], [`MemFs::crash_image`]) keeps the
//! durable state and, depending on [`Crash`], some of what was pending:
//! - [`Crash::Clean`]: nothing pending survives.
//! - [`Crash::Torn`]: a prefix of the pending namespace operations
//!   survives (the file system journals metadata in order); each file's
//!   unsynced bytes persist up to a random size, and every 4 KiB page of
//!   them is kept, lost (the device keeps what it held: zeros past the old
//!   size, the old bytes where an append overwrote pre-written ones), or
//!   damaged per 512-byte sector (a left or right part written, garbage,
//!   old bytes). Pages not written since their last sync are never
//!   damaged by a crash (see docs/durability.md §Assumptions).
//! - [`Crash::All`]: everything pending survives.
//!
//! Faults ([`MemFs::inject`]) make a chosen operation fail once or every
//! time: `EIO` or `ENOSPC` (a failed append may leave a prefix of its
//! bytes), a Linux-style lost fsync (returns `EIO`, the dirty bytes are
//! dropped from the device but stay readable, and the next fsync succeeds;
//! only a device read, [`Fs::open_device`], sees that they are gone),
//! a bit flipped on read, or a misdirected write (a sync lands its bytes
//! 4 KiB too early in the file and reports success).
//!
//! Every operation gets an index ([`MemFs::op_count`]) and is shown to the
//! hook set by [`MemFs::set_hook`] before it takes effect, which is how the
//! crash-state tests cut power at every IO point. Everything is
//! deterministic for a given seed and sequence of operations.

use super::{DirLock, FileRead, FileWrite, Fs, Host};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Size of a page the simulated device writes back as a unit.
pub const PAGE: usize = 4096;
/// Size of a sector, the unit a torn page is damaged in.
pub const SECTOR: usize = 512;

/// Linux error numbers the simulated faults return.
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

/// An IO operation, as seen by faults and the hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    CreateDir,
    Create,
    Open,
    Read,
    Append,
    Sync,
    /// Cutting a file's pre-written tail off (`FileWrite::trim`).
    Truncate,
    Rename,
    /// A second name for a file (`Fs::hard_link`).
    Link,
    Remove,
    List,
    SyncDir,
    Lock,
    /// Matches every operation (faults only).
    Any,
}

impl OpKind {
    /// True for operations that change the file system.
    pub fn is_mutation(self) -> bool {
        matches!(
            self,
            OpKind::CreateDir
                | OpKind::Create
                | OpKind::Append
                | OpKind::Sync
                | OpKind::Truncate
                | OpKind::Rename
                | OpKind::Link
                | OpKind::Remove
                | OpKind::SyncDir
        )
    }
}

/// What an injected fault does to the operation it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The call fails with `EIO` (an append may leave a prefix behind).
    Eio,
    /// The call fails with `ENOSPC` (an append may leave a prefix behind).
    Enospc,
    /// On `Sync`: fails with `EIO` and drops the dirty bytes from the
    /// device; they stay readable and the next sync reports success.
    SyncLost,
    /// On `Read`: one bit of the returned bytes is flipped.
    FlipOnRead,
    /// On `Sync`: the dirty bytes land 4 KiB before where they belong and
    /// the call succeeds.
    Misdirect,
}

/// A fault waiting for its operation.
#[derive(Debug, Clone)]
pub struct Fault {
    pub op: OpKind,
    pub kind: FaultKind,
    /// Matching operations to let pass before this one fires (0: the next).
    pub nth: u64,
    /// Fire on every matching operation from then on, not just once.
    pub persistent: bool,
    /// Only operations on paths containing this string match.
    pub path_contains: Option<String>,
}

impl Fault {
    /// A one-shot fault of `kind` on the next `op`.
    pub fn once(op: OpKind, kind: FaultKind) -> Fault {
        Fault {
            op,
            kind,
            nth: 0,
            persistent: false,
            path_contains: None,
        }
    }
}

/// An operation about to happen, as shown to the hook.
#[derive(Debug, Clone)]
pub struct OpInfo {
    /// Index of the operation since the file system was made.
    pub index: u64,
    pub op: OpKind,
    pub path: PathBuf,
}

/// What survives a simulated power cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// Only what was synced.
    Clean,
    /// What was synced, plus random parts of what was pending, damaged.
    Torn,
    /// Everything, synced or not.
    All,
}

type Hook = Arc<dyn Fn(&OpInfo) + Send + Sync>;

#[derive(Default)]
struct Node {
    data: Mutex<NodeData>,
}

#[derive(Default, Clone)]
struct NodeData {
    /// What reads see.
    live: Vec<u8>,
    /// What the device holds.
    durable: Vec<u8>,
    /// Ranges dropped by a failed fsync: never written to the device.
    lost: Vec<Range<usize>>,
    /// Bytes below the durable size written since the last sync (appends
    /// over pre-written bytes), from the lowest to the highest, if any.
    rewritten: Option<Range<usize>>,
}

impl NodeData {
    /// A file whose device image is `bytes`, nothing pending.
    fn settled(bytes: Vec<u8>) -> NodeData {
        NodeData {
            live: bytes.clone(),
            durable: bytes,
            ..NodeData::default()
        }
    }

    /// Where the bytes not yet synced begin: the durable size, or lower
    /// where an append overwrote durable (pre-written) bytes.
    fn dirty_from(&self) -> usize {
        let end = self.durable.len();
        self.rewritten.as_ref().map_or(end, |r| r.start.min(end))
    }

    /// Where the bytes not yet synced end in an image of `len` bytes: its
    /// end if the file grows, else the end of what appends overwrote.
    fn dirty_end(&self, len: usize) -> usize {
        if len > self.durable.len() {
            len
        } else {
            self.rewritten.as_ref().map_or(0, |r| r.end.min(len))
        }
    }

    /// What the device held at `range` of an image of the file from
    /// offset `base` before the pending writes: its durable bytes, zeros
    /// past the durable size.
    fn restore_old(&self, image: &mut [u8], range: Range<usize>, base: usize) {
        for i in range {
            image[i] = self.durable.get(base + i).copied().unwrap_or(0);
        }
    }

    /// The device image after a successful sync: the durable bytes as they
    /// are up to the first dirty byte (a sync writes only what is dirty, so
    /// earlier damage stays), then the live bytes, except that ranges a
    /// failed fsync dropped keep what the device held before.
    fn synced(&self) -> Vec<u8> {
        self.device(0..self.live.len())
    }

    /// What a direct read of `range` (within the live size) returns: the
    /// device's bytes, as `synced` gives them, since such a read writes
    /// the dirty pages out first. So it differs from a buffered read only
    /// where the durable bytes were damaged, and where a failed fsync
    /// dropped pages the page cache still shows.
    fn device(&self, range: Range<usize>) -> Vec<u8> {
        let base = range.start;
        let mut image = self.live[range.clone()].to_vec();
        for r in &self.lost {
            let (from, to) = (r.start.max(range.start), r.end.min(range.end));
            if from < to {
                self.restore_old(&mut image, from - base..to - base, base);
            }
        }
        // Below the first dirty byte the device holds the durable bytes
        // (`dirty_from` is at most the durable size).
        let keep = self.dirty_from().min(range.end);
        if base < keep {
            image[..keep - base].copy_from_slice(&self.durable[base..keep]);
        }
        image
    }
}

#[derive(Clone)]
enum NsOp {
    Put(PathBuf, Arc<Node>),
    Remove(PathBuf),
    /// Atomic: a crash keeps both halves or neither.
    Rename(PathBuf, PathBuf, Arc<Node>),
}

impl NsOp {
    fn path(&self) -> &Path {
        match self {
            NsOp::Put(p, _) | NsOp::Remove(p) | NsOp::Rename(_, p, _) => p,
        }
    }
    fn apply(&self, map: &mut BTreeMap<PathBuf, Arc<Node>>) {
        match self {
            NsOp::Put(p, n) => {
                map.insert(p.clone(), n.clone());
            }
            NsOp::Remove(p) => {
                map.remove(p);
            }
            NsOp::Rename(from, to, n) => {
                map.remove(from);
                map.insert(to.clone(), n.clone());
            }
        }
    }
}

#[derive(Default)]
struct State {
    live: BTreeMap<PathBuf, Arc<Node>>,
    durable: BTreeMap<PathBuf, Arc<Node>>,
    /// Namespace changes not yet made durable by `sync_dir`, in order.
    pending: Vec<NsOp>,
    dirs: BTreeSet<PathBuf>,
    faults: Vec<Fault>,
    /// Operations a fault hit, in order.
    fired: Vec<(OpInfo, FaultKind)>,
    rng: u64,
}

struct Shared {
    state: Mutex<State>,
    locks: Mutex<BTreeSet<PathBuf>>,
    ops: AtomicU64,
    hook: Mutex<Option<Hook>>,
    /// `MemFs::set_background_syncs`.
    background_syncs: AtomicBool,
    /// Database identities drawn (`Fs::new_db_id`), from the seed: kept
    /// apart from `State::rng` so drawing one changes no other choice.
    ids: AtomicU64,
    /// The simulated machine (`Fs::host`).
    host: Arc<SimHost>,
}

/// The machine a `MemFs` simulates (`Fs::host`): its available memory is
/// whatever the test set (`MemFs::set_mem_available`), 16 GiB at first,
/// never the real machine's.
struct SimHost {
    /// Bytes, or `u64::MAX` for "cannot be told".
    mem_available: AtomicU64,
}

impl Host for SimHost {
    fn mem_available(&self) -> Option<u64> {
        match self.mem_available.load(Ordering::Relaxed) {
            u64::MAX => None,
            bytes => Some(bytes),
        }
    }
}

/// An in-memory [`Fs`]. Cloning gives another handle to the same files.
#[derive(Clone)]
pub struct MemFs {
    shared: Arc<Shared>,
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs::with_seed(0)
    }
}

/// splitmix64: the simulator's deterministic randomness.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A value in `0..n` (0 when `n` is 0).
fn below(state: &mut u64, n: u64) -> u64 {
    if n == 0 { 0 } else { next_random(state) % n }
}

fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl MemFs {
    /// An empty file system (seed 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty file system whose random choices (partial appends, crash
    /// damage) follow `seed`.
    pub fn with_seed(seed: u64) -> Self {
        MemFs {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    rng: seed,
                    ..State::default()
                }),
                locks: Mutex::new(BTreeSet::new()),
                ops: AtomicU64::new(0),
                hook: Mutex::new(None),
                background_syncs: AtomicBool::new(false),
                ids: AtomicU64::new(seed),
                host: Arc::new(SimHost {
                    mem_available: AtomicU64::new(16 << 30),
                }),
            }),
        }
    }

    /// Sets the memory the simulated machine has available (`Fs::host`);
    /// `None`: it cannot be told.
    pub fn set_mem_available(&self, bytes: Option<u64>) {
        let bytes = bytes.map_or(u64::MAX, |b| b.min(u64::MAX - 1));
        self.shared
            .host
            .mem_available
            .store(bytes, Ordering::Relaxed);
    }

    /// Operations performed so far (the next one gets this index).
    pub fn op_count(&self) -> u64 {
        self.shared.ops.load(Ordering::SeqCst)
    }

    /// Calls `hook` before every operation takes effect (`None` removes
    /// it). The hook runs without any of this file system's locks held, so
    /// it may call [`MemFs::crash_image`].
    pub fn set_hook(&self, hook: Option<Hook>) {
        *self.shared.hook.lock() = hook;
    }

    /// Lets written files offer `FileWrite::background_sync` (off by
    /// default: a sync on another thread makes the order of operations,
    /// and so the crash points tests count, vary from run to run).
    pub fn set_background_syncs(&self, on: bool) {
        self.shared.background_syncs.store(on, Ordering::Relaxed);
    }

    /// Adds a fault; it fires on the `nth + 1`-th matching operation.
    pub fn inject(&self, fault: Fault) {
        self.shared.state.lock().faults.push(fault);
    }

    /// Removes every waiting fault.
    pub fn clear_faults(&self) {
        self.shared.state.lock().faults.clear();
    }

    /// The operations faults have hit so far, in order.
    pub fn fired(&self) -> Vec<(OpInfo, FaultKind)> {
        self.shared.state.lock().fired.clone()
    }

    /// Simulates a power cut in place, keeping only what was synced.
    /// Callers drop their databases first; open handles keep working on
    /// whatever nodes survive.
    pub fn power_cut(&self) {
        self.power_cut_with(Crash::Clean, 0);
    }

    /// Simulates a power cut in place with the given damage model.
    pub fn power_cut_with(&self, crash: Crash, seed: u64) {
        let image = self.crash_image(crash, seed);
        let taken = std::mem::take(&mut *image.shared.state.lock());
        let mut state = self.shared.state.lock();
        state.live = taken.live;
        state.durable = taken.durable;
        state.pending.clear();
        drop(state);
        self.shared.locks.lock().clear();
    }

    /// A new, independent file system holding what the device would hold
    /// after a power cut now. `self` is left untouched.
    pub fn crash_image(&self, crash: Crash, seed: u64) -> MemFs {
        let mut rng = seed ^ 0x5eed_c0de;
        let state = self.shared.state.lock();
        let mut names = state.durable.clone();
        let keep_ops = match crash {
            Crash::Clean => 0,
            Crash::All => state.pending.len(),
            Crash::Torn => below(&mut rng, state.pending.len() as u64 + 1) as usize,
        };
        for op in &state.pending[..keep_ops] {
            op.apply(&mut names);
        }
        let out = MemFs::with_seed(seed);
        {
            let mut out_state = out.shared.state.lock();
            out_state.dirs = state.dirs.clone();
            for (path, node) in names {
                let data = node.data.lock();
                let bytes = match crash {
                    Crash::Clean => data.durable.clone(),
                    Crash::All => data.synced(),
                    Crash::Torn => torn_image(&data, &mut rng),
                };
                let node = Arc::new(Node {
                    data: Mutex::new(NodeData::settled(bytes)),
                });
                out_state.live.insert(path.clone(), node.clone());
                out_state.durable.insert(path, node);
            }
        }
        out
    }

    /// A new, independent file system holding what reads see now (the
    /// live bytes and names, synced or not), all of it durable: the state a
    /// process crash leaves, without the device's damage.
    pub fn fork(&self) -> MemFs {
        let state = self.shared.state.lock();
        let out = MemFs::with_seed(state.rng);
        {
            let mut out_state = out.shared.state.lock();
            out_state.dirs = state.dirs.clone();
            for (path, node) in &state.live {
                let bytes = node.data.lock().live.clone();
                let node = Arc::new(Node {
                    data: Mutex::new(NodeData::settled(bytes)),
                });
                out_state.live.insert(path.clone(), node.clone());
                out_state.durable.insert(path.clone(), node);
            }
        }
        out
    }

    /// A new, independent file system in the state a crash of the process
    /// leaves this one in: every file as it is, its bytes synced or not
    /// (the page cache stays), its pending names and the pages a failed
    /// fsync dropped included; no locks held. Unlike `fork`, nothing is
    /// made durable, so a power cut of the copy still loses what was not
    /// synced.
    pub fn after_process_crash(&self) -> MemFs {
        let state = self.shared.state.lock();
        let out = MemFs::with_seed(state.rng);
        // One copy per node, shared by every map that names it.
        let mut copies: std::collections::HashMap<*const Node, Arc<Node>> =
            std::collections::HashMap::new();
        let mut copy = |node: &Arc<Node>| {
            copies
                .entry(Arc::as_ptr(node))
                .or_insert_with(|| {
                    Arc::new(Node {
                        data: Mutex::new(node.data.lock().clone()),
                    })
                })
                .clone()
        };
        {
            let mut out_state = out.shared.state.lock();
            out_state.dirs = state.dirs.clone();
            for (path, node) in &state.live {
                out_state.live.insert(path.clone(), copy(node));
            }
            for (path, node) in &state.durable {
                out_state.durable.insert(path.clone(), copy(node));
            }
            for op in &state.pending {
                out_state.pending.push(match op {
                    NsOp::Put(p, n) => NsOp::Put(p.clone(), copy(n)),
                    NsOp::Remove(p) => NsOp::Remove(p.clone()),
                    NsOp::Rename(a, b, n) => NsOp::Rename(a.clone(), b.clone(), copy(n)),
                });
            }
        }
        out
    }

    /// Test hook: replaces the byte at `offset` of `path` with `f(byte)`,
    /// in both the live and the durable image. Returns false if out of range.
    pub fn mutate_byte(&self, path: &Path, offset: usize, f: impl FnOnce(u8) -> u8) -> bool {
        let Some(node) = self.shared.state.lock().live.get(path).cloned() else {
            return false;
        };
        let mut data = node.data.lock();
        let Some(b) = data.live.get_mut(offset) else {
            return false;
        };
        let new = f(*b);
        *b = new;
        if let Some(d) = data.durable.get_mut(offset) {
            *d = new;
        }
        true
    }

    /// Test hook: cuts `path` to `len` bytes (live and durable).
    pub fn truncate(&self, path: &Path, len: usize) {
        if let Some(node) = self.shared.state.lock().live.get(path).cloned() {
            let mut data = node.data.lock();
            data.live.truncate(len);
            data.durable.truncate(len);
        }
    }

    /// Size of `path`, if it exists.
    pub fn file_len(&self, path: &Path) -> Option<u64> {
        let node = self.shared.state.lock().live.get(path).cloned()?;
        let len = node.data.lock().live.len() as u64;
        Some(len)
    }

    /// Counts the operation, shows it to the hook, and returns the fault
    /// that hits it, if any, with a random word for the fault to use.
    fn begin(&self, op: OpKind, path: &Path) -> Option<(FaultKind, u64)> {
        let index = self.shared.ops.fetch_add(1, Ordering::SeqCst);
        let info = OpInfo {
            index,
            op,
            path: path.to_path_buf(),
        };
        let hook = self.shared.hook.lock().clone();
        if let Some(hook) = hook {
            hook(&info);
        }
        let mut state = self.shared.state.lock();
        let path_str = path.to_string_lossy();
        let hit = state.faults.iter_mut().position(|f| {
            let matches = (f.op == OpKind::Any || f.op == op)
                && f.path_contains
                    .as_deref()
                    .is_none_or(|s| path_str.contains(s));
            if !matches {
                return false;
            }
            if f.nth > 0 {
                f.nth -= 1;
                return false;
            }
            true
        })?;
        let fault = if state.faults[hit].persistent {
            state.faults[hit].clone()
        } else {
            state.faults.remove(hit)
        };
        let word = next_random(&mut state.rng);
        state.fired.push((info, fault.kind));
        Some((fault.kind, word))
    }

    /// `Err` for the plain error faults; other kinds are handled by the
    /// operations they apply to and ignored elsewhere.
    fn fail(fault: Option<(FaultKind, u64)>) -> io::Result<()> {
        match fault {
            Some((FaultKind::Eio, _)) => Err(os_error(EIO)),
            Some((FaultKind::Enospc, _)) => Err(os_error(ENOSPC)),
            _ => Ok(()),
        }
    }

    fn node(&self, path: &Path) -> io::Result<Arc<Node>> {
        self.shared
            .state
            .lock()
            .live
            .get(path)
            .cloned()
            .ok_or_else(|| not_found(path))
    }

    fn change_namespace(&self, op: NsOp) {
        let mut state = self.shared.state.lock();
        op.apply(&mut state.live);
        state.pending.push(op);
    }
}

/// The device image of a file after a torn power cut: the durable bytes
/// up to the first dirty one, then pending bytes persisted up to a random
/// size, each 4 KiB page of them kept, left as the device held it before
/// (zeros past the old size), or damaged per sector. Pages not written
/// since the last sync are not touched.
fn torn_image(data: &NodeData, rng: &mut u64) -> Vec<u8> {
    let target = data.synced();
    let from = data.dirty_from();
    let old_len = data.durable.len();
    if target.len() <= from && target.len() == old_len {
        return data.durable.clone();
    }
    let mut image = target;
    // Persisted size: often the new size (size updates are journaled
    // promptly), otherwise anywhere from the old size up, or the old size
    // where the file shrank.
    if below(rng, 3) == 0 && image.len() != old_len {
        if image.len() > old_len {
            let len = old_len + below(rng, (image.len() - old_len) as u64 + 1) as usize;
            image.truncate(len);
        } else {
            let cut = image.len();
            image.extend_from_slice(&data.durable[cut..]);
        }
    }
    let len = image.len();
    let dirty_end = data.dirty_end(len);
    let mut page = from / PAGE;
    while page * PAGE < dirty_end {
        let start = (page * PAGE).max(from);
        let end = ((page + 1) * PAGE).min(len);
        // Per page: kept (new bytes), lost (old bytes), or damaged by sector.
        match below(rng, 8) {
            0..=3 => {}
            4 => data.restore_old(&mut image, start..end, 0),
            _ => damage_sectors(data, &mut image[..end], start, page * PAGE, rng),
        }
        page += 1;
    }
    image
}

/// Damages the sectors of the page starting at `page_start`, only at
/// offsets from `from` on: a left part written and the rest as the device
/// held it before, a right part written, garbage sectors, or old bytes.
fn damage_sectors(
    data: &NodeData,
    image: &mut [u8],
    from: usize,
    page_start: usize,
    rng: &mut u64,
) {
    let end = image.len();
    let sectors = PAGE / SECTOR;
    let split = page_start + SECTOR * (1 + below(rng, sectors as u64 - 1) as usize);
    let mode = below(rng, 4);
    for s in 0..sectors {
        let lo = (page_start + s * SECTOR).max(from);
        let hi = (page_start + (s + 1) * SECTOR).min(end);
        if lo >= hi {
            continue;
        }
        let sector_start = page_start + s * SECTOR;
        match mode {
            // Left part written: sectors from `split` on never made it.
            0 if sector_start >= split => data.restore_old(image, lo..hi, 0),
            // Right part written: sectors before `split` never made it.
            1 if sector_start < split => data.restore_old(image, lo..hi, 0),
            // Garbage in one sector out of two.
            2 if s % 2 == 0 => {
                for b in &mut image[lo..hi] {
                    *b = next_random(rng) as u8;
                }
            }
            3 => data.restore_old(image, lo..hi, 0),
            _ => {}
        }
    }
}

struct MemWrite {
    fs: MemFs,
    path: PathBuf,
    node: Arc<Node>,
    /// Append position.
    pos: usize,
}

impl MemWrite {
    /// Writes `data` at `at` (over live bytes, or extending the file); a
    /// failed write may leave a prefix of it.
    fn write_at(&mut self, at: usize, data: &[u8]) -> io::Result<()> {
        let fault = self.fs.begin(OpKind::Append, &self.path);
        let keep = match fault {
            Some((FaultKind::Eio | FaultKind::Enospc, word)) => {
                below(&mut { word }, data.len() as u64 + 1) as usize
            }
            _ => data.len(),
        };
        let mut d = self.node.data.lock();
        if at < d.durable.len() && keep > 0 {
            let r = at..at + keep;
            d.rewritten = Some(match d.rewritten.take() {
                Some(old) => old.start.min(r.start)..old.end.max(r.end),
                None => r,
            });
        }
        let end = at + keep;
        if d.live.len() < end {
            d.live.resize(end, 0);
        }
        d.live[at..end].copy_from_slice(&data[..keep]);
        drop(d);
        MemFs::fail(fault)
    }
}

impl FileWrite for MemWrite {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let at = self.pos;
        let r = self.write_at(at, data);
        if r.is_ok() {
            self.pos += data.len();
        }
        r
    }

    fn sync(&mut self) -> io::Result<()> {
        sync_node(&self.fs, &self.path, &self.node)
    }

    fn background_sync(&self) -> Option<super::BackgroundSync> {
        if !self.fs.shared.background_syncs.load(Ordering::Relaxed) {
            return None;
        }
        let (fs, path, node) = (self.fs.clone(), self.path.clone(), self.node.clone());
        Some(Box::new(move || sync_node(&fs, &path, &node)))
    }

    fn len(&self) -> u64 {
        self.pos as u64
    }

    fn size(&self) -> u64 {
        self.node.data.lock().live.len() as u64
    }

    fn prewrite(&mut self, up_to: u64) -> io::Result<()> {
        let size = self.node.data.lock().live.len();
        let up_to = usize::try_from(up_to).unwrap_or(usize::MAX);
        if up_to <= size {
            return Ok(());
        }
        self.write_at(size, &vec![0u8; up_to - size])?;
        super::sync_after_prewrite(|| self.sync())
    }

    fn trim(&mut self) -> io::Result<()> {
        if self.node.data.lock().live.len() <= self.pos {
            return Ok(());
        }
        let fault = self.fs.begin(OpKind::Truncate, &self.path);
        MemFs::fail(fault)?;
        self.node.data.lock().live.truncate(self.pos);
        // Like the POSIX backend, trimming makes the size durable.
        self.sync()
    }
}

/// `FileWrite::sync` of the file `node` at `path`: what an fdatasync makes
/// durable, or what an injected fault does instead. Also run by the
/// background syncs `MemFs::set_background_syncs` enables.
fn sync_node(fs: &MemFs, path: &Path, node: &Node) -> io::Result<()> {
    let fault = fs.begin(OpKind::Sync, path);
    let mut d = node.data.lock();
    match fault {
        Some((FaultKind::SyncLost, _)) => {
            let from = d.dirty_from();
            let to = d.live.len();
            if from < to {
                d.lost.push(from..to);
            }
            Err(os_error(EIO))
        }
        Some((FaultKind::Misdirect, _)) => {
            let image = d.synced();
            let from = d.dirty_from().min(image.len());
            let dirty = image[from..].to_vec();
            let mut device = image;
            let len = device.len();
            d.restore_old(&mut device, from..len, 0);
            let at = from.saturating_sub(PAGE);
            let n = dirty.len().min(device.len() - at);
            device[at..at + n].copy_from_slice(&dirty[..n]);
            d.durable = device;
            d.lost.clear();
            d.rewritten = None;
            Ok(())
        }
        Some((FaultKind::Eio | FaultKind::Enospc, _)) => MemFs::fail(fault),
        _ => {
            d.durable = d.synced();
            d.lost.clear();
            d.rewritten = None;
            Ok(())
        }
    }
}

struct MemRead {
    fs: MemFs,
    path: PathBuf,
    node: Arc<Node>,
    /// Reads see what the device holds (`Fs::open_device`), not the
    /// live bytes.
    device: bool,
}

impl FileRead for MemRead {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let fault = self.fs.begin(OpKind::Read, &self.path);
        MemFs::fail(fault)?;
        let d = self.node.data.lock();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = start.checked_add(buf.len());
        let Some(src) = end.and_then(|end| d.live.get(start..end)) else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past end of file",
            ));
        };
        if self.device {
            buf.copy_from_slice(&d.device(start..start + buf.len()));
        } else {
            buf.copy_from_slice(src);
        }
        if let Some((FaultKind::FlipOnRead, word)) = fault
            && !buf.is_empty()
        {
            let bit = (word % (buf.len() as u64 * 8)) as usize;
            buf[bit / 8] ^= 1 << (bit % 8);
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.node.data.lock().live.len() as u64
    }
}

struct MemLock {
    locks: Arc<Shared>,
    dir: PathBuf,
}
impl DirLock for MemLock {}
impl Drop for MemLock {
    fn drop(&mut self) {
        self.locks.locks.lock().remove(&self.dir);
    }
}

impl Fs for MemFs {
    fn host(&self) -> Arc<dyn Host> {
        self.shared.host.clone()
    }

    fn new_db_id(&self) -> u64 {
        // The n-th identity drawn on a file system of seed s: distinct for
        // distinct n, the same in every run.
        let mut state = self.shared.ids.fetch_add(1, Ordering::SeqCst) ^ 0x5851_f42d_4c95_7f2d;
        next_random(&mut state).max(1)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        MemFs::fail(self.begin(OpKind::CreateDir, dir))?;
        self.shared.state.lock().dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn FileWrite>> {
        MemFs::fail(self.begin(OpKind::Create, path))?;
        let node = Arc::new(Node::default());
        self.change_namespace(NsOp::Put(path.to_path_buf(), node.clone()));
        Ok(Box::new(MemWrite {
            fs: self.clone(),
            path: path.to_path_buf(),
            node,
            pos: 0,
        }))
    }

    fn reuse(&self, from: &Path, to: &Path) -> io::Result<Box<dyn FileWrite>> {
        self.rename(from, to)?;
        Ok(Box::new(MemWrite {
            fs: self.clone(),
            path: to.to_path_buf(),
            node: self.node(to)?,
            pos: 0,
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn FileRead>> {
        MemFs::fail(self.begin(OpKind::Open, path))?;
        Ok(Arc::new(MemRead {
            fs: self.clone(),
            path: path.to_path_buf(),
            node: self.node(path)?,
            device: false,
        }))
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let node = self.node(path)?;
        sync_node(self, path, &node)
    }

    fn open_device(&self, path: &Path) -> io::Result<Option<Arc<dyn FileRead>>> {
        MemFs::fail(self.begin(OpKind::Open, path))?;
        Ok(Some(Arc::new(MemRead {
            fs: self.clone(),
            path: path.to_path_buf(),
            node: self.node(path)?,
            device: true,
        })))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        MemFs::fail(self.begin(OpKind::Rename, from))?;
        let node = self.node(from)?;
        self.change_namespace(NsOp::Rename(from.to_path_buf(), to.to_path_buf(), node));
        Ok(())
    }

    /// A second name for the same node: later changes through either
    /// name show through both, as on a real file system.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        MemFs::fail(self.begin(OpKind::Link, to))?;
        let node = self.node(from)?;
        if self.shared.state.lock().live.contains_key(to) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", to.display()),
            ));
        }
        self.change_namespace(NsOp::Put(to.to_path_buf(), node));
        Ok(())
    }

    fn link_count(&self, path: &Path) -> io::Result<u64> {
        let node = self.node(path)?;
        let state = self.shared.state.lock();
        Ok(state
            .live
            .values()
            .filter(|n| Arc::ptr_eq(n, &node))
            .count() as u64)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        MemFs::fail(self.begin(OpKind::Remove, path))?;
        self.node(path)?;
        self.change_namespace(NsOp::Remove(path.to_path_buf()));
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        MemFs::fail(self.begin(OpKind::List, dir))?;
        let state = self.shared.state.lock();
        Ok(state
            .live
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        MemFs::fail(self.begin(OpKind::SyncDir, dir))?;
        let mut state = self.shared.state.lock();
        let State {
            durable, pending, ..
        } = &mut *state;
        pending.retain(|op| {
            if op.path().parent() == Some(dir) {
                op.apply(durable);
                false
            } else {
                true
            }
        });
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.shared.state.lock();
        state.live.contains_key(path) || state.dirs.contains(path)
    }

    fn lock(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        MemFs::fail(self.begin(OpKind::Lock, dir))?;
        let mut locks = self.shared.locks.lock();
        if !locks.insert(dir.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "database is locked by another handle",
            ));
        }
        Ok(Box::new(MemLock {
            locks: self.shared.clone(),
            dir: dir.to_path_buf(),
        }))
    }
    /// Refused while a writer holds the lock; does not itself keep a
    /// writer out (read-only handles on the simulated file system are
    /// for tests that open no writer meanwhile).
    fn lock_shared(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        struct Unlocked;
        impl DirLock for Unlocked {}
        if self.shared.locks.lock().contains(dir) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "database is locked by a writer",
            ));
        }
        Ok(Box::new(Unlocked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &MemFs, path: &str, data: &[u8], sync: bool) {
        let mut f = fs.create(Path::new(path)).expect("create");
        f.append(data).expect("append");
        if sync {
            f.sync().expect("sync");
        }
    }

    fn read(fs: &MemFs, path: &str) -> Option<Vec<u8>> {
        crate::io::read_all(fs, Path::new(path)).ok()
    }

    #[test]
    fn clean_cut_keeps_only_synced_bytes_and_names() {
        let fs = MemFs::new();
        write(&fs, "/d/a", b"synced", true);
        fs.sync_dir(Path::new("/d")).expect("sync dir");
        write(&fs, "/d/b", b"named but not dir-synced", true);
        let cut = fs.crash_image(Crash::Clean, 1);
        assert_eq!(read(&cut, "/d/a").as_deref(), Some(&b"synced"[..]));
        assert_eq!(read(&cut, "/d/b"), None);
        let all = fs.crash_image(Crash::All, 1);
        assert!(read(&all, "/d/b").is_some());
    }

    /// Appends over pre-written zeros: a crash leaves each page they
    /// reached new, old (zeros: what the device held) or damaged, never
    /// touches the bytes before them or the pages after, and never shrinks
    /// the file.
    #[test]
    fn appends_over_prewritten_bytes_tear_to_old_or_new() {
        let fs = MemFs::new();
        let path = Path::new("/d/j");
        let mut f = fs.create(path).expect("create");
        fs.sync_dir(Path::new("/d")).expect("sync dir");
        f.append(&[7u8; 100]).expect("append");
        f.prewrite(12288).expect("prewrite");
        assert_eq!((f.len(), f.size()), (100, 12288));
        f.append(&[0xAB; 5000]).expect("append over zeros");
        assert_eq!((f.len(), f.size()), (5100, 12288));
        let clean = read(&fs.crash_image(Crash::Clean, 0), "/d/j").expect("clean");
        assert_eq!(clean.len(), 12288);
        assert!(
            clean[100..].iter().all(|&b| b == 0),
            "clean keeps the zeros"
        );
        let all = read(&fs.crash_image(Crash::All, 0), "/d/j").expect("all");
        assert!(all[100..5100].iter().all(|&b| b == 0xAB));
        let (mut new_pages, mut old_pages) = (0, 0);
        for seed in 0..64 {
            let torn = read(&fs.crash_image(Crash::Torn, seed), "/d/j").expect("torn");
            assert_eq!(torn.len(), 12288, "seed {seed}: size is durable");
            assert_eq!(&torn[..100], &[7u8; 100][..], "seed {seed}");
            // Pages the appends did not reach keep their zeros.
            assert!(torn[8192..].iter().all(|&b| b == 0), "seed {seed}");
            new_pages += usize::from(torn[100..4096].iter().all(|&b| b == 0xAB));
            old_pages += usize::from(torn[100..4096].iter().all(|&b| b == 0));
        }
        assert!(
            new_pages > 0 && old_pages > 0,
            "{new_pages} new, {old_pages} old"
        );
        // A sync makes the overwrite durable; trim then cuts the zeros.
        f.sync().expect("sync");
        let synced = read(&fs.crash_image(Crash::Clean, 0), "/d/j").expect("synced");
        assert!(synced[100..5100].iter().all(|&b| b == 0xAB));
        f.trim().expect("trim");
        let trimmed = read(&fs.crash_image(Crash::Clean, 0), "/d/j").expect("trimmed");
        assert_eq!(trimmed.len(), 5100);
    }

    #[test]
    fn torn_cut_never_damages_durable_bytes_and_sometimes_damages_the_rest() {
        let fs = MemFs::new();
        let mut f = fs.create(Path::new("/d/j")).expect("create");
        fs.sync_dir(Path::new("/d")).expect("sync dir");
        let synced: Vec<u8> = (0..5000u32).map(|i| i as u8 | 1).collect();
        f.append(&synced).expect("append");
        f.sync().expect("sync");
        let pending: Vec<u8> = (0..20000u32).map(|i| (i % 251) as u8 | 1).collect();
        f.append(&pending).expect("append");
        let mut damaged = 0;
        for seed in 0..200 {
            let img = read(&fs.crash_image(Crash::Torn, seed), "/d/j").expect("file survives");
            assert!(img.len() >= synced.len() && img.len() <= synced.len() + pending.len());
            assert_eq!(&img[..synced.len()], &synced[..], "seed {seed}");
            if img[synced.len()..] != pending[..img.len() - synced.len()] {
                damaged += 1;
            }
        }
        assert!(
            damaged > 50,
            "torn cuts damaged only {damaged} of 200 images"
        );
    }

    #[test]
    fn faults_fire_once_or_persistently_and_lost_fsync_drops_data() {
        let fs = MemFs::new();
        fs.inject(Fault {
            nth: 1,
            ..Fault::once(OpKind::Sync, FaultKind::SyncLost)
        });
        let mut f = fs.create(Path::new("/d/x")).expect("create");
        fs.sync_dir(Path::new("/d")).expect("sync dir");
        f.append(b"first").expect("append");
        f.sync().expect("first sync passes");
        f.append(b"second").expect("append");
        assert_eq!(f.sync().expect_err("lost").raw_os_error(), Some(EIO));
        f.append(b"third").expect("append");
        f.sync().expect("the next fsync succeeds");
        assert_eq!(read(&fs, "/d/x").as_deref(), Some(&b"firstsecondthird"[..]));
        let cut = fs.crash_image(Crash::Clean, 0);
        assert_eq!(
            read(&cut, "/d/x").as_deref(),
            Some(&b"first\0\0\0\0\0\0third"[..]),
            "the dropped bytes never reached the device"
        );

        fs.inject(Fault {
            persistent: true,
            path_contains: Some("y".into()),
            ..Fault::once(OpKind::Create, FaultKind::Enospc)
        });
        for _ in 0..3 {
            let e = fs.create(Path::new("/d/y")).err().expect("enospc");
            assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        }
        assert!(
            fs.create(Path::new("/d/z")).is_ok(),
            "other paths unaffected"
        );
        fs.clear_faults();
        assert!(fs.create(Path::new("/d/y")).is_ok());
    }

    #[test]
    fn hook_sees_every_operation_in_order() {
        let fs = MemFs::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        fs.set_hook(Some(Arc::new(move |op: &OpInfo| {
            s.lock().push((op.index, op.op));
        })));
        write(&fs, "/d/a", b"x", true);
        fs.set_hook(None);
        let seen = seen.lock().clone();
        assert_eq!(
            seen,
            vec![(0, OpKind::Create), (1, OpKind::Append), (2, OpKind::Sync)]
        );
        assert_eq!(fs.op_count(), 3);
    }
}
