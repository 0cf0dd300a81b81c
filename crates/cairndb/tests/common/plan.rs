//! A seeded workload shared by the crash-state and error-injection tests:
//! batches whose presence is visible (each writes keys no other batch
//! touches), overwrites and deletes of a small hot key set, some large
//! values (separated into the journal in most plans), flushes, compactions,
//! settling steps (`Db::settle_now`: the steps idle settling takes) and
//! reopens.

use cairndb::io::MemFs;
use cairndb::{Options, Sabotage, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const DIR: &str = "/db";

pub fn dir() -> &'static std::path::Path {
    std::path::Path::new(DIR)
}

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// One write batch of the plan.
pub struct Batch {
    /// (key, Some(value) for a put / None for a delete), in order.
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Keys only this batch writes (puts, never touched again).
    pub own: Vec<Vec<u8>>,
    pub sync: bool,
}

pub enum Step {
    Write(usize),
    Flush,
    Compact,
    /// `Db::settle_now`: what the compaction thread does once idle.
    Settle,
    Reopen,
    Read(Vec<u8>),
}

/// A seeded workload: the options it runs with and its steps.
pub struct Plan {
    pub seed: u64,
    pub batches: Vec<Batch>,
    pub steps: Vec<Step>,
    pub memtable_bytes: usize,
    pub background_compaction: bool,
    /// `Options::value_separation_min`: most plans separate only the large
    /// values (3 KB and up), some separate most values, some none.
    pub value_separation_min: usize,
    /// `Options::journal_bytes`: small in some plans, so journals close
    /// (and memtables seal) on journal size.
    pub journal_bytes: u64,
    /// `Options::value_gc_live_ratio`: 1.0 moves every separated value a
    /// compaction meets, 0.0 never moves one.
    pub value_gc_live_ratio: f64,
    /// `Options::journal_prewrite`: on in most plans, so appends overwrite
    /// pre-written blocks; off in some, so journals only grow.
    pub journal_prewrite: bool,
    /// `Options::value_partitions`: 4 in half the plans (unsynced large
    /// values in value streams), 0 in the others.
    pub value_partitions: usize,
}

pub fn plan(seed: u64) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let n_steps = rng.random_range(25..45);
    let mut batches = Vec::new();
    let mut steps = Vec::new();
    for _ in 0..n_steps {
        let roll = rng.random_range(0..104);
        let step = match roll {
            0..=7 => Step::Flush,
            8..=10 => Step::Compact,
            11..=13 => Step::Reopen,
            14..=18 => Step::Read(hot_key(rng.random_range(0..48))),
            100..=103 => Step::Settle,
            _ => {
                let b = batches.len();
                batches.push(batch(&mut rng, b));
                Step::Write(b)
            }
        };
        steps.push(step);
    }
    Plan {
        seed,
        batches,
        steps,
        // Small memtables seal during writes (flushes then run in the
        // background thread); larger ones flush only when asked.
        memtable_bytes: if seed.is_multiple_of(3) {
            6 << 10
        } else {
            256 << 10
        },
        background_compaction: seed.is_multiple_of(5),
        value_separation_min: match seed % 7 {
            0 => 8,
            1 => usize::MAX,
            _ => 1024,
        },
        journal_bytes: if seed % 4 == 1 { 24 << 10 } else { 64 << 20 },
        value_gc_live_ratio: match seed % 3 {
            0 => 1.0,
            1 => 0.0,
            _ => 0.5,
        },
        journal_prewrite: seed % 6 != 5,
        value_partitions: if seed.is_multiple_of(2) { 4 } else { 0 },
    }
}

pub fn hot_key(n: u32) -> Vec<u8> {
    format!("h{n:03}").into_bytes()
}

pub fn value(rng: &mut StdRng, b: usize, i: usize) -> Vec<u8> {
    let len = if rng.random_ratio(1, 25) {
        rng.random_range(3000..12000)
    } else {
        rng.random_range(0..200)
    };
    let mut v = format!("{b}:{i}:").into_bytes();
    v.extend((0..len).map(|j| b'a' + ((b * 7 + i * 3 + j) % 26) as u8));
    v
}

pub fn batch(rng: &mut StdRng, b: usize) -> Batch {
    let mut ops = Vec::new();
    let mut own = Vec::new();
    for i in 0..rng.random_range(1..4) {
        let k = format!("o{b:05}-{i}").into_bytes();
        own.push(k.clone());
        ops.push((k, Some(value(rng, b, i))));
    }
    for i in own.len()..own.len() + rng.random_range(0..6) {
        let k = hot_key(rng.random_range(0..48));
        let v = if rng.random_ratio(1, 4) {
            None
        } else {
            Some(value(rng, b, i))
        };
        ops.push((k, v));
    }
    Batch {
        ops,
        own,
        sync: rng.random_ratio(1, 3),
    }
}

pub fn options(plan: &Plan, fs: &MemFs, sabotage: Sabotage) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: plan.memtable_bytes,
        block_bytes: 512,
        block_cache_bytes: 64 << 10,
        table_bytes: 16 << 10,
        level1_bytes: 32 << 10,
        l0_compaction_trigger: 2,
        background_compaction: plan.background_compaction,
        value_separation_min: plan.value_separation_min,
        journal_bytes: plan.journal_bytes,
        value_gc_live_ratio: plan.value_gc_live_ratio,
        journal_prewrite: plan.journal_prewrite,
        value_partitions: plan.value_partitions,
        sabotage,
        ..Options::default()
    }
}

impl Batch {
    /// The batch as a `WriteBatch`.
    pub fn to_write_batch(&self) -> WriteBatch {
        let mut wb = WriteBatch::new();
        for (k, v) in &self.ops {
            match v {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            }
            .expect("batch op");
        }
        wb
    }
}

/// The batches whose own keys are present in `got`, ascending; `Err` names
/// a batch present in part.
pub fn present_batches(plan: &Plan, got: &Model) -> Result<Vec<usize>, String> {
    let mut present = Vec::new();
    for (b, batch) in plan.batches.iter().enumerate() {
        let have = batch.own.iter().filter(|k| got.contains_key(*k)).count();
        if have > 0 && have < batch.own.len() {
            return Err(format!("batch {b}: {have} of {} own keys", batch.own.len()));
        }
        if have > 0 {
            present.push(b);
        }
    }
    Ok(present)
}

/// The model after applying the batches numbered in `which`, in order.
pub fn model_of(plan: &Plan, which: &[usize]) -> Model {
    let mut m = Model::new();
    for &b in which {
        for (k, v) in &plan.batches[b].ops {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
    }
    m
}

/// The first key where `got` and `want` differ, described.
pub fn first_difference(want: &Model, got: &Model) -> String {
    let key = want
        .iter()
        .find(|(k, v)| got.get(*k) != Some(v))
        .map(|(k, _)| k.clone())
        .or_else(|| got.keys().find(|k| !want.contains_key(*k)).cloned())
        .unwrap_or_default();
    let show = |v: Option<&Vec<u8>>| {
        v.map(|v| String::from_utf8_lossy(&v[..v.len().min(12)]).into_owned())
    };
    format!(
        "key {:?}: want {:?}, got {:?}",
        String::from_utf8_lossy(&key),
        show(want.get(&key)),
        show(got.get(&key))
    )
}
