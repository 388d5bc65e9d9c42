"""The Python binding (ctest python_binding): NumPy indexing against NumPy
itself (writes with steps too: the elements between stay), every dtype kind
through both formats, strings (awaited too), typed errors for bad input
(dtype, shape, selection, a closed runtime), pickling, and asyncio:
completions through the loop, cancellation, and the loop kept free of codec
work while 64 reads run."""
import asyncio
import pickle

import numpy as np
import pytest

import zarrcoro


@pytest.fixture
def runtime():
    with zarrcoro.Runtime(codec_threads=2) as rt:
        yield rt


def test_basic_indexing_reads_what_numpy_reads(tmp_path, runtime):
    expected = np.arange(11 * 7 * 5, dtype="<i4").reshape(11, 7, 5)
    a = zarrcoro.create_array(tmp_path / "a", shape=expected.shape, chunks=(3, 4, 2), dtype="<i4",
                              runtime=runtime)
    a[...] = expected
    selections = [np.s_[...], np.s_[3], np.s_[-1], np.s_[2:9:3], np.s_[::-2], np.s_[10:2:-3, 1],
                  np.s_[..., 4], np.s_[4, ..., -2], np.s_[1:1], np.s_[:, 5:0:-1, ::4], np.s_[0, 0, 0],
                  np.s_[-11:, -7::2, 1:-1]]
    for sel in selections:
        got = a[sel]
        assert got.dtype == expected.dtype
        assert got.shape == expected[sel].shape, sel
        assert np.array_equal(got, expected[sel]), sel
    for bad in (np.s_[11], np.s_[0, -8], np.s_[0, 0, 0, 0], np.s_[..., ...], np.s_[[1, 2]], np.s_[0.5]):
        with pytest.raises(IndexError):
            a[bad]


def test_writes_land_where_numpy_puts_them_and_missing_chunks_read_fill(tmp_path, runtime):
    a = zarrcoro.create_array(tmp_path / "w", shape=(9, 6), chunks=(4, 4), dtype="float64", fill_value=-2.5,
                              runtime=runtime)
    model = np.full((9, 6), -2.5)
    a[1:3, 2:] = 7.0
    model[1:3, 2:] = 7.0
    a[5] = np.arange(6)
    model[5] = np.arange(6)
    a[8:3:-1, 0] = [1, 2, 3, 4, 5]
    model[8:3:-1, 0] = [1, 2, 3, 4, 5]
    assert np.array_equal(a[:], model)
    assert sorted(p.name for p in (tmp_path / "w" / "c").iterdir()) == ["0", "1", "2"]
    reopened = zarrcoro.open_array(tmp_path / "w", runtime=runtime, mode="r")
    assert reopened.fill_value == -2.5
    with pytest.raises(zarrcoro.InvalidArgument):
        reopened[0] = 1.0


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("dtype", ["bool", "int8", ">i2", "<u4", "int64", "float16", ">f4", "float64", "complex64",
                                   ">c16"])
def test_every_numeric_dtype_round_trips_exactly(tmp_path, runtime, zarr_format, dtype):
    rng = np.random.default_rng(1)
    data = rng.integers(-100, 100, size=(5, 3)).astype(dtype)
    a = zarrcoro.create_array(tmp_path / "d", shape=(5, 3), chunks=(2, 2), dtype=dtype, zarr_format=zarr_format,
                              runtime=runtime)
    a[:] = data
    b = zarrcoro.open_array(tmp_path / "d", runtime=runtime)
    assert b.dtype == np.dtype(dtype).newbyteorder("=")  # read in native order
    assert b.zarr_format == zarr_format
    assert np.array_equal(b[:], data)


