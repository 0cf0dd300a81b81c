//! Bounded corruption sweep: damage the files of a small canonical
//! database one mutation at a time and check that opening and reading it
//! never panics, never hangs, never allocates past a bound and never
//! returns wrong data.
//!
//! Mutations, for every file (`Kind`):
//! - a single bit flipped: every bit of every byte of files under 1 KiB,
//!   two bits of every byte of larger ones (every bit of every byte with
//!   `CAIRNDB_SWEEP_FULL=1`, about 85,000 mutations);
//! - truncation at every byte (so at every 512-byte boundary and at
//!   `len - 1`; files over 16 KiB only at boundaries and in their last
//!   512 bytes);
//! - each 512-byte sector and each 4 KiB page overwritten with zeros, and
//!   with seeded garbage;
//! - misplaced, intact files: two tables swapped, two value segments
//!   (journals, values files) swapped, and each table and segment replaced
//!   by the file of the same name of another database of the same shape
//!   (`misplaced.rs` does the same on larger databases).
//!
//! Allowed outcomes per mutation:
//! - the full, correct data;
//! - `Err(Corruption)` from open, a get or a scan (`Io` only when the
//!   damaged file is CURRENT, which may then name a missing manifest).
//!
//! The canonical database was closed cleanly, so its manifest vouches for
//! the newest journal's end: a damaged or cut journal record is
//! `Corruption`, never a torn tail cut off (before clean closes were
//! recorded, that cut lost the batches after the damage silently).
//!
//! Besides the outcome, each mutation is bounded: a panic on any thread
//! (counted by the panic hook, so a background thread's panic is seen too),
//! more than `MUTATION_TIME_MAX` (a watchdog thread ends the process with the
//! mutation's description if one never finishes), or a peak of more than
//! `ALLOC_PEAK_MAX` bytes allocated above the level before the mutation
//! (a counting global allocator; a single request over `ALLOC_REFUSE` is
//! refused after naming the mutation, which aborts the process) all fail.
//!
//! `Db::repair` after damage to the manifest or CURRENT (every mutation
//! of them but swaps, and of the bit flips every fifth; and the manifest
//! or CURRENT deleted): every table and journal is intact, so the repaired
//! database must open, hold exactly the full data and verify clean.
//!
//! Seed via `CAIRNDB_SWEEP_SEED` (printed). Every bad outcome prints its
//! index in the plan; `CAIRNDB_SWEEP_ONLY=<index>` replays just that one.
//! The sweep prints its counts per mutation kind and per file.

mod common;

use cairndb::io::MemFs;
use cairndb::{Db, Options, WriteBatch, WriteOptions};
use common::{Image, restore, snapshot};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";
/// The canonical database's keyspace besides the default one; its keys
/// are in the model behind `KS_PREFIX`.
const KS: &str = "ks";
const KS_PREFIX: &[u8] = b"\xffks:";

fn ks_key(k: &[u8]) -> Vec<u8> {
    [KS_PREFIX, k].concat()
}

/// The keyspace `KS` of `db`, if it exists (none is made).
fn keyspace(db: &Db) -> Option<cairndb::Keyspace> {
    db.keyspaces()
        .iter()
        .any(|n| n == KS)
        .then(|| db.keyspace(KS).ok())
        .flatten()
}

fn opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        memtable_bytes: 64 << 10,
        block_bytes: 256,
        block_restart_interval: 4,
        block_cache_bytes: 0,
        background_compaction: false,
        // Values of 12 bytes and more are separated, so the flushed
        // journals stay as value segments and are swept too.
        value_separation_min: 12,
        ..Options::default()
    }
}

