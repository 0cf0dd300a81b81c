//! Checkpoints: an openable copy of the database at one seqno, made while
//! writes go on (`Db::checkpoint`).
//!
//! Steps (`Inner::checkpoint`):
//! 1. **Check the target**: a directory that is missing or empty.
//! 2. **Flush through now**: every write acknowledged before the call
//!    (`last_seqno` at the start) is moved into tables: the memtable is
//!    sealed (unless the seqno is already in a sealed one) and its flush
//!    waited for. Writes go on meanwhile into the next memtable.
//! 3. **Take the version**: the version and `table_seqno_max`, read under
//!    one state lock. Flushes run oldest first and each moves one whole
//!    memtable, so the version's tables hold exactly the writes up to
//!    `table_seqno_max` (the newest version of each key up to it): that
//!    is the checkpoint's seqno. Holding the `Arc<Version>` keeps every
//!    file it names from deletion or recycling until the copy is done.
//! 4. **Files**: tables, values files, value streams and the sealed
//!    journals the version names (they hold separated values) are never
//!    written again once a version names them, so they are hard-linked
//!    (`Fs::hard_link`; copied where that fails, e.g. across file
//!    systems, and each copy synced). A journal is the one file the
//!    source could write again: once obsolete it may be renamed and
//!    overwritten in place for reuse. The source checks a journal's link
//!    count first (`Fs::link_count`) and deletes one that has another
//!    name instead, so a checkpoint's link never sees an overwrite.
//! 5. **Manifest**: a fresh manifest holding the version as one edit
//!    (`write_manifest`, as a manifest rewrite does) with the checkpoint's
//!    seqno and a journal floor above every journal copied (none is
//!    replayed: they are value segments only), then CURRENT, durably —
//!    the directory is a database from that sync on, not before.
//!
//! Cost: the memtable flush and one link per file; not the size of the
//! database.
//!
//! The checkpoint has the source's database identity (its tables carry
//! it), and its own manifest and journals: it is opened like any database
//! and diverges from the source from its first write.

use crate::db::Db;
use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::io::Fs;
use crate::version::Version;
use crate::version::files;
use crate::version::segments::SegmentKind;
use crate::write::manifest::{ManifestStart, write_manifest};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bytes a file is copied in per read and append.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// Longest wait for the flush thread in one step; the wait loops (it
/// ends on a background error, a pause, or close).
const FLUSH_WAIT: Duration = Duration::from_millis(20);

/// What `Db::checkpoint_with_stats` made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The seqno the checkpoint holds every write up to, and none after.
    pub seqno: u64,
    /// Files hard-linked, and their bytes (no data written).
    pub files_linked: u64,
    pub bytes_linked: u64,
    /// Files copied (those a link failed for) and their bytes; the
    /// manifest and CURRENT are written, not counted.
    pub files_copied: u64,
    pub bytes_copied: u64,
    /// Time spent moving acknowledged writes into tables (step 2: the
    /// memtable's seal and flush, and any flush queued before it).
    pub flush_time: Duration,
    /// Time spent linking and copying files and writing the manifest
    /// (steps 4 and 5).
    pub files_time: Duration,
}

impl Db {
    /// Makes a consistent, openable copy of the database in `dir`, which
    /// must be missing or empty, while writes go on; returns its seqno.
    /// The copy holds exactly the writes with seqnos up to it: every write
    /// acknowledged before this call, and none acknowledged after it
    /// returned. Unchanging files are hard-linked where `dir` is on the
    /// same file system, so the cost is a memtable flush and a link per
    /// file. The directory is a
    /// database once this returns `Ok` (files, manifest, CURRENT and
    /// directory synced); after a failure or a crash before then it may
    /// hold a partial copy without CURRENT, to be deleted.
    ///
    /// Errors: `InvalidArgument` if `dir` holds files; `Io` from reading,
    /// linking or writing files; the stored error of the handle if
    /// background work failed (the flush could not run); `Closed`.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<u64> {
        Ok(self.checkpoint_with_stats(dir)?.seqno)
    }

    /// [`Db::checkpoint`], reporting how many files and bytes were linked
    /// and copied.
    pub fn checkpoint_with_stats(&self, dir: impl AsRef<Path>) -> Result<Checkpoint> {
        self.inner().checkpoint(dir.as_ref())
    }
}

