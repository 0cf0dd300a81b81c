//! Version edits: the payload of manifest records (format.md §Manifest).
//!
//! An edit is a list of tagged fields; tags are persisted and never reused:
//!
//! | tag | field        | encoding                                              |
//! |-----|--------------|-------------------------------------------------------|
//! | 1   | format       | varint: manifest format version (first edit of a file) |
//! | 2   | journal      | varint: journals numbered below this are obsolete      |
//! | 3   | next_file    | varint: next unused file number                        |
//! | 4   | last_seqno   | varint: highest seqno stored in tables                 |
//! | 5   | add_table    | varint level, number, size, entries; len-prefixed smallest and largest internal keys |
//! | 6   | remove_table | varint level, number                                   |
//! | 7   | value_live   | varint segment, bytes: separated value bytes that tables now point to in that journal segment |
//! | 8   | value_dead   | varint segment, bytes: pointed-to bytes no table points to any more |
//! | 9   | db_id        | varint: the database's identity (first edit of a format-4 file) |
//! | 10  | clean_close  | varint journal, length: a clean close left that journal whole at that length |
//! | 11  | keyspace     | varint id (nonzero), len-prefixed name, len-prefixed options (`KeyspaceOptions::encode`): the keyspace exists, with these options |
//! | 12  | drop_keyspace | varint id: the keyspace is dropped; its tables are removed later |
//! | 13  | add_table_in | varint keyspace (nonzero), then the fields of tag 5: a table of that keyspace |
//! | 14  | next_keyspace | varint: keyspace ids below this were used (never reused) |
//! | 15  | comparator   | len-prefixed UTF-8 name (1 to 255 bytes): the key order's name the database was created under (LevelDB's comparator name; the order itself is always bytewise) |
//! | 16  | write_totals | varint user bytes, varint disk bytes: written since the database was created, as of this edit |

use super::coding::{Reader, put_bytes, put_varint};

/// Longest comparator name a manifest records (tag 15), in bytes.
pub const COMPARATOR_NAME_MAX: usize = 255;
use crate::limits::LEVELS;

/// Version of the manifest format written by this build. Format 2 added
/// tags 7 and 8 (value segments); format 3 adds no field but says the
/// journals at and above its floor are of journal format 3 (numbered
/// framing, format.md §Log records), so that an older build refuses the
/// database instead of reading those journals as torn. Format 4 adds tags
/// 9 (the database's identity, which seeds its journals' framing and is
/// written into its tables) and 10 (clean close). Format 5 adds no field
/// but says journal batches may hold pointer ops into value streams
/// (`NNNNNN.stream`), which an older build would read as damage. Format 6
/// adds no field but says tables may be of table version 4 (compressed
/// data blocks), which an older build would take for damaged tables.
/// Format 7 adds tags 11 to 14 (keyspaces) and says journal batches may
/// hold ops of other keyspaces than the default (format.md §Batch).
/// Format 8 adds tags 15 (the comparator name a database was created
/// under) and 16 (bytes written since it was created) and says tables may be of table version 5 (properties naming
/// their keyspace), which an older build would refuse as tables of an
/// unsupported version. Format 9 adds keyspace option tag 7 (16-bit
/// filter fingerprints) and says tables may carry filters of kind 2
/// (BinaryFuse16), which an older build would take for damage. Format 10
/// says value pointers may name compressed values (a codec byte after the
/// checksum, format.md §Value pointers), which an older build would take
/// for malformed pointers. Formats 1 to 9 are read as they are, their
/// journals with the framing of their format.
pub const MANIFEST_FORMAT: u64 = 10;
/// First manifest format whose journals use the numbered framing.
pub const MANIFEST_FORMAT_NUMBERED_JOURNALS: u64 = 3;
/// First manifest format that names the database's identity (tag 9,
/// required in the first edit of a file) and salts its journals' framing
/// with it.
pub const MANIFEST_FORMAT_IDENTIFIED: u64 = 4;
/// Oldest manifest format this build reads.
pub const MANIFEST_FORMAT_MIN: u64 = 1;

/// A table as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRecord {
    /// The keyspace the table belongs to (0: the default one; tag 5).
    pub keyspace: u32,
    pub level: usize,
    pub number: u64,
    pub size: u64,
    pub entries: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
}

