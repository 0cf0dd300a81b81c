//! Table images (raw and resealed) and tables written from the input.
//! The logic, and what it checks, is in `cairndb::fuzzing::table`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::table(data);
});
