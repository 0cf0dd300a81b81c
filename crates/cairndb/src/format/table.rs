//! Sorted tables (docs/format.md §Tables): writer, reader and cursors.
//!
//! Owns: the file layout of a table. A table is written once, front to
//! back, by [`TableWriter`] and never modified:
//!
//! ```text
//! data block 0 | trailer | ... | data block n-1 | trailer
//! filter block | trailer | index block | trailer | properties block | trailer
//! footer (64 bytes)
//! ```
//!
//! Every block is followed by a 5-byte trailer: a type byte (0 = stored
//! as is; reserved for compression) and the masked crc32c of the block bytes
//! followed by the type byte. The footer holds the handles of the filter,
//! index and properties blocks, the format version, its own crc and the
//! magic `CAIRNTB1`.
//!
//! Invariants kept by the reader: the footer, properties, filter and index
//! are verified when [`Table::open`] returns `Ok`; every data block handle
//! was checked to lie inside the data area, back to back from offset 0. A
//! data block is checksummed each time it is read from the file (a block
//! cache hit was checksummed when it was inserted). Any mismatch is
//! `Error::Corruption` naming the file and the offset of the damaged block;
//! no decoder panics on bad bytes and nothing is guessed.
//!
//! Sharing: a [`Table`] is immutable after open and `Send + Sync`; wrap it
//! in an `Arc` to create cursors. A [`TableCursor`] owns an `Arc<Table>`
//! and its current block and is `Send`. [`TableWriter`] is used by one
//! thread.
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)]

use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::format::block::{Block, BlockBuilder, BlockIter, Decoded, KeyWords, Malformed};
use crate::format::coding::{Reader, crc2, put_bytes, put_varint};
use crate::format::compress::{self, BLOCK_TYPE_LZ4, BLOCK_TYPE_ZSTD};
use crate::format::filter::{self, FilterKind, TableFilter};
use crate::format::key::{self, TAG_LEN};
use crate::format::manifest::KeyspaceRecord;
use crate::io::{FileRead, FileWrite};
use crate::limits::{BLOCK_LEN_MAX, SEQNO_MAX};
use crate::options::Compression;
use std::cmp::Ordering;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Format version written in the footer and the properties block.
/// Version 2 tables may hold entries of kind 2 (value pointers); version 1
/// tables never do and are read as they are. Version 3 properties name
/// the database and the file number the table was written as (fields 7
/// and 8), so a table under a name it was not written as is found out.
/// Version 4 data blocks may be compressed (block types 1 and 2,
/// `format/compress.rs`); its other bytes are as in version 3. Version 5
/// properties name the keyspace the table belongs to, with its name and
/// options (fields 9 to 11), so a lost manifest can be rebuilt from the
/// tables (`repair`).
pub const TABLE_VERSION: u32 = 5;
/// First table version whose properties name their keyspace.
pub const TABLE_VERSION_KEYSPACED: u32 = 5;
/// First table version whose properties name their owner.
pub const TABLE_VERSION_OWNED: u32 = 3;
/// Oldest table version this build reads.
pub const TABLE_VERSION_MIN: u32 = 1;
/// Last 8 bytes of every table file.
pub const TABLE_MAGIC: [u8; 8] = *b"CAIRNTB1";
/// Length of the footer.
pub const FOOTER_LEN: usize = 64;
/// Length of the trailer after every block.
pub const TRAILER_LEN: usize = 5;
pub use super::compress::BLOCK_TYPE_RAW;

/// How a table is written.
#[derive(Debug, Clone)]
pub struct TableOptions {
    /// Target size of a data block before its trailer, in bytes.
    pub block_size: usize,
    /// Entries between restart points in data blocks.
    pub restart_interval: usize,
    /// Whether to build a key filter.
    pub filter: bool,
    /// Bits of the filter's fingerprints (`filter::FILTER_BITS`).
    pub filter_bits: u8,
    /// How data blocks are compressed (`format/compress.rs`).
    pub compression: Compression,
    /// The database's identity, written into every table with its number
    /// (`TableWriter::owned_by`); 0 outside a database (unit tests).
    pub db_id: u64,
    /// The keyspace the table belongs to, written into its properties
    /// (fields 9 to 11); `None` for the default keyspace.
    pub keyspace: Option<Arc<KeyspaceRecord>>,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_size: 4096,
            restart_interval: 4,
            filter: true,
            filter_bits: 8,
            compression: Compression::None,
            db_id: 0,
            keyspace: None,
        }
    }
}

/// What a finished table holds.
#[derive(Debug, Clone)]
pub struct TableSummary {
    pub file_size: u64,
    pub entries: u64,
    /// Smallest internal key (empty for an empty table).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty for an empty table).
    pub largest: Vec<u8>,
}

/// Location of a block: offset in the file and size without the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockHandle {
    offset: u64,
    size: u64,
}

impl BlockHandle {
    /// Offset just past the block's trailer (saturating: only called on
    /// handles already validated or written by us).
    fn end(&self) -> u64 {
        self.offset
            .saturating_add(self.size)
            .saturating_add(TRAILER_LEN as u64)
    }
}

/// Writes a table. See the module docs for the layout.
pub struct TableWriter {
    file: Box<dyn FileWrite>,
    path: PathBuf,
    block_size: usize,
    filter: bool,
    filter_bits: u8,
    compression: Compression,
    /// Scratch for a data block's compressed bytes.
    packed: Vec<u8>,
    offset: u64,
    data: BlockBuilder,
    index: BlockBuilder,
    hashes: Vec<u64>,
    last_hash: Option<u64>,
    smallest: Vec<u8>,
    last_key: Vec<u8>,
    entries: u64,
    data_blocks: u64,
    failed: bool,
    /// (database identity, file number) written into the properties.
    owner: (u64, u64),
    /// The keyspace written into the properties (`None`: the default).
    keyspace: Option<Arc<KeyspaceRecord>>,
    /// The cache each data block goes into as it is written, and the
    /// table's id there (`caching`).
    cache: Option<(Arc<BlockCache>, u64)>,
}

impl TableWriter {
    /// A writer appending to `file` (expected empty) at `path` (used in
    /// error messages only).
    pub fn new(file: Box<dyn FileWrite>, path: PathBuf, opts: &TableOptions) -> Self {
        let offset = file.len();
        debug_assert_eq!(offset, 0, "a table is written into an empty file");
        TableWriter {
            file,
            path,
            block_size: opts.block_size.max(1),
            filter: opts.filter,
            filter_bits: opts.filter_bits,
            compression: opts.compression,
            packed: Vec::new(),
            offset,
            data: BlockBuilder::new(opts.restart_interval),
            index: BlockBuilder::new(1),
            hashes: Vec::new(),
            last_hash: None,
            smallest: Vec::new(),
            last_key: Vec::new(),
            entries: 0,
            data_blocks: 0,
            failed: false,
            owner: (0, 0),
            keyspace: opts.keyspace.clone(),
            cache: None,
        }
    }

    /// Puts each data block into `cache` as it is written, as the block
    /// of table `id` (its file number, as `Table::open` is given) a read
    /// would insert: the bytes it wrote, so no checksum needs checking.
    pub fn caching(mut self, cache: Arc<BlockCache>, id: u64) -> Self {
        self.cache = Some((cache, id));
        self
    }

    /// Names the database (its identity, `Inner::db_id`) and the file
    /// number this table is written as, recorded in its properties and
    /// checked against the manifest when it is opened. Without it both are
    /// written as 0, which no database has.
    pub fn owned_by(mut self, db_id: u64, number: u64) -> Self {
        self.owner = (db_id, number);
        self
    }

