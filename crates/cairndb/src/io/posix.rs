//! The real file system through `std::fs` (pread via `FileExt`, fdatasync via
//! `sync_data`, `flock` via `File::try_lock`); `O_DIRECT` from `libc`.

use super::blocks::{reserve_blocks, reserved_after_trim, reserved_past, write_zeros};
use super::{DirLock, FileRead, FileWrite, Fs};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct PosixFs;

struct PosixWrite {
    file: File,
    /// Append position.
    len: u64,
    /// File size: `len`, or more after `prewrite`.
    size: u64,
    /// Writeback has been started for the bytes below this.
    written_back: u64,
    /// The file has blocks below this (`FileWrite::reserve`).
    reserved: u64,
}

/// Appended bytes between writeback starts. Each time this much has been
/// appended, the kernel is asked to start writing it out
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait), so a
/// table's or journal's dirty pages leave the page cache steadily rather
/// than in one burst at its fdatasync or at the kernel's dirty limits. A
/// burst queues megabytes in front of the small journal writes that
/// synced commits wait for (RocksDB's `bytes_per_sync` does the same).
const WRITEBACK_BYTES: u64 = 1 << 20;

/// Asks the kernel to start writing out `len` bytes of `file` from
/// `offset`; does not wait. A hint: an error here is left for the next
/// fdatasync to report.
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: `sync_file_range` takes a file descriptor and integers and
    // touches no memory of ours; the descriptor is open for as long as
    // `file` is borrowed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

