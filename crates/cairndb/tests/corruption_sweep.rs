//! Bounded corruption sweep: flip one bit at a time in every file of a
//! small canonical database and check that opening and reading it never
//! panics and never returns wrong data. Allowed outcomes per mutation:
//! - the full, correct data;
//! - `Err(Corruption)` from open, a get or a scan (`Io` only when the
//!   damaged file is CURRENT, which may then name a missing manifest);
//! - for a flip in the newest journal: the data minus a suffix of the
//!   journal's batches (the damaged last record reads as a torn tail).
//!
//! Seed via `CAIRNDB_SWEEP_SEED` (printed); the sweep prints its counts.

mod common;

use cairndb::io::MemFs;
use cairndb::{Db, Options, WriteBatch, WriteOptions};
use common::{Image, files_with, restore, snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";

fn opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 64 << 10,
        block_bytes: 256,
        block_restart_interval: 4,
        block_cache_bytes: 0,
        background_compaction: false,
        ..Options::default()
    }
}

/// The canonical database: tables on level 1 (from a compaction) and on
/// level 0, a manifest with several edits, and a journal of unflushed
/// batches. Returns its image, the name of the newest journal, and the
/// acceptable states: `states[0]` is the data without the journal's
/// batches, `states[i]` with the first `i` of them (the last is the full
/// data).
fn canonical(rng: &mut StdRng) -> (Image, String, Vec<Model>) {
    let dir = Path::new(DIR);
    let fs = MemFs::new();
    let db = Db::open(dir, opts(&fs)).expect("open");
    let mut model = Model::new();
    let put = |db: &Db, model: &mut Model, k: String, v: Vec<u8>| {
        db.put(&k, &v).expect("put");
        model.insert(k.into_bytes(), v);
    };
    for i in 0..60 {
        put(
            &db,
            &mut model,
            format!("a{i:03}"),
            format!("first-{i}").into_bytes(),
        );
    }
    db.flush().expect("flush");
    for i in (0..200).step_by(3) {
        put(
            &db,
            &mut model,
            format!("a{i:03}"),
            format!("second-{i}").into_bytes(),
        );
    }
    db.delete("a001").expect("delete");
    model.remove(b"a001".as_slice());
    db.compact().expect("compact");
    for i in 0..150 {
        let v: Vec<u8> = (0..rng.random_range(0..30)).map(|_| rng.random()).collect();
        put(&db, &mut model, format!("b{i:03}"), v);
    }
    put(&db, &mut model, "a002".into(), b"third".to_vec());
    db.flush().expect("flush");
    let mut states = vec![model.clone()];
    for i in 0..8 {
        let mut b = WriteBatch::new();
        for j in 0..3 {
            let k = format!("c{i}{j}");
            b.put(&k, format!("journal-{i}-{j}")).expect("batch put");
            model.insert(k.into_bytes(), format!("journal-{i}-{j}").into_bytes());
        }
        b.delete(format!("a{:03}", i * 3)).expect("batch delete");
        model.remove(format!("a{:03}", i * 3).as_bytes());
        db.write(b, &WriteOptions { sync: i % 2 == 0 })
            .expect("write");
        states.push(model.clone());
    }
    let levels = db.stats().tables_per_level;
    assert!(
        levels[0] >= 1 && levels[1..].iter().sum::<usize>() >= 1,
        "{levels:?}"
    );
    db.close().expect("close");
    let image = snapshot(&fs, dir);
    let journal = files_with(&fs, dir, ".journal").pop().expect("journal");
    (image, journal, states)
}

#[derive(Default, Debug)]
struct Counts {
    mutations: usize,
    intact: usize,
    open_corruption: usize,
    open_io: usize,
    read_corruption: usize,
    tail_cut: usize,
    panics: usize,
    wrong: Vec<String>,
}

enum Outcome {
    Intact,
    OpenCorruption,
    OpenIo,
    ReadCorruption,
    TailCut,
    Wrong(String),
}

fn check(image: &Image, file: &str, newest_journal: &str, states: &[Model]) -> Outcome {
    let dir = Path::new(DIR);
    let fs = restore(image, dir);
    let db = match Db::open(dir, opts(&fs)) {
        Ok(db) => db,
        Err(e) if e.is_corruption() => return Outcome::OpenCorruption,
        Err(cairndb::Error::Io { .. }) if file == "CURRENT" => return Outcome::OpenIo,
        Err(e) => return Outcome::Wrong(format!("open: unexpected error {e}")),
    };
    let full = states.last().expect("states");
    // The states this mutation may legitimately produce.
    let allowed: &[Model] = if file == newest_journal {
        states
    } else {
        std::slice::from_ref(full)
    };
    let mut read_error = false;
    let keys: BTreeSet<&Vec<u8>> = states.iter().flat_map(|m| m.keys()).collect();
    for k in keys {
        match db.get(k) {
            Ok(got) => {
                if !allowed.iter().any(|m| m.get(k) == got.as_ref()) {
                    return Outcome::Wrong(format!(
                        "get {:?} = {:?}",
                        String::from_utf8_lossy(k),
                        got.map(|v| String::from_utf8_lossy(&v).into_owned())
                    ));
                }
            }
            Err(e) if e.is_corruption() => read_error = true,
            Err(e) => return Outcome::Wrong(format!("get: unexpected error {e}")),
        }
    }
    let mut state = None;
    for rev in [false, true] {
        let rows: cairndb::Result<Vec<_>> = if rev {
            db.iter().rev().collect()
        } else {
            db.iter().collect()
        };
        match rows {
            Ok(mut rows) => {
                if rev {
                    rows.reverse();
                }
                let got: Model = rows.into_iter().collect();
                match allowed.iter().position(|m| *m == got) {
                    Some(i) => state = Some(i),
                    None => {
                        return Outcome::Wrong(format!(
                            "scan (rev={rev}) matches no allowed state ({} rows)",
                            got.len()
                        ));
                    }
                }
            }
            Err(e) if e.is_corruption() => read_error = true,
            Err(e) => return Outcome::Wrong(format!("scan: unexpected error {e}")),
        }
    }
    if read_error {
        Outcome::ReadCorruption
    } else if state == Some(allowed.len() - 1) {
        Outcome::Intact
    } else {
        Outcome::TailCut
    }
}