    /// Adds an entry. `ikey` is an encoded internal key strictly greater
    /// (in `key::compare` order) than the previous one. Errors are `Io`;
    /// after one, the writer refuses further calls and the file is garbage.
    /// Keys out of order (or shorter than a tag) are refused with
    /// `Corruption`: they can only come from an input table whose blocks
    /// pass their checksums but break the format (a foreign writer or a
    /// bug), and writing them on would spread the damage.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        self.check_usable()?;
        let in_order = self.entries == 0 || key::compare(&self.last_key, ikey) == Ordering::Less;
        if ikey.len() < TAG_LEN || !in_order {
            self.failed = true;
            return Err(Error::corruption(
                &self.path,
                0,
                "input keys out of order or malformed: an input table breaks the format",
            ));
        }
        if self.entries == 0 {
            self.smallest = ikey.to_vec();
        }
        if self.filter {
            let h = filter::hash_key(key::user_key(ikey));
            if self.last_hash != Some(h) {
                self.hashes.push(h);
                self.last_hash = Some(h);
            }
        }
        self.data.add(ikey, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.entries += 1;
        if self.data.estimated_size() >= self.block_size {
            self.flush_data()?;
        }
        Ok(())
    }

    /// Bytes written so far plus the pending data block.
    pub fn estimated_size(&self) -> u64 {
        let pending = if self.data.is_empty() {
            0
        } else {
            self.data.estimated_size() + TRAILER_LEN
        };
        self.offset + pending as u64
    }

    /// Entries added so far.
    #[cfg(test)]
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Writes the last data block, the filter, index and properties blocks
    /// and the footer, then syncs the file. Errors are `Io`.
    pub fn finish(mut self) -> Result<TableSummary> {
        self.check_usable()?;
        self.flush_data()?;
        // 1. filter block
        let filter_block = if self.filter {
            filter::build(&mut self.hashes, self.filter_bits)
        } else {
            filter::build_none()
        };
        let filter_kind = filter_block
            .first()
            .copied()
            .unwrap_or(FilterKind::None as u8);
        let filter_h = self.write_block(&filter_block)?;
        // 2. index block
        let index_block = self.index.finish();
        let index_h = self.write_block(&index_block)?;
        // 3. properties block
        let largest = if self.entries == 0 {
            Vec::new()
        } else {
            std::mem::take(&mut self.last_key)
        };
        let props = Properties {
            entries: self.entries,
            data_blocks: self.data_blocks,
            filter_kind,
            smallest: std::mem::take(&mut self.smallest),
            largest,
            owner: Some(self.owner),
            keyspace: Some(match &self.keyspace {
                Some(k) => TableKeyspace {
                    id: k.id,
                    name: k.name.clone(),
                    options: k.options.encode(),
                },
                None => TableKeyspace::default(),
            }),
        };
        let props_h = self.write_block(&props.encode())?;
        // 4. footer
        let footer = encode_footer(index_h, filter_h, props_h);
        self.append(&footer)?;
        if let Err(e) = self.file.sync() {
            self.failed = true;
            return Err(Error::io(
                format!("syncing table {}", self.path.display()),
                e,
            ));
        }
        Ok(TableSummary {
            file_size: self.offset,
            entries: props.entries,
            smallest: props.smallest,
            largest: props.largest,
        })
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            return Err(Error::io(
                format!("writing table {}", self.path.display()),
                std::io::Error::other("an earlier write to this table failed"),
            ));
        }
        Ok(())
    }

    fn flush_data(&mut self) -> Result<()> {
        if self.data.is_empty() {
            return Ok(());
        }
        let bytes = self.data.finish();
        let mut packed = std::mem::take(&mut self.packed);
        let ty = compress::compress(self.compression, &bytes, &mut packed);
        let h = if ty == BLOCK_TYPE_RAW {
            self.write_block(&bytes)
        } else {
            self.write_typed_block(&packed, ty)
        };
        self.packed = packed;
        let h = h?;
        if let Some((cache, id)) = &self.cache {
            // The builder's own block: refused only by a bug here.
            let block = Block::new(bytes.into()).and_then(|b| b.with_hints(key::user_key));
            debug_assert!(block.is_ok(), "a built block fails to decode");
            if let Ok(block) = block {
                cache.insert(*id, h.offset, block);
            }
        }
        let mut handle = Vec::with_capacity(20);
        put_varint(&mut handle, h.offset);
        put_varint(&mut handle, h.size);
        self.index.add(&self.last_key, &handle);
        self.data_blocks += 1;
        Ok(())
    }

    fn write_block(&mut self, contents: &[u8]) -> Result<BlockHandle> {
        self.write_typed_block(contents, BLOCK_TYPE_RAW)
    }

    /// Appends `contents` with a trailer naming its type `block_type`.
    fn write_typed_block(&mut self, contents: &[u8], block_type: u8) -> Result<BlockHandle> {
        assert!(
            contents.len() <= BLOCK_LEN_MAX,
            "block exceeds BLOCK_LEN_MAX"
        );
        let handle = BlockHandle {
            offset: self.offset,
            size: contents.len() as u64,
        };
        let crc = crc2(contents, &[block_type]);
        let mut trailer = [0u8; TRAILER_LEN];
        let (ty, crc_bytes) = trailer.split_at_mut(1);
        ty.copy_from_slice(&[block_type]);
        crc_bytes.copy_from_slice(&crc.to_le_bytes());
        self.append(contents)?;
        self.append(&trailer)?;
        Ok(handle)
    }

    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        if let Err(e) = self.file.append(bytes) {
            self.failed = true;
            return Err(Error::io(
                format!("writing table {}", self.path.display()),
                e,
            ));
        }
        self.offset += bytes.len() as u64;
        Ok(())
    }
}

fn encode_footer(index: BlockHandle, filter: BlockHandle, props: BlockHandle) -> Vec<u8> {
    let mut f = Vec::with_capacity(FOOTER_LEN);
    for h in [index, filter, props] {
        f.extend_from_slice(&h.offset.to_le_bytes()); // 1-6. handles
        f.extend_from_slice(&h.size.to_le_bytes());
    }
    f.extend_from_slice(&TABLE_VERSION.to_le_bytes()); // 7. version
    let crc = crate::format::coding::crc(&f);
    f.extend_from_slice(&crc.to_le_bytes()); // 8. footer crc over 0..52
    f.extend_from_slice(&TABLE_MAGIC); // 9. magic
    debug_assert_eq!(f.len(), FOOTER_LEN);
    f
}

/// The properties block (docs/format.md §Tables §Properties block).
#[derive(Debug, Clone)]
struct Properties {
    entries: u64,
    data_blocks: u64,
    filter_kind: u8,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    /// (database identity, file number); `None` in tables older than
    /// `TABLE_VERSION_OWNED`.
    owner: Option<(u64, u64)>,
    /// The keyspace; `None` in tables older than `TABLE_VERSION_KEYSPACED`.
    keyspace: Option<TableKeyspace>,
}

/// The keyspace a table of version 5 names (properties fields 9 to 11):
/// id 0 with an empty name and options for the default keyspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableKeyspace {
    pub id: u32,
    pub name: String,
    /// The keyspace's options as manifest tag 11 encodes them
    /// (`KeyspaceOptions::encode`).
    pub options: Vec<u8>,
}

