//! A linearizability checker for histories of one register (one key of
//! the key-value service): writes of a value and reads that saw a value or
//! nothing, each with the time it was called and the time it returned.
//!
//! Why our own: the well-kept Rust tester is stateright's
//! `LinearizabilityTester` (0.31). It takes a history as events fed one by
//! one in real-time order (`on_invoke`, `on_return` per thread), so our
//! timestamped records would be sorted and replayed into it, and it
//! brings a whole model checker into the dev-dependencies for one
//! function. A register's check is short enough to keep here, documented
//! and tested on hand-made histories (below).
//!
//! # The check
//!
//! A history is linearizable if its operations can be put in one order
//! that (1) keeps every operation that returned before another was called
//! ahead of it (real time), and (2) is a legal run of a register: each
//! read sees the value of the latest write before it, or the initial value
//! if none. The search is Wing and Gong's: repeatedly pick as next an
//! operation no other pending operation returned before, apply it to the
//! register, backtrack on a read that disagrees. Lowe's memoization keeps
//! it small: a (set of operations placed, register value) configuration
//! seen before is not searched again.
//!
//! A write whose call failed (`ret: None`: the answer was lost) may or may
//! not have taken effect, at any time after its call: the search may place
//! it anywhere after its call, or never. A read whose call failed tells
//! nothing; leave it out.
//!
//! Keys are independent: linearizability is local (Herlihy and Wing), so
//! a history of many keys is linearizable if the history of each key is;
//! check each key on its own.
//!
//! The search may take time exponential in the concurrency (not the
//! length) of the history; it stops after `STEPS_MAX` steps and answers
//! [`Verdict::Unknown`].

use std::collections::{HashMap, HashSet};

/// Most search steps of one check.
pub const STEPS_MAX: u64 = 10_000_000;

/// What an operation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Wrote the value.
    Write(String),
    /// Read the value (`None`: the register held none).
    Read(Option<String>),
}

/// One operation of a history. Times are on one clock, in any unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: Kind,
    /// When it was called.
    pub call: u64,
    /// When it returned; `None` if its outcome is unknown (only writes).
    pub ret: Option<u64>,
}

/// The answer of a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// The search gave up after `STEPS_MAX` steps.
    Unknown,
}

