//! `dump` and `load`: a database's keyspaces and entries as one portable,
//! checksummed, versioned file (docs/format.md §Dump files), and back.
//!
//! A dump reads one snapshot, so it holds one point in time of every
//! keyspace even while writes go on. A load writes into a new (or empty)
//! database in batches without syncing each, then flushes: the entries
//! arrive in key order, the cheapest order to write.

use super::{ToolResult, open, progress};
use cairndb::{Db, Options, WriteBatch, WriteOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

const MAGIC: &[u8; 8] = b"CAIRNDMP";
const VERSION: u32 = 1;
const KIND_KEYSPACE: u8 = 1;
const KIND_ENTRY: u8 = 2;
const KIND_END: u8 = 3;
/// Largest frame payload a load accepts: a key and a value at the
/// engine's limits, with room to spare.
const PAYLOAD_MAX: u32 = 1 << 30;
/// A load commits a batch once it holds this many bytes.
const LOAD_BATCH_BYTES: usize = 4 << 20;

#[derive(clap::Args)]
pub struct DumpArgs {
    /// The database directory.
    db: PathBuf,
    /// The dump file to write (`-`: standard output).
    out: PathBuf,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    /// The dump file to read (`-`: standard input).
    input: PathBuf,
    /// The database directory: created if missing; an existing one must
    /// hold no entries.
    db: PathBuf,
}

fn frame(out: &mut impl Write, kind: u8, parts: &[&[u8]]) -> std::io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(len).map_err(|_| std::io::Error::other("frame too large"))?;
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&len.to_le_bytes());
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    crc.update(&head);
    out.write_all(&head)?;
    for p in parts {
        crc.update(p);
        out.write_all(p)?;
    }
    out.write_all(&(crc.finalize() as u32).to_le_bytes())
}

/// Writes every keyspace's entries, from one snapshot.
pub fn dump(a: DumpArgs) -> ToolResult {
    let db = open(&a.db)?;
    let sink: Box<dyn Write> = if a.out.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(
            std::fs::File::create(&a.out)
                .map_err(|e| format!("creating {}: {e}", a.out.display()))?,
        )
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let mut header = Vec::with_capacity(20);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc_fast::crc32_iscsi(&header);
    header.extend_from_slice(&crc.to_le_bytes());
    out.write_all(&header)?;
    let bar = progress(db.stats().table_entries, "dumping");
    let snap = db.snapshot();
    let names = db.keyspaces();
    let mut entries = 0u64;
    for name in &names {
        let ks = db.keyspace(name)?;
        frame(&mut out, KIND_KEYSPACE, &[name.as_bytes()])?;
        let mut iter = snap.iter_in(&ks);
        while let Some(entry) = iter.next_ref() {
            let (k, v) = entry?;
            let klen = u32::try_from(k.len())?.to_le_bytes();
            frame(&mut out, KIND_ENTRY, &[&klen, k, v])?;
            entries += 1;
            if entries.is_multiple_of(4096) {
                bar.set_position(entries);
            }
        }
    }
    let mut end = Vec::with_capacity(16);
    end.extend_from_slice(&entries.to_le_bytes());
    end.extend_from_slice(&(names.len() as u64).to_le_bytes());
    frame(&mut out, KIND_END, &[&end])?;
    out.flush()?;
    bar.finish_and_clear();
    drop(snap);
    db.close()?;
    eprintln!("dumped {entries} entries of {} keyspaces", names.len());
    Ok(())
}

/// A dump file's frames, each checked.
struct Frames<R> {
    input: R,
    /// Byte offset of the next frame, for errors.
    offset: u64,
    payload: Vec<u8>,
}

impl<R: Read> Frames<R> {
    fn header(input: &mut R) -> ToolResult {
        let mut header = [0u8; 20];
        input
            .read_exact(&mut header)
            .map_err(|e| format!("not a CairnDB dump (reading its header: {e})"))?;
        if &header[..8] != MAGIC {
            return Err("not a CairnDB dump (no CAIRNDMP magic)".into());
        }
        let crc = u32::from_le_bytes(header[16..20].try_into()?);
        if crc_fast::crc32_iscsi(&header[..16]) != crc {
            return Err("the dump's header fails its checksum".into());
        }
        let version = u32::from_le_bytes(header[8..12].try_into()?);
        if version != VERSION {
            return Err(
                format!("dump format version {version}; this cairn reads {VERSION}").into(),
            );
        }
        Ok(())
    }

