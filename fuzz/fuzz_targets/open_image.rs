//! Db::open on an arbitrary directory image, then reads and writes.
//! The logic, and what it checks, is in `cairndb::fuzzing::open_image`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::open_image(data);
});
