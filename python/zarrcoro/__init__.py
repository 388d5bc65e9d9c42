"""zarrcoro: Zarr v2 and v3 arrays on zarrcoro's C++ engine.

Store I/O runs on the engine's io_context and codec work on its own thread
pool, in batches; Python waits for neither: blocking calls release the GIL,
and ``await arr.read_async(...)`` completes an asyncio future once per call
through the running loop (``call_soon_threadsafe``), never through a thread
per call or per chunk. Cancelling the awaiting task cancels the operation.

    import zarrcoro
    a = zarrcoro.create_array("data.zarr", shape=(100, 100), chunks=(10, 10), dtype="float32")
    a[:10, :] = 1.5
    a[5, ::2]            # NumPy basic indexing
    b = zarrcoro.open_array("data.zarr")
    await b.read_async(np.s_[:, 3])

Stores are named by URL: a local path, ``file://``, ``http(s)://``
(read-only), ``s3://bucket/prefix`` (``storage_options``: endpoint, region,
access_key_id, secret_access_key, session_token) or ``memory://name`` (one
store per name for the runtime's life).
"""
import ast
import asyncio
import atexit
import json
import math
import operator

import numpy as np

from . import _zarrcoro
from . import errors
from ._selection import is_contiguous, normalize, write_layout
from .errors import (AlreadyExists, Cancelled, CorruptChunk, InvalidArgument, InvalidIndex, InvalidMetadata,
                     NotFound, StoreError, UnsupportedError, ZarrcoroError)

_zarrcoro._set_error_classes(errors.BY_ENGINE_NAME)

__all__ = [
    "Runtime", "Array", "Group", "open_array", "create_array", "open_group", "create_group", "default_runtime",
    "ZarrcoroError", "InvalidMetadata", "UnsupportedError", "CorruptChunk", "StoreError", "NotFound", "Cancelled",
    "InvalidArgument", "InvalidIndex", "AlreadyExists",
]


class Runtime:
    """The engine: an io_context for store I/O and a codec thread pool.

    ``codec_threads`` 0 means one per core. ``close()`` refuses new
    operations at once (InvalidArgument); the threads end when the last
    array or group opened through the runtime is gone. Thread-safe.
    """

    def __init__(self, codec_threads=0, io_threads=1, max_inflight_bytes=0, max_inflight_requests=0):
        limits = {"codec_threads": codec_threads, "io_threads": io_threads, "max_inflight_bytes": max_inflight_bytes,
                  "max_inflight_requests": max_inflight_requests}
        for name, value in limits.items():
            _ints([value], name)
        self._native = _zarrcoro.Runtime(codec_threads, io_threads, max_inflight_bytes, max_inflight_requests)

    def close(self):
        """Refuses new operations from now on (InvalidArgument, field
        "runtime"); those in flight finish. Idempotent."""
        self._native.close()

    @property
    def closed(self):
        """True after close()."""
        return self._native.closed

    @property
    def codec_threads(self):
        """The codec pool's thread count (InvalidArgument once closed)."""
        return self._native.codec_threads

    def stats(self):
        """Engine counters: pool submissions, inline batches, chunks, codec calls
        (and those on an I/O thread, which stays 0)."""
        return self._native.stats()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_default = None


def default_runtime():
    """The process's shared Runtime, made on first use. Thread-safe (two
    threads racing at first use may each make one; one is kept)."""
    global _default
    if _default is None or _default.closed:
        _default = Runtime()
    return _default


@atexit.register
def _drain_completions():
    # Before the interpreter finalizes: an engine thread still completing an
    # operation into Python (its asyncio future) would be ended there by
    # Python when it takes the GIL back, which aborts the process.
    _zarrcoro._drain_completions()


@atexit.register
def _drop_default_runtime():
    # Let the shared Runtime go at exit, before the interpreter tears modules
    # down in an order nanobind reports as leaks (seen in Dask's processes);
    # arrays still open keep it as long as they need it.
    global _default
    _default = None


def _numpy_dtype(native):
    kind = native.dtype_kind
    if kind == "string":
        return np.dtypes.StringDType() if hasattr(np, "dtypes") and hasattr(np.dtypes, "StringDType") else np.dtype(object)
    if kind == "bytes":
        return np.dtype(object)
    descr = native.npy_descr  # the in-memory layout (native byte order), as .npy headers spell it
    return np.dtype(ast.literal_eval(descr) if descr.startswith("[") else descr)


