//! Windows of entries shared by long scans that stand at the same point of
//! the same view.
//!
//! Several long scans of one key range at one snapshot (the contest's
//! range phase: eight threads iterating everything, twice) each merged
//! the index, decoded every pointer, looked up every value's chunk and
//! checked every value themselves: per entry and scanner, work the others
//! had just done, which kept the range phase bound by the CPU with the
//! device mostly idle. A long scan's window (`iter::WINDOW_MAX` entries
//! with their values loaded) depends only on where it starts and on what
//! the scan sees; so the first scan to reach a point builds the window
//! and publishes it here, and a scan reaching the same point later takes
//! it, yields its entries out of it (`Iter::next_ref` lends them in
//! place), and moves its own merge past it. A scan arriving while the window is being built waits
//! for it rather than build it again; but once the builder has taken the
//! window's entries from its merge and is loading their values, it has
//! said where the window ends (`Lead::cut`), and the scan arriving builds
//! the window after that one first (`Found::Help`), so two scans build at
//! once: one scan building every window held the contest's range phase
//! to the pace of one thread.
//!
//! Two scans see the same entries from a point on when they read the same
//! `ViewParts` (one instant's memtables and version) at the same
//! snapshot in the same keyspace up to the same upper bound: entries
//! written later carry higher sequence numbers, invisible to both. That
//! is the key ([`WindowKey`]), with the last key the scan has passed. A
//! slot holds a `Weak` of its view, so no other view is given the same
//! address while the slot lives.
//!
//! At most [`WINDOWS_MAX`] windows are kept, the oldest dropped first: a
//! scan lagging further behind builds its own (which those behind it may
//! take). The values of kept windows hold their chunks, so the windows
//! are dropped as soon as no long scan runs (`ChunkShare::leave`).

use super::chunk::Value;
use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;
use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Windows kept: with `WINDOW_MAX` = 256 entries each, a scan up to 8,192
/// entries behind the one ahead still finds its windows; the contest's
/// eight scanners stay within that, and 32 windows of 4 KiB values hold
/// 32 MiB of values, in chunks the scans hold anyway.
pub const WINDOWS_MAX: usize = 32;

/// Longest wait for a window another scan is building before building it
/// again: a build ends once its values are read, so this is only a bound
/// for a device that stalls.
const WAIT_MAX: Duration = Duration::from_secs(2);

/// A user key as iterators hold it (`iter::UserKey`).
pub type UserKey = SmallVec<[u8; 32]>;

/// A long scan's window: its entries in key order, values loaded and
/// checked, and whether the scan's range ends after them.
pub struct SharedWindow {
    pub entries: Vec<(UserKey, Value)>,
    pub ended: bool,
}

/// Where a window starts, and what the scan sees (see the module
/// comment).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WindowKey {
    /// `Arc::as_ptr` of the scan's `ViewParts`.
    view: usize,
    keyspace: u32,
    snapshot: u64,
    upper: Bound<Vec<u8>>,
    /// The window holds the entries after this user key.
    after: Vec<u8>,
}

impl WindowKey {
    pub fn new<V>(
        view: &Arc<V>,
        keyspace: u32,
        snapshot: u64,
        upper: &Bound<Vec<u8>>,
        after: &[u8],
    ) -> WindowKey {
        WindowKey {
            view: Arc::as_ptr(view) as *const () as usize,
            keyspace,
            snapshot,
            upper: upper.clone(),
            after: after.to_vec(),
        }
    }

    /// The same scan's key for the window after the one ending with
    /// `last`.
    pub fn next(&self, last: &[u8]) -> WindowKey {
        WindowKey {
            after: last.to_vec(),
            ..self.clone()
        }
    }
}

struct Slot {
    /// Keeps the view's address from being reused while the slot lives.
    _view: Weak<dyn Any + Send + Sync>,
    /// `None` while a scan builds it.
    window: Option<Arc<SharedWindow>>,
    /// While it is built: its last key, once its builder knows it.
    end: Option<Vec<u8>>,
}

#[derive(Default)]
struct Windows {
    slots: HashMap<WindowKey, Slot>,
    /// Keys of published windows, oldest first.
    order: VecDeque<WindowKey>,
}

/// The windows long scans share (see the module comment).
#[derive(Default)]
pub struct WindowShare {
    map: Mutex<Windows>,
    /// Signalled when a window is published or its build given up.
    built: Condvar,
    /// Windows published, and windows taken by a scan that did not build
    /// them (stats).
    published: AtomicU64,
    taken: AtomicU64,
}

