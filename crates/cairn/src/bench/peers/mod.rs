//! Peer engines for `cairn bench`, each behind its cargo feature:
//! `lmdb` (heed), `redb`, `fjall`, `sled`, `rocksdb`. `bench-peers` turns
//! on every peer but rocksdb (which needs libclang and a long C++ build).
//!
//! Each adapter's header states its configuration and what its `sync` and
//! unsynced writes promise; where a peer cannot meet the fairness rules of
//! `engine.rs` exactly, the header says which way it leans.

use super::BenchResult;
use super::engine::{Engine, EngineConfig};
use std::path::Path;

#[cfg(feature = "fjall")]
pub mod fjall;
#[cfg(feature = "lmdb")]
pub mod lmdb;
#[cfg(feature = "redb")]
pub mod redb;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
#[cfg(feature = "sled")]
pub mod sled;

/// Peers compiled into this build, in the order `available()` lists them.
pub const COMPILED: &[&str] = &[
    #[cfg(feature = "rocksdb")]
    "rocksdb",
    #[cfg(feature = "lmdb")]
    "lmdb",
    #[cfg(feature = "fjall")]
    "fjall",
    #[cfg(feature = "redb")]
    "redb",
    #[cfg(feature = "sled")]
    "sled",
];

/// Opens peer `name` in `dir`; `None` if no compiled peer has that name.
#[allow(unused_variables, unreachable_code, dead_code)]
pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> Option<BenchResult<Box<dyn Engine>>> {
    fn boxed<E: Engine + 'static>(r: BenchResult<E>) -> BenchResult<Box<dyn Engine>> {
        r.map(|e| Box::new(e) as Box<dyn Engine>)
    }
    let opened = match name {
        #[cfg(feature = "rocksdb")]
        "rocksdb" => boxed(self::rocksdb::RocksEngine::open(dir, cfg)),
        #[cfg(feature = "lmdb")]
        "lmdb" => boxed(self::lmdb::LmdbEngine::open(dir, cfg)),
        #[cfg(feature = "fjall")]
        "fjall" => boxed(self::fjall::FjallEngine::open(dir, cfg)),
        #[cfg(feature = "redb")]
        "redb" => boxed(self::redb::RedbEngine::open(dir, cfg)),
        #[cfg(feature = "sled")]
        "sled" => boxed(self::sled::SledEngine::open(dir, cfg)),
        _ => return None,
    };
    Some(opened)
}