/// The canonical database: tables on level 1 (from a compaction) and on
/// level 0, a manifest with several edits, and a journal of unflushed
/// batches, closed cleanly. Returns its image and the states the journal's
/// batches went through: `states[0]` is the data without them, `states[i]`
/// with the first `i` (the last is the full data, the only one a mutation
/// may leave readable; the others name the keys to check).
fn canonical(rng: &mut StdRng, machine: u64) -> (Image, Vec<Model>) {
    let dir = Path::new(DIR);
    // The simulated machine's seed: databases built on two machines get
    // different identities (the simulator draws them from its seed).
    let fs = MemFs::with_seed(machine);
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
    // A keyspace with tables on both levels and ops in the journal (its
    // model keys are prefixed with `KS_PREFIX`).
    let ks = db.keyspace(KS).expect("keyspace");
    for i in 0..40 {
        let (k, v) = (format!("k{i:03}"), format!("in-ks-{i}"));
        ks.put(&k, &v).expect("put in ks");
        model.insert(ks_key(k.as_bytes()), v.into_bytes());
    }
    db.compact().expect("compact");
    for i in (0..40).step_by(5) {
        let k = format!("k{i:03}");
        ks.delete(&k).expect("delete in ks");
        model.remove(&ks_key(k.as_bytes()));
    }
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
        let k = format!("j{i}");
        b.put_in(&ks, &k, format!("ks-journal-{i}"))
            .expect("batch put_in");
        model.insert(ks_key(k.as_bytes()), format!("ks-journal-{i}").into_bytes());
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
    (snapshot(&fs, dir), states)
}

/// Peak bytes one mutation may allocate above the level before it. The
/// canonical database is a few KiB and its memtable 64 KiB, so anything
/// near this means a damaged length was trusted.
const ALLOC_PEAK_MAX: usize = 64 << 20;
/// A single request above this is refused (the process aborts after
/// naming the mutation) rather than risking the machine's memory.
const ALLOC_REFUSE: usize = 1 << 30;
/// Wall time one mutation (restore, open, reads, close) may take.
const MUTATION_TIME_MAX: Duration = Duration::from_secs(10);

// ---- the counting allocator ----------------------------------------------

/// Wraps the system allocator, counting bytes in use and their peak.
struct Counting;

static ALLOC_NOW: AtomicUsize = AtomicUsize::new(0);
static ALLOC_PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = ALLOC_NOW.fetch_add(n, Ordering::Relaxed) + n;
    ALLOC_PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(n: usize) {
    ALLOC_NOW.fetch_sub(n, Ordering::Relaxed);
}

/// Restarts peak tracking; returns the bytes in use now (the baseline).
fn reset_peak() -> usize {
    let now = ALLOC_NOW.load(Ordering::Relaxed);
    ALLOC_PEAK.store(now, Ordering::Relaxed);
    now
}

/// Names the mutation behind an absurd request on stderr, without
/// allocating (we are inside the allocator).
fn refuse(size: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = size;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut err = std::io::stderr();
    let _ = err.write_all(b"\ncorruption sweep: refusing an allocation of ");
    let _ = err.write_all(&digits[i..]);
    let _ = err.write_all(b" bytes (the process aborts next) during ");
    if let Ok(d) = CURRENT_MUTATION.try_lock() {
        let _ = err.write_all(&d.0[..d.1]);
    }
    let _ = err.write_all(b"\n");
}