impl Properties {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, u64::from(TABLE_VERSION)); // 1. version
        put_varint(&mut out, self.entries); // 2. entries
        put_varint(&mut out, self.data_blocks); // 3. data blocks
        out.push(self.filter_kind); // 4. filter kind
        put_bytes(&mut out, &self.smallest); // 5. smallest
        put_bytes(&mut out, &self.largest); // 6. largest
        let (db_id, number) = self.owner.unwrap_or_default();
        put_varint(&mut out, db_id); // 7. database identity
        put_varint(&mut out, number); // 8. file number
        let ks = self.keyspace.clone().unwrap_or_default();
        put_varint(&mut out, u64::from(ks.id)); // 9. keyspace id
        put_bytes(&mut out, ks.name.as_bytes()); // 10. keyspace name
        put_bytes(&mut out, &ks.options); // 11. keyspace options
        out
    }

    fn decode(b: &[u8]) -> Result<Properties, String> {
        let mut r = Reader::new(b);
        let trunc = || "properties truncated".to_string();
        let version = r.varint().ok_or_else(trunc)?;
        if !(u64::from(TABLE_VERSION_MIN)..=u64::from(TABLE_VERSION)).contains(&version) {
            return Err(format!("properties of unsupported version {version}"));
        }
        let entries = r.varint().ok_or_else(trunc)?;
        let data_blocks = r.varint().ok_or_else(trunc)?;
        let filter_kind = r.u8().ok_or_else(trunc)?;
        let smallest = r.len_prefixed().ok_or_else(trunc)?.to_vec();
        let largest = r.len_prefixed().ok_or_else(trunc)?.to_vec();
        let owner = if version >= u64::from(TABLE_VERSION_OWNED) {
            Some((r.varint().ok_or_else(trunc)?, r.varint().ok_or_else(trunc)?))
        } else {
            None
        };
        let keyspace = if version >= u64::from(TABLE_VERSION_KEYSPACED) {
            let id = r.varint().ok_or_else(trunc)?;
            let id = u32::try_from(id).map_err(|_| format!("bad keyspace id {id}"))?;
            let name = r.len_prefixed().ok_or_else(trunc)?;
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| "keyspace name is not UTF-8".to_string())?;
            let options = r.len_prefixed().ok_or_else(trunc)?.to_vec();
            if (id == 0) != name.is_empty() || (id == 0 && !options.is_empty()) {
                return Err(format!("keyspace {id} named {name:?}: inconsistent"));
            }
            Some(TableKeyspace { id, name, options })
        } else {
            None
        };
        if !r.is_empty() {
            return Err("trailing bytes in properties".into());
        }
        if FilterKind::from_u8(filter_kind).is_none() {
            return Err(format!("unknown filter kind {filter_kind}"));
        }
        if entries == 0 {
            if data_blocks != 0 || !smallest.is_empty() || !largest.is_empty() {
                return Err("empty table with data blocks or keys".into());
            }
        } else if data_blocks == 0
            || data_blocks > entries
            || smallest.len() < TAG_LEN
            || largest.len() < TAG_LEN
            || key::compare(&smallest, &largest) == Ordering::Greater
        {
            return Err("inconsistent properties".into());
        }
        Ok(Properties {
            entries,
            data_blocks,
            filter_kind,
            smallest,
            largest,
            owner,
            keyspace,
        })
    }
}

/// One data block as listed by the index: its last key lives in
/// `Table::index_keys[key]`.
#[derive(Debug, Clone)]
struct IndexEntry {
    key: Range<usize>,
    handle: BlockHandle,
}

/// An open table. Holds the index and filter in memory; data blocks are
/// read on demand (through the block cache when one is given).
pub struct Table {
    file: Arc<dyn FileRead>,
    path: PathBuf,
    id: u64,
    cache: Option<Arc<BlockCache>>,
    index_keys: Vec<u8>,
    index: Vec<IndexEntry>,
    /// The index keys' user parts packed for searching (in memory only):
    /// `find_block` searches these words first, so a lookup touches one
    /// small array instead of an entry and its key at each step.
    index_words: KeyWords,
    filter: TableFilter,
    props: Properties,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path)
            .field("id", &self.id)
            .field("entries", &self.props.entries)
            .field("data_blocks", &self.index.len())
            .finish()
    }
}

/// Reads `handle`'s block and trailer, checks the handle lies below
/// `limit`, verifies the crc and type byte, and returns the block bytes.
fn read_block_bytes(
    file: &dyn FileRead,
    path: &Path,
    handle: BlockHandle,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>> {
    let corrupt = |detail: String| Error::corruption(path, handle.offset, detail);
    let end = handle
        .offset
        .checked_add(handle.size)
        .and_then(|e| e.checked_add(TRAILER_LEN as u64));
    match end {
        Some(end) if end <= limit && handle.size <= BLOCK_LEN_MAX as u64 => {}
        _ => {
            return Err(corrupt(format!(
                "{what} block handle (offset {}, size {}) lies outside its area (ends by {limit})",
                handle.offset, handle.size
            )));
        }
    }
    let size =
        usize::try_from(handle.size).map_err(|_| corrupt(format!("{what} block too large")))?;
    let mut buf = vec![0u8; size + TRAILER_LEN];
    // A checksum mismatch is read once more (`io::read_checked`).
    let ty = crate::io::read_checked(|| {
        read_exact(file, path, &mut buf, handle, what)?;
        Ok(check_block(&buf, size, what, &corrupt))
    })??;
    buf.truncate(size);
    if ty == BLOCK_TYPE_RAW {
        return Ok(buf);
    }
    compress::decompress(ty, &buf).map_err(|d| corrupt(format!("{what} block: {d}")))
}

/// Reads the block and trailer `handle` names into `buf`.
fn read_exact(
    file: &dyn FileRead,
    path: &Path,
    buf: &mut [u8],
    handle: BlockHandle,
    what: &str,
) -> Result<()> {
    let corrupt = |detail: String| Error::corruption(path, handle.offset, detail);
    file.read_exact_at(buf, handle.offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            corrupt(format!("{what} block extends past the end of the file"))
        } else {
            Error::io(
                format!(
                    "reading {what} block of table {} at offset {}",
                    path.display(),
                    handle.offset
                ),
                e,
            )
        }
    })
}

/// Checks the trailer of a block read into `buf` (`size` body bytes);
/// returns its type byte: raw, or (data blocks only) a compression codec.
fn check_block(
    buf: &[u8],
    size: usize,
    what: &str,
    corrupt: &dyn Fn(String) -> Error,
) -> Result<u8> {
    let (body, trailer) = buf.split_at(size);
    let mut r = Reader::new(trailer);
    let ty = r
        .u8()
        .ok_or_else(|| corrupt("block trailer truncated".into()))?;
    let stored = r
        .u32_le()
        .ok_or_else(|| corrupt("block trailer truncated".into()))?;
    if crc2(body, &[ty]) != stored {
        return Err(corrupt(format!("{what} block checksum mismatch")));
    }
    let compressed = ty == BLOCK_TYPE_LZ4 || ty == BLOCK_TYPE_ZSTD;
    if ty != BLOCK_TYPE_RAW && !(compressed && what == "data") {
        return Err(corrupt(format!("{what} block has unknown type {ty}")));
    }
    Ok(ty)
}

fn read_handle(r: &mut Reader<'_>) -> Option<BlockHandle> {
    Some(BlockHandle {
        offset: r.u64_le()?,
        size: r.u64_le()?,
    })
}

