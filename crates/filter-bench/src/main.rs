//! Per-table filter bench for CairnDB.
//!
//! For N = 100_000 and 1_000_000 random 16-byte keys, builds each candidate
//! filter and measures build time, bytes/key, false-positive rate on
//! 1_000_000 keys known to be absent, and query time for present and absent
//! keys. Every filter must report every present key (no false negatives);
//! a false negative is a bug and makes the process exit non-zero.
//!
//! All filters are fed the same xxh3_64 hash of the key. Query timings
//! include that hash (the engine hashes the user key once per probe); the
//! baseline row is the hashing cost alone, for subtraction; its build column
//! is hash + sort + dedup of the key set, which the xor / fuse builds include.
//!
//! Run: `cargo run --release -p filter-bench`

use std::collections::HashSet;
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use fastbloom::BloomFilter;
use xorf::{BinaryFuse8, BinaryFuse16, Filter, Xor8};
use xxhash_rust::xxh3::xxh3_64;

type Key = [u8; 16];

const SIZES: [usize; 2] = [100_000, 1_000_000];
const ABSENT: usize = 1_000_000;
const MIN_QUERIES: usize = 1_000_000;
const RUNS: usize = 3;
const BLOOM_BITS_PER_KEY: usize = 10;

/// splitmix64: small, deterministic key generator.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_key(&mut self) -> Key {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        k[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        k
    }
}

#[inline(always)]
fn h(k: &Key) -> u64 {
    xxh3_64(k)
}

/// Hashes and dedupes: xor / binary fuse construction requires unique keys.
fn unique_hashes(keys: &[Key]) -> Vec<u64> {
    let mut v: Vec<u64> = keys.iter().map(h).collect();
    v.sort_unstable();
    v.dedup();
    v
}

struct Row {
    name: &'static str,
    n: usize,
    build_ns_per_key: f64,
    bytes_per_key: f64,
    fp: usize,
    present_ns: f64,
    absent_ns: f64,
}

/// Error text for a false negative; the caller exits non-zero on it.
struct FalseNegative(String);

/// `build` turns the key set into a filter (including hashing and, for the
/// static filters, deduping); `size` is the filter's serialized size in bytes
/// (bit/fingerprint array plus header); `contains` hashes and probes.
fn bench<F>(
    name: &'static str,
    keys: &[Key],
    absent: &[Key],
    build: impl Fn(&[Key]) -> F,
    size: impl Fn(&F) -> usize,
    contains: impl Fn(&F, &Key) -> bool,
) -> Result<Row, FalseNegative> {
    let n = keys.len();

    // Build: best of RUNS.
    let mut best_build = f64::INFINITY;
    let mut filter = None;
    for _ in 0..RUNS {
        let t = Instant::now();
        let f = black_box(build(black_box(keys)));
        let el = t.elapsed().as_nanos() as f64;
        best_build = best_build.min(el);
        filter = Some(f);
    }
    let Some(filter) = filter else {
        unreachable!("RUNS > 0")
    };

    // Correctness: every present key must be reported (no false negatives).
    for (i, k) in keys.iter().enumerate() {
        if !contains(&filter, k) {
            return Err(FalseNegative(format!(
                "{name}: FALSE NEGATIVE at N={n}, key #{i} ({k:02x?})"
            )));
        }
    }

    // Present queries: at least MIN_QUERIES, cycling the key set.
    let rounds = MIN_QUERIES.div_ceil(n);
    let mut best_present = f64::INFINITY;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut hits = 0usize;
        for _ in 0..rounds {
            for k in black_box(keys) {
                hits += usize::from(contains(&filter, k));
            }
        }
        let el = t.elapsed().as_nanos() as f64;
        black_box(hits);
        if hits != rounds * n {
            return Err(FalseNegative(format!(
                "{name}: FALSE NEGATIVE at N={n}: {hits} hits of {}",
                rounds * n
            )));
        }
        best_present = best_present.min(el / (rounds * n) as f64);
    }

    // Absent queries: 1M keys known absent; the hit count is the FP count.
    let mut best_absent = f64::INFINITY;
    let mut fp = 0usize;
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut hits = 0usize;
        for k in black_box(absent) {
            hits += usize::from(contains(&filter, k));
        }
        let el = t.elapsed().as_nanos() as f64;
        fp = black_box(hits);
        best_absent = best_absent.min(el / absent.len() as f64);
    }

    Ok(Row {
        name,
        n,
        build_ns_per_key: best_build / n as f64,
        bytes_per_key: size(&filter) as f64 / n as f64,
        fp,
        present_ns: best_present,
        absent_ns: best_absent,
    })
}

