//! openraft's own storage test suite, unmodified, over a fresh CairnDB
//! directory per test.

use cairn_raft::{LogStore, StateMachine, TypeConfig};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

/// Opens a store in a new temporary directory; the directory is the
/// guard the suite keeps until a test ends.
struct TempStore;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for TempStore {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let opts = cairndb::Options::with_memory_budget(8 << 20);
        let (log, sm) = cairn_raft::open(dir.path(), opts).expect("a new store opens");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(TempStore) {
        panic!("openraft's storage suite failed: {e}");
    }
}
