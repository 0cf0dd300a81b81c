//! Picking what to compact: level scores, the level-0 triggers, the
//! write pressure writers pace on, and the tables of the next compaction.

use crate::engine::Inner;
use crate::format::key::{self};
use crate::limits::LEVELS;
use crate::options::Options;
use crate::sync;
use crate::version::{TableFile, Version};
use std::sync::atomic::Ordering;

/// Tables chosen for one compaction.
pub(super) struct Compaction {
    /// The keyspace of every table in it.
    pub(super) keyspace: u32,
    pub(super) level: usize,
    pub(super) inputs: Vec<sync::Arc<TableFile>>,
    /// Overlapping tables of `level + 1`.
    pub(super) below: Vec<sync::Arc<TableFile>>,
    /// Put the outputs' data blocks into the block cache as they are
    /// written: reads paid for the merge and go on over its outputs,
    /// which would otherwise start cold.
    pub(super) warm: bool,
}

pub(super) fn level_target(opts: &Options, level: usize) -> u64 {
    let mut t = opts.level1_bytes;
    for _ in 1..level {
        t = t.saturating_mul(opts.level_multiplier);
    }
    t
}

/// A level-0 merge that drops fewer entries than this share of those it
/// read from level 0 finds the keys new: the next waits for
/// `l0_compaction_trigger_new_keys` tables.
pub(super) const L0_DROPS_MIN: f64 = 0.125;

/// Level-0 table counts that start a compaction, slow writers and stop
/// them: the options', or while level-0 merges meet only new keys
/// (`Inner::l0_new_keys`) each moved up to start compactions at
/// `l0_compaction_trigger_new_keys`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct L0Triggers {
    pub compact: usize,
    pub slowdown: usize,
    pub stop: usize,
}

impl L0Triggers {
    pub fn new(opts: &Options, new_keys: bool) -> Self {
        let up = if new_keys {
            opts.l0_compaction_trigger_new_keys
                .saturating_sub(opts.l0_compaction_trigger)
        } else {
            0
        };
        L0Triggers {
            compact: opts.l0_compaction_trigger.saturating_add(up),
            slowdown: opts.l0_slowdown_trigger.saturating_add(up),
            stop: opts.l0_stop_trigger.saturating_add(up),
        }
    }

    pub fn now(inner: &Inner) -> Self {
        Self::new(&inner.opts, inner.l0_new_keys.load(Ordering::Relaxed))
    }
}

/// Score of each level that can be compacted (the last cannot), level 0
/// against `l0_trigger` tables.
pub(super) fn scores(v: &Version, opts: &Options, l0_trigger: usize) -> Vec<f64> {
    (0..LEVELS - 1)
        .map(|l| {
            if l == 0 {
                v.l0_depth() as f64 / l0_trigger as f64
            } else {
                v.level_bytes(l) as f64 / level_target(opts, l) as f64
            }
        })
        .collect()
}

/// How far compaction is behind, from 0 (writers run free) to 1 (writers
/// are about to stop). Level 0 pressure grows linearly from the slowdown
/// trigger to the stop trigger; byte debt of deeper levels adds pressure
/// once a level is more than twice its target.
pub(crate) fn write_pressure(v: &Version, opts: &Options, l0: L0Triggers) -> f64 {
    let tables = v.l0_depth();
    let l0_pressure = if tables >= l0.slowdown {
        (tables - l0.slowdown + 1) as f64 / (l0.stop - l0.slowdown + 1) as f64
    } else {
        0.0
    };
    let bytes_pressure = scores(v, opts, l0.compact)
        .iter()
        .skip(1)
        .map(|s| ((s - 2.0) / 8.0).clamp(0.0, 1.0))
        .fold(0.0, f64::max);
    l0_pressure.max(bytes_pressure).min(1.0)
}

