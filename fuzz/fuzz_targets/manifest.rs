//! Manifest images, single version edits, sealed edit logs.
//! The logic, and what it checks, is in `cairndb::fuzzing::manifest`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::manifest(data);
});
