#!/usr/bin/python3
"""zarr-python 2.13 (Debian) against zarrcoro-server over HTTP (fsspec + aiohttp).

    /usr/bin/python3 zarr_python_http.py ROOT URL

Writes Zarr v2 arrays with zarr itself into ROOT/py.zarr (a group with a
Blosc int32 array whose first chunk row is never written, a zlib float64
array, an uncompressed big-endian uint16 array and a nested group), then
opens the group through the server at URL (which serves ROOT) with
zarr.storage.FSStore and checks every array, whole and sliced, element for
element, and lists it (keys() through the server's directory page, tree()
and info through consolidated metadata). Also reads a chunk file with fsspec's HTTP filesystem, whole and by
byte ranges, and compares the bytes with the file on disk, and reads regions
of the v2 arrays through the server's slice API (.npy decoded by zarrcoro).

Prints one "ok ..." line per check; exit status 0 on success, 1 on a
mismatch (the assertion's message on stderr), 2 on bad usage.
"""
import io
import os
import sys

import fsspec
import numcodecs
import numpy as np
import requests
import zarr


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, url = sys.argv[1], sys.argv[2].rstrip("/")

    # Write with zarr itself.
    group = zarr.open_group(os.path.join(root, "py.zarr"), mode="w")
    group.attrs["title"] = "written by zarr-python " + zarr.__version__
    ints = group.create_dataset("ints", shape=(37, 23), chunks=(8, 5), dtype="<i4", fill_value=-7)
    expected_ints = np.arange(37 * 23, dtype="<i4").reshape(37, 23)
    ints[8:, :] = expected_ints[8:, :]  # rows 0..7 never written: missing chunks read as fill
    expected_ints[:8, :] = -7
    floats = group.create_dataset("floats", shape=(100,), chunks=(30,), dtype="<f8",
                                  compressor=numcodecs.Zlib(level=5), fill_value=0.0)
    expected_floats = np.linspace(-1.5, 2.25, 100) ** 3
    floats[:] = expected_floats
    nested = group.create_group("nested")
    be = nested.create_dataset("be", shape=(6, 7), chunks=(4, 4), dtype=">u2", compressor=None)
    expected_be = (np.arange(42) * 1531).astype(">u2").reshape(6, 7)
    be[:] = expected_be

    # Read through the server.
    store = zarr.storage.FSStore(url + "/py.zarr", mode="r")
    remote = zarr.open_group(store, mode="r")
    assert remote.attrs["title"] == group.attrs["title"], remote.attrs.asdict()
    for name, expected in (("ints", expected_ints), ("floats", expected_floats), ("nested/be", expected_be)):
        arr = remote[name]
        assert arr.shape == expected.shape and arr.dtype == expected.dtype, (name, arr.shape, arr.dtype)
        np.testing.assert_array_equal(arr[...], expected, err_msg=name)
        sl = tuple(slice(1, max(2, n - 2)) for n in expected.shape)
        np.testing.assert_array_equal(arr[sl], expected[sl], err_msg=name + " slice")
        print("ok zarr-python read", name, list(expected.shape), str(expected.dtype))

    # Listing: the group's keys() through the server's page of its directory
    # (fsspec reads the links); tree() and info through consolidated metadata
    # (fsspec lists "dir" without the slash, which is no page: a directory is no key).
    assert sorted(remote.keys()) == ["floats", "ints", "nested"], sorted(remote.keys())
    zarr.consolidate_metadata(os.path.join(root, "py.zarr"))
    consolidated = zarr.open_consolidated(url + "/py.zarr", mode="r")
    tree = str(consolidated.tree())
    assert "be (6, 7) >u2" in tree and "ints (37, 23) int32" in tree, tree
    assert "Shape              : (37, 23)" in str(consolidated["ints"].info), str(consolidated["ints"].info)
    print("ok zarr-python keys tree info")

    # Bytes of one chunk file through fsspec's HTTP filesystem: whole and ranged.
    fs = fsspec.filesystem("http")
    chunk = "py.zarr/ints/2.1"
    with open(os.path.join(root, chunk), "rb") as f:
        local = f.read()
    assert fs.cat_file(url + "/" + chunk) == local
    assert fs.cat_file(url + "/" + chunk, start=3, end=20) == local[3:20]
    assert fs.cat_file(url + "/" + chunk, start=-5) == local[-5:]
    assert fs.size(url + "/" + chunk) == len(local)
    print("ok fsspec http bytes", chunk, len(local))

    # The server's slice API decodes the v2 arrays itself (zarrcoro's engine).
    for name, expected, region, sl in (
            ("ints", expected_ints, "3:20,4:17", np.s_[3:20, 4:17]),
            ("floats", expected_floats, "5:95", np.s_[5:95]),
            ("nested/be", expected_be, ":,2:5", np.s_[:, 2:5])):
        r = requests.get(f"{url}/api/v1/py.zarr/{name}", params={"region": region}, timeout=30)
        assert r.status_code == 200, (name, r.status_code, r.text)
        got = np.load(io.BytesIO(r.content))
        np.testing.assert_array_equal(got, expected[sl], err_msg=name + " via the slice API")
        assert got.dtype == expected.dtype.newbyteorder("<"), (name, got.dtype)  # npy is little-endian
        print("ok slice API", name, region)
    return 0


if __name__ == "__main__":
    sys.exit(main())
