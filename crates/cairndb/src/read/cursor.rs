//! Cursors: one-directional streams of (internal key, value) in internal
//! order (forward) or reverse internal order (backward).
//!
//! Every source (memtable, table, level of tables) offers a cursor in each
//! direction from a start key, and [`MergeCursor`] merges them. A
//! double-ended user iterator owns one forward and one backward merge, so no
//! cursor ever changes direction. Cursors own what they read from (`Arc`s),
//! never borrow, and so can live inside iterators handed to users.

use crate::Result;
use crate::format::key;
use crate::format::table::{Table, TableCursor};
use crate::memtable::{IKey, Memtable};
use crate::read::TableCache;
use crate::sync;
use crate::version::TableFile;
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

/// Direction of a cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Forward,
    Backward,
}

pub trait Cursor: Send {
    /// Moves to the next entry; `Ok(false)` once exhausted.
    fn advance(&mut self) -> Result<bool>;
    /// The current internal key (after `advance` returned `Ok(true)`).
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
}

impl Cursor for TableCursor {
    fn advance(&mut self) -> Result<bool> {
        TableCursor::advance(self)
    }
    fn key(&self) -> &[u8] {
        TableCursor::key(self)
    }
    fn value(&self) -> &[u8] {
        TableCursor::value(self)
    }
}

/// Entries copied out of the memtable by the first seek, and the
/// most copied by any later one: chunks start small, because short scans
/// (seek + a few keys) are common and large values make copies costly,
/// and double up to the maximum for long scans.
const MEM_CHUNK_FIRST: usize = 4;
const MEM_CHUNK_MAX: usize = 64;

/// A cursor over a memtable as seen by one snapshot. It copies entries
/// out in chunks and resumes each chunk where the last stopped, so it holds
/// no borrow of the memtable (nor its lock). Of each user key it yields
/// only the newest version the snapshot can see (a tombstone included):
/// the older ones could never be chosen by the iterator above, and with
/// hot keys overwritten in place they can outnumber the live keys many
/// times over.
pub struct MemCursor {
    mem: Arc<Memtable>,
    keyspace: u32,
    dir: Dir,
    snapshot: u64,
    /// Where the next chunk starts; `None` once the memtable is exhausted.
    resume: Option<Bound<Vec<u8>>>,
    chunk: Vec<(Vec<u8>, Vec<u8>)>,
    chunk_len: usize,
    pos: Option<usize>,
}

impl MemCursor {
    pub fn new(
        mem: Arc<Memtable>,
        keyspace: u32,
        dir: Dir,
        start: Option<Vec<u8>>,
        snapshot: u64,
    ) -> Self {
        MemCursor {
            mem,
            keyspace,
            dir,
            snapshot,
            resume: Some(start.map_or(Bound::Unbounded, Bound::Included)),
            chunk: Vec::new(),
            chunk_len: MEM_CHUNK_FIRST,
            pos: None,
        }
    }
}

impl Cursor for MemCursor {
    fn advance(&mut self) -> Result<bool> {
        if let Some(p) = self.pos
            && p + 1 < self.chunk.len()
        {
            self.pos = Some(p + 1);
            return Ok(true);
        }
        self.pos = None;
        self.chunk.clear();
        while self.chunk.is_empty() {
            let Some(resume) = self.resume.take() else {
                return Ok(false);
            };
            let key = match &resume {
                Bound::Included(k) | Bound::Excluded(k) => Some(IKey::from_encoded(k)),
                Bound::Unbounded => None,
            };
            let bound = match (&resume, &key) {
                (Bound::Included(_), Some(k)) => Bound::Included(k),
                (Bound::Excluded(_), Some(k)) => Bound::Excluded(k),
                _ => Bound::Unbounded,
            };
            self.resume = match self.dir {
                Dir::Forward => self.mem.visible_forward(
                    self.keyspace,
                    bound,
                    self.snapshot,
                    self.chunk_len,
                    &mut self.chunk,
                ),
                Dir::Backward => self.mem.visible_backward(
                    self.keyspace,
                    bound,
                    self.snapshot,
                    self.chunk_len,
                    &mut self.chunk,
                ),
            };
            self.chunk_len = (self.chunk_len * 2).min(MEM_CHUNK_MAX);
        }
        self.pos = Some(0);
        Ok(true)
    }
    fn key(&self) -> &[u8] {
        self.pos.map_or(&[], |p| &self.chunk[p].0)
    }
    fn value(&self) -> &[u8] {
        self.pos.map_or(&[], |p| &self.chunk[p].1)
    }
}