pub(super) fn user_range(files: &[sync::Arc<TableFile>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let lo = files.iter().map(|f| f.smallest_user()).min()?;
    let hi = files.iter().map(|f| f.largest_user()).max()?;
    Some((lo.to_vec(), hi.to_vec()))
}

/// The level-0 tables of `keyspace`, oldest first.
pub(super) fn level0_of(v: &Version, keyspace: u32) -> Vec<sync::Arc<TableFile>> {
    v.levels[0]
        .iter()
        .filter(|f| f.keyspace == keyspace)
        .cloned()
        .collect()
}

/// The live keyspace with the most level-0 tables (of those with as many,
/// the one whose oldest table is oldest), if level 0 holds any.
pub(super) fn deepest_level0(v: &Version) -> Option<u32> {
    let mut per: std::collections::BTreeMap<u32, (usize, u64)> = Default::default();
    for f in v.levels[0]
        .iter()
        .filter(|f| v.keyspaces.exists(f.keyspace))
    {
        let e = per.entry(f.keyspace).or_insert((0, f.number));
        e.0 += 1;
    }
    per.into_iter()
        .max_by(|a, b| a.1.0.cmp(&b.1.0).then(b.1.1.cmp(&a.1.1)))
        .map(|(k, _)| k)
}

/// Entries the level-0 merge `pick` takes (`level0_compaction`), if
/// level 0 holds tables of a live keyspace.
fn level0_merge_entries(v: &Version) -> Option<u64> {
    let c = level0_compaction(v)?;
    Some(c.inputs.iter().chain(&c.below).map(|f| f.entries).sum())
}

/// Reads buy a level-0 merge once they have consulted this many level-0
/// tables past the first per entry the merge would take, so a merge costs
/// no more than a fixed share of what reads lost to level 0 before it
/// (the bet: reads go on as they did). On this VM a merge took about
/// 0.8 µs per entry, and in dbbench's state (three level-0 tables) a
/// point read cost about 2.5 µs more than after the merge (cache misses
/// on the shadowed versions' blocks included) and counted about 0.55
/// probes: reads have lost about two thirds of a merge's cost when it
/// begins (docs/architecture.md §Flush and compaction).
const PROBES_PER_ENTRY_MERGED: f64 = 0.125;

/// Fewest probes that buy a merge, whatever its size.
const PROBES_DUE_MIN: u64 = 4096;

/// Level-0 merges that reads pay for, before level 0 reaches
/// `l0_compaction_trigger` tables (LevelDB's seek-triggered compaction,
/// Pebble's read-triggered one, by another measure): a point read or a
/// seek through several level-0 tables counts each past the first
/// (`ReadPolicy::probed_level0`), and once those counts since level 0
/// last changed reach `PROBES_PER_ENTRY_MERGED` per entry the merge would
/// take, level 0 merges into level 1. A change of level 0 (a flush, a
/// merge) starts the count again, so writes alone never buy one, and a
/// database written faster than it is read merges at the triggers as
/// before.
pub(super) struct ProbeDue {
    /// `ReadPolicy::level0_probes` at the look before.
    seen: u64,
    /// The level-0 tables the count is against, by number.
    level0: Vec<u64>,
    due: u64,
}

impl ProbeDue {
    pub(super) fn new(inner: &Inner) -> Self {
        ProbeDue {
            seen: inner.policy.level0_probes(),
            level0: Vec::new(),
            due: 0,
        }
    }

    pub(super) fn look(&mut self, inner: &Inner, v: &Version) {
        let now = inner.policy.level0_probes();
        let read = now.saturating_sub(self.seen);
        self.seen = now;
        let tables = v.levels[0].iter().map(|f| f.number);
        if !tables.clone().eq(self.level0.iter().copied()) {
            self.level0 = tables.collect();
            self.due = 0;
        }
        self.due = self.due.saturating_add(read);
    }

    /// Whether reads have bought a merge of level 0 as it is.
    pub(super) fn ready(&self, v: &Version) -> bool {
        if v.l0_depth() < 2 || self.due < PROBES_DUE_MIN {
            return false;
        }
        level0_merge_entries(v)
            .is_some_and(|entries| self.due as f64 >= entries as f64 * PROBES_PER_ENTRY_MERGED)
    }

    /// A merge was bought: reads pay anew for the next.
    pub(super) fn spent(&mut self) {
        self.due = 0;
    }
}

/// Where the next compaction of a level starts: the keyspace and the
/// largest key of the table compacted last.
pub(super) type Pointer = (u32, Vec<u8>);

pub(super) fn pick(
    v: &Version,
    opts: &Options,
    l0_trigger: usize,
    pointer: &mut [Pointer; LEVELS],
) -> Option<Compaction> {
    let (level, score) = scores(v, opts, l0_trigger)
        .into_iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if score < 1.0 {
        return None;
    }
    let (keyspace, inputs) = if level == 0 {
        return level0_compaction(v);
    } else {
        // Round robin through the level, keyspace by keyspace; tables of
        // dropped keyspaces are left to their removal.
        let files: Vec<_> = v.levels[level]
            .iter()
            .filter(|f| v.keyspaces.exists(f.keyspace))
            .collect();
        let (at_ks, at_key) = &pointer[level];
        let after = files
            .iter()
            .find(|f| {
                f.keyspace > *at_ks
                    || (f.keyspace == *at_ks && key::compare(&f.smallest, at_key).is_gt())
            })
            .or(files.first())?;
        pointer[level] = (after.keyspace, after.largest.clone());
        (after.keyspace, vec![(*after).clone()])
    };
    with_below(v, level, keyspace, inputs)
}

/// The merge of level 0: every level-0 table of the keyspace with the
/// most (`deepest_level0`), and the level-1 tables they overlap.
fn level0_compaction(v: &Version) -> Option<Compaction> {
    let keyspace = deepest_level0(v)?;
    with_below(v, 0, keyspace, level0_of(v, keyspace))
}

/// The compaction of `inputs` (of `level` and `keyspace`) with the
/// tables of the next level they overlap.
fn with_below(
    v: &Version,
    level: usize,
    keyspace: u32,
    inputs: Vec<sync::Arc<TableFile>>,
) -> Option<Compaction> {
    let (lo, hi) = user_range(&inputs)?;
    let below = v.overlapping(level + 1, keyspace, &lo, &hi);
    Some(Compaction {
        keyspace,
        level,
        inputs,
        below,
        warm: false,
    })
}