/// The same checks on every peer (and every CairnDB variant, in
/// `engine.rs`): point ops, atomic batches, ordered bounded scans, flush,
/// and reopening the directory.
#[cfg(test)]
#[allow(dead_code, clippy::unwrap_used)]
pub(crate) fn roundtrip(name: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    let cfg = EngineConfig {
        cache_bytes: 8 << 20,
        write_buffer_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    let scan_all = |e: &dyn Engine, from: &[u8], limit: usize| {
        let mut seen = Vec::new();
        let n = e
            .scan(from, limit, &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
        assert_eq!(n, seen.len());
        seen
    };
    {
        let e = super::engine::open(name, &dir, &cfg).unwrap();
        assert_eq!(e.name(), name);
        for i in 0..100u32 {
            e.put(format!("k{i:03}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        assert_eq!(e.get(b"k042").unwrap().as_deref(), Some(&b"v42"[..]));
        assert_eq!(e.get(b"nope").unwrap(), None);
        e.delete(b"k042").unwrap();
        assert_eq!(e.get(b"k042").unwrap(), None);
        let ops = vec![
            (b"k010".to_vec(), None),
            (b"k011".to_vec(), Some(b"new".to_vec())),
            (b"k200".to_vec(), Some(b"x".to_vec())),
        ];
        e.write_batch(&ops, false).unwrap();
        e.write_batch(&[(b"k012".to_vec(), None)], true).unwrap();
        assert_eq!(e.get(b"k010").unwrap(), None);
        assert_eq!(e.get(b"k011").unwrap().as_deref(), Some(&b"new"[..]));
        // Ordered from a key that is absent (k010), bounded by the limit.
        let got = scan_all(&*e, b"k010", 4);
        let keys: Vec<&[u8]> = got.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [&b"k011"[..], b"k013", b"k014", b"k015"]);
        assert_eq!(got[0].1, b"new");
        // The callback can stop early.
        let mut first = 0;
        let n = e.scan(b"k0", 10, &mut |_, _| {
            first += 1;
            false
        });
        assert_eq!((n.unwrap(), first), (1, 1));
        e.flush().unwrap();
    }
    let e = super::engine::open(name, &dir, &cfg).unwrap();
    assert_eq!(e.get(b"k099").unwrap().as_deref(), Some(&b"v99"[..]));
    assert_eq!(e.get(b"k042").unwrap(), None);
    assert_eq!(e.get(b"k012").unwrap(), None);
    let all = scan_all(&*e, b"", usize::MAX);
    assert_eq!(all.len(), 100 - 3 + 1);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(all.last().unwrap().0, b"k200");
}

#[cfg(all(test, feature = "lmdb"))]
#[test]
fn peers_lmdb_roundtrip() {
    roundtrip("lmdb");
}

#[cfg(all(test, feature = "redb"))]
#[test]
fn peers_redb_roundtrip() {
    roundtrip("redb");
}

#[cfg(all(test, feature = "fjall"))]
#[test]
fn peers_fjall_roundtrip() {
    roundtrip("fjall");
}

#[cfg(all(test, feature = "sled"))]
#[test]
fn peers_sled_roundtrip() {
    roundtrip("sled");
}

#[cfg(all(test, feature = "rocksdb"))]
#[test]
fn peers_rocksdb_roundtrip() {
    roundtrip("rocksdb");
}

/// `--compression lz4` reaches fjall's tables: after a full compaction of
/// values that compress 2:1, its tables are far smaller than without;
/// `zstd`, which fjall lacks, leaves them as they were and says so.
#[cfg(all(test, feature = "fjall"))]
#[test]
#[allow(clippy::unwrap_used)]
fn peers_fjall_compresses_with_lz4() {
    use super::engine::Compression;
    let fill = super::workloads::Fill::compressible(Some(0.5), 1).unwrap();
    let mut bytes = Vec::new();
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = EngineConfig {
            compression,
            ..EngineConfig::default()
        };
        let e = super::engine::open("fjall", tmp.path(), &cfg).unwrap();
        assert_eq!(
            e.compression(),
            match compression {
                Compression::Lz4 => "lz4",
                Compression::None => "none",
                Compression::Zstd => "none: fjall 3 has no zstd",
            }
        );
        for i in 0..20_000u64 {
            e.put(&i.to_be_bytes(), &fill.value(i, 0, 100)).unwrap();
        }
        e.flush().unwrap();
        assert!(e.compact().unwrap());
        drop(e);
        // Reopened: the journal replayed into nothing, the tables alone.
        let e = super::engine::open("fjall", tmp.path(), &cfg).unwrap();
        let v = e.get(&77u64.to_be_bytes()).unwrap().unwrap();
        super::workloads::check_value(77, &v).unwrap();
        drop(e);
        // The tables alone: the journal (`0.jnl`, some 3 MB here) is as
        // long either way.
        bytes.push(super::monitor::dir_bytes(&tmp.path().join("keyspaces")));
    }
    let [none, lz4, zstd] = bytes[..] else {
        unreachable!()
    };
    // 2.23 MB and 1.32 MB when written.
    assert!(
        (lz4 as f64) < 0.7 * none as f64 && zstd == none,
        "tables: none {none} B, lz4 {lz4} B, zstd (not applied) {zstd} B"
    );
}

#[cfg(all(test, any(feature = "lmdb", feature = "redb", feature = "sled")))]
#[test]
#[allow(clippy::unwrap_used)]
fn peers_without_compression_say_so() {
    for name in COMPILED
        .iter()
        .filter(|n| ["lmdb", "redb", "sled"].contains(n))
    {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = EngineConfig {
            compression: super::engine::Compression::Lz4,
            ..EngineConfig::default()
        };
        let e = super::engine::open(name, &tmp.path().join(name), &cfg).unwrap();
        assert!(e.compression().starts_with("none: "), "{name}");
    }
}
