"""Boxes of one large LocalStore shard through zarr-python: zarrcoro's codec
pipeline (the engine reads the shard's index, then the inner chunks a box
touches, by byte ranges) against zarr-python's own pipeline, in the same run.

    PYTHONPATH=build/python python/.venv/bin/python perf/shard_boxes.py [--boxes 200] [--json FILE]

One shard of float32 in 64x64 inner chunks, of 1, 4 and 16 MiB uncompressed
and 4 MiB with zstd, written by zarr-python; 200 random 100x100 boxes read
from each, every box checked against the data. Prints milliseconds per box
(best of 5 passes, the two pipelines alternated twice) and zarrcoro's over
zarr-python's; --json writes one record per (shard, pipeline)."""
import argparse
import json
import tempfile
import time

import numpy as np
import zarr

import zarrcoro.pipeline  # noqa: F401  (registers the pipeline)

PIPELINES = {
    "zarr+zc": {"codec_pipeline.path": "zarrcoro.pipeline.CodecPipeline"},
    "zarr": {"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"},
}
SHARDS = [(512, None), (1024, None), (2048, None), (1024, "zstd")]  # side (elements), compressor


def ms_per_box(path, config, starts, data):
    with zarr.config.set(config):
        z = zarr.open_array(path, mode="r")
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for r, c in starts:
                box = z[r:r + 100, c:c + 100]
            best = min(best, time.perf_counter() - t)
            if not np.array_equal(box, data[r:r + 100, c:c + 100]):
                raise SystemExit(f"{config}: box ({r}, {c}) differs from the data")
    return best / len(starts) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=200)
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for side, compressor in SHARDS:
            path = f"{tmp}/{side}-{compressor}.zarr"
            data = rng.random((side, side), dtype="float32")
            with zarr.config.set(PIPELINES["zarr"]):
                z = zarr.create_array(store=path, shape=data.shape, chunks=(64, 64), shards=data.shape,
                                      dtype="float32", compressors=None if compressor is None else zarr.codecs.ZstdCodec())
                z[:] = data
            starts = rng.integers(0, side - 100, size=(args.boxes, 2))
            ms = {}
            for name in list(PIPELINES) * 2:
                ms[name] = min(ms.get(name, float("inf")), ms_per_box(path, PIPELINES[name], starts, data))
            label = f"{side * side * 4 >> 20} MiB {compressor or 'none'}"
            ratio = ms["zarr+zc"] / ms["zarr"]
            print(f"{label:12s}  zarr+zc {ms['zarr+zc']:.2f} ms  zarr {ms['zarr']:.2f} ms  ratio {ratio:.2f}", flush=True)
            for name, value in ms.items():
                records.append({"workload": f"shard_boxes/{label}", "engine": name, "ms_per_box": value,
                                **({"ratio_to_zarr": ratio} if name == "zarr+zc" else {})})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