    /// The next frame's kind; its payload is in `self.payload`.
    fn next(&mut self) -> ToolResult<u8> {
        let mut head = [0u8; 5];
        self.input
            .read_exact(&mut head)
            .map_err(|e| format!("dump cut short at byte {} ({e})", self.offset))?;
        let len = u32::from_le_bytes(head[1..5].try_into()?);
        if len > PAYLOAD_MAX {
            return Err(format!("frame at byte {} claims {len} bytes", self.offset).into());
        }
        self.payload.resize(len as usize, 0);
        let mut crc = [0u8; 4];
        self.input
            .read_exact(&mut self.payload)
            .and_then(|()| self.input.read_exact(&mut crc))
            .map_err(|e| format!("dump cut short in the frame at byte {} ({e})", self.offset))?;
        let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        digest.update(&head);
        digest.update(&self.payload);
        if digest.finalize() as u32 != u32::from_le_bytes(crc) {
            return Err(format!("the frame at byte {} fails its checksum", self.offset).into());
        }
        self.offset += 9 + u64::from(len);
        Ok(head[0])
    }
}

/// Loads a dump into a new or empty database.
pub fn load(a: LoadArgs) -> ToolResult {
    let source: Box<dyn Read> = if a.input.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            std::fs::File::open(&a.input)
                .map_err(|e| format!("opening {}: {e}", a.input.display()))?,
        )
    };
    let total = std::fs::metadata(&a.input).map_or(0, |m| m.len());
    let mut input = BufReader::with_capacity(1 << 20, source);
    Frames::header(&mut input)?;
    let db = Db::open(
        &a.db,
        Options {
            create_if_missing: true,
            ..Options::default()
        },
    )
    .map_err(|e| format!("opening {}: {e}", a.db.display()))?;
    for name in db.keyspaces() {
        if db.keyspace(&name)?.iter().next().is_some() {
            return Err(format!("{} is not empty (keyspace {name:?})", a.db.display()).into());
        }
    }
    let mut frames = Frames {
        input,
        offset: 20,
        payload: Vec::new(),
    };
    let bar = progress(total, "loading");
    let mut ks = None;
    let mut batch = WriteBatch::new();
    let mut entries = 0u64;
    let mut keyspaces = 0u64;
    let unsynced = WriteOptions { sync: false };
    loop {
        match frames.next()? {
            KIND_KEYSPACE => {
                if !batch.is_empty() {
                    db.write(std::mem::take(&mut batch), &unsynced)?;
                }
                let name = std::str::from_utf8(&frames.payload)
                    .map_err(|_| format!("keyspace name at byte {} is not UTF-8", frames.offset))?;
                ks = Some(db.keyspace(name)?);
                keyspaces += 1;
            }
            KIND_ENTRY => {
                let ks = ks
                    .as_ref()
                    .ok_or("an entry before any keyspace: not a dump this tool wrote")?;
                let p = &frames.payload;
                let klen = p
                    .get(..4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .filter(|&n| n <= p.len() - 4)
                    .ok_or_else(|| format!("malformed entry before byte {}", frames.offset))?;
                batch.put_in(ks, &p[4..4 + klen], &p[4 + klen..])?;
                entries += 1;
                if batch.size_bytes() >= LOAD_BATCH_BYTES {
                    db.write(std::mem::take(&mut batch), &unsynced)?;
                    bar.set_position(frames.offset);
                }
            }
            KIND_END => {
                let p = &frames.payload;
                let (want_entries, want_keyspaces) = match p.len() {
                    16 => (
                        u64::from_le_bytes(p[..8].try_into()?),
                        u64::from_le_bytes(p[8..16].try_into()?),
                    ),
                    _ => return Err("malformed end frame".into()),
                };
                if (want_entries, want_keyspaces) != (entries, keyspaces) {
                    return Err(format!(
                        "the dump says {want_entries} entries in {want_keyspaces} keyspaces, it held {entries} in {keyspaces}"
                    )
                    .into());
                }
                break;
            }
            other => {
                return Err(format!("unknown frame kind {other} at byte {}", frames.offset).into());
            }
        }
    }
    if !batch.is_empty() {
        db.write(batch, &unsynced)?;
    }
    // Durable as tables, not as journal records: the load is one step.
    db.flush()?;
    db.close()?;
    bar.finish_and_clear();
    eprintln!("loaded {entries} entries into {keyspaces} keyspaces");
    Ok(())
}
