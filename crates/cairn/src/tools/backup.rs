//! `cairn checkpoint` and `cairn backup`: the command-line face of
//! `Db::checkpoint` and `cairndb::backup::BackupDir`.
//!
//! Each command prints one line per result for people, or with `--json`
//! one JSON document on stdout for scripts (an object, or an array for
//! `backup list`). Failures go to stderr and exit with status 1
//! (`main`); a failed `verify` names the damaged file there.

use cairndb::backup::{BackupDir, BackupInfo};
use cairndb::{Db, Options};
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Args)]
pub struct CheckpointArgs {
    /// The database to copy (opened by this command: no other process may
    /// hold it).
    pub db: PathBuf,
    /// Where the checkpoint goes: missing or empty.
    pub dir: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct BackupArgs {
    #[command(subcommand)]
    pub command: BackupCmd,
}

#[derive(Subcommand)]
pub enum BackupCmd {
    /// Back a database up into a backup directory (incremental: files
    /// already there are not copied again).
    Create {
        db: PathBuf,
        backups: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// List the backups of a backup directory, oldest first.
    List {
        backups: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Re-read every file of a backup (every backup if no id is given)
    /// and check its checksum.
    Verify {
        backups: PathBuf,
        id: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Delete a backup and the files no other backup needs.
    Delete { backups: PathBuf, id: u64 },
    /// Copy a backup into a new database directory (missing or empty).
    Restore {
        backups: PathBuf,
        id: u64,
        target: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

fn info_json(b: &BackupInfo) -> serde_json::Value {
    json!({
        "id": b.id,
        "seqno": b.seqno,
        "db_id": format!("{:016x}", b.db_id),
        "created_unix_secs": b.created_unix_secs,
        "files": b.files,
        "bytes": b.bytes,
        "files_copied": b.files_copied,
        "bytes_copied": b.bytes_copied,
    })
}

fn info_line(b: &BackupInfo) -> String {
    format!(
        "backup {}: seqno {}, {} files, {} bytes ({} files, {} bytes new)",
        b.id, b.seqno, b.files, b.bytes, b.files_copied, b.bytes_copied
    )
}

pub fn checkpoint(a: CheckpointArgs) -> Result<()> {
    let db = Db::open(&a.db, Options::default())?;
    let t = Instant::now();
    let made = db.checkpoint_with_stats(&a.dir)?;
    let secs = t.elapsed().as_secs_f64();
    db.close()?;
    if a.json {
        println!(
            "{}",
            json!({
                "dir": a.dir.display().to_string(),
                "seqno": made.seqno,
                "files_linked": made.files_linked,
                "bytes_linked": made.bytes_linked,
                "files_copied": made.files_copied,
                "bytes_copied": made.bytes_copied,
                "seconds": secs,
            })
        );
    } else {
        println!(
            "checkpoint at seqno {} in {}: {} files linked ({} bytes), {} copied ({} bytes), {secs:.3} s",
            made.seqno,
            a.dir.display(),
            made.files_linked,
            made.bytes_linked,
            made.files_copied,
            made.bytes_copied
        );
    }
    Ok(())
}

pub fn backup(a: BackupArgs) -> Result<()> {
    match a.command {
        BackupCmd::Create { db, backups, json } => {
            let dir = BackupDir::open(&backups)?;
            let db = Db::open(&db, Options::default())?;
            let info = dir.create(&db)?;
            db.close()?;
            print_one(&info, json);
        }
        BackupCmd::List { backups, json } => {
            let list = BackupDir::open(&backups)?.list()?;
            if json {
                let all: Vec<_> = list.iter().map(info_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else {
                for b in &list {
                    println!("{}", info_line(b));
                }
            }
        }
        BackupCmd::Verify { backups, id, json } => {
            let dir = BackupDir::open(&backups)?;
            let ids = match id {
                Some(id) => vec![id],
                None => dir.list()?.iter().map(|b| b.id).collect(),
            };
            let mut ok = Vec::new();
            for id in ids {
                ok.push(dir.verify(id)?);
            }
            if json {
                let all: Vec<_> = ok
                    .iter()
                    .map(|b| json!({"id": b.id, "ok": true, "files": b.files, "bytes": b.bytes}))
                    .collect();
                println!("{}", serde_json::Value::Array(all));
            } else {
                for b in &ok {
                    println!(
                        "backup {}: {} files, {} bytes verified",
                        b.id, b.files, b.bytes
                    );
                }
            }
        }
        BackupCmd::Delete { backups, id } => {
            BackupDir::open(&backups)?.delete(id)?;
            println!("backup {id} deleted");
        }
        BackupCmd::Restore {
            backups,
            id,
            target,
            json,
        } => {
            let info = BackupDir::open(&backups)?.restore(id, &target)?;
            if json {
                let mut v = info_json(&info);
                v["target"] = json!(target.display().to_string());
                println!("{v}");
            } else {
                println!("{} restored into {}", info_line(&info), target.display());
            }
        }
    }
    Ok(())
}

fn print_one(info: &BackupInfo, json: bool) {
    if json {
        println!("{}", info_json(info));
    } else {
        println!("{}", info_line(info));
    }
}
