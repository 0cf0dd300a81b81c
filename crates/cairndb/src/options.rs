//! Options for opening a database and for writes.

use crate::io::{Fs, PosixFs};
use std::sync::Arc;

/// How flushed separated values are read: through the page cache, with
/// direct IO, or each from whichever serves it (`Options::value_reads`;
/// docs/architecture.md §Value separation). A value in a journal still
/// being written to is always read through the page cache, where its
/// newest bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueReads {
    /// Through the page cache, with random-access advice (a miss reads
    /// only the value's pages): data that fits in memory is served from
    /// memory once read.
    PageCache,
    /// With direct IO (one aligned read around each value, one aligned
    /// request per chunk a scan reads), bypassing the page cache: for
    /// data far larger than memory, where caching values only evicts
    /// other pages.
    Direct,
    /// From the page cache if it holds every byte (asked without waiting
    /// for the device), else with direct IO: pages already cached are
    /// used, and misses do not churn the cache.
    CachedElseDirect,
    /// `CachedElseDirect` while the database's live separated values are
    /// more than the memory the system has available (`MemAvailable`,
    /// looked at no more than once a second), else `PageCache`. Where the
    /// available memory cannot be read, `PageCache`.
    Auto,
}

/// How a database is opened and tuned. `Options::default()` suits a
/// general-purpose store with a 256 MiB memory budget.
/// The name LevelDB gives its bytewise comparator: the order of a
/// database created without `Options::comparator_name`.
pub const BYTEWISE_COMPARATOR: &str = "leveldb.BytewiseComparator";

/// Keys a foreign comparator (a binding's caller's) is asked to order,
/// every pair both ways, by [`misorders`]. They cover what orderings other
/// than bytewise differ on: the empty key, NUL, prefixes, case, digits
/// compared as numbers, bytes above 0x7f (signed `char`), reversal, and
/// length before content.
const PROBE_KEYS: &[&[u8]] = &[
    b"",
    b"\x00",
    b"\x00\x00",
    b"\x01",
    b"0",
    b"1",
    b"10",
    b"2",
    b"9",
    b"A",
    b"B",
    b"Z",
    b"a",
    b"aa",
    b"ab",
    b"b",
    b"ba",
    b"z",
    b"zz",
    b"\x7f",
    b"\x80",
    b"\xfe",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
    b"k00000000000000000001",
    b"k00000000000000010000",
];

/// Two keys a comparator ordered otherwise than bytewise, and the sign
/// it gave (`misorders`).
pub type Misordered = (&'static [u8], &'static [u8], i64);

/// For bindings that take a LevelDB-style comparator: the first pair of a
/// fixed set of probe keys that `compare` (negative, zero or positive, as
/// `memcmp`) orders otherwise than bytewise order, with the sign it gave;
/// `Ok(None)` if it orders them all bytewise, which is when CairnDB can
/// take it (it orders keys bytewise only). An error of `compare` ends the
/// probe.
pub fn misorders<E>(
    mut compare: impl FnMut(&[u8], &[u8]) -> Result<i64, E>,
) -> Result<Option<Misordered>, E> {
    for a in PROBE_KEYS {
        for b in PROBE_KEYS {
            let got = compare(a, b)?.signum();
            if got != a.cmp(b) as i64 {
                return Ok(Some((a, b, got)));
            }
        }
    }
    Ok(None)
}

