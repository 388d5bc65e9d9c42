#!/usr/bin/python3
"""Interop matrix: zarrcoro against the current peers from PyPI.

Peers (pinned in requirements.txt, installed by setup.sh into .venv beside
this file): zarr-python 3 ("zarr-python"), zarrs-python, i.e. zarr-python
with the Rust codec pipeline zarrs.ZarrsCodecPipeline in strict mode, so that
it refuses instead of falling back to zarr-python's own codecs ("zarrs"), and
TensorStore ("tensorstore").

Every case of the matrix (build_matrix) is one array, described once and
independently of any library: Zarr v2 or v3; a data type (bool, int8..64,
uint8..64, float16/32/64, complex64/128, fixed-length bytes and UTF-32,
a structured type, variable-length UTF-8 strings) with its stored byte order;
a codec (none, zstd, gzip, blosc, crc32c); sharding with the index at the
start or the end; C or F order (v2 `order`, v3 a `transpose` codec); a fill
value (NaN, +-Infinity, hex NaN payloads, -0.0, ...); zero-size and 0-d
shapes; consolidated metadata (v2 .zmetadata, v3 inline). Most arrays are
written only in part, so that they have partial edge chunks and missing
chunks (or missing shards and missing inner chunks), which read as the fill
value. The values hold NaNs with payloads, -0.0 and infinities.

Both directions, for each peer:
  zarrcoro -> peer  zarrcoro writes the case (tests/tools/interop_io.cpp);
                    the peer reads it.
  peer -> zarrcoro  the peer writes the case through its own API; zarrcoro
                    reads it.
Each read is checked exactly against the case: shape, data type (and, for
zarrcoro, the data type document), fill value bit for bit, and the values
bit for bit (floats included, NaN payloads too).

Each cell ends as one of:
  exact     everything equal.
  mismatch  anything differs, or zarrcoro fails to write or read the case:
            the test fails (unless the cell is in EXPECTED_FAILURES).
  refused   the peer raised on create, write or read (its message is listed),
            or the metadata it stored lacks what the case asks for (e.g. a
            NaN payload in the fill value written as plain NaN, checked in
            every writer's documents by layout_problems). Not a failure,
            never silently dropped: every refusal is printed.
An expected failure that now passes is printed (XPASS) but does not fail the
test: remove it from EXPECTED_FAILURES.

  matrix.py --io BUILD/tests/zarrcoro_interop_io --work DIR [--only SUBSTR]

Exit 0 when no cell mismatches, 1 otherwise, 77 (skipped) when the peers'
virtual environment is missing (run ./setup.sh), 1 then too where CI is set.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venv"

# Runs in the venv's interpreter: re-executes itself there when started by
# another one (ctest starts /usr/bin/python3), before importing the peers.
if Path(sys.prefix).resolve() != VENV.resolve():
    venv_python = VENV / "bin" / "python3"
    if not venv_python.exists():
        why = "no peers virtual environment at %s (./setup.sh makes it; zarr 3.4 needs Python >= 3.12)" % VENV
        if os.environ.get("CI"):  # CI must run the matrix, not skip it
            print("FAILED: " + why)
            sys.exit(1)
        print("SKIPPED: " + why + "; set CI to make this a failure")
        sys.exit(77)
    os.execv(str(venv_python), [str(venv_python), os.path.abspath(__file__)] + sys.argv[1:])

import base64  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numcodecs  # noqa: E402
import numpy as np  # noqa: E402
import tensorstore as ts  # noqa: E402
import zarr  # noqa: E402
import zarr.codecs as zc  # noqa: E402

warnings.simplefilter("ignore")  # zarr-python warns about unstable data types and v2 codecs

PEERS = ("zarr-python", "zarrs", "tensorstore")

# Cells that mismatch because of a known fault, kept green until it is fixed:
# (case name, "zarrcoro->PEER" or "PEER->zarrcoro") -> whose fault, and what.
# Each was checked without zarrcoro too: the peer's own files show it.
EXPECTED_FAILURES = {
    # zarr-python 3.4.2 (and so zarrs-python, which parses metadata through
    # it) reads the float16 fill "0x7e01" as 0x7e00: the payload of a hex
    # float16 NaN is lost (float32 and float64 keep theirs).
    ("v3_fill_nanpayload_le_f2", "zarrcoro->zarr-python"): "zarr-python: float16 hex NaN fill loses its payload",
    ("v3_fill_nanpayload_le_f2", "zarrcoro->zarrs"): "zarr-python: float16 hex NaN fill loses its payload",
    # zarrs 0.2.3 fills missing chunks with the canonical NaN, not with the
    # fill value's payload (its fill_value reads 0x7fc00001; the elements
    # of missing chunks 0x7fc00000).
    ("v3_fill_nanpayload_le_f4", "zarrcoro->zarrs"): "zarrs: missing chunks lose the fill's NaN payload",
    ("v3_fill_nanpayload_le_f8", "zarrcoro->zarrs"): "zarrs: missing chunks lose the fill's NaN payload",
    ("v3_shard_start_nanpayload_f4", "zarrcoro->zarrs"): "zarrs: missing chunks lose the fill's NaN payload",
    ("v3_shard_end_nanpayload_f4", "zarrcoro->zarrs"): "zarrs: missing chunks lose the fill's NaN payload",
    # zarrs 0.2.3 reads big-endian complex64/128 in partial edge chunks with
    # the real and imaginary parts swapped (whole chunks read right; what it
    # writes is right: zarrcoro and zarr-python read it exactly).
    ("v3_dtype_be_c8", "zarrcoro->zarrs"): "zarrs: big-endian complex in edge chunks read with re/im swapped",
    ("v3_dtype_be_c16", "zarrcoro->zarrs"): "zarrs: big-endian complex in edge chunks read with re/im swapped",
}

# ---------------------------------------------------------------------------
# The matrix


@dataclass
class Case:
    name: str
    fmt: int                 # 2 or 3
    dtype: object            # NumPy dtype (byte order = stored byte order), or "str": vlen UTF-8
    shape: tuple
    chunks: tuple            # chunk shape; with sharding, the shard shape
    codec: str = "zstd"      # none | zstd | gzip | blosc | crc32c
    shard: tuple = None      # (inner chunk shape, "start" | "end")
    order: str = "C"         # C, or F: v2 order "F", v3 a transpose reversing the axes
    fill: object = 0         # the fill value as the metadata writes it (JSON)
    part: bool = True        # write only the first rows: missing chunks read as fill
    consolidated: bool = False  # the array is "a" in a group with consolidated metadata

    @property
    def is_str(self):
        return isinstance(self.dtype, str) and self.dtype == "str"

    @property
    def np_dtype(self):  # the in-memory (little-endian) dtype; object for strings
        return np.dtype(object) if self.is_str else little(np.dtype(self.dtype))

    @property
    def array_path(self):  # below the writer's root
        return self.name + "/a" if self.consolidated else self.name


INT_TYPES = ["|i1", "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "|u1", "<u2", ">u2", "<u4", ">u4", "<u8", ">u8"]
FLOAT_TYPES = ["<f2", ">f2", "<f4", ">f4", "<f8", ">f8"]
COMPLEX_TYPES = ["<c8", ">c8", "<c16", ">c16"]
STRUCT_V2 = [("x", ">f4"), ("n", "<i2"), ("tag", "|S3")]
STRUCT_V3 = [("x", "<f4"), ("n", "<i2")]   # v3 struct fields have no byte order of their own
# NaN payload fill values, as hex bits (v3 only: v2 has no such form).
NAN_PAYLOAD = {"f2": "0x7e01", "f4": "0x7fc00001", "f8": "0x7ff8000000000001"}


def default_fill(dtype, fmt):
    """A non-zero fill value of each kind, so that missing chunks show it."""
    if dtype == "str":
        return "x\u00e9"
    dt = np.dtype(dtype)
    if dt.names:
        if fmt == 2:  # base64 of the record as stored
            return base64.b64encode(np.zeros(1, dt).tobytes()).decode()
        return {n: 0 for n in dt.names}
    return {"b": True, "i": -7, "u": 7, "f": -2.5, "c": [1.5, -2.0],
            "S": base64.b64encode(b"ab".ljust(dt.itemsize, b"\0")).decode(), "U": "x\u00e9"}[dt.kind]


def build_matrix():
    cases = []

    def add(name, fmt, dtype, **kw):
        kw.setdefault("shape", (7, 5))
        kw.setdefault("chunks", (3, 2))
        kw.setdefault("fill", default_fill(dtype, fmt))
        cases.append(Case("v%d_%s" % (fmt, name), fmt, dtype, **kw))

    def tname(dtype):
        if isinstance(dtype, list):
            return "struct"
        return {"<": "le_", ">": "be_", "|": ""}.get(dtype[0], "") + dtype.lstrip("<>|")

    for fmt in (2, 3):
        # Every data type, in both byte orders, zstd.
        for dt in ["|b1"] + INT_TYPES + FLOAT_TYPES + COMPLEX_TYPES + ["|S5", "<U4", ">U4", "str"]:
            add("dtype_" + tname(dt), fmt, dt)
        add("dtype_struct", fmt, STRUCT_V2 if fmt == 2 else STRUCT_V3)
        # Every codec, C and F order, 2-d and 3-d.
        for codec in ("none", "zstd", "gzip", "blosc") + (("crc32c",) if fmt == 3 else ()):
            for dt in ("<u2", ">f8", "str"):
                for order in "CF":
                    add("codec_%s_%s_%s" % (codec, tname(dt), order), fmt, dt, codec=codec, order=order)
            add("codec_%s_3d_F" % codec, fmt, ">i4", codec=codec, order="F", shape=(4, 3, 5), chunks=(3, 2, 2))
        # Fill values, with missing chunks to show them.
        for dt in FLOAT_TYPES[::2]:
            fills = {"nan": "NaN", "inf": "Infinity", "ninf": "-Infinity", "negzero": -0.0}
            if fmt == 3:
                fills["nanpayload"] = NAN_PAYLOAD[dt[1:]]
            for fname, fill in fills.items():
                add("fill_%s_%s" % (fname, tname(dt)), fmt, dt, fill=fill, codec="none")
        add("fill_nan_c16", fmt, "<c16", fill=["NaN", "-Infinity"], codec="none")
        add("fill_zero_i4", fmt, "<i4", fill=0, codec="none")
        add("fill_false_b1", fmt, "|b1", fill=False, codec="none")
        add("fill_empty_str", fmt, "str", fill="", codec="none")
        # A JSON number rounded once to float16 (2^-11 + 2^-30 above 1: 0x3c01,
        # where float64 -> float32 -> float16 gives 0x3c00; shared/cases B49).
        add("fill_f2_rounded_once", fmt, "<f2", fill=1.000488282181322574615478515625, codec="none")
        if fmt == 2:  # zarr-python 2's default fill for "|O" vlen-utf8, 0, stands for "" (shared/cases B46)
            add("fill_zero_str", fmt, "str", fill=0, codec="none")
        # Edge shapes: nothing to store, and 0-d.
        for dt in ("<f8", ">i2", "str"):
            add("zero_size_%s" % tname(dt), fmt, dt, shape=(0, 3), chunks=(2, 2))
            add("zero_d_%s" % tname(dt), fmt, dt, shape=(), chunks=(), part=False)
        add("one_chunk_larger_than_array", fmt, "<u2", shape=(3,), chunks=(4,))
        # Consolidated metadata (v2 .zmetadata, v3 inline): the array's own
        # document is removed once written, so that it is read from the copy.
        for dt in ("<f4", ">i8", "str"):
            add("consolidated_%s" % tname(dt), fmt, dt, consolidated=True)
    # Sharding (v3): the index at the start or the end; missing shards and
    # missing inner chunks in a present shard; edge shards.
    for loc in ("start", "end"):
        for codec in ("none", "zstd", "gzip", "blosc", "crc32c"):
            for dt in ("<f4", ">i2", "str"):
                add("shard_%s_%s_%s" % (loc, codec, tname(dt)), 3, dt, shape=(13, 6), chunks=(4, 6),
                    shard=((2, 3), loc), codec=codec)
        add("shard_%s_transpose_be_f8" % loc, 3, ">f8", shape=(13, 6), chunks=(4, 6), shard=((2, 2), loc),
            order="F")
        add("shard_%s_nanpayload_f4" % loc, 3, "<f4", shape=(13, 6), chunks=(4, 6), shard=((2, 3), loc),
            fill=NAN_PAYLOAD["f4"])
    # The sharding codec after a transpose sees the transposed shard shape
    # (6, 4): inner chunks (3, 2) divide it, though not the shard shape (4, 6).
    add("shard_end_transpose_inner_3x2", 3, "<i2", shape=(13, 6), chunks=(4, 6), shard=((2, 3), "end"), order="F")
    return cases


# ---------------------------------------------------------------------------
# Values


def little(dt):
    """`dt` with every field little-endian (zarrcoro's in-memory form)."""
    return dt.newbyteorder("<") if dt.kind not in "bSV" or dt.names else dt


def written_region(case):
    """The slices a writer writes: the first ~70% of the rows when `part`."""
    if not case.part or not case.shape or 0 in case.shape:
        return tuple(slice(0, n) for n in case.shape)
    return (slice(0, max(1, case.shape[0] * 7 // 10)),) + tuple(slice(0, n) for n in case.shape[1:])


def fill_scalar(case):
    """The fill value as a NumPy scalar of the case's in-memory dtype (str for strings)."""
    f = case.fill
    if case.is_str:
        return "" if f == 0 else f
    dt = case.np_dtype
    if dt.names:
        if isinstance(f, str):
            return np.frombuffer(base64.b64decode(f), np.dtype(case.dtype)).astype(dt)[0]
        return np.array(tuple(f[n] for n in dt.names), dt)[()]
    if dt.kind == "S":
        return np.frombuffer(base64.b64decode(f).ljust(dt.itemsize, b"\0"), dt)[0]
    if dt.kind == "U":
        return np.array(f, dt)[()]
    if dt.kind == "c":
        return dt.type(complex(float_of(f[0], np.float64), float_of(f[1], np.float64)))
    if dt.kind == "f":
        return float_of(f, dt)
    return dt.type(f)


def float_of(f, dt):
    dt = np.dtype(dt)
    if isinstance(f, str) and f.startswith("0x"):
        return np.array([int(f, 16)], "<u%d" % dt.itemsize).view(dt.newbyteorder("<"))[0]
    return dt.type({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(f, f))


def fill_bytes(case):
    """The canonical form compared: text for strings, else little-endian bytes."""
    v = fill_scalar(case)
    return v if case.is_str else np.array(v, case.np_dtype).tobytes()


WORDS = ["", "a", "Zo\u00eb", "\u65e5\u672c\u8a9e", "x" * 40, "tab\there", "\U0001f600", "end"]


def values(case, seed):
    """The case's full array as a reader must see it: deterministic values in
    the written region, the fill value elsewhere."""
    rng = np.random.default_rng(seed)
    dt = case.np_dtype
    n = int(np.prod(case.shape, dtype=np.int64))
    if case.is_str:
        data = np.array([WORDS[i % len(WORDS)] + ("" if i % 3 else str(i)) for i in range(n)], dtype=object)
    elif dt.names:
        data = np.zeros(n, dt)
        for i, name in enumerate(dt.names):
            data[name] = random_values(dt.fields[name][0], n, rng)
    else:
        data = random_values(dt, n, rng)
    data = data.reshape(case.shape)
    out = np.full(case.shape, fill_scalar(case), dtype=dt) if case.part else data.copy()
    region = written_region(case)
    out[region] = data[region]
    return out


def random_values(dt, n, rng):
    if dt.kind == "b":
        return rng.integers(0, 2, n) == 1
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
    if dt.kind == "f":
        v = (rng.standard_normal(n) * 1000).astype(dt)
        bits = v.view("<u%d" % dt.itemsize)
        specials = [float_of(NAN_PAYLOAD["f%d" % dt.itemsize], dt), dt.type("inf"), dt.type("-inf"), dt.type(-0.0),
                    float_of(hex(int(NAN_PAYLOAD["f%d" % dt.itemsize], 16) | (1 << (8 * dt.itemsize - 1))), dt)]
        for i, s in enumerate(specials):  # NaNs with payloads (positive and negative), infinities, -0
            if 1 + 2 * i < n:
                bits[1 + 2 * i] = np.array(s, dt).view(bits.dtype)
        return v
    if dt.kind == "c":
        re, im = random_values(np.dtype("<f%d" % (dt.itemsize // 2)), 2 * n, rng).reshape(2, n)
        v = np.empty(n, dt)
        v.real, v.imag = re, im
        return v
    if dt.kind == "S":  # printable, some shorter (NUL padded)
        raw = rng.integers(33, 127, (n, dt.itemsize), dtype=np.uint8)
        raw[::3, -2:] = 0
        return raw.view(dt).reshape(n)
    if dt.kind == "U":  # code points below the surrogates, some shorter
        cps = rng.integers(32, 0xD7FF, (n, dt.itemsize // 4)).astype("<u4")
        cps[::3, -1] = 0
        return cps.view(dt).reshape(n)
    raise ValueError(dt)


def canonical(arr, case):
    """An array read back, in the form compared: a list of str for strings,
    else its bytes in C order with every field little-endian."""
    if case.is_str:
        return [str(x) for x in np.asarray(arr).ravel()]
    a = np.asarray(arr)
    return np.ascontiguousarray(a.astype(little(a.dtype))).tobytes()


def dtype_name(dt):
    """A data type as compared, byte order left out: "<f4", "|S5", "str", ..."""
    if isinstance(dt, str) and dt == "str":
        return "str"
    dt = np.dtype(dt)
    if dt.kind in "OT":
        return "str"
    return str(little(dt).descr if dt.names else little(dt).str)


# ---------------------------------------------------------------------------
# The metadata documents (what zarrcoro is given, and TensorStore too)

V3_NAMES = {"b": "bool", "i": "int", "u": "uint", "f": "float", "c": "complex"}


def v3_data_type(case):
    if case.is_str:
        return "string"
    dt = np.dtype(case.dtype)
    if dt.names:
        return {"name": "struct", "configuration": {"fields": [
            {"name": n, "data_type": v3_data_type(Case("", 3, dt.fields[n][0].str, (), ()))} for n in dt.names]}}
    if dt.kind == "S":
        return {"name": "null_terminated_bytes", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind == "U":
        return {"name": "fixed_length_utf32", "configuration": {"length_bytes": dt.itemsize}}
    return "bool" if dt.kind == "b" else V3_NAMES[dt.kind] + str(8 * dt.itemsize)


def endian(case):
    return "big" if not case.is_str and np.dtype(case.dtype).byteorder == ">" else "little"


V3_COMPRESSORS = {
    "none": [],
    "zstd": [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
    "gzip": [{"name": "gzip", "configuration": {"level": 5}}],
    "blosc": [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                  "typesize": 0, "blocksize": 0}}],
    "crc32c": [{"name": "crc32c"}],
}
V2_COMPRESSORS = {
    "none": None,
    "zstd": {"id": "zstd", "level": 3},
    "gzip": {"id": "gzip", "level": 5},
    "blosc": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
}


def v3_codecs(case):
    serializer = ({"name": "vlen-utf8"} if case.is_str else
                  {"name": "bytes", "configuration": {"endian": endian(case)}})
    inner = [serializer] + json.loads(json.dumps(V3_COMPRESSORS[case.codec]))
    for c in inner:
        if c["name"] == "blosc":
            c["configuration"]["typesize"] = 1 if case.is_str else np.dtype(case.dtype).itemsize
    codecs = []
    if case.order == "F":
        codecs.append({"name": "transpose", "configuration": {"order": list(range(len(case.shape)))[::-1]}})
    if case.shard:
        codecs.append({"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(inner_chunks(case)), "codecs": inner,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": case.shard[1]}})
    else:
        codecs += inner
    return codecs


def inner_chunks(case):
    """The sharding codec's inner chunk shape: in the order of the axes it
    sees, reversed by the transpose before it in F order."""
    return tuple(case.shard[0][::-1] if case.order == "F" else case.shard[0])


def metadata_doc(case):
    """The case's zarr.json or .zarray document."""
    if case.fmt == 3:
        return {"zarr_format": 3, "node_type": "array", "shape": list(case.shape),
                "data_type": v3_data_type(case),
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.chunks)}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": case.fill, "codecs": v3_codecs(case), "attributes": {}}
    dt = np.dtype(case.dtype) if not case.is_str else None
    return {"zarr_format": 2, "shape": list(case.shape), "chunks": list(case.chunks),
            "dtype": "|O" if case.is_str else (dt.descr if dt.names else dt.str),
            "compressor": V2_COMPRESSORS[case.codec], "fill_value": case.fill, "order": case.order,
            "filters": [{"id": "vlen-utf8"}] if case.is_str else None}


def layout_problems(case, root):
    """What the stored metadata of a written case lacks of what it asks for
    (byte order, order, compressor, sharding layout)."""
    path = Path(root) / case.array_path
    if case.consolidated:  # the array's own document is gone: take the group's copy
        if case.fmt == 2:
            doc = json.loads((Path(root) / case.name / ".zmetadata").read_text())["metadata"]["a/.zarray"]
        else:
            doc = json.loads((Path(root) / case.name / "zarr.json").read_text())[
                "consolidated_metadata"]["metadata"]["a"]
    else:
        doc = json.loads((path / (".zarray" if case.fmt == 2 else "zarr.json")).read_text())
    want = metadata_doc(case)
    problems = []
    if case.fmt == 2:
        if not same_json(doc["dtype"], want["dtype"]):
            problems.append("dtype %s, not %s" % (json.dumps(doc["dtype"]), json.dumps(want["dtype"])))
        if doc.get("order", "C") != case.order:
            problems.append("order %s, not %s" % (doc.get("order"), case.order))
        if (doc.get("compressor") or {}).get("id") != (want["compressor"] or {}).get("id"):
            problems.append("compressor %s, not %s" % (doc.get("compressor"), want["compressor"]))
    else:
        one_byte = not case.is_str and np.dtype(case.dtype).itemsize == 1 or np.dtype(case.np_dtype).kind == "S"
        got_chain, want_chain = codec_summary(doc["codecs"], one_byte), codec_summary(want["codecs"], one_byte)
        if got_chain != want_chain:
            problems.append("codecs %s, not %s" % (got_chain, want_chain))
        if doc["data_type"] != want["data_type"]:
            problems.append("data_type %s, not %s" % (json.dumps(doc["data_type"]), json.dumps(want["data_type"])))
    if not case.is_str and fill_bits_of_doc(doc["fill_value"], case) != fill_bytes(case):
        problems.append("fill_value %s, not %s" % (json.dumps(doc["fill_value"]), json.dumps(case.fill)))
    return problems


def same_json(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def codec_summary(codecs, one_byte):
    """Names, endians, transpose orders and index locations: what the case
    asks for. The endian of one-byte elements may be left out."""
    out = []
    for c in codecs:
        cfg = c.get("configuration") or {}
        name = c["name"]
        if name == "bytes":
            name += "(%s)" % cfg.get("endian", "little" if one_byte else "-")
        elif name == "transpose":
            name += str(list(cfg["order"]))
        elif name == "sharding_indexed":
            name += "(%s; %s)" % (cfg.get("index_location", "end"), ",".join(codec_summary(cfg["codecs"], one_byte)))
        out.append(name)
    return out


def fill_bits_of_doc(f, case):
    """The fill value a document states, in the compared form (a NaN's payload
    kept); None for one that the case's data type cannot take."""
    try:
        return fill_bytes(Case(case.name, case.fmt, case.dtype, case.shape, case.chunks, fill=f))
    except (TypeError, ValueError, KeyError):
        return None


# ---------------------------------------------------------------------------
# zarrcoro, through tests/tools/interop_io.cpp


def zarrcoro_write(io, cases, root, work):
    """Writes every case; returns {case name: error or None}."""
    jobs = []
    for i, case in enumerate(cases):
        data = values(case, seed=i + 1)
        region = written_region(case)
        job = {"id": case.name, "op": "array", "path": case.array_path, "zarr_format": case.fmt,
               "metadata": metadata_doc(case), "region": [[s.start, s.stop] for s in region]}
        if case.is_str:
            job["strings"] = canonical(data[region], case)
        else:
            job["values"] = "%s.bin" % case.name
            (work / job["values"]).write_bytes(canonical(data[region], case))
        if case.consolidated:
            jobs.append({"id": case.name + "#group", "op": "group", "path": case.name, "zarr_format": case.fmt})
        jobs.append(job)
        if case.consolidated:
            jobs.append({"id": case.name + "#consolidate", "op": "consolidate", "path": case.name})
    results = run_io(io, "write", root, jobs, work)
    errors = {}
    for case in cases:
        errs = [r["error"] for k, r in results.items() if k.split("#")[0] == case.name and "error" in r]
        errors[case.name] = "; ".join(errs) or None
    return errors


def zarrcoro_read(io, cases, root, work):
    """Reads every case; returns [(case, Read or error text)]."""
    jobs = [dict({"id": c.name, "path": c.array_path}, **({"consolidated": c.name} if c.consolidated else {}))
            for c in cases]
    results = run_io(io, "read", root, jobs, work)
    out = []
    for case in cases:
        r = results[case.name]
        if "error" in r:
            out.append((case, r["error"]))
            continue
        if case.is_str:
            vals = r["strings"]
            fill = bytes.fromhex(r["fill_value"]).decode("utf-8", "replace")
        else:
            vals = (work / r["values"]).read_bytes()
            fill = bytes.fromhex(r["fill_value"])
        # The data type document must be the case's own (v2: with its byte order).
        want_doc = metadata_doc(case)["data_type" if case.fmt == 3 else "dtype"]
        dtype = dtype_name(case.dtype) if same_json(r["data_type"], want_doc) else "document " + json.dumps(
            r["data_type"])
        out.append((case, Read(tuple(r["shape"]), dtype, fill, vals)))
    return out


def run_io(io, cmd, root, jobs, work):
    jobs_file, results_file = work / ("%s-jobs.json" % cmd), work / ("%s-results.json" % cmd)
    jobs_file.write_text(json.dumps(jobs))
    subprocess.run([io, cmd, str(root), str(jobs_file), str(results_file)], check=True)
    return json.loads(results_file.read_text())


# ---------------------------------------------------------------------------
# The peers: zarr-python 3 and zarrs through zarr-python's API, TensorStore
# through its spec


@dataclass
class Read:
    shape: tuple
    dtype: str     # dtype_name form
    fill: object   # fill_bytes form
    values: object  # canonical form


class Refused(Exception):
    pass


def zarr_config(peer):
    if peer == "zarrs":
        return zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True})
    return zarr.config.set({})


def zarr_python_codecs(case):
    """create_array's filters, serializer and compressors for the case."""
    if case.fmt == 2:
        c = {"none": None, "zstd": numcodecs.Zstd(level=3), "gzip": numcodecs.GZip(level=5),
             "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)}[case.codec]
        return {"compressors": c, "order": case.order}
    serializer = zc.VLenUTF8Codec() if case.is_str else zc.BytesCodec(endian=endian(case))
    typesize = 1 if case.is_str else np.dtype(case.dtype).itemsize
    compressors = {"none": [], "zstd": [zc.ZstdCodec(level=3, checksum=False)], "gzip": [zc.GzipCodec(level=5)],
                   "blosc": [zc.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=typesize)],
                   "crc32c": [zc.Crc32cCodec()]}[case.codec]
    filters = [zc.TransposeCodec(order=tuple(range(len(case.shape)))[::-1])] if case.order == "F" else []
    if case.shard:
        serializer = zc.ShardingCodec(chunk_shape=inner_chunks(case), codecs=[serializer] + compressors,
                                      index_codecs=[zc.BytesCodec(endian="little"), zc.Crc32cCodec()],
                                      index_location=case.shard[1])
        compressors = []
    return {"filters": filters, "serializer": serializer, "compressors": compressors}


def zarr_python_dtype(case):
    if case.is_str:
        return str
    dt = np.dtype(case.dtype)
    return dt if case.fmt == 2 else little(dt)  # v3: the byte order is the bytes codec's


def zarr_python_write(peer, case, root, data):
    with zarr_config(peer):
        # With sharding, the sharding codec is the serializer (create_array's
        # `shards` cannot place the index at the start): chunks are shards.
        kwargs = dict(shape=case.shape, chunks=case.chunks, dtype=zarr_python_dtype(case),
                      fill_value=fill_scalar(case), zarr_format=case.fmt, **zarr_python_codecs(case))
        if case.consolidated:
            g = zarr.open_group(str(root / case.name), mode="w", zarr_format=case.fmt)
            a = g.create_array("a", **{k: v for k, v in kwargs.items() if k != "zarr_format"})
        else:
            a = zarr.create_array(str(root / case.name), **kwargs)
        region = written_region(case)
        if data.size:
            a[region] = data[region]
        if case.consolidated:
            zarr.consolidate_metadata(str(root / case.name), zarr_format=case.fmt)


def zarr_python_read(peer, case, root):
    with zarr_config(peer):
        if case.consolidated:
            a = zarr.open_group(str(root / case.name), mode="r", use_consolidated=True)["a"]
        else:
            a = zarr.open_array(str(root / case.name), mode="r")
        got = a[...]
        if isinstance(got, str):  # a 0-d string array reads as a str
            got = np.array(got, dtype=object)
        fill = a.fill_value
        return Read(tuple(got.shape), dtype_name(got.dtype), str(fill) if case.is_str else
                    np.array(fill, case.np_dtype).tobytes(), canonical(got, case))


def tensorstore_spec(case, root, create=False):
    spec = {"driver": "zarr3" if case.fmt == 3 else "zarr",
            "kvstore": {"driver": "file", "path": str(root / case.array_path) + "/"}}
    if create:
        doc = metadata_doc(case)
        doc.pop("zarr_format")
        doc.pop("node_type", None)
        spec.update(metadata=doc, create=True, delete_existing=True)
    return spec


def tensorstore_fields(case):
    """TensorStore opens a structured type one field at a time: [(field or
    None, the field's in-memory dtype)]."""
    dt = case.np_dtype
    return [(n, dt.fields[n][0]) for n in dt.names] if dt.names else [(None, dt)]


def to_tensorstore(a):
    """TensorStore holds S<n> as n chars along an extra last dimension."""
    if a.dtype.kind == "S":
        return np.frombuffer(np.ascontiguousarray(a).tobytes(), "S1").reshape(a.shape + (a.dtype.itemsize,))
    return a


def from_tensorstore(a, dt):
    a = np.asarray(a)
    if dt.kind == "S" and a.dtype.itemsize == 0:
        raise Refused("TensorStore's Python API reads char data (S<n>) as |S0 elements, without their bytes")
    if dt.kind == "S":
        return np.ascontiguousarray(a).view(dt).reshape(a.shape[:-1])
    return a


def tensorstore_write(peer, case, root, data):
    if case.consolidated:
        raise Refused("TensorStore has no consolidated metadata writer")
    region = written_region(case)
    for i, (field, _) in enumerate(tensorstore_fields(case)):
        spec = tensorstore_spec(case, root, create=i == 0)
        if field:
            spec["field"] = field
        t = ts.open(spec).result()
        if data.size:
            t[region].write(to_tensorstore((data[field] if field else data)[region])).result()


def tensorstore_read(peer, case, root):
    fields = {}
    for field, fdt in tensorstore_fields(case):
        spec = tensorstore_spec(case, root)
        if field:
            spec["field"] = field
        t = ts.open(spec).result()
        fill = t.fill_value
        fields[field] = (from_tensorstore(t.read().result(), fdt), None if fill is None else from_tensorstore(fill, fdt))
    if case.np_dtype.names:  # the records, put together from the fields
        got = np.zeros(next(iter(fields.values()))[0].shape, case.np_dtype)
        fill = np.zeros((), case.np_dtype)
        for name, (v, f) in fields.items():
            got[name] = v
            fill = None if fill is None or f is None else fill
            if fill is not None:
                fill[name] = f
    else:
        got, fill = fields[None]
    if fill is not None:
        fill = str(fill.item()) if case.is_str else np.array(fill, case.np_dtype).tobytes()
    return Read(tuple(got.shape), dtype_name(got.dtype), fill, canonical(got, case))


WRITERS = {"zarr-python": zarr_python_write, "zarrs": zarr_python_write, "tensorstore": tensorstore_write}
READERS = {"zarr-python": zarr_python_read, "zarrs": zarr_python_read, "tensorstore": tensorstore_read}


# ---------------------------------------------------------------------------
# Comparing, and the run


def differences(case, got, want_values):
    """What a read differs in from the case, exactly."""
    problems = []
    if got.shape != tuple(case.shape):
        problems.append("shape %s, expected %s" % (got.shape, case.shape))
    if got.dtype != dtype_name(case.dtype):
        problems.append("dtype %s, expected %s" % (got.dtype, dtype_name(case.dtype)))
    want_fill = fill_bytes(case)
    if got.fill != want_fill:
        problems.append("fill_value %s, expected %s" % (show(got.fill), show(want_fill)))
    if got.values != want_values:
        problems.append("values differ: %s" % first_difference(got.values, want_values, case))
    return problems


def show(v):
    return repr(v) if not isinstance(v, bytes) else "0x" + v.hex()


def first_difference(got, want, case):
    if case.is_str:
        if len(got) != len(want):
            return "%d values, expected %d" % (len(got), len(want))
        i = next(i for i in range(len(want)) if got[i] != want[i])
        return "element %d %r, expected %r" % (i, got[i], want[i])
    size = case.np_dtype.itemsize
    if len(got) != len(want):
        return "%d bytes, expected %d" % (len(got), len(want))
    i = next(i for i in range(len(want)) if got[i] != want[i]) // size
    return "element %d 0x%s, expected 0x%s" % (i, got[i * size:(i + 1) * size].hex(), want[i * size:(i + 1) * size].hex())


def short(e):
    """An error in one line: TensorStore's spec echo and file paths left out."""
    text = (str(e).strip() or str(e.__cause__ or "").strip() or "(no message)").splitlines()[0]
    text = re.sub(r" \[tensorstore_spec=.*", "", text)
    text = re.sub(r'(Error (reading|writing) local file )?"/[^"]*"(: )?', "", text)
    text = "%s: %s" % (type(e).__name__, text) if not isinstance(e, Refused) else text
    return text if len(text) <= 200 else text[:197] + "..."


def remove_own_documents(case, root):
    """A consolidated case is read from its group's copy only."""
    if case.consolidated:
        for doc in ("zarr.json", ".zarray", ".zattrs"):
            p = root / case.array_path / doc
            if p.exists():
                p.unlink()


class Tally:
    def __init__(self):
        self.cells = {}  # (direction) -> {"exact": n, "mismatch": n, "refused": n, "xfail": n, "xpass": n}
        self.refusals, self.mismatches, self.notes = [], [], []

    def add(self, direction, case, outcome, detail=""):
        key = (case.name, direction)
        if key in EXPECTED_FAILURES:
            outcome = "xfail" if outcome == "mismatch" else ("xpass" if outcome == "exact" else outcome)
            if outcome == "xpass":
                self.notes.append("XPASS %s %s: fixed? remove it from EXPECTED_FAILURES (%s)"
                                  % (direction, case.name, EXPECTED_FAILURES[key]))
        counts = self.cells.setdefault(direction, dict.fromkeys(("exact", "mismatch", "refused", "xfail", "xpass"), 0))
        counts[outcome] += 1
        line = "%-26s %-44s %s" % (direction, case.name, detail)
        if outcome == "refused":
            self.refusals.append(line)
        elif outcome in ("mismatch", "xfail"):
            self.mismatches.append(("XFAIL " if outcome == "xfail" else "") + line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--io", required=True, help="the zarrcoro_interop_io binary")
    ap.add_argument("--work", required=True, help="a scratch directory (emptied first)")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cases = [c for c in build_matrix() if args.only in c.name]
    expected = {c.name: values(c, seed=i + 1) for i, c in enumerate(cases)}
    want = {c.name: canonical(expected[c.name], c) for c in cases}
    tally = Tally()

    # zarrcoro -> peers.
    zc_root = work / "zarrcoro"
    write_errors = zarrcoro_write(args.io, cases, zc_root, work)
    readable = []
    for case in cases:
        problems = ([write_errors[case.name]] if write_errors[case.name] else []) or layout_problems(case, zc_root)
        if problems:  # zarrcoro is the subject: its failure to write is a mismatch for every peer
            for peer in PEERS:
                tally.add("zarrcoro->" + peer, case, "mismatch", "zarrcoro wrote: " + "; ".join(problems))
        else:
            remove_own_documents(case, zc_root)
            readable.append(case)
    for peer in PEERS:
        for case in readable:
            try:
                got = READERS[peer](peer, case, zc_root)
            except Exception as e:  # noqa: BLE001 - a peer's refusal, whatever it raises
                tally.add("zarrcoro->" + peer, case, "refused", short(e))
                continue
            problems = differences(case, got, want[case.name])
            tally.add("zarrcoro->" + peer, case, "mismatch" if problems else "exact", "; ".join(problems))

    # peers -> zarrcoro.
    for peer in PEERS:
        root = work / peer
        root.mkdir()
        written = []
        for case in cases:
            try:
                WRITERS[peer](peer, case, root, expected[case.name])
                problems = layout_problems(case, root)
                if problems:
                    raise Refused("wrote " + "; ".join(problems))
                remove_own_documents(case, root)
            except Exception as e:  # noqa: BLE001
                tally.add(peer + "->zarrcoro", case, "refused", short(e))
                continue
            written.append(case)
        for case, got in zarrcoro_read(args.io, written, root, work):
            if isinstance(got, str):
                tally.add(peer + "->zarrcoro", case, "mismatch", "zarrcoro: " + got)
                continue
            problems = differences(case, got, want[case.name])
            tally.add(peer + "->zarrcoro", case, "mismatch" if problems else "exact", "; ".join(problems))

    report(tally, len(cases))
    return 1 if any(c["mismatch"] for c in tally.cells.values()) else 0


def report(tally, n_cases):
    print("interop matrix: %d cases, %d cells" % (n_cases, sum(sum(c.values()) for c in tally.cells.values())))
    print()
    print("%-26s %6s %9s %8s %6s %6s" % ("direction", "exact", "mismatch", "refused", "xfail", "xpass"))
    for direction, c in tally.cells.items():
        print("%-26s %6d %9d %8d %6d %6d" % (direction, c["exact"], c["mismatch"], c["refused"], c["xfail"],
                                             c["xpass"]))
    if tally.mismatches:
        print("\nmismatches:")
        print("\n".join(tally.mismatches))
    print("\nrefusals (%d):" % len(tally.refusals))
    print("\n".join(tally.refusals))
    for note in tally.notes:
        print(note)


if __name__ == "__main__":
    sys.exit(main())
