//! `get`, `put`, `delete`, `scan`: one key or a range, by hand; and
//! `stats`, `verify`, `compact`: the database as a whole.

use super::{Encodings, Target, ToolResult, keyspace, open, progress, with_keyspace};
use cairndb::WriteOptions;
use std::io::Write;
use std::ops::Bound;

#[derive(clap::Args)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    enc: Encodings,
    /// The key.
    key: String,
    /// Print `{"key": .., "value": ..}` (null if absent).
    #[arg(long)]
    json: bool,
}

/// Prints the value (exit status 1, nothing printed, if the key is absent).
pub fn get(a: GetArgs) -> ToolResult<bool> {
    let key = a.enc.key_encoding.decode(&a.key)?;
    let got = with_keyspace(&a.target, |ks| Ok(ks.get(&key)?))?;
    if a.json {
        let value = got.as_deref().map(|v| a.enc.value_encoding.encode(v));
        println!("{}", serde_json::json!({ "key": a.key, "value": value }));
    } else if let Some(v) = &got {
        println!("{}", a.enc.value_encoding.encode(v));
    }
    Ok(got.is_some())
}

#[derive(clap::Args)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    enc: Encodings,
    key: String,
    value: String,
    /// Do not wait for the write to reach the disk (by default a put is
    /// synced: acknowledged means it survives a power cut).
    #[arg(long)]
    no_sync: bool,
}

pub fn put(a: PutArgs) -> ToolResult {
    let key = a.enc.key_encoding.decode(&a.key)?;
    let value = a.enc.value_encoding.decode(&a.value)?;
    let opts = WriteOptions { sync: !a.no_sync };
    with_keyspace(&a.target, |ks| Ok(ks.put_opt(key, value, &opts)?))
}

#[derive(clap::Args)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    enc: Encodings,
    key: String,
    /// Do not wait for the delete to reach the disk.
    #[arg(long)]
    no_sync: bool,
}

pub fn delete(a: DeleteArgs) -> ToolResult {
    let key = a.enc.key_encoding.decode(&a.key)?;
    let opts = WriteOptions { sync: !a.no_sync };
    with_keyspace(&a.target, |ks| Ok(ks.delete_opt(key, &opts)?))
}

#[derive(clap::Args)]
pub struct ScanArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    enc: Encodings,
    /// First key (included).
    #[arg(long)]
    from: Option<String>,
    /// Key to stop before (excluded).
    #[arg(long)]
    to: Option<String>,
    /// Only keys starting with this (instead of --from/--to).
    #[arg(long, conflicts_with_all = ["from", "to"])]
    prefix: Option<String>,
    /// Print at most this many entries.
    #[arg(long)]
    limit: Option<u64>,
    /// From the last key down.
    #[arg(long)]
    reverse: bool,
    /// Print keys only.
    #[arg(long)]
    keys_only: bool,
    /// One JSON object per line: `{"key": .., "value": ..}`.
    #[arg(long)]
    json: bool,
}

/// Prints `key<TAB>value` per entry, in key order.
pub fn scan(a: ScanArgs) -> ToolResult {
    let db = open(&a.target.db)?;
    let ks = keyspace(&db, &a.target.keyspace)?;
    let ke = a.enc.key_encoding;
    let bound = |k: &Option<String>| -> ToolResult<Option<Vec<u8>>> {
        Ok(match k {
            Some(k) => Some(ke.decode(k)?),
            None => None,
        })
    };
    let iter = match &a.prefix {
        Some(p) => ks.prefix(ke.decode(p)?),
        None => {
            let lower = bound(&a.from)?.map_or(Bound::Unbounded, Bound::Included);
            let upper = bound(&a.to)?.map_or(Bound::Unbounded, Bound::Excluded);
            ks.range::<Vec<u8>, _>((lower, upper))
        }
    };
    let iter: Box<dyn Iterator<Item = cairndb::Result<cairndb::KeyValue>>> = if a.reverse {
        Box::new(iter.rev())
    } else {
        Box::new(iter)
    };
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for entry in iter.take(a.limit.map_or(usize::MAX, |l| l as usize)) {
        let (k, v) = entry?;
        let key = ke.encode(&k);
        let value = (!a.keys_only).then(|| a.enc.value_encoding.encode(&v));
        if a.json {
            let mut line = serde_json::json!({ "key": key });
            if let Some(value) = value {
                line["value"] = value.into();
            }
            writeln!(out, "{line}")?;
        } else {
            match value {
                Some(value) => writeln!(out, "{key}\t{value}")?,
                None => writeln!(out, "{key}")?,
            }
        }
    }
    out.flush()?;
    drop(out);
    db.close()?;
    Ok(())
}

