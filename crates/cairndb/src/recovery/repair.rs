//! `Db::repair`: rebuilds a database whose manifest is lost or damaged
//! from its tables and journals (docs/durability.md §Repair), like
//! LevelDB's `RepairDB`.
//!
//! `repair` in steps:
//! 1. take the writer lock and list the directory;
//! 2. salvage what the old manifest still says: the longest prefix of
//!    intact edits of the manifest CURRENT names (else of the newest
//!    manifest file) gives the identity, keyspaces, last seqno and where
//!    each table it names lived;
//! 3. read every table whole (every block checksum, key order, entry
//!    count, the database it was written by and the number it was written
//!    as, that the value segments it points into exist); a table that fails
//!    is moved into `lost/`, never deleted;
//! 4. move aside tables that hold an entry another kept table holds too
//!    (what an interrupted or unrecorded compaction leaves beside its
//!    inputs): two copies of one (key, seqno) would stop compaction;
//! 5. replay every journal as far as its records are intact (with a seed
//!    solved from its first header if the identity is unknown), keeping the
//!    batches newer than everything in the tables, into new level-0
//!    tables;
//! 6. write a fresh manifest naming every kept table, and CURRENT;
//! 7. open the result: if the tables could not keep the levels the
//!    salvaged manifest gave them, merge them into one sorted level
//!    (`Db::compact`), since level-0 lookups take a table's number for
//!    its age, which tables from several levels do not honour.
//!
//! Invariants: nothing a kept table or its values need is removed; every
//! file repair gives up on is moved into `lost/` (copied, for a journal
//! that holds values kept tables point to); the new manifest is written
//! only after every table it names is synced and in place.

// Repair reads untrusted files: it may not panic on their bytes.
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)
)]

use super::{Listing, Recovered, StreamFiles, StreamMiss, caches, flush_during_open};
use crate::error::{Error, Result};
use crate::format::batch as batch_codec;
use crate::format::key::{self, Kind};
use crate::format::log::{self, Framing, RecordKind, Tail};
use crate::format::manifest::{Edit, KeyspaceRecord, TableRecord};
use crate::format::table::{Table, TableKeyspace, TableOptions};
use crate::format::vptr::ValuePtr;
use crate::io::Fs;
use crate::keyspace::{KeyspaceOptions, Registry, Separation, table_options};
use crate::limits::SEQNO_MAX;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::version::files::{self, FileKind};
use crate::version::{Reaper, Version};
use crate::write::manifest::{ManifestStart, write_manifest};
use crate::write::{Separate, insert_batch};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Name of the subdirectory files repair gives up on are moved into.
pub const LOST_DIR: &str = "lost";

/// What [`crate::Db::repair`] found and did.
#[derive(Debug, Default, Clone)]
pub struct RepairReport {
    /// The manifest whose edits were salvaged, if any was readable.
    pub manifest: Option<ManifestSalvage>,
    /// The database identity the repaired manifest names.
    pub db_id: u64,
    /// Tables kept, in number order.
    pub tables_kept: Vec<TableKept>,
    /// Tables moved into `lost/`, with the reason.
    pub tables_lost: Vec<TableLost>,
    /// Tables the salvaged manifest names that the directory lacks.
    pub tables_missing: Vec<u64>,
    /// Journals read, in number order.
    pub journals: Vec<JournalReplay>,
    /// Tables written from journal records.
    pub tables_written: u64,
    /// Keyspaces of the repaired database (the default one first).
    pub keyspaces: Vec<String>,
    /// The highest seqno of the repaired database.
    pub last_seqno: u64,
    /// Bytes of tables moved aside and of journals past their intact
    /// records: data the repaired database does not hold.
    pub bytes_lost: u64,
    /// Whether the tables were merged into one sorted level afterwards
    /// (their old levels could not be kept).
    pub compacted: bool,
    /// Anything else worth knowing (a table assigned to the default
    /// keyspace, a keyspace made up for journal records, ...).
    pub notes: Vec<String>,
}

/// The part of an old manifest repair could read.
#[derive(Debug, Clone)]
pub struct ManifestSalvage {
    pub name: String,
    /// Edits applied, and the file's length.
    pub edits: u64,
    pub bytes: u64,
    /// Offset where the intact, applicable edits end, if before the end
    /// of the file, and why.
    pub damaged_at: Option<(u64, String)>,
}

/// A table repair kept.
#[derive(Debug, Clone)]
pub struct TableKept {
    pub number: u64,
    pub bytes: u64,
    pub entries: u64,
    pub keyspace: String,
    /// The level it was given.
    pub level: usize,
}

/// A table repair moved into `lost/`.
#[derive(Debug, Clone)]
pub struct TableLost {
    pub number: u64,
    pub bytes: u64,
    /// Where it is now.
    pub moved_to: PathBuf,
    /// Why: the error the check met (naming file and offset), or the
    /// table whose entries it duplicates.
    pub reason: String,
}

/// What repair took from one journal.
#[derive(Debug, Clone, Default)]
pub struct JournalReplay {
    pub number: u64,
    pub bytes: u64,
    /// Intact records, and the batches among them replayed (the others
    /// were older than the tables: already in them).
    pub records: u64,
    pub batches_replayed: u64,
    pub ops_replayed: u64,
    /// Where replay stopped short of the end of the file for damage, and
    /// the bytes from there on: a damaged record (followed by intact
    /// ones), an unreadable end of a journal a later journal follows
    /// (sealed journals end in an intact record), or a batch that could
    /// not be replayed. The journal is copied into `lost/`.
    pub lost_at: Option<u64>,
    pub bytes_lost: u64,
    /// Bytes after the last intact record of the newest journal holding
    /// records (or a whole later journal holding none): the torn tail of
    /// an interrupted append, writes never acknowledged as synced, or
    /// space not yet written. Not counted as lost, as `open` does not.
    pub torn_tail: u64,
    /// Set if the replay stopped early for another reason.
    pub note: Option<String>,
}

