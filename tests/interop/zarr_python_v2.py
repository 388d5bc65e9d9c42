#!/usr/bin/python3
"""Two-way Zarr v2 interop with zarr-python 2 (Debian's python3-zarr 2.13).

  zarr_python_v2.py generate OUT
      Writes v2 arrays with zarr-python into OUT/<name> (every dtype the
      engine supports x every compressor, C and F order, both separators,
      edge chunks, missing chunks, NaN and null fills, structured types with
      big-endian and mixed-order fields), and for each the values zarr-python
      reads back as OUT/<name>.bin: C order, every field little-endian (the
      engine's in-memory form). OUT/manifest.json lists the arrays; OUT/group
      is a group with attributes and a subgroup.

  zarr_python_v2.py verify DIR
      DIR holds arrays written by zarrcoro, DIR/<name>.bin their values (same
      form as above), DIR/manifest.json {name: {"dtype": <v2 dtype>, "shape"}}
      and optionally DIR/groups.json {path: attributes}. Reads each with
      zarr-python and compares dtype, shape, bytes and attributes exactly.
      Prints one line per array and exits 1 if any differs.

Run with /usr/bin/python3 (the pyenv python3 on PATH has no zarr).
"""
import json
import os
import sys
import zlib

import numcodecs
import numpy as np
import zarr


def little(a):
    """`a` in C order with every field little-endian, as bytes."""
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()


