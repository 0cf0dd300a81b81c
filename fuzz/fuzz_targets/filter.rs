//! Filter blocks: raw bytes, and filters built from the input.
//! The logic, and what it checks, is in `cairndb::fuzzing::filter`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::filter(data);
});