impl RepairReport {
    /// True if no data was lost: no table moved aside or missing, no
    /// journal bytes past its intact records. (A lost manifest whose
    /// tables and journals were all intact loses nothing.)
    pub fn lost_nothing(&self) -> bool {
        self.tables_lost.is_empty() && self.tables_missing.is_empty() && self.bytes_lost == 0
    }
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.manifest {
            Some(m) => {
                write!(f, "manifest {}: {} edits salvaged", m.name, m.edits)?;
                match &m.damaged_at {
                    Some((at, why)) => writeln!(
                        f,
                        ", unreadable from offset {at} of {} bytes ({why})",
                        m.bytes
                    )?,
                    None => writeln!(f, ", intact")?,
                }
            }
            None => writeln!(
                f,
                "manifest: none readable; rebuilt from tables and journals"
            )?,
        }
        writeln!(f, "database identity: {:#x}", self.db_id)?;
        let kept: u64 = self.tables_kept.iter().map(|t| t.bytes).sum();
        writeln!(
            f,
            "tables kept: {} ({kept} bytes); written from journals: {}",
            self.tables_kept.len(),
            self.tables_written
        )?;
        for t in &self.tables_lost {
            writeln!(
                f,
                "table {} moved to {} ({} bytes): {}",
                t.number,
                t.moved_to.display(),
                t.bytes,
                t.reason
            )?;
        }
        for n in &self.tables_missing {
            writeln!(f, "table {n} named by the manifest is missing")?;
        }
        for j in &self.journals {
            write!(
                f,
                "journal {}: {} records, {} batches ({} ops) replayed",
                j.number, j.records, j.batches_replayed, j.ops_replayed
            )?;
            if let Some(at) = j.lost_at {
                write!(f, "; {} bytes from offset {at} lost", j.bytes_lost)?;
            }
            if j.torn_tail > 0 {
                write!(f, "; torn tail of {} bytes", j.torn_tail)?;
            }
            if let Some(n) = &j.note {
                write!(f, "; {n}")?;
            }
            writeln!(f)?;
        }
        writeln!(f, "keyspaces: {}", self.keyspaces.join(", "))?;
        writeln!(f, "last seqno: {}", self.last_seqno)?;
        if self.compacted {
            writeln!(f, "tables merged into one sorted level")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        write!(f, "bytes lost: {}", self.bytes_lost)
    }
}

/// Repairs the database at `dir` (`Db::repair`).
/// Where a repair is, as `Db::repair_with` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepairProgress {
    /// Tables read whole and checked so far, of all the directory holds,
    /// and their bytes: the bulk of a repair's reading.
    Tables {
        done: usize,
        total: usize,
        bytes_done: u64,
        bytes_total: u64,
    },
    /// Journals being replayed.
    Journals,
    /// The kept tables being merged into one level (their old levels
    /// were lost).
    Merging,
}

pub(crate) fn repair(
    dir: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(RepairProgress),
) -> Result<RepairReport> {
    opts.validate()?;
    if !opts.fs.exists(dir) {
        return Err(Error::InvalidArgument(format!(
            "{} does not exist: nothing to repair",
            dir.display()
        )));
    }
    let mut report = RepairReport::default();
    let compact = {
        let take = Options {
            create_if_missing: false,
            ..opts.clone()
        };
        let listing = Listing::take(dir, &take)?;
        let (_tables, reaper, _blocks) = caches(&listing.dir, opts);
        let salvaged = salvage_manifest(&listing, &reaper, &mut report);
        rebuild(&listing, opts, &reaper, salvaged, &mut report, progress)?
        // The lock is released here, for the open below.
    };
    // Open what was written: garbage goes, and a repair that left
    // something unopenable says so now.
    let db = crate::Db::open(
        dir,
        Options {
            create_if_missing: false,
            error_if_exists: false,
            ..opts.clone()
        },
    )?;
    if compact {
        progress(RepairProgress::Merging);
        db.compact()?;
        report.compacted = true;
    }
    db.close()?;
    Ok(report)
}

