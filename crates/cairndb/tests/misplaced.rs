//! Valid files under a name the manifest gives another file: a table
//! copied from another database, two tables of one database swapped, two
//! values files swapped, a journal from another database. Each file is
//! intact on its own (every checksum matches), so only a check of identity
//! can tell. Allowed outcomes: `Corruption` (from open, a read, a scan or a
//! compaction) or the full, correct data. Never fewer keys, never other
//! values, and a compaction over a misplaced file must not make a loss
//! permanent: with the right file put back, everything is there.

mod common;

use cairndb::io::MemFs;
use cairndb::{Db, Options};
use common::{Image, files_with, restore, snapshot};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";

fn opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 64 << 10,
        background_compaction: false,
        value_separation_min: 64,
        ..Options::default()
    }
}

/// The simulated file system of one machine: seeded by `tag`, so that two
/// databases built on two of them get different identities (the simulator
/// draws identities from its seed).
fn machine(tag: &str) -> MemFs {
    MemFs::with_seed(
        tag.bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31) ^ u64::from(b)),
    )
}

/// A database of `tables` level-0 tables, each of `per` keys tagged
/// `tag` in its values; `step` spreads the keys (so two databases built
/// with the same shape hold tables of the same size and key count).
fn build(tag: &str, tables: usize, per: usize, value_len: usize, compact: bool) -> (Image, Model) {
    let fs = machine(tag);
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let mut model = Model::new();
    for t in 0..tables {
        for i in 0..per {
            let k = format!("k{t:02}-{i:05}").into_bytes();
            let mut v = format!("{tag}-{t}-{i}-").into_bytes();
            v.resize(value_len, b'.');
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        db.flush().expect("flush");
    }
    if compact {
        // Overwrite half, so value GC moves the rest into values files.
        for t in 0..tables {
            for i in (0..per).step_by(2) {
                let k = format!("k{t:02}-{i:05}").into_bytes();
                let mut v = format!("{tag}-again-{t}-{i}-").into_bytes();
                v.resize(value_len, b',');
                db.put(&k, &v).expect("put");
                model.insert(k, v);
            }
        }
        db.compact().expect("compact");
        // And values left in a journal kept as a value segment.
        for i in 0..per {
            let k = format!("z-{i:05}").into_bytes();
            let mut v = format!("{tag}-late-{i}-").into_bytes();
            v.resize(value_len, b';');
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
    (snapshot(&fs, Path::new(DIR)), model)
}

/// What a damaged image gave.
#[derive(Debug, PartialEq)]
enum Outcome {
    Intact,
    Corruption(String),
}

/// Opens `image`, reads every key of `model`, scans, compacts, and checks
/// each answer is right or `Corruption`. Returns the outcome and the
/// image after the attempt (compaction may have rewritten it).
fn check(image: &Image, model: &Model, what: &str) -> (Outcome, Image) {
    let fs = restore(image, Path::new(DIR));
    let db = match Db::open(DIR, opts(&fs)) {
        Ok(db) => db,
        Err(e) if e.is_corruption() => return (Outcome::Corruption(e.to_string()), image.clone()),
        Err(e) => panic!("{what}: open: unexpected error {e}"),
    };
    let mut first_error = None;
    for (k, v) in model {
        match db.get(k) {
            Ok(got) => assert_eq!(
                got.as_deref(),
                Some(v.as_slice()),
                "{what}: get {} gave wrong data",
                String::from_utf8_lossy(k)
            ),
            Err(e) if e.is_corruption() => {
                first_error.get_or_insert(e.to_string());
            }
            Err(e) => panic!("{what}: get: unexpected error {e}"),
        }
    }
    match db.iter().collect::<cairndb::Result<Vec<_>>>() {
        Ok(rows) => {
            let got: Model = rows.into_iter().collect();
            assert!(
                got == *model,
                "{what}: scan gave {} rows, wrong data",
                got.len()
            );
        }
        Err(e) if e.is_corruption() => {
            first_error.get_or_insert(e.to_string());
        }
        Err(e) => panic!("{what}: scan: unexpected error {e}"),
    }
    match db.compact() {
        Ok(()) => {}
        Err(e) if e.is_corruption() => {
            first_error.get_or_insert(e.to_string());
        }
        Err(e) => panic!("{what}: compact: unexpected error {e}"),
    }
    let _ = db.close();
    let after = snapshot(&fs, Path::new(DIR));
    let outcome = first_error.map_or(Outcome::Intact, Outcome::Corruption);
    (outcome, after)
}

/// Puts the original bytes of every file named in `originals` back into
/// `after` and checks that the database then holds all of `model`: a
/// compaction over the misplaced file lost nothing for good.
fn nothing_lost(after: &Image, originals: &Image, model: &Model, what: &str) {
    let mut image = after.clone();
    for (name, bytes) in originals {
        if image.contains_key(name) {
            image.insert(name.clone(), bytes.clone());
        }
    }
    let fs = restore(&image, Path::new(DIR));
    let db = Db::open(DIR, opts(&fs)).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    let rows: Model = db
        .iter()
        .collect::<cairndb::Result<Vec<_>>>()
        .unwrap_or_else(|e| panic!("{what}: scan after repair: {e}"))
        .into_iter()
        .collect();
    assert!(
        rows == *model,
        "{what}: with the right file back, {} of {} keys",
        rows.len(),
        model.len()
    );
}

/// `image` must read as `Corruption`, and once the files of `originals`
/// are put back (after whatever the attempt wrote), lose nothing.
fn refused(image: &Image, originals: &Image, model: &Model, what: &str) {
    let (outcome, after) = check(image, model, what);
    assert!(
        matches!(outcome, Outcome::Corruption(_)),
        "{what}: read as {outcome:?}"
    );
    println!("{what}: {outcome:?}");
    nothing_lost(&after, originals, model, what);
}

/// `a` with files `x` and `y` swapped is refused.
fn swapped_is_corruption(a: &Image, x: &str, y: &str, model: &Model) {
    let mut image = a.clone();
    image.insert(x.to_owned(), a[y].clone());
    image.insert(y.to_owned(), a[x].clone());
    let originals: Image = [(x.to_owned(), a[x].clone()), (y.to_owned(), a[y].clone())].into();
    refused(&image, &originals, model, &format!("{x} and {y} swapped"));
}

fn tables(image: &Image) -> Vec<String> {
    image
        .keys()
        .filter(|n| n.ends_with(".table"))
        .cloned()
        .collect()
}

#[test]
fn a_table_from_another_database_is_corruption() {
    // Same shape, so the foreign table has the same size and key count.
    let (a, model) = build("a", 3, 300, 40, false);
    let (b, _) = build("b", 3, 300, 40, false);
    let ta = tables(&a);
    let tb = tables(&b);
    assert_eq!(ta, tb, "the two databases name their tables alike");
    for name in &ta {
        let mut image = a.clone();
        image.insert(name.clone(), b[name].clone());
        let originals: Image = [(name.clone(), a[name].clone())].into();
        refused(
            &image,
            &originals,
            &model,
            &format!("{name} from another database"),
        );
    }
}

#[test]
fn two_tables_swapped_are_corruption() {
    let (a, model) = build("a", 3, 300, 40, false);
    let names = tables(&a);
    assert!(names.len() >= 3);
    for (x, y) in [(0, 1), (1, 2), (0, 2)] {
        swapped_is_corruption(&a, &names[x], &names[y], &model);
    }
}

#[test]
fn swapped_value_files_are_corruption() {
    let (a, model) = build("a", 4, 200, 200, true);
    let fs = restore(&a, Path::new(DIR));
    let mut segments = files_with(&fs, Path::new(DIR), ".values");
    segments.extend(files_with(&fs, Path::new(DIR), ".journal"));
    segments.extend(files_with(&fs, Path::new(DIR), ".stream"));
    let live: Vec<String> = segments.into_iter().filter(|n| !a[n].is_empty()).collect();
    assert!(live.len() >= 2, "value segments: {live:?}");
    swapped_is_corruption(&a, &live[0], &live[1], &model);
}

/// A database whose newest journal holds `n` unflushed puts, closed
/// cleanly.
fn with_journal(tag: &str, n: usize) -> (Image, Model) {
    let fs = machine(tag);
    let db = Db::open(DIR, opts(&fs)).expect("open");
    let mut model = Model::new();
    for i in 0..n {
        let k = format!("j{i:05}").into_bytes();
        let v = format!("{tag}-journal-{i}").into_bytes();
        db.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    db.close().expect("close");
    (snapshot(&fs, Path::new(DIR)), model)
}

#[test]
fn a_journal_from_another_database_is_corruption() {
    let (a, model) = with_journal("a", 200);
    let (b, _) = with_journal("b", 200);
    let fs = restore(&a, Path::new(DIR));
    let journals = files_with(&fs, Path::new(DIR), ".journal");
    let newest = journals.last().expect("a journal").clone();
    assert_eq!(a[&newest].len(), b[&newest].len(), "same shape");
    let mut image = a.clone();
    image.insert(newest.clone(), b[&newest].clone());
    let originals: Image = [(newest.clone(), a[&newest].clone())].into();
    refused(
        &image,
        &originals,
        &model,
        &format!("{newest} from another database"),
    );
}