#[derive(clap::Args)]
pub struct DbArgs {
    /// The database directory.
    db: std::path::PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// The database's shape: per level, tables and bytes; memtables; value
/// bytes live, dead and not yet settled; space on disk and its
/// amplification; write amplification since the database was created;
/// background work done and writers' stall time. Counters "since open"
/// (the block cache's hit rate and this open's write amplification in
/// `--json`, from `Db::stats`) count this tool's own open only: an
/// application reads them from its own handle.
pub fn stats(a: DbArgs) -> ToolResult {
    let db = open(&a.db)?;
    let s = db.stats();
    let dir_bytes = dir_bytes(&a.db)?;
    let table_bytes: u64 = s.bytes_per_level.iter().sum();
    let live = table_bytes + s.value_bytes_live;
    let space_amp = if live == 0 {
        0.0
    } else {
        dir_bytes as f64 / live as f64
    };
    let keyspaces = db.keyspaces();
    let value_files = value_file_bytes(&a.db)?;
    let value_dead = value_files.saturating_sub(s.value_bytes_live);
    if a.json {
        let levels: Vec<_> = s
            .tables_per_level
            .iter()
            .zip(&s.bytes_per_level)
            .enumerate()
            .map(|(level, (tables, bytes))| {
                serde_json::json!({ "level": level, "tables": tables, "bytes": bytes })
            })
            .collect();
        let doc = serde_json::json!({
            "keyspaces": keyspaces,
            "levels": levels,
            "table_entries": s.table_entries,
            "memtable_bytes": s.memtable_bytes,
            "sealed_memtables": s.sealed_memtables,
            "value_bytes_live": s.value_bytes_live,
            "value_bytes_unsettled": s.value_bytes_unsettled,
            "value_segments": s.value_segments,
            "value_file_bytes": value_files,
            "value_bytes_dead": value_dead,
            "dir_bytes": dir_bytes,
            "space_amplification": space_amp,
            "last_seqno": s.last_seqno,
            "flushes": s.flushes,
            "compactions": s.compactions,
            "stall_micros": s.stall_micros,
            "slowdown_micros": s.slowdown_micros,
            "user_bytes_written": s.user_bytes_written,
            "journal_bytes_written": s.journal_bytes_written,
            "table_bytes_written": s.table_bytes_written,
            "write_amplification": s.write_amplification(),
            "lifetime_user_bytes": s.lifetime_user_bytes,
            "lifetime_disk_bytes": s.lifetime_disk_bytes,
            "lifetime_write_amplification": s.lifetime_write_amplification(),
            "block_cache_hits": s.block_cache_hits,
            "block_cache_misses": s.block_cache_misses,
            "block_cache_hit_rate": s.block_cache_hit_rate(),
            "block_cache_bytes": s.block_cache_bytes,
            "block_cache_capacity": s.block_cache_capacity,
            "open_tables": s.open_tables,
            "table_memory_bytes": s.table_memory_bytes,
            "write_error": s.write_error,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("database   {}", a.db.display());
        println!("keyspaces  {}", keyspaces.join(", "));
        println!("level  tables        bytes");
        for (level, (tables, bytes)) in s
            .tables_per_level
            .iter()
            .zip(&s.bytes_per_level)
            .enumerate()
        {
            if *tables > 0 {
                println!("L{level:<5} {tables:>6} {bytes:>12}");
            }
        }
        println!("table entries          {}", s.table_entries);
        println!(
            "memtables              {} bytes, {} sealed",
            s.memtable_bytes, s.sealed_memtables
        );
        println!(
            "separated values       {} bytes live in {} segments ({} not yet in key order)",
            s.value_bytes_live, s.value_segments, s.value_bytes_unsettled
        );
        println!(
            "value files            {value_files} bytes ({value_dead} dead or not yet reclaimed)"
        );
        println!("directory              {dir_bytes} bytes (space amplification {space_amp:.2})");
        if let Some(wa) = s.lifetime_write_amplification() {
            println!(
                "written                {} bytes by the user, {} to disk (write amplification {wa:.2}, since created)",
                s.lifetime_user_bytes, s.lifetime_disk_bytes
            );
        }
        println!("last seqno             {}", s.last_seqno);
        println!(
            "since open             {} flushes, {} compactions, stalls {} us, slowdowns {} us",
            s.flushes, s.compactions, s.stall_micros, s.slowdown_micros
        );
        if let Some(e) = &s.write_error {
            println!("write error            {e}");
        }
    }
    db.close()?;
    Ok(())
}

/// Bytes of the files that hold separated values: values files, value
/// streams, and every journal but the newest (the one this open writes,
/// pre-written ahead of its records); what of them is not live is dead
/// or not yet reclaimed.
fn value_file_bytes(dir: &std::path::Path) -> ToolResult<u64> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((stem, ext)) = name.split_once('.') else {
            continue;
        };
        let (Ok(number), true) = (
            stem.parse::<u64>(),
            matches!(ext, "values" | "stream" | "journal"),
        ) else {
            continue;
        };
        files.push((ext == "journal", number, e.metadata()?.len()));
    }
    let newest_journal = files.iter().filter(|f| f.0).map(|f| f.1).max();
    Ok(files
        .iter()
        .filter(|f| !(f.0 && Some(f.1) == newest_journal))
        .map(|f| f.2)
        .sum())
}

/// Bytes of the files directly in `dir` (what the database occupies).
fn dir_bytes(dir: &std::path::Path) -> ToolResult<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let meta = e?.metadata()?;
        if meta.is_file() {
            n += meta.len();
        }
    }
    Ok(n)
}

