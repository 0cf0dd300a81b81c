//! `cairn repair`: the command-line face of `Db::repair`, which rebuilds
//! a database whose manifest is lost or damaged from its tables and
//! journals (docs/durability.md §Repair).

use super::ToolResult;
use cairndb::{Db, Options, RepairProgress};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RepairArgs {
    /// The database directory. No other process may have it open.
    db: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Repairs the database; `Ok(false)` (exit status 1) if anything was
/// lost or moved aside into `DB/lost/`.
pub fn repair(a: RepairArgs) -> ToolResult<bool> {
    let started = std::time::Instant::now();
    let opts = Options {
        create_if_missing: false,
        ..Options::default()
    };
    let bar = super::progress(0, "reading tables");
    let report = Db::repair_with(&a.db, &opts, |p| match p {
        RepairProgress::Tables {
            bytes_done,
            bytes_total,
            ..
        } => {
            bar.set_length(bytes_total);
            bar.set_position(bytes_done);
        }
        RepairProgress::Journals => bar.set_message("replaying journals"),
        RepairProgress::Merging => bar.set_message("merging tables"),
        _ => {}
    });
    bar.finish_and_clear();
    let report = report.map_err(|e| format!("repairing {}: {e}", a.db.display()))?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        let manifest = report.manifest.as_ref().map(|m| {
            serde_json::json!({
                "name": m.name,
                "edits": m.edits,
                "bytes": m.bytes,
                "damaged_at": m.damaged_at.as_ref().map(|(at, _)| at),
                "damage": m.damaged_at.as_ref().map(|(_, why)| why),
            })
        });
        let kept: Vec<_> = report
            .tables_kept
            .iter()
            .map(|t| {
                serde_json::json!({
                    "number": t.number,
                    "bytes": t.bytes,
                    "entries": t.entries,
                    "keyspace": t.keyspace,
                    "level": t.level,
                })
            })
            .collect();
        let lost: Vec<_> = report
            .tables_lost
            .iter()
            .map(|t| {
                serde_json::json!({
                    "number": t.number,
                    "bytes": t.bytes,
                    "moved_to": t.moved_to.display().to_string(),
                    "reason": t.reason,
                })
            })
            .collect();
        let journals: Vec<_> = report
            .journals
            .iter()
            .map(|j| {
                serde_json::json!({
                    "number": j.number,
                    "bytes": j.bytes,
                    "records": j.records,
                    "batches_replayed": j.batches_replayed,
                    "ops_replayed": j.ops_replayed,
                    "lost_at": j.lost_at,
                    "bytes_lost": j.bytes_lost,
                    "torn_tail": j.torn_tail,
                    "note": j.note,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "lost_nothing": report.lost_nothing(),
                "manifest": manifest,
                "db_id": report.db_id,
                "tables_kept": kept,
                "tables_lost": lost,
                "tables_missing": report.tables_missing,
                "tables_written": report.tables_written,
                "journals": journals,
                "keyspaces": report.keyspaces,
                "last_seqno": report.last_seqno,
                "bytes_lost": report.bytes_lost,
                "compacted": report.compacted,
                "notes": report.notes,
                "seconds": secs,
            })
        );
    } else {
        println!("{report}");
        println!(
            "{} ({secs:.3} s)",
            if report.lost_nothing() {
                "repaired; nothing lost".to_string()
            } else {
                format!(
                    "repaired; {} tables moved to {}, {} bytes lost",
                    report.tables_lost.len(),
                    a.db.join("lost").display(),
                    report.bytes_lost
                )
            }
        );
    }
    Ok(report.lost_nothing())
}