/// A version held at one seqno (`Inner::freeze`): while it is held, no
/// file it names is deleted, recycled or written.
pub(crate) struct Frozen {
    pub seqno: u64,
    version: Arc<Version>,
}

/// One file of a frozen version, in the database directory.
pub(crate) struct FrozenFile {
    /// The file's name (the same in a checkpoint).
    pub name: String,
    pub path: PathBuf,
}

impl Inner {
    pub(crate) fn checkpoint(&self, dir: &Path) -> Result<Checkpoint> {
        let fs = &*self.fs;
        prepare_dir(fs, dir)?;
        let start = Instant::now();
        let frozen = self.freeze()?;
        let frozen_at = Instant::now();
        let mut made = Checkpoint {
            seqno: frozen.seqno,
            flush_time: frozen_at - start,
            ..Checkpoint::default()
        };
        for file in self.frozen_files(&frozen) {
            let to = dir.join(&file.name);
            if fs.hard_link(&file.path, &to).is_ok() {
                let len = fs
                    .open(&to)
                    .map_err(|e| Error::io(format!("opening {}", to.display()), e))?
                    .len();
                made.files_linked += 1;
                made.bytes_linked += len;
                continue;
            }
            // A failed link may have left nothing, or (never on POSIX) a
            // name.
            let _ = fs.remove(&to);
            made.bytes_copied += copy_file(fs, &file.path, &to)?;
            made.files_copied += 1;
        }
        // `write_manifest` syncs the directory after CURRENT's rename,
        // which makes the links and copies above durable with it.
        self.write_frozen_manifest(fs, dir, &frozen)?;
        made.files_time = frozen_at.elapsed();
        Ok(made)
    }

    /// Flushes every write acknowledged before the call into tables and
    /// holds the version that has them, with its seqno (steps 2 and 3).
    pub(crate) fn freeze(&self) -> Result<Frozen> {
        let target = self.last_seqno.load(Ordering::Acquire);
        self.flush_through(target)?;
        let (version, seqno) = {
            let s = self.state.read();
            // Every journal the version names is sealed (its memtable was
            // flushed), so none is appended to again.
            assert!(
                s.version.segments.values().all(|seg| {
                    seg.file.kind() != SegmentKind::Journal || seg.file.number < s.mem.journal()
                }),
                "a version names only sealed journals"
            );
            (s.version.clone(), s.table_seqno_max)
        };
        assert!(
            seqno >= target,
            "the tables hold every write acknowledged before the checkpoint"
        );
        Ok(Frozen { seqno, version })
    }

    /// The files of `frozen`: tables, then segments.
    pub(crate) fn frozen_files(&self, frozen: &Frozen) -> Vec<FrozenFile> {
        let mut out = Vec::new();
        for table in frozen.version.levels.iter().flatten() {
            let path = files::table(&self.dir, table.number);
            out.push(FrozenFile {
                name: file_name(&path),
                path,
            });
        }
        for seg in frozen.version.segments.values() {
            let path = seg.file.path();
            out.push(FrozenFile {
                name: file_name(&path),
                path,
            });
        }
        out
    }