/// Checks a history of one register that held `initial` at first.
///
/// Panics if an operation returned before it was called, or a read has no
/// return time: both are the caller's mistakes, not the system's.
pub fn check_register(initial: Option<&str>, ops: &[Op]) -> Verdict {
    for op in ops {
        if let Some(ret) = op.ret {
            assert!(
                op.call <= ret,
                "an operation returned before its call: {op:?}"
            );
        }
        assert!(
            op.ret.is_some() || matches!(op.kind, Kind::Write(_)),
            "a read without a return time tells nothing; leave it out: {op:?}"
        );
    }
    let mut ops: Vec<&Op> = ops.iter().collect();
    ops.sort_by_key(|op| op.call);

    // Values as small numbers, so that a configuration is cheap to store.
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut id = |v: &str| -> u32 {
        let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        *ids.entry(v.to_owned()).or_insert(next)
    };
    let initial = initial.map(&mut id);
    let kinds: Vec<Step> = ops
        .iter()
        .map(|op| match &op.kind {
            Kind::Write(v) => Step::Write(id(v)),
            Kind::Read(v) => Step::Read(v.as_deref().map(&mut id)),
        })
        .collect();
    let call: Vec<u64> = ops.iter().map(|op| op.call).collect();
    let ret: Vec<u64> = ops.iter().map(|op| op.ret.unwrap_or(u64::MAX)).collect();
    let n = ops.len();
    let mut certain_left = ops.iter().filter(|op| op.ret.is_some()).count();

    let mut placed = Bits::new(n);
    let mut state = initial;
    let mut seen: HashSet<(Bits, Option<u32>)> = HashSet::new();
    // The operations placed, in order, with the register value before each.
    let mut stack: Vec<(usize, Option<u32>)> = Vec::new();
    let mut cursor = 0;
    let mut steps = 0u64;
    loop {
        if certain_left == 0 {
            return Verdict::Linearizable;
        }
        steps += 1;
        if steps > STEPS_MAX {
            return Verdict::Unknown;
        }
        // An operation may go next only if no pending one returned before
        // its call.
        let first_ret = (0..n)
            .filter(|&i| !placed.get(i))
            .map(|i| ret[i])
            .min()
            .unwrap_or(u64::MAX);
        let mut next = None;
        for i in cursor..n {
            if call[i] > first_ret {
                break; // sorted by call: no later one may go next either
            }
            if placed.get(i) {
                continue;
            }
            let after = match kinds[i] {
                Step::Write(v) => Some(v),
                Step::Read(v) if v == state => state,
                Step::Read(_) => continue,
            };
            placed.set(i, true);
            if seen.insert((placed.clone(), after)) {
                next = Some((i, after));
                break;
            }
            placed.set(i, false);
        }
        match next {
            Some((i, after)) => {
                stack.push((i, state));
                state = after;
                cursor = 0;
                if ret[i] != u64::MAX {
                    certain_left -= 1;
                }
            }
            None => {
                let Some((i, before)) = stack.pop() else {
                    return Verdict::NotLinearizable;
                };
                placed.set(i, false);
                state = before;
                cursor = i + 1;
                if ret[i] != u64::MAX {
                    certain_left += 1;
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Write(u32),
    Read(Option<u32>),
}

/// A fixed-size set of operation indexes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }

    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize, on: bool) {
        if on {
            self.0[i / 64] |= 1 << (i % 64);
        } else {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: &str, call: u64, ret: u64) -> Op {
        Op {
            kind: Kind::Write(v.into()),
            call,
            ret: Some(ret),
        }
    }

    fn r(v: Option<&str>, call: u64, ret: u64) -> Op {
        Op {
            kind: Kind::Read(v.map(Into::into)),
            call,
            ret: Some(ret),
        }
    }

    #[test]
    fn a_sequential_history_is_linearizable() {
        let h = [
            r(None, 0, 1),
            w("a", 2, 3),
            r(Some("a"), 4, 5),
            w("b", 6, 7),
            r(Some("b"), 8, 9),
        ];
        assert_eq!(check_register(None, &h), Verdict::Linearizable);
    }

    #[test]
    fn a_read_concurrent_with_a_write_may_see_either() {
        let h = [
            w("a", 0, 1),
            w("b", 2, 10),
            r(Some("a"), 3, 4),
            r(Some("b"), 5, 6),
        ];
        assert_eq!(check_register(None, &h), Verdict::Linearizable);
        let h = [w("a", 0, 1), w("b", 2, 10), r(Some("b"), 3, 4)];
        assert_eq!(check_register(None, &h), Verdict::Linearizable);
    }

    /// The hand-made non-linearizable histories: each is a way a
    /// replicated register goes wrong.
    #[test]
    fn stale_reads_are_caught() {
        // A read after a write returned sees the older value (a stale
        // follower read, or a deposed leader answering).
        let h = [w("a", 0, 1), w("b", 2, 3), r(Some("a"), 4, 5)];
        assert_eq!(check_register(None, &h), Verdict::NotLinearizable);
        // A value seen, then the older one seen again: a new-old inversion
        // between two readers, both concurrent with the write.
        let h = [
            w("a", 0, 1),
            w("b", 2, 20),
            r(Some("b"), 3, 4),
            r(Some("a"), 5, 6),
        ];
        assert_eq!(check_register(None, &h), Verdict::NotLinearizable);
        // An acknowledged write lost: read back as missing.
        let h = [w("a", 0, 1), r(None, 2, 3)];
        assert_eq!(check_register(None, &h), Verdict::NotLinearizable);
    }

    #[test]
    fn a_value_never_written_is_caught() {
        let h = [w("a", 0, 1), r(Some("z"), 2, 3)];
        assert_eq!(check_register(None, &h), Verdict::NotLinearizable);
    }

    #[test]
    fn a_write_of_unknown_outcome_may_or_may_not_take_effect() {
        let lost = Op {
            kind: Kind::Write("b".into()),
            call: 2,
            ret: None,
        };
        let seen = [w("a", 0, 1), lost.clone(), r(Some("b"), 10, 11)];
        assert_eq!(check_register(None, &seen), Verdict::Linearizable);
        let unseen = [w("a", 0, 1), lost.clone(), r(Some("a"), 10, 11)];
        assert_eq!(check_register(None, &unseen), Verdict::Linearizable);
        // But not before its call.
        let early = [w("a", 0, 1), r(Some("b"), 1, 1), lost];
        assert_eq!(check_register(None, &early), Verdict::NotLinearizable);
    }

    #[test]
    fn many_concurrent_writers_check_quickly() {
        // 8 writers and readers overlapping in waves of 8, 400 operations.
        let mut h = Vec::new();
        for wave in 0..50u64 {
            let t = wave * 100;
            for j in 0..4u64 {
                h.push(w(&format!("{wave}-{j}"), t + j, t + 50 + j));
            }
            for j in 0..4u64 {
                h.push(r(
                    Some(&format!("{wave}-{}", 3 - j)),
                    t + 60 + j,
                    t + 70 + j,
                ));
            }
        }
        // The reads of a wave all follow its writes, so they must agree:
        // they do not (each sees another), and the checker must say so fast.
        assert_eq!(check_register(None, &h), Verdict::NotLinearizable);
        h.retain(|op| !matches!(&op.kind, Kind::Read(Some(v)) if !v.ends_with("-3")));
        assert_eq!(check_register(None, &h), Verdict::Linearizable);
    }
}
