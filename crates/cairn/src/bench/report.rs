//! Summary table, JSON lines and plots.
//!
//! - `print_summary`: the device limits measured in this run, then one line
//!   per row (engine × workload × phase) with its rate, its ratio to the
//!   limit it is compared with (a device limit, or another row of the same
//!   run), the target for that ratio and whether it was met, amplification,
//!   RSS, stalls, CPU cores other processes took meanwhile, latency,
//!   OK/FAIL/SKIP and a note.
//!   Where CairnDB ran beside its controls (`cairndb-inline`,
//!   `cairndb-nogc`, `cairndb-direct`, `cairndb-append`,
//!   `cairndb-norecycle`, `cairndb-buffered-journal`, `cairndb-cold`), a
//!   block below the
//!   table gives cairndb's rate over
//!   each control's, per workload/phase.
//! - `write_jsonl`: the same as JSON lines, appended to a file, for
//!   comparing runs.
//! - `plot`: `timeline.svg` (ops/s over time, one panel per workload/phase,
//!   one line per engine, stalls marked) and `ratios.svg` (each row's ratio
//!   to its device limit; engines side by side, normalized to the best, where
//!   several ran the same workload/phase).

use super::device::DeviceLimits;
use super::engine::CAIRN_VARIANTS;
use super::monitor::Sample;
use super::{BenchResult, Row};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};

/// `1234567` → `"1,234,567"`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A float with `decimals` decimals and thousands separators in the
/// integer part; "-" if not finite.
pub fn thousands_f(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let int: u64 = int.parse().unwrap_or(0);
    let sign = if x < 0.0 && s.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{}", thousands(int))
    } else {
        format!("{sign}{}.{frac}", thousands(int))
    }
}

/// Bytes/s as MB/s (1e6), the unit rows use.
fn mbps(bytes_per_sec: f64) -> String {
    format!("{} MB/s", thousands_f(bytes_per_sec / 1e6, 1))
}

/// A rate in a row's unit: ops/s as an integer, MB/s with one decimal.
fn rate_cell(rate: f64, unit: &str) -> String {
    if unit == "MB/s" {
        format!("{} {unit}", thousands_f(rate, 1))
    } else {
        format!("{} {unit}", thousands_f(rate, 0))
    }
}

/// A ratio with 2 significant-ish decimals.
fn ratio_str(r: f64) -> String {
    if !r.is_finite() {
        "-".into()
    } else if r >= 10.0 {
        format!("{r:.1}")
    } else if r >= 0.1 {
        format!("{r:.2}")
    } else {
        format!("{r:.3}")
    }
}

/// Memory, compactly: "180M", "1.4G".
fn mem_str(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1}G", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{}M", bytes >> 20)
    }
}

/// Bytes on disk in MiB with one decimal: "55.6M".
fn mib_str(bytes: u64) -> String {
    format!("{}M", thousands_f(bytes as f64 / f64::from(1u32 << 20), 1))
}

/// A latency in µs: one decimal below 100, integer with separators above.
fn lat_str(us: f64) -> String {
    if us < 100.0 {
        format!("{us:.1}")
    } else {
        thousands_f(us, 0)
    }
}