/// What [`WindowShare::find`] found for a scan.
pub enum Found<'a> {
    /// The window, built by another scan.
    Ready(Arc<SharedWindow>),
    /// No such window: the caller builds it, and publishes it through
    /// this (dropped unpublished, the slot is given up).
    Lead(Lead<'a>),
    /// Its build took too long: the caller builds its own, unshared.
    Alone,
    /// It is being built and ends after this key: the caller may build
    /// the window after it (`WindowShare::lead`) before asking again
    /// (`find` with `help` false).
    Help(Vec<u8>),
}

/// The right to publish one window (see [`Found::Lead`]).
pub struct Lead<'a> {
    share: &'a WindowShare,
    key: Option<WindowKey>,
}

impl WindowShare {
    /// The window at `key`: published, or waited for while another scan
    /// builds it (unless `help` and its end is known: `Found::Help`), or
    /// left to the caller to build.
    pub fn find<V: Any + Send + Sync>(
        &self,
        key: WindowKey,
        view: &Arc<V>,
        help: bool,
    ) -> Found<'_> {
        let mut map = self.map.lock();
        let deadline = std::time::Instant::now() + WAIT_MAX;
        loop {
            match map.slots.get(&key) {
                Some(Slot {
                    window: Some(w), ..
                }) => {
                    self.taken.fetch_add(1, Ordering::Relaxed);
                    return Found::Ready(w.clone());
                }
                Some(Slot {
                    window: None,
                    end: Some(end),
                    ..
                }) if help => return Found::Help(end.clone()),
                Some(Slot { window: None, .. }) => {
                    if self.built.wait_until(&mut map, deadline).timed_out() {
                        return Found::Alone;
                    }
                }
                None => return Found::Lead(self.insert(&mut map, key, view)),
            }
        }
    }

    /// The right to build the window at `key`, if no scan has built it or
    /// is building it.
    pub fn lead<V: Any + Send + Sync>(&self, key: WindowKey, view: &Arc<V>) -> Option<Lead<'_>> {
        let mut map = self.map.lock();
        if map.slots.contains_key(&key) {
            return None;
        }
        Some(self.insert(&mut map, key, view))
    }

    /// A slot for the window at `key`, being built by the caller.
    fn insert<V: Any + Send + Sync>(
        &self,
        map: &mut Windows,
        key: WindowKey,
        view: &Arc<V>,
    ) -> Lead<'_> {
        let anchor: Weak<dyn Any + Send + Sync> = Arc::downgrade(view) as Weak<V>;
        let slot = Slot {
            _view: anchor,
            window: None,
            end: None,
        };
        let before = map.slots.insert(key.clone(), slot);
        assert!(before.is_none(), "a window slot was inserted twice");
        Lead {
            share: self,
            key: Some(key),
        }
    }

    /// Drops every window (no long scan runs: nothing will take them).
    pub fn clear(&self) {
        let mut map = self.map.lock();
        map.slots.retain(|_, s| s.window.is_none());
        map.order.clear();
    }

    /// Windows published since open, and windows taken by scans that did
    /// not build them.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.published.load(Ordering::Relaxed),
            self.taken.load(Ordering::Relaxed),
        )
    }

    /// Windows kept now (tests).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.map.lock().order.len()
    }
}

