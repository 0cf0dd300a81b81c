"""Fixtures. The tests are written against plyvel's API; with
CAIRNDB_TEST_MODULE=plyvel they run against plyvel itself (tests of
CairnDB's extras and of its documented differences are skipped then),
which is how their expectations were checked against the original.
"""

import importlib
import os

import pytest

MODULE = os.environ.get("CAIRNDB_TEST_MODULE", "cairndb")


@pytest.fixture(scope="session")
def mod():
    return importlib.import_module(MODULE)


@pytest.fixture
def db(mod, tmp_path):
    d = mod.DB(str(tmp_path / "db"), create_if_missing=True)
    yield d
    d.close()


def cairndb_only(fn):
    """Marks a test of something plyvel does not have or does differently."""
    return pytest.mark.skipif(MODULE != "cairndb", reason="CairnDB extra")(fn)


def fill(db, n=10, fmt=b"k%02d"):
    for i in range(n):
        db.put(fmt % i, b"v%d" % i)
