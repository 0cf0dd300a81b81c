//! Removing the tables of dropped keyspaces, in the background: dropping
//! a keyspace records the drop alone (`Db::drop_keyspace`), and this
//! removes its tables with one edit that also frees the separated values
//! they point to.

use crate::engine::Inner;
use crate::error::Result;
use crate::format::key::{self, Kind};
use crate::format::manifest::Edit;
use crate::format::vptr::ValuePtr;
use crate::read::cursor::{Dir, table_cursor};
use crate::version::{TableFile, Version};
use std::collections::BTreeMap;

/// The edit that removes every table of a dropped keyspace in `v`, with
/// the value bytes they point to counted dead; `None` if there is none.
pub(super) fn removal(inner: &Inner, v: &Version) -> Option<Edit> {
    let tables = v.dropped_tables();
    if tables.is_empty() {
        return None;
    }
    let mut dead = BTreeMap::<u64, u64>::new();
    if !v.segments.is_empty() {
        for (_, f) in &tables {
            // A table that cannot be read is removed all the same: the
            // values it points to stay counted live, which costs their
            // segments' space, never a value another table needs.
            let _ = pointed_to(inner, f, &mut dead);
        }
    }
    Some(Edit {
        removed: tables.iter().map(|(l, f)| (*l, f.number)).collect(),
        value_dead: dead.into_iter().collect(),
        ..Edit::default()
    })
}

/// Adds to `dead` the bytes of separated values table `f` points to, per
/// segment. All or nothing: on an error `dead` is as it was.
fn pointed_to(inner: &Inner, f: &TableFile, dead: &mut BTreeMap<u64, u64>) -> Result<()> {
    let table = inner.tables.get(f)?;
    let mut cursor = table_cursor(&table, Dir::Forward, None);
    let mut found = BTreeMap::<u64, u64>::new();
    while cursor.advance()? {
        let Some((_, tag)) = key::split(cursor.key()) else {
            continue;
        };
        if key::tag_kind(tag) == Kind::Pointer as u8
            && let Some(p) = ValuePtr::decode(cursor.value())
        {
            *found.entry(p.segment).or_default() += u64::from(p.len);
        }
    }
    for (segment, bytes) in found {
        *dead.entry(segment).or_default() += bytes;
    }
    Ok(())
}

/// Removes the tables of dropped keyspaces (under the compaction lock).
pub(super) fn remove_dropped(inner: &Inner, v: &Version) -> Result<()> {
    match removal(inner, v) {
        Some(edit) => {
            v.check_value_dead(&edit.value_dead, &edit.value_live)
                .map_err(|detail| crate::Error::corruption(&inner.dir, 0, detail))?;
            inner.log_and_apply(edit, |_| {})
        }
        None => Ok(()),
    }
}
