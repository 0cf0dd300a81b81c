//! Loom model of seqno publication: the leader inserts a group into the
//! memtable, then publishes its last seqno (`commit_group`:
//! `mem.insert(..)` for every operation, then
//! `last_seqno.store(next - 1, Release)`, all under the `journal` lock); a
//! reader takes its view first, then loads the seqno with `Acquire`, and
//! reads the view's memtables at that seqno (`Inner::view_and_seqno`, then
//! the memtable part of `ReadView::get`). A memtable is sealed under the
//! `journal` lock and swapped under the `state` lock (`seal_memtable`).
//!
//! What is a model here and what is the engine's: `commit_group` and
//! `view_and_seqno` need a whole `Inner` (journal IO, a `parking_lot`
//! `RwLock`) and the memtable is a `parking_lot` `RwLock` over a B-tree,
//! none of which loom can run. So the steps above are restated here, one
//! line each, with the same orderings; the batches are real `WriteBatch`es
//! decoded by the real codec. The memtable is modelled as an insert-only
//! array of entries, each published with a `Release` store and read with
//! `Acquire` loads: weaker than the memtable's lock, which would
//! synchronize reader and writer by itself, so that the model can tell
//! whether the `last_seqno` orderings matter (weakening the publication
//! to `Relaxed` fails it). It also models the memtable's lock-free
//! shortcut: a reader that finds the entry count (`Memtable::bytes`,
//! raised `Relaxed` before each insert) at 0 sees no entries.

use super::batch::WriteBatch;
use crate::format::batch as codec;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex};
use std::sync::atomic::AtomicUsize;

/// Entries a model memtable holds.
const SLOTS: usize = 4;

/// A memtable: entries `seqno << 16 | key << 8 | value` (one-byte keys and
/// values), 0 for a free slot. One writer at a time (the leader, under the
/// journal lock) fills the slots in order.
struct Memtable {
    slots: Vec<AtomicU64>,
    /// Slots used; only the writer touches it, under the journal lock, so
    /// it needs no model of its own (a std atomic, not loom's).
    used: AtomicUsize,
    /// `Memtable::bytes`: raised before each insert, read by readers.
    counted: AtomicU64,
}

impl Memtable {
    fn new() -> Self {
        Memtable {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            used: AtomicUsize::new(0),
            counted: AtomicU64::new(0),
        }
    }

    fn insert(&self, key: u8, seqno: u64, value: u8) {
        let i = self.used.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.counted.fetch_add(1, Ordering::Relaxed);
        self.slots[i].store(
            seqno << 16 | u64::from(key) << 8 | u64::from(value),
            Ordering::Release,
        );
    }

    /// The entries a reader sees now (each slot loaded once, `Acquire`).
    fn entries(&self) -> Vec<u64> {
        if self.counted.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.slots
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&e| e != 0)
            .collect()
    }
}

/// The newest value of `key` among `entries` with a seqno `<= seqno`, if
/// any, with its seqno.
fn newest(entries: &[u64], key: u8, seqno: u64) -> Option<(u64, u8)> {
    entries
        .iter()
        .filter(|&&e| (e >> 8) as u8 == key && e >> 16 <= seqno)
        .map(|&e| (e >> 16, e as u8))
        .max()
}

/// The `state` lock's memtables: active and sealed (oldest first).
#[derive(Clone)]
struct View {
    mem: Arc<Memtable>,
    sealed: Vec<Arc<Memtable>>,
}

struct Engine {
    /// Stands for the `journal` lock: held while committing and sealing.
    journal: Mutex<()>,
    state: Mutex<View>,
    last_seqno: AtomicU64,
}

/// The batches the writer commits, one group each: every key of the
/// model is written by every batch, so a reader sees a whole batch or
/// none of it only if both keys show the same batch.
fn batches() -> Vec<WriteBatch> {
    [[b'1', b'2'], [b'3', b'4']]
        .iter()
        .map(|values| {
            let mut b = WriteBatch::new();
            for (key, value) in [b'a', b'b'].into_iter().zip(values) {
                b.put([key], [*value]).expect("small put");
            }
            b
        })
        .collect()
}

/// `commit_group` for a group of one batch, without the journal.
fn commit(engine: &Engine, batch: &WriteBatch) {
    let _journal = engine.journal.lock();
    let first = engine.last_seqno.load(Ordering::Acquire) + 1;
    let mem = engine.state.lock().mem.clone();
    let decoded = codec::decode(&batch.rep).expect("a WriteBatch decodes");
    let mut seqno = first;
    for op in decoded.ops {
        mem.insert(op.key[0], seqno, op.value[0]);
        seqno += 1;
    }
    engine.last_seqno.store(seqno - 1, Ordering::Release);
}

