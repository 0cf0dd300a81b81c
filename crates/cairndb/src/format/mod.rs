//! On-disk formats. Nothing outside this module knows a byte offset; each
//! codec follows `docs/format.md`, whose sections the code cites.
//!
//! Bytes from disk are untrusted: no decoder may panic on them, so
//! indexing that can go out of bounds, `unwrap` and `expect` are denied
//! here (tests may use them).
#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used)
)]

pub mod batch;
pub mod block;
pub mod coding;
pub mod compress;
pub mod filter;
pub mod key;
pub mod log;
pub mod manifest;
pub mod reader;
pub mod stage;
pub mod table;
pub mod vptr;