def test_strings_and_sharded_arrays(tmp_path, runtime):
    s = zarrcoro.create_array(tmp_path / "s", shape=(5,), chunks=(2,), dtype=str, fill_value="-", runtime=runtime)
    s[1:4] = ["\u00e9t\u00e9", "", "x"]
    assert list(zarrcoro.open_array(tmp_path / "s", runtime=runtime)[:]) == ["-", "\u00e9t\u00e9", "", "x", "-"]
    a = zarrcoro.create_array(tmp_path / "sh", shape=(8, 8), chunks=(2, 2), shards=(4, 8), dtype="uint16",
                              runtime=runtime)
    a[2:7, 1:3] = 9
    expected = np.zeros((8, 8), "uint16")
    expected[2:7, 1:3] = 9
    assert np.array_equal(a[:], expected)
    assert a.metadata["codecs"][0]["name"] == "sharding_indexed"


def test_errors_are_typed_and_name_the_key_and_field(tmp_path, runtime):
    with pytest.raises(zarrcoro.NotFound) as e:
        zarrcoro.open_array(tmp_path / "nothing", runtime=runtime)
    assert e.value.key == "zarr.json"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array", "shape": [2], '
                                                '"data_type": "float8", "chunk_grid": "regular"}')
    with pytest.raises(zarrcoro.ZarrcoroError) as e:
        zarrcoro.open_array(tmp_path / "bad", runtime=runtime)
    assert e.value.key == "zarr.json"
    a = zarrcoro.create_array(tmp_path / "x", shape=(4,), chunks=(2,), dtype="int16", runtime=runtime)
    with pytest.raises(zarrcoro.AlreadyExists):
        zarrcoro.create_array(tmp_path / "x", shape=(4,), chunks=(2,), dtype="int16", runtime=runtime)
    with pytest.raises(zarrcoro.InvalidArgument) as e:
        a.read_into(np.empty(4, "int32"))
    assert e.value.field == "out"
    with pytest.raises(ValueError):
        a[:] = np.zeros(3)
    with pytest.raises(zarrcoro.InvalidArgument):
        zarrcoro.create_array(tmp_path / "__y", shape=(1,), dtype="int8", path="__y", runtime=runtime)
    runtime.close()
    with pytest.raises(zarrcoro.InvalidArgument) as e:
        a[0]
    assert e.value.field == "runtime"


def test_arrays_pickle_as_what_reopens_them(tmp_path):
    a = zarrcoro.create_array(tmp_path / "p", shape=(3,), chunks=(2,), dtype="int32")
    a[:] = [4, 5, 6]
    b = pickle.loads(pickle.dumps(a))
    assert b.path == a.path and b.shape == (3,)
    assert list(b[:]) == [4, 5, 6]


def test_groups_list_their_members(tmp_path, runtime):
    g = zarrcoro.create_group(tmp_path / "g", attributes={"k": 1}, runtime=runtime)
    zarrcoro.create_array(tmp_path / "g", path="x", shape=(2,), dtype="int8", runtime=runtime)
    zarrcoro.create_group(tmp_path / "g", path="sub", runtime=runtime)
    g = zarrcoro.open_group(tmp_path / "g", runtime=runtime)
    assert g.attrs == {"k": 1}
    assert g.members() == [("sub", "group"), ("x", "array")]
    assert g["x"].shape == (2,)
    assert "sub" in g and "nope" not in g


def test_asyncio_reads_complete_through_the_loop_which_runs_no_codec_work(tmp_path):
    rt = zarrcoro.Runtime(codec_threads=2)
    data = np.arange(64 * 4096, dtype="<u4").reshape(64, 4096)
    a = zarrcoro.create_array(tmp_path / "z", shape=data.shape, chunks=(1, 4096), dtype="<u4", runtime=rt)
    a[:] = data
    before = rt.stats()

    async def main():
        loop = asyncio.get_running_loop()
        ticks = 0
        done = False

        def tick():
            nonlocal ticks
            ticks += 1
            if not done:
                loop.call_soon(tick)

        loop.call_soon(tick)
        rows = await asyncio.gather(*(a.read_async(np.s_[i]) for i in range(64)))
        done = True
        return rows, ticks

    rows, ticks = asyncio.run(main())
    for i, row in enumerate(rows):
        assert np.array_equal(row, data[i])
    after = rt.stats()
    assert after["codec_calls"] - before["codec_calls"] >= 64  # every chunk decoded (zstd) ...
    assert after["codec_calls_off_pool"] == 0  # ... on the codec pool: not on the loop's thread, nor an I/O thread
    assert after["codec_calls_on_io_thread"] == 0  # and the loop's thread ran
    assert ticks >= 2  # its own callbacks while the reads were in flight (they complete by call_soon_threadsafe)


