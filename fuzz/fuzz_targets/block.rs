//! Data and index blocks: raw bytes, and blocks built from the input.
//! The logic, and what it checks, is in `cairndb::fuzzing::block`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::block(data);
});
