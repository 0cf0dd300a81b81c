//! Block reservation and zero-filling of files on the real file system,
//! for both ways the engine writes them (`posix.rs`, plain; `stage.rs`,
//! through the staging ring).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// `reserved` of a file on a file system that cannot reserve blocks
/// (`reserve_blocks`): every block counts as reserved, and a trim has
/// none past the end to give back.
pub(super) const UNRESERVABLE: u64 = u64::MAX;

/// Whether blocks are reserved past `len`, which a trim gives back.
pub(super) fn reserved_past(reserved: u64, len: u64) -> bool {
    reserved != UNRESERVABLE && reserved > len
}

/// What `reserved` becomes after a trim to `len`.
pub(super) fn reserved_after_trim(reserved: u64, len: u64) -> u64 {
    if reserved == UNRESERVABLE {
        UNRESERVABLE
    } else {
        len
    }
}

/// Reserves blocks of `file` from `*reserved` up to at least `up_to`
/// (`FileWrite::reserve`): `ahead` more if the device has room, else
/// just what was asked. Where the file system cannot reserve
/// (`EOPNOTSUPP`), marks everything reserved: appends then meet a full
/// device as they did without it.
pub(super) fn reserve_blocks(
    file: &File,
    reserved: &mut u64,
    up_to: u64,
    ahead: u64,
) -> io::Result<()> {
    if up_to <= *reserved {
        return Ok(());
    }
    let mut last = Ok(());
    for to in [up_to.saturating_add(ahead), up_to] {
        let flags = rustix::fs::FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(file, flags, *reserved, to - *reserved) {
            Ok(()) => {
                *reserved = to;
                return Ok(());
            }
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                *reserved = UNRESERVABLE;
                return Ok(());
            }
            Err(e) => last = Err(e.into()),
        }
    }
    last
}

/// Zeros written per `pwrite` while pre-writing.
const ZEROS: usize = 1 << 20;

/// Writes zeros to `file` from `from` to `to`, through the page cache, in
/// writes of `ZEROS` bytes (journal pre-writing, plain and staged).
pub(super) fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZEROS];
    let mut at = from;
    while at < to {
        let n = (to - at).min(ZEROS as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}
