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
/// tables, one per deeper level), so the smallest is found by a scan.
pub struct MergeCursor {
    children: Vec<Box<dyn Cursor>>,
    live: Vec<bool>,
    current: Option<usize>,
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
            started: false,
            dir,
        }
    }
}

impl Cursor for MergeCursor {
    fn advance(&mut self) -> Result<bool> {
        if !self.started {
            self.started = true;
            for (i, c) in self.children.iter_mut().enumerate() {
                self.live[i] = c.advance()?;
            }
        } else if let Some(i) = self.current {
            self.live[i] = self.children[i].advance()?;
        }
        let mut best: Option<usize> = None;
        for i in 0..self.children.len() {
            if !self.live[i] {
                continue;
            }
            best = match best {
                None => Some(i),
                Some(b) => {
                    let ord = key::compare(self.children[i].key(), self.children[b].key());
                    let better = match self.dir {
                        Dir::Forward => ord == Ordering::Less,
                        Dir::Backward => ord == Ordering::Greater,
                    };
                    Some(if better { i } else { b })
                }
            };
        }
        self.current = best;
        Ok(best.is_some())
    }
    fn key(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.children[i].key())
    }
    fn value(&self) -> &[u8] {
        self.current.map_or(&[], |i| self.children[i].value())
    }
}
