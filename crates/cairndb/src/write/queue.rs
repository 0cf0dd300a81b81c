//! The group-commit queue: leader election, group take and result hand-out.
//!
//! Writers [`join`](GroupQueue::join) the queue with an item (for the engine,
//! a `Pending` batch). The writer whose item is first in the queue is the
//! leader. It takes a group of items from the front of the queue
//! ([`Leader::take_group`]), commits them by itself, and hands the result
//! to every member ([`Leader::finish`]); the other members only wait.
//!
//! Invariants, all under the queue lock:
//! - items leave the queue in the order they joined, and only in
//!   `finish`: the leader's item stays at the front while it commits, so
//!   no second leader can start;
//! - a group is a run of items from the front, the leader's first;
//! - each item's result is set exactly once, by the leader of its group,
//!   before that member is woken, and a member returns only with a result
//!   or as the next leader;
//! - after `finish` removes a group, the new front item (if any) is woken:
//!   it is the next leader. Each waiter has its own condvar, so a wake-up
//!   goes to exactly the writer it is meant for.
//!
//! Lock order: the queue lock, then a waiter's result slot (a leaf). The
//! leader holds no lock while it commits. Checked with loom (the models at
//! the bottom, see `crate::sync`).

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, Condvar, Mutex};
use std::collections::VecDeque;

/// How long a writer spins, yielding its core, for its result or its turn
/// before it sleeps on its condvar. A group takes tens of microseconds;
/// sleeping and being woken costs each member two context switches, which
/// on a small machine were a fifth of the write path's time, and on a
/// virtual machine a core left idle halts and is woken through the host.
/// With 8 writers on 2 cores (the contest's write phase, `cairn bench
/// --workloads contest --threads 8 --no-device`), 200 µs wrote 711–865
/// MB/s at 7.9–9.5 µs of CPU per put against 603–800 at 8.2–11.2 with
/// 50 µs, faster in each of seven alternated pairs; 1 ms wrote faster
/// still there (804–883) but made dbbench's 4-thread fillseq slower in
/// the runs beside it (78 and 84 MB/s against 99 and 113 with 50 µs).
/// Loom models do not spin (it changes timing, not the states the queue
/// can reach).
#[cfg(not(loom))]
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// A FIFO queue of items to commit in groups, with results of type `R`.
pub(crate) struct GroupQueue<T, R> {
    waiting: Mutex<VecDeque<Arc<Waiter<T, R>>>>,
}

struct Waiter<T, R> {
    item: T,
    /// Set by the leader that committed `item`, under the queue lock.
    result: Mutex<Option<R>>,
    /// Wakes this writer: once it has a result, or once it is first.
    cv: Condvar,
    /// Set with each notification of `cv`, for a writer that spins before
    /// it waits.
    woken: AtomicBool,
}

/// What [`GroupQueue::join`] returns.
pub(crate) enum Turn<'q, T, R> {
    /// Another writer committed the item in its group; this is the result.
    Done(R),
    /// The item is first in the queue: the caller is the leader and must
    /// call [`Leader::finish`].
    Lead(Leader<'q, T, R>),
}

/// The writer whose item is first in the queue. Until it finishes, no
/// other writer leads. Dropping it without `finish` (a panic while
/// committing) leaves its item at the front and stops the queue.
#[must_use = "a leader must `finish`, or no later writer is woken"]
pub(crate) struct Leader<'q, T, R> {
    queue: &'q GroupQueue<T, R>,
    me: Arc<Waiter<T, R>>,
    /// The members, front of the queue first; the leader alone until
    /// `take_group`.
    group: Vec<Arc<Waiter<T, R>>>,
}

impl<T, R> GroupQueue<T, R> {
    pub fn new() -> Self {
        GroupQueue {
            waiting: Mutex::new(VecDeque::new()),
        }
    }