/// A cursor over a table opened on first use.
pub fn table_cursor(table: &Arc<Table>, dir: Dir, start: Option<&[u8]>) -> TableCursor {
    match dir {
        Dir::Forward => table.cursor_forward(start),
        Dir::Backward => table.cursor_backward(start),
    }
}

/// A cursor over the sorted, non-overlapping tables of one level; opens
/// each table only when the cursor reaches it.
pub struct LevelCursor {
    files: Vec<sync::Arc<TableFile>>,
    tables: Arc<TableCache>,
    dir: Dir,
    start: Option<Vec<u8>>,
    next_file: Option<usize>,
    current: Option<TableCursor>,
}

impl LevelCursor {
    pub fn new(
        files: Vec<sync::Arc<TableFile>>,
        tables: Arc<TableCache>,
        dir: Dir,
        start: Option<Vec<u8>>,
    ) -> Self {
        let next_file = match (&start, dir) {
            (None, Dir::Forward) => Some(0),
            (None, Dir::Backward) => files.len().checked_sub(1),
            (Some(s), Dir::Forward) => {
                Some(files.partition_point(|f| key::compare(&f.largest, s) == Ordering::Less))
            }
            (Some(s), Dir::Backward) => files
                .partition_point(|f| key::compare(&f.smallest, s) != Ordering::Greater)
                .checked_sub(1),
        };
        LevelCursor {
            files,
            tables,
            dir,
            start,
            next_file,
            current: None,
        }
    }
}

impl Cursor for LevelCursor {
    fn advance(&mut self) -> Result<bool> {
        loop {
            if let Some(c) = &mut self.current {
                if c.advance()? {
                    return Ok(true);
                }
                self.current = None;
            }
            let Some(i) = self.next_file.filter(|&i| i < self.files.len()) else {
                return Ok(false);
            };
            let table = self.tables.get(&self.files[i])?;
            let start = self.start.take();
            self.current = Some(table_cursor(&table, self.dir, start.as_deref()));
            self.next_file = match self.dir {
                Dir::Forward => Some(i + 1),
                Dir::Backward => i.checked_sub(1),
            };
        }
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.key())
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.value())
    }
}

/// Merges cursors of one direction. Sources are few (memtables, level-0
/// tables, one per deeper level), so the smallest is found by a scan; and
/// the runner-up (the smallest of the others) is kept beside it, so while
/// one source holds the next keys (sequential data nearly always lies in
/// one table) an entry costs one comparison, not one per source.
pub struct MergeCursor {
    children: Vec<Box<dyn Cursor>>,
    live: Vec<bool>,
    current: Option<usize>,
    /// The child that would come next if `current` moved past it: the
    /// first, in child order, of the smallest keys among the other live
    /// children (`None` if there is no other).
    runner: Option<usize>,
    started: bool,
    dir: Dir,
}

impl MergeCursor {
    pub fn new(children: Vec<Box<dyn Cursor>>, dir: Dir) -> Self {
        let live = vec![false; children.len()];
        MergeCursor {
            children,
            live,
            current: None,
            runner: None,
            started: false,
            dir,
        }
    }

    /// True if child `a` comes before child `b`: its key is first in the
    /// merge's direction, or the keys are equal and `a` is the earlier
    /// child (the tie rule of a scan that keeps the first best).
    fn before(&self, a: usize, b: usize) -> bool {
        let ord = key::compare(self.children[a].key(), self.children[b].key());
        match (ord, self.dir) {
            (Ordering::Equal, _) => a < b,
            (Ordering::Less, Dir::Forward) | (Ordering::Greater, Dir::Backward) => true,
            _ => false,
        }
    }

