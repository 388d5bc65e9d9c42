"""zarrcoro.pipeline.CodecPipeline: zarr-python 3 arrays through the engine,
against zarr-python's own BatchedCodecPipeline on the same arrays."""
import asyncio
import logging

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

import zarrcoro  # noqa: E402
import zarrcoro.pipeline  # noqa: E402,F401  (registers the pipeline)

OURS = {"codec_pipeline.path": "zarrcoro.pipeline.CodecPipeline"}
DEFAULT = {"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}

SELECTIONS = [
    np.s_[:],
    np.s_[2:9:3, 1::4],
    np.s_[5, 3:],
    np.s_[5, 3],
    np.s_[-1, ::2],
    np.s_[..., 7],
    np.s_[12:, 15:],
    np.s_[3:3, :],
]

LAYOUTS = [
    dict(zarr_format=2, compressors=None),
    dict(zarr_format=2),  # zstd
    dict(zarr_format=2, order="F", compressors=[{"id": "zlib", "level": 1}]),
    dict(zarr_format=3, compressors=None),
    dict(zarr_format=3),
    dict(zarr_format=3, shards=(8, 10)),
    dict(zarr_format=3, filters=[{"name": "transpose", "configuration": {"order": [1, 0]}}]),
    dict(zarr_format=3, compressors=[{"name": "gzip", "configuration": {"level": 1}}, {"name": "crc32c"}]),
]


def make(store, dtype="float32", fill_value=0, **kw):
    return zarr.create_array(store=store, shape=(13, 17), chunks=(4, 5), dtype=dtype, fill_value=fill_value, **kw)


def data(dtype="float32"):
    return (np.arange(13 * 17) % 251).reshape(13, 17).astype(dtype)


def engine_pipeline(z):
    p = z._async_array.codec_pipeline
    assert isinstance(p, zarrcoro.pipeline.CodecPipeline)
    return p


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: ",".join(f"{k}={v}" for k, v in l.items()))
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "complex128", "bool"])
@pytest.mark.parametrize("kind", ["local", "memory"])
def test_reads_and_writes_agree_with_zarr_python(layout, dtype, kind, tmp_path):
    """A LocalStore: the engine reads and writes the files itself; a
    MemoryStore: zarr-python moves the bytes, the engine decodes and encodes."""
    expected = data(dtype)
    store = tmp_path / "a.zarr" if kind == "local" else zarr.storage.MemoryStore()
    with zarr.config.set(OURS):
        z = make(store, dtype=dtype, **layout)
        p = engine_pipeline(z)
        assert p._native is not None, "the engine carries this array"
        z[:] = expected
        z[1:3, 2] = expected[0, 0]
        expected[1:3, 2] = expected[0, 0]
        for sel in SELECTIONS:
            np.testing.assert_array_equal(z[sel], expected[sel])
        assert (p._chunk_store is not None) == (kind == "local")
    with zarr.config.set(DEFAULT):  # what we wrote, read by zarr-python itself
        np.testing.assert_array_equal(zarr.open_array(store)[:], expected)


def test_what_zarr_python_wrote_reads_through_the_engine(tmp_path):
    expected = data()
    with zarr.config.set(DEFAULT):
        z = make(tmp_path / "a.zarr", shards=(8, 10), fill_value=np.nan)
        z[:8, :] = expected[:8]
    expected[8:] = np.nan
    with zarr.config.set(OURS):
        z = zarr.open_array(tmp_path / "a.zarr")
        engine_pipeline(z)
        np.testing.assert_array_equal(z[:], expected)
        np.testing.assert_array_equal(z.oindex[[1, 9], [0, 16]], expected[np.ix_([1, 9], [0, 16])])