impl Table {
    /// Opens a table: reads and verifies the footer, properties, filter and
    /// index. `id` namespaces the table's blocks in `cache` (use the file
    /// number). Errors: `Corruption` naming the problem (too short, not a
    /// CairnDB table, unsupported version, checksum mismatch, inconsistent
    /// metadata) or `Io` if a read failed.
    pub fn open(
        file: Arc<dyn FileRead>,
        path: PathBuf,
        id: u64,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Table> {
        let len = file.len();
        if len < FOOTER_LEN as u64 {
            return Err(Error::corruption(
                &path,
                0,
                format!("not a CairnDB table: file too short ({len} bytes)"),
            ));
        }
        let footer_at = len - FOOTER_LEN as u64;
        let mut footer = [0u8; FOOTER_LEN];
        // Read twice if the checksum fails: a flip in transit is not damage.
        for _ in 0..2 {
            file.read_exact_at(&mut footer, footer_at)
                .map_err(|e| Error::io(format!("reading footer of table {}", path.display()), e))?;
            let crc = footer.get(52..56).and_then(|b| b.try_into().ok());
            if crc.map(u32::from_le_bytes) == Some(crate::format::coding::crc(&footer[..52]))
                && footer.get(56..) == Some(&TABLE_MAGIC[..])
            {
                break;
            }
        }
        let fcorrupt = |detail: String| Error::corruption(&path, footer_at, detail);
        let mut r = Reader::new(&footer);
        let handles = [
            read_handle(&mut r),
            read_handle(&mut r),
            read_handle(&mut r),
        ];
        let version = r.u32_le();
        let stored_crc = r.u32_le();
        let magic = r.bytes(8);
        let (
            [Some(index_h), Some(filter_h), Some(props_h)],
            Some(version),
            Some(stored_crc),
            Some(magic),
        ) = (handles, version, stored_crc, magic)
        else {
            return Err(fcorrupt("footer truncated".into()));
        };
        if magic != TABLE_MAGIC {
            return Err(fcorrupt("not a CairnDB table (bad magic number)".into()));
        }
        if !(TABLE_VERSION_MIN..=TABLE_VERSION).contains(&version) {
            return Err(fcorrupt(format!("unsupported table version {version}")));
        }
        let covered = footer
            .get(..52)
            .ok_or_else(|| fcorrupt("footer truncated".into()))?;
        if crate::format::coding::crc(covered) != stored_crc {
            return Err(fcorrupt("footer checksum mismatch".into()));
        }
        // Layout: data blocks, filter, index, properties, footer, back to
        // back. Checking the chain bounds every later read.
        if filter_h.end() != index_h.offset
            || index_h.end() != props_h.offset
            || props_h.end() != footer_at
        {
            return Err(fcorrupt(
                "footer block handles do not describe the table layout".into(),
            ));
        }
        let data_end = filter_h.offset;

        let props_bytes = read_block_bytes(&*file, &path, props_h, footer_at, "properties")?;
        let props = Properties::decode(&props_bytes)
            .map_err(|d| Error::corruption(&path, props_h.offset, d))?;

        let filter_bytes = read_block_bytes(&*file, &path, filter_h, index_h.offset, "filter")?;
        let filter = TableFilter::decode(&filter_bytes)
            .map_err(|d| Error::corruption(&path, filter_h.offset, format!("filter block: {d}")))?;
        if filter.kind() as u8 != props.filter_kind {
            return Err(Error::corruption(
                &path,
                filter_h.offset,
                "filter kind differs from the properties",
            ));
        }

        let index_bytes = read_block_bytes(&*file, &path, index_h, props_h.offset, "index")?;
        let icorrupt =
            |d: &str| Error::corruption(&path, index_h.offset, format!("index block: {d}"));
        let index_block = Block::new(index_bytes.into()).map_err(icorrupt)?;
        let (index_keys, index) = decode_index(&index_block, data_end).map_err(icorrupt)?;
        if index.len() as u64 != props.data_blocks {
            return Err(icorrupt("entry count differs from the properties"));
        }
        let last = index.last().and_then(|e| index_keys.get(e.key.clone()));
        if last.unwrap_or_default() != props.largest.as_slice() {
            return Err(icorrupt("last key differs from the properties"));
        }
        let index_words = KeyWords::new(index.iter().map(|e| {
            index_keys
                .get(e.key.clone())
                .map(key::user_key)
                .unwrap_or_default()
        }));
        Ok(Table {
            file,
            path,
            id,
            cache,
            index_keys,
            index,
            index_words,
            filter,
            props,
        })
    }

    /// Checks that this is the table a manifest record describes: the
    /// database and file number it was written as (version 3 tables), its
    /// length, entry count and key range must be the record's. A valid
    /// table under a name the manifest gives another table (copied from
    /// another database, two tables swapped, an old file restored) fails
    /// here with `Corruption`, before any read or compaction trusts it.
    pub fn check_record(
        &self,
        db_id: u64,
        size: u64,
        entries: u64,
        smallest: &[u8],
        largest: &[u8],
    ) -> Result<()> {
        let len = self.file.len();
        let differs = if let Some((owner, number)) = self.props.owner
            && (owner, number) != (db_id, self.id)
        {
            if owner != db_id {
                format!(
                    "was written by another database (identity {owner:#x}, this one {db_id:#x})"
                )
            } else {
                format!("was written as table {number}")
            }
        } else if len != size {
            format!("is {len} bytes long, the manifest says {size}")
        } else if self.props.entries != entries {
            format!(
                "holds {} entries, the manifest says {entries}",
                self.props.entries
            )
        } else if self.props.smallest != smallest || self.props.largest != largest {
            "key range differs from the manifest's".to_string()
        } else {
            return Ok(());
        };
        Err(Error::corruption(
            &self.path,
            0,
            format!("not the table the manifest names: it {differs}"),
        ))
    }

    /// The database identity and file number the table was written as
    /// (properties fields 7 and 8), `None` before version 3.
    pub fn owner(&self) -> Option<(u64, u64)> {
        self.props.owner
    }

    /// The keyspace the table belongs to (properties fields 9 to 11),
    /// `None` before version 5.
    pub fn keyspace(&self) -> Option<&TableKeyspace> {
        self.props.keyspace.as_ref()
    }

    /// False only if the table certainly holds no entry for `user_key`.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.filter.may_contain(user_key)
    }

    /// The newest entry for `user_key` with seqno <= `snapshot`, as
    /// `(tag, value)`; a tombstone is returned as such (check
    /// `key::tag_kind`). Reads at most one data block.
    pub fn get(&self, user_key: &[u8], snapshot: u64) -> Result<Option<(u64, Vec<u8>)>> {
        if !self.may_contain(user_key) {
            return Ok(None);
        }
        let target = key::seek_key(user_key, snapshot.min(SEQNO_MAX));
        let idx = self.find_block(&target);
        if idx >= self.index.len() {
            return Ok(None);
        }
        let mut it = self.read_data_block(idx)?.iter_owned(key::compare);
        it.seek(&target).map_err(|m| self.block_error(idx, m))?;
        if !it.valid() {
            return Err(self.block_error(idx, "index key is past the block's last entry"));
        }
        let (uk, tag) = key::split(it.key())
            .ok_or_else(|| self.block_error(idx, "key shorter than its tag"))?;
        Ok((uk == user_key).then(|| (tag, it.value().to_vec())))
    }

    /// About where in the file the entries of `user_key` and greater
    /// begin: the offset of the first data block whose last key is at
    /// least `user_key`, or the end of the data blocks if there is none
    /// (LevelDB's `ApproximateOffsetOf`). Reads nothing: the index is in
    /// memory.
    pub fn approximate_offset_of(&self, user_key: &[u8]) -> u64 {
        let target = key::seek_key(user_key, SEQNO_MAX);
        match self.index.get(self.find_block(&target)) {
            Some(e) => e.handle.offset,
            None => self
                .index
                .last()
                .map_or(0, |e| e.handle.offset + e.handle.size),
        }
    }

    /// Number of entries.
    pub fn entries(&self) -> u64 {
        self.props.entries
    }

    /// Smallest internal key (empty for an empty table).
    pub fn smallest(&self) -> &[u8] {
        &self.props.smallest
    }

    /// Largest internal key (empty for an empty table).
    pub fn largest(&self) -> &[u8] {
        &self.props.largest
    }

    /// Heap bytes held by the index, filter and key bounds.
    pub fn memory_bytes(&self) -> usize {
        self.index_keys.capacity()
            + self.index.capacity() * std::mem::size_of::<IndexEntry>()
            + self.index_words.bytes()
            + self.filter.memory_bytes()
            + self.props.smallest.capacity()
            + self.props.largest.capacity()
    }

    /// A forward cursor: the first `advance()` yields the first entry with
    /// key >= `from` (the table's first entry if `None`). No IO happens
    /// until then.
    pub fn cursor_forward(self: &Arc<Self>, from: Option<&[u8]>) -> TableCursor {
        TableCursor::new(self.clone(), false, from)
    }

    /// A backward cursor: the first `advance()` yields the last entry with
    /// key <= `from` (the table's last entry if `None`), later ones earlier
    /// entries.
    pub fn cursor_backward(self: &Arc<Self>, from: Option<&[u8]>) -> TableCursor {
        TableCursor::new(self.clone(), true, from)
    }

    fn index_key(&self, e: &IndexEntry) -> &[u8] {
        self.index_keys.get(e.key.clone()).unwrap_or_default()
    }

