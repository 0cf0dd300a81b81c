//! What a node finds when it opens its store again: after a clean drop,
//! after a power cut (CairnDB's simulated file system keeps only what was
//! synced), and after its process aborted (the real file system).

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_raft::{LogStore, Request, Response, StateMachine, TypeConfig};
use cairndb::Options;
use cairndb::io::{Crash, MemFs};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{blank_ent, log_id, membership_ent};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn opts() -> Options {
    Options::with_memory_budget(8 << 20)
}

fn mem_opts(fs: &MemFs) -> Options {
    Options {
        fs: Arc::new(fs.clone()),
        ..opts()
    }
}

fn normal(term: u64, index: u64, request: Request) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(request),
    }
}

fn set(key: &str, value: &str) -> Request {
    Request::Set {
        key: key.into(),
        value: value.into(),
    }
}

/// Entries 1..=n of term 1: a membership entry, then sets of `k{i}`.
fn entries(n: u64) -> Vec<Entry<TypeConfig>> {
    (1..=n)
        .map(|i| match i {
            1 => membership_ent::<TypeConfig>(1, 1, 1, vec![[1, 2, 3].into()]),
            _ => normal(1, i, set(&format!("k{i}"), &format!("v{i}"))),
        })
        .collect()
}

async fn log_ids(log: &mut LogStore) -> Vec<LogId<u64>> {
    let all = log.try_get_log_entries(..).await.expect("entries read");
    all.iter().map(|e| e.log_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_restores_log_vote_committed_and_applied_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let written = entries(10);
    let snapshot_meta;
    {
        let (mut log, mut sm) = cairn_raft::open(dir.path(), opts()).expect("open");
        log.save_vote(&Vote::new_committed(3, 2))
            .await
            .expect("vote");
        log.blocking_append(written.clone()).await.expect("append");
        log.truncate(log_id(1, 1, 9)).await.expect("truncate");
        log.blocking_append([normal(2, 9, set("k9", "again"))])
            .await
            .expect("append after truncate");
        log.save_committed(Some(log_id(2, 1, 9)))
            .await
            .expect("committed");
        let mut to_apply = written[..8].to_vec();
        to_apply.push(normal(2, 9, set("k9", "again")));
        let replies = sm.apply(to_apply).await.expect("apply");
        assert_eq!(replies[0], Response::Ok);
        assert_eq!(replies[1], Response::Previous(None));
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("snapshot");
        snapshot_meta = snap.meta;
        log.purge(log_id(1, 1, 4)).await.expect("purge");
        // Dropped here without close.
    }
    let (mut log, mut sm) = cairn_raft::open(dir.path(), opts()).expect("reopen");
    let state = log.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(2, 1, 9)));
    let ids = log_ids(&mut log).await;
    let want: Vec<_> = (5..=8)
        .map(|i| log_id(1, 1, i))
        .chain([log_id(2, 1, 9)])
        .collect();
    assert_eq!(ids, want);
    assert_eq!(
        log.read_vote().await.expect("vote"),
        Some(Vote::new_committed(3, 2))
    );
    assert_eq!(
        log.read_committed().await.expect("committed"),
        Some(log_id(2, 1, 9))
    );
    let (applied, membership) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(2, 1, 9)));
    assert_eq!(membership.log_id(), &Some(log_id(1, 1, 1)));
    let mut want: BTreeMap<String, String> = (2..=8)
        .map(|i| (format!("k{i}"), format!("v{i}")))
        .collect();
    want.insert("k9".into(), "again".into());
    assert_eq!(
        sm.pairs().expect("pairs"),
        want.into_iter().collect::<Vec<_>>()
    );
    let current = sm
        .get_current_snapshot()
        .await
        .expect("read snapshot")
        .expect("a snapshot");
    assert_eq!(current.meta, snapshot_meta);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_carry_the_previous_value_within_one_apply() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_log, mut sm) = cairn_raft::open(dir.path(), opts()).expect("open");
    let replies = sm
        .apply([
            blank_ent::<TypeConfig>(1, 1, 1),
            normal(1, 2, set("a", "1")),
            normal(1, 3, set("a", "2")),
            normal(1, 4, Request::Delete { key: "a".into() }),
            normal(1, 5, Request::Delete { key: "a".into() }),
        ])
        .await
        .expect("apply");
    assert_eq!(
        replies,
        vec![
            Response::Ok,
            Response::Previous(None),
            Response::Previous(Some("1".into())),
            Response::Previous(Some("2".into())),
            Response::Previous(None),
        ]
    );
    assert_eq!(sm.get("a").expect("get"), None);
    let (applied, _) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(1, 1, 5)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cut_keeps_synced_appends_vote_and_applied_state() {
    let fs = MemFs::new();
    let (mut log, mut sm) = cairn_raft::open("/node", mem_opts(&fs)).expect("open");
    log.save_vote(&Vote::new(4, 1)).await.expect("vote");
    log.blocking_append(entries(5)).await.expect("append");
    sm.apply(entries(3)).await.expect("apply (not synced)");
    // The next append is synced, and its sync covers the apply before it.
    log.blocking_append(entries(6).split_off(5))
        .await
        .expect("append");
    // The power fails while the store is open: only synced bytes remain.
    let image = fs.crash_image(Crash::Clean, 0);
    drop((log, sm));
    let (mut log, mut sm) = cairn_raft::open("/node", mem_opts(&image)).expect("reopen");
    assert_eq!(
        log_ids(&mut log).await,
        (1..=6).map(|i| log_id(1, 1, i)).collect::<Vec<_>>()
    );
    assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(4, 1)));
    let (applied, _) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(1, 1, 3)));
    assert_eq!(
        sm.pairs().expect("pairs"),
        vec![("k2".into(), "v2".into()), ("k3".into(), "v3".into())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_committed_id_is_written_with_the_next_write() {
    // save_committed writes nothing itself: the id is read back at once,
    // goes into the next batch (here a synced append), and one saved
    // after the last write is lost when the store closes (harmless: the
    // leader tells a restarted node again).
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let (mut log, _sm) = cairn_raft::open(dir.path(), opts()).expect("open");
        log.blocking_append(entries(3)).await.expect("append");
        log.save_committed(Some(log_id(1, 1, 2)))
            .await
            .expect("committed");
        assert_eq!(
            log.read_committed().await.expect("read"),
            Some(log_id(1, 1, 2))
        );
        log.blocking_append(entries(4).split_off(3))
            .await
            .expect("append");
        log.save_committed(Some(log_id(1, 1, 4)))
            .await
            .expect("committed, not written");
    }
    let (mut log, _sm) = cairn_raft::open(dir.path(), opts()).expect("reopen");
    assert_eq!(
        log.read_committed().await.expect("read"),
        Some(log_id(1, 1, 2))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_after_an_apply_keeps_the_entries_to_apply_again() {
    // An apply is not synced: a power cut right after it may take it
    // away, all of it, and the log still holds every entry it applied.
    let fs = MemFs::new();
    let (mut log, mut sm) = cairn_raft::open("/node", mem_opts(&fs)).expect("open");
    log.blocking_append(entries(6)).await.expect("append");
    sm.apply(entries(4)).await.expect("apply (not synced)");
    let image = fs.crash_image(Crash::Clean, 0);
    drop((log, sm));
    let (mut log, mut sm) = cairn_raft::open("/node", mem_opts(&image)).expect("reopen");
    assert_eq!(
        log_ids(&mut log).await,
        (1..=6).map(|i| log_id(1, 1, i)).collect::<Vec<_>>()
    );
    let (applied, _) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, None);
    assert_eq!(sm.pairs().expect("pairs"), vec![]);
    // Applied again from the log, it answers as the first time.
    let replies = sm.apply(entries(4)).await.expect("apply again");
    assert_eq!(replies[1], Response::Previous(None));
    let (applied, _) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(1, 1, 4)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cut_in_any_place_leaves_a_consistent_store() {
    // Torn images keep a random prefix of what was not synced; whatever
    // they keep, the log stays consecutive, it holds every synced entry,
    // and the state machine's data matches its applied id: the unsynced
    // apply is there whole or not at all.
    let fs = MemFs::new();
    let (mut log, mut sm) = cairn_raft::open("/node", mem_opts(&fs)).expect("open");
    log.blocking_append(entries(20)).await.expect("append");
    sm.apply(entries(12)).await.expect("apply");
    log.save_committed(Some(log_id(1, 1, 12)))
        .await
        .expect("committed");
    log.purge(log_id(1, 1, 5)).await.expect("purge (unsynced)");
    for seed in 0..8 {
        let image = fs.crash_image(Crash::Torn, seed);
        let (mut log2, mut sm2) = cairn_raft::open("/node", mem_opts(&image)).expect("reopen");
        let state = log2.get_log_state().await.expect("log state");
        assert_eq!(state.last_log_id, Some(log_id(1, 1, 20)), "seed {seed}");
        let first = state.last_purged_log_id.map_or(1, |p| p.index + 1);
        let ids = log_ids(&mut log2).await;
        let want: Vec<_> = (first..=20).map(|i| log_id(1, 1, i)).collect();
        assert_eq!(ids, want, "seed {seed}");
        let (applied, membership) = sm2.applied_state().await.expect("applied");
        let pairs = sm2.pairs().expect("pairs").len();
        match applied {
            Some(id) => {
                assert_eq!(id, log_id(1, 1, 12), "seed {seed}");
                assert_eq!(membership.log_id(), &Some(log_id(1, 1, 1)));
                assert_eq!(pairs, 11, "seed {seed}");
            }
            None => assert_eq!(pairs, 0, "seed {seed}"),
        }
    }
    drop((log, sm));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_snapshot_replaces_the_data_and_survives_reopen() {
    let (dir_l, dir_f) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (_log_l, mut leader) = cairn_raft::open(dir_l.path(), opts()).expect("open");
    let (_log_f, mut follower) = cairn_raft::open(dir_f.path(), opts()).expect("open");
    leader
        .apply([
            membership_ent::<TypeConfig>(1, 1, 1, vec![[1, 2].into()]),
            normal(1, 2, set("b", "leader")),
            normal(1, 3, set("d", "leader")),
        ])
        .await
        .expect("apply on the leader");
    follower
        .apply([
            normal(1, 1, set("a", "stale")),
            normal(1, 2, set("b", "stale")),
            normal(1, 3, set("c", "stale")),
            normal(1, 4, set("e", "stale")),
        ])
        .await
        .expect("apply on the follower");
    let snap = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build");
    let mut receiving = follower.begin_receiving_snapshot().await.expect("begin");
    *receiving = *snap.snapshot;
    follower
        .install_snapshot(&snap.meta, receiving)
        .await
        .expect("install");
    let want = vec![
        ("b".to_string(), "leader".to_string()),
        ("d".to_string(), "leader".to_string()),
    ];
    assert_eq!(follower.pairs().expect("pairs"), want);
    drop((_log_f, follower));
    let (_log_f, mut follower) = cairn_raft::open(dir_f.path(), opts()).expect("reopen");
    assert_eq!(follower.pairs().expect("pairs"), want);
    let (applied, membership) = follower.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(1, 1, 3)));
    assert_eq!(membership, snap.meta.last_membership);
    let current = follower
        .get_current_snapshot()
        .await
        .expect("current")
        .expect("one");
    assert_eq!(current.meta, snap.meta);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshot_data_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let db = cairndb::Db::open(dir.path(), opts()).expect("open");
    let (_log, mut sm) = cairn_raft::from_db(db.clone()).expect("store");
    sm.apply([normal(1, 1, set("a", "1"))])
        .await
        .expect("apply");
    let mut snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build");
    let mut data = Vec::new();
    snap.snapshot.read_to_end(&mut data).await.expect("read");
    data.truncate(data.len() - 1);
    let mut meta = snap.meta.clone();
    meta.last_log_id = Some(log_id(2, 1, 7));
    let mut cut = sm.begin_receiving_snapshot().await.expect("begin");
    cut.write_all(&data).await.expect("write");
    let before = db.keyspaces();
    let err = sm
        .install_snapshot(&meta, cut)
        .await
        .expect_err("a cut snapshot is refused");
    assert!(err.to_string().contains("snapshot"), "{err}");
    assert_eq!(sm.pairs().expect("pairs"), vec![("a".into(), "1".into())]);
    let (applied, _) = sm.applied_state().await.expect("applied");
    assert_eq!(applied, Some(log_id(1, 1, 1)));
    let current = sm.get_current_snapshot().await.expect("current");
    assert_eq!(current.expect("one").meta, snap.meta);
    // The refused install's keyspaces (the received data, and the data
    // generation it began to fill) are gone.
    let mut want = before.clone();
    want.pop(); // the keyspace that received the cut data
    assert_eq!(db.keyspaces(), want, "before the install: {before:?}");
}

/// The child half of `abort_keeps_synced_appends`: runs only when the
/// parent names a directory; appends, saves a vote, then aborts the
/// process with the store open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_child() {
    let Some(dir) = std::env::var_os("CAIRN_RAFT_ABORT_DIR") else {
        return;
    };
    let (mut log, _sm): (LogStore, StateMachine) =
        cairn_raft::open(&dir, opts()).expect("open in the child");
    log.save_vote(&Vote::new(7, 3)).await.expect("vote");
    for batch in entries(30).chunks(7) {
        log.blocking_append(batch.to_vec()).await.expect("append");
    }
    std::process::abort();
}

#[test]
fn abort_keeps_synced_appends() {
    let dir = tempfile::tempdir().expect("dir");
    let exe = std::env::current_exe().expect("test binary");
    let status = std::process::Command::new(exe)
        .args(["--exact", "abort_child", "--nocapture", "--test-threads=1"])
        .env("CAIRN_RAFT_ABORT_DIR", dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("child runs");
    assert!(!status.success(), "the child aborts");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let (mut log, _sm) = cairn_raft::open(dir.path(), opts()).expect("reopen");
        assert_eq!(
            log_ids(&mut log).await,
            (1..=30).map(|i| log_id(1, 1, i)).collect::<Vec<_>>()
        );
        assert_eq!(log.read_vote().await.expect("vote"), Some(Vote::new(7, 3)));
    });
}