fn opt_f(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// The probe point a limit was taken from, if its figure is one of the
/// points: " (bs 4K, x8)".
fn point_note(device: &DeviceLimits, value: f64, block: Option<usize>) -> String {
    if value <= 0.0 {
        return String::new();
    }
    let p = device.points.iter().find(|(_, bs, _, bps)| {
        block.is_none_or(|b| b == *bs) && (bps - value).abs() <= value * 1e-9
    });
    match p {
        Some((_, bs, n, _)) => {
            let bs = if bs.is_multiple_of(1 << 20) {
                format!("{}M", bs >> 20)
            } else if bs.is_multiple_of(1024) {
                format!("{}K", bs >> 10)
            } else {
                bs.to_string()
            };
            format!("bs {bs} x{n}")
        }
        None => String::new(),
    }
}

/// Normalized name for matching fio figures with limit fields.
fn norm(name: &str) -> String {
    name.to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The device block of the summary.
fn device_block(device: &DeviceLimits) -> String {
    // (field name used to match fio entries, label, value, unit kind, block)
    let limits: [(&str, &str, f64, bool, Option<usize>); 7] = [
        (
            "seq_write",
            "seq write, pre-written file",
            device.seq_write,
            true,
            None,
        ),
        (
            "seq_write_fresh",
            "seq write, fresh file",
            device.seq_write_fresh,
            true,
            None,
        ),
        (
            "rand_read_4k",
            "4K random read, workload threads",
            device.rand_read_4k,
            true,
            Some(4096),
        ),
        (
            "rand_read_4k_qd",
            "4K random read, high queue depth",
            device.rand_read_4k_qd,
            true,
            Some(4096),
        ),
        (
            "seq_read",
            "sequential read (best block)",
            device.seq_read,
            true,
            Some(1 << 20),
        ),
        (
            "fdatasync_per_sec",
            "fdatasync after small append",
            device.fdatasync_per_sec,
            false,
            None,
        ),
        (
            "fdatasync_overwrite_per_sec",
            "fdatasync after small overwrite",
            device.fdatasync_overwrite_per_sec,
            false,
            None,
        ),
    ];
    let fio: Vec<(String, f64)> = device.fio.iter().map(|(n, v)| (norm(n), *v)).collect();
    let fio_for = |field: &str| {
        fio.iter()
            .find(|(n, _)| n == field || (field == "fdatasync_per_sec" && n == "fdatasync"))
            .map(|(_, v)| *v)
    };
    let mut lines = Vec::new();
    for (field, label, value, bytes, block) in limits {
        let figure = if value <= 0.0 {
            "-".to_owned()
        } else if bytes {
            mbps(value)
        } else {
            format!("{} /s", thousands_f(value, 0))
        };
        let mut extra = Vec::new();
        if bytes && block == Some(4096) && value > 0.0 {
            extra.push(format!("{} IOPS", thousands_f(value / 4096.0, 0)));
        }
        let note = point_note(device, value, block);
        if !note.is_empty() {
            extra.push(note);
        }
        if let Some(f) = fio_for(field) {
            extra.push(format!(
                "fio {}",
                if bytes {
                    mbps(f)
                } else {
                    format!("{} /s", thousands_f(f, 0))
                }
            ));
        }
        lines.push((label, figure, extra.join(", ")));
    }
    let mut out =
        String::from("Device limits (measured in this run; ratios below are against these)\n");
    let w = lines.iter().map(|(l, _, _)| l.len()).max().unwrap_or(0);
    let fw = lines.iter().map(|(_, f, _)| f.len()).max().unwrap_or(0);
    for (label, figure, extra) in &lines {
        let _ = write!(out, "  {label:<w$}  {figure:>fw$}");
        if !extra.is_empty() {
            let _ = write!(out, "  ({extra})");
        }
        out.push('\n');
    }
    let matched = [
        "seq_write",
        "seq_write_fresh",
        "rand_read_4k",
        "rand_read_4k_qd",
        "seq_read",
        "fdatasync_per_sec",
        "fdatasync_overwrite_per_sec",
        "fdatasync",
    ];
    for (name, v) in &device.fio {
        if !matched.contains(&norm(name).as_str()) {
            let _ = writeln!(
                out,
                "  fio {name:<w$}  {:>fw$}",
                mbps(*v),
                w = w.saturating_sub(4)
            );
        }
    }
    out
}

/// The summary as text; `color` wraps FAIL in ANSI red.
pub fn format_summary(device: &DeviceLimits, rows: &[Row], color: bool) -> String {
    let mut out = device_block(device);
    out.push('\n');
    let header = [
        "engine",
        "workload",
        "phase",
        "rate",
        "ratio/limit",
        "target",
        "wamp",
        "samp",
        "rss",
        "stall",
        "others",
        "cpu µs/op",
        "p50/p99µs",
        "check",
        "note",
    ];
    const TARGET: usize = 5;
    const CHECK: usize = 13;
    // Right-aligned columns (numbers).
    let right = [
        false, false, false, true, false, false, true, true, true, true, true, true, true, false,
        false,
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for r in rows {
        let ratio = match (&r.limit, r.ratio()) {
            (Some((name, _)), Some(x)) => format!(
                "{:>5} {}",
                ratio_str(x),
                name.strip_suffix("_per_sec").unwrap_or(name)
            ),
            _ => "-".into(),
        };
        let target = match (r.target, r.target_met()) {
            (Some(t), Some(met)) => {
                format!("≥{} {}", ratio_str(t), if met { "pass" } else { "fail" })
            }
            _ => "-".into(),
        };
        let check = if r.failure.is_some() {
            "FAIL"
        } else if r.skipped.is_some() {
            "SKIP"
        } else {
            "OK"
        };
        let note = r.skipped.as_ref().or(r.note.as_ref());
        let skipped = r.skipped.is_some();
        table.push(vec![
            r.engine.clone(),
            r.workload.clone(),
            r.phase.clone(),
            if skipped {
                "-".into()
            } else {
                rate_cell(r.rate(), r.unit)
            },
            ratio,
            target,
            opt_f(r.write_amp),
            opt_f(r.space_amp),
            r.peak_rss.map_or_else(|| "-".into(), mem_str),
            if skipped {
                "-".into()
            } else {
                r.stalls.to_string()
            },
            opt_f(r.others_cpu),
            r.cpu_us_per_op().map_or_else(|| "-".into(), lat_str),
            r.latency_us.map_or_else(
                || "-".into(),
                |(a, b)| format!("{}/{}", lat_str(a), lat_str(b)),
            ),
            check.into(),
            note.cloned().unwrap_or_else(|| "-".into()),
        ]);
    }
    // Columns no row fills (all "-") are left out.
    let keep: Vec<usize> = (0..header.len())
        .filter(|&c| c < 4 || c == CHECK || table[1..].iter().any(|row| row[c] != "-"))
        .collect();
    let right: Vec<bool> = keep.iter().map(|&c| right[c]).collect();
    let target_col = keep.iter().position(|&c| c == TARGET);
    let table: Vec<Vec<String>> = table
        .into_iter()
        .map(|row| keep.iter().map(|&c| row[c].clone()).collect())
        .collect();
    let ncol = keep.len();
    let widths: Vec<usize> = (0..ncol)
        .map(|c| {
            table
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let total: usize = widths.iter().sum::<usize>() + 2 * (ncol - 1);
    let sep = if total > 100 { " " } else { "  " };
    let (red, reset) = if color {
        ("\x1b[1;31m", "\x1b[0m")
    } else {
        ("", "")
    };
    for (i, row) in table.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                line.push_str(sep);
            }
            let pad = widths[c] - cell.chars().count();
            let last = c + 1 == ncol;
            let alarm = (cell == "FAIL" && i > 0)
                || (Some(c) == target_col && i > 0 && cell.ends_with(" fail"));
            if right[c] {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            } else if alarm {
                let _ = write!(line, "{red}{cell}{reset}");
                if !last {
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            } else {
                line.push_str(cell);
                if !last {
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            let width = widths.iter().sum::<usize>() + sep.len() * (ncol - 1);
            out.push_str(&"-".repeat(width));
            out.push('\n');
        } else if let Some(reason) = &rows[i - 1].failure {
            let _ = writeln!(out, "  {red}^ FAIL{reset}: {reason}");
        }
    }
    let failed = rows.iter().filter(|r| r.failure.is_some()).count();
    let skipped = rows.iter().filter(|r| r.skipped.is_some()).count();
    let skipped = if skipped > 0 {
        format!(" ({skipped} skipped)")
    } else {
        String::new()
    };
    if failed > 0 {
        let _ = writeln!(
            out,
            "{red}{failed} of {} rows FAILED{reset}{skipped}",
            rows.len()
        );
    } else {
        let _ = writeln!(out, "all {} rows OK{skipped}", rows.len());
    }
    let scored: Vec<bool> = rows.iter().filter_map(Row::target_met).collect();
    if !scored.is_empty() {
        let met = scored.iter().filter(|&&m| m).count();
        let _ = writeln!(
            out,
            "targets: {met} of {} met (a miss is marked, it does not fail the run)",
            scored.len()
        );
    }
    out.push_str(&disk_block(rows));
    out.push_str(&controls_block(rows));
    out
}

/// The rows that measured bytes on disk (dbbench's load and compact), as
/// a table: the files' lengths, the blocks allocated to them, and the
/// lengths over the user data (the row's samp). Empty if none did.
fn disk_block(rows: &[Row]) -> String {
    let measured: Vec<&Row> = rows.iter().filter(|r| r.disk.is_some()).collect();
    if measured.is_empty() {
        return String::new();
    }
    let mut table = vec![
        [
            "engine",
            "workload",
            "phase",
            "bytes",
            "allocated",
            "/ user data",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for r in measured {
        let Some(d) = r.disk else { continue };
        table.push(vec![
            r.engine.clone(),
            r.workload.clone(),
            r.phase.clone(),
            mib_str(d.bytes),
            mib_str(d.allocated),
            opt_f(r.space_amp),
        ]);
    }
    render_table(
        "\nBytes on disk (the database directory: bytes = files' lengths, \
         allocated = st_blocks × 512)\n",
        &table,
        3,
    )
}

/// Where `cairndb` ran beside its controls (the other `CAIRN_VARIANTS`):
/// per workload/phase, cairndb's rate over each control's ("-" where
/// either row failed, was skipped or is missing). Empty if no control ran.
fn controls_block(rows: &[Row]) -> String {
    let ok = |r: &&Row| r.failure.is_none() && r.skipped.is_none();
    let controls: Vec<&str> = CAIRN_VARIANTS[1..]
        .iter()
        .copied()
        .filter(|c| rows.iter().any(|r| r.engine == *c))
        .collect();
    if controls.is_empty() || !rows.iter().any(|r| r.engine == CAIRN_VARIANTS[0]) {
        return String::new();
    }
    let find = |engine: &str, w: &str, p: &str| {
        rows.iter()
            .find(|r| r.engine == engine && r.workload == w && r.phase == p)
    };
    let mut table = vec![
        ["workload", "phase"]
            .into_iter()
            .map(str::to_owned)
            .chain(
                controls
                    .iter()
                    .map(|c| format!("vs {}", c.strip_prefix("cairndb-").unwrap_or(c))),
            )
            .collect::<Vec<String>>(),
    ];
    for r in rows.iter().filter(|r| r.engine == CAIRN_VARIANTS[0]) {
        if table[1..]
            .iter()
            .any(|t| t[0] == r.workload && t[1] == r.phase)
        {
            continue;
        }
        let mut line = vec![r.workload.clone(), r.phase.clone()];
        for c in &controls {
            let cell = match (
                Some(r).filter(ok),
                find(c, &r.workload, &r.phase).filter(ok),
            ) {
                (Some(a), Some(b)) => ratio_str(a.rate() / b.rate().max(1e-9)),
                _ => "-".into(),
            };
            line.push(cell);
        }
        table.push(line);
    }
    render_table(
        "\nCairnDB against its controls (cairndb's rate / the control's, same run; >1: cairndb faster)\n",
        &table,
        2,
    )
}

/// Prints the device limits and the rows as a table on stdout.
pub fn print_summary(device: &DeviceLimits, rows: &[Row]) {
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = format_summary(device, rows, color);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The JSON line for the device limits.
fn device_json(device: &DeviceLimits, ts: u64) -> serde_json::Value {
    serde_json::json!({
        "type": "device",
        "timestamp": ts,
        "seq_write": device.seq_write,
        "seq_write_fresh": device.seq_write_fresh,
        "rand_read_4k": device.rand_read_4k,
        "rand_read_4k_qd": device.rand_read_4k_qd,
        "rand_read_4k_cpu_us": device.rand_read_4k_cpu_us,
        "seq_read": device.seq_read,
        "fdatasync_per_sec": device.fdatasync_per_sec,
        "fdatasync_overwrite_per_sec": device.fdatasync_overwrite_per_sec,
        "points": device.points.iter().map(|(name, block, depth, bps)| serde_json::json!({
            "name": name, "block": block, "depth": depth, "bytes_per_sec": bps,
        })).collect::<Vec<_>>(),
        "fio": device.fio.iter().map(|(name, bps)| serde_json::json!({
            "name": name, "value": bps,
        })).collect::<Vec<_>>(),
    })
}

/// The JSON line for a row.
fn row_json(r: &Row, ts: u64) -> serde_json::Value {
    serde_json::json!({
        "type": "row",
        "timestamp": ts,
        "engine": r.engine,
        "workload": r.workload,
        "phase": r.phase,
        "ops": r.ops,
        "secs": r.secs,
        "user_bytes": r.user_bytes,
        "status": if r.failure.is_some() {
            "FAIL"
        } else if r.skipped.is_some() {
            "SKIP"
        } else {
            "OK"
        },
        "failure": r.failure,
        "skipped": r.skipped,
        "note": r.note,
        "target": r.target,
        "target_met": r.target_met(),
        "limit_name": r.limit.as_ref().map(|(n, _)| n),
        "limit": r.limit.as_ref().map(|(_, v)| v),
        "write_amp": r.write_amp,
        "space_amp": r.space_amp,
        "disk_bytes": r.disk.map(|d| d.bytes),
        "disk_allocated_bytes": r.disk.map(|d| d.allocated),
        "peak_rss": r.peak_rss,
        "stalls": r.stalls,
        "others_cpu": r.others_cpu,
        "own_cpu_secs": r.own_cpu_secs,
        "cpu_us_per_op": r.cpu_us_per_op(),
        "p50_us": r.latency_us.map(|l| l.0),
        "p99_us": r.latency_us.map(|l| l.1),
        "unit": r.unit,
        "rate": r.rate(),
        "ratio": r.ratio(),
    })
}

/// Appends one JSON object per row (and one for the device limits) to
/// `path`, all with the same `timestamp` (seconds since the epoch).
/// Non-finite numbers become `null`.
pub fn write_jsonl(path: &Path, device: &DeviceLimits, rows: &[Row]) -> BenchResult<()> {
    let ts = now_secs();
    let mut text = String::new();
    text.push_str(&device_json(device, ts).to_string());
    text.push('\n');
    for r in rows {
        text.push_str(&row_json(r, ts).to_string());
        text.push('\n');
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.flush()?;
    Ok(())
}

/// Axis labels: 1.2M, 350k.
fn si(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A stable color per engine, in order of first appearance.
fn engine_colors<'a>(names: impl Iterator<Item = &'a str>) -> BTreeMap<String, RGBAColor> {
    let mut map = BTreeMap::new();
    for n in names {
        let i = map.len();
        map.entry(n.to_owned())
            .or_insert_with(|| Palette99::pick(i).to_rgba());
    }
    map
}

/// Splits "engine/workload/phase" into (engine, "workload/phase").
fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or((key, key))
}

/// A timeline panel: "workload/phase" and its (engine, samples) lines.
type Panel<'a> = (&'a str, Vec<(&'a str, &'a [Sample])>);

/// Writes `dir/timeline.svg`: one panel per workload/phase (two columns),
/// one line per engine, stalled seconds as red dots on the x axis.
fn plot_timeline(path: &Path, timelines: &[(String, Vec<Sample>)]) -> BenchResult<()> {
    // Panels in order of first appearance.
    let mut panels: Vec<Panel> = Vec::new();
    for (key, samples) in timelines {
        let (engine, wp) = split_key(key);
        match panels.iter_mut().find(|(p, _)| *p == wp) {
            Some((_, v)) => v.push((engine, samples)),
            None => panels.push((wp, vec![(engine, samples)])),
        }
    }
    let colors = engine_colors(timelines.iter().map(|(k, _)| split_key(k).0));
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let nrows = panels.len().div_ceil(cols).max(1);
    let (pw, ph) = (640u32, 300u32);
    let size = (pw * cols as u32, ph * nrows as u32 + 40);
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let body = root.titled("Throughput over time (ops/s)", ("sans-serif", 22))?;
    if panels.is_empty() {
        body.draw(&Text::new(
            "no timelines recorded",
            (20, 20),
            ("sans-serif", 16),
        ))?;
    }
    let areas = body.split_evenly((nrows, cols));
    for ((title, series), area) in panels.iter().zip(areas.iter()) {
        let xmax = series
            .iter()
            .flat_map(|(_, s)| s.iter().map(|x| x.t))
            .fold(1.0f64, f64::max);
        let ymax = series
            .iter()
            .flat_map(|(_, s)| s.iter().map(|x| x.ops_per_sec))
            .fold(1.0f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(*title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("ops/s")
            .y_label_formatter(&|v| si(*v))
            .label_style(("sans-serif", 12))
            .draw()?;
        let mut any_stall = false;
        for (engine, samples) in series {
            let color = colors.get(*engine).copied().unwrap_or(BLACK.to_rgba());
            let points =
                std::iter::once((0.0, 0.0)).chain(samples.iter().map(|s| (s.t, s.ops_per_sec)));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(*engine)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            let stalls: Vec<_> = samples
                .iter()
                .filter(|s| s.stalled)
                .map(|s| (s.t, 0.0))
                .collect();
            any_stall |= !stalls.is_empty();
            chart.draw_series(stalls.into_iter().map(|p| Circle::new(p, 4, RED.filled())))?;
        }
        if any_stall {
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
                .label("stalled second")
                .legend(|(x, y)| Circle::new((x + 9, y), 4, RED.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// One horizontal bar of `ratios.svg`.
struct Bar {
    label: String,
    value: f64,
    text: String,
    color: RGBAColor,
    fail: bool,
}

/// Draws a horizontal bar panel on `area`; labels go on `root` (absolute
/// pixel coordinates), left of the plot.
fn bar_panel(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    x_desc: &str,
    bars: &[Bar],
    label_px: u32,
    reference: Option<f64>,
) -> BenchResult<()> {
    let n = bars.len().max(1) as f64;
    let vmax = bars
        .iter()
        .map(|b| b.value)
        .fold(reference.unwrap_or(0.0), f64::max)
        .max(1e-9);
    let xmax = vmax * 1.3;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(label_px)
        .build_cartesian_2d(0f64..xmax, 0f64..n)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(x_desc)
        .x_label_formatter(&|v| format!("{v:.2}"))
        .label_style(("sans-serif", 12))
        .draw()?;
    // Row 0 at the top.
    let y = |i: usize| n - i as f64 - 1.0;
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let style = if b.fail {
            b.color.mix(0.35).filled()
        } else {
            b.color.filled()
        };
        Rectangle::new([(0.0, y(i) + 0.15), (b.value.max(0.0), y(i) + 0.85)], style)
    }))?;
    chart.draw_series(
        bars.iter()
            .enumerate()
            .filter(|(_, b)| b.fail)
            .map(|(i, b)| {
                Rectangle::new(
                    [(0.0, y(i) + 0.15), (b.value.max(0.0), y(i) + 0.85)],
                    RED.stroke_width(2),
                )
            }),
    )?;
    let value_style =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            b.text.clone(),
            (b.value.max(0.0) + xmax * 0.01, y(i) + 0.5),
            value_style.clone(),
        )
    }))?;
    if let Some(r) = reference {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(r, 0.0), (r, n)],
            BLACK.mix(0.6).stroke_width(1),
        )))?;
    }
    let label_style =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
    for (i, b) in bars.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(0.0, y(i) + 0.5));
        let style = if b.fail {
            label_style.color(&RED)
        } else {
            label_style.clone()
        };
        root.draw(&Text::new(b.label.clone(), (px - 8, py), style))?;
    }
    if bars.is_empty() {
        let (px, py) = chart.backend_coord(&(xmax * 0.02, n / 2.0));
        root.draw(&Text::new(
            "nothing to compare",
            (px, py),
            ("sans-serif", 14),
        ))?;
    }
    Ok(())
}

/// Writes `dir/ratios.svg`: the ratio of each row to its device limit, and
/// engines' rates normalized to the best engine per workload/phase.
fn plot_ratios(path: &Path, rows: &[Row]) -> BenchResult<()> {
    let colors = engine_colors(rows.iter().map(|r| r.engine.as_str()));
    let color = |e: &str| colors.get(e).copied().unwrap_or(BLACK.to_rgba());
    let fail = |r: &Row| if r.failure.is_some() { " FAIL" } else { "" };

    let limit_bars: Vec<Bar> = rows
        .iter()
        .filter_map(|r| {
            let ratio = r.ratio()?;
            let name = r.limit.as_ref().map_or("", |(n, _)| n.as_str());
            let target = match (r.target, r.target_met()) {
                (Some(t), Some(met)) => {
                    format!(
                        " (target {}: {})",
                        ratio_str(t),
                        if met { "pass" } else { "fail" }
                    )
                }
                _ => String::new(),
            };
            Some(Bar {
                label: format!("{} {}/{}{}", r.engine, r.workload, r.phase, fail(r)),
                value: ratio,
                text: format!("{}x {name}{target}", ratio_str(ratio)),
                color: color(&r.engine),
                fail: r.failure.is_some(),
            })
        })
        .collect();

    // Workload/phase groups that several engines ran, in order of appearance.
    let mut groups: Vec<((&str, &str), Vec<&Row>)> = Vec::new();
    for r in rows.iter().filter(|r| r.skipped.is_none()) {
        let key = (r.workload.as_str(), r.phase.as_str());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let mut peer_bars = Vec::new();
    for ((w, p), group) in &groups {
        let mut engines: Vec<&str> = group.iter().map(|r| r.engine.as_str()).collect();
        engines.dedup();
        if engines.len() < 2 {
            continue;
        }
        let best = group
            .iter()
            .map(|r| r.rate())
            .fold(0.0f64, f64::max)
            .max(1e-9);
        for r in group {
            peer_bars.push(Bar {
                label: format!("{w}/{p} {}{}", r.engine, fail(r)),
                value: r.rate() / best,
                text: format!(
                    "{} ({})",
                    ratio_str(r.rate() / best),
                    rate_cell(r.rate(), r.unit)
                ),
                color: color(&r.engine),
                fail: r.failure.is_some(),
            });
        }
    }

    let label_chars = limit_bars
        .iter()
        .chain(&peer_bars)
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(10);
    let label_px = (label_chars as u32 * 7 + 16).clamp(80, 460);
    let panel_h = |n: usize| 90 + 28 * n.max(1) as u32;
    let top_h = panel_h(limit_bars.len());
    let bottom_h = if peer_bars.is_empty() {
        0
    } else {
        panel_h(peer_bars.len())
    };
    let root = SVGBackend::new(path, (1000, top_h + bottom_h)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(top_h);
    bar_panel(
        &root,
        &top,
        "Throughput / limit (device, or another phase of the same run)",
        "ratio to the limit",
        &limit_bars,
        label_px,
        Some(1.0),
    )?;
    if !peer_bars.is_empty() {
        bar_panel(
            &root,
            &bottom,
            "Engines on the same workload/phase, relative to the best",
            "rate / best engine's rate",
            &peer_bars,
            label_px,
            Some(1.0),
        )?;
    }
    root.present()?;
    Ok(())
}

/// Plots throughput over time per engine/phase (`dir/timeline.svg`) and
/// the ratio bars (`dir/ratios.svg`); returns the paths written. Timeline
/// keys are "engine/workload/phase".
pub fn plot(
    dir: &Path,
    timelines: &[(String, Vec<Sample>)],
    rows: &[Row],
) -> BenchResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let timeline = dir.join("timeline.svg");
    plot_timeline(&timeline, timelines)?;
    let ratios = dir.join("ratios.svg");
    plot_ratios(&ratios, rows)?;
    Ok(vec![timeline, ratios])
}

/// `title`, then `table` (its first row the header, underlined) in
/// columns as wide as their widest cell: the first `left` columns
/// left-aligned, the others right-aligned.
fn render_table(title: &str, table: &[Vec<String>], left: usize) -> String {
    let ncol = table.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..ncol)
        .map(|c| {
            table
                .iter()
                .map(|t| t[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::from(title);
    for (i, t) in table.iter().enumerate() {
        let mut line = String::from(" ");
        for (c, cell) in t.iter().enumerate() {
            let w = widths[c];
            if c < left {
                let _ = write!(line, " {cell:<w$}");
            } else {
                let _ = write!(line, "  {cell:>w$}");
            }
        }
        let line = line.trim_end();
        out.push_str(line);
        out.push('\n');
        if i == 0 {
            let width = line.chars().count().saturating_sub(2);
            let _ = writeln!(out, "  {}", "-".repeat(width));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::monitor::DiskUsage;

    fn device() -> DeviceLimits {
        DeviceLimits {
            seq_write: 512e6,
            seq_write_fresh: 301.5e6,
            rand_read_4k: 80e6,
            rand_read_4k_qd: 410e6,
            seq_read: 1_250e6,
            fdatasync_per_sec: 2_345.0,
            fdatasync_overwrite_per_sec: 4_690.0,
            points: vec![
                ("seq_write".into(), 1 << 20, 4, 512e6),
                ("rand_read_4k".into(), 4096, 4, 80e6),
                ("rand_read_4k_qd".into(), 4096, 64, 410e6),
            ],
            fio: vec![
                ("seq_write".into(), 530e6),
                ("rand_read_4k_qd".into(), 420e6),
                ("randwrite".into(), 90e6),
            ],
            ..DeviceLimits::default()
        }
    }

    fn row(engine: &str, workload: &str, phase: &str, ops: u64, unit: &'static str) -> Row {
        Row {
            engine: engine.into(),
            workload: workload.into(),
            phase: phase.into(),
            ops,
            secs: 10.0,
            user_bytes: ops * 116,
            failure: None,
            limit: None,
            write_amp: None,
            space_amp: None,
            disk: None,
            peak_rss: Some(180 << 20),
            stalls: 0,
            latency_us: Some((3.25, 1234.0)),
            unit,
            target: None,
            note: None,
            skipped: None,
            others_cpu: None,
            own_cpu_secs: None,
        }
    }

    fn rows() -> Vec<Row> {
        let mut fill = row("cairndb", "dbbench", "fillrandom", 4_000_000, "MB/s");
        fill.limit = Some(("seq_write".into(), 512.0));
        fill.write_amp = Some(2.31);
        fill.space_amp = Some(1.08);
        fill.disk = Some(DiskUsage {
            bytes: 500 << 20,
            allocated: (512 << 20) + (1 << 19),
        });
        let mut fill_peer = fill.clone();
        fill_peer.engine = "rocksdb".into();
        fill_peer.ops = 5_500_000;
        fill_peer.user_bytes = 5_500_000 * 116;
        fill_peer.peak_rss = Some(1_400 << 20);
        let mut read = row("cairndb", "dbbench", "readrandom", 1_234_567, "ops/s");
        read.limit = Some(("rand_read_4k_qd".into(), 410e6 / 4096.0));
        read.failure = Some("key 17: value checksum mismatch".into());
        read.stalls = 3;
        let mut sync = row("cairndb", "synctx", "commit", 18_000, "ops/s");
        sync.limit = Some(("fdatasync_per_sec".into(), 2_345.0));
        sync.latency_us = Some((412.0, 2_950.5));
        let scan = row("cairndb", "ycsb", "e", 88_000, "ops/s");
        vec![fill, fill_peer, read, sync, scan]
    }

    #[test]
    fn number_formatting() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands_f(1234.56, 1), "1,234.6");
        assert_eq!(thousands_f(-1234.0, 0), "-1,234");
        assert_eq!(thousands_f(f64::NAN, 1), "-");
        assert_eq!(si(1_500_000.0), "1.5M");
    }

    #[test]
    fn summary_table() {
        let text = format_summary(&device(), &rows(), false);
        println!("{text}");
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "too wide ({}): {line}",
                line.chars().count()
            );
        }
        assert!(text.contains("512.0 MB/s"));
        assert!(text.contains("fio 530.0 MB/s"));
        assert!(text.contains("100,098 IOPS"));
        assert!(text.contains("bs 4K x64"));
        assert!(text.contains("123,457 ops/s"));
        assert!(text.contains("^ FAIL: key 17: value checksum mismatch"));
        assert!(text.contains("1 of 5 rows FAILED"));
        assert!(text.contains("0.091 seq_write") && text.contains(" 0.12 seq_write"));
        assert!(text.contains("0.77 fdatasync "));
        assert!(text.contains("1.4G") && text.contains("180M"));
        assert!(text.contains("Bytes on disk"), "{text}");
        let disk = text
            .lines()
            .find(|l| l.contains("fillrandom") && l.contains("500.0M"))
            .expect("a line of bytes on disk");
        assert!(disk.contains("512.5M") && disk.contains("1.08"), "{disk}");
        // Columns nobody filled are left out.
        let bare = format_summary(&device(), &[row("a", "w", "p", 10, "ops/s")], false);
        println!("{bare}");
        assert!(!bare.contains("wamp") && bare.contains("stall") && bare.contains("OK"));
        // Nothing to show is still a well-formed summary.
        let empty = format_summary(&DeviceLimits::default(), &[], false);
        assert!(empty.contains("0 rows"), "{empty}");
    }

    #[test]
    fn controls_block_compares_variants() {
        let mut rs = rows();
        // rows(): cairndb fillrandom 4,000,000 ops in 10 s, readrandom FAIL.
        let mut inline = rs[0].clone();
        inline.engine = "cairndb-inline".into();
        inline.user_bytes /= 2;
        let mut read = rs[2].clone();
        read.engine = "cairndb-inline".into();
        read.failure = None;
        let mut nogc = rs[0].clone();
        nogc.engine = "cairndb-nogc".into();
        nogc.user_bytes *= 4;
        rs.extend([inline, read, nogc]);
        let text = format_summary(&device(), &rs, false);
        println!("{text}");
        // The variant's name is the engine column.
        assert!(text.lines().any(|l| l.starts_with("cairndb-inline ")));
        let block = text
            .split_once("CairnDB against its controls")
            .map(|(_, b)| b)
            .expect("controls block");
        assert!(block.lines().all(|l| l.chars().count() <= 100), "{block}");
        let line = |phase: &str| {
            block
                .lines()
                .find(|l| l.contains(phase))
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(block.contains("vs inline") && block.contains("vs nogc"));
        assert_eq!(line("fillrandom"), "dbbench fillrandom 2.00 0.25");
        // A failed row gives no ratio; a control that did not run the
        // phase neither.
        assert_eq!(line("readrandom"), "dbbench readrandom - -");
        assert_eq!(line("commit"), "synctx commit - -");
        // Without a control, no block.
        assert!(!format_summary(&device(), &rows(), false).contains("against its controls"));
    }

    #[test]
    fn targets_notes_and_skips() {
        let mut x2 = row(
            "cairndb",
            "txn-scaling",
            "read-only x2",
            20_000_000,
            "ops/s",
        );
        x2.latency_us = None;
        let mut x64 = x2.clone();
        x64.phase = "read-only x64".into();
        x64.ops = 19_000_000;
        x64.limit = Some(("read-only x2".into(), x2.rate()));
        x64.target = Some(0.90);
        let mut low = x64.clone();
        low.phase = "put, txn open".into();
        low.ops = 17_000_000;
        low.limit = Some(("put, no txn".into(), x2.rate()));
        low.target = Some(0.95);
        let mut rw = x2.clone();
        rw.phase = "read-write x2".into();
        rw.note = Some("3 conflicts (0.001 %)".into());
        let skip = Row {
            engine: "lmdb".into(),
            workload: "txn-scaling".into(),
            phase: "all phases".into(),
            skipped: Some("no transactions in this engine's adapter".into()),
            unit: "ops/s",
            ..Row::default()
        };
        let rows = vec![x2, x64, low, rw, skip];
        let text = format_summary(&device(), &rows, false);
        println!("{text}");
        let line = |phase: &str| {
            text.lines()
                .find(|l| l.contains("txn-scaling") && l.contains(phase))
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(
            line("x64").contains("0.95 read-only x2 ≥0.90 pass"),
            "{text}"
        );
        assert!(line("txn open").contains("0.85 put, no txn ≥0.95 fail"));
        assert!(line("read-write").ends_with("OK 3 conflicts (0.001 %)"));
        assert!(line("all phases").contains("- SKIP no transactions in this engine's adapter"));
        assert!(text.contains("all 5 rows OK (1 skipped)"));
        assert!(text.contains("targets: 1 of 2 met"));
        let red = format_summary(&device(), &rows, true);
        assert!(red.contains("\x1b[1;31m≥0.95 fail\x1b[0m"), "{red}");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("runs.jsonl");
        write_jsonl(&path, &device(), &rows).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        let values: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("valid JSON line"))
            .collect();
        assert_eq!(values[2]["target"], 0.90);
        assert_eq!(values[2]["target_met"], true);
        assert_eq!(values[3]["target_met"], false);
        assert!(values[1]["target_met"].is_null());
        assert_eq!(values[4]["note"], "3 conflicts (0.001 %)");
        assert_eq!(values[5]["status"], "SKIP");
        plot(dir.path(), &[], &rows).expect("plots with skipped rows");
    }

    #[test]
    fn jsonl_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("runs.jsonl");
        let mut rs = rows();
        rs[4].secs = 0.0;
        rs[4].limit = Some(("x".into(), f64::INFINITY));
        write_jsonl(&path, &device(), &rs).expect("write");
        write_jsonl(&path, &device(), &rs[..1]).expect("append");
        let text = std::fs::read_to_string(&path).expect("read");
        let values: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("valid JSON line"))
            .collect();
        assert_eq!(values.len(), 1 + 5 + 1 + 1);
        assert_eq!(values[0]["type"], "device");
        assert_eq!(values[0]["seq_write"], 512e6);
        assert_eq!(values[0]["points"][2]["depth"], 64);
        assert_eq!(values[0]["fio"][0]["name"], "seq_write");
        assert!(
            values[0]["timestamp"]
                .as_u64()
                .is_some_and(|t| t > 1_600_000_000)
        );
        let read = &values[3];
        assert_eq!(read["type"], "row");
        assert_eq!(read["phase"], "readrandom");
        assert_eq!(read["status"], "FAIL");
        assert_eq!(read["failure"], "key 17: value checksum mismatch");
        assert_eq!(read["limit_name"], "rand_read_4k_qd");
        assert_eq!(read["stalls"], 3);
        assert_eq!(read["p99_us"], 1234.0);
        assert!((read["rate"].as_f64().expect("rate") - 123_456.7).abs() < 1e-6);
        assert!(read["ratio"].as_f64().is_some());
        assert_eq!(values[1]["status"], "OK");
        assert!(values[1]["failure"].is_null());
        assert!(values[5]["space_amp"].is_null());
        assert_eq!(values[1]["disk_bytes"], 500 << 20);
        assert_eq!(values[1]["disk_allocated_bytes"], (512 << 20) + (1 << 19));
        assert!(values[3]["disk_bytes"].is_null());
        assert_eq!(values[6]["type"], "device");
    }

    #[test]
    fn plots_are_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut timelines = Vec::new();
        for r in rows() {
            let base = r.rate().max(1.0);
            let samples: Vec<Sample> = (1..=12)
                .map(|t| {
                    let stalled = r.failure.is_some() && (5..=7).contains(&t);
                    let wave = 1.0 + 0.3 * ((t as f64) * 0.9).sin();
                    Sample {
                        t: t as f64,
                        ops_per_sec: if stalled {
                            0.0
                        } else {
                            base * wave * 1000.0 / 116.0
                        },
                        stalled,
                        ..Sample::default()
                    }
                })
                .collect();
            timelines.push((format!("{}/{}/{}", r.engine, r.workload, r.phase), samples));
        }
        let paths = plot(dir.path(), &timelines, &rows()).expect("plot");
        assert_eq!(paths.len(), 2);
        for p in &paths {
            let svg = std::fs::read_to_string(p).expect("svg");
            assert!(
                svg.starts_with("<svg") && svg.len() > 1000,
                "{}",
                p.display()
            );
            assert!(svg.contains("<text"));
        }
        let ratios = std::fs::read_to_string(&paths[1]).expect("svg");
        assert!(ratios.contains("rocksdb"));
        if let Some(out) = std::env::var_os("CAIRN_PLOT_DIR") {
            for p in &paths {
                let to = Path::new(&out).join(p.file_name().expect("name"));
                std::fs::copy(p, to).expect("copy");
            }
        }
        // Empty inputs still give valid files.
        let empty = tempfile::tempdir().expect("tempdir");
        let paths = plot(empty.path(), &[], &[]).expect("plot empty");
        assert!(
            paths
                .iter()
                .all(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        );
    }
}