// SAFETY: every method hands its arguments unchanged to `System`, which
// upholds the `GlobalAlloc` contract; the counters only observe sizes, and
// a refused request returns null, which the contract allows.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_REFUSE {
            refuse(layout.size());
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout is passed on as received.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_REFUSE {
            refuse(layout.size());
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout is passed on as received.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every block
        // of ours is System's).
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_REFUSE {
            refuse(new_size);
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System` with `layout`; arguments are
        // passed on as received.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// ---- what is running now, for the allocator and the watchdog -------------

/// Description of the mutation in progress (bytes, length), copied in
/// without allocating while the lock is held.
static CURRENT_MUTATION: Mutex<([u8; 240], usize)> = Mutex::new(([0; 240], 0));
/// Milliseconds since `epoch()` at which the running mutation started,
/// plus one; 0 when none runs.
static MUTATION_STARTED: AtomicU64 = AtomicU64::new(0);
static SWEEP_DONE: AtomicBool = AtomicBool::new(false);
/// Panics on any thread, counted by the panic hook.
static PANICS: AtomicUsize = AtomicUsize::new(0);
static FIRST_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn set_current(desc: &str) {
    let n = desc.len().min(240);
    let mut d = CURRENT_MUTATION.lock().expect("mutation lock");
    d.0[..n].copy_from_slice(&desc.as_bytes()[..n]);
    d.1 = n;
}

fn current() -> String {
    let d = CURRENT_MUTATION.lock().expect("mutation lock");
    String::from_utf8_lossy(&d.0[..d.1]).into_owned()
}

/// Ends the process, naming the mutation, if one runs for more than
/// `MUTATION_TIME_MAX` (a hang can't be caught by timing it afterwards).
fn start_watchdog() -> std::thread::JoinHandle<()> {
    epoch();
    std::thread::spawn(|| {
        while !SWEEP_DONE.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            let started = MUTATION_STARTED.load(Ordering::Relaxed);
            let now = epoch().elapsed().as_millis() as u64 + 1;
            if started != 0 && now.saturating_sub(started) > MUTATION_TIME_MAX.as_millis() as u64 {
                eprintln!(
                    "corruption sweep: HANG: {} has run for over {MUTATION_TIME_MAX:?}",
                    current()
                );
                std::process::exit(101);
            }
        }
    })
}

// ---- mutations ------------------------------------------------------------

/// Sizes of the regions that `Zero*` and `Garbage*` overwrite.
const SECTOR: usize = 512;
const PAGE: usize = 4096;
/// Files smaller than this have every bit of every byte flipped; larger
/// ones two bits of every byte (all eight with `CAIRNDB_SWEEP_FULL=1`).
const BIT_FLIP_EVERY_BIT_MAX: usize = 1024;
/// Files up to this size are truncated at every byte.
const TRUNCATE_EVERY_BYTE_MAX: usize = 16 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    BitFlip,
    Truncate,
    ZeroSector,
    GarbageSector,
    ZeroPage,
    GarbagePage,
    /// The file and another of its kind (tables; journals and values
    /// files) trade places: each intact, under the other's name.
    Swap,
    /// The file replaced by the file of the same name of another database
    /// of the same shape: intact, but not this database's.
    Foreign,
}

/// One damage to one file: `offset` is the byte (flip), the new length
/// (truncate) or the start of the region; `arg` is the bit or the garbage
/// seed.
struct Mutation {
    file: String,
    kind: Kind,
    offset: usize,
    arg: u64,
    /// `Swap`: the other file's name; `Foreign`: unused.
    other: String,
    /// `Foreign`: the other database's file.
    foreign: Option<std::sync::Arc<Vec<u8>>>,
}

impl Mutation {
    fn describe(&self, index: usize, seed: u64) -> String {
        let what = match self.kind {
            Kind::BitFlip => format!("bit {} of byte {}", self.arg, self.offset),
            Kind::Truncate => format!("truncated to {} bytes", self.offset),
            Kind::ZeroSector | Kind::ZeroPage => format!("zeros at {}", self.offset),
            Kind::GarbageSector | Kind::GarbagePage => {
                format!("garbage (seed {}) at {}", self.arg, self.offset)
            }
            Kind::Swap => format!("swapped with {}", self.other),
            Kind::Foreign => "replaced by another database's".to_string(),
        };
        format!(
            "mutation #{index} ({:?}) of {}: {what} [CAIRNDB_SWEEP_SEED={seed} CAIRNDB_SWEEP_ONLY={index}]",
            self.kind, self.file
        )
    }

    fn apply(&self, image: &mut Image) {
        match self.kind {
            Kind::Swap => {
                let mine = image[&self.file].clone();
                let theirs = image.insert(self.other.clone(), mine).expect("other file");
                image.insert(self.file.clone(), theirs);
                return;
            }
            Kind::Foreign => {
                let bytes = self.foreign.as_deref().expect("foreign bytes").clone();
                image.insert(self.file.clone(), bytes);
                return;
            }
            _ => {}
        }
        let bytes = image
            .get_mut(&self.file)
            .expect("mutated file is in the image");
        let span = match self.kind {
            Kind::BitFlip => {
                bytes[self.offset] ^= 1 << self.arg;
                return;
            }
            Kind::Truncate => {
                bytes.truncate(self.offset);
                return;
            }
            Kind::ZeroSector | Kind::GarbageSector => SECTOR,
            Kind::ZeroPage | Kind::GarbagePage => PAGE,
            Kind::Swap | Kind::Foreign => unreachable!("applied above"),
        };
        let end = (self.offset + span).min(bytes.len());
        let region = &mut bytes[self.offset..end];
        match self.kind {
            Kind::GarbageSector | Kind::GarbagePage => {
                StdRng::seed_from_u64(self.arg).fill_bytes(region)
            }
            _ => region.fill(0),
        }
    }
}

/// Every mutation of every file, in a fixed order for a given seed (and
/// `full`: every bit of every byte of every file); then every swap of two
/// files of a kind, and every file replaced by `foreign`'s of its name.
fn plan(image: &Image, foreign: &Image, rng: &mut StdRng, full: bool) -> Vec<Mutation> {
    let mut plan = Vec::new();
    let kind_of = |name: &str| {
        if name.ends_with(".table") {
            Some("table")
        } else if name.ends_with(".journal") || name.ends_with(".values") {
            Some("segment")
        } else {
            None
        }
    };
    let names: Vec<&String> = image.keys().collect();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            if kind_of(a).is_some() && kind_of(a) == kind_of(b) {
                plan.push(Mutation {
                    file: (*a).clone(),
                    kind: Kind::Swap,
                    offset: 0,
                    arg: 0,
                    other: (*b).clone(),
                    foreign: None,
                });
            }
        }
        if let Some(theirs) = foreign.get(*a)
            && kind_of(a).is_some()
            && theirs != &image[*a]
        {
            plan.push(Mutation {
                file: (*a).clone(),
                kind: Kind::Foreign,
                offset: 0,
                arg: 0,
                other: String::new(),
                foreign: Some(std::sync::Arc::new(theirs.clone())),
            });
        }
    }
    for (name, bytes) in image {
        let len = bytes.len();
        let mut push = |kind, offset, arg| {
            plan.push(Mutation {
                file: name.clone(),
                kind,
                offset,
                arg,
                other: String::new(),
                foreign: None,
            })
        };
        for off in 0..len {
            if full || len < BIT_FLIP_EVERY_BIT_MAX {
                for bit in 0..8 {
                    push(Kind::BitFlip, off, bit);
                }
            } else {
                let bit = rng.random_range(0..8);
                push(Kind::BitFlip, off, bit);
                push(Kind::BitFlip, off, (bit + rng.random_range(1..8)) % 8);
            }
        }
        let cuts: BTreeSet<usize> = if len <= TRUNCATE_EVERY_BYTE_MAX {
            (0..len).collect()
        } else {
            (0..len)
                .step_by(SECTOR)
                .chain(len.saturating_sub(SECTOR)..len)
                .collect()
        };
        for cut in cuts {
            push(Kind::Truncate, cut, 0);
        }
        for (span, zero, garbage) in [
            (SECTOR, Kind::ZeroSector, Kind::GarbageSector),
            (PAGE, Kind::ZeroPage, Kind::GarbagePage),
        ] {
            for off in (0..len).step_by(span) {
                push(zero, off, 0);
                push(garbage, off, rng.random());
            }
        }
    }
    plan
}

// ---- checking one mutation -------------------------------------------------

enum Outcome {
    Intact,
    OpenCorruption,
    OpenIo,
    ReadCorruption,
    TailCut,
    Wrong(String),
}

fn check(image: &Image, file: &str, states: &[Model]) -> Outcome {
    let dir = Path::new(DIR);
    let fs = restore(image, dir);
    let db = match Db::open(dir, opts(&fs)) {
        Ok(db) => db,
        Err(e) if e.is_corruption() => return Outcome::OpenCorruption,
        Err(cairndb::Error::Io { .. }) if file == "CURRENT" => return Outcome::OpenIo,
        Err(e) => return Outcome::Wrong(format!("open: unexpected error {e}")),
    };
    let full = states.last().expect("states");
    // The only state a mutation may leave readable: after a clean close
    // no journal ends in a torn tail, so none may lose a suffix.
    let allowed: &[Model] = std::slice::from_ref(full);
    let mut read_error = false;
    let keys: BTreeSet<&Vec<u8>> = states.iter().flat_map(|m| m.keys()).collect();
    let ks = keyspace(&db);
    for k in keys {
        let got = match k.strip_prefix(KS_PREFIX) {
            Some(k) => ks.as_ref().map_or(Ok(None), |ks| ks.get(k)),
            None => db.get(k),
        };
        match got {
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
        // The keyspace's rows, read in the same direction (the model is a
        // map: their order past this point does not matter).
        let rows = rows.and_then(|mut rows| {
            if let Some(ks) = &ks {
                let more: cairndb::Result<Vec<_>> = if rev {
                    ks.iter().rev().collect()
                } else {
                    ks.iter().collect()
                };
                rows.extend(more?.into_iter().map(|(k, v)| (ks_key(&k), v)));
            }
            Ok(rows)
        });
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

/// `Db::repair` of an image whose tables and journals are intact: the
/// repaired database must open, hold the full data (both keyspaces) and
/// verify clean. `Some(what went wrong)` otherwise.
fn repaired(image: &Image, states: &[Model]) -> Option<String> {
    let dir = Path::new(DIR);
    let fs = restore(image, dir);
    if let Err(e) = Db::repair(dir, &opts(&fs)) {
        return Some(format!("repair: {e}"));
    }
    let db = match Db::open(dir, opts(&fs)) {
        Ok(db) => db,
        Err(e) => return Some(format!("open after repair: {e}")),
    };
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = match db.iter().collect() {
        Ok(rows) => rows,
        Err(e) => return Some(format!("scan after repair: {e}")),
    };
    if let Some(ks) = keyspace(&db) {
        match ks.iter().collect::<cairndb::Result<Vec<_>>>() {
            Ok(more) => rows.extend(more.into_iter().map(|(k, v)| (ks_key(&k), v))),
            Err(e) => return Some(format!("keyspace scan after repair: {e}")),
        }
    }
    let got: Model = rows.into_iter().collect();
    if Some(&got) != states.last() {
        return Some(format!(
            "after repair: {} rows, not the full data",
            got.len()
        ));
    }
    match db.verify() {
        Ok(r) if r.is_ok() => None,
        Ok(r) => Some(format!("verify after repair: {:?}", r.problems)),
        Err(e) => Some(format!("verify after repair: {e}")),
    }
}

/// Whether the sweep repairs after mutation `m` (`repaired`).
fn repairs_after(m: &Mutation, index: usize) -> bool {
    (m.file.starts_with("MANIFEST-") || m.file == "CURRENT")
        && m.kind != Kind::Swap
        && (m.kind != Kind::BitFlip || index.is_multiple_of(5))
}

/// What a mutation led to; the first five are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    Intact,
    OpenCorruption,
    OpenIo,
    ReadCorruption,
    TailCut,
    Wrong,
    Panic,
}

const BUCKETS: [(Bucket, &str); 7] = [
    (Bucket::Intact, "intact"),
    (Bucket::OpenCorruption, "corruption at open"),
    (Bucket::OpenIo, "io at open"),
    (Bucket::ReadCorruption, "corruption on read"),
    (Bucket::TailCut, "journal tail cut"),
    (Bucket::Wrong, "wrong"),
    (Bucket::Panic, "panics"),
];

/// Outcome counts, indexed like `BUCKETS`.
#[derive(Default, Clone, Copy)]
struct Counts([usize; 7]);

impl Counts {
    fn add(&mut self, b: Bucket) {
        let i = BUCKETS.iter().position(|(x, _)| *x == b).expect("bucket");
        self.0[i] += 1;
    }
    fn get(&self, b: Bucket) -> usize {
        self.0[BUCKETS.iter().position(|(x, _)| *x == b).expect("bucket")]
    }
    fn total(&self) -> usize {
        self.0.iter().sum()
    }
    fn line(&self) -> String {
        let parts: Vec<String> = BUCKETS
            .iter()
            .zip(self.0)
            .map(|((_, name), n)| format!("{n} {name}"))
            .collect();
        format!("{} mutations: {}", self.total(), parts.join(", "))
    }
}

#[test]
fn damaged_files_never_panic_hang_overallocate_or_return_wrong_data() {
    let seed: u64 = std::env::var("CAIRNDB_SWEEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let only: Option<usize> = std::env::var("CAIRNDB_SWEEP_ONLY")
        .ok()
        .and_then(|s| s.parse().ok());
    println!("corruption sweep seed {seed} (CAIRNDB_SWEEP_SEED)");
    let mut rng = StdRng::seed_from_u64(seed);
    let (image, states) = canonical(&mut rng, 0);
    // A database of the same shape on another machine, its values drawn
    // anew: the source of `Foreign` files.
    let (foreign, _) = canonical(&mut StdRng::seed_from_u64(seed ^ 0xf0e1), 1);
    for (name, bytes) in &image {
        println!("  {name}: {} bytes", bytes.len());
    }
    let full = std::env::var("CAIRNDB_SWEEP_FULL").is_ok_and(|v| v == "1");
    let plan = plan(&image, &foreign, &mut rng, full);
    let watchdog = start_watchdog();

    // Panics are counted (on every thread), not printed once per mutation.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut first) = FIRST_PANIC.lock() {
            first.get_or_insert_with(|| info.to_string());
        }
    }));

    // The undamaged image: what a mutation costs when nothing is wrong.
    set_current("the undamaged image");
    let base = reset_peak();
    let t = Instant::now();
    MUTATION_STARTED.store(epoch().elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
    let outcome = check(&image, "", &states);
    MUTATION_STARTED.store(0, Ordering::Relaxed);
    assert!(
        matches!(outcome, Outcome::Intact),
        "the undamaged image does not read back whole"
    );
    println!(
        "undamaged image: peak {} KiB above baseline, {:.2} ms",
        ALLOC_PEAK.load(Ordering::Relaxed).saturating_sub(base) >> 10,
        t.elapsed().as_secs_f64() * 1e3
    );

    let mut by_kind: BTreeMap<Kind, Counts> = BTreeMap::new();
    let mut by_file: BTreeMap<String, Counts> = BTreeMap::new();
    let mut total = Counts::default();
    let mut bad: Vec<String> = Vec::new();
    let mut repairs = 0usize;
    let (mut peak_max, mut peak_max_at) = (0usize, String::new());
    let (mut slowest, mut slowest_at) = (Duration::ZERO, String::new());
    let started = Instant::now();
    for (index, m) in plan.iter().enumerate() {
        if only.is_some_and(|o| o != index) {
            continue;
        }
        let desc = m.describe(index, seed);
        let mut img = image.clone();
        m.apply(&mut img);
        set_current(&desc);
        let panics_before = PANICS.load(Ordering::SeqCst);
        let base = reset_peak();
        let t = Instant::now();
        MUTATION_STARTED.store(epoch().elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| check(&img, &m.file, &states)));
        MUTATION_STARTED.store(0, Ordering::Relaxed);
        let took = t.elapsed();
        let peak = ALLOC_PEAK.load(Ordering::Relaxed).saturating_sub(base);
        let panicked = result.is_err() || PANICS.load(Ordering::SeqCst) != panics_before;
        let bucket = match result {
            _ if panicked => {
                bad.push(format!("{desc}: PANIC"));
                Bucket::Panic
            }
            Ok(Outcome::Intact) => Bucket::Intact,
            Ok(Outcome::OpenCorruption) => Bucket::OpenCorruption,
            Ok(Outcome::OpenIo) => Bucket::OpenIo,
            Ok(Outcome::ReadCorruption) => Bucket::ReadCorruption,
            Ok(Outcome::TailCut) => Bucket::TailCut,
            Ok(Outcome::Wrong(w)) => {
                bad.push(format!("{desc}: {w}"));
                Bucket::Wrong
            }
            Err(_) => unreachable!("a caught panic sets `panicked`"),
        };
        if peak > ALLOC_PEAK_MAX {
            bad.push(format!(
                "{desc}: allocated {peak} bytes at peak (bound {ALLOC_PEAK_MAX})"
            ));
        }
        if took > MUTATION_TIME_MAX {
            bad.push(format!(
                "{desc}: took {took:?} (bound {MUTATION_TIME_MAX:?})"
            ));
        }
        if peak > peak_max {
            (peak_max, peak_max_at) = (peak, desc.clone());
        }
        if took > slowest {
            (slowest, slowest_at) = (took, desc);
        }
        by_kind.entry(m.kind).or_default().add(bucket);
        by_file.entry(m.file.clone()).or_default().add(bucket);
        total.add(bucket);
        if repairs_after(m, index) {
            let desc = format!("{} then repaired", m.describe(index, seed));
            set_current(&desc);
            let panics_before = PANICS.load(Ordering::SeqCst);
            MUTATION_STARTED.store(epoch().elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| repaired(&img, &states)));
            MUTATION_STARTED.store(0, Ordering::Relaxed);
            match result {
                _ if PANICS.load(Ordering::SeqCst) != panics_before => {
                    bad.push(format!("{desc}: PANIC"));
                }
                Ok(Some(w)) => bad.push(format!("{desc}: {w}")),
                Ok(None) => repairs += 1,
                Err(_) => bad.push(format!("{desc}: PANIC")),
            }
        }
    }
    // The manifest, or it and CURRENT, deleted.
    if only.is_none() {
        let manifest = image
            .keys()
            .find(|n| n.starts_with("MANIFEST-"))
            .expect("a manifest")
            .clone();
        for gone in [
            vec![manifest.clone()],
            vec![manifest, "CURRENT".to_string()],
        ] {
            let mut img = image.clone();
            for name in &gone {
                img.remove(name);
            }
            set_current(&format!("{gone:?} deleted, then repaired"));
            match repaired(&img, &states) {
                Some(w) => bad.push(format!("{gone:?} deleted, then repaired: {w}")),
                None => repairs += 1,
            }
        }
    }
    println!("repaired after {repairs} mutations of the manifest or CURRENT");
    let runtime = started.elapsed();
    SWEEP_DONE.store(true, Ordering::Relaxed);
    watchdog.join().expect("watchdog");
    std::panic::set_hook(hook);

    println!("by kind:");
    for (kind, c) in &by_kind {
        println!("  {kind:?}: {}", c.line());
    }
    println!("by file:");
    for (name, c) in &by_file {
        println!("  {name}: {}", c.line());
    }
    println!("total: {}", total.line());
    println!(
        "largest allocation peak: {} KiB above baseline ({peak_max_at}); bound {} MiB",
        peak_max >> 10,
        ALLOC_PEAK_MAX >> 20
    );
    println!(
        "slowest mutation: {:.1} ms ({slowest_at}); sweep took {:.1} s",
        slowest.as_secs_f64() * 1e3,
        runtime.as_secs_f64()
    );
    if let Some(p) = FIRST_PANIC.lock().expect("panic lock").as_ref() {
        println!("first panic: {p}");
    }
    for w in bad.iter().take(40) {
        println!("  BAD {w}");
    }
    assert!(bad.is_empty(), "seed {seed}: {} bad outcomes", bad.len());
    if only.is_none() {
        assert!(
            total.total() >= 20_000,
            "sweep too small: {}",
            total.total()
        );
        // Damage must actually be detected, not merely survive.
        let detected = total.get(Bucket::OpenCorruption) + total.get(Bucket::ReadCorruption);
        assert!(detected > total.total() / 2, "only {detected} detected");
    }
}