#[derive(Clone)]
pub struct Options {
    /// The file system under the database (default: the real one).
    pub fs: Arc<dyn Fs>,
    /// Create the directory and an empty database if missing (default true).
    pub create_if_missing: bool,
    /// Fail if a database already exists at the path (default false).
    pub error_if_exists: bool,
    /// The name of the key order, as LevelDB names its comparators
    /// (default `None`: not checked). CairnDB orders keys bytewise only;
    /// the name lets a database created under one comparator name refuse
    /// an open under another, as LevelDB does (the C and Python bindings
    /// pass their comparator's name, `leveldb.BytewiseComparator` when
    /// none is set). A new database records the name given (manifest tag
    /// 15); one created without a name is `BYTEWISE_COMPARATOR` and stays
    /// unnamed. An open naming another order than the recorded one fails
    /// with `InvalidArgument` (and keeps nothing it wrote). 1 to 255 bytes.
    pub comparator_name: Option<String>,
    /// Bytes a memtable may hold before it is sealed and flushed.
    pub memtable_bytes: usize,
    /// Sealed memtables allowed to wait for flushing before writers stall.
    pub memtables_sealed_max: usize,
    /// Bytes of decoded table blocks cached in memory (0 disables).
    pub block_cache_bytes: usize,
    /// The block cache also holds blocks in the room of the memtables
    /// that are not sealed (default true): `memtable_bytes` for each of
    /// the `memtables_sealed_max` not sealed now. A seal takes
    /// its room back, evicting blocks, and its flush returns it. So the
    /// cache holds `block_cache_bytes` at least, and memtables and cache
    /// together never more than `memtable_bytes × (1 +
    /// memtables_sealed_max) + block_cache_bytes`, the bound
    /// [`Options::with_memory_budget`] keeps; a database that is read
    /// more than written gets most of that bound as cache. False: the
    /// cache holds `block_cache_bytes` and no more.
    pub block_cache_borrows_memtable_room: bool,
    /// Table files kept open at once (handles are opened lazily).
    pub open_tables_max: usize,
    /// Target uncompressed size of a table data block.
    pub block_bytes: usize,
    /// Keys between restart points in a data block (1..=64; default 4).
    /// A point lookup binary-searches a block's restart points and then
    /// decodes entries one by one up to its key, so a shorter interval
    /// means fewer entries decoded per lookup, at the cost of whole keys
    /// stored more often (prefix compression applies within an interval).
    /// With 16-byte random keys, 4 rather than 16 costs 0.8 % more table
    /// bytes and saves a quarter of a cached point lookup's instructions
    /// (about 7 % of its time); scans cost the same. Tables written with
    /// any interval read the same.
    pub block_restart_interval: usize,
    /// Build a filter per table (BinaryFuse8; docs/filters.md).
    pub filter: bool,
    /// Bits of each key's fingerprint in the default keyspace's filters:
    /// 8 (about 9 bits per key, 0.4 % false positives) or 16 (about 18
    /// bits per key, 0.0015 %); `KeyspaceOptions::filter_bits` for the
    /// others.
    pub filter_bits: u8,
    /// How the default keyspace's table data blocks, and its separated
    /// values, are compressed
    /// (default: not at all; `KeyspaceOptions::compression` for the
    /// others). A block or value that would not shrink by an eighth is
    /// stored as it is, and the block cache holds blocks decompressed.
    /// Separated values are compressed as unsynced writes append them to
    /// value streams, or when a compaction first moves them (settling,
    /// value GC); synced writes keep theirs raw in the journal.
    pub compression: Compression,
    /// Target size of a table written by compaction.
    pub table_bytes: u64,
    /// Level 0 tables that start a compaction.
    pub l0_compaction_trigger: usize,
    /// Level 0 tables that start a compaction while level-0 merges find
    /// little to drop: the last one dropped under an eighth as many
    /// entries as it read from level 0 (a load of new keys). Merging level
    /// 0 rewrites the overlapping level-1 tables, with random keys all of
    /// them; a merge that drops nothing buys only fewer tables to search,
    /// and (with separated values, whose flushed tables hold only keys and
    /// pointers) made ~5 % of a load's device writes at 4. The slowdown and
    /// stop triggers move up by as many tables meanwhile. Once a merge
    /// finds overwritten or deleted entries again, `l0_compaction_trigger`
    /// holds: value GC learns of dead values from those merges. At least
    /// `l0_compaction_trigger`. Default 16.
    pub l0_compaction_trigger_new_keys: usize,
    /// Level 0 tables at which writers start being slowed.
    pub l0_slowdown_trigger: usize,
    /// Level 0 tables at which writers wait for compaction.
    pub l0_stop_trigger: usize,
    /// Size target of level 1; each deeper level is `level_multiplier`
    /// times larger.
    pub level1_bytes: u64,
    pub level_multiplier: u64,
    /// A journal is closed, and its memtable sealed, once it holds this
    /// many bytes. With separated values a journal holds far more than
    /// its memtable; this bounds what one open replays and what one value
    /// segment holds. Default 128 MiB: with `value_partitions` at 32 a
    /// journal's streams are then about 4 MiB each, one scan chunk
    /// (`limits::SCAN_CHUNK_BYTES`), so a long scan reads each stream with
    /// one request, and a load seals half as often as at 64 MiB
    /// (docs/architecture.md §Value streams).
    pub journal_bytes: u64,
    /// Values of at least this many bytes are separated: written once, in
    /// the journal, with memtables and tables holding a pointer to them
    /// (docs/architecture.md §Value separation). `usize::MAX` keeps every
    /// value inline. Default 1 KiB.
    pub value_separation_min: usize,
    /// Separated values of unsynced writes go to this many value streams
    /// per journal, one per key range, instead of into the journal
    /// record (docs/architecture.md §Value streams): a full scan then
    /// reads each stream whole rather than every value at random. The
    /// ranges are cut from the keys of the journal before. Writes that
    /// ask for `sync` keep their values in the journal record (one
    /// fdatasync). 0 keeps every value in the journal. At most
    /// `VALUE_PARTITIONS_MAX`. Default 32: in the contest (4 GiB of 4 KiB
    /// values written in random order, then scanned) the range phase is
    /// about 6× as fast and the three phases take half the time, at about
    /// 0.6× the write phase's rate (docs/architecture.md §Value streams).
    pub value_partitions: usize,
    /// Value GC: once the separated values still live in a segment are at
    /// most this share of what it held, compactions move the live ones
    /// they meet to a values file, so the segment can be freed. `0.0` is
    /// the null policy: a segment is freed only when all its values are
    /// dead. Default 0.5.
    pub value_gc_live_ratio: f64,
    /// Value bytes one background compaction may move (value GC) in any
    /// case; see `value_gc_pace` for more. A compaction that has moved its
    /// allowance stops moving for the rest of its run; later compactions
    /// move the rest. Bounds how much a level-0 compaction, which writers
    /// may be waiting for, reads and writes beyond its tables. A full
    /// compaction (`Db::compact`) is not bounded. Default 64 MiB.
    pub value_gc_bytes_per_compaction: u64,
    /// A background compaction may also move up to this many times the
    /// journal bytes appended since the compaction before it: value GC
    /// keeps pace with the writes that make values dead, spread over the
    /// compactions instead of in bursts. `0.0` leaves only
    /// `value_gc_bytes_per_compaction`. Default 1.0.
    pub value_gc_pace: f64,
    /// Settle values while the database is idle: once no write and no
    /// read of a separated value has been seen for this long, the
    /// background thread moves values still in journals (write order)
    /// into values files in key order, a step at a time (level 0 into
    /// level 1, or one deeper table rewritten in place), so
    /// scans read them in large sequential runs and a 4 KiB value takes
    /// one page (docs/architecture.md §Value separation). A step yields
    /// to the first write, value read or `Db::compact`, and settling
    /// resumes after the next idle period; a step that fails is skipped
    /// (`Stats::settle_failures`), never stopping writes.
    /// Each value settles once: one more write of it. `None`: only
    /// `Db::compact` settles. Needs `background_compaction`; nothing
    /// moves under the null policy. Default 5 s.
    pub settle_after_idle: Option<std::time::Duration>,
    /// Settle values while writes go on, when scans need it: each
    /// background compaction also moves values it meets that are still
    /// in journals into its values files, in key order, up to this many
    /// times the value bytes scans read at random from journals since the
    /// compaction before (`Stats::value_bytes_scanned_scattered`), and no
    /// more than this many times the journal bytes appended since, and
    /// only while both scans and writes go on (seen in the last second). A
    /// database written without pause thus settles what scans keep
    /// reading at random, at most one more write per written byte while
    /// they do, and nothing while no scan reads at random (a load, an
    /// overwrite). While writes bring no compaction to ride on (a
    /// database mostly read), short scans pay for settling steps of
    /// their own instead: every 16 MiB (times this ratio) of value bytes
    /// they read at random from journals
    /// (`Stats::value_bytes_scanned_scattered_short`) lets the background
    /// thread settle as many, a step at a time (level 0 into level 1, or
    /// one deeper table rewritten in place), beside the reads and writes
    /// that go on; a step settles at least 16 times the bytes of the
    /// tables it rewrites (at most 256 MiB), and later scans pay off what
    /// it settled past what they had paid; so a database only read
    /// settles at most this ratio times the bytes its short scans read at
    /// random, plus one step.
    /// Long scans (which read value streams whole) and point reads pay
    /// for nothing. `0.0`: only `settle_after_idle` and `Db::compact`
    /// settle. Default 1.0.
    pub settle_for_scans: f64,
    /// How flushed separated values are read (point reads and scans);
    /// see [`ValueReads`]. Default [`ValueReads::Auto`].
    pub value_reads: ValueReads,
    /// Read flushed separated values the page cache holds out of memory
    /// maps of their files (a copy from memory, no system call per read)
    /// rather than with `pread`: each range is first asked of the page
    /// cache (`mincore`), and one not wholly cached is read as
    /// `value_reads` says. A page evicted in the instant between the
    /// question and the copy is read back by a page fault; if that read
    /// fails (a device error), or if another process cuts a mapped file
    /// short while the database is open, the kernel ends the process with
    /// `SIGBUS`, as it would any reader of a memory-mapped file (a file
    /// cut short while the database was closed is mapped as it is now:
    /// its missing values are `Corruption` errors). `false` reads every
    /// value with `pread` or direct IO. Pages a map has touched count in
    /// the process's resident memory (RSS), beside the budget. Not used
    /// with `ValueReads::Direct` nor by read-only opens. Default false:
    /// with it a truncated file or a device error can end the process
    /// instead of giving an error.
    pub map_values: bool,
    /// Pre-write the journal ahead of synced commits: a commit that asks
    /// for sync and would grow the journal first writes zeros some way
    /// past it (64 times the group's bytes, 16 KiB to 4 MiB) and syncs
    /// them once, so the commits after it overwrite allocated blocks and
    /// their fdatasync flushes data alone, not the file system's journal
    /// too (docs/architecture.md §Journal pre-writing). Unsynced writes
    /// never pre-write, so bulk loads write each byte once. Default true.
    pub journal_prewrite: bool,
    /// Write the journal with direct IO in 1 MiB chunks, staging appends
    /// in a 16 MiB memory-mapped ring (`STAGE` in the directory) so an
    /// unsynced write survives kill -9 before its chunk is written; a
    /// synced write writes the unaligned tail itself (architecture.md
    /// §Direct journal). Value streams (`value_partitions`) are written
    /// the same way, each through a 1 MiB ring slot (`STAGE-NNN`) reused
    /// from journal to journal (architecture.md §Value streams). Only
    /// where the file system supports shared
    /// mappings (Unix, `PosixFs`); other backends ignore it. Default
    /// true: the contest's write phase ran 1.7–2.4× faster with it, at
    /// 7 µs of CPU per 4 KiB put instead of 10–15.
    pub journal_direct: bool,
    /// Bytes of the staging ring of `journal_direct`: how far appends may
    /// run ahead of the journal's direct writes, and page cache the ring
    /// keeps. A multiple of `limits::JOURNAL_CHUNK_BYTES` (1 MiB), at
    /// least two. Default 16 MiB.
    pub journal_ring_bytes: usize,
    /// With `journal_direct` and value streams: whether new journals'
    /// streams are staged (direct writes through ring slots) rather than
    /// appended through the page cache. `None` (the default) decides at
    /// each journal: staged once the database's separated values take
    /// more than half the memory the process could still have, so values
    /// of a database that fits in memory stay in the page cache for the
    /// reads after them (architecture.md §Value streams). `Some(true)`
    /// always, `Some(false)` never.
    pub stage_streams: Option<bool>,
    /// Recycle journal files: an obsolete journal (flushed, no live value
    /// left in it) is kept as `NNNNNN.free`, up to `limits::FREE_JOURNALS_MAX`
    /// files, and the next journal is made from it, so appends overwrite
    /// blocks already allocated and written instead of growing a new file
    /// (docs/architecture.md §Journal recycling). The free files take disk
    /// space: at most `FREE_JOURNALS_MAX` × `journal_bytes`. Default true.
    pub journal_recycle: bool,
    /// While flushed values are read through the page cache
    /// (`ValueReads::PageCache`, or `Auto` with the values fitting in
    /// memory), read each journal sealed and each values file a
    /// compaction wrote back into the page cache once writes pause (no
    /// journal append for 200 ms), or while they go on if values are
    /// being read, on one worker thread: written with direct IO, their
    /// values are not there, and each value's first read would wait for
    /// the device, where a buffered writer's would be in memory. Measured
    /// on this project's VM (dbbench, 4 KiB values): readrandom after the
    /// fills 2.1-2.4x faster and readseq 2.0-2.2x, the fills within
    /// noise; readwhilewriting's readers ~1.5x faster, its writer ~0.8x;
    /// what runs right after a pause shares the machine with the
    /// read-back. Default true.
    pub warm_written_values: bool,
    /// For a follower (`Db::open_follower`): catch up with the writer
    /// this often on a thread of its own (`ReadOnlyDb::catch_up`). Other
    /// handles ignore it. Default `None`: only explicit catch-ups.
    pub follow_every: Option<std::time::Duration>,
    /// Run compactions in a background thread (default true). When false,
    /// only `Db::compact` compacts: for tests that want a fixed shape.
    pub background_compaction: bool,
    /// Deliberately broken behaviour, for tests that show the crash and
    /// corruption checkers catch a broken engine. Only under the `testing`
    /// feature; never set outside tests.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub sabotage: Sabotage,
}