    /// Finds the best and the runner-up among the live children.
    fn rescan(&mut self) {
        let (mut best, mut runner): (Option<usize>, Option<usize>) = (None, None);
        for i in 0..self.children.len() {
            if !self.live[i] {
                continue;
            }
            match best {
                None => best = Some(i),
                Some(b) if self.before(i, b) => {
                    runner = best;
                    best = Some(i);
                }
                Some(_) => {
                    if runner.is_none_or(|r| self.before(i, r)) {
                        runner = Some(i);
                    }
                }
            }
        }
        self.current = best;
        self.runner = runner;
    }
}

impl Cursor for MergeCursor {
    fn advance(&mut self) -> Result<bool> {
        if !self.started {
            self.started = true;
            for (i, c) in self.children.iter_mut().enumerate() {
                self.live[i] = c.advance()?;
            }
            self.rescan();
            return Ok(self.current.is_some());
        }
        let Some(i) = self.current else {
            return Ok(false);
        };
        self.live[i] = self.children[i].advance()?;
        // The other children did not move: `runner` is still the best of
        // them, so `i` stays current if it still comes before it.
        let stays = self.live[i] && self.runner.is_none_or(|r| self.before(i, r));
        if !stays {
            self.rescan();
        }
        debug_assert!(self.current.is_none_or(|c| self.live[c]));
        Ok(self.current.is_some())
    }
    fn key(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.children[i].key())
    }
    fn value(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.children[i].value())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// A cursor over entries given in its direction's order.
    struct VecCursor {
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        pos: Option<usize>,
    }

    impl Cursor for VecCursor {
        fn advance(&mut self) -> Result<bool> {
            let next = self.pos.map_or(0, |p| p + 1);
            self.pos = Some(next);
            Ok(next < self.entries.len())
        }
        fn key(&self) -> &[u8] {
            &self.entries[self.pos.unwrap()].0
        }
        fn value(&self) -> &[u8] {
            &self.entries[self.pos.unwrap()].1
        }
    }

    /// Every entry of every child, in the order a full scan of the
    /// children (first best on ties) yields them.
    fn expected(children: &[Vec<(Vec<u8>, usize)>], dir: Dir) -> Vec<(Vec<u8>, usize)> {
        let mut all: Vec<(Vec<u8>, usize)> = children.iter().flatten().cloned().collect();
        all.sort_by(|a, b| {
            let ord = key::compare(&a.0, &b.0);
            let ord = if dir == Dir::Forward {
                ord
            } else {
                ord.reverse()
            };
            ord.then(a.1.cmp(&b.1))
        });
        all
    }

    #[test]
    fn merge_yields_every_entry_in_order_with_ties_to_the_first_child() {
        let mut rng = StdRng::seed_from_u64(7);
        for round in 0..300 {
            let sources = rng.random_range(1..6);
            // Runs of neighbouring keys per child (one child dominating
            // for a while, as in sequential data), some keys shared.
            let mut children: Vec<Vec<(Vec<u8>, usize)>> = vec![Vec::new(); sources];
            for _ in 0..rng.random_range(0..80) {
                let child = rng.random_range(0..sources);
                let start: u16 = rng.random_range(0..200);
                for k in start..start + rng.random_range(1..10) {
                    let seqno = rng.random_range(1..4u64);
                    let ikey = key::encode(&k.to_be_bytes(), key::make_tag(seqno, 1));
                    let c = if rng.random_bool(0.1) {
                        rng.random_range(0..sources)
                    } else {
                        child
                    };
                    if !children[c].iter().any(|(k, _)| *k == ikey) {
                        children[c].push((ikey, c));
                    }
                }
            }
            for dir in [Dir::Forward, Dir::Backward] {
                let cursors: Vec<Box<dyn Cursor>> = children
                    .iter()
                    .map(|entries| {
                        let one = expected(std::slice::from_ref(entries), dir);
                        Box::new(VecCursor {
                            entries: one.into_iter().map(|(k, c)| (k, vec![c as u8])).collect(),
                            pos: None,
                        }) as Box<dyn Cursor>
                    })
                    .collect();
                let mut merge = MergeCursor::new(cursors, dir);
                let mut got = Vec::new();
                while merge.advance().unwrap() {
                    got.push((merge.key().to_vec(), merge.value()[0] as usize));
                }
                assert!(!merge.advance().unwrap(), "an ended merge stays ended");
                assert_eq!(got, expected(&children, dir), "round {round}, {dir:?}");
            }
        }
    }
}
