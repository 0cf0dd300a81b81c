//! Every bound of the engine in one place. Relations between them are
//! checked at compile time at the bottom of this file.

/// Largest user key, in bytes. The empty key is a valid key.
pub const KEY_LEN_MAX: usize = 64 * 1024;
/// Largest value, in bytes.
pub const VALUE_LEN_MAX: usize = 1 << 30;
/// Largest number of operations in one `WriteBatch`.
pub const BATCH_OPS_MAX: usize = 1 << 24;
/// Largest encoded batch (one journal record), in bytes.
pub const BATCH_BYTES_MAX: usize = 2 * VALUE_LEN_MAX;
/// Largest group of batches the group-commit leader merges into one journal
/// append (bytes); a group stops growing past this.
pub const GROUP_BYTES_MAX: usize = 4 << 20;
/// Number of levels in the tree (L0 .. L6).
pub const LEVELS: usize = 7;
/// Largest block a table may hold, in bytes (guards decoding of sizes read
/// from disk before allocation).
pub const BLOCK_LEN_MAX: usize = 2 * VALUE_LEN_MAX;
/// Manifest size after which it is rewritten as a fresh snapshot.
pub const MANIFEST_BYTES_MAX: u64 = 64 << 20;
/// Largest seqno; the top 8 bits of a tag hold the entry kind.
pub const SEQNO_MAX: u64 = (1 << 56) - 1;
/// Most free journal files kept for reuse (`Options::journal_recycle`):
/// one is taken at each seal, and a flush frees about one.
pub const FREE_JOURNALS_MAX: usize = 2;
/// Bytes of one direct write of a staged journal (`Options::journal_direct`):
/// the device probe here reaches its sequential-write limit with requests
/// of 256 KiB to 4 MiB.
pub const JOURNAL_CHUNK_BYTES: usize = 1 << 20;
/// Bytes of one direct write of a staged value stream. A journal's
/// streams are small (about 2 MiB each under the defaults), and what
/// their rings hold past the last whole chunk is written by the seal,
/// while the writers wait: with 1 MiB chunks that was a quarter to a half
/// of each journal's values, and a seal took 13 ms.
pub const STREAM_CHUNK_BYTES: usize = 256 << 10;
/// Bytes of the staging ring of one value stream (`Options::journal_direct`
/// with value partitions): four direct-write chunks, so appends go on
/// while the flusher writes. A journal's streams take this each (32
/// partitions: 32 MiB of rings, reused journal after journal).
pub const STREAM_RING_BYTES: usize = 4 * STREAM_CHUNK_BYTES;
/// Bytes of one chunk a long scan reads through the shared-scan map
/// (`Stats::scan_chunk_reads` counts them; docs/architecture.md §Shared
/// scans): a multiple of the direct-IO alignment, and 4 MiB, the request
/// size at which the device probe reads fastest here.
pub const SCAN_CHUNK_BYTES: u64 = 4 << 20;

const _: () = assert!(KEY_LEN_MAX <= u32::MAX as usize); // key lengths are stored as varint32
const _: () = assert!(BATCH_BYTES_MAX <= u32::MAX as usize); // journal record lengths are u32
const _: () = assert!(GROUP_BYTES_MAX < BATCH_BYTES_MAX); // a single batch may exceed a group
const _: () = assert!(LEVELS >= 2); // L0 plus at least one sorted level
const _: () = assert!(FREE_JOURNALS_MAX >= 1); // a seal finds one while a flush frees the next
