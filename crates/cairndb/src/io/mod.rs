//! The IO seam: every byte the engine reads or writes goes through [`Fs`].
//!
//! The engine ships with [`PosixFs`] (the real file system,
//! `pread`/`write`/`fdatasync`, direct IO where the file system takes it).
//! Under the `testing` feature, `MemFs` is a second backend: an in-memory
//! file system that keeps a durable image per file, simulates a power cut
//! by dropping what was not synced, and injects faults; the engine's tests
//! and fuzz targets run on it.
//!
//! Contract every backend keeps:
//! - `FileWrite::append` may buffer; bytes are durable only after
//!   `FileWrite::sync` returns `Ok`.
//! - Creating, renaming or removing a file is durable only after
//!   `Fs::sync_dir` on its directory returns `Ok`.
//! - `FileRead::read_exact_at` fails with `UnexpectedEof` when the range is
//!   past the end of the file.
//! - Handles are `Send`; readers are `Sync` and used concurrently.

#[cfg(unix)]
mod blocks;
mod buf;
pub mod host;
mod map;
#[cfg(feature = "testing")]
mod mem;
mod posix;
#[cfg(unix)]
mod stage;
#[cfg(target_os = "linux")]
pub(crate) mod uring;

pub(crate) use buf::AlignedBuf;
pub use host::{Host, Machine};
pub use map::Mapped;
#[cfg(feature = "testing")]
pub use mem::{Crash, Fault, FaultKind, MemFs, OpInfo, OpKind};
pub use posix::PosixFs;
pub use stage::StageRings;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a read of a file goes where the page cache may not hold it: the
/// resolved `Options::value_reads` of one read view (`ValueReads` without
/// `Auto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    PageCache,
    Direct,
    CachedElseDirect,
}

impl How {
    /// Whether a read the page cache does not serve is a direct read.
    pub fn direct_misses(self) -> bool {
        self != How::PageCache
    }
}

/// How a flushed value (or a run or chunk of them) was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Served {
    /// From the page cache, asked without waiting (`read_cached`).
    Cached,
    /// With a direct read.
    Direct,
    /// With a buffered read (which may or may not have waited).
    Buffered,
}

/// The engine's rule for bytes that fail their check: they are read once
/// more before they count as damaged, since a bit flipped between the
/// device and memory is not damage on the device (and calling it damage
/// would cut a journal's tail or stop a compaction). `attempt` reads and
/// checks: `Ok(Ok(v))` passed, `Ok(Err(m))` read but failed its check,
/// `Err(e)` could not be read (not tried again). The second attempt's
/// outcome is the answer.
pub(crate) fn read_checked<T, M, E>(
    mut attempt: impl FnMut() -> Result<Result<T, M>, E>,
) -> Result<Result<T, M>, E> {
    match attempt()? {
        Ok(v) => Ok(Ok(v)),
        Err(_) => attempt(),
    }
}

/// A file being written from its start, one append after another.
///
/// A file may be pre-written ahead of its appends ([`FileWrite::prewrite`]):
/// zeros are written past the append position and made durable, with the
/// file's size, so later appends overwrite allocated blocks in place and
/// their sync flushes data alone. On ext4 an appending `fdatasync` also
/// commits the new size and allocation to the file system's journal,
/// about twice the cost of flushing the data.
pub trait FileWrite: Send {
    /// Writes `data` at the append position (`len()`) and moves it on,
    /// over pre-written zeros where there are any.
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes every appended byte durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// Bytes appended so far (the append position).
    fn len(&self) -> u64;
    /// Size of the file: `len()`, or more where zeros were pre-written.
    fn size(&self) -> u64;
    /// Writes zeros from `size()` to `up_to` and makes them and the size
    /// durable (appended bytes before them too). The append position
    /// stays. Nothing to do if `up_to <= size()`.
    ///
    /// An error of kind `StorageFull` means the zeros could not be written
    /// and nothing was synced: the appended bytes are as they were, and
    /// the caller may go on once space returns. A failed sync is never
    /// reported with that kind ([`sync_after_prewrite`]): after it the
    /// appended bytes' durability is unknown.
    fn prewrite(&mut self, up_to: u64) -> io::Result<()>;
    /// Gives the file blocks for its bytes up to `up_to` (`ahead` more if
    /// the device has room) before
    /// they are appended, without changing its size, so that neither the
    /// appends nor their later writes to the device can meet a full
    /// device: a full device is then this call's error (kind
    /// `StorageFull`), with nothing appended. Blocks past the file's end
    /// at `trim` are given back. Default: nothing (backends that allocate
    /// no blocks, the simulated file system); also nothing where the file
    /// system cannot reserve.
    fn reserve(&mut self, _up_to: u64, _ahead: u64) -> io::Result<()> {
        Ok(())
    }
    /// Cuts pre-written zeros (and blocks reserved) past `len()` off and
    /// makes the new size durable. Nothing to do if the file holds
    /// nothing past `len()`.
    fn trim(&mut self) -> io::Result<()>;
    /// True if nothing has been appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A job that makes the bytes appended so far durable from another
    /// thread (an fdatasync of the same open file) while appends go on,
    /// or `None` where the file system has no such thing. A failure of
    /// the job is a failed `sync` of this file: the kernel reports a
    /// writeback error once per open file, so a later `sync` may not see
    /// it again.
    fn background_sync(&self) -> Option<BackgroundSync> {
        None
    }
    /// A reader that sees every appended byte at once, where plain reads
    /// of the file would not (a staged journal: its newest bytes are only
    /// in the ring); `None` where reads of the file do.
    fn reader(&self) -> Option<Arc<dyn FileRead>> {
        None
    }
}