impl Lead<'_> {
    /// Says that the window ends with `last` (its entries are taken, its
    /// values not loaded yet), so scans waiting for it can build the next.
    pub fn cut(&self, last: &[u8]) {
        let key = self.key.as_ref().expect("a lead cuts before it publishes");
        let mut map = self.share.map.lock();
        let slot = map
            .slots
            .get_mut(key)
            .expect("a window being built left the share");
        assert!(slot.window.is_none(), "a published window was cut");
        slot.end = Some(last.to_vec());
        drop(map);
        self.share.built.notify_all();
    }

    /// Makes `window` the one at this lead's key, for the scans that come
    /// there; the oldest window goes past `WINDOWS_MAX`.
    pub fn publish(mut self, window: Arc<SharedWindow>) {
        let key = self.key.take().expect("a lead publishes once");
        let share = self.share;
        let mut map = share.map.lock();
        match map.slots.get_mut(&key) {
            Some(slot) => {
                assert!(slot.window.is_none(), "a window was published twice");
                slot.window = Some(window);
            }
            // `clear` does not drop slots being built.
            None => unreachable!("a window being built left the share"),
        }
        map.order.push_back(key);
        while map.order.len() > WINDOWS_MAX {
            let oldest = map.order.pop_front().expect("order is not empty");
            let gone = map.slots.remove(&oldest);
            assert!(
                gone.is_some_and(|s| s.window.is_some()),
                "a kept window's slot was missing or unbuilt"
            );
        }
        drop(map);
        share.published.fetch_add(1, Ordering::Relaxed);
        share.built.notify_all();
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else {
            return;
        };
        let mut map = self.share.map.lock();
        let gone = map.slots.remove(&key);
        assert!(
            gone.is_some_and(|s| s.window.is_none()),
            "an unpublished lead's slot was missing or built"
        );
        drop(map);
        self.share.built.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(n: u8) -> Arc<SharedWindow> {
        Arc::new(SharedWindow {
            entries: vec![(UserKey::from_slice(&[n]), Value::Owned(vec![n]))],
            ended: false,
        })
    }

    fn key(view: &Arc<u8>, after: &[u8]) -> WindowKey {
        WindowKey::new(view, 0, 7, &Bound::Unbounded, after)
    }

    #[test]
    fn a_published_window_is_found_and_an_abandoned_one_is_built_again() {
        let view = Arc::new(0u8);
        let share = WindowShare::default();
        let Found::Lead(lead) = share.find(key(&view, b"a"), &view, false) else {
            panic!("an empty share has no window");
        };
        lead.publish(window(1));
        match share.find(key(&view, b"a"), &view, false) {
            Found::Ready(w) => assert_eq!(w.entries[0].0.as_slice(), &[1]),
            _ => panic!("the published window was not found"),
        }
        // Another snapshot, another window.
        let other = WindowKey::new(&view, 0, 8, &Bound::Unbounded, b"a");
        assert!(matches!(share.find(other, &view, false), Found::Lead(_)));
        // Dropped unpublished: the next scan leads.
        assert!(matches!(
            share.find(key(&view, b"b"), &view, false),
            Found::Lead(_)
        ));
        assert!(matches!(
            share.find(key(&view, b"b"), &view, false),
            Found::Lead(_)
        ));
        assert_eq!(share.counts(), (1, 1));
    }

    #[test]
    fn a_scan_waits_for_the_window_being_built() {
        let view = Arc::new(0u8);
        let share = WindowShare::default();
        let Found::Lead(lead) = share.find(key(&view, b"a"), &view, false) else {
            panic!("an empty share has no window");
        };
        std::thread::scope(|s| {
            let waiter = s.spawn(|| match share.find(key(&view, b"a"), &view, false) {
                Found::Ready(w) => w.entries[0].0.to_vec(),
                _ => panic!("the waiter did not get the window built"),
            });
            std::thread::sleep(Duration::from_millis(50));
            lead.publish(window(3));
            assert_eq!(waiter.join().expect("the waiter panicked"), vec![3]);
        });
    }

    #[test]
    fn a_scan_waiting_for_a_cut_window_may_build_the_next() {
        let view = Arc::new(0u8);
        let share = WindowShare::default();
        let Found::Lead(lead) = share.find(key(&view, b"a"), &view, true) else {
            panic!("an empty share has no window");
        };
        lead.cut(b"m");
        let Found::Help(end) = share.find(key(&view, b"a"), &view, true) else {
            panic!("a cut window's end was not offered");
        };
        assert_eq!(end, b"m");
        let next = key(&view, b"a").next(&end);
        let helper = share
            .lead(next.clone(), &view)
            .expect("nobody builds the next");
        assert!(
            share.lead(next.clone(), &view).is_none(),
            "one builder each"
        );
        helper.publish(window(2));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| match share.find(key(&view, b"a"), &view, false) {
                Found::Ready(w) => w.entries[0].0.to_vec(),
                _ => panic!("the waiter did not get the window built"),
            });
            std::thread::sleep(Duration::from_millis(50));
            lead.publish(window(1));
            assert_eq!(waiter.join().expect("the waiter panicked"), vec![1]);
        });
        assert!(matches!(share.find(next, &view, true), Found::Ready(_)));
    }

    #[test]
    fn the_oldest_windows_go_and_clear_drops_the_rest() {
        let view = Arc::new(0u8);
        let share = WindowShare::default();
        for i in 0..WINDOWS_MAX + 3 {
            let Found::Lead(lead) = share.find(key(&view, &i.to_be_bytes()), &view, false) else {
                panic!("window {i} was there before it was built");
            };
            lead.publish(window(i as u8));
        }
        assert_eq!(share.kept(), WINDOWS_MAX);
        assert!(matches!(
            share.find(key(&view, &0usize.to_be_bytes()), &view, false),
            Found::Lead(_)
        ));
        let last = (WINDOWS_MAX + 2).to_be_bytes();
        assert!(matches!(
            share.find(key(&view, &last), &view, false),
            Found::Ready(_)
        ));
        share.clear();
        assert_eq!(share.kept(), 0);
        assert!(matches!(
            share.find(key(&view, &last), &view, false),
            Found::Lead(_)
        ));
    }
}