def values(dtype, shape, seed):
    """Deterministic test values of `dtype` (non-finite floats included)."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    dt = np.dtype(dtype)
    if dt.names:
        out = np.zeros(n, dtype=dt)
        for i, name in enumerate(dt.names):
            sub = dt.fields[name][0]
            base, sub_shape = (sub.base, sub.shape) if sub.shape else (sub, ())
            v = values(base, (n,) + sub_shape, seed * 31 + i)
            out[name] = v
        return out.reshape(shape)
    if dt.kind == "b":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt.newbyteorder("=")).astype(dt).reshape(shape)
    if dt.kind == "f":
        v = (rng.standard_normal(n) * 1000).astype(dt)
        if n > 3:
            v[1], v[2], v[3] = np.nan, np.inf, -np.inf
        return v.reshape(shape)
    if dt.kind == "c":
        re = (rng.standard_normal(n) * 100)
        im = (rng.standard_normal(n) * 100)
        v = (re + 1j * im).astype(dt)
        if n > 1:
            v[1] = complex(np.nan, -np.inf)
        return v.reshape(shape)
    if dt.kind == "S":
        raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
        return np.frombuffer(raw.tobytes(), dtype=dt).reshape(shape)
    if dt.kind == "U":
        chars = dt.itemsize // 4
        cps = rng.integers(32, 0x2FFFF, n * chars).astype(np.uint32)
        cps[(cps >= 0xD800) & (cps <= 0xDFFF)] = 0x263A  # no surrogates
        cps[::5] = 0  # some shorter strings (NUL padding)
        return np.frombuffer(cps.astype("<u4").tobytes(), dtype="<U%d" % chars).astype(dt).reshape(shape)
    raise ValueError(dtype)


DTYPES = [
    "|b1", "|i1", "<i2", ">i2", "<i4", ">i4", "<i8", ">i8", "|u1", "<u2", ">u2", "<u4", ">u4", "<u8",
    "<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<c8", ">c8", "<c16", ">c16", "|S5", "<U4", ">U4",
    [("flux", ">f4"), ("mask", ">i4")],
    [("a", "<f8"), ("b", ">i2", (2,)), ("c", "|S3")],
    [("p", [("x", ">f4"), ("y", "<f4")]), ("v", "<i8")],
]

COMPRESSORS = [
    ("none", None),
    ("zlib", numcodecs.Zlib(level=1)),
    ("gzip", numcodecs.GZip(level=5)),
    ("zstd", numcodecs.Zstd(level=3)),
    ("blosc_lz4_shuffle", numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)),
    ("blosc_zstd_bitshuffle", numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.BITSHUFFLE)),
    ("blosc_blosclz_noshuffle", numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=numcodecs.Blosc.NOSHUFFLE)),
    ("blosc_lz4hc_auto", numcodecs.Blosc(cname="lz4hc", clevel=3, shuffle=numcodecs.Blosc.AUTOSHUFFLE)),
    ("blosc_zlib_shuffle", numcodecs.Blosc(cname="zlib", clevel=4, shuffle=numcodecs.Blosc.SHUFFLE, blocksize=256)),
    ("lz4", numcodecs.LZ4(acceleration=1)),
]


def dtype_name(dt):
    if isinstance(dt, str):
        return dt.replace("<", "le_").replace(">", "be_").replace("|", "")
    return "struct%d" % DTYPES.index(dt)


def generate(out):
    os.makedirs(out, exist_ok=True)
    manifest = {}

    def add(name, dtype, shape, chunks, compressor, order="C", sep=".", fill=0, filters=None, part=None, resize=None):
        path = os.path.join(out, name)
        kwargs = dict(shape=shape, chunks=chunks, dtype=dtype, compressor=compressor, order=order,
                      fill_value=fill, filters=filters, dimension_separator=sep)
        # zarr.create, not open_array: open_array converts a structured fill
        # with NumPy first, which zarr 2.13 then fails to compare with 0.
        z = zarr.create(store=zarr.DirectoryStore(path), overwrite=True, **kwargs)
        data = values(dtype, shape, len(manifest) + 1)
        if part is None:
            z[...] = data
        elif part > 0:
            z[:part] = data[:part]  # the rest stays missing: fill value
        if resize is not None:
            z.resize(*resize)
            shape = resize
        back = z[...]
        with open(path + ".bin", "wb") as f:
            f.write(little(back))
        manifest[name] = {"dtype": json.loads(json.dumps(z.dtype.descr if z.dtype.names else z.dtype.str)),
                          "shape": list(shape)}

    i = 0
    for dt in DTYPES:
        for cname, comp in COMPRESSORS:
            order = "CF"[i % 2]
            sep = "./"[(i // 2) % 2]
            shape, chunks = ((7, 5), (3, 2)) if i % 3 else ((4, 3, 5), (3, 2, 2))
            part = 4 if i % 4 == 3 else None  # some chunks missing
            fill = 0
            if isinstance(dt, str) and dt[1] == "S":
                fill = b"ab"
            elif isinstance(dt, str) and dt[1] == "U":
                fill = "x\u00e9"
            elif not isinstance(dt, str):  # base64 of the record; null when every chunk is written
                fill = None if part is None else values(dt, (1,), 99)[0].tobytes()
            add("%s_%s_%s%s" % (dtype_name(dt), cname, order, "slash" if sep == "/" else "dot"), dt, shape,
                chunks, comp, order=order, sep=sep, fill=fill, part=part)
            i += 1
    # Fill values, filters, edge cases.
    for dt in ("<f4", ">f8", "<f2"):
        add("nanfill_" + dtype_name(dt), dt, (10,), (4,), numcodecs.Zlib(1), fill=np.nan, part=3)
    add("inffill_le_f8", "<f8", (10,), (4,), None, fill=-np.inf, part=3)
    add("nullfill_le_f4", "<f4", (8,), (4,), None, fill=None)
    add("intfill_be_i4", ">i4", (9, 2), (4, 2), numcodecs.Blosc("lz4", 5, 1), fill=-7, part=5)
    add("complexfill_le_c16", "<c16", (5,), (2,), None, fill=1 - 2j, part=2)
    add("boolfill_b1", "|b1", (6,), (4,), None, fill=True, part=2)
    add("filters_zlib_blosc", "<i4", (20,), (6,), numcodecs.Blosc("zstd", 1, 2), filters=[numcodecs.Zlib(2)])
    add("filters_only_gzip", ">u2", (5, 5), (2, 3), None, filters=[numcodecs.GZip(1)], order="F")
    add("zero_d_le_f8", "<f8", (), (), numcodecs.Zstd(1))
    add("empty_le_i4", "<i4", (0, 3), (2, 2), None)
    add("one_chunk_larger_than_array", "<u2", (3,), (4,), numcodecs.Blosc("lz4", 5, 1))
    add("resized_grown_le_i4", "<i4", (7, 5), (3, 2), numcodecs.Zlib(1), fill=-3, resize=(10, 6))
    add("resized_shrunk_be_i4", ">i4", (7, 5), (3, 2), None, fill=-3, resize=(4, 3))
    # A group with attributes and a nested array.
    g = zarr.open_group(os.path.join(out, "group"), mode="w")
    g.attrs.update({"title": "caf\u00e9 \u305f", "n": 3, "list": [1.5, None]})
    g.create_group("sub").attrs["depth"] = 2
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print("generated %d arrays" % len(manifest))


def to_numpy_dtype(d):
    if isinstance(d, str):
        return np.dtype(d)
    return np.dtype([(f[0], to_numpy_dtype(f[1])) + ((tuple(f[2]),) if len(f) > 2 else ()) for f in d])


def verify(root):
    with open(os.path.join(root, "manifest.json")) as f:
        manifest = json.load(f)
    bad = 0
    for name, spec in sorted(manifest.items()):
        path = os.path.join(root, name)
        try:
            z = zarr.open_array(path, mode="r")
            got = z[...]
            want_dtype = to_numpy_dtype(spec["dtype"])
            with open(path + ".bin", "rb") as f:
                want = f.read()
            problems = []
            if got.dtype != want_dtype:
                problems.append("dtype %s, expected %s" % (got.dtype.descr, want_dtype.descr))
            if list(got.shape) != spec["shape"]:
                problems.append("shape %s, expected %s" % (list(got.shape), spec["shape"]))
            if little(got) != want:
                problems.append("values differ (crc32 %08x, expected %08x)" % (zlib.crc32(little(got)), zlib.crc32(want)))
        except Exception as e:  # report every array, not just the first failure
            problems = ["%s: %s" % (type(e).__name__, e)]
        if problems:
            bad += 1
            print("MISMATCH %s: %s" % (name, "; ".join(problems)))
        else:
            print("OK %s" % name)
    groups_file = os.path.join(root, "groups.json")
    if os.path.exists(groups_file):  # {path: attributes}
        with open(groups_file) as f:
            for path, attrs in sorted(json.load(f).items()):
                try:
                    got = zarr.open_group(os.path.join(root, path), mode="r").attrs.asdict()
                    ok = got == attrs
                except Exception as e:
                    got, ok = "%s: %s" % (type(e).__name__, e), False
                print(("OK group %s" if ok else "MISMATCH group %s: %r") % ((path,) if ok else (path, got)))
                bad += not ok
    print("%d arrays, %d mismatches" % (len(manifest), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("generate", "verify"):
        sys.exit(__doc__)
    if sys.argv[1] == "generate":
        generate(sys.argv[2])
    else:
        sys.exit(verify(sys.argv[2]))
