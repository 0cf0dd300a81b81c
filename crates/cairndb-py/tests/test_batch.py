import pytest

from conftest import cairndb_only


def test_write_batch(db):
    db.put(b"gone", b"x")
    wb = db.write_batch()
    wb.put(b"a", b"1")
    wb.put(b"b", b"2")
    wb.delete(b"gone")
    assert db.get(b"a") is None  # nothing before write()
    wb.write()
    assert db.get(b"a") == b"1" and db.get(b"b") == b"2" and db.get(b"gone") is None


def test_clear(db):
    wb = db.write_batch()
    wb.put(b"a", b"1")
    wb.clear()
    wb.put(b"b", b"2")
    wb.write()
    assert db.get(b"a") is None and db.get(b"b") == b"2"


def test_later_ops_in_a_batch_win(db):
    with db.write_batch() as wb:
        wb.put(b"k", b"1")
        wb.delete(b"k")
        wb.put(b"j", b"1")
        wb.put(b"j", b"2")
    assert db.get(b"k") is None and db.get(b"j") == b"2"


def test_context_manager_writes(db):
    with db.write_batch(sync=True) as wb:
        wb.put(b"a", b"1")
    assert db.get(b"a") == b"1"


def test_exception_without_transaction_still_writes(db):
    with pytest.raises(ZeroDivisionError):
        with db.write_batch() as wb:
            wb.put(b"a", b"1")
            1 / 0
    assert db.get(b"a") == b"1"


def test_exception_with_transaction_discards(db):
    with pytest.raises(ZeroDivisionError):
        with db.write_batch(transaction=True) as wb:
            wb.put(b"a", b"1")
            1 / 0
    assert db.get(b"a") is None


def test_batch_refuses_str(db):
    wb = db.write_batch()
    with pytest.raises(TypeError):
        wb.put("a", b"1")
    with pytest.raises(TypeError):
        wb.delete("a")


def test_batch_after_close_raises(mod, tmp_path):
    db = mod.DB(str(tmp_path / "db"), create_if_missing=True)
    wb = db.write_batch()
    wb.put(b"a", b"1")
    db.close()
    with pytest.raises(RuntimeError):
        wb.write()
    with pytest.raises(RuntimeError):
        wb.put(b"b", b"2")


@cairndb_only
def test_batch_extras(db):
    wb = db.write_batch()
    wb.put(b"a", b"12")
    wb.delete(b"b")
    assert len(wb) == 2
    assert wb.approximate_size() == 4
    other = db.write_batch()
    other.put(b"c", b"3")
    wb.append(other)
    wb.write()
    assert db.get(b"c") == b"3"
