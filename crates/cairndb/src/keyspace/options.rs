//! Per-keyspace options (`KeyspaceOptions`) and their encoding in the
//! manifest (format.md §Manifest, tag 11).

use crate::format::coding::{Reader, put_varint};
use crate::options::{Compression, Options};

/// Longest keyspace name, in bytes.
pub const NAME_LEN_MAX: usize = 255;

/// What can be tuned per keyspace: how its tables are built and which of
/// its values are kept apart from its keys. Everything else (memtables,
/// journal, caches, the shape of the levels, value GC) is shared by the
/// database's keyspaces and set in [`Options`](crate::Options): they
/// share one journal and one memtable, so their writes are atomic
/// together, and one compaction thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyspaceOptions {
    /// How data blocks of this keyspace's tables, and its separated
    /// values, are compressed. LZ4 by
    /// default: a block or value that does not shrink by an eighth is
    /// kept as it is, so incompressible data costs one attempt each.
    /// Separated values are compressed as unsynced writes append them to
    /// value streams, or when a compaction first moves them (settling,
    /// value GC); synced writes keep theirs raw in the journal.
    pub compression: Compression,
    /// Values of at least this many bytes are kept in the journal and
    /// value files, their tables holding pointers
    /// (`Options::value_separation_min`).
    pub value_separation_min: usize,
    /// Target uncompressed size of a data block.
    pub block_bytes: usize,
    /// Build a key filter per table. Off for a keyspace that is only
    /// scanned, or whose lookups nearly always find their key.
    pub filter: bool,
    /// Bits of each key's fingerprint in the filter: 8 (BinaryFuse8, about
    /// 9 bits per key, 0.4 % false positives) or 16 (BinaryFuse16, about
    /// 18 bits per key, 0.0015 %: for a keyspace looked up mostly for keys
    /// it does not hold, where each false positive costs a block read).
    pub filter_bits: u8,
    /// Target size of a table written by compaction.
    pub table_bytes: u64,
}

impl Default for KeyspaceOptions {
    fn default() -> Self {
        let o = Options::default();
        KeyspaceOptions {
            compression: Compression::Lz4,
            value_separation_min: o.value_separation_min,
            block_bytes: o.block_bytes,
            filter: o.filter,
            filter_bits: o.filter_bits,
            table_bytes: o.table_bytes,
        }
    }
}