/// Reads every table and separated value, checking every checksum
/// (`Db::verify`); exit status 1 if anything is wrong.
pub fn verify(a: DbArgs) -> ToolResult<bool> {
    let db = open(&a.db)?;
    let bar = progress(0, "verifying");
    let report = db.verify_with(|r| {
        bar.set_length(r.table_bytes_total);
        bar.set_position(r.table_bytes);
    })?;
    bar.finish_and_clear();
    if a.json {
        let problems: Vec<String> = report.problems.iter().map(|e| e.to_string()).collect();
        println!(
            "{}",
            serde_json::json!({
                "ok": report.is_ok(),
                "tables": report.tables,
                "table_bytes": report.table_bytes,
                "entries": report.entries,
                "values": report.values,
                "value_bytes": report.value_bytes,
                "problem_count": report.problem_count,
                "problems": problems,
            })
        );
    } else {
        println!(
            "{} tables ({} bytes), {} entries, {} separated values ({} bytes) read",
            report.tables, report.table_bytes, report.entries, report.values, report.value_bytes
        );
        for p in &report.problems {
            println!("problem: {p}");
        }
        if report.problem_count > report.problems.len() as u64 {
            println!(
                "... and {} more problems",
                report.problem_count - report.problems.len() as u64
            );
        }
        println!(
            "{}",
            if report.is_ok() {
                "ok".to_string()
            } else {
                format!("{} problems", report.problem_count)
            }
        );
    }
    db.close()?;
    Ok(report.is_ok())
}

/// Flushes and merges every table into one sorted level (`Db::compact`).
pub fn compact(a: DbArgs) -> ToolResult {
    let db = open(&a.db)?;
    let before = dir_bytes(&a.db)?;
    let started = std::time::Instant::now();
    db.compact()?;
    db.close()?;
    let after = dir_bytes(&a.db)?;
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "bytes_before": before, "bytes_after": after, "seconds": secs })
        );
    } else {
        println!("compacted in {secs:.2} s: {before} -> {after} bytes in the directory");
    }
    Ok(())
}