    /// Queues `item` and waits until a leader has committed it (`Done`) or
    /// it is first in the queue (`Lead`).
    pub fn join(&self, item: T) -> Turn<'_, T, R> {
        self.join_observed(item, |_| {})
    }

    /// `join`, calling `on_queued` under the queue lock once the item is
    /// queued (tests record the queue order with it).
    fn join_observed(&self, item: T, on_queued: impl FnOnce(&T)) -> Turn<'_, T, R> {
        let me = Arc::new(Waiter {
            item,
            result: Mutex::new(None),
            cv: Condvar::new(),
            woken: AtomicBool::new(false),
        });
        let mut waiting = self.waiting.lock();
        waiting.push_back(me.clone());
        on_queued(&me.item);
        loop {
            // The result is checked first: a member of a group is woken
            // after `finish` removed it, and must not mistake a later
            // front for itself.
            if let Some(r) = me.result.lock().take() {
                return Turn::Done(r);
            }
            if waiting.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
                break;
            }
            // Spin first, without the lock, until a notification or the
            // time is up; then check again under the lock. Results and
            // turns are given under the lock, so the check sees any given
            // meanwhile, and a later one is notified while this writer
            // waits on its condvar: no wake-up is lost. `woken` only ends
            // the spin early.
            #[cfg(not(loom))]
            {
                me.woken.store(false, Ordering::Relaxed);
                drop(waiting);
                let start = std::time::Instant::now();
                while !me.woken.load(Ordering::Acquire) && start.elapsed() < SPIN {
                    std::thread::yield_now();
                }
                waiting = self.waiting.lock();
                if me.result.lock().is_some()
                    || waiting.front().is_some_and(|f| Arc::ptr_eq(f, &me))
                {
                    continue;
                }
            }
            me.cv.wait(&mut waiting);
        }
        drop(waiting);
        Turn::Lead(Leader {
            queue: self,
            group: vec![me.clone()],
            me,
        })
    }
}

impl<T: Clone, R> Leader<'_, T, R> {
    /// Takes the group to commit: items from the front of the queue while
    /// their total `bytes_of` stays within `bytes_max`. The leader's own
    /// item (the front) is always taken, even if larger. The items stay
    /// queued, so later writers keep waiting, until `finish`. At most once.
    pub fn take_group(&mut self, bytes_of: impl Fn(&T) -> usize, bytes_max: usize) -> Vec<T> {
        assert_eq!(self.group.len(), 1, "a leader takes one group");
        let waiting = self.queue.waiting.lock();
        let mut bytes = 0usize;
        self.group = waiting
            .iter()
            .take_while(|w| {
                bytes += bytes_of(&w.item);
                bytes <= bytes_max || Arc::ptr_eq(w, &self.me)
            })
            .cloned()
            .collect();
        drop(waiting);
        assert!(Arc::ptr_eq(&self.group[0], &self.me), "the leader is first");
        self.group.iter().map(|w| w.item.clone()).collect()
    }
}

