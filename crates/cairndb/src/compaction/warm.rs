//! Warming: segments written past the page cache read back into it once
//! writes pause (`Options::warm_written_values`).

use crate::engine::Inner;
use std::time::Duration;

/// Writes must pause this long before written values are read back into
/// the page cache (`Options::warm_written_values`): read back beside the
/// writes, they cost dbbench's fills 40-47 % of their rate here.
pub(super) const WARM_AFTER_QUIET: Duration = Duration::from_millis(200);

/// Values read through the page cache since the last read-back that make
/// written values be read back while writes go on (`warm`): readers are
/// waiting for values that a sealed journal holds and the page cache does
/// not. dbbench's readwhilewriting (4 KiB values, data in memory) read
/// ~37,000 values a second beside the writer with the read-back waiting
/// for a pause, most of them from the device; a fill with no reader
/// never reaches it.
pub(super) const WARM_READS: u64 = 256;

/// Segments remembered for warming at most; past it the oldest go.
pub(super) const TO_WARM_MAX: usize = 4096;

/// `Options::warm_written_values`: segments written past the page cache
/// (a sealed journal, a merge's values files) are remembered, to be read
/// into it once writes pause, or while they go on if values are being
/// read (`warm`, `WARM_READS`).
pub(crate) fn warm_later(inner: &Inner, numbers: &[u64]) {
    if numbers.is_empty() || !inner.opts.warm_written_values {
        return;
    }
    let mut to_warm = inner.to_warm.lock();
    to_warm.extend_from_slice(numbers);
    if to_warm.len() > TO_WARM_MAX {
        let extra = to_warm.len() - TO_WARM_MAX;
        to_warm.drain(..extra);
    }
}

/// Hands the remembered segments still live to one worker thread that
/// asks the kernel to read them into the page cache, one after the other,
/// if values are read through it now (they fit in memory); else forgets
/// them. One thread, not one per segment: the read-back's page faults
/// then take at most one core from what runs after the pause.
pub(super) fn warm(inner: &Inner) {
    let numbers = std::mem::take(&mut *inner.to_warm.lock());
    let (v, pending): (_, Vec<u64>) = {
        let state = inner.state.read();
        let pending = state.sealed.iter().map(|m| m.journal()).collect();
        (state.version.clone(), pending)
    };
    if inner.policy.how(|| v.value_bytes_live()) != crate::read::policy::How::PageCache {
        return;
    }
    // A journal sealed but not flushed yet is not in the version: it
    // waits for the next read-back (while writes go on, that comes soon).
    // A segment neither there nor pending is gone.
    let mut files = Vec::new();
    let mut later = Vec::new();
    for n in numbers {
        match v.segments.get(&n) {
            Some(seg) => files.push(seg.file.clone()),
            None if pending.contains(&n) => later.push(n),
            None => {}
        }
    }
    if !later.is_empty() {
        inner.to_warm.lock().extend(later);
    }
    if !files.is_empty() {
        inner
            .workers
            .run(move || files.iter().for_each(|f| f.will_need()));
    }
}
