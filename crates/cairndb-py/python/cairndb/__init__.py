"""CairnDB, an embedded ordered transactional key-value engine, with
plyvel's API: a program written for plyvel runs after
``import cairndb as plyvel``.

See README.md beside this package's sources for what differs from plyvel.
"""

import os as _os
import shutil as _shutil

from ._errors import (  # noqa: F401
    ConflictError,
    CorruptionError,
    Error,
    IOError,
    IteratorInvalidError,
)
from ._cairndb import (  # noqa: F401
    DB,
    Iterator,
    Keyspace,
    PrefixedDB,
    RawIterator,
    Snapshot,
    Transaction,
    WriteBatch,
    __version__,
    repair_db,
)

#: plyvel reports the LevelDB library version here ('major.minor'); this is
#: the version of LevelDB's API the binding follows (the C library's
#: `leveldb_major_version`/`leveldb_minor_version` report the same).
__leveldb_version__ = "1.23"


__all__ = [
    "DB",
    "PrefixedDB",
    "WriteBatch",
    "Snapshot",
    "Iterator",
    "RawIterator",
    "Transaction",
    "Keyspace",
    "Error",
    "IOError",
    "CorruptionError",
    "IteratorInvalidError",
    "ConflictError",
    "repair_db",
    "destroy_db",
    "__version__",
    "__leveldb_version__",
]


def destroy_db(name):
    """Deletes the database at ``name`` and its directory (plyvel's
    ``destroy_db``). A missing directory is not an error. The database is
    opened first (``create_if_missing=False``) and closed, so that a
    directory that is not a CairnDB database, or one open in another
    handle, raises ``cairndb.Error`` and is left alone.
    """
    path = _os.fsdecode(name)
    if not _os.path.exists(path):
        return
    DB(path, create_if_missing=False).close()
    _shutil.rmtree(path)
