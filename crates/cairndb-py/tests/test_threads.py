"""Threads: concurrent writers and readers, one iterator shared by
several threads, and closing the database while iterators are open in
other threads (they must raise RuntimeError, never crash)."""

import threading

import pytest

from conftest import MODULE


def run_threads(n, target):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_concurrent_writers_and_readers(db):
    def work(i):
        for j in range(500):
            key = b"t%d-%04d" % (i, j)
            db.put(key, key * 3)
            assert db.get(key) == key * 3
            if j % 50 == 0:
                with db.write_batch() as wb:
                    wb.put(b"batch-%d-%d" % (i, j), b"x")
                sum(1 for _ in db.iterator(prefix=b"t%d-" % i))

    run_threads(4, work)
    assert sum(1 for _ in db.iterator(prefix=b"t")) == 4 * 500


@pytest.mark.skipif(MODULE != "cairndb", reason="plyvel's iterators are not thread-safe")
def test_one_iterator_shared_by_threads(db):
    with db.write_batch() as wb:
        for i in range(2000):
            wb.put(b"%05d" % i, b"v")
    it = db.iterator(include_value=False)
    seen = [[] for _ in range(4)]

    def work(i):
        for k in it:
            seen[i].append(k)

    run_threads(4, work)
    got = sorted(k for part in seen for k in part)
    assert got == [b"%05d" % i for i in range(2000)]


def test_snapshot_shared_by_threads(db):
    for i in range(100):
        db.put(b"%03d" % i, b"old")
    snap = db.snapshot()

    def writer(_):
        for i in range(100):
            db.put(b"%03d" % i, b"new")

    def reader(_):
        for _ in range(5):
            assert all(v == b"old" for _, v in snap.iterator())
            assert snap.get(b"050") == b"old"

    run_threads(1, writer)
    run_threads(3, reader)
    snap.close()


@pytest.mark.skipif(MODULE != "cairndb", reason="plyvel may crash here")
def test_close_while_threads_iterate(mod, tmp_path):
    db = mod.DB(str(tmp_path / "db"), create_if_missing=True)
    with db.write_batch() as wb:
        for i in range(20000):
            wb.put(b"%06d" % i, b"v" * 50)
    started = threading.Barrier(5)
    outcomes = []

    def work(i):
        it = db.iterator() if i % 2 else db.snapshot().iterator(reverse=True)
        raw = db.raw_iterator()
        raw.seek_to_first()
        started.wait()
        try:
            n = 0
            while True:
                next(it)
                raw.next()
                n += 1
        except RuntimeError:
            outcomes.append("closed")
        except StopIteration:
            outcomes.append("done")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    db.close()
    for t in threads:
        t.join()
    assert len(outcomes) == 4
    assert set(outcomes) <= {"closed", "done"}, outcomes
    # The directory is free again.
    db2 = mod.DB(str(tmp_path / "db"))
    assert db2.get(b"000001") == b"v" * 50
    db2.close()


@pytest.mark.skipif(MODULE != "cairndb", reason="CairnDB: iterators keep the db alive")
def test_iterator_outliving_its_db_object(mod, tmp_path):
    import gc

    db = mod.DB(str(tmp_path / "db"), create_if_missing=True)
    db.put(b"a", b"1")
    it = db.iterator()
    del db
    gc.collect()
    assert next(it) == (b"a", b"1")
    it.close()
    del it
    gc.collect()
    db = mod.DB(str(tmp_path / "db"))  # the engine closed with its last user
    db.close()


def test_gil_is_released_during_writes(db):
    # Synced writes wait for the device; with the GIL released, a pure
    # Python thread keeps running meanwhile.
    stop = threading.Event()
    ticks = []

    def spin():
        while not stop.is_set():
            ticks.append(1)

    t = threading.Thread(target=spin)
    t.start()
    for i in range(50):
        db.put(b"s%d" % i, b"x" * 100, sync=True)
    stop.set()
    t.join()
    assert len(ticks) > 0