impl FileWrite for PosixWrite {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, self.len)?;
        self.len += data.len() as u64;
        self.size = self.size.max(self.len);
        if self.len - self.written_back >= WRITEBACK_BYTES {
            // Whole pages only: the last one may still be appended to.
            let end = self.len & !(super::DIRECT_ALIGN as u64 - 1);
            start_writeback(&self.file, self.written_back, end - self.written_back);
            self.written_back = end;
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn background_sync(&self) -> Option<super::BackgroundSync> {
        // A duplicate descriptor shares the open file (and so its
        // writeback-error cursor) with `self.file`.
        let file = self.file.try_clone().ok()?;
        Some(Box::new(move || file.sync_data()))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn prewrite(&mut self, up_to: u64) -> io::Result<()> {
        if up_to <= self.size {
            return Ok(());
        }
        write_zeros(&self.file, self.size, up_to)?;
        self.size = up_to;
        super::sync_after_prewrite(|| self.file.sync_data())
    }
    fn reserve(&mut self, up_to: u64, ahead: u64) -> io::Result<()> {
        reserve_blocks(&self.file, &mut self.reserved, up_to, ahead)
    }
    fn trim(&mut self) -> io::Result<()> {
        if self.size > self.len || reserved_past(self.reserved, self.len) {
            // Also when the size stays: a truncate to the same size gives
            // back the blocks reserved past the end.
            self.file.set_len(self.len)?;
            self.size = self.len;
            self.reserved = reserved_after_trim(self.reserved, self.len);
            // fsync, not fdatasync: a smaller size must reach the device.
            self.file.sync_all()?;
        }
        Ok(())
    }
}

/// `struct cachestat_range` of the `cachestat` system call.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of the `cachestat` system call (page counts).
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat`'s number (Linux 6.5) where it is 451, the common table's
/// number (x86, Arm, RISC-V, LoongArch, PowerPC, s390); elsewhere (Alpha,
/// MIPS) the page cache is not asked and nothing counts as cached.
const SYS_CACHESTAT: Option<libc::c_long> = if cfg!(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm",
    target_arch = "riscv64",
    target_arch = "loongarch64",
    target_arch = "powerpc64",
    target_arch = "s390x"
)) {
    Some(451)
} else {
    None
};

/// Cleared once the kernel answers that it has no `cachestat`, or that
/// this process may not use it.
static CACHESTAT_WORKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// True if the page cache holds every page of `offset..offset + len` of
/// `file` (`len` > 0); false if not, or if the kernel cannot tell
/// (before 6.5, or a file system without a page cache).
fn cached_whole(file: &File, offset: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;
    let Some(number) = SYS_CACHESTAT else {
        return false;
    };
    if !CACHESTAT_WORKS.load(Ordering::Relaxed) {
        return false;
    }
    let page = rustix::param::page_size() as u64;
    let Some(end) = offset.checked_add(len) else {
        return false;
    };
    let pages = (end - 1) / page - offset / page + 1;
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: `cachestat(fd, range, stat, flags)` reads one
    // `cachestat_range` and writes one `cachestat`; both are `repr(C)`
    // structs of the kernel's layout (u64 fields only), alive and not
    // otherwise borrowed for the whole call. The descriptor is owned by
    // `file`, which outlives the call. Nothing else is touched.
    let rc = unsafe {
        libc::syscall(
            number,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if rc != 0 {
        // No such call (old kernel), or a sandbox refuses it: stop asking.
        let errno = io::Error::last_os_error().raw_os_error();
        if matches!(errno, Some(libc::ENOSYS) | Some(libc::EPERM)) {
            CACHESTAT_WORKS.store(false, Ordering::Relaxed);
        }
        return false;
    }
    stat.nr_cache >= pages
}

/// `path` opened for direct reads (`O_DIRECT`); `None` where its file
/// system refuses the flag (tmpfs, for one).
fn open_o_direct(path: &Path) -> io::Result<Option<PosixRead>> {
    use std::os::unix::fs::OpenOptionsExt;
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => {
            let len = file.metadata()?.len();
            Ok(Some(PosixRead { file, len }))
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `statfs` magic number of tmpfs (linux/magic.h).
const TMPFS_MAGIC: libc::__fsword_t = 0x0102_1994;

/// True if `file` lives on a file system whose page cache is its only
/// storage (tmpfs): what reads show is all it holds.
fn in_memory_only(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `fstatfs` writes one `statfs` into the buffer it is given,
    // which is that large; the descriptor is open while `file` is
    // borrowed. The buffer is read only if the call succeeded.
    let ok = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } == 0;
    // SAFETY: zeroed is a valid `statfs` (plain integers), filled in by a
    // successful call.
    ok && unsafe { st.assume_init() }.f_type == TMPFS_MAGIC
}

struct PosixRead {
    file: File,
    len: u64,
}

/// Bytes `PosixRead::will_need` asks the page cache for per call.
const WILL_NEED_STEP: u64 = 2 << 20;

impl FileRead for PosixRead {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
    fn len(&self) -> u64 {
        self.len
    }
    /// Asks the kernel which pages of the range it caches (`cachestat`,
    /// which looks without reading). Not `preadv2(RWF_NOWAIT)`: on a miss
    /// that starts a read-ahead of the range before it answers `EAGAIN`,
    /// so a caller that then reads the bytes directly would have the
    /// device read them twice.
    fn cached(&self, offset: u64, len: u64) -> bool {
        len > 0 && cached_whole(&self.file, offset, len)
    }
    fn advise_random(&self) {
        // Only a hint: a file system that ignores it still reads right.
        let _ = rustix::fs::fadvise(&self.file, 0, None, rustix::fs::Advice::Random);
    }
    fn will_need(&self) {
        // Only a hint, as above. Linux reads at most its read-ahead window
        // (8 MiB here) per call: asked for a whole 64 MiB file at once it
        // read 8 MiB of it, asked 2 MiB at a time all of it (`fincore`).
        // The file's length now: `len` is as opened (a journal grows).
        let Ok(meta) = self.file.metadata() else {
            return;
        };
        let step = std::num::NonZeroU64::new(WILL_NEED_STEP);
        for offset in (0..meta.len()).step_by(WILL_NEED_STEP as usize) {
            let advice = rustix::fs::Advice::WillNeed;
            if rustix::fs::fadvise(&self.file, offset, step, advice).is_err() {
                return;
            }
        }
    }
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.file.as_raw_fd())
    }
}

struct PosixLock {
    _file: File,
}
impl DirLock for PosixLock {}

impl Fs for PosixFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn FileWrite>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(PosixWrite {
            file,
            len: 0,
            size: 0,
            written_back: 0,
            reserved: 0,
        }))
    }
    fn reuse(&self, from: &Path, to: &Path) -> io::Result<Box<dyn FileWrite>> {
        fs::rename(from, to)?;
        let file = OpenOptions::new().write(true).open(to)?;
        let size = file.metadata()?.len();
        Ok(Box::new(PosixWrite {
            file,
            len: 0,
            size,
            written_back: 0,
            reserved: size,
        }))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn FileRead>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Arc::new(PosixRead { file, len }))
    }
    #[cfg(unix)]
    fn open_staged(
        &self,
        path: &Path,
        stage: &Path,
        number: u64,
        ring: (usize, usize),
        rings: &super::StageRings,
    ) -> io::Result<Option<Box<dyn FileWrite>>> {
        let read = self.open(path)?;
        Ok(Some(Box::new(super::stage::open(
            path, stage, number, ring, read, rings,
        )?)))
    }
    fn open_direct(&self, path: &Path) -> io::Result<Arc<dyn FileRead>> {
        match open_o_direct(path)? {
            Some(r) => Ok(Arc::new(r)),
            None => self.open(path),
        }
    }
    fn map(&self, path: &Path) -> io::Result<Option<super::Mapped>> {
        super::Mapped::new(&File::open(path)?)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        // Linux syncs a file through any descriptor of it, read-only ones
        // too.
        File::open(path)?.sync_data()
    }
    fn open_device(&self, path: &Path) -> io::Result<Option<Arc<dyn FileRead>>> {
        if let Some(r) = open_o_direct(path)? {
            return Ok(Some(Arc::new(r)));
        }
        // Without direct IO, only a file system that keeps its files in
        // the page cache alone can say what it holds.
        let file = File::open(path)?;
        if !in_memory_only(&file) {
            return Ok(None);
        }
        let len = file.metadata()?.len();
        Ok(Some(Arc::new(PosixRead { file, len })))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }
    fn link_count(&self, path: &Path) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(fs::metadata(path)?.nlink())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn lock(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let path = dir.join("LOCK");
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                // The holder's pid, for the error another process gets
                // (format.md §LOCK). Only a hint: the lock is the flock.
                use std::os::unix::fs::FileExt;
                let pid = format!("{}\n", std::process::id());
                file.set_len(0)?;
                file.write_all_at(pid.as_bytes(), 0)?;
                Ok(Box::new(PosixLock { _file: file }))
            }
            Err(fs::TryLockError::WouldBlock) => Err(locked_error(&path)),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
    fn lock_shared(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let path = dir.join("LOCK");
        let file = match File::open(&path) {
            Ok(f) => f,
            // Never opened by a writer: nothing to share.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Box::new(NoLock)),
            Err(e) => return Err(e),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(Box::new(PosixLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Err(locked_error(&path)),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

struct NoLock;
impl DirLock for NoLock {}

/// The error for a `LOCK` another handle holds: a writer (whose pid the
/// file names) or read-only handles (which share it).
fn locked_error(path: &Path) -> io::Error {
    let shared = File::open(path).is_ok_and(|f| f.try_lock_shared().is_ok());
    let holder = if shared {
        "read-only handles (Db::open_read_only)".to_string()
    } else {
        match fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            Some(pid) => format!("the writer, process {pid}"),
            None => "a writer".to_string(),
        }
    };
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!(
            "database is locked: {} is held by {holder}; a second process can \
             read it with Db::open_follower",
            path.display()
        ),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::io::blocks::UNRESERVABLE;

    #[test]
    fn the_page_cache_is_asked_before_a_cached_read_touches_the_buffer() {
        if SYS_CACHESTAT.is_none() {
            return; // no `cachestat` on this architecture: never cached
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &data).unwrap();
        let file = PosixFs.open(&path).unwrap();
        // Just written through the page cache: every page is there.
        assert!(file.cached(0, data.len() as u64));
        assert!(file.cached(5000, 100));
        assert!(!file.cached(0, 0), "an empty range is never cached");
        assert!(!file.cached(data.len() as u64, 4096), "past the end");
        let mut buf = vec![0u8; 100];
        assert!(file.read_cached(&mut buf, 5000).unwrap());
        assert_eq!(buf, data[5000..5100]);
        // Written back and dropped from the page cache: not cached, and
        // the buffer is left as it was.
        File::open(&path).unwrap().sync_all().unwrap();
        let f = File::open(&path).unwrap();
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        assert!(!file.cached(0, data.len() as u64));
        let mut buf = vec![7u8; 100];
        assert!(!file.read_cached(&mut buf, 5000).unwrap());
        assert_eq!(buf, [7u8; 100]);
    }

    /// On a file system that cannot reserve blocks, a trim with nothing
    /// past the end leaves the file alone (no truncate, no fsync), and
    /// the file stays marked so: reserving does not ask again.
    #[test]
    fn a_file_that_cannot_reserve_blocks_is_not_trimmed_for_them() {
        assert!(!reserved_past(UNRESERVABLE, 0));
        assert!(reserved_past(8192, 4096));
        assert!(!reserved_past(4096, 4096));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = PosixWrite {
            file: OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .unwrap(),
            len: 0,
            size: 0,
            written_back: 0,
            reserved: UNRESERVABLE,
        };
        w.append(&[1u8; 100]).unwrap();
        // Grown behind the writer's back: a trim that thought blocks were
        // reserved past the end would cut the file to 100 bytes.
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        w.trim().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 4096);
        assert_eq!(w.reserved, UNRESERVABLE);
        w.reserve(1 << 20, 0).unwrap();
        assert_eq!(w.reserved, UNRESERVABLE, "reserving asks again");
        // Reserved for real: the trim gives the blocks back.
        w.reserved = 8192;
        w.trim().unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 100);
        assert_eq!(w.reserved, 100);
    }
}