fn run() -> Result<Vec<Row>, FalseNegative> {
    let mut rows = Vec::new();
    for &n in &SIZES {
        let mut rng = SplitMix64(0xC0FF_EE00 ^ n as u64);
        let keys: Vec<Key> = (0..n).map(|_| rng.next_key()).collect();
        let set: HashSet<Key> = keys.iter().copied().collect();
        assert_eq!(set.len(), n, "duplicate generated keys");
        let mut arng = SplitMix64(0xABBA_5EED ^ n as u64);
        let mut absent: Vec<Key> = Vec::with_capacity(ABSENT);
        while absent.len() < ABSENT {
            let k = arng.next_key();
            if !set.contains(&k) {
                absent.push(k);
            }
        }
        drop(set);

        // Baseline: cost of hashing the key alone.
        rows.push(bench(
            "baseline: xxh3_64 only; build = hash+sort+dedup",
            &keys,
            &absent,
            unique_hashes,
            |_| 0,
            |_, k| black_box(h(k)) != 1,
        )?);

        rows.push(bench(
            "fastbloom 10 bits/key (k=7)",
            &keys,
            &absent,
            |ks| {
                let mut f = BloomFilter::with_num_bits(BLOOM_BITS_PER_KEY * ks.len())
                    .expected_items(ks.len());
                for k in ks {
                    f.insert_hash(h(k));
                }
                f
            },
            |f| f.as_slice().len() * 8 + 4,
            |f, k| f.contains_hash(h(k)),
        )?);

        rows.push(bench(
            "fastbloom fp=1% target",
            &keys,
            &absent,
            |ks| {
                let mut f = BloomFilter::with_false_pos(0.01).expected_items(ks.len());
                for k in ks {
                    f.insert_hash(h(k));
                }
                f
            },
            |f| f.as_slice().len() * 8 + 4,
            |f, k| f.contains_hash(h(k)),
        )?);

        rows.push(bench(
            "xorf Xor8",
            &keys,
            &absent,
            |ks| Xor8::from(unique_hashes(ks)),
            |f| f.fingerprints.len() + 8 + 8,
            |f, k| f.contains(&h(k)),
        )?);

        rows.push(bench(
            "xorf BinaryFuse8",
            &keys,
            &absent,
            |ks| {
                BinaryFuse8::try_from(unique_hashes(ks)).unwrap_or_else(|e| {
                    eprintln!("BinaryFuse8 construction failed: {e}");
                    std::process::exit(2)
                })
            },
            |f| f.fingerprints.len() + xorf::Descriptor::DMA_LEN,
            |f, k| f.contains(&h(k)),
        )?);

        rows.push(bench(
            "xorf BinaryFuse16",
            &keys,
            &absent,
            |ks| {
                BinaryFuse16::try_from(unique_hashes(ks)).unwrap_or_else(|e| {
                    eprintln!("BinaryFuse16 construction failed: {e}");
                    std::process::exit(2)
                })
            },
            |f| f.fingerprints.len() * 2 + xorf::Descriptor::DMA_LEN,
            |f, k| f.contains(&h(k)),
        )?);
    }
    Ok(rows)
}

fn main() -> ExitCode {
    match run() {
        Ok(rows) => {
            println!(
                "| filter | N | build ns/key | bytes/key | bits/key | FPR (1M absent) | present ns/query | absent ns/query |"
            );
            println!("|---|---:|---:|---:|---:|---:|---:|---:|");
            for r in rows {
                let (bpk, bits, fpr) = if r.bytes_per_key == 0.0 {
                    ("-".to_string(), "-".to_string(), "-".to_string())
                } else {
                    (
                        format!("{:.3}", r.bytes_per_key),
                        format!("{:.2}", r.bytes_per_key * 8.0),
                        format!(
                            "{:.4}% ({}/{})",
                            100.0 * r.fp as f64 / ABSENT as f64,
                            r.fp,
                            ABSENT
                        ),
                    )
                };
                println!(
                    "| {} | {} | {:.1} | {} | {} | {} | {:.1} | {:.1} |",
                    r.name, r.n, r.build_ns_per_key, bpk, bits, fpr, r.present_ns, r.absent_ns
                );
            }
            println!();
            println!("false negatives: 0 (checked every present key of every filter)");
            ExitCode::SUCCESS
        }
        Err(FalseNegative(msg)) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}
