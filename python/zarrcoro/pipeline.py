"""zarr-python's codec pipeline on zarrcoro's engine.

    import zarr
    zarr.config.set({"codec_pipeline.path": "zarrcoro.pipeline.CodecPipeline"})

(An installed zarrcoro registers the pipeline through the entry point
``zarr.codec_pipeline``; in-tree, ``import zarrcoro.pipeline`` first.)

Every zarr-python 3 array then reads and writes its chunks through the
engine. zarr-python indexes; the chunks of each call go to the engine in
batches, each batch's codec work ONE submission to the engine's codec pool,
completed once through the event loop (``call_soon_threadsafe``): no
``asyncio.to_thread``, no thread per chunk, no codec work on the loop's
thread, the GIL released while the engine works. The chunks of a
``LocalStore`` are read and written by the engine itself, on the store's
root; other stores' bytes are moved by zarr-python (awaited together; a
MemoryStore's in a plain loop) and only the codec work goes to the engine.
A LocalStore read of up to 4 chunks with nothing to decode, page-cached, is
read at once on the calling thread (``ChunkCodec.read_now``), with no
completion through the loop.
Decoded chunks land in zarr-python's output array in place, written by the
engine through the array's strides, for selections of slices and integers;
other selections (orthogonal, vectorized) decode into a chunk-sized array
copied by NumPy. Sharded arrays: shard writes of selections of slices and
integers are the engine's where the sharding codec is the whole pipeline
and holds no nested sharding (else zarr-python's sharding codec writes
them), each shard laid out as zarr-python's sharding codec lays it out (its
``subchunk_write_order``, inner chunks all fill_value, as zarr-python
compares, stored only with ``write_empty_chunks``), so the bytes are the
same for the same encoded inner chunks; a part of a shard is merged into
the stored shard, whose untouched inner chunks keep their bytes. A whole
shard read is the engine's, and so is a read of a box (slices and
integers) of a shard in a MemoryStore or in the array's LocalStore: the
engine reads a local shard's index, then the inner chunks the box touches
by byte ranges, and decodes only those. Other reads of parts of shards
(remote stores, other selections) go through zarr-python's sharding codec
(its byte-range reads and its index, on the loop's thread), whose inner
chunks come back to this pipeline (``from_codecs``) and so to the engine in
batches.

What the engine does not carry falls back to zarr-python's own
BatchedCodecPipeline for that array, with one log line (logger
``zarrcoro.pipeline``, level INFO), never an error or other data: codecs the
engine does not know, variable-length strings and bytes, datetime types,
non-native byte order in memory (a v2 ``>i4`` array), irregular chunk grids,
output buffers that are not NumPy arrays. Writes through orthogonal or
vectorized selections go through the fallback too (NumPy merges their
chunks there), and so does a call the engine refuses (a chunk it cannot
decode, a store error): zarr-python then raises its own error, or succeeds
where it is more lenient.

Batches: the chunks of one read or write call, split into batches of
``codec_pipeline.batch_size`` chunks when that is set above 1 (zarr-python's
default of 1 is a batch per chunk, meant for its own pipeline), else of 64.

fork(): a child process makes its own engine runtime (the parent's threads
did not survive the fork; the inherited runtime is kept, never used).
"""
from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import CodecPipeline as _ZarrCodecPipeline
from zarr.core.buffer import cpu as _cpu
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.core.common import concurrent_map
from zarr.core.config import config
from zarr.registry import register_pipeline

from . import _zarrcoro
from .errors import ZarrcoroError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["CodecPipeline"]

logger = logging.getLogger("zarrcoro.pipeline")

_DEFAULT_BATCH = 64
# The most chunks ChunkCodec.read_now takes (engine/caller_read.hpp, kCallerReadChunks): larger batches skip it
# rather than hand it their items for nothing.
_AT_ONCE_CHUNKS = 4
# NumPy kinds the engine holds as fixed-size elements: bool, integers,
# floats, complex, S<n>, U<n>, structured records.
_KINDS = frozenset("biufcSUV")