/// `seal_memtable` without the journal files.
fn seal(engine: &Engine) {
    let _journal = engine.journal.lock();
    let mut s = engine.state.lock();
    let old = std::mem::replace(&mut s.mem, Arc::new(Memtable::new()));
    s.sealed.push(old);
}

/// `view_and_seqno`, then a point read of each key: the active memtable
/// first, then the sealed ones, newest first. Returns the seqno read at
/// and, per key, the seqno of the value found (0 for none).
fn read(engine: &Engine) -> (u64, [u64; 2]) {
    let view = engine.state.lock().clone();
    let seqno = engine.last_seqno.load(Ordering::Acquire);
    let memtables: Vec<Vec<u64>> = std::iter::once(&view.mem)
        .chain(view.sealed.iter().rev())
        .map(|m| m.entries())
        .collect();
    let found = [b'a', b'b'].map(|key| {
        memtables
            .iter()
            .find_map(|m| newest(m, key, seqno))
            .map_or(0, |(s, value)| {
                // Batch i (from 0) wrote value b'1' + 2i + key index at
                // seqno 2i + key index + 1.
                assert_eq!(u64::from(value - b'0'), s, "value and seqno agree");
                s
            })
    });
    (seqno, found)
}

/// Checks one read against the history (batch i holds seqnos 2i+1 and
/// 2i+2): the reader sees the state after some whole batch, never part of
/// one, and nothing newer than its seqno. Returns true if it sees every
/// write up to its seqno (false is possible only when a seal moved the
/// newest writes out of the view: see `loom_seqno_publication_with_seal`).
fn check(seqno: u64, found: [u64; 2]) -> bool {
    assert!(
        seqno.is_multiple_of(2) && seqno <= 4,
        "published seqno {seqno} ends a batch"
    );
    let [a, b] = found;
    assert_eq!(
        b,
        if a == 0 { 0 } else { a + 1 },
        "a batch seen whole: {found:?}"
    );
    assert!(
        b <= seqno,
        "nothing newer than the seqno read at: {seqno} {found:?}"
    );
    b == seqno
}

fn engine() -> Arc<Engine> {
    Arc::new(Engine {
        journal: Mutex::new(()),
        state: Mutex::new(View {
            mem: Arc::new(Memtable::new()),
            sealed: Vec::new(),
        }),
        last_seqno: AtomicU64::new(0),
    })
}

/// A leader commits two batches while two readers read: a reader that
/// loads seqno `s` sees every write up to `s` and nothing of a later
/// batch.
#[test]
fn loom_seqno_publication() {
    crate::sync::model("seqno_publication", 3, || {
        let engine = engine();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let engine = engine.clone();
                loom::thread::spawn(move || {
                    let (seqno, found) = read(&engine);
                    assert!(check(seqno, found), "reader at {seqno} missed {found:?}");
                })
            })
            .collect();
        for batch in &batches() {
            commit(&engine, batch);
        }
        for r in readers {
            r.join().expect("reader thread");
        }
    });
}

/// Reads at a seqno newer than the view's memtables, counted over all
/// interleavings of `loom_seqno_publication_with_seal`.
static STALE_LABELS: AtomicUsize = AtomicUsize::new(0);

/// As above, with a memtable sealed concurrently. A reader still sees the
/// state after some whole batch, nothing newer than its seqno. But if the
/// seal and a commit fall between its view and its seqno load, the writes
/// between its view's memtables and its seqno are in a memtable the view
/// does not hold: it reads the older state, labelled with the newer seqno.
/// That is the consistency `view_and_seqno` promises (one consistent
/// state), not "every write up to the seqno"; the model counts how often
/// it happens.
#[test]
fn loom_seqno_publication_with_seal() {
    STALE_LABELS.store(0, std::sync::atomic::Ordering::Relaxed);
    crate::sync::model("seqno_publication_with_seal", 4, || {
        let engine = engine();
        let reader = {
            let engine = engine.clone();
            loom::thread::spawn(move || {
                let (seqno, found) = read(&engine);
                if !check(seqno, found) {
                    STALE_LABELS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        };
        let sealer = {
            let engine = engine.clone();
            loom::thread::spawn(move || seal(&engine))
        };
        for batch in &batches() {
            commit(&engine, batch);
        }
        reader.join().expect("reader thread");
        sealer.join().expect("sealer thread");
    });
    eprintln!(
        "seqno_publication_with_seal: {} interleavings read at a seqno newer than their view",
        STALE_LABELS.load(std::sync::atomic::Ordering::Relaxed)
    );
}