#[test]
fn single_bit_flips_never_panic_or_return_wrong_data() {
    let seed: u64 = std::env::var("CAIRNDB_SWEEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    println!("corruption sweep seed {seed} (CAIRNDB_SWEEP_SEED)");
    let mut rng = StdRng::seed_from_u64(seed);
    let (image, journal, states) = canonical(&mut rng);
    // Every byte of small files (all 8 bits of tiny ones); a sample of big ones.
    let mut plan: Vec<(String, usize, u8)> = Vec::new();
    for (name, bytes) in &image {
        let len = bytes.len();
        println!("  {name}: {len} bytes");
        if len < 512 {
            for off in 0..len {
                for bit in 0..8 {
                    plan.push((name.clone(), off, bit));
                }
            }
        } else if len < 4096 {
            for off in 0..len {
                plan.push((name.clone(), off, rng.random_range(0..8)));
            }
        } else {
            let mut offs: BTreeSet<usize> = (len - 200..len).collect(); // footer, index
            offs.extend((0..200).map(|i| i * len / 200));
            while offs.len() < 1500 {
                offs.insert(rng.random_range(0..len));
            }
            plan.extend(
                offs.into_iter()
                    .map(|o| (name.clone(), o, rng.random_range(0..8))),
            );
        }
    }
    let mut by_file: BTreeMap<String, Counts> = BTreeMap::new();
    // Panics are counted, not printed once per mutation.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for (name, off, bit) in &plan {
        let mut img = image.clone();
        img.get_mut(name).expect("file")[*off] ^= 1 << bit;
        let c = by_file.entry(name.clone()).or_default();
        c.mutations += 1;
        match std::panic::catch_unwind(AssertUnwindSafe(|| check(&img, name, &journal, &states))) {
            Ok(Outcome::Intact) => c.intact += 1,
            Ok(Outcome::OpenCorruption) => c.open_corruption += 1,
            Ok(Outcome::OpenIo) => c.open_io += 1,
            Ok(Outcome::ReadCorruption) => c.read_corruption += 1,
            Ok(Outcome::TailCut) => c.tail_cut += 1,
            Ok(Outcome::Wrong(w)) => c.wrong.push(format!("{name} @{off} bit {bit}: {w}")),
            Err(_) => {
                c.panics += 1;
                c.wrong.push(format!("{name} @{off} bit {bit}: PANIC"));
            }
        }
    }
    std::panic::set_hook(hook);
    let mut total = Counts::default();
    for (name, c) in &by_file {
        println!(
            "  {name}: {} mutations: {} intact, {} corruption at open, {} io at open, \
             {} corruption on read, {} journal tail cut, {} panics, {} wrong",
            c.mutations,
            c.intact,
            c.open_corruption,
            c.open_io,
            c.read_corruption,
            c.tail_cut,
            c.panics,
            c.wrong.len()
        );
        total.mutations += c.mutations;
        total.intact += c.intact;
        total.open_corruption += c.open_corruption;
        total.open_io += c.open_io;
        total.read_corruption += c.read_corruption;
        total.tail_cut += c.tail_cut;
        total.panics += c.panics;
        total.wrong.extend(c.wrong.iter().cloned());
    }
    println!(
        "total: {} mutations: {} intact, {} corruption at open, {} io at open, \
         {} corruption on read, {} journal tail cut, {} panics, {} wrong",
        total.mutations,
        total.intact,
        total.open_corruption,
        total.open_io,
        total.read_corruption,
        total.tail_cut,
        total.panics,
        total.wrong.len()
    );
    for w in total.wrong.iter().take(40) {
        println!("  BAD {w}");
    }
    assert!(
        total.mutations >= 2000,
        "sweep too small: {}",
        total.mutations
    );
    assert_eq!(total.panics, 0, "seed {seed}: panics");
    assert!(
        total.wrong.is_empty(),
        "seed {seed}: {} bad outcomes",
        total.wrong.len()
    );
    // Damage must actually be detected, not merely survive.
    assert!(total.open_corruption + total.read_corruption > total.mutations / 2);
}
