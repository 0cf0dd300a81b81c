//! Write batch payloads: decode, round trip, journal framing.
//! The logic, and what it checks, is in `cairndb::fuzzing::batch`.
#![no_main]

use cairndb_fuzz as _;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cairndb::fuzzing::batch(data);
});
