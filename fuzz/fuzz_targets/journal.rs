//! Journal images and sealed, then damaged, journal logs.
//! The logic, and what it checks, is in `cairndb::fuzzing::journal`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::journal(data);
});
