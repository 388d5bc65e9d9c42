"""zarrcoro's error family, as Python exceptions.

Every error the engine raises is a ZarrcoroError naming the store key and
the metadata field (or parameter) involved; each kind is also the builtin
exception a Python caller would expect, so ``except ValueError`` works too.
"""


class ZarrcoroError(Exception):
    """An engine error: ``key`` (store key), ``field`` (metadata field or
    parameter), ``detail`` (the message without them)."""

    def __init__(self, message, key="", field="", detail=""):
        super().__init__(message)
        self.key = key
        self.field = field
        self.detail = detail or message


class InvalidMetadata(ZarrcoroError, ValueError):
    """A metadata document is malformed or violates the spec."""


class UnsupportedError(ZarrcoroError, NotImplementedError):
    """A valid codec, data type or extension the engine does not support."""


class CorruptChunk(ZarrcoroError, ValueError):
    """A stored chunk cannot be decoded (checksum, size, framing)."""


class StoreError(ZarrcoroError, OSError):
    """The store failed (OS or network error)."""


class NotFound(ZarrcoroError, FileNotFoundError):
    """No metadata document where one is required."""


class Cancelled(ZarrcoroError):
    """The operation was cancelled."""


class InvalidArgument(ZarrcoroError, ValueError):
    """A caller error: a selection out of bounds, a wrong buffer, a bad key or
    a closed runtime."""


class AlreadyExists(ZarrcoroError, FileExistsError):
    """create: a node exists where one is to be created."""


class InvalidIndex(InvalidArgument, IndexError):
    """A selection that is not NumPy basic indexing (integers, slices,
    Ellipsis) or is out of bounds: an InvalidArgument (field "selection")
    that is also the IndexError NumPy raises."""

    def __init__(self, message, key="", field="selection", detail=""):
        super().__init__(message, key, field, detail)


# The engine's names of the kinds (zarrcoro::to_string(Errc)).
BY_ENGINE_NAME = {
    "invalid metadata": InvalidMetadata,
    "unsupported": UnsupportedError,
    "corrupt chunk": CorruptChunk,
    "store I/O error": StoreError,
    "not found": NotFound,
    "cancelled": Cancelled,
    "invalid argument": InvalidArgument,
    "already exists": AlreadyExists,
}