/// Switches that break the engine's promises on purpose, so a test can
/// prove its checker notices (tests/crash_states.rs). All off by default.
/// Only under the `testing` feature: a default build reads every switch as
/// off (`sabotaged!`), so none of them costs a check on a hot path.
#[cfg(feature = "testing")]
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Sabotage {
    /// Write each op of a batch as its own journal record, so a torn tail
    /// can keep part of a batch (breaks atomicity).
    pub split_batches: bool,
    /// Acknowledge synced writes without syncing the journal.
    pub skip_journal_sync: bool,
    /// Create new journals and tables without syncing the directory.
    pub skip_dir_sync: bool,
    /// On replay, skip damaged journal records and continue with any
    /// intact record of a higher seqno (leaves holes instead of cutting a
    /// suffix).
    pub replay_past_damage: bool,
    /// After open, hand out seqnos from the manifest's last seqno, ignoring
    /// the journal writes just replayed (new writes then sort below them).
    pub stale_seqno_after_open: bool,
    /// Commit transactions without their conflict checks.
    pub skip_conflict_checks: bool,
}

/// Whether the `Sabotage` switch `$switch` of the options `$opts` is on:
/// its value under the `testing` feature, `false` in every other build.
macro_rules! sabotaged {
    ($opts:expr, $switch:ident) => {{
        #[cfg(feature = "testing")]
        let on = $opts.sabotage.$switch;
        #[cfg(not(feature = "testing"))]
        let on = {
            let _ = &$opts;
            false
        };
        on
    }};
}
pub(crate) use sabotaged;

