"""The workloads of perf/peers: their data, the shared arrays and what each times.

Three families, scaled by --quick:

- "zb": the zarr_benchmarks suite on this machine: an N^3 uint16 array (N = 512,
  256 with --quick) in 64^3 chunks, uncompressed or zstd(3), unsharded or in
  64^3 shards of 32^3 inner chunks; read all, write all, round trip (read
  the shared array, write it into another), and from the sharded arrays 100
  random 64^3 boxes, one read call each;
- "mvce": zarr-python issue #4293's example: 1,000,000 int32 in 1000 chunks
  of 1000, as v2 without a compressor, v2 with zarr-python 3.4's default
  compressor (zstd level 0) and v3 without a compressor; written and read
  whole, in a memory store and in files ("file": a file store);
- "4194": zarr-python issue #4194's pattern: 1 and 8 threads reading one
  chunk per call, 4 MiB zstd chunks and 4 KiB uncompressed chunks.

The shared arrays are written once by zarr-python (default pipeline); every
engine reads those same files. Writes go into a directory per engine holding
a copy of the shared array's metadata documents, emptied of chunks before
each write (peers.py chooses where: by default on tmpfs).
"""
import dataclasses
import os
import shutil

import numpy as np
import zarr
import zarr.codecs
from zarr.storage import LocalStore

METADATA_FILES = ("zarr.json", ".zarray", ".zattrs", ".zgroup")


@dataclasses.dataclass
class SharedArray:
    """An array every engine reads (its files), and the data it holds."""
    name: str
    path: str
    data: np.ndarray
    source: str          # the data's raw bytes (C order), for the C++ program's writes
    zarr_format: int
    compressor: str      # "none" or "zstd"
    chunks: tuple
    shards: tuple = None  # the shard shape when sharded (then `chunks` is the inner chunk shape)

    @property
    def metadata_doc(self):
        """The array's metadata document (v3 zarr.json, v2 .zarray), parsed."""
        import json
        with open(os.path.join(self.path, "zarr.json" if self.zarr_format == 3 else ".zarray")) as f:
            return json.load(f)


@dataclasses.dataclass
class Workload:
    """One row of the table: an operation on a shared array.

    op: "read" (whole array), "write" (whole array into the engine's own
    directory), "round_trip" (read the shared array, write it into the
    engine's directory), "regions" (one read call per region, on `threads`
    threads), "mem_write" / "mem_read" (the whole array in a memory store
    of the engine's own).
    """
    name: str
    op: str
    array: SharedArray
    regions: list = None
    threads: int = 1
    limit_threads: int = 0  # threads of the limits' loops; 0: one per core
    note: str = ""

    def expected(self):
        """What a read returns: the array, or the regions' data concatenated (flat)."""
        if self.op == "regions":
            return np.concatenate([self.array.data[box_slices(r)].ravel() for r in self.regions])
        return self.array.data


def box_slices(region):
    start, stop = region
    return tuple(slice(a, b) for a, b in zip(start, stop))


# ---- data ------------------------------------------------------------------------------

def ramp_noise(shape, seed):
    """uint16 samples with some structure: a slow ramp across the array plus 4
    bits of noise per element (zstd level 3 gets about 2.5x on it)."""
    rng = np.random.default_rng(seed)
    out = np.empty(shape, np.uint16)
    weights = np.arange(len(shape), 0, -1)  # z*3 + y*2 + x in 3-d
    rest = np.zeros(shape[1:], np.int64)
    for d, n in enumerate(shape[1:]):
        axis = [1] * (len(shape) - 1)
        axis[d] = n
        rest = rest + (np.arange(n) * weights[d + 1]).reshape(axis)
    for i in range(shape[0]):  # one slab at a time, to bound the temporaries
        ramp = ((rest + i * weights[0]) >> 5) * 3
        out[i] = ramp + rng.integers(0, 16, shape[1:], dtype=np.int64)
    return out


# ---- the shared arrays ------------------------------------------------------------------

def write_shared(root, name, data, zarr_format, compressor, chunks, shards=None):
    """Writes `data` as a fresh array at root/name with zarr-python 3 (default
    pipeline), and its raw bytes to a .bin file beside it (one per data)."""
    path = os.path.join(root, name)
    if zarr_format == 2:
        compressors = "auto" if compressor == "zstd" else None  # "auto": zarr-python 3.4's v2 default, zstd(0)
        kwargs = {}
    else:
        compressors = [zarr.codecs.ZstdCodec(level=3, checksum=False)] if compressor == "zstd" else None
        kwargs = {"serializer": zarr.codecs.BytesCodec(endian="little")}
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        a = zarr.create_array(LocalStore(path), shape=data.shape, dtype=data.dtype, chunks=chunks, shards=shards,
                              compressors=compressors, fill_value=0, zarr_format=zarr_format, overwrite=True,
                              **kwargs)
        a[...] = data
    source = os.path.join(root, "data_%x.bin" % id(data))
    if not os.path.exists(source):
        data.tofile(source)
    return SharedArray(name, path, data, source, zarr_format, compressor, tuple(chunks),
                       tuple(shards) if shards else None)