    /// Index of the first data block whose last key is >= `target`
    /// (`index.len()` if none).
    fn find_block(&self, target: &[u8]) -> usize {
        let below = |e: &IndexEntry| key::compare(self.index_key(e), target) == Ordering::Less;
        match self.index_words.narrow(key::user_key(target)) {
            // Only the entries whose words tie with the target's need
            // their keys compared.
            Some(tied) => {
                let start = tied.start;
                start + self.index.get(tied).map_or(0, |t| t.partition_point(below))
            }
            // Outside the shared prefix: the words say nothing.
            None => self.index.partition_point(below),
        }
    }

    fn block_error(&self, idx: usize, detail: Malformed) -> Error {
        let offset = self.index.get(idx).map_or(0, |e| e.handle.offset);
        Error::corruption(&self.path, offset, format!("data block: {detail}"))
    }

    fn read_data_block(&self, idx: usize) -> Result<Block> {
        let handle = self
            .index
            .get(idx)
            .ok_or_else(|| Error::corruption(&self.path, 0, "data block index out of range"))?
            .handle;
        if let Some(cache) = &self.cache
            && let Some(b) = cache.get(self.id, handle.offset)
        {
            return Ok(b);
        }
        // Handles were validated at open against the data area; re-check
        // cheaply against the same bound.
        let limit = handle.end();
        let bytes = read_block_bytes(&*self.file, &self.path, handle, limit, "data")?;
        let block = Block::new(bytes.into())
            .and_then(|b| b.with_hints(key::user_key))
            .map_err(|m| self.block_error(idx, m))?;
        if let Some(cache) = &self.cache {
            cache.insert(self.id, handle.offset, block.clone());
        }
        Ok(block)
    }
}

/// Decodes the index block: keys are copied into one buffer; every handle
/// must follow the previous block directly (the first at 0) and the last
/// must end at `data_end`; keys must be internal keys in strictly
/// increasing order.
fn decode_index(block: &Block, data_end: u64) -> Result<(Vec<u8>, Vec<IndexEntry>), Malformed> {
    let mut keys: Vec<u8> = Vec::new();
    let mut entries: Vec<IndexEntry> = Vec::new();
    let mut it = block.iter(key::compare);
    it.seek_to_first()?;
    let mut next_offset = 0u64;
    while it.valid() {
        let k = it.key();
        if k.len() < TAG_LEN {
            return Err("key shorter than its tag");
        }
        if let Some(prev) = entries.last().and_then(|e| keys.get(e.key.clone()))
            && key::compare(prev, k) != Ordering::Less
        {
            return Err("keys not in increasing order");
        }
        let mut r = Reader::new(it.value());
        let offset = r.varint().ok_or("block handle truncated")?;
        let size = r.varint().ok_or("block handle truncated")?;
        if !r.is_empty() {
            return Err("trailing bytes after block handle");
        }
        let handle = BlockHandle { offset, size };
        let end = offset
            .checked_add(size)
            .and_then(|e| e.checked_add(TRAILER_LEN as u64))
            .ok_or("block handle overflows")?;
        if offset != next_offset || end > data_end || size > BLOCK_LEN_MAX as u64 {
            return Err("block handle does not follow the previous block");
        }
        next_offset = end;
        let start = keys.len();
        keys.extend_from_slice(k);
        entries.push(IndexEntry {
            key: start..keys.len(),
            handle,
        });
        it.next()?;
    }
    if next_offset != data_end {
        return Err("data blocks do not fill the data area");
    }
    keys.shrink_to_fit();
    entries.shrink_to_fit();
    Ok((keys, entries))
}

enum CursorState {
    Start(Option<Vec<u8>>),
    Active,
    Done,
    Failed(Error),
}

/// A cursor over one table, forward or backward. Owns what it reads.
pub struct TableCursor {
    table: Arc<Table>,
    backward: bool,
    state: CursorState,
    block_idx: usize,
    fwd: Option<BlockIter>,
    bwd_block: Option<Block>,
    bwd_entries: Decoded,
    bwd_pos: usize,
}

impl TableCursor {
    fn new(table: Arc<Table>, backward: bool, from: Option<&[u8]>) -> Self {
        TableCursor {
            table,
            backward,
            state: CursorState::Start(from.map(<[u8]>::to_vec)),
            block_idx: 0,
            fwd: None,
            bwd_block: None,
            bwd_entries: Vec::new(),
            bwd_pos: 0,
        }
    }

