import os

import pytest

from conftest import cairndb_only, fill


def test_put_get_delete(db):
    assert db.get(b"missing") is None
    assert db.get(b"missing", b"dflt") == b"dflt"
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    db.put(b"k", b"v2", sync=True)
    assert db.get(b"k", verify_checksums=True, fill_cache=False) == b"v2"
    db.delete(b"k")
    assert db.get(b"k") is None
    db.delete(b"never-there")


def test_empty_and_binary_keys(db):
    db.put(b"", b"empty key")
    db.put(b"\x00\xff", b"\x00" * 1000)
    assert db.get(b"") == b"empty key"
    assert db.get(b"\x00\xff") == b"\x00" * 1000


def test_str_is_refused(db):
    with pytest.raises(TypeError):
        db.put("key", b"v")
    with pytest.raises(TypeError):
        db.put(b"key", "v")
    with pytest.raises(TypeError):
        db.get("key")
    with pytest.raises(TypeError):
        db.delete("key")
    with pytest.raises(TypeError):
        db.put(None, b"v")


@cairndb_only
def test_bytes_like_arguments(db):
    db.put(bytearray(b"ba"), memoryview(b"mv"))
    assert db.get(memoryview(b"ba")) == b"mv"
    db.delete(bytearray(b"ba"))
    assert db.get(b"ba") is None


def test_large_values(db):
    big = bytes(range(256)) * 4096  # 1 MiB: stored apart from the key
    db.put(b"big", big)
    assert db.get(b"big") == big


