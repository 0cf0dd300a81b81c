//! Batched reads through io_uring (Linux): many reads handed to the kernel
//! at once from one thread, for scans over values that lie at random in
//! their segments (`read/prefetch.rs`). A worker thread blocked in `pread`
//! per read keeps at most one request in flight per thread and pays a
//! wake-up per value; one ring keeps a whole window's reads in flight and
//! reaps them together.
//!
//! Each thread that reads keeps its own ring (created on first use, 256
//! entries; at most as many reads in flight as its completion queue
//! holds). `read_all` returns once the kernel has answered every read it
//! pushed, so their buffers are never freed while a read is in flight; if
//! the ring fails (or the loop panics) with reads unanswered, their
//! buffers and the ring are leaked instead. Where rings cannot be made or
//! lack the read opcode (an old kernel, a seccomp filter), `available`
//! turns false for the process and callers read with `pread` as before.

use super::DIRECT_ALIGN;
use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};

/// Entries of each thread's ring: reads in flight at once per thread.
const RING_ENTRIES: u32 = 256;

/// A buffer aligned for direct IO: `len` bytes from the first aligned
/// byte of an over-allocated vector (no unsafe allocation).
pub struct AlignedBuf {
    raw: Vec<u8>,
    skip: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let skip = raw.as_ptr().align_offset(DIRECT_ALIGN);
        AlignedBuf { raw, skip, len }
    }

    pub fn bytes(&self) -> &[u8] {
        self.raw.get(self.skip..self.skip + self.len).unwrap_or(&[])
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.raw
            .get_mut(self.skip..self.skip + self.len)
            .map_or(std::ptr::null_mut(), <[u8]>::as_mut_ptr)
    }
}

/// One read: `buf.len` bytes of `fd` at `offset`. `result` is the bytes
/// read (fewer at the end of the file) or the error.
pub struct Read {
    pub fd: RawFd,
    pub offset: u64,
    pub buf: AlignedBuf,
    pub result: Option<io::Result<usize>>,
}

/// 0: not tried yet; 1: rings work; 2: they do not.
static AVAILABLE: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static RING: RefCell<Option<io_uring::IoUring>> = const { RefCell::new(None) };
}

/// False once a ring could not be made on this machine.
pub fn available() -> bool {
    AVAILABLE.load(Ordering::Relaxed) != 2
}

/// Reads every entry of `reads` with this thread's ring, many in flight
/// at once. `Err` only if no ring can be used; then nothing was read and
/// the caller reads another way.
pub fn read_all(reads: &mut [Read]) -> io::Result<()> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            match new_ring() {
                Ok(ring) => {
                    AVAILABLE.store(1, Ordering::Relaxed);
                    *slot = Some(ring);
                }
                Err(e) => {
                    AVAILABLE.store(2, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        let Some(ring) = slot.as_mut() else {
            return Err(io::Error::other("no ring"));
        };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(ring, reads)));
        match ran {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Broken)) | Err(_) => {
                // The kernel may still write into buffers of reads it never
                // answered, and closing the ring does not wait for them:
                // leak those buffers and the ring rather than free memory
                // the device may still fill.
                for r in reads.iter_mut().filter(|r| r.result.is_none()) {
                    std::mem::forget(std::mem::replace(&mut r.buf, AlignedBuf::new(0)));
                    r.result = Some(Err(io::Error::other("io_uring failed")));
                }
                if let Some(ring) = slot.take() {
                    std::mem::forget(ring);
                }
                Ok(())
            }
        }
    })
}

/// A ring that can read (`IORING_OP_READ`, Linux 5.6).
fn new_ring() -> io::Result<io_uring::IoUring> {
    let ring = io_uring::IoUring::new(RING_ENTRIES)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    if !probe.is_supported(io_uring::opcode::Read::CODE) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "io_uring without the read opcode",
        ));
    }
    Ok(ring)
}

/// The ring failed with reads in flight.
struct Broken;

fn run(ring: &mut io_uring::IoUring, reads: &mut [Read]) -> Result<(), Broken> {
    let mut next = 0;
    let mut in_flight = 0usize;
    // No more in flight than the completion queue holds: the kernel then
    // never has an answer it cannot post.
    let cap = ring.params().cq_entries() as usize;
    while next < reads.len() || in_flight > 0 {
        {
            let mut sq = ring.submission();
            while next < reads.len() && !sq.is_full() && in_flight < cap {
                let r = &mut reads[next];
                let Ok(len) = u32::try_from(r.buf.len) else {
                    r.result = Some(Err(io::Error::other("read too large for one request")));
                    next += 1;
                    continue;
                };
                let entry =
                    io_uring::opcode::Read::new(io_uring::types::Fd(r.fd), r.buf.as_mut_ptr(), len)
                        .offset(r.offset)
                        .build()
                        .user_data(next as u64);
                // SAFETY: the entry names `r.buf`, which `reads` owns and
                // which is neither moved nor freed until the kernel has
                // answered this read: `run` returns only when every pushed
                // read has completed, and if the ring breaks first,
                // `read_all` leaks the unanswered buffers. The descriptor
                // stays open meanwhile: the caller holds the file.
                if unsafe { sq.push(&entry) }.is_err() {
                    break;
                }
                next += 1;
                in_flight += 1;
            }
        }
        if in_flight == 0 {
            continue;
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The kernel is out of room for new requests (EAGAIN/EBUSY):
            // the loop waits for completions and submits again.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
            Err(_) => return Err(Broken),
        }
        for cqe in ring.completion() {
            let Some(r) = usize::try_from(cqe.user_data())
                .ok()
                .and_then(|i| reads.get_mut(i))
            else {
                continue;
            };
            let res = cqe.result();
            r.result = Some(if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                Ok(res as usize)
            });
            in_flight -= 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    /// Reads land at their offsets, short at the end of the file, and an
    /// error is reported per read, not for the batch.
    #[test]
    fn reads_land_where_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&data))
            .expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let mut reads: Vec<Read> = (0..300)
            .map(|i| Read {
                fd: file.as_raw_fd(),
                offset: (i * 4096 % 61_440) as u64,
                buf: AlignedBuf::new(8192),
                result: None,
            })
            .collect();
        reads.push(Read {
            fd: file.as_raw_fd(),
            offset: 60 * 1024,
            buf: AlignedBuf::new(8192),
            result: None,
        });
        reads.push(Read {
            fd: -1,
            offset: 0,
            buf: AlignedBuf::new(4096),
            result: None,
        });
        if read_all(&mut reads).is_err() {
            eprintln!("io_uring unavailable here; nothing to check");
            return;
        }
        for r in &reads[..300] {
            let at = r.offset as usize;
            assert!(matches!(r.result, Some(Ok(8192))), "{:?}", r.result);
            assert_eq!(r.buf.bytes(), &data[at..at + 8192]);
        }
        let tail = &reads[300];
        assert!(matches!(tail.result, Some(Ok(4096))), "{:?}", tail.result);
        assert_eq!(&tail.buf.bytes()[..4096], &data[60 * 1024..]);
        assert!(matches!(reads[301].result, Some(Err(_))));
    }
}