def _calls_to(monkeypatch, cls, name):
    """A list that grows by one at each call of the coroutine method cls.name (patched for the test)."""
    calls = []
    real = getattr(cls, name)

    async def counted(self, *args, **kwargs):
        calls.append(1)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_parts_of_shards_are_read_by_the_engine(kind, tmp_path, monkeypatch):
    """A read of a box of a shard in a MemoryStore or a LocalStore is the
    engine's, which decodes the inner chunks the selection touches (of a
    LocalStore shard, it reads only those, after the index, by byte ranges,
    also in a shard of many MiB): no call into zarr-python's pipeline."""
    from zarr.core.codec_pipeline import BatchedCodecPipeline

    calls = _calls_to(monkeypatch, BatchedCodecPipeline, "read")
    store = (lambda name: tmp_path / name) if kind == "local" else (lambda name: zarr.storage.MemoryStore())
    expected = data()
    expected[8:12, 10:15] = 0  # inner chunk (2, 2) is all fill: not stored
    with zarr.config.set(OURS):
        z = make(store("a.zarr"), shards=(8, 10))
        z[:] = expected
        for sel in SELECTIONS:
            np.testing.assert_array_equal(z[sel], expected[sel])
        np.testing.assert_array_equal(z[9:12, 11:14], np.zeros((3, 3), "float32"))
        assert calls == []
        # Other selections of parts of shards stay with zarr-python's sharding codec (no whole shard decoded).
        np.testing.assert_array_equal(z.oindex[[1, 9], [0, 16]], expected[np.ix_([1, 9], [0, 16])])
        assert calls
        calls.clear()

        big = np.arange(1024 * 1024, dtype="float32").reshape(1024, 1024)  # a 4 MiB shard, its index first
        big[32:64, :] = 0  # a row of missing inner chunks
        zb = zarr.create_array(store=store("b.zarr"), shape=big.shape, chunks=big.shape, dtype="float32",
                               compressors=None,
                               serializer=zarr.codecs.ShardingCodec(chunk_shape=(32, 32), index_location="start"))
        zb[:] = big
        for sel in [np.s_[3:40:2, 5:9], np.s_[30:70, 1000:1024], np.s_[500, 7:900:97]]:
            np.testing.assert_array_equal(zb[sel], big[sel])
        assert calls == []


def test_a_shard_rewritten_by_zarr_python_reads_anew_after_its_index_was_cached(tmp_path):
    """The engine keeps the index of a LocalStore shard it read; zarr-python's
    own writes (here an orthogonal selection, which its sharding codec
    writes: a new file renamed over the shard) change the shard under it:
    the next box reads the new data, not inner chunks by the old index
    (which had the inner chunk written here missing, and the others
    elsewhere)."""
    expected = data("int32")
    expected[4:8, 5:10] = 0  # inner chunk (1, 1): all fill, not stored
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr", dtype="int32", shards=(8, 10), compressors=None)
        z[:] = expected
        for _ in range(2):  # the second read takes the cached index
            np.testing.assert_array_equal(z[1:7, 2:9], expected[1:7, 2:9])
        for step in range(1, 4):
            expected[np.ix_([1, 5, 6], [3, 6, 8])] = 1000 * step + np.arange(9).reshape(3, 3)
            z.oindex[[1, 5, 6], [3, 6, 8]] = expected[np.ix_([1, 5, 6], [3, 6, 8])]
            np.testing.assert_array_equal(z[1:7, 2:9], expected[1:7, 2:9])


def _chunk_bytes(store):
    """{key: bytes} of every chunk (key under c/) of an array at a store's root."""
    async def snapshot():
        return {k: (await store.get(k, zarr.core.buffer.default_buffer_prototype())).to_bytes()
                async for k in store.list_prefix("c/")}
    return asyncio.run(snapshot())