def test_cancelling_the_task_cancels_the_read_and_the_runtime_stays_usable(tmp_path):
    rt = zarrcoro.Runtime(codec_threads=1)
    a = zarrcoro.create_array(tmp_path / "c", shape=(256, 4096), chunks=(1, 4096), dtype="float64", runtime=rt)
    a[:] = 1.0

    async def main():
        task = asyncio.ensure_future(a.read_async())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await a.read_async(np.s_[3])

    assert np.array_equal(asyncio.run(main()), np.ones(4096))


def test_attributes_and_resize_return_the_node_as_it_is_then(tmp_path, runtime):
    a = zarrcoro.create_array(tmp_path / "r", shape=(4,), chunks=(2,), dtype="int8", attributes={"a": 1},
                              runtime=runtime)
    b = a.update_attributes({"b": [1, 2]}).resize((6,))
    assert a.attrs == {"a": 1} and a.shape == (4,)  # the old handle keeps what it had
    assert b.attrs == {"b": [1, 2]} and b.shape == (6,)
    g = zarrcoro.create_group(tmp_path / "g", runtime=runtime).update_attributes({"x": "y"})
    assert zarrcoro.open_group(tmp_path / "g", runtime=runtime).attrs == {"x": "y"} == g.attrs


@pytest.mark.parametrize("shards", [None, (6, 8)])
def test_writes_with_steps_leave_the_elements_between_alone(tmp_path, runtime, shards):
    shape = (11, 8)
    a = zarrcoro.create_array(tmp_path / "st", shape=shape, chunks=(3, 4), shards=shards, dtype="<i8",
                              fill_value=-1, runtime=runtime)
    base = np.arange(88, dtype="<i8").reshape(shape)
    a[...] = base
    model = base.copy()
    rng = np.random.default_rng(7)
    for sel in [np.s_[::2], np.s_[1:10:3, ::-3], np.s_[::-4, 2], np.s_[5, 7:0:-2], np.s_[10:0:-5, 1:7:2],
                np.s_[::3, 3:4], np.s_[2:3, ::5], np.s_[::20], np.s_[..., ::7]]:
        value = rng.integers(1000, 2000, size=model[sel].shape)
        a[sel] = value
        model[sel] = value
        assert np.array_equal(a[...], model), sel
    a[1::4, ::3] = 5  # a scalar broadcast
    model[1::4, ::3] = 5
    assert np.array_equal(zarrcoro.open_array(tmp_path / "st", runtime=runtime)[...], model)


def test_strings_with_steps_and_asyncio(tmp_path, runtime):
    s = zarrcoro.create_array(tmp_path / "s", shape=(4, 5), chunks=(2, 2), dtype=str, fill_value="-",
                              runtime=runtime)
    model = np.full((4, 5), "-", dtype=object)
    s[::3, 1::2] = [["a", "b"], ["c", "\u00e9"]]
    model[::3, 1::2] = [["a", "b"], ["c", "\u00e9"]]
    s[2, ::-4] = "z"
    model[2, ::-4] = "z"

    async def main():
        await s.write_async(np.s_[1, 3::-3], ["p", "q"])
        await s.write_async(np.s_[3, 2], "r")
        return (await s.read_async(), await s.read_async(np.s_[::-2, 1]), await s.read_async(np.s_[0, 1]),
                await s.read_async(np.s_[1:1]))

    model[1, 3::-3] = ["p", "q"]
    model[3, 2] = "r"
    whole, column, one, empty = asyncio.run(main())
    assert whole.tolist() == model.tolist()
    assert column.tolist() == model[::-2, 1].tolist()
    assert one == "a" and empty.shape == (0, 5)
    assert s[...].tolist() == model.tolist()