def _in_memory(batch) -> bool:
    """True if every chunk of `batch` is in one zarr-python MemoryStore (the
    class itself, whose sync and async methods are the same dictionary
    operations): its bytes are then moved in a plain loop, not by one
    coroutine per chunk."""
    from zarr.storage import MemoryStore
    from zarr.storage._common import StorePath

    first = batch[0][0]
    store = getattr(first, "store", None)
    if type(store) is not MemoryStore:
        return False
    return all(isinstance(bg, StorePath) and bg.store is store for bg, *_ in batch)


def _batch_size() -> int:
    n = config.get("codec_pipeline.batch_size", 1)
    return int(n) if n and int(n) > 1 else _DEFAULT_BATCH


def _runtime():
    from . import default_runtime

    return default_runtime()


# Runtimes a fork()ed child inherited: their threads did not survive the fork,
# so they can run nothing, and destroying one would wait for those threads
# forever. The child keeps them (never freed, not even at exit) and makes new
# ones: the shared default runtime and each pipeline's file store.
_inherited: list = []


def _after_fork_in_child() -> None:
    import ctypes
    import sys

    package = sys.modules[__package__]
    old = getattr(package, "_default", None)
    if old is not None:
        _inherited.append(old)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(old))
        package._default = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# Every pipeline, so that at exit each lets go of its engine objects before
# the interpreter tears the extension module down (arrays that zarr-python or
# a program keep in module globals or caches would otherwise still hold them
# then, which nanobind reports as leaks).
_pipelines: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


@atexit.register
def _release_engine_objects() -> None:
    for p in list(_pipelines.values()):
        p._native = None
        p._per_spec = {}
        p._layouts = {}
        p._chunk_store = None


def _dtype_reason(dtype: np.dtype) -> str | None:
    if dtype.kind not in _KINDS:
        return f"data type {dtype} (kind {dtype.kind!r}) is not one of fixed-size elements the engine carries"
    if not dtype.isnative:
        return f"data type {dtype} is not in native byte order in memory"
    if dtype.kind == "V" and dtype.fields is None:
        return f"raw bytes data type {dtype}"
    return None


def _engine_dtype(native) -> np.dtype:
    import ast

    descr = native.npy_descr
    return np.dtype(ast.literal_eval(descr) if descr.startswith("[") else descr)


def _metadata_document(metadata) -> str:
    from zarr.core.buffer import default_buffer_prototype

    docs = metadata.to_buffer_dict(default_buffer_prototype())
    key = "zarr.json" if "zarr.json" in docs else ".zarray"
    return docs[key].to_bytes().decode()


def _fallback_for_metadata(metadata) -> BatchedCodecPipeline:
    """What zarr-python's create_codec_pipeline makes for `metadata` with its
    default pipeline."""
    from zarr.codecs._v2 import V2Codec
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.metadata import ArrayV3Metadata

    if isinstance(metadata, ArrayV3Metadata):
        pipeline = BatchedCodecPipeline.from_codecs(metadata.codecs)
        grid = metadata.chunk_grid
        chunk_shape = getattr(grid, "chunk_shape", None) or (1,) * len(metadata.shape)
        spec = ArraySpec(shape=chunk_shape, dtype=metadata.data_type, fill_value=metadata.fill_value,
                         config=ArrayConfig.from_dict({}), prototype=default_buffer_prototype())
    else:
        pipeline = BatchedCodecPipeline.from_codecs([V2Codec(filters=metadata.filters, compressor=metadata.compressor)])
        spec = ArraySpec(shape=metadata.chunks, dtype=metadata.dtype, fill_value=metadata.fill_value,
                         config=ArrayConfig.from_dict({"order": metadata.order}), prototype=default_buffer_prototype())
    return pipeline.evolve_from_array_spec(spec)


def _foreign_codec(codecs) -> str | None:
    """The first codec whose implementation is not zarr-python's or
    numcodecs' own (one a user registered for a name, through
    zarr.config's ``codecs.*`` or register_codec): the engine would not run
    that implementation, so such an array falls back. None if there is none."""
    for codec in codecs:
        module = type(codec).__module__
        if not module.startswith(("zarr.codecs", "numcodecs")):
            return f"{type(codec).__name__} ({module})"
        inner = []
        for attr in ("codecs", "index_codecs", "filters"):
            inner.extend(getattr(codec, attr, None) or ())
        if getattr(codec, "compressor", None) is not None:
            inner.append(codec.compressor)
        found = _foreign_codec(inner)
        if found:
            return found
    return None