@pytest.mark.parametrize("order", ["morton", "lexicographic", "colexicographic", "unordered"])
@pytest.mark.parametrize("write_empty", [False, True])
@pytest.mark.parametrize("kind", ["local", "memory"])
def test_whole_shards_are_written_by_the_engine_as_zarr_python_lays_them_out(order, write_empty, kind, tmp_path,
                                                                              monkeypatch):
    """Shard writes are the engine's, their inner chunks in the sharding
    codec's subchunk_write_order, those all fill_value stored only with
    write_empty_chunks: the bytes zarr-python's own pipeline writes, for
    whole shards, shards cut by the array's edge, and parts of shards merged
    into the stored ones (with steps too)."""
    from zarr.codecs import BytesCodec, ShardingCodec

    partial_encodes = _calls_to(monkeypatch, ShardingCodec, "_encode_partial_single")
    # 2 x 3 shards of 8 x 10, each 4 x 2 inner chunks of 2 x 5 (orders differ); the third column is cut at 25.
    expected = np.arange(16 * 25, dtype="int32").reshape(16, 25) + 1
    expected[2:4, 0:5] = 0  # inner chunk (1, 0) of shard (0, 0): all fill
    expected[8:16, 10:20] = 0  # shard (1, 1): all fill

    def write(config, where):
        store = zarr.storage.LocalStore(where) if kind == "local" else zarr.storage.MemoryStore()
        with zarr.config.set(config):
            z = zarr.create_array(store=store, shape=expected.shape, chunks=(8, 10), dtype="int32", fill_value=0,
                                  serializer=ShardingCodec(chunk_shape=(2, 5), codecs=[BytesCodec()],
                                                           subchunk_write_order=order),
                                  compressors=None, config={"write_empty_chunks": write_empty})
            z[:] = expected
            z[3:9, 1:6] = 777  # parts of shards (0, 0) and (1, 0)
            z[9:16:3, 22] = 5  # steps, in a shard cut by the edge
            z[2:4, 15:20] = 0  # an inner chunk of shard (0, 1) made all fill
            z[0:8, 20:25] = 0  # shard (0, 2), cut by the edge, made all fill
            np.testing.assert_array_equal(z[:], final)
        return store

    final = expected.copy()
    final[3:9, 1:6] = 777
    final[9:16:3, 22] = 5
    final[2:4, 15:20] = 0
    final[0:8, 20:25] = 0
    theirs = _chunk_bytes(write(DEFAULT, tmp_path / "theirs.zarr"))
    partial_encodes.clear()
    ours = _chunk_bytes(write(OURS, tmp_path / "ours.zarr"))
    assert partial_encodes == []  # before, each of the 6 + 4 shard writes
    assert ("c/1/1" in ours) == ("c/0/2" in ours) == write_empty
    assert ours == theirs


def _nested_sharding():
    from zarr.codecs import BytesCodec, ShardingCodec

    return ShardingCodec(chunk_shape=(4, 10), codecs=[ShardingCodec(chunk_shape=(2, 5), codecs=[BytesCodec()])])


@pytest.mark.parametrize("case", ["nan-fill", "complex-zero", "nested", "zstd"])
def test_shard_writes_match_zarr_python_for_fills_nested_shards_and_compressors(case, tmp_path):
    """Inner chunks of other NaNs than a NaN fill, or of -0+0j against a 0
    fill, are all fill as zarr-python compares: not stored. Nested shards
    go through zarr-python's sharding codec. A compressor's inner chunks may
    differ in bytes (its library, not the layout), not in keys or data."""
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    dtype, fill = {"nan-fill": ("float32", np.nan), "complex-zero": ("complex128", 0)}.get(case, ("int32", 0))
    expected = (np.arange(16 * 20) % 7 + 1).reshape(16, 20).astype(dtype)
    empty = {"nan-fill": -np.float32(np.nan), "complex-zero": complex(-0.0, 0.0)}.get(case, 0)  # other bits
    expected[2:4, 5:10] = empty  # an inner chunk of shard (0, 0): all fill
    expected[8:16, 0:10] = empty  # shard (1, 0): all fill
    inner = [BytesCodec(), ZstdCodec()] if case == "zstd" else [BytesCodec()]
    serializer = _nested_sharding() if case == "nested" else ShardingCodec(chunk_shape=(2, 5), codecs=inner)

    def write(config, where):
        store = zarr.storage.LocalStore(where)
        with zarr.config.set(config):
            z = zarr.create_array(store=store, shape=expected.shape, chunks=(8, 10), dtype=dtype, fill_value=fill,
                                  serializer=serializer, compressors=None)
            z[:] = expected
            z[1:7, 3:14] = expected[1:7, 3:14]  # parts of shards, written again
            np.testing.assert_array_equal(z[:], expected)
        return _chunk_bytes(store)

    theirs, ours = write(DEFAULT, tmp_path / "theirs.zarr"), write(OURS, tmp_path / "ours.zarr")
    assert sorted(ours) == sorted(theirs) == ["c/0/0", "c/0/1", "c/1/1"]
    with zarr.config.set(OURS):  # the engine's refusals behind the fallbacks, typed
        native = engine_pipeline(zarr.open_array(tmp_path / "ours.zarr"))._native
    if case == "nested":
        with pytest.raises(zarrcoro.InvalidArgument, match="whose inner chunks are shards"):
            native.with_shard_layout("morton", False)
    if case == "zstd":
        with pytest.raises(zarrcoro.InvalidArgument, match="unknown inner chunk order 'spiral'"):
            native.with_shard_layout("spiral", False)
    if case != "zstd":
        assert ours == theirs