/// How tables' data blocks and moved separated values are compressed
/// (`Options::compression`, `KeyspaceOptions::compression`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// Stored as they are.
    #[default]
    None,
    /// LZ4 (block format): fast, about 2:1 on text-like data.
    Lz4,
    /// Zstandard at the given level (1..=22): smaller, slower to write.
    Zstd(i32),
}

impl Default for Options {
    fn default() -> Self {
        Options::with_memory_budget(256 << 20)
    }
}

/// Largest `Options::value_partitions`.
pub const VALUE_PARTITIONS_MAX: usize = 1024;

/// Default `Options::value_separation_min`.
pub const VALUE_SEPARATION_MIN_DEFAULT: usize = 1024;

impl Options {
    /// Options whose memtables and block cache together stay within
    /// `bytes`: a quarter per memtable (one active, up to two sealed would
    /// be three quarters at worst, which is why the cache gets the
    /// remaining quarter of its own, and the two sealed memtables' room
    /// while they are not sealed: three quarters while nothing waits
    /// for a flush, `block_cache_borrows_memtable_room`). Table indexes
    /// and filters are held by open tables on top of this;
    /// `open_tables_max` bounds them.
    pub fn with_memory_budget(bytes: usize) -> Self {
        let memtable = (bytes / 4).max(64 << 10);
        Options {
            fs: Arc::new(PosixFs),
            create_if_missing: true,
            error_if_exists: false,
            comparator_name: None,
            memtable_bytes: memtable,
            memtables_sealed_max: 2,
            block_cache_bytes: bytes / 4,
            block_cache_borrows_memtable_room: true,
            open_tables_max: 1000,
            block_bytes: 4096,
            block_restart_interval: 4,
            filter: true,
            filter_bits: 8,
            compression: Compression::None,
            table_bytes: 32 << 20,
            l0_compaction_trigger: 4,
            l0_compaction_trigger_new_keys: 16,
            l0_slowdown_trigger: 8,
            l0_stop_trigger: 12,
            level1_bytes: 256 << 20,
            level_multiplier: 10,
            journal_bytes: 128 << 20,
            value_separation_min: VALUE_SEPARATION_MIN_DEFAULT,
            value_partitions: 32,
            value_gc_live_ratio: 0.5,
            value_gc_bytes_per_compaction: 64 << 20,
            value_gc_pace: 1.0,
            settle_after_idle: Some(std::time::Duration::from_secs(5)),
            settle_for_scans: 1.0,
            value_reads: ValueReads::Auto,
            map_values: false,
            journal_prewrite: true,
            journal_direct: true,
            journal_ring_bytes: 16 << 20,
            stage_streams: None,
            journal_recycle: true,
            warm_written_values: true,
            follow_every: None,
            background_compaction: true,
            #[cfg(feature = "testing")]
            sabotage: Sabotage::default(),
        }
    }