/// One atomic change to the set of live tables.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edit {
    pub format: Option<u64>,
    pub journal: Option<u64>,
    pub next_file: Option<u64>,
    pub last_seqno: Option<u64>,
    pub added: Vec<TableRecord>,
    pub removed: Vec<(usize, u64)>,
    /// (segment, bytes) of separated values newly pointed to by tables.
    pub value_live: Vec<(u64, u64)>,
    /// (segment, bytes) of separated values no table points to any more.
    pub value_dead: Vec<(u64, u64)>,
    /// The database's identity (format 4; nonzero).
    pub db_id: Option<u64>,
    /// (journal, length): written by a clean close as the file's last
    /// edit. That journal was synced whole and holds exactly `length`
    /// bytes of intact records; no journal after it holds a write.
    pub clean_close: Option<(u64, u64)>,
    /// Keyspaces created, or whose options changed.
    pub keyspaces: Vec<KeyspaceRecord>,
    /// Ids of keyspaces dropped.
    pub dropped_keyspaces: Vec<u32>,
    /// Keyspace ids below this were used.
    pub next_keyspace: Option<u32>,
    /// The name of the key order the database was created under
    /// (`Options::comparator_name`).
    pub comparator: Option<String>,
    /// Bytes written since the database was created, as of this edit.
    pub totals: Option<WriteTotals>,
}

/// Bytes written since a database was created (manifest tag 16): by the
/// user (batches as encoded), and to disk for them (journals and value
/// streams, tables of flushes and compactions, values moved by value GC
/// and settling). Counted up to the last edit a handle logged: what a
/// crash cut off after it is not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteTotals {
    pub user: u64,
    pub disk: u64,
}

/// A keyspace as recorded in the manifest (tag 11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceRecord {
    pub id: u32,
    pub name: String,
    pub options: crate::keyspace::KeyspaceOptions,
}

/// A nonzero keyspace id from a varint.
fn keyspace_id(r: &mut Reader) -> Result<u32, String> {
    let id = r.varint().ok_or("keyspace id truncated")?;
    match u32::try_from(id) {
        Ok(id) if id != 0 => Ok(id),
        _ => Err(format!("bad keyspace id {id}")),
    }
}