def test_fancy_selections(tmp_path):
    expected = data()
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr")
        z[:] = expected
        np.testing.assert_array_equal(z.oindex[[1, 5], [2, 3, 16]], expected[np.ix_([1, 5], [2, 3, 16])])
        np.testing.assert_array_equal(z.vindex[[1, 5, 12], [2, 16, 0]], expected[[1, 5, 12], [2, 16, 0]])
        np.testing.assert_array_equal(z.get_block_selection((1, 2)), expected[4:8, 10:15])
        z.oindex[[1, 5], [2, 3]] = -1
        expected[np.ix_([1, 5], [2, 3])] = -1
        z.vindex[[0, 12], [0, 16]] = -2
        expected[[0, 12], [0, 16]] = -2
        np.testing.assert_array_equal(z[:], expected)


def test_empty_chunks_are_not_stored(tmp_path):
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr", fill_value=np.nan)
        z[:] = np.nan
        z[0, 0] = 1
        assert z.nchunks_initialized == 1
        z[0, 0] = np.nan
        assert z.nchunks_initialized == 0
        z2 = zarr.create_array(store=tmp_path / "b.zarr", shape=(8,), chunks=(4,), dtype="float64", fill_value=0.0,
                               config={"write_empty_chunks": True})
        z2[:] = 0.0
        assert z2.nchunks_initialized == 2


def test_zero_dimensional(tmp_path):
    with zarr.config.set(OURS):
        z = zarr.create_array(store=tmp_path / "a.zarr", shape=(), dtype="int64", fill_value=3)
        assert z[()] == 3
        z[()] = 42
        assert z[()] == 42
        assert z[...].shape == ()


def test_one_pool_submission_per_batch(tmp_path):
    expected = data()
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr")  # 4 x 4 = 16 chunks
        z[:] = expected
        rt = zarrcoro.default_runtime()
        before = rt.stats()
        np.testing.assert_array_equal(z[:], expected)
        after = rt.stats()
        assert after["pool_submissions"] - before["pool_submissions"] == 1
        assert after["chunks"] - before["chunks"] == 16
        assert after["codec_calls_on_io_thread"] == 0
        with zarr.config.set({"codec_pipeline.batch_size": 5}):  # batches of 5 chunks: 4 submissions
            z = zarr.open_array(tmp_path / "a.zarr")
            before = rt.stats()
            np.testing.assert_array_equal(z[:], expected)
            assert rt.stats()["pool_submissions"] - before["pool_submissions"] == 4


def test_a_few_page_cached_plain_chunks_are_read_at_once(tmp_path):
    """A LocalStore read of up to 4 chunks with nothing to decode, whose files
    the kernel has cached: read on the calling thread (ChunkCodec.read_now),
    with no completion through the loop and no pool submission."""
    expected = data()
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr", compressors=None)
        z[:] = expected
        p = engine_pipeline(z)
        store = p._engine_store([(z.store_path / "c/0/0", None)])
        probe = np.empty((4, 5), dtype="float32")
        if p._native.read_now(store, [("c/0/0", None, probe, 0, list(probe.strides), ([], [], []))]) is None:
            pytest.skip("the file store cannot read at once here (it needs io_uring and openat2 RESOLVE_CACHED)")
        rt = zarrcoro.default_runtime()
        before = rt.stats()
        np.testing.assert_array_equal(z[1:7, 2:9], expected[1:7, 2:9])  # 4 chunks
        np.testing.assert_array_equal(z[12, 16], expected[12, 16])
        after = rt.stats()
        assert after["caller_reads"] - before["caller_reads"] == 2
        assert after["pool_submissions"] == before["pool_submissions"]
        np.testing.assert_array_equal(z[0:9, 0:11], expected[0:9, 0:11])  # 9 chunks: through the I/O thread
        assert rt.stats()["caller_reads"] == after["caller_reads"]


def test_concurrent_async_reads(tmp_path):
    expected = data()
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr")
        z[:] = expected

        async def main():
            a = await zarr.api.asynchronous.open_array(store=str(tmp_path / "a.zarr"))
            rows = await asyncio.gather(*(a.getitem(np.s_[i]) for i in range(13)))
            return np.stack(rows)

        np.testing.assert_array_equal(asyncio.run(main()), expected)