/// Steps 3 to 6; returns whether the tables must be merged (step 7).
fn rebuild(
    listing: &Listing,
    opts: &Options,
    reaper: &Arc<Reaper>,
    salvaged: Option<Recovered>,
    report: &mut RepairReport,
    progress: &mut dyn FnMut(RepairProgress),
) -> Result<bool> {
    let (fs, dir) = (&*listing.fs, &listing.dir);
    let mut numbers: Vec<u64> = listing
        .kinds
        .iter()
        .filter_map(|k| match k {
            FileKind::Table(n) => Some(*n),
            _ => None,
        })
        .collect();
    numbers.sort_unstable();
    let (db_id, salvaged) = identity(fs, dir, &numbers, salvaged, report);
    report.db_id = db_id;

    // Step 3: every table, read whole.
    let mut found: Vec<Found> = Vec::new();
    let mut lost: Vec<(u64, String, BTreeMap<u64, u64>)> = Vec::new();
    // A size that cannot be read counts 0: `check_table` reports the file.
    let sizes: Vec<u64> = numbers
        .iter()
        .map(|&n| fs.open(&files::table(dir, n)).map_or(0, |f| f.len()))
        .collect();
    let bytes_total = sizes.iter().sum();
    let mut bytes_done = 0;
    for (i, (&n, size)) in numbers.iter().zip(&sizes).enumerate() {
        progress(RepairProgress::Tables {
            done: i,
            total: numbers.len(),
            bytes_done,
            bytes_total,
        });
        match check_table(fs, dir, n, db_id)? {
            Ok(t) => found.push(t),
            Err((e, segments)) => lost.push((n, e, segments)),
        }
        bytes_done += size;
    }
    progress(RepairProgress::Tables {
        done: numbers.len(),
        total: numbers.len(),
        bytes_done,
        bytes_total,
    });
    let named: BTreeMap<u64, (usize, u32)> = salvaged
        .as_ref()
        .map(|r| {
            r.version
                .levels
                .iter()
                .enumerate()
                .flat_map(|(l, files)| files.iter().map(move |f| (f.number, (l, f.keyspace))))
                .collect()
        })
        .unwrap_or_default();

    // Keyspaces: the salvaged manifest's, with those version-5 tables
    // name added; each table assigned to one.
    let mut registry: Registry = salvaged
        .as_ref()
        .map(|r| (*r.version.keyspaces).clone())
        .unwrap_or_default();
    let mut kept: Vec<Found> = Vec::new();
    for mut t in found {
        match assign_keyspace(&mut t, &named, &mut registry, report) {
            Ok(()) => kept.push(t),
            Err(why) => lost.push((t.number, why, t.segments.clone())),
        }
    }

    // Step 4: two tables holding one (key, seqno): keep one.
    for (loser, why) in duplicates(fs, dir, &kept, &named)? {
        if let Some(i) = kept.iter().position(|t| t.number == loser) {
            let t = kept.remove(i);
            lost.push((t.number, why, t.segments));
        }
    }

    // Tables move aside before anything new is written.
    let live_segments: BTreeSet<u64> = kept
        .iter()
        .flat_map(|t| t.segments.keys().copied())
        .collect();
    lost.sort_by_key(|l| l.0);
    for (number, reason, segments) in &lost {
        let from = files::table(dir, *number);
        let bytes = fs.open(&from).map(|f| f.len()).unwrap_or(0);
        let moved_to = move_aside(fs, dir, &from)?;
        report.bytes_lost += bytes;
        report.tables_lost.push(TableLost {
            number: *number,
            bytes,
            moved_to,
            reason: reason.clone(),
        });
        // Its values go with it, unless a kept table points there too.
        for s in segments.keys().filter(|s| !live_segments.contains(s)) {
            for path in [files::values(dir, *s), files::stream(dir, *s)] {
                if fs.exists(&path) {
                    move_aside(fs, dir, &path)?;
                }
            }
            let journal = files::journal(dir, *s);
            if fs.exists(&journal) {
                copy_aside(fs, dir, &journal)?;
            }
        }
    }
    let kept_numbers: BTreeSet<u64> = kept.iter().map(|t| t.number).collect();
    report.tables_missing = named
        .keys()
        .filter(|n| !kept_numbers.contains(n) && !numbers.contains(n))
        .copied()
        .collect();

    // The tables keep the salvaged manifest's levels only if that
    // manifest describes exactly them.
    let consistent = salvaged.is_some()
        && named.len() == kept.len()
        && kept.iter().all(|t| named.contains_key(&t.number))
        && level0_in_order(&kept, &named);

    // Step 5: the journals.
    progress(RepairProgress::Journals);
    let mut last_seqno = kept
        .iter()
        .map(|t| t.max_seqno)
        .chain(salvaged.as_ref().map(|r| r.last_seqno))
        .max()
        .unwrap_or(0);
    let next_file =
        AtomicU64::new(listing.next_file(salvaged.as_ref().unwrap_or(&Recovered::new_database()))?);
    let new_number = || next_file.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let base = TableOptions {
        block_size: opts.block_bytes,
        restart_interval: opts.block_restart_interval,
        filter: opts.filter,
        filter_bits: opts.filter_bits,
        compression: opts.compression,
        db_id,
        keyspace: None,
    };
    let mut added = Edit::default();
    replay_journals(
        listing,
        opts,
        &base,
        &mut registry,
        db_id,
        &mut last_seqno,
        &new_number,
        &mut added,
        report,
    )?;
    report.tables_written = added.added.len() as u64;

    // Step 6: the manifest.
    let mut edit = Edit::default();
    let mut keyspaces: Vec<KeyspaceRecord> = registry.iter().map(|k| (**k).clone()).collect();
    keyspaces.sort_by_key(|k| k.id);
    edit.keyspaces = keyspaces;
    let next_keyspace = registry.next_id();
    edit.next_keyspace = (next_keyspace > 1).then_some(next_keyspace);
    // The comparator name: the old manifest's, else the one the repair
    // is asked under (LevelDB's RepairDB records its options' comparator).
    edit.totals = salvaged.as_ref().map(|r| r.version.totals);
    edit.comparator = salvaged
        .as_ref()
        .and_then(|r| r.version.comparator.as_deref().map(str::to_owned))
        .or_else(|| {
            opts.comparator_name
                .clone()
                .filter(|n| n != crate::options::BYTEWISE_COMPARATOR)
        });
    for t in &kept {
        let level = if consistent {
            named.get(&t.number).map_or(0, |&(l, _)| l)
        } else {
            0
        };
        report.tables_kept.push(TableKept {
            number: t.number,
            bytes: t.size,
            entries: t.entries,
            keyspace: keyspace_name(&registry, t.keyspace),
            level,
        });
        edit.added.push(TableRecord {
            keyspace: t.keyspace,
            level,
            number: t.number,
            size: t.size,
            entries: t.entries,
            smallest: t.smallest.clone(),
            largest: t.largest.clone(),
        });
        edit.value_live
            .extend(t.segments.iter().map(|(&s, &b)| (s, b)));
    }
    for r in &added.added {
        report.tables_kept.push(TableKept {
            number: r.number,
            bytes: r.size,
            entries: r.entries,
            keyspace: keyspace_name(&registry, r.keyspace),
            level: 0,
        });
    }
    edit.added.extend(added.added);
    edit.value_live.extend(added.value_live);
    let (version, _) = Version::default()
        .apply(&edit, reaper)
        .map_err(|d| Error::corruption(dir, 0, format!("repair: {d}")))?;
    version
        .check()
        .map_err(|d| Error::corruption(dir, 0, format!("repair: {d}")))?;
    assert_eq!(
        version.table_count(),
        report.tables_kept.len(),
        "the repaired version names every kept table"
    );
    let journal_number = new_number();
    let journal = files::journal(dir, journal_number);
    let ctx = |e| Error::io(format!("creating {}", journal.display()), e);
    let mut file = fs.create(&journal).map_err(ctx)?;
    file.sync().map_err(ctx)?;
    drop(file);
    fs.sync_dir(dir)
        .map_err(|e| Error::io("syncing the database directory", e))?;
    let manifest_number = new_number();
    report.last_seqno = last_seqno;
    write_manifest(
        fs,
        dir,
        manifest_number,
        &version,
        &ManifestStart {
            db_id,
            journal_floor: journal_number,
            next_file: next_file.load(std::sync::atomic::Ordering::SeqCst),
            last_seqno,
        },
    )?;
    // A damaged manifest is kept for whoever wants to look at it.
    if report
        .manifest
        .as_ref()
        .is_none_or(|m| m.damaged_at.is_some())
    {
        for (name, kind) in listing.names.iter().zip(&listing.kinds) {
            if matches!(kind, FileKind::Manifest(n) if *n != manifest_number) {
                move_aside(fs, dir, &dir.join(name))?;
            }
        }
    }
    report.keyspaces = std::iter::once(crate::keyspace::DEFAULT_NAME.to_owned())
        .chain(registry.iter().map(|k| k.name.clone()))
        .collect();
    report.tables_kept.sort_by_key(|t| t.number);
    Ok(!consistent && version.table_count() > 1)
}