class _Node:
    """What arrays and groups share: the native handle, the runtime, and what
    reopens them (store URL, options, mode)."""

    def __init__(self, native, runtime, url, storage_options, mode):
        self._native = native
        self._runtime = runtime
        self._url = url
        self._storage_options = storage_options
        self._mode = mode

    def _with(self, native):
        return type(self)(native, self._runtime, self._url, self._storage_options, self._mode)

    @property
    def path(self):
        return self._native.path

    @property
    def zarr_format(self):
        return self._native.zarr_format

    @property
    def attrs(self):
        return json.loads(self._native.attributes)

    def update_attributes(self, attributes):
        """Replaces the attributes (a dict of JSON values: InvalidArgument,
        field "attributes", otherwise); returns the node as it is then. The
        write is conditional on the document this handle read
        (InvalidArgument if another writer replaced it since)."""
        return self._with(self._native.set_attributes(_json(attributes, "attributes")))


class Array(_Node):
    """A Zarr array. Index it as a NumPy array (basic indexing: integers,
    slices with steps, Ellipsis) to read and write; ``read_async`` and
    ``write_async`` await the same from asyncio. A cheap handle: methods may
    be called from any thread at once. Pickles as what reopens it."""

    def __init__(self, native, runtime, url, storage_options, mode):
        super().__init__(native, runtime, url, storage_options, mode)
        self.dtype = _numpy_dtype(native)
        self._shape = tuple(native.shape)  # a handle's shape is fixed: resize gives a new handle
        self._strings = native.dtype_kind != "fixed"

    # -- description
    @property
    def shape(self):
        """Elements per dimension, as a tuple (as when this handle was opened)."""
        return self._shape

    @property
    def chunks(self):
        """The chunk grid's shape: with sharding, the shard shape (the unit
        of a store write, where Dask chunks best align)."""
        return tuple(self._native.chunks)

    @property
    def ndim(self):
        """len(shape)."""
        return len(self.shape)

    @property
    def size(self):
        """The number of elements."""
        return math.prod(self.shape)

    @property
    def metadata(self):
        """The array's metadata document (v3 zarr.json, v2 .zarray) as a dict."""
        return json.loads(self._native.metadata)

    @property
    def fill_value(self):
        """What missing chunks read as: a scalar of the dtype, a str or bytes
        (a v2 null fill reads as zeros, and metadata["fill_value"] is None)."""
        raw = self._native.fill_value_bytes
        if self._is_strings():
            return raw.decode() if self._native.dtype_kind == "string" else raw
        return np.frombuffer(raw, self.dtype)[0] if raw else self.dtype.type(0)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self):
        return "<zarrcoro.Array %r shape=%s dtype=%s chunks=%s>" % (self._url + "/" + self.path, self.shape,
                                                                    self.dtype, self.chunks)

    def __reduce__(self):
        return (open_array, (self._url, self.path, self._mode, self._storage_options))

    # -- reading
    def _is_strings(self):
        return self._strings

    def _strings_array(self, values, box, local):
        out = np.empty(len(values), self.dtype)
        if out.size:
            out[:] = values
        return out.reshape(box)[local]

    def __getitem__(self, key):
        """``self[key]``: a NumPy array (a scalar for integers on every axis),
        as NumPy's basic indexing of the stored array gives it. Raises
        InvalidIndex (an IndexError) for other indices or out-of-range ones;
        CorruptChunk, StoreError from the store. Releases the GIL while the
        engine reads; thread-safe."""
        start, stop, local, shape = normalize(key, self.shape)
        box = tuple(b - a for a, b in zip(start, stop))
        if self._is_strings():
            values = self._native.read_strings(start, stop) if math.prod(box) else []
            return self._strings_array(values, box, local)
        out = np.empty(box, self.dtype)
        if out.size:
            self._native.read_into(start, stop, out)
        return out[local] if shape != box or not is_contiguous(local) else out.reshape(shape)

    def read(self, selection=Ellipsis):
        """``self[selection]``."""
        return self[selection]

    def read_into(self, out, selection=Ellipsis):
        """Reads ``self[selection]`` (a box: no steps) into ``out``, a
        C-contiguous, writeable ndarray of the selection's shape and the
        array's dtype (InvalidArgument, field "out", otherwise; InvalidIndex
        for a selection with steps). Returns ``out``. Numbers only."""
        start, stop, local, shape = normalize(selection, self.shape)
        if not is_contiguous(local):
            raise InvalidIndex("read_into takes a selection without steps")
        if self._is_strings():
            raise InvalidArgument("read_into reads numbers; index a string array instead", field="out")
        self._check_buffer(out, shape, "out")
        if out.size:
            self._native.read_into(start, stop, out.reshape(-1))
        return out

    async def read_async(self, selection=Ellipsis):
        """``self[selection]``, awaited: the engine completes it through the
        running loop once (no thread per call); cancelling the task cancels
        the read. Strings too. Raises what ``self[selection]`` raises."""
        start, stop, local, shape = normalize(selection, self.shape)
        box = tuple(b - a for a, b in zip(start, stop))
        if self._is_strings():
            values = await self._await(self._native.read_strings_async, start, stop) if math.prod(box) else []
            return self._strings_array(values, box, local)
        out = np.empty(box, self.dtype)
        if out.size:
            await self._await(self._native.read_into_async, start, stop, out.reshape(-1))
        return out[local] if not is_contiguous(local) else out.reshape(shape)

    async def write_async(self, selection, value):
        """``self[selection] = value``, awaited (as read_async); the same
        selections, values and errors as assignment."""
        self._check_writable()
        plan = self._prepare_write(selection, value)
        if plan is None:
            return
        start, stop, data, starts, stops = plan
        strings = self._is_strings()
        if starts is not None:
            op = self._native.write_strings_slabs_async if strings else self._native.write_slabs_async
            await self._await(op, starts, stops, data)
        elif strings:
            await self._await(self._native.write_strings_slabs_async, np.asarray([start], np.uint64),
                              np.asarray([stop], np.uint64), data)
        else:
            await self._await(self._native.write_async, start, stop, data)

    async def _await(self, start_op, *args):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        op = start_op(*args, loop, future)
        future.add_done_callback(lambda f: op.cancel() if f.cancelled() else None)
        return await future

    # -- writing
    def _check_writable(self):
        if self._mode == "r":
            raise InvalidArgument("the array was opened read-only (mode='r')", field="mode")

    def _prepare_write(self, selection, value):
        """None when nothing is selected, else (start, stop, data, starts,
        stops): the box, and the data in C order (an array of the array's
        dtype, or a list of str / bytes) for it or, with starts / stops (see
        write_layout), for its slabs in turn."""
        start, stop, local, shape = normalize(selection, self.shape)
        strings = self._is_strings()
        try:
            data = np.broadcast_to(np.asarray(value, dtype=object if strings else self.dtype), shape)
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidArgument("cannot write %s to a selection of shape %s and dtype %s: %s" % (
                getattr(value, "shape", type(value).__name__), shape, self.dtype, e), field="value") from None
        if not data.size:
            return None
        counts, stepped, starts, stops = write_layout(start, stop, local)
        axes = [s for s in local if isinstance(s, slice)]  # one per axis of the selection
        data = data[tuple(slice(None, None, -1) if s.step is not None and s.step < 0 else slice(None)
                          for s in axes) + (Ellipsis,)].reshape(counts)  # (an array even when 0-d)
        if stepped:
            data = np.moveaxis(data, stepped, range(len(stepped)))
        data = data.reshape(-1)
        return start, stop, data.tolist() if strings else np.ascontiguousarray(data), starts, stops

    def __setitem__(self, selection, value):
        """``self[selection] = value``: NumPy basic indexing (integers,
        slices with any step, Ellipsis); ``value`` is broadcast to the
        selection and cast as NumPy casts on assignment (str or bytes for
        string arrays). A slice with a step other than 1 and -1 writes one
        box per selected index along that axis: elements between are left
        as they are, also against concurrent writers. Raises InvalidIndex
        (an IndexError), InvalidArgument (field "value": a value that does
        not cast or broadcast; field "mode": opened with mode "r"; field
        "runtime": a closed runtime), StoreError. Thread-safe; writes to
        one chunk land whole, in some order."""
        self._check_writable()
        plan = self._prepare_write(selection, value)
        if plan is None:
            return
        start, stop, data, starts, stops = plan
        strings = self._is_strings()
        if starts is not None:
            (self._native.write_strings_slabs if strings else self._native.write_slabs)(starts, stops, data)
        elif strings:
            self._native.write_strings(start, stop, data)
        else:
            self._native.write(start, stop, data)

    def _check_buffer(self, buf, shape, what):
        if not isinstance(buf, np.ndarray) or buf.dtype != self.dtype or tuple(buf.shape) != tuple(shape):
            raise InvalidArgument("%s must be an ndarray of shape %s and dtype %s, got %s" % (
                what, tuple(shape), self.dtype, getattr(buf, "shape", type(buf).__name__)), field=what)
        if not buf.flags.c_contiguous or not buf.flags.writeable:
            raise InvalidArgument("%s must be C-contiguous and writeable" % what, field=what)

    def resize(self, shape):
        """Changes the shape (same rank, non-negative integers: InvalidArgument,
        field "shape", otherwise); returns the array as it is then."""
        return self._with(self._native.resize(_ints(shape, "shape")))