def _has_sharding(codecs) -> bool:
    from zarr.codecs import ShardingCodec

    return any(isinstance(c, ShardingCodec) for c in codecs)


def _is_regular(metadata) -> bool:
    from zarr.core.metadata import ArrayV3Metadata

    if not isinstance(metadata, ArrayV3Metadata):
        return True
    return type(metadata.chunk_grid).__name__.startswith("Regular")


# ---- selections --------------------------------------------------------------------

def _chunk_box(chunk_shape, selection):
    """(start, step, count, kept) of a chunk selection of slices and integers
    (`kept`: the chunk dimensions a slice keeps), or None."""
    if not isinstance(selection, tuple):
        selection = (selection,)
    if len(selection) != len(chunk_shape):
        return None
    start, step, count, kept = [], [], [], []
    for d, (s, n) in enumerate(zip(selection, chunk_shape, strict=True)):
        if isinstance(s, slice):
            a, b, st = s.indices(n)
            if st < 1:
                return None
            start.append(a)
            step.append(st)
            count.append(len(range(a, b, st)))
            kept.append(d)
        elif isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)):
            i = int(s)
            if i < 0:
                i += n
            if not 0 <= i < n:
                return None
            start.append(i)
            step.append(1)
            count.append(1)
        else:
            return None
    return start, step, count, kept


def _whole_chunk(chunk_shape, selection) -> bool:
    """True if a chunk selection of slices and integers is the whole chunk."""
    box = _chunk_box(chunk_shape, selection)
    return box is not None and all(a == 0 and (st == 1 or n == 1) and n == c
                                   for a, st, n, c in zip(*box[:3], chunk_shape, strict=True))


def _as_tuple(selection) -> tuple:
    return selection if isinstance(selection, tuple) else (selection,)


def _is_basic(selection) -> bool:
    selection = _as_tuple(selection)
    return all(isinstance(s, slice) or (isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)))
               for s in selection)


def _strides_for(view: np.ndarray, kept, count, rank):
    """The byte strides per chunk dimension of `view`, whose dimensions are
    the chunk's kept ones; None if its shape is not the box's."""
    if view.shape != tuple(count[d] for d in kept):
        return None
    strides = [0] * rank
    for d, s in zip(kept, view.strides, strict=True):
        strides[d] = s
    return strides


