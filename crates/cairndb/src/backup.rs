//! Incremental backups into a backup directory (`BackupDir`).
//!
//! A backup is the file set of a checkpoint (`Db::checkpoint`, the same
//! frozen version at one seqno), kept in a content store shared by every
//! backup of the directory, plus one metadata file per backup listing its
//! files with their sizes and CRC-32C checksums (format.md §Backups):
//!
//! ```text
//! <backup dir>/
//!   LOCK                      held while a backup is created or deleted
//!   backup-000001             metadata of backup 1 (format.md §Backups)
//!   files/
//!     000012.table-4096-1a2b3c4d   a database file: name-size-crc32c(hex)
//!   tmp/                      a manifest being written; emptied by create
//! ```
//!
//! Invariants: a store file's name states its size and checksum, and its
//! bytes match them unless damaged since (`verify` tells). A file already
//! in the store under the same name, size and checksum is not written
//! again: tables, values files and value streams are never rewritten under
//! one name, so a second backup of a database writes only what is new
//! since the first (and the journals still holding separated values, and
//! the fresh manifest). A backup exists once its metadata file is durable
//! (written, synced, renamed, directory synced); store files referenced by
//! no metadata are left by an interrupted create and removed by `delete`.
//!
//! `create` and `delete` take the directory's lock (`Fs::lock`): one
//! process changes the store at a time. `list`, `verify` and `restore`
//! only read.

use crate::checkpoint::copy_across;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::io::{Fs, PosixFs};
use crate::version::files::{self, FileKind};
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// First line of a backup's metadata; the number is the format version.
const META_MAGIC: &str = "cairndb-backup";
/// Backup metadata format written and the only one read (persisted).
pub const BACKUP_FORMAT: u32 = 1;
/// Largest metadata file read (a backup of a million files fits).
const META_BYTES_MAX: u64 = 256 << 20;
/// Bytes read per step while checksumming or copying a file.
const CHUNK_BYTES: usize = 1 << 20;

/// A backup as its metadata records it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupInfo {
    pub id: u64,
    /// The seqno the backup holds every write up to, and none after.
    pub seqno: u64,
    /// The identity of the database backed up (`Db::id`).
    pub db_id: u64,
    /// Seconds since the Unix epoch when it was made.
    pub created_unix_secs: u64,
    /// Files in the backup, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Files and bytes this backup added to the store: the rest were
    /// there already, from earlier backups.
    pub files_copied: u64,
    pub bytes_copied: u64,
}

/// One file of a backup: its database name, size and CRC-32C (plain, of
/// the whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupFile {
    pub name: String,
    pub size: u64,
    pub crc32c: u32,
}

impl BackupFile {
    /// Its name in the store: `NAME-SIZE-CRC` (CRC as 8 hex digits).
    fn stored_name(&self) -> String {
        format!("{}-{}-{:08x}", self.name, self.size, self.crc32c)
    }
}

/// A backup's metadata: the record and the file list.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    info: BackupInfo,
    files: Vec<BackupFile>,
}

/// A directory of incremental backups of databases.
pub struct BackupDir {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
}

impl std::fmt::Debug for BackupDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupDir").field("dir", &self.dir).finish()
    }
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let context = format!("{what} {}", path.display());
    move |e| Error::io(context, e)
}

impl BackupDir {
    /// Opens the backup directory at `path` on the real file system,
    /// creating it if missing.
    pub fn open(path: impl AsRef<Path>) -> Result<BackupDir> {
        BackupDir::open_with(Arc::new(PosixFs), path)
    }

