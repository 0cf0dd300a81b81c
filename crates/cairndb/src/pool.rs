//! Worker threads of one database, taking jobs from one queue (a
//! crossbeam channel): device reads of scans (`ReadView::load_start` hands
//! them the runs the page cache does not hold, so a scan keeps many reads
//! in flight) and of value GC, and the memtable inserts of a synced group
//! while its leader waits for the journal's fdatasync. A thread is started
//! when a job finds every thread busy, up to `WORKERS_MAX`, so a database
//! that needs none starts none. The threads end when the pool is dropped
//! (with the database and its last view): the queue's only sender goes,
//! and their `recv` fails.

use crossbeam_channel::{Receiver, Sender};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most worker threads of one database.
pub const WORKERS_MAX: usize = 32;
/// Stack of a worker thread: jobs keep their data on the heap.
const WORKER_STACK: usize = 256 << 10;

type Job = Box<dyn FnOnce() + Send>;

/// The worker threads of one database.
pub struct WorkerPool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Threads started.
    started: AtomicUsize,
    /// Jobs queued or running.
    pending: Arc<AtomicUsize>,
}

/// Counts a job done when dropped, also if the job panicked.
struct Done(Arc<AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WorkerPool {
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        WorkerPool {
            tx,
            rx,
            started: AtomicUsize::new(0),
            pending: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Runs `job` on a worker thread, or here if no thread can be started.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let pending = self.pending.fetch_add(1, Ordering::AcqRel) + 1;
        let done = Done(self.pending.clone());
        if pending > self.started.load(Ordering::Acquire) {
            self.grow();
        }
        if self.started.load(Ordering::Acquire) == 0 {
            job();
            drop(done);
            return;
        }
        let job: Job = Box::new(move || {
            let _done = done;
            job();
        });
        if let Err(back) = self.tx.send(job) {
            // Unreachable while `self` holds the receiver; run it here.
            (back.0)();
        }
    }

    /// Starts one more thread if fewer than `WORKERS_MAX` run.
    fn grow(&self) {
        let mut n = self.started.load(Ordering::Acquire);
        while n < WORKERS_MAX {
            match self
                .started
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    let rx = self.rx.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("cairndb-work-{n}"))
                        .stack_size(WORKER_STACK)
                        .spawn(move || {
                            while let Ok(job) = rx.recv() {
                                // A job that panicked has dropped its
                                // result sender, which its caller sees;
                                // the thread goes on serving.
                                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                            }
                        });
                    if spawned.is_err() {
                        self.started.fetch_sub(1, Ordering::AcqRel);
                    }
                    return;
                }
                Err(now) => n = now,
            }
        }
    }
}

impl Default for WorkerPool {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jobs from many callers all run, on at most `WORKERS_MAX` threads,
    /// and a job's panic neither loses the others nor the count.
    #[test]
    fn jobs_run_and_threads_are_bounded() {
        let pool = WorkerPool::new();
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..200usize {
            let tx = tx.clone();
            pool.run(move || {
                std::thread::sleep(std::time::Duration::from_millis(1));
                if i == 7 {
                    panic!("a job that panics");
                }
                let _ = tx.send(i);
            });
        }
        drop(tx);
        let mut got: Vec<usize> = rx.iter().collect();
        got.sort_unstable();
        let want: Vec<usize> = (0..200).filter(|&i| i != 7).collect();
        assert_eq!(got, want);
        let started = pool.started.load(Ordering::Acquire);
        assert!((1..=WORKERS_MAX).contains(&started), "{started} threads");
        // A job's guard drops just after its sender: wait for the count.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pool.pending.load(Ordering::Acquire) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "jobs never counted done"
            );
            std::thread::yield_now();
        }
        // Every thread survived the panic: a new round runs on them.
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..64usize {
            let tx = tx.clone();
            pool.run(move || {
                let _ = tx.send(i);
            });
        }
        drop(tx);
        assert_eq!(rx.iter().count(), 64);
    }
}