async def _all(*aws):
    """asyncio.gather that lets every awaitable end before it raises the
    first exception: no engine batch still writes into a buffer once this
    returns or raises."""
    results = await asyncio.gather(*aws, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def _c_strides(shape, itemsize):
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= n
    return strides[::-1]


# ---- the pipeline --------------------------------------------------------------------


class CodecPipeline(_ZarrCodecPipeline):
    """zarr-python's CodecPipeline on zarrcoro's engine (see the module).

    Made by zarr-python through ``from_array_metadata_and_store`` (an array:
    the engine parses its whole v2 or v3 metadata) or ``from_codecs`` (a
    codec list, e.g. a shard's inner chunks: the engine pipeline is made per
    chunk spec). Anything the engine does not carry runs through
    ``fallback``, zarr-python's BatchedCodecPipeline for the same codecs.
    """

    def __init__(self, *, fallback: BatchedCodecPipeline, metadata=None, native=None, codecs_json=None,
                 batch_size: int | None = None, store=None):
        self.fallback = fallback
        self.metadata = metadata
        self.store = store
        # The engine does the store I/O of a LocalStore itself, on its root.
        from zarr.storage import LocalStore

        self._local = store if native is not None and type(store) is LocalStore else None
        self._local_root = os.path.abspath(str(store.root)) if self._local is not None else None
        self._chunk_store = None
        self._chunk_store_pid = None
        # Sharded arrays read the parts of shards _shards_at_hand leaves (remote stores, selections other
        # than boxes) through zarr-python's sharding codec (its partial reads; the inner chunks'
        # codec work comes back to the engine through from_codecs); other shard reads, and the shard writes of
        # basic selections (_write_shards), are the engine's.
        self._sharded = _has_sharding(fallback)
        self._native = native            # the array's engine pipeline (from metadata), or None
        self._codecs_json = codecs_json  # from_codecs: the v3 codecs list for the engine, or None
        self._per_spec: dict = {}        # from_codecs: engine pipelines by chunk spec
        self._layouts: dict = {}         # sharded: engine pipelines laying out shards, by write_empty_chunks
        self._batch_size = batch_size
        _pipelines[id(self)] = self

    # -- construction --

    @classmethod
    def from_codecs(cls, codecs: Iterable, *, batch_size: int | None = None) -> CodecPipeline:
        fallback = BatchedCodecPipeline.from_codecs(codecs, batch_size=batch_size)
        return cls(fallback=fallback, codecs_json=cls._codecs_of(fallback), batch_size=batch_size)

    @staticmethod
    def _codecs_of(fallback) -> str | None:
        if _foreign_codec(fallback):
            return None
        try:
            return json.dumps([c.to_dict() for c in fallback])
        except Exception:  # a codec with no v3 form (V2Codec): the fallback runs it
            return None

    @classmethod
    def from_array_metadata_and_store(cls, array_metadata, store) -> CodecPipeline:
        fallback = _fallback_for_metadata(array_metadata)
        foreign = _foreign_codec(fallback)
        if foreign:
            native, reason = None, f"the codec implementation {foreign} is not zarr-python's own"
        else:
            native, reason = cls._engine_for_metadata(array_metadata)
        if native is None:
            logger.info("zarrcoro.pipeline: an array of %s falls back to zarr-python's BatchedCodecPipeline: %s",
                        getattr(array_metadata, "dtype", "?"), reason)
        return cls(fallback=fallback, metadata=array_metadata, native=native, store=store)

    @staticmethod
    def _engine_for_metadata(metadata):
        """(the engine pipeline of the array, None) or (None, why not)."""
        try:
            dtype = metadata.dtype.to_native_dtype()
            reason = _dtype_reason(dtype)
            if reason is None and not _is_regular(metadata):
                reason = "an irregular chunk grid"
            if reason is not None:
                return None, reason
            native = _zarrcoro.ChunkCodec.from_metadata(_metadata_document(metadata))
            if _engine_dtype(native) != dtype:
                return None, f"the engine holds {_engine_dtype(native)} where zarr-python holds {dtype}"
            return native, None
        except (ZarrcoroError, ValueError, TypeError, NotImplementedError, SyntaxError) as e:
            return None, str(e)

    def evolve_from_array_spec(self, array_spec) -> CodecPipeline:
        if self.metadata is not None:
            return self
        fallback = self.fallback.evolve_from_array_spec(array_spec)
        return type(self)(fallback=fallback, codecs_json=self._codecs_of(fallback), batch_size=self._batch_size)

    def __getattr__(self, name):
        # What zarr-python's BatchedCodecPipeline has (array_bytes_codec, batch_size, ...), from the fallback.
        if name == "fallback" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.fallback, name)

    def __getstate__(self):
        return {"fallback": self.fallback, "metadata": self.metadata, "codecs_json": self._codecs_json,
                "batch_size": self._batch_size, "store": self.store}

    def __setstate__(self, state):
        native = None
        if state["metadata"] is not None:  # the engine pipeline again (the fallback came pickled: no new warnings)
            native, _ = self._engine_for_metadata(state["metadata"])
        self.__init__(fallback=state["fallback"], metadata=state["metadata"], native=native,
                      codecs_json=state["codecs_json"], batch_size=state["batch_size"], store=state["store"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CodecPipeline):
            return NotImplemented
        return self.fallback == other.fallback and self.metadata == other.metadata

    def __hash__(self) -> int:
        return hash(self.fallback)

    def __repr__(self) -> str:
        engine = self._native.describe() if self._native is not None else (
            "per chunk spec" if self._codecs_json else "none: fallback")
        return f"zarrcoro.pipeline.CodecPipeline(engine={engine}, fallback={self.fallback!r})"

    # -- what zarr-python asks of the codecs --

    @property
    def supports_partial_decode(self) -> bool:
        return self.fallback.supports_partial_decode

    @property
    def supports_partial_encode(self) -> bool:
        return self.fallback.supports_partial_encode

    def __iter__(self) -> Iterator:
        return iter(self.fallback)

    def validate(self, *, shape, dtype, chunk_grid) -> None:
        self.fallback.validate(shape=shape, dtype=dtype, chunk_grid=chunk_grid)

    def compute_encoded_size(self, byte_length: int, array_spec) -> int:
        return self.fallback.compute_encoded_size(byte_length, array_spec)

    # -- the engine pipeline of a chunk spec --

    def _native_for(self, spec):
        """The engine pipeline for chunks of `spec`, or None: then the fallback runs them."""
        if spec.prototype.nd_buffer is not _cpu.NDBuffer:
            return None
        if self._native is not None:
            return self._native if tuple(spec.shape) == tuple(self._native.chunk_shape) else None
        if self._codecs_json is None:
            return None
        try:
            key = spec._key()
            hash(key)
        except TypeError:
            return None
        if key in self._per_spec:
            return self._per_spec[key]
        native = None
        try:
            dtype = spec.dtype.to_native_dtype()
            if _dtype_reason(dtype) is None:
                from zarr.core.chunk_utils import fill_value_or_default

                fill = np.asarray(fill_value_or_default(spec), dtype=dtype).tobytes()
                native = _zarrcoro.ChunkCodec.from_codecs(self._codecs_json, json.dumps(spec.dtype.to_json(zarr_format=3)),
                                                          list(spec.shape), fill)
                if _engine_dtype(native) != dtype:
                    native = None
        except (ZarrcoroError, ValueError, TypeError, NotImplementedError, SyntaxError):
            native = None
        if len(self._per_spec) > 64:
            self._per_spec.clear()
        self._per_spec[key] = native
        return native

    def _engine_store(self, batch, writing=False):
        """The engine's file store when it can do this batch's I/O itself: every
        chunk of the array's LocalStore (writable, to write), else None."""
        local = self._local
        if local is None or (writing and local.read_only):
            return None
        from zarr.storage._common import StorePath

        if not all(isinstance(bg, StorePath) and bg.store is local for bg, *_ in batch):
            return None
        if self._chunk_store is not None and self._chunk_store_pid != os.getpid():  # made before a fork()
            import ctypes

            _inherited.append(self._chunk_store)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._chunk_store))
            self._chunk_store = None
        if self._chunk_store is None:
            self._chunk_store = _zarrcoro.ChunkStore(_runtime()._native, self._local_root)
            self._chunk_store_pid = os.getpid()
        return self._chunk_store

    async def _run_store(self, native, method, store, items):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        getattr(native, method)(store, items, loop, future)
        return await future

    async def _run(self, native, method, items):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        getattr(native, method)(_runtime()._native, items, loop, future)
        return await future

    # -- decode / encode --

    async def decode(self, chunk_bytes_and_specs):
        pairs = list(chunk_bytes_and_specs)
        natives = [self._native_for(spec) for _, spec in pairs]
        if not pairs or any(n is None for n in natives) or len({id(n) for n in natives}) != 1:
            return await self.fallback.decode(pairs)
        native = natives[0]
        dtype = pairs[0][1].dtype.to_native_dtype()
        out, items = [], []
        for k, (buf, spec) in enumerate(pairs):
            if buf is None:
                out.append(None)
                continue
            arr = np.empty(spec.shape, dtype=dtype, order=spec.order)
            items.append((str(k), buf.as_numpy_array(), arr, 0, list(arr.strides), ([], [], [])))
            out.append(spec.prototype.nd_buffer.from_numpy_array(arr))
        if items:
            try:
                await self._run(native, "decode", items)
            except ZarrcoroError as e:
                logger.info("zarrcoro.pipeline: chunks the engine refused decode through zarr-python's: %s", e)
                return await self.fallback.decode(pairs)
        return out

    async def encode(self, chunk_arrays_and_specs):
        pairs = list(chunk_arrays_and_specs)
        natives = [self._native_for(spec) for _, spec in pairs]
        if not pairs or any(n is None for n in natives) or len({id(n) for n in natives}) != 1:
            return await self.fallback.encode(pairs)
        native = natives[0]
        items, where = [], []
        for k, (chunk, spec) in enumerate(pairs):
            if chunk is None:
                continue
            arr = chunk.as_numpy_array()
            if arr.shape != tuple(spec.shape) or arr.dtype != spec.dtype.to_native_dtype():
                return await self.fallback.encode(pairs)
            items.append((str(k), None, arr, 0, list(arr.strides), ([], [], []), False, False))
            where.append(k)
        out = [None] * len(pairs)
        if items:
            try:
                encoded = await self._run(native, "encode", items)
            except ZarrcoroError as e:
                logger.info("zarrcoro.pipeline: chunks the engine refused encode through zarr-python's: %s", e)
                return await self.fallback.encode(pairs)
            for k, e in zip(where, encoded, strict=True):
                out[k] = None if e is None else pairs[k][1].prototype.buffer.from_array_like(e)
        return out

    # -- read --

    async def read(self, batch_info, out, drop_axes=()):
        batch = list(batch_info)
        if not batch:
            return ()
        out_arr = self._engine_array(out, batch)
        if out_arr is None:
            return await self.fallback.read(batch, out, drop_axes)
        natives = [self._native_for(spec) for _, spec, *_ in batch]
        if any(n is None for n in natives) or (self._sharded and not self._shards_at_hand(batch, drop_axes)):
            return await self.fallback.read(batch, out, drop_axes)
        size = self._batch_size or _batch_size()
        parts = [(batch[i:i + size], natives[i:i + size]) for i in range(0, len(batch), size)]
        try:
            results = await _all(*(self._read_batch(b, n, out_arr, drop_axes) for b, n in parts))
        except ZarrcoroError as e:
            # zarr-python's own pipeline decides: its error (or data, where the engine is stricter)
            logger.info("zarrcoro.pipeline: a read the engine refused runs through zarr-python's pipeline: %s", e)
            return await self.fallback.read(batch, out, drop_axes)
        return tuple(r for part in results for r in part)

    def _shards_at_hand(self, batch, drop_axes) -> bool:
        """True if the engine takes this batch of shards: each is read whole,
        or the parts read are boxes (slices and integers) of shards in a
        MemoryStore (whose values are at hand) or in the array's LocalStore
        (which the engine reads itself: a shard's index, then the inner chunks
        the box touches, by byte ranges). The engine decodes only those inner
        chunks. Other parts of shards are left to zarr-python's sharding
        codec, which reads the index and those inner chunks alone."""
        parts = [(spec, chunk_sel, out_sel) for _, spec, chunk_sel, out_sel, complete in batch if not complete]
        if not parts:
            return True
        if drop_axes or not all(_is_basic(o) and _chunk_box(s.shape, c) is not None for s, c, o in parts):
            return False
        return _in_memory(batch) or self._engine_store(batch) is not None

    def _engine_array(self, out, batch):
        """The NumPy array behind `out` if the engine can write it, else None."""
        if not isinstance(out, _cpu.NDBuffer):
            return None
        arr = out.as_numpy_array()
        spec = batch[0][1]
        if arr.dtype != spec.dtype.to_native_dtype() or not arr.flags.writeable:
            return None
        return arr

    async def _read_batch(self, batch, natives, out_arr, drop_axes):
        store = self._engine_store(batch)
        if store is None and _in_memory(batch):  # dictionary lookups: no coroutine per chunk
            bufs = [bg.get_sync(prototype=spec.prototype) for bg, spec, *_ in batch]
            encoded = [None if buf is None else buf.as_numpy_array() for buf in bufs]
        elif store is None:  # fetched through zarr-python's store, decoded by the engine
            bufs = await concurrent_map([(bg, spec.prototype) for bg, spec, *_ in batch],
                                        lambda bg, prototype: bg.get(prototype=prototype),
                                        config.get("async.concurrency"))
            encoded = [None if buf is None else buf.as_numpy_array() for buf in bufs]
        else:  # read by the engine from its own file store
            encoded = [None] * len(batch)
        groups: dict[int, tuple[Any, list, list]] = {}
        copies = []  # (chunk array, chunk selection, out selection): fancy selections, copied by NumPy
        for k, ((bg, spec, chunk_sel, out_sel, _), native) in enumerate(zip(batch, natives, strict=True)):
            key = getattr(bg, "path", "")
            item = None
            box = _chunk_box(spec.shape, chunk_sel) if not drop_axes and _is_basic(out_sel) else None
            if box is not None:
                start, step, count, kept = box
                view = out_arr[(*_as_tuple(out_sel), Ellipsis)]  # a view, also where every index is an integer
                strides = _strides_for(view, kept, count, len(spec.shape))
                if strides is not None:
                    item = (key, encoded[k], view, 0, strides, (start, step, count))
            if item is None:
                chunk = np.empty(spec.shape, dtype=out_arr.dtype)
                item = (key, encoded[k], chunk, 0, _c_strides(spec.shape, chunk.itemsize), ([], [], []))
                copies.append((chunk, chunk_sel, out_sel))
            group = groups.setdefault(id(native), (native, [], []))
            group[1].append(item)
            group[2].append(k)
        if store is None:
            await _all(*(self._run(native, "decode", items) for native, items, _ in groups.values()))
            present = [e is not None for e in encoded]
        else:
            present = [False] * len(batch)
            # A few small page-cached chunks with nothing to decode: read at once here, with no completion
            # through the loop (ChunkCodec::read_now); the rest by the engine's I/O thread.
            found = [native.read_now(store, items) if len(items) <= _AT_ONCE_CHUNKS else None
                     for native, items, _ in groups.values()]
            later = [k for k, f in enumerate(found) if f is None]
            if later:
                group_list = list(groups.values())
                flags = await _all(*(self._run_store(group_list[k][0], "read", store, group_list[k][1]) for k in later))
                for k, f in zip(later, flags, strict=True):
                    found[k] = f
            for (_, _, where), flags in zip(groups.values(), found, strict=True):
                for k, f in zip(where, flags, strict=True):
                    present[k] = f
        for chunk, chunk_sel, out_sel in copies:
            selected = chunk[chunk_sel]
            if drop_axes:
                selected = selected.squeeze(axis=drop_axes)
            out_arr[out_sel] = selected
        return [{"status": "present" if p else "missing"} for p in present]

    # -- write --

    async def write(self, batch_info, value, drop_axes=()):
        batch = list(batch_info)
        if not batch:
            return
        natives = [self._native_for(spec) for _, spec, *_ in batch]
        value_arr = value.as_numpy_array() if isinstance(value, _cpu.NDBuffer) else None
        if (any(n is None for n in natives) or value_arr is None or drop_axes
                or value_arr.dtype != batch[0][1].dtype.to_native_dtype()
                or not all(_is_basic(c) and _is_basic(o) for _, _, c, o, _ in batch)):
            return await self.fallback.write(batch, value, drop_axes)
        if self._sharded:
            return await self._write_shards(batch, value, value_arr)
        await self._write_engine(batch, natives, value, value_arr)

    async def _write_shards(self, batch, value, value_arr):
        """Shard writes are the engine's, each shard laid out as zarr-python's
        sharding codec lays it out (its subchunk_write_order; inner chunks all
        fill_value stored only with write_empty_chunks). A part of a shard is
        merged into the stored shard as that codec merges it: the inner chunks
        it does not touch keep their bytes, beyond the array's shape too."""
        laid = self._laid_out(batch[0][1].config.write_empty_chunks)
        if laid is None:
            return await self.fallback.write(batch, value)
        await self._write_engine(batch, [laid] * len(batch), value, value_arr)

    def _laid_out(self, keep_empty):
        """The array's engine pipeline laying out shards as its zarr-python
        sharding codec does, or None: an array-array or bytes-bytes codec
        around the sharding codec, or shards nested in its inner chunks."""
        keep_empty = bool(keep_empty)
        if keep_empty not in self._layouts:
            from zarr.codecs import ShardingCodec

            codec = getattr(self.fallback, "array_bytes_codec", None)
            laid = None
            if self._native is not None and isinstance(codec, ShardingCodec):
                try:
                    laid = self._native.with_shard_layout(codec.subchunk_write_order, keep_empty)
                except ZarrcoroError:
                    laid = None
            self._layouts[keep_empty] = laid
        return self._layouts[keep_empty]

    async def _write_engine(self, batch, natives, value, value_arr):
        size = self._batch_size or _batch_size()
        try:
            await _all(*(self._write_batch(batch[i:i + size], natives[i:i + size], value_arr)
                         for i in range(0, len(batch), size)))
        except ZarrcoroError as e:
            # Whole chunks again (what the engine stored is what this stores): zarr-python's error, or its write.
            logger.info("zarrcoro.pipeline: a write the engine refused runs through zarr-python's pipeline: %s", e)
            await self.fallback.write(batch, value)

    async def _write_batch(self, batch, natives, value_arr):
        store = self._engine_store(batch, writing=True)

        async def existing_of(bs, prototype, complete):
            return None if complete else await bs.get(prototype=prototype)

        # What a chunk holds beyond the selection is kept (its stored chunk read and merged) where zarr-python
        # keeps it: a selection short of the chunk, and any part of a shard (its partial encode merges into the
        # stored shard, also beyond the array's shape after a shrinking resize). A chunk the selection covers
        # within the array's shape is written anew: beyond the shape, the fill value.
        shard = self.fallback.supports_partial_encode
        keep = [not complete or (shard and not _whole_chunk(spec.shape, sel)) for _, spec, sel, _, complete in batch]
        in_memory = store is None and _in_memory(batch)
        if in_memory:
            existing = [bs.get_sync(prototype=spec.prototype) if k else None
                        for (bs, spec, *_), k in zip(batch, keep, strict=True)]
        elif store is None:
            existing = await concurrent_map([(bs, spec.prototype, not k) for (bs, spec, *_), k in zip(batch, keep, strict=True)],
                                            existing_of, config.get("async.concurrency"))
        else:  # the engine reads what it must merge into
            existing = [None] * len(batch)
        groups: dict[int, tuple[Any, list, list]] = {}
        for k, ((bs, spec, chunk_sel, out_sel, _), native, old) in enumerate(zip(batch, natives, existing, strict=True)):
            start, step, count, kept = _chunk_box(spec.shape, chunk_sel)
            target = tuple(count[d] for d in kept)
            source = value_arr if value_arr.shape == () else value_arr[(*_as_tuple(out_sel), Ellipsis)]
            view = np.broadcast_to(source, target)
            strides = _strides_for(view, kept, count, len(spec.shape))
            item = (getattr(bs, "path", ""), None if old is None else old.as_numpy_array(), view, 0, strides,
                    (start, step, count), not spec.config.write_empty_chunks, keep[k])
            group = groups.setdefault(id(native), (native, [], []))
            group[1].append(item)
            group[2].append(k)
        if store is not None:
            await _all(*(self._run_store(native, "write", store, items) for native, items, _ in groups.values()))
            return
        encoded = [None] * len(batch)
        results = await _all(*(self._run(native, "encode", items) for native, items, _ in groups.values()))
        for (_, _, where), chunks in zip(groups.values(), results, strict=True):
            for k, e in zip(where, chunks, strict=True):
                encoded[k] = e

        if in_memory:
            for (bs, spec, *_), chunk in zip(batch, encoded, strict=True):
                if chunk is None:
                    bs.delete_sync()
                else:
                    bs.set_sync(spec.prototype.buffer.from_array_like(chunk))
            return

        async def store_one(bs, prototype, chunk):
            if chunk is None:
                await bs.delete()
            else:
                await bs.set(prototype.buffer.from_array_like(chunk))

        await concurrent_map([(bs, spec.prototype, e) for (bs, spec, *_), e in zip(batch, encoded, strict=True)],
                             store_one, config.get("async.concurrency"))


register_pipeline(CodecPipeline)