    /// Moves to the next entry in the cursor's direction. `Ok(false)` when
    /// exhausted, and on every later call. After an `Err`, every later call
    /// returns the same error again.
    pub fn advance(&mut self) -> Result<bool> {
        let r = match std::mem::replace(&mut self.state, CursorState::Active) {
            CursorState::Done => {
                self.state = CursorState::Done;
                return Ok(false);
            }
            CursorState::Failed(e) => {
                let again = e.duplicate();
                self.state = CursorState::Failed(e);
                return Err(again);
            }
            CursorState::Start(from) => {
                if self.backward {
                    self.start_backward(from.as_deref())
                } else {
                    self.start_forward(from.as_deref())
                }
            }
            CursorState::Active => {
                if self.backward {
                    self.step_backward()
                } else {
                    self.step_forward()
                }
            }
        };
        let r = r.and_then(|valid| {
            if valid && self.key().len() < TAG_LEN {
                return Err(self
                    .table
                    .block_error(self.block_idx, "key shorter than its tag"));
            }
            Ok(valid)
        });
        match r {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.release();
                self.state = CursorState::Done;
                Ok(false)
            }
            Err(e) => {
                self.release();
                self.state = CursorState::Failed(e.duplicate());
                Err(e)
            }
        }
    }

    /// Key of the current entry (an internal key); empty unless the last
    /// `advance()` returned `Ok(true)`.
    pub fn key(&self) -> &[u8] {
        if !matches!(self.state, CursorState::Active) {
            return &[];
        }
        if self.backward {
            self.bwd_entries
                .get(self.bwd_pos)
                .map(|e| e.0.as_slice())
                .unwrap_or_default()
        } else {
            self.fwd.as_ref().map(BlockIter::key).unwrap_or_default()
        }
    }

    /// Value of the current entry; empty unless the last `advance()`
    /// returned `Ok(true)`.
    pub fn value(&self) -> &[u8] {
        if !matches!(self.state, CursorState::Active) {
            return &[];
        }
        if self.backward {
            match (self.bwd_entries.get(self.bwd_pos), &self.bwd_block) {
                (Some(e), Some(b)) => b.data().get(e.1.clone()).unwrap_or_default(),
                _ => &[],
            }
        } else {
            self.fwd.as_ref().map(BlockIter::value).unwrap_or_default()
        }
    }

    fn release(&mut self) {
        self.fwd = None;
        self.bwd_block = None;
        self.bwd_entries = Vec::new();
    }

    fn start_forward(&mut self, from: Option<&[u8]>) -> Result<bool> {
        let idx = from.map_or(0, |f| self.table.find_block(f));
        self.load_forward(idx, from)
    }

    fn load_forward(&mut self, mut idx: usize, mut from: Option<&[u8]>) -> Result<bool> {
        while idx < self.table.index.len() {
            let mut it = self.table.read_data_block(idx)?.iter_owned(key::compare);
            match from {
                Some(f) => it.seek(f),
                None => it.seek_to_first(),
            }
            .map_err(|m| self.table.block_error(idx, m))?;
            if it.valid() {
                self.fwd = Some(it);
                self.block_idx = idx;
                return Ok(true);
            }
            from = None;
            idx += 1;
        }
        Ok(false)
    }

    fn step_forward(&mut self) -> Result<bool> {
        let Some(it) = self.fwd.as_mut() else {
            return Ok(false);
        };
        it.next()
            .map_err(|m| self.table.block_error(self.block_idx, m))?;
        if it.valid() {
            return Ok(true);
        }
        self.load_forward(self.block_idx + 1, None)
    }

    fn start_backward(&mut self, from: Option<&[u8]>) -> Result<bool> {
        let Some(last) = self.table.index.len().checked_sub(1) else {
            return Ok(false);
        };
        let idx = from.map_or(last, |f| self.table.find_block(f).min(last));
        self.load_backward(Some(idx), from)
    }

    fn load_backward(&mut self, mut idx: Option<usize>, mut from: Option<&[u8]>) -> Result<bool> {
        while let Some(i) = idx {
            let block = self.table.read_data_block(i)?;
            let entries = block
                .decode_all()
                .map_err(|m| self.table.block_error(i, m))?;
            let n = match from {
                Some(f) => {
                    entries.partition_point(|(k, _)| key::compare(k, f) != Ordering::Greater)
                }
                None => entries.len(),
            };
            if let Some(pos) = n.checked_sub(1) {
                self.bwd_block = Some(block);
                self.bwd_entries = entries;
                self.bwd_pos = pos;
                self.block_idx = i;
                return Ok(true);
            }
            from = None;
            idx = i.checked_sub(1);
        }
        Ok(false)
    }

    fn step_backward(&mut self) -> Result<bool> {
        if let Some(pos) = self.bwd_pos.checked_sub(1) {
            self.bwd_pos = pos;
            return Ok(true);
        }
        self.load_backward(self.block_idx.checked_sub(1), None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::format::key::{Kind, make_tag, tag_kind, tag_seqno};
    use crate::io::{Fs, MemFs};
    use std::path::Path;

    type Model = Vec<(Vec<u8>, Vec<u8>)>;

    /// `n_users` user keys with shared prefixes, 1-3 versions each, some
    /// tombstones, empty values and large values.
    fn model(n_users: usize) -> Model {
        let mut out = Vec::new();
        let mut seq = 1u64;
        for i in 0..n_users {
            let uk = format!("user/{:04}/{}", i / 10, i).into_bytes();
            for v in 0..(1 + i % 3) {
                seq += 1;
                let del = (i + v) % 11 == 0;
                let value = if del || i % 13 == 0 {
                    Vec::new()
                } else if i % 97 == 5 {
                    (0..20_000u32).map(|x| (x % 251) as u8).collect()
                } else {
                    format!("value-{i}-{v}").into_bytes()
                };
                let kind = if del { Kind::Delete } else { Kind::Put };
                out.push((key::encode(&uk, make_tag(seq, kind as u8)), value));
            }
        }
        out.sort_by(|a, b| key::compare(&a.0, &b.0));
        out
    }

    fn write(fs: &MemFs, path: &Path, m: &Model, opts: &TableOptions) -> TableSummary {
        let mut w = TableWriter::new(fs.create(path).unwrap(), path.to_path_buf(), opts);
        let mut last_est = 0;
        for (k, v) in m {
            w.add(k, v).unwrap();
            // A compressed block takes less room than its estimate did.
            assert!(opts.compression != Compression::None || w.estimated_size() >= last_est);
            last_est = w.estimated_size();
        }
        assert_eq!(w.entries(), m.len() as u64);
        let s = w.finish().unwrap();
        assert_eq!(Some(s.file_size), fs.file_len(path));
        s
    }

    fn open(fs: &MemFs, path: &Path, cache: Option<Arc<BlockCache>>) -> Result<Arc<Table>> {
        Table::open(fs.open(path).unwrap(), path.to_path_buf(), 7, cache).map(Arc::new)
    }

    fn collect(mut c: TableCursor) -> Result<Model> {
        let mut out = Vec::new();
        while c.advance()? {
            out.push((c.key().to_vec(), c.value().to_vec()));
        }
        assert!(!c.advance()?, "cursor stays exhausted");
        assert!(c.key().is_empty());
        Ok(out)
    }

    fn expected_get(m: &Model, uk: &[u8], snap: u64) -> Option<(u64, Vec<u8>)> {
        m.iter().find_map(|(k, v)| {
            let (u, tag) = key::split(k).unwrap();
            (u == uk && tag_seqno(tag) <= snap).then(|| (tag, v.clone()))
        })
    }

    fn options_matrix() -> Vec<TableOptions> {
        vec![
            TableOptions::default(),
            TableOptions {
                block_size: 64,
                restart_interval: 1,
                filter: false,
                filter_bits: 8,
                compression: Compression::Lz4,
                db_id: 0,
                keyspace: None,
            },
            TableOptions {
                block_size: 1000,
                restart_interval: 3,
                filter: true,
                filter_bits: 16,
                compression: Compression::Zstd(3),
                db_id: 0,
                keyspace: None,
            },
            TableOptions {
                compression: Compression::Lz4,
                ..TableOptions::default()
            },
        ]
    }

    #[test]
    fn table_round_trip_scans() {
        let m = model(1500);
        for opts in options_matrix() {
            let fs = MemFs::new();
            let path = Path::new("/t/000001.sst");
            let s = write(&fs, path, &m, &opts);
            assert_eq!(s.entries, m.len() as u64);
            assert_eq!(s.smallest, m[0].0);
            assert_eq!(s.largest, m.last().unwrap().0);
            let t = open(&fs, path, None).unwrap();
            assert_eq!(t.entries(), m.len() as u64);
            assert_eq!(t.smallest(), &m[0].0[..]);
            assert_eq!(t.largest(), &m.last().unwrap().0[..]);
            assert!(t.memory_bytes() > 0);
            assert_eq!(collect(t.cursor_forward(None)).unwrap(), m);
            let mut rev = m.clone();
            rev.reverse();
            assert_eq!(collect(t.cursor_backward(None)).unwrap(), rev);
        }
    }

    #[test]
    fn table_get_with_snapshots() {
        let m = model(800);
        for opts in options_matrix() {
            let fs = MemFs::new();
            let path = Path::new("/t/000002.sst");
            write(&fs, path, &m, &opts);
            let t = open(&fs, path, None).unwrap();
            let max_seq = m
                .iter()
                .map(|(k, _)| tag_seqno(key::split(k).unwrap().1))
                .max()
                .unwrap();
            let mut deletes = 0;
            for (k, _) in &m {
                let (uk, tag) = key::split(k).unwrap();
                let seq = tag_seqno(tag);
                for snap in [seq - 1, seq, seq + 1, max_seq, u64::MAX] {
                    let got = t.get(uk, snap).unwrap();
                    assert_eq!(got, expected_get(&m, uk, snap), "key {k:?} snap {snap}");
                    if let Some((tag, v)) = got
                        && tag_kind(tag) == Kind::Delete as u8
                    {
                        assert!(v.is_empty());
                        deletes += 1;
                    }
                }
                assert!(t.may_contain(uk));
            }
            assert!(deletes > 0);
            assert_eq!(t.get(b"absent", u64::MAX).unwrap(), None);
            assert_eq!(t.get(b"user/0000/0x", u64::MAX).unwrap(), None);
            assert_eq!(t.get(b"", u64::MAX).unwrap(), None);
            assert_eq!(t.get(b"zzzz", u64::MAX).unwrap(), None);
        }
    }

    /// `find_block` narrows its search with the packed windows; it must
    /// pick the block a plain search of the index keys picks, for keys with
    /// a long shared prefix, keys equal over whole windows, keys that are
    /// prefixes of others (zero padding), and targets outside the prefix.
    #[test]
    fn find_block_agrees_with_a_plain_search() {
        let mut users: Vec<Vec<u8>> = Vec::new();
        for i in 0..600u32 {
            // Shared prefix "tenant/", then windows that often tie.
            let mut k = b"tenant/".to_vec();
            k.extend_from_slice(&(i / 40).to_be_bytes());
            k.extend_from_slice(b"samebyte");
            k.extend_from_slice(&i.to_be_bytes()[..(i % 5) as usize]);
            users.push(k);
            let mut z = b"tenant/".to_vec();
            z.extend(std::iter::repeat_n(0u8, (i % 11) as usize));
            users.push(z);
        }
        users.sort();
        users.dedup();
        let mut m: Model = users
            .iter()
            .enumerate()
            .map(|(i, u)| {
                (
                    key::encode(u, make_tag(i as u64 + 1, Kind::Put as u8)),
                    vec![1],
                )
            })
            .collect();
        m.sort_by(|a, b| key::compare(&a.0, &b.0));
        let opts = TableOptions {
            block_size: 64,
            restart_interval: 1,
            filter: false,
            filter_bits: 8,
            compression: Compression::None,
            db_id: 0,
            keyspace: None,
        };
        let fs = MemFs::new();
        let path = Path::new("/t/000009.sst");
        write(&fs, path, &m, &opts);
        let t = open(&fs, path, None).unwrap();
        assert!(t.index.len() > 50, "{} blocks", t.index.len());
        assert!(t.index_words.prefix_len() >= b"tenant/".len());
        let plain = |target: &[u8]| {
            t.index
                .partition_point(|e| key::compare(t.index_key(e), target) == Ordering::Less)
        };
        let mut targets: Vec<Vec<u8>> = Vec::new();
        for u in &users {
            for snap in [0, 5, 300, SEQNO_MAX] {
                targets.push(key::seek_key(u, snap));
            }
            let mut longer = u.clone();
            longer.push(0);
            targets.push(key::seek_key(&longer, SEQNO_MAX));
            let mut shorter = u.clone();
            shorter.pop();
            targets.push(key::seek_key(&shorter, SEQNO_MAX));
        }
        for outside in [&b""[..], b"a", b"tenant", b"tenant/", b"tenanu", b"zzz"] {
            targets.push(key::seek_key(outside, SEQNO_MAX));
        }
        for target in &targets {
            assert_eq!(t.find_block(target), plain(target), "target {target:?}");
        }
        for u in &users {
            assert!(t.get(u, SEQNO_MAX).unwrap().is_some(), "key {u:?}");
        }
    }

    #[test]
    fn table_cursors_with_seek_keys() {
        let m = model(400);
        let fs = MemFs::new();
        let path = Path::new("/t/000003.sst");
        write(
            &fs,
            path,
            &m,
            &TableOptions {
                block_size: 256,
                restart_interval: 4,
                filter: true,
                filter_bits: 8,
                compression: Compression::None,
                db_id: 0,
                keyspace: None,
            },
        );
        let t = open(&fs, path, None).unwrap();
        let mut seeks: Vec<Vec<u8>> = vec![Vec::new(), b"a".to_vec(), b"zzzz".to_vec()];
        for (k, _) in m.iter().step_by(3) {
            seeks.push(k.clone());
            let (uk, tag) = key::split(k).unwrap();
            seeks.push(key::seek_key(uk, tag_seqno(tag)));
            seeks.push(key::encode(uk, 0)); // after every version of uk
            let mut longer = uk.to_vec();
            longer.push(0);
            seeks.push(key::seek_key(&longer, u64::MAX >> 8));
        }
        seeks.push(key::seek_key(b"", 0));
        for s in &seeks {
            let start = m.partition_point(|(k, _)| key::compare(k, s) == Ordering::Less);
            let got = collect(t.cursor_forward(Some(s))).unwrap();
            assert_eq!(got, m[start..], "forward from {s:?}");
            let end = m.partition_point(|(k, _)| key::compare(k, s) != Ordering::Greater);
            let mut want = m[..end].to_vec();
            want.reverse();
            let got = collect(t.cursor_backward(Some(s))).unwrap();
            assert_eq!(got, want, "backward from {s:?}");
        }
    }

    #[test]
    fn table_empty() {
        let fs = MemFs::new();
        let path = Path::new("/t/000004.sst");
        let s = write(&fs, path, &Vec::new(), &TableOptions::default());
        assert_eq!(s.entries, 0);
        let t = open(&fs, path, None).unwrap();
        assert_eq!(t.entries(), 0);
        assert!(t.smallest().is_empty());
        assert_eq!(t.get(b"k", u64::MAX).unwrap(), None);
        assert!(collect(t.cursor_forward(None)).unwrap().is_empty());
        assert!(
            collect(t.cursor_backward(Some(b"x\0\0\0\0\0\0\0\0")))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn table_filter_skips_absent_keys() {
        let m: Model = (0..100_000u32)
            .map(|i| {
                let uk = format!("key{i:08}");
                (key::encode(uk.as_bytes(), make_tag(5, 1)), Vec::new())
            })
            .collect();
        let fs = MemFs::new();
        let path = Path::new("/t/000005.sst");
        write(&fs, path, &m, &TableOptions::default());
        let t = open(&fs, path, None).unwrap();
        for (k, _) in &m {
            assert!(t.may_contain(key::user_key(k)));
        }
        let fp = (0..100_000u32)
            .filter(|i| t.may_contain(format!("nokey{i:08}").as_bytes()))
            .count();
        assert!(fp < 1000, "false positives {fp}");
    }

    /// A read-only file over a byte buffer that may pretend to be longer
    /// than its bytes (a file truncated after the table was opened).
    struct Bytes {
        data: Vec<u8>,
        claimed_len: u64,
    }

    impl FileRead for Bytes {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            let start = offset as usize;
            match self.data.get(start..start + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    Ok(())
                }
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "past end",
                )),
            }
        }
        fn len(&self) -> u64 {
            self.claimed_len
        }
    }

    fn small_table() -> (Model, Vec<u8>) {
        let m = model(12);
        let fs = MemFs::new();
        let path = Path::new("/t/small.sst");
        write(
            &fs,
            path,
            &m,
            &TableOptions {
                block_size: 100,
                restart_interval: 2,
                filter: true,
                filter_bits: 8,
                compression: Compression::None,
                db_id: 0,
                keyspace: None,
            },
        );
        let bytes = crate::io::read_all(&fs, path).unwrap();
        (m, bytes)
    }

    fn open_bytes(data: Vec<u8>, claimed_len: u64) -> Result<Arc<Table>> {
        let file = Arc::new(Bytes { data, claimed_len });
        Table::open(file, PathBuf::from("/t/x.sst"), 1, None).map(Arc::new)
    }

    /// Runs every read path; each must give the model's answer or
    /// `Corruption`. Returns how many paths failed.
    fn check_all_paths(t: &Arc<Table>, m: &Model) -> usize {
        let mut failures = 0;
        let mut check = |r: Result<bool>| match r {
            Ok(ok) => assert!(ok, "read path returned wrong data"),
            Err(e) => {
                assert!(e.is_corruption(), "unexpected error {e}");
                failures += 1;
            }
        };
        for (k, _) in m {
            let (uk, tag) = key::split(k).unwrap();
            for snap in [tag_seqno(tag), u64::MAX] {
                check(t.get(uk, snap).map(|g| g == expected_get(m, uk, snap)));
            }
        }
        check(collect(t.cursor_forward(None)).map(|g| g == *m));
        let mut rev = m.clone();
        rev.reverse();
        check(collect(t.cursor_backward(None)).map(|g| g == rev));
        let mid = &m[m.len() / 2].0;
        let start = m.partition_point(|(k, _)| key::compare(k, mid) == Ordering::Less);
        check(collect(t.cursor_forward(Some(mid))).map(|g| g == m[start..]));
        check(collect(t.cursor_backward(Some(mid))).map(|g| g == rev[m.len() - start - 1..]));
        failures
    }

    #[test]
    fn table_truncated_at_every_byte() {
        let (m, bytes) = small_table();
        assert!(bytes.len() > 500, "small table spans several blocks");
        let t = open_bytes(bytes.clone(), bytes.len() as u64).unwrap();
        assert_eq!(check_all_paths(&t, &m), 0);
        for cut in 0..bytes.len() {
            // Truncated before open: the footer is gone.
            let e = open_bytes(bytes[..cut].to_vec(), cut as u64).unwrap_err();
            assert!(e.is_corruption(), "cut {cut}: {e}");
            // Truncated after open (reads past the cut fail).
            if let Ok(t) = open_bytes(bytes[..cut].to_vec(), bytes.len() as u64) {
                check_all_paths(&t, &m);
            }
        }
    }

    #[test]
    fn table_every_byte_flip_is_detected_or_harmless() {
        let (m, bytes) = small_table();
        for i in 0..bytes.len() {
            for mask in [0x01u8, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= mask;
                let len = b.len() as u64;
                match open_bytes(b, len) {
                    Err(e) => assert!(e.is_corruption(), "byte {i}: {e}"),
                    Ok(t) => {
                        // The flip is in a data block: some path must see it.
                        assert!(check_all_paths(&t, &m) > 0, "flip at {i} went unnoticed");
                    }
                }
            }
        }
    }

    #[test]
    fn table_flip_via_memfs_hook_and_cache_hit_path() {
        let m = model(200);
        let fs = MemFs::new();
        let path = Path::new("/t/000006.sst");
        write(&fs, path, &m, &TableOptions::default());
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = open(&fs, path, Some(cache.clone())).unwrap();
        let (k, _) = &m[0];
        let (uk, tag) = key::split(k).unwrap();
        let want = expected_get(&m, uk, tag_seqno(tag));
        assert_eq!(t.get(uk, tag_seqno(tag)).unwrap(), want);
        assert_eq!((cache.hits(), cache.misses()), (0, 1));
        assert_eq!(cache.len(), 1);
        // Damage the first data block on "disk": the cached copy still
        // serves reads, an uncached reader reports corruption.
        assert!(fs.mutate_byte(path, 3, |b| b ^ 0x40));
        assert_eq!(t.get(uk, tag_seqno(tag)).unwrap(), want);
        assert_eq!(cache.hits(), 1);
        let first_block = collect(t.cursor_forward(None)).unwrap();
        assert_eq!(first_block, m);
        assert!(cache.hits() >= 2);
        let uncached = open(&fs, path, None).unwrap();
        let e = uncached.get(uk, tag_seqno(tag)).unwrap_err();
        match &e {
            Error::Corruption {
                file,
                offset,
                detail,
            } => {
                assert_eq!(file, path);
                assert_eq!(*offset, 0);
                assert!(detail.contains("checksum"), "{detail}");
            }
            other => panic!("expected corruption, got {other}"),
        }
        // A cursor that fails keeps failing.
        let mut c = uncached.cursor_forward(None);
        assert!(c.advance().is_err());
        assert!(c.advance().is_err());
        // Truncation through the MemFs hook.
        fs.truncate(path, 100);
        assert!(open(&fs, path, None).unwrap_err().is_corruption());
    }

    #[test]
    fn table_open_names_the_problem() {
        let (_, bytes) = small_table();
        let detail = |b: Vec<u8>| match open_bytes(b.clone(), b.len() as u64) {
            Err(Error::Corruption { detail, .. }) => detail,
            other => panic!("expected corruption, got {other:?}"),
        };
        assert!(detail(bytes[..10].to_vec()).contains("too short"));
        let mut b = bytes.clone();
        *b.last_mut().unwrap() = b'X';
        assert!(detail(b).contains("not a CairnDB table"));
        let mut b = bytes.clone();
        let v = b.len() - 16;
        b[v] = 6;
        assert!(detail(b).contains("unsupported table version 6"));
        let mut b = bytes.clone();
        let c = b.len() - 12;
        b[c] ^= 1;
        assert!(detail(b).contains("footer checksum"));
        let mut b = bytes.clone();
        b[bytes.len() - 64] ^= 1; // index offset, crc fixed up
        let crc = crate::format::coding::crc(&b[bytes.len() - 64..bytes.len() - 12]);
        let at = bytes.len() - 12;
        b[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        assert!(detail(b).contains("layout"));
    }

    #[test]
    fn table_types_are_shareable() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Table>();
        send_sync::<BlockCache>();
        send::<TableCursor>();
        send::<TableWriter>();
    }

    /// Version 5 properties name the table's keyspace (fields 9 to 11);
    /// the default keyspace is id 0 with an empty name and options.
    #[test]
    fn properties_name_the_keyspace() {
        let fs = MemFs::new();
        let m = vec![(key::encode(b"k", make_tag(1, 1)), b"v".to_vec())];
        let users = crate::format::manifest::KeyspaceRecord {
            id: 3,
            name: "users".into(),
            options: crate::keyspace::KeyspaceOptions::default(),
        };
        let opts = TableOptions {
            keyspace: Some(Arc::new(users.clone())),
            ..TableOptions::default()
        };
        write(&fs, Path::new("/t/ks.sst"), &m, &opts);
        let t = open(&fs, Path::new("/t/ks.sst"), None).unwrap();
        let ks = t.keyspace().expect("a version 5 table names its keyspace");
        assert_eq!((ks.id, ks.name.as_str()), (3, "users"));
        assert_eq!(
            crate::keyspace::KeyspaceOptions::decode(&ks.options).unwrap(),
            users.options
        );
        write(&fs, Path::new("/t/d.sst"), &m, &TableOptions::default());
        let t = open(&fs, Path::new("/t/d.sst"), None).unwrap();
        assert_eq!(t.keyspace(), Some(&TableKeyspace::default()));
    }

    #[test]
    fn table_golden_tiny_example() {
        // docs/format.md §Tables §Worked example.
        let fs = MemFs::new();
        let path = Path::new("/t/tiny.sst");
        let m = vec![
            (key::encode(b"ab", make_tag(2, 1)), b"x".to_vec()),
            (key::encode(b"ac", make_tag(1, 0)), Vec::new()),
        ];
        let opts = TableOptions {
            filter: false,
            ..TableOptions::default()
        };
        write(&fs, path, &m, &opts);
        let bytes = crate::io::read_all(&fs, path).unwrap();
        // The whole file, as listed in the worked example of the doc.
        let golden = "\
            000a01616200000000000002017801 09 00630000000000000100 00000000 01000000 0016bb8692\
            00 009acd2892\
            000a02616300000000000001000022 00000000 01000000 006d9a1d1e\
            05 02 01 00 0a61620000000000000201 0a61630000000000000100 00 00 00 00 00 00923fa9f9\
            2d00000000000000 1700000000000000 2700000000000000 0100000000000000\
            4900000000000000 1f00000000000000 05000000 76f190be 434149524e544231";
        let golden: Vec<u8> = golden
            .chars()
            .filter(char::is_ascii_hexdigit)
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|p| u8::from_str_radix(&p.iter().collect::<String>(), 16).unwrap())
            .collect();
        assert_eq!(bytes, golden);
        let data_block: &[u8] = &[
            0x00, 0x0a, 0x01, b'a', b'b', 0, 0, 0, 0, 0, 0, 0x02, 0x01, b'x', // entry 1
            0x01, 0x09, 0x00, b'c', 0, 0, 0, 0, 0, 0, 0x01, 0x00, // entry 2
            0, 0, 0, 0, // restart[0] = 0
            1, 0, 0, 0, // num_restarts = 1
        ];
        assert_eq!(&bytes[..data_block.len()], data_block);
        assert_eq!(bytes[data_block.len()], BLOCK_TYPE_RAW);
        assert_eq!(&bytes[bytes.len() - 8..], b"CAIRNTB1");
        assert_eq!(
            collect(open(&fs, path, None).unwrap().cursor_forward(None)).unwrap(),
            m
        );
    }

    #[test]
    fn table_writer_io_error_is_reported() {
        struct Failing;
        impl FileWrite for Failing {
            fn append(&mut self, _: &[u8]) -> std::io::Result<()> {
                Err(std::io::Error::other("disk full"))
            }
            fn sync(&mut self) -> std::io::Result<()> {
                Ok(())
            }
            fn len(&self) -> u64 {
                0
            }
            fn size(&self) -> u64 {
                0
            }
            fn prewrite(&mut self, _: u64) -> std::io::Result<()> {
                Err(std::io::Error::other("disk full"))
            }
            fn trim(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut w = TableWriter::new(
            Box::new(Failing),
            PathBuf::from("/t/f.sst"),
            &TableOptions {
                block_size: 16,
                ..TableOptions::default()
            },
        );
        let k = key::encode(b"key", make_tag(1, 1));
        assert!(matches!(w.add(&k, &[0; 32]), Err(Error::Io { .. })));
        let k2 = key::encode(b"key2", make_tag(1, 1));
        assert!(matches!(w.add(&k2, b""), Err(Error::Io { .. })));
        assert!(matches!(w.finish(), Err(Error::Io { .. })));
    }
}
