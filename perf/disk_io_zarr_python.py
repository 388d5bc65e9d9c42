#!/usr/bin/python3
"""zarr-python 2's side of perf/disk_io (run by it as a subprocess).

    /usr/bin/python3 disk_io_zarr_python.py ARRAY_DIR ROUNDS [READS]

ARRAY_DIR is the v2 array disk_io wrote: 1e6 int32 (<i4) in chunks of 1000,
no compressor, holding 0..999999. Times `z[:]` (read) and `z[:] = data`
(write) ROUNDS times, each round reading READS times (default 1), and prints one JSON object on stdout:
{"zarr_version", "read_ms", "write_ms"} (minimums). Every read is checked
against 0..999999 (exit 1 on a mismatch). Exit 3 when zarr cannot be
imported (disk_io then skips zarr-python)."""
import json
import sys
import time

try:
    import numpy as np
    import zarr
except ImportError as e:
    print(json.dumps({"error": f"cannot import zarr: {e}"}))
    sys.exit(3)

path, rounds = sys.argv[1], int(sys.argv[2])
reads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
z = zarr.open_array(path, mode="r+")
expected = np.arange(1_000_000, dtype="<i4")
if z.shape != expected.shape or z.dtype != expected.dtype:
    sys.exit(f"unexpected array {z.shape} {z.dtype} at {path}")


def check(a):
    if not np.array_equal(a, expected):
        sys.exit(f"zarr-python read wrong data from {path}")


read_ms, write_ms = [], []
for _ in range(rounds):
    for _ in range(reads):
        t0 = time.perf_counter()
        a = z[:]
        read_ms.append((time.perf_counter() - t0) * 1e3)
        check(a)
    t0 = time.perf_counter()
    z[:] = expected
    write_ms.append((time.perf_counter() - t0) * 1e3)
check(z[:])
print(json.dumps({"zarr_version": zarr.__version__, "read_ms": min(read_ms), "write_ms": min(write_ms)}))