/// See [`FileWrite::background_sync`].
pub type BackgroundSync = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// A file read at random offsets, shared between threads.
pub trait FileRead: Send + Sync {
    /// Fills `buf` from `offset`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Fills as much of `buf` from `offset` as the file holds; returns the
    /// bytes read, fewer than `buf.len()` only at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = usize::try_from(self.len().saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        self.read_exact_at(&mut buf[..n], offset)?;
        Ok(n)
    }
    /// Current size of the file in bytes.
    fn len(&self) -> u64;
    /// True if the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the page cache holds every byte of `offset..offset + len`
    /// (`len` > 0), asked without reading; false if not, or if the file
    /// system cannot tell. Callers ask before they allocate a buffer: a
    /// scan's missed spans are up to 1 MiB, and a new buffer's first
    /// touch is the slow part of a miss on a virtual machine.
    fn cached(&self, _offset: u64, _len: u64) -> bool {
        false
    }
    /// Fills `buf` from `offset` only if the page cache already holds
    /// every byte (`Ok(true)`), never waiting for the device; `Ok(false)`
    /// if it does not, or the file system cannot tell: the caller then
    /// reads the usual way (which may wait).
    fn read_cached(&self, buf: &mut [u8], offset: u64) -> io::Result<bool> {
        if buf.is_empty() || !self.cached(offset, buf.len() as u64) {
            return Ok(false);
        }
        Ok(self.read_at(buf, offset)? == buf.len())
    }
    /// Hint that reads of this file land at random offsets: read from the
    /// device only what is asked (no read-ahead).
    fn advise_random(&self) {}
    /// Hint that the whole file will be read soon: the page cache may read
    /// it in the background (the caller does not wait for the device).
    fn will_need(&self) {}
    /// The file's descriptor, for batched reads through io_uring
    /// (`io::uring`); `None` where the backend has none (the simulated
    /// file system), and reads go through `read_at`.
    #[cfg(unix)]
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// Alignment of direct reads: offset, length and buffer address.
pub const DIRECT_ALIGN: usize = 4096;

/// Reads `len` bytes at `offset` with one direct read of the aligned
/// range around them; `UnexpectedEof` if the file is shorter. The buffer
/// is over-allocated and used from its first aligned byte, so no unsafe
/// allocation is needed.
pub fn read_direct(file: &dyn FileRead, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let align = DIRECT_ALIGN as u64;
    let start = offset - offset % align;
    let end = (offset + len as u64).div_ceil(align) * align;
    let span = usize::try_from(end - start)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "read too large"))?;
    let mut raw = vec![0u8; span + DIRECT_ALIGN];
    let skip = raw.as_ptr().align_offset(DIRECT_ALIGN);
    let buf = raw
        .get_mut(skip..skip + span)
        .ok_or_else(|| io::Error::other("aligned buffer out of range"))?;
    let got = file.read_at(buf, start)?;
    let from = (offset - start) as usize;
    if got < from + len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "read past end of file",
        ));
    }
    Ok(buf[from..from + len].to_vec())
}

/// A held advisory lock on a database directory; released on drop.
pub trait DirLock: Send + Sync {}

