//! `synctx`: atomic batches of 100 random keys with 100-byte values, each
//! synced on commit — first from one committer, then from 8 at once. The
//! device's fdatasync rate is the bar: one committer can at best match it,
//! concurrent committers beat it only if commits share syncs (group commit).

use super::{Ctx, Outcome, Rng, make_key, make_value, parallel, percentiles};
use crate::bench::BenchResult;
use crate::bench::device::DeviceLimits;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Config {
    /// Batches per phase.
    pub batches: u64,
    pub keys_per_batch: usize,
    pub value_len: usize,
    /// Key space the random keys come from.
    pub key_space: u64,
    pub committers: usize,
    pub seed: u64,
}

pub fn run(ctx: &mut Ctx, cfg: &Config, dev: &DeviceLimits) -> BenchResult<()> {
    ctx.fresh()?;
    let limit = Some(("fdatasync/s".to_owned(), dev.fdatasync_per_sec));
    let entry = (16 + cfg.value_len) as u64;
    for committers in [1, cfg.committers.max(1)] {
        let phase = format!(
            "{committers} committer{}",
            if committers == 1 { "" } else { "s" }
        );
        ctx.phase("synctx", &phase, "ops/s", limit.clone(), |db, p| {
            let per = cfg.batches / committers as u64;
            let lat = parallel(committers, |t| {
                let mut rng = Rng::new(cfg.seed + t as u64 * 7919 + committers as u64);
                let mut lat = Vec::with_capacity(per as usize);
                for _ in 0..per {
                    let ops: Vec<_> = (0..cfg.keys_per_batch)
                        .map(|_| {
                            let i = rng.below(cfg.key_space);
                            (make_key(i, 16), Some(make_value(i, 0, cfg.value_len)))
                        })
                        .collect();
                    let start = Instant::now();
                    db.write_batch(&ops, true)?;
                    lat.push(start.elapsed().as_nanos() as u64);
                    p.add(1, cfg.keys_per_batch as u64 * entry);
                }
                Ok(lat)
            })?;
            let ops = per * committers as u64;
            let bytes = ops * cfg.keys_per_batch as u64 * entry;
            Ok(Outcome {
                ops,
                user_bytes: bytes,
                written_bytes: bytes,
                latency_us: percentiles(lat.into_iter().flatten().collect()),
                ..Outcome::default()
            })
        });
    }
    Ok(())
}
