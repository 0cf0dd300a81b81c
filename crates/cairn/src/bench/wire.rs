//! Rows and timelines as JSON, for phases run in a child process (the
//! contest's read phases run in a fresh process and hand their results
//! back this way).

use super::monitor::{DiskUsage, Sample};
use super::{BenchResult, Row};
use serde_json::{Value, json};

fn unit_of(s: &str) -> &'static str {
    if s == "MB/s" { "MB/s" } else { "ops/s" }
}

pub fn row_to_json(r: &Row) -> Value {
    json!({
        "engine": r.engine, "workload": r.workload, "phase": r.phase,
        "ops": r.ops, "secs": r.secs, "user_bytes": r.user_bytes,
        "failure": r.failure,
        "limit_name": r.limit.as_ref().map(|l| l.0.clone()),
        "limit": r.limit.as_ref().map(|l| l.1),
        "write_amp": r.write_amp, "space_amp": r.space_amp, "peak_rss": r.peak_rss,
        "disk_bytes": r.disk.map(|d| d.bytes),
        "disk_allocated_bytes": r.disk.map(|d| d.allocated),
        "stalls": r.stalls,
        "p50_us": r.latency_us.map(|l| l.0), "p99_us": r.latency_us.map(|l| l.1),
        "unit": r.unit,
        "target": r.target, "note": r.note, "skipped": r.skipped,
        "others_cpu": r.others_cpu,
        "own_cpu_secs": r.own_cpu_secs,
    })
}

pub fn row_from_json(v: &Value) -> BenchResult<Row> {
    let s = |k: &str| {
        v[k].as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("row field {k} missing"))
    };
    let limit = match (v["limit_name"].as_str(), v["limit"].as_f64()) {
        (Some(n), Some(l)) => Some((n.to_owned(), l)),
        _ => None,
    };
    let latency = match (v["p50_us"].as_f64(), v["p99_us"].as_f64()) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    Ok(Row {
        engine: s("engine")?,
        workload: s("workload")?,
        phase: s("phase")?,
        ops: v["ops"].as_u64().unwrap_or(0),
        secs: v["secs"].as_f64().unwrap_or(0.0),
        user_bytes: v["user_bytes"].as_u64().unwrap_or(0),
        failure: v["failure"].as_str().map(str::to_owned),
        limit,
        write_amp: v["write_amp"].as_f64(),
        space_amp: v["space_amp"].as_f64(),
        disk: match (v["disk_bytes"].as_u64(), v["disk_allocated_bytes"].as_u64()) {
            (Some(bytes), Some(allocated)) => Some(DiskUsage { bytes, allocated }),
            _ => None,
        },
        peak_rss: v["peak_rss"].as_u64(),
        stalls: v["stalls"].as_u64().unwrap_or(0),
        latency_us: latency,
        unit: unit_of(v["unit"].as_str().unwrap_or("")),
        target: v["target"].as_f64(),
        note: v["note"].as_str().map(str::to_owned),
        skipped: v["skipped"].as_str().map(str::to_owned),
        others_cpu: v["others_cpu"].as_f64(),
        own_cpu_secs: v["own_cpu_secs"].as_f64(),
    })
}

pub fn samples_to_json(samples: &[Sample]) -> Value {
    Value::Array(
        samples
            .iter()
            .map(|s| {
                json!([
                    s.t,
                    s.ops_per_sec,
                    s.mb_per_sec,
                    s.cpu_user,
                    s.cpu_sys,
                    s.disk_read_mb_per_sec,
                    s.disk_write_mb_per_sec,
                    s.rss_bytes,
                    s.stalled
                ])
            })
            .collect(),
    )
}

pub fn samples_from_json(v: &Value) -> Vec<Sample> {
    let Some(items) = v.as_array() else {
        return Vec::new();
    };
    items
        .iter()
        .map(|a| {
            let f = |i: usize| a[i].as_f64().unwrap_or(0.0);
            Sample {
                t: f(0),
                ops_per_sec: f(1),
                mb_per_sec: f(2),
                cpu_user: f(3),
                cpu_sys: f(4),
                disk_read_mb_per_sec: f(5),
                disk_write_mb_per_sec: f(6),
                rss_bytes: a[7].as_u64().unwrap_or(0),
                stalled: a[8].as_bool().unwrap_or(false),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_round_trip() {
        let r = Row {
            engine: "cairndb".into(),
            workload: "contest".into(),
            phase: "read".into(),
            ops: 10,
            secs: 1.5,
            user_bytes: 4096,
            failure: Some("key 3 is missing".into()),
            limit: Some(("4K rand read".into(), 200.0)),
            write_amp: None,
            space_amp: Some(1.1),
            disk: Some(DiskUsage {
                bytes: 5 << 20,
                allocated: 6 << 20,
            }),
            peak_rss: Some(1 << 20),
            stalls: 2,
            latency_us: Some((1.0, 9.0)),
            unit: "MB/s",
            target: Some(0.9),
            note: Some("3 conflicts".into()),
            skipped: None,
            others_cpu: Some(0.25),
            own_cpu_secs: Some(3.5),
        };
        let back = row_from_json(&row_to_json(&r)).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{r:?}"));
        let s = vec![Sample {
            t: 1.0,
            ops_per_sec: 5.0,
            rss_bytes: 7,
            stalled: true,
            ..Sample::default()
        }];
        let back = samples_from_json(&samples_to_json(&s));
        assert_eq!(format!("{back:?}"), format!("{s:?}"));
    }
}
