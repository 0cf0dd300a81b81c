"""CairnDB's extras: transactions, keyspaces, stats."""

import pytest

from conftest import MODULE, fill

pytestmark = pytest.mark.skipif(MODULE != "cairndb", reason="CairnDB extras")


def test_transaction_commits(db):
    db.put(b"a", b"1")
    with db.transaction() as txn:
        assert txn.get(b"a") == b"1"
        txn.put(b"b", b"2")
        txn.delete(b"a")
        assert txn.get(b"b") == b"2"  # its own writes
        assert txn.get(b"a") is None
        assert txn.get(b"a", b"d") == b"d"
        assert db.get(b"b") is None  # not before commit
        assert list(txn.iterator(include_value=False)) == [b"b"]
    assert db.get(b"b") == b"2" and db.get(b"a") is None


def test_transaction_rolls_back_on_exception(db):
    with pytest.raises(KeyError):
        with db.transaction() as txn:
            txn.put(b"a", b"1")
            raise KeyError("x")
    assert db.get(b"a") is None


def test_transaction_explicit_and_ended(db):
    txn = db.transaction(sync=True)
    txn.put(b"a", b"1")
    txn.commit()
    assert db.get(b"a") == b"1"
    with pytest.raises(RuntimeError):
        txn.put(b"b", b"2")
    txn.rollback()  # no-op once ended
    txn2 = db.transaction()
    txn2.put(b"c", b"3")
    txn2.rollback()
    assert db.get(b"c") is None


def test_transaction_conflict(mod, db):
    t1 = db.transaction()
    t2 = db.transaction()
    t1.get_for_update(b"counter")
    t2.put(b"counter", b"2")
    t2.commit()
    t1.put(b"counter", b"1")
    with pytest.raises(mod.ConflictError):
        t1.commit()
    assert db.get(b"counter") == b"2"


def test_transaction_iterator(db):
    fill(db, 5)
    with db.transaction() as txn:
        txn.put(b"k015", b"mine")
        txn.delete(b"k02")
        got = list(txn.iterator(start=b"k01", stop=b"k04"))
        assert got == [(b"k01", b"v1"), (b"k015", b"mine"), (b"k03", b"v3")]
        assert list(txn.iterator(prefix=b"k00", include_key=False)) == [b"v0"]
        with pytest.raises(ValueError):
            txn.iterator(reverse=True)


def test_keyspaces(mod, db):
    users = db.keyspace("users")
    assert users.name == "users"
    users.put(b"alice", b"1")
    db.put(b"alice", b"default")
    assert users.get(b"alice") == b"1"
    assert db.get(b"alice") == b"default"
    assert list(users.iterator()) == [(b"alice", b"1")]
    with users.write_batch() as wb:
        wb.put(b"bob", b"2")
    snap = users.snapshot()
    users.delete(b"alice")
    assert snap.get(b"alice") == b"1"
    assert list(users.iterator(include_value=False)) == [b"bob"]
    assert "users" in db.keyspaces()
    assert db.drop_keyspace("users") is True
    assert db.drop_keyspace("users") is False
    with pytest.raises(mod.Error):
        users.get(b"bob")
    assert db.keyspace("users").get(b"bob") is None


def test_keyspaces_survive_reopen(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    db.keyspace("ks").put(b"k", b"v")
    db.close()
    db = mod.DB(path)
    assert db.keyspace("ks").get(b"k") == b"v"
    db.close()


def test_stats_and_flush(db):
    fill(db, 100)
    db.flush()
    s = db.stats()
    assert isinstance(s, dict)
    assert s["flushes"] >= 1
    assert s["last_seqno"] >= 100
    assert sum(s["tables_per_level"]) >= 1


def test_db_context_manager(mod, tmp_path):
    with mod.DB(str(tmp_path / "db"), create_if_missing=True) as db:
        db.put(b"a", b"1")
    assert db.closed