    /// Checks relations between options; `InvalidArgument` names the first
    /// that does not hold.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |s: &str| Err(crate::Error::InvalidArgument(s.to_owned()));
        if self.memtable_bytes == 0 {
            return bad("memtable_bytes must be > 0");
        }
        if let Some(name) = &self.comparator_name
            && !(1..=crate::format::manifest::COMPARATOR_NAME_MAX).contains(&name.len())
        {
            return bad("comparator_name must be 1 to 255 bytes");
        }
        if !(0.0..=1.0).contains(&self.value_gc_live_ratio) {
            return bad("value_gc_live_ratio must be in 0.0..=1.0");
        }
        if !(self.value_gc_pace >= 0.0 && self.value_gc_pace.is_finite()) {
            return bad("value_gc_pace must be finite and at least 0.0");
        }
        if !crate::format::filter::FILTER_BITS.contains(&self.filter_bits) {
            return bad("filter_bits must be 8 or 16");
        }
        if self.value_partitions > VALUE_PARTITIONS_MAX {
            return bad("value_partitions must be at most 1024");
        }
        if self.journal_bytes == 0 {
            return bad("journal_bytes must be > 0");
        }
        let chunk = crate::limits::JOURNAL_CHUNK_BYTES;
        if !self.journal_ring_bytes.is_multiple_of(chunk)
            || !(2 * chunk..=1 << 30).contains(&self.journal_ring_bytes)
        {
            return bad("journal_ring_bytes must be a multiple of 1 MiB in 2 MiB ..= 1 GiB");
        }
        if self.memtables_sealed_max == 0 {
            return bad("memtables_sealed_max must be >= 1");
        }
        if let Compression::Zstd(level) = self.compression
            && !(1..=22).contains(&level)
        {
            return bad("a Zstandard compression level must be in 1..=22");
        }
        if self.block_bytes < 64 || self.block_bytes > (64 << 20) {
            return bad("block_bytes must be in 64 B ..= 64 MiB");
        }
        if self.block_restart_interval == 0 || self.block_restart_interval > 64 {
            // Readers bound how far a block may expand when decoded by this
            // (format::block::DECODE_GROWTH_MAX).
            return bad("block_restart_interval must be in 1..=64");
        }
        if self.open_tables_max == 0 {
            return bad("open_tables_max must be >= 1");
        }
        if self.table_bytes == 0 || self.level1_bytes == 0 || self.level_multiplier < 2 {
            return bad("table_bytes and level1_bytes must be > 0, level_multiplier >= 2");
        }
        if !(self.l0_compaction_trigger >= 1
            && self.l0_compaction_trigger <= self.l0_slowdown_trigger
            && self.l0_slowdown_trigger < self.l0_stop_trigger)
        {
            return bad("need 1 <= l0_compaction_trigger <= l0_slowdown_trigger < l0_stop_trigger");
        }
        if self.l0_compaction_trigger_new_keys < self.l0_compaction_trigger {
            return bad("need l0_compaction_trigger <= l0_compaction_trigger_new_keys");
        }
        Ok(())
    }
}