impl KeyspaceOptions {
    /// `InvalidArgument` naming the first option out of range.
    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |s: &str| Err(crate::Error::InvalidArgument(s.to_owned()));
        if let Compression::Zstd(level) = self.compression
            && !(1..=22).contains(&level)
        {
            return bad("a Zstandard compression level must be in 1..=22");
        }
        if self.block_bytes < 64 || self.block_bytes > (64 << 20) {
            return bad("block_bytes must be in 64 B ..= 64 MiB");
        }
        if self.table_bytes == 0 {
            return bad("table_bytes must be > 0");
        }
        if !crate::format::filter::FILTER_BITS.contains(&self.filter_bits) {
            return bad("filter_bits must be 8 or 16");
        }
        Ok(())
    }

    /// The options as recorded in the manifest (format.md §Manifest, tag
    /// 11): tagged fields, each a varint tag and a varint value.
    ///
    /// | tag | field | value |
    /// |-----|-------|-------|
    /// | 1 | compression | 0 none, 1 LZ4, 2 Zstandard |
    /// | 2 | zstd level | 1..=22 (with compression 2) |
    /// | 3 | value_separation_min | bytes |
    /// | 4 | block_bytes | bytes |
    /// | 5 | filter | 0 or 1 |
    /// | 6 | table_bytes | bytes |
    /// | 7 | filter_bits | 16 (written only then; absent: 8; format 9) |
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let (kind, level) = match self.compression {
            Compression::None => (0, None),
            Compression::Lz4 => (1, None),
            Compression::Zstd(l) => (2, Some(l)),
        };
        let mut field = |tag: u64, v: u64| {
            put_varint(&mut out, tag);
            put_varint(&mut out, v);
        };
        field(1, kind);
        if let Some(l) = level {
            field(2, u64::try_from(l).unwrap_or(0));
        }
        field(3, self.value_separation_min as u64);
        field(4, self.block_bytes as u64);
        field(5, u64::from(self.filter));
        field(6, self.table_bytes);
        if self.filter_bits != 8 {
            field(7, u64::from(self.filter_bits));
        }
        out
    }

    /// Decodes [`KeyspaceOptions::encode`]'s bytes; fields missing take
    /// their defaults. `Err(detail)` on an unknown tag or a value out of
    /// range.
    pub(crate) fn decode(data: &[u8]) -> Result<Self, String> {
        let mut o = KeyspaceOptions::default();
        let mut r = Reader::new(data);
        let (mut kind, mut level) = (1u64, 3u64);
        while !r.is_empty() {
            let tag = r.varint().ok_or("keyspace option tag truncated")?;
            let v = r
                .varint()
                .ok_or_else(|| format!("keyspace option {tag} truncated"))?;
            let size = || usize::try_from(v).map_err(|_| format!("keyspace option {tag}: {v}"));
            match tag {
                1 => kind = v,
                2 => level = v,
                3 => o.value_separation_min = size()?,
                4 => o.block_bytes = size()?,
                5 => o.filter = v != 0,
                6 => o.table_bytes = v,
                7 => {
                    o.filter_bits =
                        u8::try_from(v).map_err(|_| format!("keyspace filter bits {v}"))?;
                }
                t => return Err(format!("unknown keyspace option tag {t}")),
            }
        }
        o.compression = match (kind, i32::try_from(level)) {
            (0, _) => Compression::None,
            (1, _) => Compression::Lz4,
            (2, Ok(l)) if (1..=22).contains(&l) => Compression::Zstd(l),
            _ => return Err(format!("bad keyspace compression {kind} (level {level})")),
        };
        o.validate().map_err(|e| e.to_string())?;
        Ok(o)
    }
}

/// `InvalidArgument` unless `name` can name a keyspace: 1 to
/// `NAME_LEN_MAX` bytes of UTF-8.
pub(crate) fn check_name(name: &str) -> crate::Result<()> {
    if name.is_empty() || name.len() > NAME_LEN_MAX {
        return Err(crate::Error::InvalidArgument(format!(
            "a keyspace name must be 1 to {NAME_LEN_MAX} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_and_bad_bytes_fail() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd(19)] {
            let o = KeyspaceOptions {
                compression,
                value_separation_min: 77,
                block_bytes: 16 << 10,
                filter: false,
                filter_bits: 16,
                table_bytes: 1 << 20,
            };
            assert_eq!(KeyspaceOptions::decode(&o.encode()), Ok(o));
        }
        // 8-bit fingerprints (the default) are not written: options
        // without them read as they did before format 9.
        let plain = KeyspaceOptions::default();
        assert!(!plain.encode().chunks(2).any(|f| f.first() == Some(&7)));
        assert_eq!(KeyspaceOptions::decode(&plain.encode()), Ok(plain));
        assert!(KeyspaceOptions::decode(&[7, 12]).is_err(), "12-bit filters");
        assert_eq!(KeyspaceOptions::decode(&[]), Ok(KeyspaceOptions::default()));
        assert!(KeyspaceOptions::decode(&[9, 1]).is_err(), "unknown tag");
        assert!(KeyspaceOptions::decode(&[1, 2, 2, 30]).is_err(), "level 30");
        assert!(KeyspaceOptions::decode(&[1, 5]).is_err(), "codec 5");
        assert!(KeyspaceOptions::decode(&[4, 1]).is_err(), "1-byte blocks");
        assert!(KeyspaceOptions::decode(&[3]).is_err(), "truncated");
    }
}
