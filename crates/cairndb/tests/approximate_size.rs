//! `Db::approximate_size`: the table bytes of a key range, read from the
//! tables' indexes. Data only in the memtable counts nothing; once
//! compacted, the whole range is about the tables' size and two halves of
//! like entries about half each.

mod common;

use cairndb::Db;
use cairndb::io::MemFs;
use common::mem_opts;

#[test]
fn approximate_size_follows_the_tables() {
    let fs = MemFs::new();
    let db = Db::open("/db", mem_opts(&fs, 64 << 20)).expect("open");
    for i in 0..20_000u32 {
        let value: Vec<u8> = (0..100u32).map(|j| (i * 31 + j * 7) as u8).collect();
        db.put(format!("k{i:06}"), value).expect("put");
    }
    assert_eq!(db.approximate_size(b"k", b"l"), 0, "memtable only");
    db.compact().expect("compact");
    let tables: u64 = db.stats().bytes_per_level.iter().sum();
    let all = db.approximate_size(b"k", b"l");
    assert!(
        all <= tables && all > tables * 9 / 10,
        "all {all}, tables {tables}"
    );
    let low = db.approximate_size(b"k000000", b"k010000");
    let high = db.approximate_size(b"k010000", b"k020000");
    assert!(low.abs_diff(high) < all / 10, "halves {low} and {high}");
    assert!(
        (low + high).abs_diff(all) <= 2 * 4096 + 512,
        "{low} + {high} vs {all}"
    );
    assert_eq!(db.approximate_size(b"k2", b"k1"), 0, "start after limit");
    assert_eq!(db.approximate_size(b"k1", b"k1"), 0, "empty range");
    assert_eq!(db.approximate_size(b"a", b"b"), 0, "below every key");
    assert_eq!(db.approximate_size(b"z", b"zz"), 0, "above every key");
}