/// A file system as the engine sees it.
pub trait Fs: Send + Sync + 'static {
    /// The machine this file system's engine runs on, as far as the
    /// engine asks (`Host`). The running machine by default; a simulated
    /// file system answers for a simulated machine.
    fn host(&self) -> Arc<dyn Host> {
        Arc::new(Machine)
    }

    /// A fresh database identity for a database created on this file
    /// system (never 0; `Db::id`). Random by default: it only has to
    /// differ between databases. The simulated file system draws it from
    /// its seed, so a simulated run replays byte for byte.
    fn new_db_id(&self) -> u64 {
        use std::hash::BuildHasher;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id = std::collections::hash_map::RandomState::new().hash_one((now, std::process::id()));
        id.max(1)
    }
    /// Creates `dir` and its parents if missing.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates `path`, truncating any existing file, for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn FileWrite>>;
    /// Renames the existing file `from` to `to` and opens it for writing
    /// from its start over its old bytes, which stay until overwritten:
    /// `len()` is 0 and `size()` the file's size, as after `prewrite`. A
    /// recycled journal's appends then overwrite allocated blocks.
    fn reuse(&self, from: &Path, to: &Path) -> io::Result<Box<dyn FileWrite>>;
    /// Opens an existing file for reading.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn FileRead>>;
    /// Reopens journal (or value stream) `number` at `path` (just created
    /// or reused, empty so far) for direct-IO appends staged through the
    /// ring file `stage` of `ring.0` bytes, written out in direct writes of
    /// `ring.1` bytes (`Options::journal_direct`, `journal_ring_bytes`);
    /// `None` where the backend has no such thing, and the caller keeps
    /// its plain handle. The ring is taken from `rings` if a journal
    /// before was staged through `stage` and is wholly in its file, and
    /// goes back there once this one is.
    fn open_staged(
        &self,
        _path: &Path,
        _stage: &Path,
        _number: u64,
        _ring: (usize, usize),
        _rings: &StageRings,
    ) -> io::Result<Option<Box<dyn FileWrite>>> {
        Ok(None)
    }
    /// Opens an existing file for direct reads, which bypass the page cache
    /// where the backend can: every read's offset, length and buffer
    /// address must be multiples of [`DIRECT_ALIGN`]. Backends without
    /// direct IO read as `open` does.
    fn open_direct(&self, path: &Path) -> io::Result<Arc<dyn FileRead>> {
        self.open(path)
    }
    /// A read-only memory map of the existing file `path` as long as it is
    /// now, for a file no handle writes again (`io/map.rs`); `None` where
    /// the backend has none (the default) or the file is empty.
    fn map(&self, _path: &Path) -> io::Result<Option<Mapped>> {
        Ok(None)
    }
    /// Makes what was written to the existing file `path` durable, as a
    /// sync of its writer would (an fdatasync through a descriptor of its
    /// own). Recovery syncs the newest journal and its value streams so
    /// before it asks the device what they hold ([`Fs::open_device`]).
    /// `Unsupported` by default.
    fn sync_file(&self, _path: &Path) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
    /// Opens the existing file `path` to read what the device holds, not
    /// what the page cache shows: after a failed fsync the kernel may go
    /// on showing bytes the device never got ("lost" writeback), and a
    /// later fsync does not write them again. Read with [`read_direct`].
    /// A file system whose page cache is its only storage (tmpfs) gives a
    /// plain reader; `None` where the backend cannot read past its cache.
    fn open_device(&self, _path: &Path) -> io::Result<Option<Arc<dyn FileRead>>> {
        Ok(None)
    }
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes `to` (which must not exist) a second name of the existing
    /// file `from`: both names then see one file, so this is only for
    /// files never written again (tables, values files, flushed value
    /// streams, sealed journals: a journal with a second name is never
    /// recycled in place, see [`Fs::link_count`]). The new name is
    /// durable only after `sync_dir` on its directory. Fails with
    /// `CrossesDevices` between file systems; `Unsupported` by default.
    /// Callers copy the file instead when it fails (`Db::checkpoint`).
    fn hard_link(&self, _from: &Path, _to: &Path) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this file system has no hard links",
        ))
    }
    /// How many names the file at `path` has (1 where `hard_link` is
    /// unsupported). A journal with more than one (a checkpoint linked
    /// it) is deleted when obsolete, never overwritten for reuse.
    fn link_count(&self, path: &Path) -> io::Result<u64> {
        self.open(path).map(|_| 1)
    }
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Makes creations, renames and removals in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Takes an exclusive lock on the database at `dir`, failing at once
    /// (`WouldBlock`) if another handle holds it.
    fn lock(&self, dir: &Path) -> io::Result<Box<dyn DirLock>>;
    /// Takes a shared lock on the database at `dir` for a read-only
    /// handle (`Db::open_read_only`): any number of them at once, none
    /// while a writer holds `lock`, which fails while they hold theirs.
    /// Writes nothing. By default no lock at all: it holds while no
    /// handle of this backend writes.
    fn lock_shared(&self, _dir: &Path) -> io::Result<Box<dyn DirLock>> {
        struct Unlocked;
        impl DirLock for Unlocked {}
        Ok(Box::new(Unlocked))
    }
}

/// Reads a whole file into memory (small files: CURRENT, manifest).
/// The sync that ends a pre-write, its failure kept apart from a full
/// device met while writing the zeros (`FileWrite::prewrite`).
pub(crate) fn sync_after_prewrite(sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
    sync().map_err(|e| match e.kind() {
        io::ErrorKind::StorageFull => io::Error::other(format!("sync after pre-write: {e}")),
        _ => e,
    })
}

pub fn read_all(fs: &dyn Fs, path: &Path) -> io::Result<Vec<u8>> {
    let file = fs.open(path)?;
    let len = usize::try_from(file.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

/// Writes `data` to `path` crash-safely: write a temporary file, sync it,
/// rename it over `path`, sync the directory. After `Ok`, `path` holds
/// `data` durably; after a crash it holds either the old or the new bytes.
pub fn write_file_durably(fs: &dyn Fs, path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    let mut file = fs.create(&tmp)?;
    file.append(data)?;
    file.sync()?;
    drop(file);
    fs.rename(&tmp, path)?;
    fs.sync_dir(&dir)
}