/// True if the level-0 tables `named` gives are in flush order: of two
/// whose key ranges overlap in one keyspace, the higher-numbered holds
/// only newer seqnos, as level-0 lookups (newest number first) assume.
/// Flushes leave them so; a repair that put tables of several levels on
/// level 0 and was interrupted before its merge does not, and the
/// repair after it must merge them.
fn level0_in_order(kept: &[Found], named: &BTreeMap<u64, (usize, u32)>) -> bool {
    let user = |k: &[u8]| key::user_key(k).to_vec();
    let l0: Vec<&Found> = kept
        .iter()
        .filter(|t| named.get(&t.number).is_some_and(|&(l, _)| l == 0))
        .collect();
    l0.iter().enumerate().all(|(i, a)| {
        l0.iter().skip(i + 1).all(|b| {
            let (old, new) = if a.number < b.number { (a, b) } else { (b, a) };
            let overlap = a.keyspace == b.keyspace
                && user(&a.smallest) <= user(&b.largest)
                && user(&b.smallest) <= user(&a.largest);
            !overlap || old.max_seqno < new.min_seqno
        })
    })
}

fn keyspace_name(registry: &Registry, id: u32) -> String {
    registry.get(id).map_or_else(
        || crate::keyspace::DEFAULT_NAME.to_owned(),
        |k| k.name.clone(),
    )
}

/// Step 2: the longest prefix of intact edits of the manifest CURRENT
/// names, or else of the newest manifest file that has one.
fn salvage_manifest(
    listing: &Listing,
    reaper: &Arc<Reaper>,
    report: &mut RepairReport,
) -> Option<Recovered> {
    let (fs, dir) = (&*listing.fs, &listing.dir);
    let current = crate::io::read_all(fs, &files::current(dir))
        .ok()
        .and_then(|t| files::parse_current(&t).map(str::to_owned));
    let mut candidates: Vec<(u64, &String)> = listing
        .names
        .iter()
        .zip(&listing.kinds)
        .filter_map(|(name, k)| match k {
            FileKind::Manifest(n) => Some((*n, name)),
            _ => None,
        })
        .collect();
    // CURRENT's first, then the newest first.
    candidates.sort_by_key(|&(n, name)| (Some(name) != current.as_ref(), std::cmp::Reverse(n)));
    if current.is_none() {
        report
            .notes
            .push("CURRENT is missing or damaged".to_owned());
    }
    for (_, name) in candidates {
        let Ok(data) = crate::io::read_all(fs, &dir.join(name)) else {
            continue;
        };
        let scan = log::scan(&data, super::manifest_continues);
        let mut rec = Recovered::before_manifest();
        let mut edits = 0u64;
        let mut damaged_at = match scan.tail {
            Tail::Clean => None,
            Tail::Torn { offset } => Some((offset, "torn last record".to_owned())),
            Tail::Damaged { offset } => Some((offset, "damaged record".to_owned())),
        };
        for (i, (offset, kind, payload)) in scan.records.iter().enumerate() {
            let before = rec.clone();
            let applied = if *kind == RecordKind::Edit {
                Edit::decode(payload).and_then(|e| rec.replay(i == 0, &e, reaper))
            } else {
                Err("a non-edit record".to_owned())
            };
            if let Err(why) = applied.and_then(|()| rec.version.check()) {
                rec = before;
                damaged_at = Some((*offset, why));
                break;
            }
            edits += 1;
        }
        if edits == 0 {
            continue;
        }
        report.manifest = Some(ManifestSalvage {
            name: name.clone(),
            edits,
            bytes: data.len() as u64,
            damaged_at,
        });
        return Some(rec);
    }
    None
}

