//! The synchronization types of the parts of the engine that are checked
//! with loom: the group-commit queue (`write/queue.rs`) and table lifetime
//! (`version/`).
//!
//! In a normal build these are `parking_lot`'s `Mutex` and `Condvar` and
//! std's `Arc` and atomics, unchanged. Built with `--cfg loom` they are thin
//! wrappers around `loom::sync`, giving the same API, so the loom models run
//! the engine's own code and loom explores its thread interleavings and
//! weak-memory outcomes. The loom models run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=/tmp/tgt-loom \
//!     cargo test -p cairndb --lib --release loom
//! ```
//!
//! (release, because loom is slow in debug; each model bounds its
//! preemptions so the whole run takes well under two minutes.)
//!
//! Under loom there is no time: `Condvar::wait_for` waits for a
//! notification like `wait`. A loop that relies on the timeout to make
//! progress therefore deadlocks under loom, and loom reports it; that is
//! intended. Loom types work only inside `loom::model`, so a `--cfg loom`
//! build is for the loom models alone: the engine's other tests need a
//! normal build.

// The shim offers all of the API above, used by the engine yet or not, so
// that moving another part of the engine onto it is a change of imports.
#![allow(unused_imports, dead_code)]

#[cfg(not(loom))]
pub use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::sync::Arc;

#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(loom)]
pub use shim::{Condvar, Mutex, MutexGuard};

pub mod atomic {
    #[cfg(loom)]
    pub use loom::sync::atomic::{AtomicBool, AtomicU64};
    pub use std::sync::atomic::Ordering;
    #[cfg(not(loom))]
    pub use std::sync::atomic::{AtomicBool, AtomicU64};
}

/// `parking_lot`'s API on loom's types.
#[cfg(loom)]
mod shim {
    use std::ops::{Deref, DerefMut};
    use std::time::Duration;

    /// A mutex whose `lock` returns the guard directly.
    #[derive(Debug, Default)]
    pub struct Mutex<T> {
        inner: loom::sync::Mutex<T>,
    }

    /// Holds the loom guard in an `Option` so that `Condvar::wait`, which
    /// takes `&mut` guard as in `parking_lot`, can hand it to loom's `wait`
    /// (which takes it by value) and put it back. The option is `None` only
    /// inside `Condvar::wait`.
    pub struct MutexGuard<'a, T> {
        inner: Option<loom::sync::MutexGuard<'a, T>>,
    }

    /// A poisoned loom mutex means a model thread has already panicked, and
    /// loom reports that panic; failing again here adds nothing.
    const POISONED: &str = "loom mutex poisoned: a model thread panicked";
    const NO_GUARD: &str = "guard used while its condvar wait is unwinding";

    impl<T> Mutex<T> {
        pub fn new(value: T) -> Self {
            Mutex {
                inner: loom::sync::Mutex::new(value),
            }
        }

        pub fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard {
                inner: Some(self.inner.lock().expect(POISONED)),
            }
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.inner.as_deref().expect(NO_GUARD)
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.inner.as_deref_mut().expect(NO_GUARD)
        }
    }

    /// The outcome of `Condvar::wait_for`; under loom a wait never times
    /// out.
    #[derive(Debug, Clone, Copy)]
    pub struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub fn timed_out(self) -> bool {
            false
        }
    }

    #[derive(Debug, Default)]
    pub struct Condvar {
        inner: loom::sync::Condvar,
    }

    impl Condvar {
        pub fn new() -> Self {
            Condvar {
                inner: loom::sync::Condvar::new(),
            }
        }

        /// Releases the guard's mutex, waits for a notification and takes
        /// the mutex again. (Loom's condvar never wakes spuriously; the
        /// engine's wait loops re-check their condition anyway.)
        pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let held = guard.inner.take().expect(NO_GUARD);
            guard.inner = Some(self.inner.wait(held).expect(POISONED));
        }

        /// `wait`: loom has no time, so this never times out.
        pub fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, _: Duration) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult
        }

        pub fn notify_one(&self) {
            self.inner.notify_one();
        }

        pub fn notify_all(&self) {
            self.inner.notify_all();
        }
    }
}

/// Runs a loom model with at most `preemptions` preemptions per execution
/// and reports how many interleavings it explored. Loom stops with a panic on a failed check, a deadlock (a
/// lost wake-up leaves every thread blocked) or a leak.
#[cfg(all(test, loom))]
pub(crate) fn model(name: &str, preemptions: usize, f: impl Fn() + Send + Sync + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let start = std::time::Instant::now();
    let mut builder = loom::model::Builder::new();
    // `LOOM_MAX_PREEMPTIONS` overrides the bound, for a deeper run.
    let bound = *builder.preemption_bound.get_or_insert(preemptions);
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name}: {} interleavings, preemption bound {bound}, {:.1?}",
        runs.load(Ordering::Relaxed),
        start.elapsed()
    );
}
