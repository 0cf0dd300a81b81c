//! Replays the fuzz corpora, `fuzz/corpus/<target>/`, through the entry
//! points the cargo-fuzz targets call (`cairndb::fuzzing`), so a plain
//! `cargo test` on stable Rust runs every input kept there, and the seeds
//! as the current code makes them, without cargo-fuzz or libFuzzer.
//!
//! A panic anywhere, also in a database's background thread, fails the
//! test, as it would crash the fuzzer. Regenerate the seed files (after a
//! format change, say) with
//! `cargo test -p cairndb --test fuzz_corpus -- --ignored regenerate`.

use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

type Target = fn(&[u8]) -> usize;

const TARGETS: [(&str, Target); 8] = [
    ("journal", cairndb::fuzzing::journal),
    ("manifest", cairndb::fuzzing::manifest),
    ("batch", cairndb::fuzzing::batch),
    ("block", cairndb::fuzzing::block),
    ("filter", cairndb::fuzzing::filter),
    ("table", cairndb::fuzzing::table),
    ("open_image", cairndb::fuzzing::open_image),
    ("ops_model", cairndb::fuzzing::ops_model),
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

static PANICKED: AtomicBool = AtomicBool::new(false);

/// Records panics of every thread (a background thread's panic would
/// otherwise only be printed).
fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            default(info);
        }));
    });
}

fn run(target: &str, f: Target, name: &str, input: &[u8]) -> usize {
    let n = f(input);
    assert!(
        !PANICKED.load(Ordering::SeqCst),
        "{target}: input {name} panicked in a background thread"
    );
    n
}

/// Every file of every target's corpus directory, and every seed as
/// `seed_corpus` makes it now.
#[test]
fn corpus_and_seeds_replay_without_panics() {
    watch_panics();
    for (target, f) in TARGETS {
        let dir = corpus_dir().join(target);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        paths.sort();
        assert!(!paths.is_empty(), "{} holds no input", dir.display());
        let mut decoded = 0;
        for path in &paths {
            let input =
                std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            decoded += run(target, f, &path.display().to_string(), &input);
        }
        println!("{target}: {} inputs, {decoded} decoded", paths.len());
        assert!(decoded > 0, "{target}: the corpus decodes to nothing");
    }
    for (i, (target, input)) in cairndb::fuzzing::seed_corpus().iter().enumerate() {
        let (_, f) = TARGETS
            .iter()
            .find(|(t, _)| t == target)
            .unwrap_or_else(|| panic!("seed for unknown target {target}"));
        run(target, *f, &format!("seed {i}"), input);
    }
}

/// FNV-1a, for stable seed file names.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Rewrites the `seed-*` files of every corpus directory from
/// `seed_corpus` (other files, kept from fuzzing runs, are left alone).
#[test]
#[ignore = "writes fuzz/corpus; run by hand to regenerate the seeds"]
fn regenerate_seed_corpus() {
    for (target, _) in TARGETS {
        let dir = corpus_dir().join(target);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            if path
                .file_name()
                .and_then(|n| n.to_str())
                // Regression inputs (`seed-regress-*`) are kept by hand.
                .is_some_and(|n| n.starts_with("seed-") && !n.starts_with("seed-regress-"))
            {
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }
    for (target, input) in cairndb::fuzzing::seed_corpus() {
        let path = corpus_dir()
            .join(target)
            .join(format!("seed-{:016x}", fnv(&input)));
        std::fs::write(&path, &input).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
