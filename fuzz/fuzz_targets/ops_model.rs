//! Random operations, power cuts and IO faults against a BTreeMap model.
//! The logic, and what it checks, is in `cairndb::fuzzing::ops_model`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::ops_model(data);
});
