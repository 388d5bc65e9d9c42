"""The binding across threads and processes: Dask reads an array in
parallel through NumPy-style indexing, and two processes writing different
elements of the same shards lose no update (the engine's conditional
writes), each reopening the array from its pickle."""
import multiprocessing

import numpy as np

import zarrcoro


def test_dask_reads_the_array_in_parallel(tmp_path):
    import dask
    import dask.array as da

    data = np.arange(40 * 30, dtype="float32").reshape(40, 30)
    a = zarrcoro.create_array(tmp_path / "d", shape=data.shape, chunks=(8, 10), dtype="float32")
    a[:] = data
    x = da.from_array(a, chunks=a.chunks)
    with dask.config.set(scheduler="threads", num_workers=4):
        assert float(x.sum().compute()) == float(data.sum())
        assert np.array_equal(x[5:33:3, ::-2].compute(), data[5:33:3, ::-2])


def _write_every_other(pickled, parity):
    import pickle

    a = pickle.loads(pickled)
    for i in range(parity, a.shape[0], 2):
        a[i] = i + 1  # one element at a time: each write rewrites a shard the other process writes too


def test_two_processes_writing_one_sharded_array_lose_no_update(tmp_path):
    import pickle

    a = zarrcoro.create_array(tmp_path / "s", shape=(64,), chunks=(4,), shards=(32,), dtype="int32")
    pickled = pickle.dumps(a)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter and engine each
    workers = [ctx.Process(target=_write_every_other, args=(pickled, p)) for p in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    assert np.array_equal(zarrcoro.open_array(tmp_path / "s")[:], np.arange(1, 65, dtype="int32"))


_EXIT_DURING_COMPLETION = """
import json, time
import numpy as np
from zarrcoro import _zarrcoro, default_runtime

meta = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}
codec = _zarrcoro.ChunkCodec.from_metadata(json.dumps(meta))


class SlowLoop:
    def call_soon_threadsafe(self, *args):
        time.sleep(0.5)  # without the GIL, as a socket write may be
        print("completed", flush=True)


out = np.zeros(4, "int32")
runtime = default_runtime()  # held to the end: its threads outlive the exit's atexit hooks
codec.decode(runtime._native, [("c/0", None, out, 0, [4], ([], [], []))], SlowLoop(), object())
time.sleep(0.1)  # the program ends while the completion is inside call_soon_threadsafe
"""


def test_an_engine_completion_under_way_at_exit_does_not_abort_the_interpreter():
    """Was: "Fatal Python error: PyGILState_Release" and exit status 134 when
    a program ended while an engine thread, completing an operation, had let
    go of the GIL inside Python (it was ended when it took the GIL back during
    finalization). The exit now waits for it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _EXIT_DURING_COMPLETION], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "completed\n"