def test_unsupported_arrays_fall_back_with_a_log_line(tmp_path, caplog):
    with zarr.config.set(OURS), caplog.at_level(logging.INFO, logger="zarrcoro.pipeline"):
        s = zarr.create_array(store=tmp_path / "s.zarr", shape=(5,), chunks=(2,), dtype=str)
        s[:] = ["a", "bb", "", "dddd", "e"]
        assert list(s[:]) == ["a", "bb", "", "dddd", "e"]
        assert engine_pipeline(s)._native is None
        b = zarr.create_array(store=tmp_path / "b.zarr", shape=(5,), chunks=(2,), dtype=">i4", zarr_format=2)
        b[:] = np.arange(5)
        np.testing.assert_array_equal(b[:], np.arange(5))
    lines = [r.getMessage() for r in caplog.records if r.name == "zarrcoro.pipeline"]
    assert any("falls back" in m for m in lines)


def test_corrupt_chunks_raise_what_zarr_python_raises(tmp_path, caplog):
    """A chunk the engine refuses goes through zarr-python's own pipeline,
    which raises its own error (or reads it, where it is more lenient)."""
    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr")
        z[:] = data()
    (tmp_path / "a.zarr" / "c" / "0" / "0").write_bytes(b"junk")
    with zarr.config.set(DEFAULT), pytest.raises(Exception) as theirs:
        zarr.open_array(tmp_path / "a.zarr")[:]
    with zarr.config.set(OURS), caplog.at_level(logging.INFO, logger="zarrcoro.pipeline"):
        with pytest.raises(type(theirs.value)):
            zarr.open_array(tmp_path / "a.zarr")[:]
    assert any("c/0/0" in r.getMessage() for r in caplog.records if r.name == "zarrcoro.pipeline")


def test_pipeline_pickles_and_compares(tmp_path):
    import pickle

    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr")
        z[:] = data()
        z2 = pickle.loads(pickle.dumps(z))
        np.testing.assert_array_equal(z2[:], data())
        assert z2._async_array.codec_pipeline == z._async_array.codec_pipeline


def _read_all(z):
    return z[:]


@pytest.mark.filterwarnings(r"ignore:This process \(pid=\d+\) is multi-threaded:DeprecationWarning")
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_processes(tmp_path, method):
    """A fork()ed child makes its own runtime (the parent's threads are gone);
    a spawned one unpickles the array and its pipeline."""
    import multiprocessing as mp

    with zarr.config.set(OURS):
        z = make(tmp_path / "a.zarr")
        z[:] = data()
        z[:]  # the parent's runtime and file store exist before the fork
        with mp.get_context(method).Pool(1) as pool:
            (result,) = pool.map(_read_all, [z], chunksize=1)
    np.testing.assert_array_equal(result, data())


def test_decode_and_encode_batches_agree_with_zarr_python():
    """CodecPipeline.encode / decode (the batch API zarr-python's sharding
    codec and callers use) against BatchedCodecPipeline on the same codecs."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.buffer.cpu import NDBuffer
    from zarr.core.codec_pipeline import BatchedCodecPipeline
    from zarr.core.dtype import Float32

    codecs = [BytesCodec(endian="little"), ZstdCodec(level=3), Crc32cCodec()]
    spec = ArraySpec(shape=(6, 7), dtype=Float32(), fill_value=0.0, config=ArrayConfig.from_dict({}),
                     prototype=default_buffer_prototype())
    ours = zarrcoro.pipeline.CodecPipeline.from_codecs(codecs).evolve_from_array_spec(spec)
    theirs = BatchedCodecPipeline.from_codecs(codecs).evolve_from_array_spec(spec)
    chunks = [NDBuffer.from_numpy_array(np.arange(42, dtype="float32").reshape(6, 7) * k) for k in range(3)]

    async def main():
        a = await ours.encode([(c, spec) for c in chunks] + [(None, spec)])
        b = await theirs.encode([(c, spec) for c in chunks] + [(None, spec)])
        assert a[-1] is None and b[-1] is None
        back = await ours.decode([(x, spec) for x in b[:-1]] + [(None, spec)])  # theirs, decoded by us
        cross = await theirs.decode([(x, spec) for x in a[:-1]])  # ours, decoded by them
        return back, cross

    back, cross = asyncio.run(main())
    assert ours._native_for(spec) is not None
    for k in range(3):
        np.testing.assert_array_equal(back[k].as_numpy_array(), chunks[k].as_numpy_array())
        np.testing.assert_array_equal(cross[k].as_numpy_array(), chunks[k].as_numpy_array())
    assert back[-1] is None
