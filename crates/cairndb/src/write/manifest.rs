//! The manifest writer: version edits logged (appended and synced) before
//! they are installed, and a fresh manifest started when one grows large.

use crate::engine::{Inner, State};
use crate::error::{Error, Result};
use crate::format::log::{RecordKind, encode_record};
use crate::format::manifest::{Edit, MANIFEST_FORMAT};
use crate::io::{self, FileWrite, Fs};
use crate::limits::MANIFEST_BYTES_MAX;
use crate::version::{Version, files};
use std::path::Path;
use std::sync::Arc;

/// The open manifest, behind `Inner::manifest`.
pub(crate) struct Manifest {
    pub file: Box<dyn FileWrite>,
    pub number: u64,
    /// Journals numbered below this hold nothing unflushed.
    pub journal_floor: u64,
    /// Highest seqno recorded in any edit.
    pub last_seqno: u64,
    /// Set (under this lock) when a manifest append, sync or rewrite
    /// failed: no edit may be appended after an unknown tail.
    pub poisoned: bool,
}

/// The fields a fresh manifest's first edit carries besides the version.
pub(crate) struct ManifestStart {
    /// The database's identity (never 0).
    pub db_id: u64,
    pub journal_floor: u64,
    pub next_file: u64,
    pub last_seqno: u64,
}

/// Creates manifest `number` holding one edit that describes `version`
/// whole, syncs it, and points CURRENT at it (durably). Returns the open
/// manifest writer.
pub(crate) fn write_manifest(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    version: &Version,
    start: &ManifestStart,
) -> Result<Manifest> {
    assert_ne!(start.db_id, 0, "a database identity is never 0");
    let mut edit = version.snapshot_edit();
    edit.format = Some(MANIFEST_FORMAT);
    edit.db_id = Some(start.db_id);
    edit.journal = Some(start.journal_floor);
    edit.next_file = Some(start.next_file);
    edit.last_seqno = Some(start.last_seqno);
    let mut rec = Vec::new();
    encode_record(&mut rec, RecordKind::Edit, &edit.encode());
    let name = files::manifest_name(number);
    let path = dir.join(&name);
    let ctx = |e| Error::io(format!("writing manifest {}", path.display()), e);
    let mut file = fs.create(&path).map_err(ctx)?;
    file.append(&rec).map_err(ctx)?;
    file.sync().map_err(ctx)?;
    io::write_file_durably(
        fs,
        &files::current(dir),
        files::current_contents(number).as_bytes(),
    )
    .map_err(|e| Error::io("updating CURRENT", e))?;
    Ok(Manifest {
        file,
        number,
        journal_floor: start.journal_floor,
        last_seqno: start.last_seqno,
        poisoned: false,
    })
}

/// Manifest blocks an edit reserves past its own: most edits are well
/// under a KiB, so this covers many of them.
const MANIFEST_RESERVE_AHEAD: u64 = 64 << 10;

impl Manifest {
    /// Appends `edit` as one record and syncs it. Its blocks are reserved
    /// first: a full device refuses the edit there, the manifest as it was
    /// and usable. A failed append or sync leaves the manifest's tail
    /// unknown: it is marked poisoned, and no edit may follow.
    fn append(&mut self, edit: &Edit) -> std::io::Result<()> {
        let mut rec = Vec::new();
        encode_record(&mut rec, RecordKind::Edit, &edit.encode());
        let need = self.file.len() + rec.len() as u64;
        self.file.reserve(need, MANIFEST_RESERVE_AHEAD)?;
        self.file
            .append(&rec)
            .and_then(|()| self.file.sync())
            .inspect_err(|_| self.poisoned = true)
    }
}