/// The database's identity: the one most tables were written by, else
/// the salvaged manifest's, else a new one. A salvaged manifest of
/// another identity than most tables' is another database's (a file
/// copied over this one's): it is not used.
fn identity(
    fs: &dyn Fs,
    dir: &Path,
    tables: &[u64],
    salvaged: Option<Recovered>,
    report: &mut RepairReport,
) -> (u64, Option<Recovered>) {
    let mut votes: BTreeMap<u64, u64> = BTreeMap::new();
    for &n in tables {
        let path = files::table(dir, n);
        let Ok(file) = fs.open(&path) else { continue };
        if let Ok(t) = Table::open(file, path, n, None)
            && let Some((id, _)) = t.owner()
            && id != 0
        {
            *votes.entry(id).or_default() += 1;
        }
    }
    let manifest_id = salvaged.as_ref().and_then(|r| r.db_id);
    let tables_id = votes
        .iter()
        .max_by_key(|&(id, count)| (count, std::cmp::Reverse(id)))
        .map(|(&id, &count)| (id, count));
    match (manifest_id, tables_id) {
        (Some(m), Some((t, count))) if m != t && votes.get(&m).copied().unwrap_or(0) < count => {
            report.notes.push(format!(
                "the manifest names identity {m:#x}, most tables {t:#x}: the manifest is another database's and was not used"
            ));
            if let Some(ms) = &mut report.manifest {
                ms.damaged_at = Some((0, "another database's manifest".to_owned()));
                ms.edits = 0;
            }
            (t, None)
        }
        (Some(m), _) => (m, salvaged),
        (None, Some((t, _))) => (t, salvaged),
        (None, None) => (fs.new_db_id(), salvaged),
    }
}

/// An intact table, as read whole.
struct Found {
    number: u64,
    size: u64,
    entries: u64,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    /// What its properties say (version 5), and the keyspace it goes to.
    named_keyspace: Option<TableKeyspace>,
    keyspace: u32,
    min_seqno: u64,
    max_seqno: u64,
    /// Bytes of separated values it points to, per segment.
    segments: BTreeMap<u64, u64>,
}

/// Step 3 for one table: `Ok(Err((reason, segments it points into as
/// far as it was read)))` if it is not intact or not this database's. A
/// failed read is an `Io` error that ends the repair: a table is moved
/// aside for what its bytes say, never for a device's failure.
#[allow(clippy::type_complexity)]
fn check_table(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    db_id: u64,
) -> Result<std::result::Result<Found, (String, BTreeMap<u64, u64>)>> {
    let mut segments = BTreeMap::new();
    Ok(match walk_table(fs, dir, number, db_id, &mut segments) {
        Ok(mut t) => {
            t.segments = segments;
            for &s in t.segments.keys() {
                let present = [
                    files::journal(dir, s),
                    files::values(dir, s),
                    files::stream(dir, s),
                ]
                .iter()
                .any(|p| fs.exists(p));
                if !present {
                    let why =
                        format!("it points to separated values in segment {s}, which is missing");
                    return Ok(Err((why, t.segments)));
                }
            }
            Ok(t)
        }
        Err(e @ Error::Io { .. }) => return Err(e),
        Err(e) => Err((e.to_string(), segments)),
    })
}

fn walk_table(
    fs: &dyn Fs,
    dir: &Path,
    number: u64,
    db_id: u64,
    segments: &mut BTreeMap<u64, u64>,
) -> Result<Found> {
    let path = files::table(dir, number);
    let file = fs
        .open(&path)
        .map_err(|e| Error::io(format!("opening table {}", path.display()), e))?;
    let size = file.len();
    let table = Arc::new(Table::open(file, path.clone(), number, None)?);
    let bad = |d: String| Error::corruption(&path, 0, d);
    if let Some((owner, written_as)) = table.owner() {
        if owner != db_id {
            return Err(bad(format!(
                "written by another database (identity {owner:#x}, this one {db_id:#x})"
            )));
        }
        if written_as != number {
            return Err(bad(format!("written as table {written_as}")));
        }
    }
    let mut cursor = table.cursor_forward(None);
    let mut previous: Vec<u8> = Vec::new();
    let (mut entries, mut min_seqno, mut max_seqno) = (0u64, u64::MAX, 0u64);
    while cursor.advance()? {
        entries += 1;
        let ikey = cursor.key();
        let Some((_, tag)) = key::split(ikey) else {
            return Err(bad(format!(
                "entry {entries}: internal key shorter than its tag"
            )));
        };
        if !previous.is_empty() && key::compare(&previous, ikey) != Ordering::Less {
            return Err(bad(format!("entry {entries}: keys out of order")));
        }
        previous.clear();
        previous.extend_from_slice(ikey);
        let seqno = key::tag_seqno(tag);
        if seqno > SEQNO_MAX {
            return Err(bad(format!("entry {entries}: seqno {seqno} out of range")));
        }
        min_seqno = min_seqno.min(seqno);
        max_seqno = max_seqno.max(seqno);
        if key::tag_kind(tag) == Kind::Pointer as u8 {
            let ptr = ValuePtr::decode(cursor.value())
                .ok_or_else(|| bad(format!("entry {entries}: malformed value pointer")))?;
            let live = segments.entry(ptr.segment).or_default();
            *live = live.saturating_add(u64::from(ptr.len));
        }
    }
    if entries != table.entries() {
        return Err(bad(format!(
            "holds {entries} entries, its properties say {}",
            table.entries()
        )));
    }
    if entries == 0 {
        return Err(bad("holds no entry".to_owned()));
    }
    Ok(Found {
        number,
        size,
        entries,
        smallest: table.smallest().to_vec(),
        largest: table.largest().to_vec(),
        named_keyspace: table.keyspace().cloned(),
        keyspace: 0,
        min_seqno,
        max_seqno,
        segments: BTreeMap::new(),
    })
}