def test_reopen_keeps_data(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    fill(db, 100)
    db.put(b"synced", b"yes", sync=True)
    db.close()
    db = mod.DB(path)
    assert db.get(b"k42") == b"v42"
    assert db.get(b"synced") == b"yes"
    db.close()


def test_open_options(mod, tmp_path):
    path = str(tmp_path / "db")
    with pytest.raises(mod.Error):
        mod.DB(path)  # create_if_missing defaults to False, as in plyvel
    db = mod.DB(
        path,
        create_if_missing=True,
        paranoid_checks=True,
        write_buffer_size=1 << 20,
        max_open_files=100,
        lru_cache_size=1 << 20,
        block_size=4096,
        block_restart_interval=16,
        max_file_size=2 << 20,
        compression=None,
        bloom_filter_bits=10,
    )
    db.put(b"a", b"b")
    db.close()
    with pytest.raises(mod.Error):
        mod.DB(path, error_if_exists=True)
    with pytest.raises(ValueError):
        mod.DB(path, compression="gzip")


@cairndb_only
def test_custom_comparator_is_refused(mod, tmp_path):
    with pytest.raises(NotImplementedError, match="bytewise"):
        mod.DB(
            str(tmp_path / "db"),
            create_if_missing=True,
            comparator=lambda a, b: 0,
            comparator_name=b"Nope",
        )
    with pytest.raises(NotImplementedError, match="bytewise"):
        mod.DB(
            str(tmp_path / "db"),
            create_if_missing=True,
            comparator=lambda a, b: (a.lower() > b.lower()) - (a.lower() < b.lower()),
            comparator_name=b"CaseInsensitive",
        )


def test_a_comparator_needs_its_name(mod, tmp_path):
    with pytest.raises(ValueError):
        mod.DB(str(tmp_path / "db"), comparator=None, comparator_name=b"invalid")


@cairndb_only
def test_a_bytewise_comparator_under_any_name_is_accepted(mod, tmp_path):
    db = mod.DB(
        str(tmp_path / "db"),
        create_if_missing=True,
        comparator=lambda a, b: (a > b) - (a < b),
        comparator_name=b"MyBytewise",
    )
    db.put(b"b", b"2")
    db.put(b"a", b"1")
    assert list(db) == [(b"a", b"1"), (b"b", b"2")]
    db.close()


def test_second_handle_is_refused(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    with pytest.raises(mod.IOError) as info:
        mod.DB(path)
    assert isinstance(info.value, mod.Error)
    assert isinstance(info.value, IOError)
    db.close()


def test_exception_classes(mod):
    assert issubclass(mod.IOError, mod.Error)
    assert issubclass(mod.IOError, OSError)
    assert issubclass(mod.CorruptionError, mod.Error)
    assert issubclass(mod.Error, Exception)


def test_name_closed_close(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    assert db.name == path
    assert not db.closed
    db.close()
    assert db.closed
    db.close()  # twice is fine
    for call in (
        lambda: db.get(b"k"),
        lambda: db.put(b"k", b"v"),
        lambda: db.delete(b"k"),
        lambda: db.iterator(),
        lambda: db.write_batch(),
        lambda: db.snapshot(),
        lambda: db.get_property(b"leveldb.stats"),
    ):
        with pytest.raises(RuntimeError):
            call()
    assert "closed" in repr(db)


def test_version_strings(mod):
    assert isinstance(mod.__version__, str)
    assert isinstance(mod.__leveldb_version__, str)
    assert mod.__leveldb_version__.count(".") == 1
    assert mod.__leveldb_version__.startswith("1.")


def test_get_property(db):
    fill(db, 50)
    stats = db.get_property(b"leveldb.stats")
    assert isinstance(stats, bytes) and b"Level" in stats
    assert db.get_property(b"leveldb.num-files-at-level0").isdigit()
    assert isinstance(db.get_property(b"leveldb.sstables"), bytes)
    assert db.get_property(b"leveldb.approximate-memory-usage").isdigit()
    assert db.get_property(b"no.such.property") is None
    with pytest.raises(TypeError):
        db.get_property("leveldb.stats")


def test_compact_range_and_sizes(db):
    for i in range(200):
        db.put(b"a%04d" % i, b"x" * 100)
    db.compact_range()
    db.compact_range(start=b"a0010", stop=b"a0020")
    assert db.get(b"a0150") == b"x" * 100
    size = db.approximate_size(b"a", b"b")
    assert size > 0
    sizes = db.approximate_sizes((b"a", b"b"), (b"x", b"y"), (b"a0000", b"a0100"))
    assert len(sizes) == 3
    assert sizes[1] == 0
    assert 0 < sizes[2] <= sizes[0]
    with pytest.raises(TypeError):
        db.approximate_sizes(("a", "b"))


@cairndb_only
def test_approximate_size_counts_live_bytes(db):
    for i in range(100):
        db.put(b"a%04d" % i, b"x" * 100)
    assert db.approximate_size(b"a", b"b") == 100 * (5 + 100)


def test_repair_db_rebuilds_a_deleted_manifest(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    for i in range(500):
        db.put(b"k%04d" % i, b"v%d" % i)
    db.compact_range()
    db.put(b"late", b"write", sync=True)
    db.close()
    for name in os.listdir(path):
        if name.startswith("MANIFEST-") or name == "CURRENT":
            os.remove(os.path.join(path, name))
    with pytest.raises(mod.Error):
        mod.DB(path)
    mod.repair_db(path)
    db = mod.DB(path)
    assert db.get(b"late") == b"write"
    assert [k for k, _ in db] == sorted([b"k%04d" % i for i in range(500)] + [b"late"])
    assert db.get(b"k0042") == b"v42"
    db.close()


@cairndb_only
def test_repair_db_refuses_an_open_or_missing_database(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    db.put(b"k", b"v")
    with pytest.raises(mod.IOError, match="LOCK"):
        mod.repair_db(path)
    db.close()
    mod.repair_db(path)
    db = mod.DB(path)
    assert db.get(b"k") == b"v"
    db.close()
    with pytest.raises(mod.Error, match="nothing to repair"):
        mod.repair_db(str(tmp_path / "missing"))


def test_destroy_db(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    db.put(b"k", b"v")
    db.close()
    mod.destroy_db(path)
    with pytest.raises(mod.Error):
        mod.DB(path)
    db = mod.DB(path, create_if_missing=True)
    assert db.get(b"k") is None
    db.close()
    mod.destroy_db(str(tmp_path / "never-created"))


@cairndb_only
def test_destroy_db_refuses_an_open_database(mod, tmp_path):
    path = str(tmp_path / "db")
    db = mod.DB(path, create_if_missing=True)
    with pytest.raises(mod.IOError):
        mod.destroy_db(path)
    db.put(b"still", b"here")
    assert db.get(b"still") == b"here"
    db.close()


def test_prefixed_db(db):
    a = db.prefixed_db(b"a/")
    b = a.prefixed_db(b"b/")
    assert a.prefix == b"a/" and b.prefix == b"a/b/"
    assert a.db is db and b.db is db
    a.put(b"k1", b"1")
    a.put(b"k2", b"2")
    b.put(b"k3", b"3")
    db.put(b"z", b"outside")
    assert db.get(b"a/k1") == b"1"
    assert db.get(b"a/b/k3") == b"3"
    assert a.get(b"k2") == b"2" and a.get(b"z") is None
    assert list(a.iterator()) == [(b"b/k3", b"3"), (b"k1", b"1"), (b"k2", b"2")]
    assert list(b) == [(b"k3", b"3")]
    assert list(a.iterator(start=b"k", include_value=False)) == [b"k1", b"k2"]
    assert list(a.iterator(prefix=b"k", reverse=True, include_value=False)) == [b"k2", b"k1"]
    it = a.iterator(include_value=False)
    it.seek(b"k2")
    assert next(it) == b"k2"
    a.delete(b"k1")
    assert a.get(b"k1") is None
    with a.write_batch() as wb:
        wb.put(b"w", b"batched")
        wb.delete(b"k2")
    assert db.get(b"a/w") == b"batched" and db.get(b"a/k2") is None
    snap = a.snapshot()
    a.put(b"w", b"changed")
    assert snap.get(b"w") == b"batched"
    assert list(snap.iterator(include_value=False)) == [b"b/k3", b"w"]
    with pytest.raises(TypeError):
        db.prefixed_db("str")


def test_prefixed_db_of_ff_prefix(db):
    p = db.prefixed_db(b"\xff\xff")
    p.put(b"x", b"1")
    db.put(b"\xfe", b"below")
    assert list(p) == [(b"x", b"1")]


@cairndb_only
def test_damaged_table_raises_corruption_error(mod, tmp_path):
    import os

    path = tmp_path / "db"
    db = mod.DB(str(path), create_if_missing=True, compression=None)
    for i in range(1000):
        db.put(b"k%05d" % i, b"v" * 50)
    db.flush()
    db.close()
    (table,) = [f for f in os.listdir(path) if f.endswith(".table")]
    with open(path / table, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(mod.CorruptionError):
        db = mod.DB(str(path))
        try:
            for _ in db.iterator():
                pass
        finally:
            db.close()


def test_reopen_under_another_comparator_is_refused(mod, tmp_path):
    path = str(tmp_path / "db")

    def cmp(a, b):
        return (a > b) - (a < b)

    db = mod.DB(path, create_if_missing=True, comparator=cmp, comparator_name=b"MyBytewise")
    db.put(b"k", b"v")
    db.close()
    # No comparator means LevelDB's bytewise one: another name.
    with pytest.raises(mod.Error):
        mod.DB(path)
    with pytest.raises(mod.Error):
        mod.DB(path, comparator=cmp, comparator_name=b"Other")
    db = mod.DB(path, comparator=cmp, comparator_name=b"MyBytewise")
    assert db.get(b"k") == b"v"
    db.close()