    /// Opens the backup directory at `path` on `fs` (the simulated file
    /// system in tests), creating it if missing.
    pub fn open_with(fs: Arc<dyn Fs>, path: impl AsRef<Path>) -> Result<BackupDir> {
        let dir = path.as_ref().to_path_buf();
        for d in [dir.clone(), dir.join("files"), dir.join("tmp")] {
            fs.create_dir_all(&d).map_err(io_err("creating", &d))?;
        }
        Ok(BackupDir { fs, dir })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn meta_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("backup-{id:06}"))
    }

    fn store(&self) -> PathBuf {
        self.dir.join("files")
    }

    /// Ids of the backups, ascending.
    fn ids(&self) -> Result<Vec<u64>> {
        let mut ids: Vec<u64> = self
            .fs
            .list(&self.dir)
            .map_err(io_err("listing", &self.dir))?
            .iter()
            .filter_map(|n| n.strip_prefix("backup-")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn read_meta(&self, id: u64) -> Result<Meta> {
        let path = self.meta_path(id);
        if !self.fs.exists(&path) {
            return Err(Error::InvalidArgument(format!(
                "no backup {id} in {}",
                self.dir.display()
            )));
        }
        let file = self.fs.open(&path).map_err(io_err("opening", &path))?;
        if file.len() > META_BYTES_MAX {
            return Err(Error::corruption(&path, 0, "backup metadata too large"));
        }
        let mut buf = vec![0u8; file.len() as usize];
        file.read_exact_at(&mut buf, 0)
            .map_err(io_err("reading", &path))?;
        let meta = decode_meta(&buf)
            .map_err(|(offset, detail)| Error::corruption(&path, offset, detail))?;
        if meta.info.id != id {
            return Err(Error::corruption(
                &path,
                0,
                format!("names backup {}", meta.info.id),
            ));
        }
        Ok(meta)
    }

    /// Every backup, oldest first.
    pub fn list(&self) -> Result<Vec<BackupInfo>> {
        self.ids()?
            .into_iter()
            .map(|id| Ok(self.read_meta(id)?.info))
            .collect()
    }

    /// The files of backup `id`.
    pub fn files(&self, id: u64) -> Result<Vec<BackupFile>> {
        Ok(self.read_meta(id)?.files)
    }

    /// Backs `db` up while writes go on: a checkpoint's files (the same
    /// seqno rule as `Db::checkpoint`) copied into the store where not
    /// there already, then the backup's metadata, durably. Every file of
    /// the checkpoint is read once to checksum it; only new ones are
    /// written. Errors: `Io` from reading the database or writing the
    /// backup directory (the backup then does not exist; files it added
    /// to the store are removed by a later `delete`); the database's
    /// stored error if its flush cannot run; `Closed`.
    pub fn create(&self, db: &Db) -> Result<BackupInfo> {
        let _lock = self
            .fs
            .lock(&self.dir)
            .map_err(io_err("locking", &self.dir))?;
        let inner = db.inner();
        let id = self.ids()?.last().map_or(1, |last| last + 1);
        let store = self.store();
        let tmp = self.dir.join("tmp");
        self.clear_dir(&tmp)?;
        let mut stored: HashSet<String> = self
            .fs
            .list(&store)
            .map_err(io_err("listing", &store))?
            .into_iter()
            .collect();
        let frozen = inner.freeze()?;
        let mut meta = Meta {
            info: BackupInfo {
                id,
                seqno: frozen.seqno,
                db_id: inner.db_id,
                created_unix_secs: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                files: 0,
                bytes: 0,
                files_copied: 0,
                bytes_copied: 0,
            },
            files: Vec::new(),
        };
        for f in inner.frozen_files(&frozen) {
            self.add(&*inner.fs, &f.path, &f.name, &mut stored, &mut meta)?;
        }
        // The manifest and CURRENT, written for this backup alone.
        let written = inner.write_frozen_manifest(&*self.fs, &tmp, &frozen)?;
        drop(frozen);
        for name in &written {
            self.add(&*self.fs, &tmp.join(name), name, &mut stored, &mut meta)?;
        }
        self.clear_dir(&tmp)?;
        self.fs
            .sync_dir(&store)
            .map_err(io_err("syncing", &store))?;
        let path = self.meta_path(id);
        crate::io::write_file_durably(&*self.fs, &path, &encode_meta(&meta))
            .map_err(io_err("writing", &path))?;
        Ok(meta.info)
    }

    /// Adds the file at `from` on `src` to `meta`, copying it into the
    /// store unless a file of its name, size and checksum is there.
    fn add(
        &self,
        src: &dyn Fs,
        from: &Path,
        name: &str,
        stored: &mut HashSet<String>,
        meta: &mut Meta,
    ) -> Result<()> {
        let file = src.open(from).map_err(io_err("opening", from))?;
        let size = file.len();
        let prefix = format!("{name}-{size}-");
        let known = stored.iter().any(|s| s.starts_with(&prefix));
        let crc32c = if known {
            let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
            read_chunks(&*file, from, &mut |c| d.update(c))?;
            d.finalize() as u32
        } else {
            0
        };
        let entry = BackupFile {
            name: name.to_owned(),
            size,
            crc32c,
        };
        let entry = if known && stored.contains(&entry.stored_name()) {
            entry
        } else {
            // Copied under a temporary name, then named by its checksum.
            let store = self.store();
            let tmp = store.join(format!("{name}.tmp"));
            let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
            let copied = copy_across(src, from, &*self.fs, &tmp, &mut |c| d.update(c))?;
            if copied != size {
                return Err(Error::io(
                    format!("copying {}", from.display()),
                    std::io::Error::other("the file changed size while copied"),
                ));
            }
            let entry = BackupFile {
                crc32c: d.finalize() as u32,
                ..entry
            };
            let to = store.join(entry.stored_name());
            self.fs
                .rename(&tmp, &to)
                .map_err(io_err("renaming", &tmp))?;
            stored.insert(entry.stored_name());
            meta.info.files_copied += 1;
            meta.info.bytes_copied += size;
            entry
        };
        meta.info.files += 1;
        meta.info.bytes += size;
        meta.files.push(entry);
        Ok(())
    }

    /// Removes every file in `dir` (the staging directory).
    fn clear_dir(&self, dir: &Path) -> Result<()> {
        for name in self.fs.list(dir).map_err(io_err("listing", dir))? {
            let p = dir.join(name);
            self.fs.remove(&p).map_err(io_err("removing", &p))?;
        }
        Ok(())
    }

    /// Re-reads every file of backup `id` and checks its size and
    /// checksum. `Corruption` naming the first damaged or missing store
    /// file (and the database file it holds) or damaged metadata; `Io`
    /// if a file cannot be read.
    pub fn verify(&self, id: u64) -> Result<BackupInfo> {
        let meta = self.read_meta(id)?;
        for f in &meta.files {
            self.check_stored(f)?;
        }
        Ok(meta.info)
    }

    fn check_stored(&self, f: &BackupFile) -> Result<()> {
        let path = self.store().join(f.stored_name());
        if !self.fs.exists(&path) {
            return Err(Error::corruption(
                &path,
                0,
                format!("{} is missing", f.name),
            ));
        }
        let file = self.fs.open(&path).map_err(io_err("opening", &path))?;
        if file.len() != f.size {
            return Err(Error::corruption(
                &path,
                0,
                format!("{} holds {} bytes, not {}", f.name, file.len(), f.size),
            ));
        }
        let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        read_chunks(&*file, &path, &mut |c| d.update(c))?;
        let crc = d.finalize() as u32;
        if crc != f.crc32c {
            return Err(Error::corruption(
                &path,
                0,
                format!("{}: checksum {crc:08x}, not {:08x}", f.name, f.crc32c),
            ));
        }
        Ok(())
    }

    /// Deletes backup `id`: its metadata first (durably), then the store
    /// files no other backup lists (and any no backup lists at all). If
    /// another backup's metadata cannot be read, `id` is gone but no
    /// store file is removed, and that error is returned: files a damaged
    /// metadata file may list are never taken from it.
    pub fn delete(&self, id: u64) -> Result<()> {
        let _lock = self
            .fs
            .lock(&self.dir)
            .map_err(io_err("locking", &self.dir))?;
        let path = self.meta_path(id);
        if !self.fs.exists(&path) {
            return Err(Error::InvalidArgument(format!(
                "no backup {id} in {}",
                self.dir.display()
            )));
        }
        self.fs.remove(&path).map_err(io_err("removing", &path))?;
        self.fs
            .sync_dir(&self.dir)
            .map_err(io_err("syncing", &self.dir))?;
        let mut keep = BTreeSet::new();
        for other in self.ids()? {
            keep.extend(
                self.read_meta(other)?
                    .files
                    .iter()
                    .map(BackupFile::stored_name),
            );
        }
        let store = self.store();
        for name in self.fs.list(&store).map_err(io_err("listing", &store))? {
            if !keep.contains(&name) {
                let p = store.join(&name);
                self.fs.remove(&p).map_err(io_err("removing", &p))?;
            }
        }
        self.fs.sync_dir(&store).map_err(io_err("syncing", &store))
    }

    /// Copies backup `id` into `target` (missing or empty), checking each
    /// file's checksum as it is copied; CURRENT is written last, so the
    /// directory is a database (opened with `Db::open`, holding exactly
    /// the backup's writes) once this returns `Ok`, and never one
    /// partly. `Corruption` as `verify` reports it; `InvalidArgument` if
    /// `target` holds files.
    pub fn restore(&self, id: u64, target: impl AsRef<Path>) -> Result<BackupInfo> {
        let target = target.as_ref();
        let meta = self.read_meta(id)?;
        crate::checkpoint::prepare_dir(&*self.fs, target)?;
        let (current, rest): (Vec<_>, Vec<_>) =
            meta.files.iter().partition(|f| f.name == "CURRENT");
        for f in rest.into_iter().chain(current) {
            if f.name == "CURRENT" {
                self.fs
                    .sync_dir(target)
                    .map_err(io_err("syncing", target))?;
            }
            let from = self.store().join(f.stored_name());
            let to = target.join(&f.name);
            if !self.fs.exists(&from) {
                return Err(Error::corruption(
                    &from,
                    0,
                    format!("{} is missing", f.name),
                ));
            }
            let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
            let size = copy_across(&*self.fs, &from, &*self.fs, &to, &mut |c| d.update(c))?;
            let crc = d.finalize() as u32;
            if size != f.size || crc != f.crc32c {
                return Err(Error::corruption(
                    &from,
                    0,
                    format!(
                        "{}: {size} bytes with checksum {crc:08x}, not {} with {:08x}",
                        f.name, f.size, f.crc32c
                    ),
                ));
            }
        }
        self.fs
            .sync_dir(target)
            .map_err(io_err("syncing", target))?;
        Ok(meta.info)
    }
}

/// Reads the whole of `file` in chunks, showing each to `seen`.
fn read_chunks(
    file: &dyn crate::io::FileRead,
    path: &Path,
    seen: &mut dyn FnMut(&[u8]),
) -> Result<()> {
    let len = file.len();
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut at = 0u64;
    while at < len {
        let n = usize::try_from(len - at).map_or(buf.len(), |left| left.min(buf.len()));
        file.read_exact_at(&mut buf[..n], at)
            .map_err(io_err("reading", path))?;
        seen(&buf[..n]);
        at += n as u64;
    }
    Ok(())
}

/// The metadata file's bytes (format.md §Backups).
fn encode_meta(m: &Meta) -> Vec<u8> {
    let i = &m.info;
    let mut s = format!(
        "{META_MAGIC} {BACKUP_FORMAT}\nid {}\nseqno {}\ndb-id {:016x}\ncreated {}\ncopied {} {}\nfiles {} {}\n",
        i.id,
        i.seqno,
        i.db_id,
        i.created_unix_secs,
        i.files_copied,
        i.bytes_copied,
        i.files,
        i.bytes
    );
    for f in &m.files {
        s.push_str(&format!("file {} {} {:08x}\n", f.name, f.size, f.crc32c));
    }
    let crc = crc_fast::crc32_iscsi(s.as_bytes());
    s.push_str(&format!("crc {crc:08x}\n"));
    s.into_bytes()
}

/// Parses metadata; `Err((offset, detail))` for bytes that are damaged
/// or not of this format.
fn decode_meta(bytes: &[u8]) -> std::result::Result<Meta, (u64, String)> {
    let text =
        std::str::from_utf8(bytes).map_err(|e| (e.valid_up_to() as u64, "not UTF-8".to_owned()))?;
    let body_end = text
        .strip_suffix('\n')
        .and_then(|t| t.rfind('\n'))
        .map(|i| i + 1)
        .ok_or((0, "no checksum line".to_owned()))?;
    let (body, trailer) = text.split_at(body_end);
    let stored = trailer
        .strip_prefix("crc ")
        .and_then(|t| t.strip_suffix('\n'))
        .filter(|t| t.len() == 8)
        .and_then(|t| u32::from_str_radix(t, 16).ok())
        .ok_or((body_end as u64, "bad checksum line".to_owned()))?;
    let crc = crc_fast::crc32_iscsi(body.as_bytes());
    if crc != stored {
        return Err((
            body_end as u64,
            format!("checksum {crc:08x}, stored {stored:08x}"),
        ));
    }
    // The checksum holds: the bytes are ours, written by `encode_meta`.
    // Still parsed with care: a future format is refused by its number.
    let mut lines = body.lines();
    let mut field = |key: &str| -> std::result::Result<Vec<&str>, (u64, String)> {
        let line = lines.next().ok_or((0, format!("missing {key}")))?;
        let mut parts = line.split(' ');
        if parts.next() != Some(key) {
            return Err((0, format!("expected {key}, found {line:?}")));
        }
        Ok(parts.collect())
    };
    let num = |s: Option<&&str>, what: &str| -> std::result::Result<u64, (u64, String)> {
        s.and_then(|s| s.parse().ok())
            .ok_or((0, format!("bad {what}")))
    };
    let magic = field(META_MAGIC)?;
    if num(magic.first(), "format")? != u64::from(BACKUP_FORMAT) {
        return Err((0, format!("backup format {magic:?} is not {BACKUP_FORMAT}")));
    }
    let id = num(field("id")?.first(), "id")?;
    let seqno = num(field("seqno")?.first(), "seqno")?;
    let db_id = field("db-id")?
        .first()
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or((0, "bad db-id".to_owned()))?;
    let created = num(field("created")?.first(), "created")?;
    let copied = field("copied")?;
    let (files_copied, bytes_copied) = (
        num(copied.first(), "copied")?,
        num(copied.get(1), "copied")?,
    );
    let counts = field("files")?;
    let (nfiles, bytes) = (num(counts.first(), "files")?, num(counts.get(1), "files")?);
    let mut files = Vec::new();
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        let [kw, name, size, crc] = parts.as_slice() else {
            return Err((0, format!("bad file line {line:?}")));
        };
        let crc32c =
            u32::from_str_radix(crc, 16).map_err(|_| (0, format!("bad checksum in {line:?}")))?;
        if *kw != "file" || !database_file(name) {
            return Err((0, format!("bad file line {line:?}")));
        }
        files.push(BackupFile {
            name: (*name).to_owned(),
            size: num(Some(size), "size")?,
            crc32c,
        });
    }
    if files.len() as u64 != nfiles || files.iter().map(|f| f.size).sum::<u64>() != bytes {
        return Err((0, "file count or bytes do not match the list".to_owned()));
    }
    Ok(Meta {
        info: BackupInfo {
            id,
            seqno,
            db_id,
            created_unix_secs: created,
            files: nfiles,
            bytes,
            files_copied,
            bytes_copied,
        },
        files,
    })
}

