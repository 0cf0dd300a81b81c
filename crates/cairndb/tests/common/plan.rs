//! A seeded workload shared by the crash-state and error-injection tests:
//! batches whose presence is visible (each writes keys no other batch
//! touches), overwrites and deletes of a small hot key set, some large
//! values (separated into the journal in most plans), flushes, compactions,
//! settling steps (`Db::settle_now`: the steps idle settling takes) and
//! reopens. In half the plans, ops go to three keyspaces (the default one
//! and `KEYSPACES`), batches span them, and keyspaces are dropped and made
//! again. A model key is the keyspace's slot (0 for the default keyspace,
//! i + 1 for `KEYSPACES[i]`) followed by the key.

use cairndb::io::MemFs;
use cairndb::{Db, Keyspace, Options, Sabotage, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const DIR: &str = "/db";

pub fn dir() -> &'static std::path::Path {
    std::path::Path::new(DIR)
}

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The keyspaces besides the default one that plans write to.
pub const KEYSPACES: [&str; 2] = ["ks1", "ks2"];

/// The model key of `key` in keyspace slot `slot`.
pub fn mkey(slot: u8, key: &[u8]) -> Vec<u8> {
    let mut k = vec![slot];
    k.extend_from_slice(key);
    k
}

/// One write batch of the plan, or the drop of a keyspace.
pub struct Batch {
    /// (model key, Some(value) for a put / None for a delete), in order.
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Model keys only this batch writes (puts, never touched again).
    pub own: Vec<Vec<u8>>,
    pub sync: bool,
    /// `Some(slot)`: not a write but the drop of keyspace `slot`
    /// (`KEYSPACES[slot - 1]`), made again at once. A drop is durable when
    /// it returns, but makes no earlier write durable.
    pub drop: Option<u8>,
}

pub enum Step {
    Write(usize),
    /// The drop of batch `.0`'s keyspace (`Batch::drop`).
    Drop(usize),
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
    /// Whether ops go to several keyspaces (and keyspaces are dropped).
    pub keyspaces: bool,
}

pub fn plan(seed: u64) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let keyspaces = seed % 4 >= 2;
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
            19..=21 if keyspaces => {
                let b = batches.len();
                batches.push(Batch {
                    ops: Vec::new(),
                    own: Vec::new(),
                    sync: true,
                    drop: Some(rng.random_range(1..=KEYSPACES.len() as u8)),
                });
                Step::Drop(b)
            }
            _ => {
                let b = batches.len();
                let slots = if keyspaces {
                    KEYSPACES.len() as u8 + 1
                } else {
                    1
                };
                batches.push(batch(&mut rng, b, slots));
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
        keyspaces,
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

/// A batch of ops over keyspace slots `0..slots`.
pub fn batch(rng: &mut StdRng, b: usize, slots: u8) -> Batch {
    let mut ops = Vec::new();
    let mut own = Vec::new();
    for i in 0..rng.random_range(1..4) {
        // The first in the default keyspace, which is never dropped: a
        // batch's presence shows there (`present_batches`).
        let slot = if i == 0 {
            0
        } else {
            rng.random_range(0..slots)
        };
        let k = mkey(slot, format!("o{b:05}-{i}").as_bytes());
        own.push(k.clone());
        ops.push((k, Some(value(rng, b, i))));
    }
    for i in own.len()..own.len() + rng.random_range(0..6) {
        let k = mkey(
            rng.random_range(0..slots),
            &hot_key(rng.random_range(0..48)),
        );
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
        drop: None,
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
    /// The batch as a `WriteBatch`, over the handles of `KEYSPACES`.
    pub fn to_write_batch(&self, spaces: &[Keyspace]) -> WriteBatch {
        let mut wb = WriteBatch::new();
        for (k, v) in &self.ops {
            let (slot, key) = (k[0], &k[1..]);
            match (slot, v) {
                (0, Some(v)) => wb.put(key, v),
                (0, None) => wb.delete(key),
                (s, Some(v)) => wb.put_in(&spaces[usize::from(s) - 1], key, v),
                (s, None) => wb.delete_in(&spaces[usize::from(s) - 1], key),
            }
            .expect("batch op");
        }
        wb
    }
}

/// Handles of `KEYSPACES` in `db`, each made if it does not exist.
pub fn open_keyspaces(db: &Db) -> cairndb::Result<Vec<Keyspace>> {
    KEYSPACES.iter().map(|n| db.keyspace(n)).collect()
}

/// Drops keyspace `slot` and makes it again; its new handle.
pub fn drop_and_remake(db: &Db, slot: u8) -> cairndb::Result<Keyspace> {
    let name = KEYSPACES[usize::from(slot) - 1];
    db.drop_keyspace(name)?;
    db.keyspace(name)
}

/// Everything `db` holds, under model keys: the default keyspace and
/// those of `KEYSPACES` that exist (none is made).
pub fn read_all(db: &Db) -> cairndb::Result<Model> {
    let mut m = Model::new();
    for kv in db.iter() {
        let (k, v) = kv?;
        m.insert(mkey(0, &k), v);
    }
    let listed = db.keyspaces();
    for (i, name) in KEYSPACES.iter().enumerate() {
        if !listed.iter().any(|l| l == name) {
            continue;
        }
        let ks = db.keyspace(name)?;
        for kv in ks.iter() {
            let (k, v) = kv?;
            m.insert(mkey(i as u8 + 1, &k), v);
        }
    }
    Ok(m)
}

/// The value of model key `k` in `db` (`None` in a keyspace that does not
/// exist).
pub fn get(db: &Db, k: &[u8]) -> cairndb::Result<Option<Vec<u8>>> {
    let (slot, key) = (k[0], &k[1..]);
    if slot == 0 {
        return db.get(key);
    }
    let name = KEYSPACES[usize::from(slot) - 1];
    if !db.keyspaces().iter().any(|l| l == name) {
        return Ok(None);
    }
    db.keyspace(name)?.get(key)
}

/// The batches whose own keys in the default keyspace are present in
/// `got`, ascending; `Err` names a batch present in part. (Own keys in
/// other keyspaces go when their keyspace is dropped; comparing `got`
/// with the model of the batches present checks them.)
pub fn present_batches(plan: &Plan, got: &Model) -> Result<Vec<usize>, String> {
    let mut present = Vec::new();
    for (b, batch) in plan.batches.iter().enumerate() {
        let own: Vec<_> = batch.own.iter().filter(|k| k[0] == 0).collect();
        let have = own.iter().filter(|k| got.contains_key(**k)).count();
        if have > 0 && have < own.len() {
            return Err(format!("batch {b}: {have} of {} own keys", own.len()));
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
        if let Some(slot) = plan.batches[b].drop {
            m.retain(|k, _| k[0] != slot);
        }
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
