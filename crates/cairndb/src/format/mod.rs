//! On-disk formats. Nothing outside this module knows a byte offset; each
//! codec follows `docs/format.md`, whose sections the code cites.

pub mod batch;
pub mod block;
pub mod coding;
pub mod filter;
pub mod key;
pub mod log;
pub mod manifest;
pub mod stage;
pub mod table;
pub mod vptr;
