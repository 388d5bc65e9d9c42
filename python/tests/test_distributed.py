"""Writing one sharded array from a dask.distributed LocalCluster of two
worker processes: dask chunks share shards, each worker reopens the array
from its pickle, and no update is lost (the engine's conditional writes);
and an xarray Dataset opened with engine zarrcoro computed on the cluster.
On the filesystem, and on the test radosgw (marker s3: ctest
python_binding_s3, which needs CTest's rgw fixture; without a running
radosgw these skip, or fail when CI is set)."""
import logging
import os
import socket
import sys
import time

import numpy as np
import pytest

import zarrcoro

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")


@pytest.fixture(scope="module")
def client():
    """One cluster for the module (starting one takes seconds): two worker
    processes of one thread each."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster, distributed.Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


def rgw():
    """(bucket, storage_options) of the radosgw tests/s3/rgw.sh runs, from
    $ZARRCORO_RGW_ROOT/env, or None."""
    root = os.environ.get("ZARRCORO_RGW_ROOT") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "zarrcoro-rgw")
    try:
        with open(os.path.join(root, "env")) as f:
            env = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return None
    endpoint = env.get("ZARRCORO_S3_ENDPOINT", "")
    host, _, port = endpoint.rpartition("://")[2].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except (OSError, ValueError):
        return None
    return env["ZARRCORO_S3_BUCKET"], {"endpoint": endpoint, "region": env["ZARRCORO_S3_REGION"],
                                       "access_key_id": env["ZARRCORO_S3_ACCESS_KEY"],
                                       "secret_access_key": env["ZARRCORO_S3_SECRET_KEY"]}


@pytest.fixture(params=["filesystem", pytest.param("s3", marks=pytest.mark.s3)])
def place(request, tmp_path):
    """A function name -> (URL, storage_options) of a new location in the store."""
    if request.param == "filesystem":
        return lambda name: (str(tmp_path / name), {})
    found = rgw()
    if found is None:
        message = "radosgw is not running (tests/s3/rgw.sh start; ctest -R python_binding_s3 starts it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    bucket, options = found
    prefix = "python-%d-%d" % (os.getpid(), time.time_ns())
    return lambda name: ("s3://%s/%s/%s" % (bucket, prefix, name), options)


def test_dask_store_into_shared_shards_loses_no_update(client, place):
    url, options = place("store")
    a = zarrcoro.create_array(url, shape=(32, 24), chunks=(4, 4), shards=(16, 12), dtype="int32",
                              storage_options=options)
    data = np.arange(32 * 24, dtype="int32").reshape(32, 24) * 3 + 1
    x = da.from_array(data, chunks=(4, 6))  # 32 blocks; each shard holds 8 of them
    da.store(x, a, lock=False)  # on the cluster: the Client is the default scheduler
    assert np.array_equal(zarrcoro.open_array(url, storage_options=options)[:], data)


def _write_interleaved(array, parity, data):
    """In a worker: row by row, every other element (a write with step 2:
    one box per element), the other worker writing the elements between in
    the same inner chunks and shards."""
    for i in range(array.shape[0]):
        array[i, parity::2] = data[i, parity::2]
    return os.getpid()


def test_two_worker_processes_writing_between_each_others_elements_lose_no_update(client, place):
    url, options = place("interleaved")
    a = zarrcoro.create_array(url, shape=(16, 12), chunks=(4, 4), shards=(8, 12), dtype="int32", fill_value=-1,
                              storage_options=options)
    data = np.arange(16 * 12, dtype="int32").reshape(16, 12) + 100
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == 2
    futures = [client.submit(_write_interleaved, a, parity, data, workers=[w], allow_other_workers=False,
                             pure=False) for parity, w in enumerate(workers)]
    pids = client.gather(futures)
    assert len(set(pids)) == 2 and os.getpid() not in pids  # two worker processes, not this one
    assert np.array_equal(zarrcoro.open_array(url, storage_options=options)[:], data)


def test_an_xarray_dataset_computes_on_the_cluster(client, tmp_path):
    xr = pytest.importorskip("xarray")
    from zarrcoro.xarray_backend import ZarrcoroBackendEntrypoint

    data = np.arange(20 * 30, dtype="float64").reshape(20, 30)
    data[3, 4] = np.nan
    a = zarrcoro.create_array(tmp_path / "x", path="v", shape=data.shape, chunks=(5, 10), dtype="float64",
                              fill_value=np.nan, dimension_names=["r", "c"])
    a[...] = data
    ds = xr.open_dataset(tmp_path / "x", engine=ZarrcoroBackendEntrypoint, chunks={})
    assert ds.v.chunks == ((5, 5, 5, 5), (10, 10, 10))
    total = ds.v.sum().compute()  # the Client is the default scheduler: the workers read the chunks
    assert float(total) == float(np.nansum(data))
    assert np.array_equal((ds.v * 2).compute().values, data * 2, equal_nan=True)