impl<T, R> Leader<'_, T, R> {
    /// Removes the group from the queue, gives every other member a copy
    /// (`share`) of `result` and wakes it, wakes the new front (the next
    /// leader), and returns `result` for the leader itself.
    pub fn finish(self, result: R, share: impl Fn(&R) -> R) -> R {
        let mut waiting = self.queue.waiting.lock();
        for member in &self.group {
            let front = waiting.pop_front();
            assert!(
                front.is_some_and(|f| Arc::ptr_eq(&f, member)),
                "a group is the front of the queue"
            );
            if !Arc::ptr_eq(member, &self.me) {
                *member.result.lock() = Some(share(&result));
                member.woken.store(true, Ordering::Release);
                member.cv.notify_one();
            }
        }
        if let Some(next) = waiting.front() {
            next.woken.store(true, Ordering::Release);
            next.cv.notify_one();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::{GroupQueue, Turn};
    use crate::sync::{Arc, Mutex};

    /// A writer's item: its id and its size.
    #[derive(Clone, Copy, Debug)]
    struct Item {
        id: usize,
        bytes: usize,
    }

    /// What a run of writers left behind.
    struct History {
        /// Item ids in the order they were queued.
        queued: Mutex<Vec<usize>>,
        /// Each committed group's item ids, in commit order.
        groups: Mutex<Vec<Vec<usize>>>,
    }

    /// One writer: joins with `item`; as leader, commits a group by
    /// appending it to the history, or (if `item.id == fail`, standing for
    /// a failed `make_room`) finishes alone without taking a group. Item
    /// `fail` fails only if it leads: in another leader's group it is
    /// committed like the rest. Returns whether it led and the result it
    /// got: the index of its group in `groups`, or `None` for the failed
    /// leader.
    fn writer(
        queue: &GroupQueue<Item, Option<usize>>,
        history: &History,
        item: Item,
        bytes_max: usize,
        fail: Option<usize>,
    ) -> (bool, Option<usize>) {
        let turn = queue.join_observed(item, |it| history.queued.lock().push(it.id));
        match turn {
            Turn::Done(r) => (false, r),
            Turn::Lead(leader) if fail == Some(item.id) => (true, leader.finish(None, |r| *r)),
            Turn::Lead(mut leader) => {
                let group = leader.take_group(|it| it.bytes, bytes_max);
                let index = {
                    let mut groups = history.groups.lock();
                    groups.push(group.iter().map(|it| it.id).collect());
                    groups.len() - 1
                };
                (true, leader.finish(Some(index), |r| *r))
            }
        }
    }

    /// Checks a finished run: every item committed exactly once, groups
    /// are contiguous runs of the queue order within the byte limit, each
    /// led by its first item, and each writer's result names its group.
    fn check(
        history: &History,
        items: &[Item],
        outcomes: &[(bool, Option<usize>)],
        bytes_max: usize,
        fail: Option<usize>,
    ) {
        let queued = history.queued.lock().clone();
        let groups = history.groups.lock().clone();
        let failed = fail.filter(|&id| outcomes[id] == (true, None));
        let expected: Vec<usize> = queued
            .iter()
            .copied()
            .filter(|&id| Some(id) != failed)
            .collect();
        let committed: Vec<usize> = groups.iter().flatten().copied().collect();
        assert_eq!(
            committed, expected,
            "groups are the queue order, each item once"
        );
        for g in &groups {
            assert!(!g.is_empty());
            let bytes: usize = g.iter().map(|&id| items[id].bytes).sum();
            assert!(g.len() == 1 || bytes <= bytes_max, "group {g:?} too large");
        }
        for (item, &(led, result)) in items.iter().zip(outcomes) {
            if Some(item.id) == failed {
                continue;
            }
            let g = result.expect("a committed item gets its group's result");
            let group = &groups[g];
            assert!(
                group.contains(&item.id),
                "item {} got group {group:?}",
                item.id
            );
            assert_eq!(led, group[0] == item.id, "the first member leads");
        }
    }

    /// Runs `items.len()` writers on threads (std or loom) and checks them.
    fn run(items: &[Item], bytes_max: usize, fail: Option<usize>) {
        #[cfg(loom)]
        use loom::thread;
        #[cfg(not(loom))]
        use std::thread;

        let queue = Arc::new(GroupQueue::new());
        let history = Arc::new(History {
            queued: Mutex::new(Vec::new()),
            groups: Mutex::new(Vec::new()),
        });
        let handles: Vec<_> = items
            .iter()
            .map(|&item| {
                let (queue, history) = (queue.clone(), history.clone());
                thread::spawn(move || writer(&queue, &history, item, bytes_max, fail))
            })
            .collect();
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect();
        check(&history, items, &outcomes, bytes_max, fail);
    }

    fn items(sizes: &[usize]) -> Vec<Item> {
        sizes
            .iter()
            .enumerate()
            .map(|(id, &bytes)| Item { id, bytes })
            .collect()
    }

    #[cfg(not(loom))]
    #[test]
    fn writers_on_threads() {
        // Sizes so that some groups hit the limit and one item exceeds it.
        let items = items(&[3, 2, 2, 9, 1, 2, 2, 3]);
        for round in 0..200 {
            let fail = (round % 3 == 0).then_some(round % items.len());
            run(&items, 4, fail);
        }
    }

    /// Three writers, groups of at most two: every writer gets exactly one
    /// result, each item is committed once, groups are FIFO runs, and no
    /// wake-up is lost (loom reports a deadlock otherwise).
    #[cfg(loom)]
    #[test]
    fn loom_group_commit() {
        crate::sync::model("group_commit", 4, || run(&items(&[2, 2, 2]), 4, None));
    }

    /// The leader of item 0 fails before taking a group (as when
    /// `make_room` fails): it finishes alone, and the next front must
    /// still be woken to lead the rest.
    #[cfg(loom)]
    #[test]
    fn loom_group_commit_failed_leader() {
        crate::sync::model("group_commit_failed_leader", 4, || {
            run(&items(&[2, 2, 2]), 4, Some(0))
        });
    }
}