impl Inner {
    /// Records a clean close in the manifest, as its last edit: journal
    /// `number` holds exactly `len` bytes of intact records and no later
    /// journal holds a write. The next open then reports damage anywhere
    /// in those journals instead of cutting it as a torn tail
    /// (durability.md §Clean close). Called once the background threads
    /// have stopped, so no edit follows it.
    pub fn log_clean_close(&self, number: u64, len: u64) -> Result<()> {
        let mut m = self.manifest.lock();
        if m.poisoned {
            return Ok(());
        }
        let edit = Edit {
            clean_close: Some((number, len)),
            totals: Some(self.write_totals()),
            ..Edit::default()
        };
        m.append(&edit)
            .map_err(|e| Error::io("recording the clean close in the manifest", e))
    }

    /// Whether `e`, from `log_and_apply`, is the manifest refusing an edit
    /// for want of space with nothing appended: the files the edit would
    /// have added are the caller's to delete, and the work is retried.
    pub fn manifest_refused(&self, e: &Error) -> bool {
        e.is_no_space() && !self.manifest.lock().poisoned
    }

    /// Logs `edit` to the manifest (synced), then installs the new version
    /// and runs `install` on the state under the same write lock. Tables
    /// the edit removes are marked obsolete and deleted when unreferenced.
    /// A failed manifest write poisons the handle.
    pub fn log_and_apply(&self, mut edit: Edit, install: impl FnOnce(&mut State)) -> Result<()> {
        let mut m = self.manifest.lock();
        if m.poisoned {
            return Err(Error::Poisoned("an earlier manifest write failed".into()));
        }
        edit.next_file = Some(self.next_file.load(std::sync::atomic::Ordering::SeqCst));
        edit.totals = Some(self.write_totals());
        let base = self.state.read().version.clone();
        // The engine builds every edit against the current version: one
        // that does not apply is the engine's bug.
        let (version, removed) = match base.apply(&edit, &self.reaper) {
            Ok(applied) => applied,
            Err(d) => panic!("a version edit does not apply to the current version: {d}"),
        };
        debug_assert_eq!(version.check(), Ok(()));
        if let Err(e) = m.append(&edit) {
            // Refused for want of space, the manifest is as it was: the
            // caller's work is retried later (`Inner::manifest_refused`).
            if m.poisoned {
                self.poison("manifest write", &e);
            }
            return Err(Error::io("writing the manifest", e));
        }
        if let Some(j) = edit.journal {
            m.journal_floor = m.journal_floor.max(j);
        }
        if let Some(s) = edit.last_seqno {
            m.last_seqno = m.last_seqno.max(s);
        }
        {
            let pressure = crate::compaction::write_pressure(
                &version,
                &self.opts,
                crate::compaction::L0Triggers::now(self),
            );
            let mut s = self.state.write();
            s.version = Arc::new(version);
            s.pressure = pressure;
            install(&mut s);
            self.refresh_view(&mut s);
        }
        removed.mark_obsolete();
        if m.file.len() > MANIFEST_BYTES_MAX
            && let Err(e) = self.rewrite_manifest(&mut m)
        {
            // CURRENT may name either manifest now: append to neither.
            m.poisoned = true;
            return Err(e);
        }
        Ok(())
    }

    /// Starts a fresh manifest holding the current version as one edit.
    fn rewrite_manifest(&self, m: &mut Manifest) -> Result<()> {
        let number = self.new_file_number();
        let version = self.state.read().version.clone();
        let next_file = self.next_file.load(std::sync::atomic::Ordering::SeqCst);
        let fresh = write_manifest(
            &*self.fs,
            &self.dir,
            number,
            &version,
            &ManifestStart {
                db_id: self.db_id,
                journal_floor: m.journal_floor,
                next_file,
                last_seqno: m.last_seqno,
            },
        )
        .inspect_err(|e| self.set_bg_error(Error::Poisoned(format!("manifest rewrite: {e}"))))?;
        let old = std::mem::replace(m, fresh);
        let _ = self
            .fs
            .remove(&self.dir.join(files::manifest_name(old.number)));
        Ok(())
    }
}