/// True for the names a backup may hold: the files of a checkpoint. A
/// name with a path in it is never one (restore writes only into its
/// target).
fn database_file(name: &str) -> bool {
    matches!(
        files::parse(name),
        FileKind::Current
            | FileKind::Manifest(_)
            | FileKind::Journal(_)
            | FileKind::Table(_)
            | FileKind::Values(_)
            | FileKind::Stream(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of format.md §Backup metadata.
    fn example() -> Meta {
        let file = |name: &str, size, crc32c| BackupFile {
            name: name.to_owned(),
            size,
            crc32c,
        };
        Meta {
            info: BackupInfo {
                id: 1,
                seqno: 3,
                db_id: 0x5f1e_0c2a_b39d_7e41,
                created_unix_secs: 1_764_300_000,
                files: 4,
                bytes: 1391,
                files_copied: 4,
                bytes_copied: 1391,
            },
            files: vec![
                file("000005.table", 1233, 0x0b9f_3e27),
                file("000007.journal", 0, 0),
                file("MANIFEST-000008", 133, 0x77c1_a2d0),
                file("CURRENT", 25, 0xd41e_98aa),
            ],
        }
    }

    #[test]
    fn metadata_example_matches_format_md() {
        let text = String::from_utf8(encode_meta(&example())).expect("utf-8");
        let doc = include_str!("../../../docs/format.md");
        assert!(
            doc.contains(&text),
            "format.md §Backup metadata shows:\n{text}"
        );
    }

    #[test]
    fn metadata_round_trips_and_every_cut_or_flip_is_refused() {
        let m = example();
        let bytes = encode_meta(&m);
        assert_eq!(decode_meta(&bytes), Ok(m));
        for cut in 0..bytes.len() {
            assert!(decode_meta(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(decode_meta(&b).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn metadata_refuses_names_with_paths_and_other_formats() {
        let mut m = example();
        m.files[0].name = "../000005.table".to_owned();
        assert!(decode_meta(&encode_meta(&m)).is_err());
        let text = String::from_utf8(encode_meta(&example()))
            .expect("utf-8")
            .replace("cairndb-backup 1\n", "cairndb-backup 2\n");
        let body = &text[..text.rfind("crc ").expect("crc line")];
        let resealed = format!("{body}crc {:08x}\n", crc_fast::crc32_iscsi(body.as_bytes()));
        let err = decode_meta(resealed.as_bytes()).expect_err("format 2");
        assert!(err.1.contains("format"), "{err:?}");
    }
}