def test_write_async_with_steps_lands_where_numpy_puts_it(tmp_path, runtime):
    a = zarrcoro.create_array(tmp_path / "wa", shape=(6, 6), chunks=(4, 4), dtype="float32", runtime=runtime)
    model = np.zeros((6, 6), "float32")

    async def main():
        await a.write_async(np.s_[::5, 1::2], [[1, 2, 3], [4, 5, 6]])
        await asyncio.gather(a.write_async(np.s_[1::2, 0], 7), a.write_async(np.s_[2, ::-3], [8, 9]))
        return await a.read_async()

    model[::5, 1::2] = [[1, 2, 3], [4, 5, 6]]
    model[1::2, 0] = 7
    model[2, ::-3] = [8, 9]
    assert np.array_equal(asyncio.run(main()), model)


def test_cancelling_a_write_with_steps_stops_it_between_boxes(tmp_path):
    rt = zarrcoro.Runtime(codec_threads=1)
    a = zarrcoro.create_array(tmp_path / "cw", shape=(8192,), chunks=(64,), dtype="int32", runtime=rt)

    async def main():
        task = asyncio.ensure_future(a.write_async(np.s_[::2], 1))  # 4096 boxes of one element
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await a.write_async(np.s_[1], 5)  # the runtime still works
        return await a.read_async()

    got = asyncio.run(main())
    assert set(np.unique(got[::2]).tolist()) <= {0, 1}  # each box written or not (when the cancel came)
    assert got[1] == 5 and not got[3::2].any()  # and nothing between the selected elements