class Group(_Node):
    """A Zarr group: attributes, members, and the arrays and groups below it.
    A cheap handle to what was read when it was opened; thread-safe."""

    @property
    def has_consolidated_metadata(self):
        """True if it was opened with consolidated metadata (a snapshot of
        the hierarchy below it)."""
        return self._native.has_consolidated_metadata

    def members(self, recursive=False):
        """[(name, "array" | "group")], depth first by name."""
        return [(name, kind) for name, kind, _, _ in self._native.members(recursive)]

    def _open(self, name, kind):
        native = self._native.open_array(name) if kind == "array" else self._native.open_group(name)
        return (Array if kind == "array" else Group)(native, self._runtime, self._url, self._storage_options,
                                                     self._mode)

    def __getitem__(self, name):
        """The member array or group ``name``; KeyError if there is none."""
        for member, kind in self.members():
            if member == name:
                return self._open(name, kind)
        raise KeyError(name)

    def arrays(self):
        """[(name, Array)] for the arrays directly in the group, by name."""
        return [(name, self._open(name, kind)) for name, kind in self.members() if kind == "array"]

    def __iter__(self):
        return (name for name, _ in self.members())

    def __contains__(self, name):
        return any(name == member for member, _ in self.members())

    def __reduce__(self):
        return (open_group, (self._url, self.path, self._mode, self._storage_options))


