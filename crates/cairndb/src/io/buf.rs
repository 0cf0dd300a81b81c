//! Buffers for direct reads: aligned, in fresh pages of their own.

/// A transparent huge page (x86-64, most arm64 kernels). Buffers of at
/// least this size are aligned to it and asked to be backed by huge pages:
/// a direct read into 4 KiB pages reaches the device as one segment per
/// page, and a virtual disk that takes at most 254 segments per request
/// splits a 4 MiB read into five requests of scattered pages; from huge
/// pages it goes as one.
const HUGE_PAGE: usize = 2 << 20;

/// Alignment every anonymous mapping has (a page).
const MAP_ALIGN: usize = 4096;

/// Bytes in a buffer aligned for direct IO.
///
/// The buffer is an anonymous mapping of its own, not heap memory: fresh
/// pages, aligned to a huge page and advised to be backed by transparent
/// huge pages where it holds whole ones (`HUGE_PAGE`), which the
/// allocator's reused heap pages could not be.
pub struct AlignedBuf {
    mem: memmap2::MmapMut,
    /// Bytes of `mem` before the aligned start.
    skip: usize,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` zero bytes starting at an `align`-aligned
    /// address; in huge pages where it holds whole ones.
    pub fn zeroed(len: usize, align: usize) -> std::io::Result<AlignedBuf> {
        let huge = len >= HUGE_PAGE;
        let align = if huge {
            align.max(HUGE_PAGE)
        } else {
            align.max(1)
        };
        // A mapping starts page-aligned: map more only for a coarser
        // alignment, and start where it is reached.
        let extra = if align > MAP_ALIGN { align } else { 0 };
        let mem = memmap2::MmapOptions::new()
            .len(len.max(1) + extra)
            .map_anon()?;
        let skip = mem.as_ptr().align_offset(align).min(extra);
        if huge {
            // Before the first touch: the read's page faults then take
            // huge pages. Without them (a kernel without THP, or none
            // free), the buffer works the same in small pages.
            let whole = len / HUGE_PAGE * HUGE_PAGE;
            let _ = mem.advise_range(memmap2::Advice::HugePage, skip, whole);
        }
        Ok(AlignedBuf { mem, skip, len })
    }

    /// Makes the buffer `len` bytes long if it can hold them (true); the
    /// bytes are left as they are.
    pub fn resize_within(&mut self, len: usize) -> bool {
        if self.capacity() < len {
            return false;
        }
        self.len = len;
        true
    }

    pub fn bytes(&self) -> &[u8] {
        &self.mem[self.skip..self.skip + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.skip..self.skip + self.len]
    }

    /// The most bytes this buffer can hold.
    pub fn capacity(&self) -> usize {
        self.mem.len() - self.skip
    }

    /// Keeps the first `len` bytes (a read that met the end of the file).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}