def test_bad_input_raises_typed_errors_and_leaves_the_array_as_it_was(tmp_path):
    rt = zarrcoro.Runtime(codec_threads=1)
    a = zarrcoro.create_array(tmp_path / "b", shape=(4, 3), chunks=(2, 2), dtype="int16", runtime=rt)
    s = zarrcoro.create_array(tmp_path / "bs", shape=(3,), dtype=str, runtime=rt)
    a[...] = 1
    # Wrong dtype: values that do not cast to the array's dtype.
    for value in ("x", np.array(["1", "y"]), [1 + 2j] * 3, object(), np.nan, 70000, {"a": 1}):
        with pytest.raises(zarrcoro.InvalidArgument) as e:
            a[0] = value
        assert e.value.field == "value"
    with pytest.raises(zarrcoro.InvalidArgument) as e:
        s[0] = 5  # neither str nor bytes
    assert e.value.field == "value"
    with pytest.raises(zarrcoro.InvalidArgument) as e:
        a.read_into(np.empty((4, 3), "int32"))  # a buffer of another dtype
    assert e.value.field == "out"
    # Wrong shape: values that do not broadcast, buffers of another shape or layout.
    for sel, value in ((np.s_[...], np.zeros(4)), (np.s_[::2], np.zeros((3, 3))), (np.s_[1, ::2], [1, 2, 3])):
        with pytest.raises(zarrcoro.InvalidArgument) as e:
            a[sel] = value
        assert e.value.field == "value" and isinstance(e.value, ValueError)
    for out in (np.empty((3, 4), "int16"), np.empty((4, 3), "int16")[:, ::-1], np.empty(12, "int16"), [0] * 12):
        with pytest.raises(zarrcoro.InvalidArgument):
            a.read_into(out)
    # Out-of-range and non-basic selections: InvalidIndex, which is an IndexError too.
    for sel in (np.s_[4], np.s_[-5], np.s_[0, 3], np.s_[0, 0, 0], np.s_[..., ...], np.s_[[0, 1]], np.s_[0.5],
                np.s_[None], np.s_[True], np.s_[1.5:2], np.s_[::0], np.s_[np.array([True] * 4)]):
        for op in (lambda: a[sel], lambda: a.__setitem__(sel, 0), lambda: asyncio.run(a.read_async(sel))):
            with pytest.raises(zarrcoro.InvalidIndex) as e:
                op()
            assert isinstance(e.value, IndexError) and e.value.field == "selection"
    with pytest.raises(zarrcoro.InvalidIndex):
        a.read_into(np.empty((2, 3), "int16"), np.s_[::2])
    assert np.array_equal(a[...], np.ones((4, 3), "int16"))  # nothing above wrote
    # A closed runtime: every operation, blocking or awaited, refuses.
    rt.close()
    for op in (lambda: a[0], lambda: a.__setitem__(0, 1), lambda: a.__setitem__(np.s_[::2], 1), lambda: s[0],
               lambda: a.read_into(np.empty((4, 3), "int16")), lambda: asyncio.run(a.read_async()),
               lambda: asyncio.run(a.write_async(0, 1)), lambda: asyncio.run(s.read_async()), lambda: a.resize((2, 2)),
               lambda: zarrcoro.open_array(tmp_path / "b", runtime=rt), lambda: rt.stats(),
               lambda: zarrcoro.create_array("memory://x", shape=(1,), dtype="int8", runtime=rt),
               lambda: zarrcoro.open_group(tmp_path / "b", runtime=rt)):
        with pytest.raises(zarrcoro.InvalidArgument) as e:
            op()
        assert e.value.field == "runtime"
    assert np.array_equal(zarrcoro.open_array(tmp_path / "b")[...], np.ones((4, 3), "int16"))


def test_bad_parameters_raise_invalid_argument_naming_them(tmp_path, runtime):
    def create(**kw):
        args = dict(shape=(4,), dtype="int8", runtime=runtime)
        args.update(kw)
        return zarrcoro.create_array("memory://bad", **args)

    a = create(path="ok")
    cases = [
        ("dtype", lambda: create(dtype="nonsense")),
        ("fill_value", lambda: create(fill_value="x")),
        ("fill_value", lambda: create(fill_value=1000)),
        ("fill_value", lambda: create(dtype=str, fill_value=3)),
        ("compressor", lambda: create(compressor="lz9")),
        ("zarr_format", lambda: create(zarr_format=4)),
        ("shape", lambda: create(shape=(2.5,))),
        ("shape", lambda: create(shape=(-1,))),
        ("chunks", lambda: create(chunks=("a",))),
        ("shards", lambda: create(chunks=(2,), shards=(None,))),
        ("attributes", lambda: create(attributes={"a": object()})),
        ("attributes", lambda: create(attributes={"a": float("nan")})),
        ("attributes", lambda: a.update_attributes({"a": {1, 2}})),
        ("attributes", lambda: zarrcoro.create_group("memory://badg", attributes={"a": b"x"}, runtime=runtime)),
        ("shape", lambda: a.resize((-2,))),
        ("storage_options", lambda: zarrcoro.open_array("s3://b/x", storage_options={"endpoint": 5},
                                                        runtime=runtime)),
        ("storage_options", lambda: zarrcoro.open_array("s3://b/x", storage_options={"nope": "x"}, runtime=runtime)),
        ("codec_threads", lambda: zarrcoro.Runtime(codec_threads=-1)),
    ]
    for field, op in cases:
        with pytest.raises(zarrcoro.InvalidArgument) as e:
            op()
        assert e.value.field == field, (field, e.value)
    assert zarrcoro.open_array("memory://bad", "ok", runtime=runtime).attrs == {}  # nothing above wrote