/// Options for one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// `true`: the call returns after the write is durable on the device
    /// (survives power loss). `false`: it survives a crash of the process,
    /// not of the machine.
    pub sync: bool,
}

impl WriteOptions {
    /// Options for a synced write.
    pub fn synced() -> Self {
        WriteOptions { sync: true }
    }
}

#[cfg(test)]
mod tests {
    use super::misorders;

    fn sign(o: std::cmp::Ordering) -> Result<i64, ()> {
        Ok(o as i64)
    }

    #[test]
    fn only_bytewise_orders_pass_the_probe() {
        assert_eq!(misorders(|a, b| sign(a.cmp(b))), Ok(None));
        // memcmp's magnitudes are not signs: any negative is "less".
        assert_eq!(misorders(|a, b| sign(a.cmp(b)).map(|s| s * 7)), Ok(None));
        let reverse = misorders(|a, b| sign(b.cmp(a))).expect("no error");
        assert!(reverse.is_some());
        let folded = |k: &[u8]| k.to_ascii_lowercase();
        let (a, b, _) = misorders(|a, b| sign(folded(a).cmp(&folded(b))))
            .expect("no error")
            .expect("case-insensitive order differs");
        assert_eq!(a.to_ascii_lowercase(), b.to_ascii_lowercase());
        let by_length = misorders(|a, b| sign(a.len().cmp(&b.len()).then(a.cmp(b))));
        assert!(by_length.expect("no error").is_some());
        assert_eq!(misorders(|_, _| Err::<i64, _>("boom")), Err("boom"));
    }
}
