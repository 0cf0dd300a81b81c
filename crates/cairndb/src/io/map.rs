//! Read-only memory maps of files the engine no longer writes (flushed
//! segments).
//!
//! A value the page cache holds is copied straight out of the map: no
//! system call, no copy by the kernel into a buffer first (`get`). Where a
//! miss must neither wait for the device nor fill the page cache
//! (`ValueReads::CachedElseDirect`), `mincore` first says whether every
//! page of the range is resident (`resident`); if one is not, the caller
//! reads with direct IO. That question is a system call: here (a VM,
//! Linux 6.18) a point read of a cached 1 KiB value took 2.2-2.6 µs with
//! `pread`, 1.3-1.5 µs out of the map and 2.7-3.5 µs out of the map behind
//! `mincore`, so only reads whose misses must not wait ask it.
//!
//! A map covers its file as long as it was when mapped, which for a file
//! of an opened database is after open: a range past the end of a file
//! cut short before goes to `pread`, which reports the short file as an
//! error.
//!
//! What a map cannot turn into an error: a page the page cache lacks (or
//! loses between `mincore` and the copy) is read from the device by the
//! fault, and if that read fails the kernel sends `SIGBUS`; so it does if
//! another process cuts the file short while it is mapped (`mincore` does
//! not tell: pages of a large folio that straddles the new end still count
//! as resident). So it is for every reader of a mapped file (LMDB's whole
//! database is one, LevelDB maps its tables); it is why
//! `Options::map_values`, which turns maps on, is off by default.

use std::fs::File;
use std::io;

/// Pages whose residency one `mincore` call reports into a stack buffer;
/// longer ranges ask again for the next pages.
const PAGES_PER_ASK: usize = 256;

/// A read-only map of a whole file as long as it was when mapped.
pub struct Mapped {
    map: memmap2::Mmap,
    page: usize,
}

impl Mapped {
    /// Maps `file` whole; `None` for an empty file (nothing to map).
    pub fn new(file: &File) -> io::Result<Option<Mapped>> {
        if file.metadata()?.len() == 0 {
            return Ok(None);
        }
        // SAFETY: the map is read-only and shared, and only files the
        // engine has finished writing are mapped (flushed segments: no
        // handle of this process writes them again, and a journal's file
        // is reused only after its `SegmentFile`, which owns the map, is
        // gone). Another process writing the file would make the bytes
        // change under a reader: each value is checked against its
        // pointer's checksum after it is copied out, and one that does not
        // match is read again through `pread`, which names the damage.
        // Truncation by another process is the `SIGBUS` race in the module
        // header.
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        // Only a hint: with it a fault (the race above) reads one page,
        // not a read-ahead window.
        let _ = map.advise(memmap2::Advice::Random);
        Ok(Some(Mapped {
            map,
            page: rustix::param::page_size(),
        }))
    }

    /// The `len` bytes at `offset`, if the map holds them. Touching a page
    /// the page cache lacks faults it in from the device (and waits).
    pub fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let from = usize::try_from(offset).ok()?;
        self.map.get(from..from.checked_add(len)?)
    }

    /// The `len` bytes at `offset`, if the map holds them and the page
    /// cache holds every page of them now; `None` otherwise (nothing is
    /// touched, nothing waited for).
    pub fn resident(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let bytes = self.get(offset, len)?;
        if len == 0 || self.all_resident(offset as usize, len) {
            Some(bytes)
        } else {
            None
        }
    }

    #[cfg(target_os = "linux")]
    fn all_resident(&self, from: usize, len: usize) -> bool {
        let first = from / self.page * self.page;
        let end = from + len;
        let mut at = first;
        let mut pages = [0u8; PAGES_PER_ASK];
        while at < end {
            let span = (end - at).min(PAGES_PER_ASK * self.page);
            let count = span.div_ceil(self.page);
            // SAFETY: `at` is page-aligned and `at..at + span` lies within
            // the map (`first` rounds down inside it, `end` is at most its
            // length); `pages` has room for the `count` bytes mincore
            // writes, one per page of the span. Nothing is dereferenced.
            let rc = unsafe {
                libc::mincore(
                    self.map.as_ptr().add(at) as *mut libc::c_void,
                    span,
                    pages.as_mut_ptr(),
                )
            };
            if rc != 0 || pages[..count].iter().any(|p| p & 1 == 0) {
                return false;
            }
            at += span;
        }
        true
    }

    /// Without `mincore`'s answer nothing counts as resident: every read
    /// goes the usual way.
    #[cfg(not(target_os = "linux"))]
    fn all_resident(&self, _from: usize, _len: usize) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(path: &std::path::Path) -> Mapped {
        let file = File::open(path).expect("open");
        Mapped::new(&file).expect("map").expect("not empty")
    }

    #[test]
    fn resident_ranges_and_ranges_past_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        // Just written through the page cache: every page is held.
        let map = mapped(&path);
        assert_eq!(map.resident(10, 5000), Some(&data[10..5010]));
        assert_eq!(map.resident(0, data.len()), Some(&data[..]));
        assert_eq!(map.resident(data.len() as u64 - 1, 2), None);
        assert_eq!(map.resident(u64::MAX, 1), None);
        let empty = dir.path().join("e");
        std::fs::write(&empty, b"").expect("write");
        let file = File::open(&empty).expect("open");
        assert!(Mapped::new(&file).expect("map").is_none());
    }

    /// A map made after its file was cut short ends where the file now
    /// ends. (`mincore` is no guard against a cut made after mapping: on
    /// Linux 6.18, ext4 keeps reporting the pages of a large folio that
    /// straddles the new end.)
    #[test]
    fn a_map_ends_where_its_file_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 8 * 4096]).expect("write");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(4096 + 10))
            .expect("truncate");
        let map = mapped(&path);
        assert_eq!(map.resident(4096, 10), Some(&[7u8; 10][..]));
        assert_eq!(map.resident(4096, 11), None);
        assert_eq!(map.resident(5 * 4096, 1), None);
    }
}