/// Gives `t` its keyspace: the one its properties name (version 5),
/// created in `registry` if the salvaged manifest lacks it; for an older
/// table the one the salvaged manifest gives it, else the default one.
/// `Err(reason)` if the table belongs to a dropped keyspace or cannot be
/// placed.
fn assign_keyspace(
    t: &mut Found,
    named: &BTreeMap<u64, (usize, u32)>,
    registry: &mut Registry,
    report: &mut RepairReport,
) -> std::result::Result<(), String> {
    let Some(ks) = t.named_keyspace.clone() else {
        match named.get(&t.number) {
            Some(&(_, id)) => t.keyspace = id,
            None => {
                t.keyspace = crate::keyspace::DEFAULT_ID;
                report.notes.push(format!(
                    "table {} (written before tables named their keyspace) was given to the default keyspace",
                    t.number
                ));
            }
        }
        return Ok(());
    };
    t.keyspace = ks.id;
    if ks.id == crate::keyspace::DEFAULT_ID {
        return Ok(());
    }
    if let Some(k) = registry.get(ks.id) {
        if k.name != ks.name {
            report.notes.push(format!(
                "table {} names keyspace {} {:?}; the manifest calls it {:?}",
                t.number, ks.id, ks.name, k.name
            ));
        }
        return Ok(());
    }
    if registry.dropped(ks.id) {
        return Err(format!(
            "its keyspace {:?} (id {}) was dropped",
            ks.name, ks.id
        ));
    }
    if let Some(other) = registry.named(&ks.name) {
        return Err(format!(
            "its keyspace {:?} has id {}, another keyspace of that name has id {}",
            ks.name, ks.id, other.id
        ));
    }
    let options = KeyspaceOptions::decode(&ks.options).unwrap_or_else(|why| {
        report.notes.push(format!(
            "keyspace {:?}: options in table {} unreadable ({why}); defaults used",
            ks.name, t.number
        ));
        KeyspaceOptions::default()
    });
    create_keyspace(registry, ks.id, ks.name, options)
}

fn create_keyspace(
    registry: &mut Registry,
    id: u32,
    name: String,
    options: KeyspaceOptions,
) -> std::result::Result<(), String> {
    *registry = registry.restore(KeyspaceRecord { id, name, options })?;
    Ok(())
}

