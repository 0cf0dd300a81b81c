//! Keyspaces: the API's promises (create, list, options, drop and reuse of
//! a name, errors for dropped and foreign handles), and a model test of
//! several keyspaces against one `BTreeMap` each, with batches,
//! snapshots and transactions across them, flushes, compactions, drops
//! and reopens, over an options matrix.

use cairndb::io::MemFs;
use cairndb::{
    Compression, Db, Error, Keyspace, KeyspaceOptions, Options, WriteBatch, WriteOptions,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn mem_opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        ..Options::default()
    }
}

fn collect(
    it: impl Iterator<Item = cairndb::Result<(Vec<u8>, Vec<u8>)>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.collect::<cairndb::Result<Vec<_>>>().expect("scan")
}

fn all(m: &Model) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[test]
fn keyspaces_are_created_listed_and_kept_apart() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, mem_opts(&fs)).expect("open");
    assert_eq!(db.keyspaces(), ["default"]);
    let users = db.keyspace("users").expect("users");
    let sessions = db.keyspace("sessions").expect("sessions");
    assert_eq!(users.name(), "users");
    assert_eq!(db.keyspaces(), ["default", "users", "sessions"]);
    // The same name is the same keyspace.
    db.keyspace("users")
        .expect("again")
        .put("a", "1")
        .expect("put");
    assert_eq!(users.get("a").expect("get").as_deref(), Some(&b"1"[..]));
    // Keyspaces and the default keyspace do not see each other.
    sessions.put("a", "2").expect("put");
    db.put("a", "3").expect("put");
    assert_eq!(sessions.get("a").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get("a").expect("get").as_deref(), Some(&b"3"[..]));
    let default = db.keyspace("default").expect("default");
    assert_eq!(default.get("a").expect("get").as_deref(), Some(&b"3"[..]));
    assert_eq!(collect(users.iter()), [(b"a".to_vec(), b"1".to_vec())]);
    // Bad names and the default keyspace's limits.
    assert!(matches!(db.keyspace(""), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        db.keyspace(&"x".repeat(256)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.drop_keyspace("default"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.keyspace_with("default", KeyspaceOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(!db.drop_keyspace("nothing").expect("drop absent"));
    // Keyspaces and their data are kept across a reopen, in the manifest.
    db.flush().expect("flush");
    users.put("b", "4").expect("put");
    drop((users, sessions, default));
    db.close().expect("close");
    let db = Db::open(dir, mem_opts(&fs)).expect("reopen");
    assert_eq!(db.keyspaces(), ["default", "users", "sessions"]);
    let users = db.keyspace("users").expect("users");
    let got = collect(users.iter());
    assert_eq!(
        got,
        [
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"4".to_vec())
        ]
    );
}

#[test]
fn a_dropped_keyspace_is_gone_and_its_name_is_new_again() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, mem_opts(&fs)).expect("open");
    let old = db.keyspace("queue").expect("queue");
    for i in 0..200u32 {
        old.put(i.to_be_bytes(), vec![7u8; 2000]).expect("put");
    }
    db.flush().expect("flush");
    old.put("unflushed", "x").expect("put");
    let snap = db.snapshot();
    assert!(db.drop_keyspace("queue").expect("drop"));
    assert_eq!(db.keyspaces(), ["default"]);
    // Every path through the old handle says it is gone.
    let dropped =
        |r: cairndb::Result<()>| matches!(r, Err(Error::KeyspaceDropped(n)) if n == "queue");
    assert!(dropped(old.get("unflushed").map(drop)));
    assert!(dropped(old.put("k", "v")));
    assert!(dropped(old.delete("k")));
    assert!(dropped(old.iter().next().expect("an item").map(drop)));
    assert!(dropped(
        old.multi_get(&["k"])[0]
            .as_ref()
            .map(drop)
            .map_err(|e| match e {
                Error::KeyspaceDropped(n) => Error::KeyspaceDropped(n.clone()),
                _ => Error::Closed,
            })
    ));
    assert!(dropped(snap.get_in(&old, "unflushed").map(drop)));
    let mut b = WriteBatch::new();
    b.put("in default", "v").expect("put");
    b.put_in(&old, "k", "v").expect("put_in");
    assert!(dropped(db.write(b, &WriteOptions::default())));
    assert_eq!(db.get("in default").expect("get"), None, "all or nothing");
    let mut t = db.begin();
    assert!(dropped(t.get_in(&old, "k").map(drop)));
    t.put_in(&old, "k", "v").expect("buffered");
    assert!(dropped(t.commit()));
    // The name again: a new, empty keyspace.
    let new = db.keyspace("queue").expect("queue again");
    assert_eq!(collect(new.iter()), []);
    assert_eq!(new.get("unflushed").expect("get"), None);
    new.put("fresh", "1").expect("put");
    assert!(
        dropped(old.get("fresh").map(drop)),
        "the old handle stays dropped"
    );
    // The old keyspace's tables leave in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.stats().table_entries > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "tables were not removed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop((snap, old, new));
    db.close().expect("close");
    let db = Db::open(dir, mem_opts(&fs)).expect("reopen");
    let new = db.keyspace("queue").expect("queue");
    assert_eq!(collect(new.iter()), [(b"fresh".to_vec(), b"1".to_vec())]);
}

#[test]
fn a_keyspace_of_another_database_is_refused() {
    let (fa, fb) = (MemFs::new(), MemFs::new());
    let a = Db::open(Path::new("/a"), mem_opts(&fa)).expect("open a");
    let b = Db::open(Path::new("/b"), mem_opts(&fb)).expect("open b");
    let ks = a.keyspace("users").expect("users");
    b.keyspace("users").expect("users in b");
    let mut batch = WriteBatch::new();
    batch.put_in(&ks, "k", "v").expect("put_in");
    assert!(matches!(
        b.write(batch, &WriteOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.snapshot().get_in(&ks, "k"),
        Err(Error::InvalidArgument(_))
    ));
    let mut t = b.begin();
    assert!(matches!(
        t.put_in(&ks, "k", "v"),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn options_are_per_keyspace_and_persist() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, mem_opts(&fs)).expect("open");
    let raw = KeyspaceOptions {
        compression: Compression::None,
        value_separation_min: usize::MAX,
        block_bytes: 1024,
        filter: false,
        filter_bits: 8,
        table_bytes: 1 << 20,
    };
    let zstd = KeyspaceOptions {
        compression: Compression::Zstd(3),
        ..KeyspaceOptions::default()
    };
    let a = db.keyspace_with("raw", raw.clone()).expect("raw");
    let b = db.keyspace_with("zstd", zstd).expect("zstd");
    let text = "the same words again and again ".repeat(40);
    for i in 0..300u32 {
        a.put(i.to_be_bytes(), &text).expect("put");
        b.put(i.to_be_bytes(), &text).expect("put");
    }
    db.compact().expect("compact");
    // Raw tables hold the text as it is; Zstandard's a fraction of it.
    let (raw_bytes, zstd_bytes) = table_bytes_of(&db, &a, &b);
    assert_eq!(db.keyspaces(), ["default", "raw"]);
    assert!(
        zstd_bytes * 4 < raw_bytes,
        "zstd {zstd_bytes} B against raw {raw_bytes} B"
    );
    assert!(matches!(
        db.keyspace_with(
            "bad",
            KeyspaceOptions {
                compression: Compression::Zstd(40),
                ..KeyspaceOptions::default()
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
    drop((a, b));
    db.close().expect("close");
    // Options come back from the manifest; changing them is recorded.
    let db = Db::open(dir, mem_opts(&fs)).expect("reopen");
    let same = db.keyspace_with("raw", raw).expect("same options");
    assert_eq!(
        same.get(5u32.to_be_bytes()).expect("get").as_deref(),
        Some(text.as_bytes())
    );
    let lz4 = KeyspaceOptions::default();
    db.keyspace_with("raw", lz4).expect("changed");
    db.close().expect("close");
    let db = Db::open(dir, mem_opts(&fs)).expect("reopen");
    assert_eq!(db.keyspaces(), ["default", "raw"]);
}

/// Bytes of the tables of keyspaces `kept` and `dropped` (the only ones
/// with data), from the tables' bytes before and after `dropped` is
/// dropped and its tables removed (`Db::compact` removes them first).
fn table_bytes_of(db: &Db, kept: &Keyspace, dropped: &Keyspace) -> (u64, u64) {
    let total = |db: &Db| db.stats().bytes_per_level.iter().sum::<u64>();
    let both = total(db);
    let keep: Vec<_> = collect(kept.iter());
    assert!(db.drop_keyspace(dropped.name()).expect("drop"));
    db.compact().expect("compact");
    let alone = total(db);
    assert_eq!(collect(kept.iter()), keep);
    (alone, both - alone)
}

// ---------------------------------------------------------------------
// The model test.

/// Keyspace names the model test uses, besides the default one.
const NAMES: [&str; 3] = ["a", "b", "c"];

fn options_case(case: usize, fs: &MemFs) -> Options {
    let mut o = mem_opts(fs);
    match case % 3 {
        0 => {
            o.memtable_bytes = 8 << 10;
            o.table_bytes = 4 << 10;
            o.level1_bytes = 16 << 10;
            o.block_bytes = 256;
        }
        1 => {
            o.memtable_bytes = 32 << 10;
            o.block_cache_bytes = 0;
            o.level1_bytes = 64 << 10;
        }
        _ => {
            o.memtable_bytes = 64 << 10;
            o.background_compaction = false;
        }
    }
    o
}

/// Each named keyspace's options in a case: compression, separation and
/// block sizes differ between them.
fn keyspace_options(case: usize, i: usize) -> KeyspaceOptions {
    let compression = [Compression::None, Compression::Lz4, Compression::Zstd(1)][(case + i) % 3];
    KeyspaceOptions {
        compression,
        value_separation_min: [64, 1024, usize::MAX][(case + 2 * i) % 3],
        block_bytes: [256, 4096][i % 2],
        filter: (case + i).is_multiple_of(2),
        filter_bits: [8, 16][(case + i / 2) % 2],
        table_bytes: 4 << 10,
    }
}

/// Data blocks `ks` reads to look up `probes` keys it does not hold, each
/// within its tables' key range: one per false positive of a filter.
fn blocks_read_for_absent_keys(db: &Db, ks: &cairndb::Keyspace, probes: u32) -> u64 {
    let before = db.stats();
    for i in 0..probes {
        let key = format!("k{:08}", 2 * i + 1);
        assert_eq!(ks.get(&key).expect("get"), None, "{key} was never written");
    }
    let after = db.stats();
    (after.block_cache_hits + after.block_cache_misses)
        - (before.block_cache_hits + before.block_cache_misses)
}

/// A keyspace asks for 16-bit filter fingerprints, another keeps the
/// default 8: the choice is recorded (a compaction after a reopen still
/// builds 16-bit filters), and lookups of absent keys read a data block
/// about 1 time in 65,536 instead of 1 in 256.
#[test]
fn sixteen_bit_filters_persist_and_cut_false_positives() {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let db = Db::open(dir, mem_opts(&fs)).expect("open");
    let sparse = KeyspaceOptions {
        filter_bits: 16,
        ..KeyspaceOptions::default()
    };
    let wide = db.keyspace_with("wide", sparse).expect("wide");
    let plain = db.keyspace("plain").expect("plain");
    for i in 0..50_000u32 {
        let key = format!("k{:08}", 2 * i);
        wide.put(&key, b"v").expect("put");
        plain.put(&key, b"v").expect("put");
    }
    drop((wide, plain));
    db.close().expect("close");
    let db = Db::open(dir, mem_opts(&fs)).expect("reopen");
    let (wide, plain) = (
        db.keyspace("wide").expect("wide"),
        db.keyspace("plain").expect("plain"),
    );
    db.compact().expect("compact");
    let probes = 50_000;
    let wide_reads = blocks_read_for_absent_keys(&db, &wide, probes);
    let plain_reads = blocks_read_for_absent_keys(&db, &plain, probes);
    // 8 bits: about 0.4 % of 50,000, about 195; 16 bits: about 0.8.
    assert!(plain_reads >= 60, "8-bit filters read {plain_reads} blocks");
    assert!(
        wide_reads <= 8,
        "16-bit filters read {wide_reads} blocks (8-bit: {plain_reads})"
    );
    assert!(matches!(
        db.keyspace_with(
            "bad",
            KeyspaceOptions {
                filter_bits: 12,
                ..KeyspaceOptions::default()
            }
        ),
        Err(Error::InvalidArgument(_))
    ));
    let bad = Options {
        filter_bits: 4,
        ..mem_opts(&MemFs::new())
    };
    assert!(matches!(Db::open(dir, bad), Err(Error::InvalidArgument(_))));
}

fn key(rng: &mut StdRng) -> Vec<u8> {
    let n = rng.random_range(0..300u32);
    match n % 2 {
        0 => format!("k{n:04}").into_bytes(),
        _ => vec![b'k', (n % 251) as u8],
    }
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.random_range(0..8) {
        0 => 0,
        1 => rng.random_range(200..2500),
        _ => rng.random_range(1..40),
    };
    (0..len).map(|_| rng.random_range(b'a'..=b'f')).collect()
}

fn bound(rng: &mut StdRng) -> Bound<Vec<u8>> {
    match rng.random_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng)),
        _ => Bound::Excluded(key(rng)),
    }
}

fn model_range(m: &Model, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) =
        (lo, hi)
        && (a > b || (a == b && !matches!((lo, hi), (Bound::Included(_), Bound::Included(_)))))
    {
        return Vec::new();
    }
    m.range((lo.clone(), hi.clone()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The keyspaces of the model: slot 0 is the default keyspace, slot i the
/// keyspace `NAMES[i - 1]` (or none while it is dropped).
struct World {
    handles: Vec<Option<Keyspace>>,
    models: Vec<Model>,
}

impl World {
    fn open(db: &Db, case: usize, live: &[bool]) -> World {
        let mut handles = vec![Some(db.keyspace("default").expect("default"))];
        for (i, name) in NAMES.iter().enumerate() {
            handles.push(live[i + 1].then(|| {
                db.keyspace_with(name, keyspace_options(case, i))
                    .expect("ks")
            }));
        }
        World {
            handles,
            models: vec![Model::new(); NAMES.len() + 1],
        }
    }

    /// A random live slot.
    fn pick(&self, rng: &mut StdRng) -> usize {
        loop {
            let i = rng.random_range(0..self.handles.len());
            if self.handles[i].is_some() {
                return i;
            }
        }
    }

    fn ks(&self, i: usize) -> &Keyspace {
        self.handles[i].as_ref().expect("a live slot")
    }
}

/// What a run did, to check the workload reached the shapes it tests.
#[derive(Default)]
struct Reached {
    drops: usize,
    recreated: usize,
    moved: usize,
    tables: usize,
}

fn run(seed: u64, case: usize, ops: usize, reached: &mut Reached) {
    let ctx = format!("seed {seed} case {case}");
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut db = Db::open(dir, options_case(case, &fs)).expect("open");
    let mut world = World::open(&db, case, &[true; 4]);
    let mut snapshots: Vec<(cairndb::Snapshot, Vec<Option<Model>>)> = Vec::new();
    for step in 0..ops {
        let i = world.pick(&mut rng);
        match rng.random_range(0..100) {
            0..=34 => {
                let (k, v) = (key(&mut rng), value(&mut rng));
                world.ks(i).put(&k, &v).expect("put");
                world.models[i].insert(k, v);
            }
            35..=41 => {
                let k = key(&mut rng);
                world.ks(i).delete(&k).expect("delete");
                world.models[i].remove(&k);
            }
            // A batch across keyspaces.
            42..=51 => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.random_range(1..12) {
                    let j = world.pick(&mut rng);
                    let k = key(&mut rng);
                    if rng.random_bool(0.7) {
                        let v = value(&mut rng);
                        b.put_in(world.ks(j), &k, &v).expect("put_in");
                        world.models[j].insert(k, v);
                    } else {
                        b.delete_in(world.ks(j), &k).expect("delete_in");
                        world.models[j].remove(&k);
                    }
                }
                let sync = rng.random_bool(0.2);
                db.write(b, &WriteOptions { sync }).expect("write");
            }
            52..=63 => {
                let k = key(&mut rng);
                assert_eq!(
                    world.ks(i).get(&k).expect("get"),
                    world.models[i].get(&k).cloned(),
                    "{ctx} step {step} get in slot {i}"
                );
            }
            64..=71 => {
                let (lo, hi) = (bound(&mut rng), bound(&mut rng));
                let want = model_range(&world.models[i], &lo, &hi);
                let got = collect(world.ks(i).range((lo.clone(), hi.clone())));
                assert_eq!(got, want, "{ctx} step {step} range in slot {i}");
                let mut rev = collect(world.ks(i).range((lo, hi)).rev());
                rev.reverse();
                assert_eq!(rev, want, "{ctx} step {step} reverse range in slot {i}");
            }
            // A transaction across keyspaces: moves a value from one
            // keyspace to another.
            72..=76 => {
                let (from, to) = (i, world.pick(&mut rng));
                let k = key(&mut rng);
                let mut t = db.begin();
                let v = t.get_in(world.ks(from), &k).expect("txn get");
                assert_eq!(
                    v,
                    world.models[from].get(&k).cloned(),
                    "{ctx} step {step} txn get"
                );
                if let Some(v) = v {
                    t.delete_in(world.ks(from), &k).expect("txn delete");
                    t.put_in(world.ks(to), &k, &v).expect("txn put");
                    let own = collect(t.iter_in(world.ks(to)).expect("txn range"));
                    assert!(own.iter().any(|(kk, vv)| *kk == k && *vv == v));
                    t.commit().expect("commit");
                    reached.moved += 1;
                    world.models[from].remove(&k);
                    world.models[to].insert(k, v);
                }
            }
            77..=79 => {
                if snapshots.len() < 3 {
                    let copy = (0..world.handles.len())
                        .map(|j| world.handles[j].is_some().then(|| world.models[j].clone()))
                        .collect();
                    snapshots.push((db.snapshot(), copy));
                } else {
                    snapshots.remove(rng.random_range(0..snapshots.len()));
                }
            }
            80..=84 => {
                if let Some((snap, models)) =
                    snapshots.get(rng.random_range(0..snapshots.len().max(1)))
                    && let Some(m) = &models[i]
                {
                    let got = collect(snap.iter_in(world.ks(i)));
                    assert_eq!(got, all(m), "{ctx} step {step} snapshot scan of slot {i}");
                    let k = key(&mut rng);
                    assert_eq!(
                        snap.get_in(world.ks(i), &k).expect("snap get"),
                        m.get(&k).cloned()
                    );
                }
            }
            85..=89 => {
                db.flush().expect("flush");
                reached.tables = reached.tables.max(db.stats().tables_per_level.iter().sum());
            }
            90..=92 => db.compact().expect("compact"),
            // Drop a named keyspace, or create it again.
            93..=95 => {
                let j = rng.random_range(1..world.handles.len());
                let name = NAMES[j - 1];
                if world.handles[j].take().is_some() {
                    assert!(db.drop_keyspace(name).expect("drop"));
                    reached.drops += 1;
                    world.models[j].clear();
                    // Snapshots taken before the drop cannot read it.
                    for (_, models) in &mut snapshots {
                        models[j] = None;
                    }
                } else {
                    let ks = db
                        .keyspace_with(name, keyspace_options(case, j - 1))
                        .expect("create");
                    assert_eq!(collect(ks.iter()), [], "{ctx} step {step}: {name} is new");
                    reached.recreated += 1;
                    world.handles[j] = Some(ks);
                }
            }
            _ => {
                snapshots.clear();
                let live: Vec<bool> = world.handles.iter().map(Option::is_some).collect();
                let models = std::mem::take(&mut world.models);
                drop(world);
                drop(db);
                db = Db::open(dir, options_case(case, &fs)).expect("reopen");
                let names: Vec<String> = std::iter::once("default".to_owned())
                    .chain(
                        NAMES
                            .iter()
                            .zip(&live[1..])
                            .filter(|(_, l)| **l)
                            .map(|(n, _)| n.to_string()),
                    )
                    .collect();
                let mut listed = db.keyspaces();
                listed[1..].sort();
                assert_eq!(listed, names, "{ctx} step {step}: keyspaces after reopen");
                world = World::open(&db, case, &live);
                world.models = models;
            }
        }
    }
    snapshots.clear();
    for (j, (ks, m)) in world.handles.iter().zip(&world.models).enumerate() {
        if let Some(ks) = ks {
            assert_eq!(collect(ks.iter()), all(m), "{ctx} final scan of {j}");
        }
    }
    let live: Vec<bool> = world.handles.iter().map(Option::is_some).collect();
    let models = std::mem::take(&mut world.models);
    drop(world);
    drop(db);
    let db = Db::open(dir, options_case(case, &fs)).expect("final reopen");
    let world = World::open(&db, case, &live);
    for (j, (ks, m)) in world.handles.iter().zip(&models).enumerate() {
        if let Some(ks) = ks {
            assert_eq!(collect(ks.iter()), all(m), "{ctx} scan of {j} after reopen");
        }
    }
}

#[test]
fn model_with_keyspaces() {
    let seeds: u64 = std::env::var("CAIRNDB_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut reached = Reached::default();
    for seed in 0..seeds {
        run(seed, seed as usize, 1500, &mut reached);
    }
    assert!(
        reached.drops > 0 && reached.recreated > 0,
        "no keyspace dropped and made again"
    );
    assert!(
        reached.moved > 0,
        "no transaction moved a value between keyspaces"
    );
    assert!(reached.tables > 4, "tables never held several keyspaces");
}

/// Many keyspaces written together: each flush makes a level-0 table per
/// keyspace, and writers must not stall on the count of all of them
/// (level 0's depth is per keyspace). Fails, instead of hanging, if the
/// writes do not finish in time.
#[test]
fn many_keyspaces_written_together_do_not_stall_writers() {
    let fs = MemFs::new();
    let opts = Options {
        memtable_bytes: 16 << 10,
        l0_compaction_trigger: 2,
        l0_compaction_trigger_new_keys: 2,
        l0_slowdown_trigger: 3,
        l0_stop_trigger: 4,
        table_bytes: 8 << 10,
        level1_bytes: 64 << 10,
        ..mem_opts(&fs)
    };
    let db = Db::open(Path::new("/db"), opts).expect("open");
    let spaces: Vec<Keyspace> = (0..64)
        .map(|i| db.keyspace(&format!("ks{i}")).expect("keyspace"))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = {
        let spaces = spaces.clone();
        std::thread::spawn(move || {
            for round in 0..40u32 {
                for ks in &spaces {
                    ks.put(round.to_be_bytes(), [7u8; 64]).expect("put");
                }
            }
            tx.send(()).expect("send");
        })
    };
    assert!(
        rx.recv_timeout(std::time::Duration::from_secs(120)).is_ok(),
        "writes to 64 keyspaces stalled: {:?}",
        db.stats()
    );
    writer.join().expect("writer");
    for ks in &spaces {
        assert_eq!(ks.iter().count(), 40);
    }
    assert!(
        db.stats().flushes > 10,
        "the memtable was flushed many times"
    );
}