def _url(store):
    return str(store)


def _ints(values, field):
    """Non-negative integers (a list), else InvalidArgument naming ``field``."""
    try:
        out = [operator.index(v) for v in values]
    except TypeError:
        raise InvalidArgument("%s must be non-negative integers, got %r" % (field, values), field=field) from None
    if any(v < 0 for v in out):
        raise InvalidArgument("%s must be non-negative integers, got %r" % (field, values), field=field)
    return out


def _json(value, field):
    """``value`` as strict JSON text (no NaN), else InvalidArgument naming ``field``."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgument("%s must be JSON values: %s" % (field, e), field=field) from None


def open_array(store, path="", mode="r+", storage_options=None, runtime=None):
    """Opens the array at ``path`` in ``store`` (a path or URL). NotFound if
    there is none. ``mode`` "r" refuses writes."""
    runtime = runtime or default_runtime()
    options = dict(storage_options or {})
    native = _zarrcoro.Array.open(runtime._native, _url(store), path, options)
    return Array(native, runtime, _url(store), options, mode)


def open_group(store, path="", mode="r+", storage_options=None, runtime=None, consolidated=None):
    """Opens the group at ``path`` in ``store`` (a path or URL): v3
    ``zarr.json``, else v2 ``.zgroup``. ``consolidated``: None uses the
    group's consolidated metadata when it has some (then listing and opening
    members reads nothing more), True requires it (NotFound without), False
    ignores it. NotFound if there is no group."""
    runtime = runtime or default_runtime()
    options = dict(storage_options or {})
    native = _zarrcoro.Group.open(runtime._native, _url(store), path, options, consolidated)
    return Group(native, runtime, _url(store), options, mode)


def create_group(store, path="", attributes=None, zarr_format=3, overwrite=False, storage_options=None, runtime=None):
    """Creates a group (zarr_format 2 or 3) with ``attributes``; AlreadyExists
    unless ``overwrite`` (which removes what is there first)."""
    runtime = runtime or default_runtime()
    options = dict(storage_options or {})
    native = _zarrcoro.Group.create(runtime._native, _url(store), path, _json(attributes or {}, "attributes"),
                                    zarr_format, overwrite, options)
    return Group(native, runtime, _url(store), options, "r+")


def _fill_json(value, dtype):
    if dtype.kind == "f":
        v = float(value)
        return "NaN" if math.isnan(v) else "Infinity" if v == math.inf else "-Infinity" if v == -math.inf else v
    if dtype.kind == "c":
        c = complex(value)
        return [_fill_json(c.real, np.dtype("f8")), _fill_json(c.imag, np.dtype("f8"))]
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    return value


_V3_NAMES = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}


def create_array(store, shape, dtype, chunks=None, path="", fill_value=None, compressor="zstd", shards=None,
                 zarr_format=3, attributes=None, dimension_names=None, overwrite=False, storage_options=None,
                 runtime=None):
    """Creates an array and returns it open for writing.

    ``dtype``: a NumPy dtype of a number or bool (either byte order), or
    ``str`` for variable-length UTF-8 strings (v2: any fixed NumPy dtype,
    structured too). ``chunks``: the chunk (with ``shards``, the inner
    chunk) shape, default the whole array. ``compressor``: "zstd", "gzip" or
    None. ``shards``: the shard shape (v3). Raises AlreadyExists unless
    ``overwrite``; InvalidArgument naming the parameter (``field``) for a
    shape, dtype, fill_value, compressor, zarr_format or attributes it
    cannot use; InvalidMetadata / UnsupportedError for metadata the engine
    refuses (e.g. chunks of another rank).
    """
    runtime = runtime or default_runtime()
    options = dict(storage_options or {})
    if zarr_format not in (2, 3):
        raise InvalidArgument("zarr_format must be 2 or 3, got %r" % (zarr_format,), field="zarr_format")
    if compressor not in (None, "zstd", "gzip"):
        raise InvalidArgument("compressor must be 'zstd', 'gzip' or None, got %r" % (compressor,), field="compressor")
    shape = _ints(shape, "shape")
    chunks = _ints(chunks or [max(1, n) for n in shape], "chunks")
    is_str = dtype is str or (isinstance(dtype, str) and dtype in ("str", "string")) or \
        getattr(dtype, "kind", None) == "T"  # variable-length UTF-8 (NumPy's StringDType)
    try:
        dt = None if is_str else np.dtype(dtype)
    except TypeError as e:
        raise InvalidArgument("dtype %r: %s" % (dtype, e), field="dtype") from None
    if fill_value is None:
        fill_value = "" if is_str else 0
    if is_str and not isinstance(fill_value, str):
        raise InvalidArgument("the fill_value of a string array is a str, got %r" % (fill_value,), field="fill_value")
    if not is_str and not dt.names:
        try:
            np.asarray(fill_value, dtype=dt)  # the fill_value casts to the dtype
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidArgument("fill_value %r for %s: %s" % (fill_value, dt, e), field="fill_value") from None
    if zarr_format == 2:
        compressors = {None: None, "zstd": {"id": "zstd", "level": 3}, "gzip": {"id": "gzip", "level": 5}}
        doc = {"zarr_format": 2, "shape": shape, "chunks": chunks, "order": "C",
               "dtype": "|O" if is_str else dt.descr if dt.names else dt.str, "compressor": compressors[compressor],
               "fill_value": fill_value if is_str else _fill_json(fill_value, dt),
               "filters": [{"id": "vlen-utf8"}] if is_str else None}
        if shards:
            raise InvalidArgument("Zarr v2 has no sharding", field="shards")
    else:
        if is_str:
            data_type, serializer = "string", {"name": "vlen-utf8"}
        else:
            if dt.kind not in _V3_NAMES:
                raise UnsupportedError("create_array makes v3 arrays of numbers, bool and str; %s: use zarr_format=2"
                                       % dt, field="dtype")
            data_type = "bool" if dt.kind == "b" else _V3_NAMES[dt.kind] + str(dt.itemsize * 8)
            serializer = {"name": "bytes", "configuration": {"endian": "big" if dt.byteorder == ">" else "little"}}
        compressors = {None: [], "zstd": [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                       "gzip": [{"name": "gzip", "configuration": {"level": 5}}]}
        codecs = [serializer] + compressors[compressor]
        grid = chunks
        if shards:
            grid = _ints(shards, "shards")
            codecs = [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": chunks, "codecs": codecs, "index_location": "end",
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
        doc = {"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
               "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
               "fill_value": fill_value if is_str else _fill_json(fill_value, dt), "codecs": codecs,
               "attributes": json.loads(_json(attributes or {}, "attributes"))}
        if dimension_names is not None:
            doc["dimension_names"] = list(dimension_names)
    native = _zarrcoro.Array.create(runtime._native, _url(store), path, json.dumps(doc),
                                    _json(attributes or {}, "attributes"), overwrite, options)
    return Array(native, runtime, _url(store), options, "r+")