impl Edit {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (tag, v) in [
            (1, self.format),
            (2, self.journal),
            (3, self.next_file),
            (4, self.last_seqno),
        ] {
            if let Some(v) = v {
                put_varint(&mut out, tag);
                put_varint(&mut out, v);
            }
        }
        for t in &self.added {
            if t.keyspace == 0 {
                put_varint(&mut out, 5);
            } else {
                put_varint(&mut out, 13);
                put_varint(&mut out, u64::from(t.keyspace));
            }
            put_varint(&mut out, t.level as u64);
            put_varint(&mut out, t.number);
            put_varint(&mut out, t.size);
            put_varint(&mut out, t.entries);
            put_bytes(&mut out, &t.smallest);
            put_bytes(&mut out, &t.largest);
        }
        for (level, number) in &self.removed {
            put_varint(&mut out, 6);
            put_varint(&mut out, *level as u64);
            put_varint(&mut out, *number);
        }
        for (tag, list) in [(7, &self.value_live), (8, &self.value_dead)] {
            for &(segment, bytes) in list {
                put_varint(&mut out, tag);
                put_varint(&mut out, segment);
                put_varint(&mut out, bytes);
            }
        }
        if let Some(id) = self.db_id {
            put_varint(&mut out, 9);
            put_varint(&mut out, id);
        }
        if let Some((journal, len)) = self.clean_close {
            put_varint(&mut out, 10);
            put_varint(&mut out, journal);
            put_varint(&mut out, len);
        }
        for k in &self.keyspaces {
            put_varint(&mut out, 11);
            put_varint(&mut out, u64::from(k.id));
            put_bytes(&mut out, k.name.as_bytes());
            put_bytes(&mut out, &k.options.encode());
        }
        for &id in &self.dropped_keyspaces {
            put_varint(&mut out, 12);
            put_varint(&mut out, u64::from(id));
        }
        if let Some(n) = self.next_keyspace {
            put_varint(&mut out, 14);
            put_varint(&mut out, u64::from(n));
        }
        if let Some(name) = &self.comparator {
            put_varint(&mut out, 15);
            put_bytes(&mut out, name.as_bytes());
        }
        if let Some(t) = self.totals {
            put_varint(&mut out, 16);
            put_varint(&mut out, t.user);
            put_varint(&mut out, t.disk);
        }
        out
    }

    /// Decodes an edit; `Err(detail)` names the first problem.
    pub fn decode(data: &[u8]) -> Result<Edit, String> {
        let mut r = Reader::new(data);
        let mut e = Edit::default();
        let level = |r: &mut Reader| -> Result<usize, String> {
            let l = r.varint_usize().ok_or("level truncated")?;
            if l >= LEVELS {
                return Err(format!("level {l} out of range"));
            }
            Ok(l)
        };
        while !r.is_empty() {
            let tag = r.varint().ok_or("tag truncated")?;
            match tag {
                1..=4 => {
                    let v = r.varint().ok_or_else(|| format!("field {tag} truncated"))?;
                    match tag {
                        1 => e.format = Some(v),
                        2 => e.journal = Some(v),
                        3 => e.next_file = Some(v),
                        _ => e.last_seqno = Some(v),
                    }
                }
                5 | 13 => {
                    let keyspace = if tag == 13 { keyspace_id(&mut r)? } else { 0 };
                    let level = level(&mut r)?;
                    let mut num = || r.varint().ok_or("table field truncated");
                    let number = num()?;
                    let size = num()?;
                    let entries = num()?;
                    let smallest = r.len_prefixed().ok_or("smallest key truncated")?.to_vec();
                    let largest = r.len_prefixed().ok_or("largest key truncated")?.to_vec();
                    e.added.push(TableRecord {
                        keyspace,
                        level,
                        number,
                        size,
                        entries,
                        smallest,
                        largest,
                    });
                }
                6 => {
                    let level = level(&mut r)?;
                    let number = r.varint().ok_or("table number truncated")?;
                    e.removed.push((level, number));
                }
                7 | 8 => {
                    let mut num = || r.varint().ok_or("segment field truncated");
                    let pair = (num()?, num()?);
                    if tag == 7 {
                        e.value_live.push(pair);
                    } else {
                        e.value_dead.push(pair);
                    }
                }
                9 => {
                    let id = r.varint().ok_or("field 9 truncated")?;
                    if id == 0 {
                        return Err("database identity 0".into());
                    }
                    e.db_id = Some(id);
                }
                10 => {
                    let mut num = || r.varint().ok_or("clean close field truncated");
                    e.clean_close = Some((num()?, num()?));
                }
                11 => {
                    let id = keyspace_id(&mut r)?;
                    let name = r.len_prefixed().ok_or("keyspace name truncated")?;
                    let name = std::str::from_utf8(name)
                        .map_err(|_| format!("keyspace {id}: name is not UTF-8"))?
                        .to_owned();
                    let options = r.len_prefixed().ok_or("keyspace options truncated")?;
                    let options = crate::keyspace::KeyspaceOptions::decode(options)
                        .map_err(|d| format!("keyspace {id}: {d}"))?;
                    e.keyspaces.push(KeyspaceRecord { id, name, options });
                }
                12 => e.dropped_keyspaces.push(keyspace_id(&mut r)?),
                14 => {
                    let n = r.varint().ok_or("field 14 truncated")?;
                    let n = u32::try_from(n).map_err(|_| format!("next keyspace {n}"))?;
                    e.next_keyspace = Some(n);
                }
                15 => {
                    let name = r.len_prefixed().ok_or("comparator name truncated")?;
                    let name = std::str::from_utf8(name)
                        .map_err(|_| "comparator name is not UTF-8".to_string())?;
                    if !(1..=COMPARATOR_NAME_MAX).contains(&name.len()) {
                        return Err(format!("comparator name of {} bytes", name.len()));
                    }
                    e.comparator = Some(name.to_owned());
                }
                16 => {
                    let mut num = || r.varint().ok_or("write totals field truncated");
                    e.totals = Some(WriteTotals {
                        user: num()?,
                        disk: num()?,
                    });
                }
                t => return Err(format!("unknown field tag {t}")),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_cuts() {
        let e = Edit {
            format: Some(MANIFEST_FORMAT),
            journal: Some(7),
            next_file: Some(9),
            last_seqno: Some(1234),
            added: vec![TableRecord {
                keyspace: 0,
                level: 1,
                number: 8,
                size: 4096,
                entries: 10,
                smallest: b"a\0\0\0\0\0\0\0\x01".to_vec(),
                largest: b"z\0\0\0\0\0\0\0\x01".to_vec(),
            }],
            removed: vec![(0, 3), (1, 4)],
            value_live: vec![(5, 40960), (6, 1)],
            value_dead: vec![(2, 8192)],
            db_id: Some(0x1234_5678_9abc_def0),
            clean_close: Some((11, 4096)),
            keyspaces: vec![KeyspaceRecord {
                id: 3,
                name: "users".into(),
                options: crate::keyspace::KeyspaceOptions::default(),
            }],
            dropped_keyspaces: vec![2],
            next_keyspace: Some(4),
            comparator: Some("foo".into()),
            totals: Some(WriteTotals {
                user: 1 << 40,
                disk: 3 << 40,
            }),
        };
        let mut e = e;
        e.added.push(TableRecord {
            keyspace: 3,
            ..e.added[0].clone()
        });
        let b = e.encode();
        assert_eq!(Edit::decode(&b), Ok(e));
        // Every proper prefix either fails or decodes to a different edit:
        // the record checksum, not this codec, guards against truncation.
        for cut in 1..b.len() {
            if let Ok(d) = Edit::decode(&b[..cut]) {
                assert_ne!(d.encode(), b);
            }
        }
        assert!(Edit::decode(&[99, 1]).is_err());
        assert!(Edit::decode(&[5, 9]).is_err()); // level out of range
        assert!(Edit::decode(&[9, 0]).is_err()); // identity 0
        assert!(Edit::decode(&[12, 0]).is_err()); // keyspace 0
        assert!(Edit::decode(&[13, 0x80, 0x80, 0x80, 0x80, 0x10]).is_err()); // id past 32 bits
        assert!(Edit::decode(&[15, 0]).is_err()); // empty comparator name
        assert!(Edit::decode(&[15, 2, 0xff, 0xfe]).is_err()); // not UTF-8
    }
}

#[cfg(test)]
mod examples {
    use super::*;
    use crate::format::log::{RecordKind, encode_record};

    fn hex(b: &[u8]) -> String {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// format.md §Manifest, worked examples: the first edit of a new
    /// database of identity 0x0123456789abcdef, and the edit of its first
    /// flush; whole records, header included.
    #[test]
    fn worked_examples() {
        let first = Edit {
            format: Some(MANIFEST_FORMAT),
            journal: Some(2),
            next_file: Some(4),
            last_seqno: Some(0),
            db_id: Some(0x0123_4567_89ab_cdef),
            ..Edit::default()
        };
        let mut rec = Vec::new();
        encode_record(&mut rec, RecordKind::Edit, &first.encode());
        assert_eq!(
            hex(&rec),
            "ab c0 98 99 12 00 00 00 17 1a 3b ad 02 00 00 00 \
             01 0a 02 02 03 04 04 00 09 ef 9b af cd f8 ac d1 91 01"
        );
        let key = |k: &[u8]| {
            let mut v = k.to_vec();
            v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 1]);
            v
        };
        let flush = Edit {
            journal: Some(4),
            next_file: Some(6),
            last_seqno: Some(1),
            added: vec![TableRecord {
                keyspace: 0,
                level: 0,
                number: 5,
                size: 165,
                entries: 1,
                smallest: key(b"a"),
                largest: key(b"a"),
            }],
            ..Edit::default()
        };
        let mut rec = Vec::new();
        encode_record(&mut rec, RecordKind::Edit, &flush.encode());
        assert_eq!(
            hex(&rec),
            "6d df a0 8b 20 00 00 00 20 7b 24 8c 02 00 00 00 \
             02 04 03 06 04 01 05 00 05 a5 01 01 \
             09 61 00 00 00 00 00 00 01 01 09 61 00 00 00 00 00 00 01 01"
        );
        let close = Edit {
            clean_close: Some((4, 0)),
            ..Edit::default()
        };
        let mut rec = Vec::new();
        encode_record(&mut rec, RecordKind::Edit, &close.encode());
        assert_eq!(
            hex(&rec),
            "42 f5 57 24 03 00 00 00 79 9e 5f ff 02 00 00 00 0a 04 00"
        );
    }
}