/// `n` pairs of about `value_len` bytes each, applied to `sm` as entries
/// 1..=n+1 (a membership entry first) of term 1.
async fn fill(sm: &mut StateMachine, n: u64, value_len: usize) -> Vec<(String, String)> {
    let mut applied = vec![membership_ent::<TypeConfig>(1, 1, 1, vec![[1, 2].into()])];
    let mut want = Vec::new();
    for i in 0..n {
        let (k, v) = (format!("key{i:06}"), format!("{i:0value_len$}"));
        applied.push(normal(1, i + 2, set(&k, &v)));
        want.push((k, v));
    }
    for chunk in applied.chunks(500) {
        sm.apply(chunk.to_vec()).await.expect("apply");
    }
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_many_pieces_streams_and_installs_in_batches() {
    // 12,000 pairs of ~1 KiB: about 12 MiB of snapshot data, many pieces
    // and several install batches.
    let (dir_l, dir_f) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (_log_l, mut leader) = cairn_raft::open(dir_l.path(), opts()).expect("open");
    let want = fill(&mut leader, 12_000, 1000).await;
    let snap = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build");
    assert!(
        snap.snapshot.len() > 10 * cairn_raft::snapshot::PIECE_BYTES as u64,
        "{}",
        snap.snapshot.len()
    );
    // Sent in chunks of an odd size, as openraft sends them.
    let mut current = leader
        .get_current_snapshot()
        .await
        .expect("current")
        .expect("one");
    assert_eq!(current.meta, snap.meta);
    let db_f = cairndb::Db::open(dir_f.path(), opts()).expect("open");
    let (_log_f, mut follower) = cairn_raft::from_db(db_f.clone()).expect("store");
    fill(&mut follower, 10, 5).await;
    let mut receiving = follower.begin_receiving_snapshot().await.expect("begin");
    let mut buf = vec![0u8; 300_001];
    loop {
        let n = current.snapshot.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        receiving.write_all(&buf[..n]).await.expect("write");
    }
    receiving.shutdown().await.expect("shutdown");
    follower
        .install_snapshot(&snap.meta, receiving)
        .await
        .expect("install");
    assert_eq!(follower.pairs().expect("pairs"), want);
    let names = db_f.keyspaces();
    assert!(names.iter().any(|n| n.starts_with("kv.")), "{names:?}");
    assert!(
        !names.contains(&"kv".to_string()),
        "the old data is dropped: {names:?}"
    );
    drop((_log_f, follower));
    drop(db_f);
    let (_log_f, mut follower) = cairn_raft::open(dir_f.path(), opts()).expect("reopen");
    assert_eq!(follower.pairs().expect("pairs"), want);
    let mut again = follower
        .get_current_snapshot()
        .await
        .expect("current")
        .expect("one");
    assert_eq!(again.meta, snap.meta);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    again.snapshot.read_to_end(&mut a).await.expect("read");
    let mut first = leader
        .get_current_snapshot()
        .await
        .expect("current")
        .expect("one");
    first.snapshot.read_to_end(&mut b).await.expect("read");
    assert!(
        a == b,
        "the follower's current snapshot is the leader's data"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_being_read_outlives_a_newer_one() {
    // A leader streaming its snapshot to a follower while a newer one is
    // built must be able to finish: the old data stays until released.
    let dir = tempfile::tempdir().expect("dir");
    let db = cairndb::Db::open(dir.path(), opts()).expect("open");
    let (_log, mut sm) = cairn_raft::from_db(db.clone()).expect("store");
    fill(&mut sm, 3000, 1000).await;
    let mut builder = sm.get_snapshot_builder().await;
    let old = builder.build_snapshot().await.expect("build");
    let mut reading = sm
        .get_current_snapshot()
        .await
        .expect("current")
        .expect("one");
    let mut head = vec![0u8; 1000];
    reading.snapshot.read_exact(&mut head).await.expect("read");
    sm.apply([normal(1, 5000, set("zzz", "new"))])
        .await
        .expect("apply");
    let new = builder.build_snapshot().await.expect("build");
    assert_ne!(new.meta.snapshot_id, old.meta.snapshot_id);
    drop(old);
    let mut rest = Vec::new();
    reading
        .snapshot
        .read_to_end(&mut rest)
        .await
        .expect("the old data reads to its end");
    head.extend_from_slice(&rest);
    let pairs = cairn_raft::codec::decode_snapshot(&head).expect("whole");
    assert_eq!(pairs.len(), 3000);
    let snapshots = |db: &cairndb::Db| {
        db.keyspaces()
            .into_iter()
            .filter(|n| n.starts_with("raft_snapshot"))
            .count()
    };
    assert_eq!(snapshots(&db), 2, "the old one is held");
    drop(reading);
    assert_eq!(snapshots(&db), 1, "released, the old one is dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_inside_an_install_leaves_the_old_state_or_the_new() {
    let leader_fs = MemFs::new();
    let (_log_l, mut leader) = cairn_raft::open("/leader", mem_opts(&leader_fs)).expect("open");
    let new_pairs = fill(&mut leader, 6000, 1000).await;
    let snap = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build");
    let fs = MemFs::new();
    let (log, mut sm) = cairn_raft::open("/node", mem_opts(&fs)).expect("open");
    let old_pairs = fill(&mut sm, 20, 10).await;
    // Made durable by a synced write (as the next append would).
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build");
    // An image before every sync of the install, and one after.
    let images: Arc<std::sync::Mutex<Vec<MemFs>>> = Arc::default();
    let (imgs, fs2) = (images.clone(), fs.clone());
    fs.set_hook(Some(Arc::new(move |op: &cairndb::io::OpInfo| {
        if matches!(
            op.op,
            cairndb::io::OpKind::Sync | cairndb::io::OpKind::SyncDir
        ) {
            imgs.lock()
                .expect("lock")
                .push(fs2.crash_image(Crash::Clean, op.index));
        }
    })));
    let mut receiving = sm.begin_receiving_snapshot().await.expect("begin");
    *receiving = *snap.snapshot;
    sm.install_snapshot(&snap.meta, receiving)
        .await
        .expect("install");
    fs.set_hook(None);
    images
        .lock()
        .expect("lock")
        .push(fs.crash_image(Crash::Clean, 0));
    drop((log, sm));
    let images = std::mem::take(&mut *images.lock().expect("lock"));
    assert!(images.len() > 3, "{} images", images.len());
    let (mut olds, mut news) = (0, 0);
    for (i, image) in images.iter().enumerate() {
        let (_log, mut sm) = cairn_raft::open("/node", mem_opts(image)).expect("reopen");
        let (applied, _) = sm.applied_state().await.expect("applied");
        let pairs = sm.pairs().expect("pairs");
        if applied == snap.meta.last_log_id {
            assert!(
                pairs == new_pairs,
                "image {i}: the new applied id with other data"
            );
            let current = sm
                .get_current_snapshot()
                .await
                .expect("current")
                .expect("one");
            assert_eq!(current.meta, snap.meta, "image {i}");
            news += 1;
        } else {
            assert_eq!(applied, Some(log_id(1, 1, 21)), "image {i}");
            assert!(
                pairs == old_pairs,
                "image {i}: the old applied id with other data"
            );
            olds += 1;
        }
    }
    assert!(olds > 0 && news > 0, "old {olds}, new {news}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_kept_as_one_value_moves_into_a_keyspace_on_open() {
    // Stores written before snapshot keyspaces kept the current
    // snapshot's data as one value in raft_meta.
    let dir = tempfile::tempdir().expect("dir");
    let pairs = [("a", "1"), ("b", "2")];
    let data = cairn_raft::codec::encode_snapshot(&pairs);
    let meta = openraft::SnapshotMeta::<u64, openraft::BasicNode> {
        last_log_id: Some(log_id(1, 1, 2)),
        last_membership: Default::default(),
        snapshot_id: "1-1-2-9".into(),
    };
    {
        let db = cairndb::Db::open(dir.path(), opts()).expect("open");
        let ks = db.keyspace(cairn_raft::META_KEYSPACE).expect("meta");
        ks.put("sm.snapshot.meta", serde_json::to_vec(&meta).expect("json"))
            .expect("put");
        ks.put("sm.snapshot.data", &data).expect("put");
    }
    for _ in 0..2 {
        let db = cairndb::Db::open(dir.path(), opts()).expect("open");
        let (_log, mut sm) = cairn_raft::from_db(db.clone()).expect("store");
        let mut current = sm
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("one");
        assert_eq!(current.meta, meta);
        let mut read = Vec::new();
        current.snapshot.read_to_end(&mut read).await.expect("read");
        assert_eq!(read, data);
        let ks = db.keyspace(cairn_raft::META_KEYSPACE).expect("meta");
        assert_eq!(ks.get("sm.snapshot.data").expect("get"), None, "moved");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generations_no_record_names_are_dropped_on_open() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let db = cairndb::Db::open(dir.path(), opts()).expect("open");
        let (_log, mut sm) = cairn_raft::from_db(db.clone()).expect("store");
        fill(&mut sm, 5, 3).await;
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .expect("build");
        // As a crash inside an install or a build would leave them.
        for name in ["kv.40", "raft_snapshot.41"] {
            db.keyspace(name)
                .expect("create")
                .put("x", "y")
                .expect("put");
        }
    }
    let db = cairndb::Db::open(dir.path(), opts()).expect("open");
    let (_log, mut sm) = cairn_raft::from_db(db.clone()).expect("store");
    let names = db.keyspaces();
    assert!(
        !names
            .iter()
            .any(|n| n == "kv.40" || n == "raft_snapshot.41"),
        "{names:?}"
    );
    assert_eq!(sm.pairs().expect("pairs").len(), 5);
    assert!(sm.get_current_snapshot().await.expect("current").is_some());
    // New generations are numbered past the dropped ones.
    let mut receiving = sm.begin_receiving_snapshot().await.expect("begin");
    receiving.write_all(b"x").await.expect("write");
    let names = db.keyspaces();
    assert!(names.iter().any(|n| n == "raft_snapshot.42"), "{names:?}");
}