    /// Writes into `dir` on `fs`, durably: an empty journal at the
    /// journal floor (recovery requires the floor's journal), a fresh
    /// manifest describing `frozen` whole, and CURRENT naming it (step 5).
    /// Their numbers are past every file of the version, so no journal of
    /// the version is replayed when the copy is opened: they are value
    /// segments only. Returns the names written, CURRENT last.
    pub(crate) fn write_frozen_manifest(
        &self,
        fs: &dyn Fs,
        dir: &Path,
        frozen: &Frozen,
    ) -> Result<[String; 3]> {
        let journal = self.new_file_number();
        let path = files::journal(dir, journal);
        let mut file = fs
            .create(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        file.sync()
            .map_err(|e| Error::io(format!("syncing {}", path.display()), e))?;
        drop(file);
        let number = self.new_file_number();
        let next_file = self.next_file.load(Ordering::SeqCst);
        write_manifest(
            fs,
            dir,
            number,
            &frozen.version,
            &ManifestStart {
                db_id: self.db_id,
                journal_floor: journal,
                next_file,
                last_seqno: frozen.seqno,
            },
        )?;
        Ok([
            file_name(&path),
            files::manifest_name(number),
            "CURRENT".to_owned(),
        ])
    }

    /// Returns once the tables hold every write up to `target`: seals the
    /// active memtable if it may hold some of them, then waits for the
    /// flush thread. A writer may seal the memtable between the check and
    /// the seal; the seal then takes the next one (a small extra table).
    fn flush_through(&self, target: u64) -> Result<()> {
        let flushed = |inner: &Inner| inner.state.read().table_seqno_max >= target;
        if flushed(self) {
            return Ok(());
        }
        self.check_writable()?;
        // An empty active memtable means `target` is in a sealed one
        // (sealed memtables hold the older seqnos), whose flush is due.
        if !self.state.read().mem.is_empty() {
            self.seal_memtable()?;
        }
        let mut bg = self.bg.lock();
        loop {
            if let Some(e) = bg.error.as_ref().or(bg.paused.as_ref()) {
                return Err(e.duplicate());
            }
            if bg.shutdown {
                return Err(Error::Closed);
            }
            {
                let s = self.state.read();
                if s.table_seqno_max >= target {
                    return Ok(());
                }
                // A published seqno is in a memtable until the flush that
                // moves it raises `table_seqno_max` (one install).
                assert!(
                    !(s.mem.is_empty() && s.sealed.is_empty()),
                    "seqno {target} is in no memtable and no table"
                );
            }
            self.bg_cv.wait_for(&mut bg, FLUSH_WAIT);
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .expect("database file names are UTF-8")
}

/// Creates `dir` if missing (and syncs its parent, so the new directory's
/// name is durable with what goes into it); `InvalidArgument` if it holds
/// anything.
pub(crate) fn prepare_dir(fs: &dyn Fs, dir: &Path) -> Result<()> {
    if fs.exists(dir) {
        let names = fs
            .list(dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        if !names.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{} exists and is not empty",
                dir.display()
            )));
        }
        return Ok(());
    }
    fs.create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let parent = match dir.parent() {
        Some(p) if p.as_os_str().is_empty() => Path::new("."),
        Some(p) => p,
        None => return Ok(()),
    };
    fs.sync_dir(parent)
        .map_err(|e| Error::io(format!("syncing {}", parent.display()), e))
}

/// Copies the file at `from` to a new file `to` and syncs it; returns the
/// bytes copied. `to`'s name is durable only once its directory is synced.
pub(crate) fn copy_file(fs: &dyn Fs, from: &Path, to: &Path) -> Result<u64> {
    copy_across(fs, from, fs, to, &mut |_| {})
}

/// `copy_file` from `from` on `src` to `to` on `dst`, showing every chunk
/// to `seen` (a checksum) as it goes.
pub(crate) fn copy_across(
    src: &dyn Fs,
    from: &Path,
    dst: &dyn Fs,
    to: &Path,
    seen: &mut dyn FnMut(&[u8]),
) -> Result<u64> {
    let ctx = |what: &str, p: &Path| format!("{what} {}", p.display());
    let file = src
        .open(from)
        .map_err(|e| Error::io(ctx("opening", from), e))?;
    let mut out = dst
        .create(to)
        .map_err(|e| Error::io(ctx("creating", to), e))?;
    let len = file.len();
    let mut buf = vec![0u8; COPY_CHUNK_BYTES];
    let mut at = 0u64;
    while at < len {
        let n = usize::try_from(len - at).map_or(buf.len(), |left| left.min(buf.len()));
        let chunk = &mut buf[..n];
        file.read_exact_at(chunk, at)
            .map_err(|e| Error::io(ctx("reading", from), e))?;
        seen(chunk);
        out.append(chunk)
            .map_err(|e| Error::io(ctx("writing", to), e))?;
        at += n as u64;
    }
    out.sync().map_err(|e| Error::io(ctx("syncing", to), e))?;
    Ok(len)
}
