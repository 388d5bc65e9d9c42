#!/usr/bin/python3
"""Two-way interop of Zarr v2 object arrays (numcodecs VLenUTF8 / VLenBytes)
with zarr-python 2 (Debian's python3-zarr 2.13).

  zarr_python_strings.py generate OUT
      Writes "|O" arrays with zarr-python into OUT/<name>: vlen-utf8 text
      (non-ASCII, empty strings, a missing chunk, partial edge chunks, C and
      F order, a number and a string fill value) and vlen-bytes (NUL and
      0xff bytes, fill null). OUT/expected.json maps each name to
      {"kind": "string"|"bytes", "shape": [...], "values": [hex of each
      value's bytes, C order]}: what zarrcoro must read. A null fill reads as
      the empty value in zarrcoro (zarr-python gives None).

  zarr_python_strings.py verify DIR
      DIR holds arrays written by zarrcoro and DIR/expected.json in the same
      form. Reads each with zarr-python, checks dtype object and its object
      codec, and compares every value exactly. Prints one line per array;
      exits 1 if any differs.

Run with /usr/bin/python3 (the pyenv python3 on PATH has no zarr).
"""
import json
import os
import sys

import numcodecs
import numpy as np
import zarr

TEXT = ["a", "h\u00e9llo", "", "\u65e5\u672c\u8a9e", "\U0001f600 smile", "x" * 300, "tab\there", "\u00df", "end"]


def as_hex(v, kind):
    if v is None:
        return ""
    return (v.encode("utf-8") if kind == "string" else bytes(v)).hex()


def generate(out):
    expected = {}

    def record(name, a, kind):
        vals = a[...].ravel(order="C")
        expected[name] = {"kind": kind, "shape": list(a.shape), "values": [as_hex(v, kind) for v in vals]}

    # 1-d text, default compressor (blosc), default fill 0 (written as "0");
    # chunk 2 never written (missing), chunk 1 a partial edge.
    a = zarr.open(os.path.join(out, "utf8_1d"), mode="w", shape=(7,), chunks=(3,), dtype=str)
    a[0:5] = np.array(TEXT[:5], dtype=object)
    record("utf8_1d", a, "string")

    # 2-d text in F order with zlib and a string fill; partial edge chunks
    # in both dimensions, one chunk missing.
    b = zarr.open(os.path.join(out, "utf8_2d_f"), mode="w", shape=(5, 4), chunks=(2, 3), dtype=object,
                  object_codec=numcodecs.VLenUTF8(), fill_value="\u2205", order="F",
                  compressor=numcodecs.Zlib(level=1))
    vals = np.array([[TEXT[(i * 4 + j) % len(TEXT)] for j in range(4)] for i in range(5)], dtype=object)
    b[0:4, :] = vals[0:4, :]
    b[4, 0:3] = vals[4, 0:3]  # chunk (2, 1) stays missing
    record("utf8_2d_f", b, "string")

    # vlen-bytes, no compressor, fill null: every chunk written.
    c = zarr.open(os.path.join(out, "bytes_1d"), mode="w", shape=(6,), chunks=(4,), dtype=object,
                  object_codec=numcodecs.VLenBytes(), fill_value=None, compressor=None)
    c[:] = np.array([b"", b"\x00\x01", b"\xff" * 5, b"abc", b"\x00", b"z" * 70], dtype=object)
    record("bytes_1d", c, "bytes")

    # vlen-utf8 with zstd, an empty-string fill, chunks of one row.
    d = zarr.open(os.path.join(out, "utf8_zstd"), mode="w", shape=(3, 2), chunks=(1, 2), dtype=object,
                  object_codec=numcodecs.VLenUTF8(), fill_value="", compressor=numcodecs.Zstd(level=1))
    d[1, :] = np.array(["", "\u00e9"], dtype=object)
    record("utf8_zstd", d, "string")

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def verify(root):
    with open(os.path.join(root, "expected.json")) as f:
        expected = json.load(f)
    bad = 0
    for name, e in sorted(expected.items()):
        try:
            a = zarr.open(os.path.join(root, name), mode="r")
            codec = a.filters[0].codec_id if a.filters else None
            want_codec = "vlen-utf8" if e["kind"] == "string" else "vlen-bytes"
            got = [as_hex(v, e["kind"]) for v in a[...].ravel(order="C")]
            problems = []
            if a.dtype != object:
                problems.append("dtype %s" % a.dtype)
            if codec != want_codec:
                problems.append("object codec %s" % codec)
            if list(a.shape) != e["shape"]:
                problems.append("shape %s" % (a.shape,))
            if got != e["values"]:
                problems.append("values %s != %s" % (got, e["values"]))
            if problems:
                bad += 1
                print("DIFF", name, "; ".join(problems))
            else:
                print("ok", name)
        except Exception as ex:  # noqa: BLE001 - report and go on
            bad += 1
            print("FAIL", name, repr(ex))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("generate", "verify"):
        sys.exit("usage: zarr_python_strings.py generate OUT | verify DIR")
    if sys.argv[1] == "generate":
        generate(sys.argv[2])
    else:
        sys.exit(verify(sys.argv[2]))
