"""The exceptions of cairndb, as plyvel defines them.

The native module raises these by name; they live in Python because
``IOError`` derives from two classes (this module's ``Error`` and the
built-in ``IOError``, which is ``OSError``), as plyvel's does.
"""


class Error(Exception):
    """Base of cairndb's own errors (plyvel's ``plyvel.Error``)."""


class IOError(Error, IOError):  # noqa: A001 - plyvel's name, on purpose
    """The operating system refused an operation (CairnDB's ``Error::Io``)."""


class CorruptionError(Error):
    """Stored bytes do not match their checksum or format."""


class IteratorInvalidError(Error):
    """A ``RawIterator`` was read or moved while not positioned on an entry."""


class ConflictError(Error):
    """A transaction lost to a concurrent commit and wrote nothing (a CairnDB
    extra); run it again."""