/// Step 4: tables (not both named by the salvaged manifest) that hold a
/// (key, seqno) in common, and which of each pair to set aside: one the
/// manifest does not name, else the newer (higher number; an unrecorded
/// compaction's output, whose inputs hold all it holds).
fn duplicates(
    fs: &dyn Fs,
    dir: &Path,
    kept: &[Found],
    named: &BTreeMap<u64, (usize, u32)>,
) -> Result<Vec<(u64, String)>> {
    let mut out: Vec<(u64, String)> = Vec::new();
    let user = |k: &[u8]| key::user_key(k).to_vec();
    for (i, a) in kept.iter().enumerate() {
        for b in kept.iter().skip(i + 1) {
            let both_named = named.contains_key(&a.number) && named.contains_key(&b.number);
            let may_share = a.keyspace == b.keyspace
                && a.min_seqno <= b.max_seqno
                && b.min_seqno <= a.max_seqno
                && user(&a.smallest) <= user(&b.largest)
                && user(&b.smallest) <= user(&a.largest);
            if both_named || !may_share || out.iter().any(|(n, _)| *n == a.number || *n == b.number)
            {
                continue;
            }
            if share_entry(fs, dir, a, b)? {
                let (loser, winner) = if named.contains_key(&a.number) {
                    (b, a)
                } else if named.contains_key(&b.number) {
                    (a, b)
                } else {
                    (b, a)
                };
                out.push((
                    loser.number,
                    format!(
                        "it holds entries table {} holds too (an unrecorded compaction's output or input)",
                        winner.number
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// True if tables `a` and `b` (both read intact before) hold one
/// internal key in common. Only the user-key range both cover is read.
fn share_entry(fs: &dyn Fs, dir: &Path, a: &Found, b: &Found) -> Result<bool> {
    let open = |n: u64| -> Result<Arc<Table>> {
        let path = files::table(dir, n);
        let file = fs
            .open(&path)
            .map_err(|e| Error::io(format!("opening table {}", path.display()), e))?;
        Ok(Arc::new(Table::open(file, path, n, None)?))
    };
    let (ta, tb) = (open(a.number)?, open(b.number)?);
    let from = key::user_key(&a.smallest).max(key::user_key(&b.smallest));
    let to = key::user_key(&a.largest).min(key::user_key(&b.largest));
    let from = key::seek_key(from, SEQNO_MAX);
    let (mut ca, mut cb) = (
        ta.cursor_forward(Some(&from)),
        tb.cursor_forward(Some(&from)),
    );
    let (mut more_a, mut more_b) = (ca.advance()?, cb.advance()?);
    while more_a && more_b {
        if key::user_key(ca.key()) > to || key::user_key(cb.key()) > to {
            break;
        }
        match key::compare(ca.key(), cb.key()) {
            Ordering::Less => more_a = ca.advance()?,
            Ordering::Greater => more_b = cb.advance()?,
            Ordering::Equal => return Ok(true),
        }
    }
    Ok(false)
}

/// Step 5: replays every journal, in number order, as far as its records
/// are intact, keeping the batches past `last_seqno` (older ones are in
/// the tables), into level-0 tables whose records go into `added`.
#[allow(clippy::too_many_arguments)]
fn replay_journals(
    listing: &Listing,
    opts: &Options,
    base: &TableOptions,
    registry: &mut Registry,
    db_id: u64,
    last_seqno: &mut u64,
    new_number: &dyn Fn() -> u64,
    added: &mut Edit,
    report: &mut RepairReport,
) -> Result<()> {
    let (fs, dir) = (&*listing.fs, &listing.dir);
    let mut journals: Vec<u64> = listing
        .kinds
        .iter()
        .filter_map(|k| match k {
            FileKind::Journal(n) => Some(*n),
            _ => None,
        })
        .collect();
    journals.sort_unstable();
    // Each journal's intact records, read once; keyspaces of ops no
    // manifest or table names are made up first, so every op has one.
    let mut read = Vec::with_capacity(journals.len());
    for &n in &journals {
        let (data, framing) = read_journal(fs, dir, n, db_id)?;
        for id in op_keyspaces(&data, framing) {
            if !registry.exists(id) && !registry.dropped(id) {
                let name = format!("recovered-{id}");
                report.notes.push(format!(
                    "journal {n} holds writes of keyspace id {id}, which nothing names: created as {name:?}"
                ));
                create_keyspace(registry, id, name, KeyspaceOptions::default())
                    .map_err(|d| Error::corruption(files::journal(dir, n), 0, d))?;
            }
        }
        read.push((n, data, framing));
    }
    let keyspaces = Arc::new(registry.clone());
    let separation = Separation::new(opts.value_separation_min, keyspaces.clone());
    let opts_for = |keyspace| table_options(base, &keyspaces, keyspace);
    let mut mem = Memtable::new(0);
    let mut streams = StreamFiles::default();
    // Only the newest journal holding a record may end torn: a journal
    // is trimmed and synced whole when the next one starts.
    let newest = read
        .iter()
        .filter(|(_, data, framing)| {
            !log::scan_framed(data, *framing, |_, _, _| false)
                .records
                .is_empty()
        })
        .map(|&(n, _, _)| n)
        .max()
        .unwrap_or(0);
    for (n, data, framing) in read {
        let path = files::journal(dir, n);
        // Any intact record after damage makes it damage, not a tail.
        let scan = log::scan_framed(&data, framing, |_, _, _| true);
        let mut j = JournalReplay {
            number: n,
            bytes: data.len() as u64,
            records: scan.records.len() as u64,
            ..JournalReplay::default()
        };
        match scan.tail {
            Tail::Clean => {}
            Tail::Torn { offset } if n >= newest => {
                j.torn_tail = (data.len() as u64).saturating_sub(offset);
            }
            Tail::Torn { offset } | Tail::Damaged { offset } => j.lost_at = Some(offset),
        }
        let rule = Separate {
            rule: separation.clone(),
            segment: n,
        };
        for (offset, kind, payload) in scan.records {
            let Some(batch) = batch_codec::split_journal_record(kind, payload)
                .and_then(|(_, b)| batch_codec::decode(b).ok().map(|d| (b, d)))
            else {
                j.note = Some(format!("record at offset {offset} is not a batch"));
                j.lost_at.get_or_insert(offset);
                break;
            };
            let (payload, decoded) = batch;
            let count = decoded.ops.len() as u64;
            let last = decoded
                .first_seqno
                .checked_add(count.saturating_sub(1))
                .filter(|&l| count > 0 && decoded.first_seqno > 0 && l <= SEQNO_MAX);
            let Some(last) = last else {
                j.note = Some(format!("batch at offset {offset} has seqnos out of range"));
                j.lost_at.get_or_insert(offset);
                break;
            };
            if decoded.first_seqno <= *last_seqno {
                // Already in the tables (or replayed from an earlier
                // journal).
                continue;
            }
            // Values are copied into the new tables, never pointed to
            // where they lie: nothing says the journal's bytes (or a
            // stream's) were synced, so they may not be on the device.
            let inlined;
            let rep = if decoded.ops.iter().any(|op| op.kind == Kind::Pointer) {
                match streams.inline(fs, dir, &decoded) {
                    Ok(rep) => {
                        inlined = rep;
                        &inlined[..]
                    }
                    Err(StreamMiss::Io(e)) => return Err(e),
                    Err(StreamMiss::Absent(d)) => {
                        j.note = Some(format!("batch at offset {offset}: {d}"));
                        j.lost_at.get_or_insert(offset);
                        break;
                    }
                }
            } else {
                payload
            };
            insert_batch(
                &mut mem.writer(),
                rep,
                decoded.first_seqno,
                &rule,
                None,
                None,
            )
            .map_err(|d| Error::corruption(&path, offset, d))?;
            *last_seqno = last;
            j.batches_replayed += 1;
            j.ops_replayed += count;
            if mem.approx_bytes() >= opts.memtable_bytes {
                flush_during_open(fs, dir, new_number, &mut mem, &opts_for, added)?;
            }
        }
        if let Some(at) = j.lost_at {
            j.bytes_lost = (data.len() as u64).saturating_sub(at);
            report.bytes_lost += j.bytes_lost;
        }
        // A journal with bytes repair could not use is kept in `lost/`,
        // also one with no intact record at all unless it is all zeros
        // (a journal of another database, or of this one whose identity
        // no manifest or table gave: its framing is seeded with it).
        let unreadable = j.records == 0 && data.iter().any(|&b| b != 0);
        if j.bytes_lost > 0 || unreadable {
            let to = copy_aside(fs, dir, &path)?;
            if unreadable && j.note.is_none() {
                j.note = Some(format!(
                    "no intact record (another database's, or damaged from its start); copied to {}",
                    to.display()
                ));
            }
        }
        report.journals.push(j);
    }
    flush_during_open(fs, dir, new_number, &mut mem, &opts_for, added)?;
    if !added.added.is_empty() {
        fs.sync_dir(dir)
            .map_err(|e| Error::io("syncing the database directory", e))?;
    }
    Ok(())
}

/// Journal `n`'s bytes (with what only the staging ring holds of it) and
/// the framing its records were written with: the one under which most
/// of them are intact (a numbered journal of this database, of a
/// format-3 database, or a plain one of an older format), else a seed
/// solved from its first header (`seed_of`).
fn read_journal(fs: &dyn Fs, dir: &Path, n: u64, db_id: u64) -> Result<(Vec<u8>, Framing)> {
    let path = files::journal(dir, n);
    let data = crate::io::read_all(fs, &path)
        .map_err(|e| Error::io(format!("reading journal {}", path.display()), e))?;
    let framings = [
        Framing::Numbered(log::journal_seed(n, db_id)),
        Framing::Numbered(n),
        Framing::Plain,
    ];
    let mut best = (0usize, framings[0]);
    for f in framings {
        let intact = log::scan_framed(&data, f, |_, _, _| false).records.len();
        if intact > best.0 {
            best = (intact, f);
        }
    }
    // None reads: the identity that salts the seed is not known (no
    // manifest, no table names it). Any seed the first header's checksum
    // accepts reads the journal as the true one does.
    if best.0 == 0
        && let Some(seed) = seed_of(&data)
    {
        let f = Framing::Numbered(seed);
        let intact = log::scan_framed(&data, f, |_, _, _| false).records.len();
        if intact > 0 {
            best = (intact, f);
        }
    }
    let framing = best.1;
    let data = super::with_staged_tail(fs, dir, n, framing, data, 0)?;
    Ok((data, framing))
}

/// A seed under which the record header at the start of `data` passes
/// its numbered header checksum (format.md §Log records: the masked
/// CRC-32C of the seed's 8 bytes and header bytes 4..16), if there is
/// one. CRC-32C over a message of fixed length is affine over GF(2) in
/// the message's bits, so the seeds that fit form an affine space of 64
/// unknown bits under 32 equations, solved here by elimination. Every
/// seed in it gives every header of the journal the same checksum (the
/// seed enters each the same way), so any one reads the journal. The
/// payload's own, unseeded CRC-32C keeps a header that fits by chance
/// from passing for a record.
fn seed_of(data: &[u8]) -> Option<u64> {
    let header = data.get(..log::HEADER_LEN)?;
    let stored = u32::from_le_bytes(header.get(..4)?.try_into().ok()?);
    let fields = header.get(4..)?;
    let unmask = |m: u32| m.wrapping_sub(0xa282_ead8).rotate_left(15);
    let crc_of = |seed: u64| unmask(crate::format::coding::crc2(&seed.to_le_bytes(), fields));
    let base = crc_of(0);
    // basis[b]: a column combination whose highest set bit is b, and the
    // seed bits that make it.
    let mut basis: [Option<(u32, u64)>; 32] = [None; 32];
    for i in 0..64 {
        let (mut v, mut seed) = (crc_of(1 << i) ^ base, 1u64 << i);
        while v != 0 {
            let b = 31 - v.leading_zeros() as usize;
            match basis.get(b).copied().flatten() {
                Some((bv, bs)) => (v, seed) = (v ^ bv, seed ^ bs),
                None => {
                    if let Some(slot) = basis.get_mut(b) {
                        *slot = Some((v, seed));
                    }
                    break;
                }
            }
        }
    }
    let (mut want, mut seed) = (unmask(stored) ^ base, 0u64);
    while want != 0 {
        let b = 31 - want.leading_zeros() as usize;
        let (bv, bs) = basis.get(b).copied().flatten()?;
        (want, seed) = (want ^ bv, seed ^ bs);
    }
    debug_assert_eq!(
        crate::format::coding::crc2(&seed.to_le_bytes(), fields),
        stored,
        "the seed found passes the header checksum"
    );
    Some(seed)
}

/// The keyspace ids the intact batches of a journal write to.
fn op_keyspaces(data: &[u8], framing: Framing) -> BTreeSet<u32> {
    log::scan_framed(data, framing, |_, _, _| false)
        .records
        .iter()
        .filter_map(|&(_, k, p)| batch_codec::split_journal_record(k, p))
        .filter_map(|(_, b)| batch_codec::decode(b).ok())
        .flat_map(|b| b.ops.into_iter().map(|op| op.keyspace))
        .collect()
}

/// Moves `path` into `lost/` under its own name (or with a suffix, if a
/// file of that name is there already), and returns where it went.
fn move_aside(fs: &dyn Fs, dir: &Path, path: &Path) -> Result<PathBuf> {
    let to = lost_path(fs, dir, path)?;
    fs.rename(path, &to)
        .map_err(|e| Error::io(format!("moving {} to {}", path.display(), to.display()), e))?;
    let lost = dir.join(LOST_DIR);
    fs.sync_dir(&lost)
        .and_then(|()| fs.sync_dir(dir))
        .map_err(|e| Error::io("syncing the database directory", e))?;
    Ok(to)
}

/// Copies `path` into `lost/` (a journal kept tables still point into).
fn copy_aside(fs: &dyn Fs, dir: &Path, path: &Path) -> Result<PathBuf> {
    let to = lost_path(fs, dir, path)?;
    let ctx = |e| Error::io(format!("copying {} to {}", path.display(), to.display()), e);
    let data = crate::io::read_all(fs, path).map_err(ctx)?;
    let mut file = fs.create(&to).map_err(ctx)?;
    file.append(&data).map_err(ctx)?;
    file.sync().map_err(ctx)?;
    fs.sync_dir(&dir.join(LOST_DIR))
        .map_err(|e| Error::io("syncing the lost directory", e))?;
    Ok(to)
}

fn lost_path(fs: &dyn Fs, dir: &Path, path: &Path) -> Result<PathBuf> {
    let lost = dir.join(LOST_DIR);
    fs.create_dir_all(&lost)
        .map_err(|e| Error::io(format!("creating {}", lost.display()), e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut to = lost.join(&name);
    let mut i = 1u32;
    while fs.exists(&to) {
        to = lost.join(format!("{name}.{i}"));
        i += 1;
    }
    Ok(to)
}