def engine_dir(shared, engine_key, root):
    """A directory for `engine_key`'s writes of `shared`: its metadata documents, no chunks."""
    path = os.path.join(root, "writes", shared.name, engine_key)
    os.makedirs(path, exist_ok=True)
    for name in METADATA_FILES:
        src = os.path.join(shared.path, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(path, name))
    return path


def clear_chunks(path):
    """Removes every chunk (everything but the metadata documents) under `path`."""
    for entry in os.scandir(path):
        if entry.name in METADATA_FILES:
            continue
        if entry.is_dir():
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def random_boxes(shape, box, count, seed):
    """`count` boxes of shape `box` at random places inside `shape`: [start, stop]."""
    rng = np.random.default_rng(seed)
    boxes = []
    for _ in range(count):
        start = [int(rng.integers(0, n - b + 1)) for n, b in zip(shape, box)]
        boxes.append([start, [s + b for s, b in zip(start, box)]])
    return boxes


def chunk_regions(shape, chunks, limit=None):
    """One region per chunk of the grid, in C order (the first `limit`)."""
    grid = [n // c for n, c in zip(shape, chunks)]
    regions = []
    for flat in range(int(np.prod(grid))):
        coords = np.unravel_index(flat, grid)
        start = [int(i * c) for i, c in zip(coords, chunks)]
        regions.append([start, [s + c for s, c in zip(start, chunks)]])
        if limit and len(regions) == limit:
            break
    return regions


# ---- the workloads --------------------------------------------------------------------

def build(root, quick, only=(), size=None, log=print):
    """Writes the shared arrays under `root` and returns the workloads; with
    `only` (substrings), just the workloads whose name holds one of them,
    and just the arrays they need. `size`: the zarr_benchmarks arrays' edge
    (a multiple of 64; default 512, 256 when quick)."""
    def selected(name):
        return not only or any(s in name for s in only)

    workloads = []

    def add(make_array, specs):
        """specs: (name, op, kwargs); the array is written only if one is selected."""
        specs = [s for s in specs if selected(s[0])]
        if specs:
            a = make_array()
            workloads.extend(Workload(name, op, a, **kwargs) for name, op, kwargs in specs)

    n = size or (256 if quick else 512)
    zb_data = []

    def zb_array(codec, sharded):
        if not zb_data:
            log("writing the zarr_benchmarks arrays (%d^3 uint16) with zarr-python..." % n)
            zb_data.append(ramp_noise((n, n, n), seed=1))
        return write_shared(root, "zb_%s_%s" % (codec, "sharded" if sharded else "chunked"), zb_data[0], 3, codec,
                            (32,) * 3 if sharded else (64,) * 3, (64,) * 3 if sharded else None)

    boxes = random_boxes((n, n, n), (64,) * 3, 100, seed=2)
    for codec in ("none", "zstd"):
        for sharded in (False, True):
            layout = codec + ("/shard" if sharded else "")
            specs = [("zb/read/" + layout, "read", {}), ("zb/write/" + layout, "write", {}),
                     ("zb/roundtrip/" + layout, "round_trip", {})]
            if sharded:
                specs.append(("zb/boxes/" + layout, "regions",
                              {"regions": boxes, "note": "100 random 64^3 boxes, one call each, one caller"}))
            add(lambda c=codec, s=sharded: zb_array(c, s), specs)

    mvce_data = np.arange(1_000_000, dtype=np.int32)
    for label, fmt, codec in (("v2-none", 2, "none"), ("v2-default", 2, "zstd"), ("v3-none", 3, "none")):
        specs = [("mvce/%s/%s/%s" % (op, label, store), ("mem_" + op) if store == "mem" else op, {})
                 for store in ("mem", "file") for op in ("write", "read")]
        add(lambda l=label, f=fmt, c=codec: write_shared(root, "mvce_" + l.replace("-", "_"), mvce_data, f, c,
                                                        (1000,)), specs)

    calls_small = 1024 if quick else 4096
    for label, shape, chunks, codec, calls, seed in (("zstd-4MiB", (4096, 12288), (1024, 2048), "zstd", None, 3),
                                                      ("raw-4KiB", (2048, 4096), (32, 64), "none", calls_small, 4)):
        regions = chunk_regions(shape, chunks, calls)
        specs = [("4194/%s/%dt" % (label, t), "regions",
                  {"regions": regions, "threads": t, "limit_threads": t,
                   "note": "%d calls of one chunk each, %d thread(s)" % (len(regions), t)}) for t in (1, 8)]
        add(lambda l=label, s=shape, c=chunks, k=codec, sd=seed: write_shared(
            root, "i4194_" + l.replace("-", "_"), ramp_noise(s, seed=sd), 3, k, c), specs)
    log("shared arrays written under %s" % root)
    return workloads
