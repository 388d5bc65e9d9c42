#!/usr/bin/python3
"""Consolidated metadata (.zmetadata) interop with zarr-python 2 (Debian's
python3-zarr 2.13).

  zarr_python_consolidated.py generate OUT
      Writes a v2 hierarchy with zarr-python into OUT and consolidates it
      (zarr.consolidate_metadata): group attributes, a subgroup, arrays with
      known values (a: int16 [5] = 0..4, chunks [2]; sub/b: float64 [3] with
      fill NaN, nothing written), then removes every node document except
      .zmetadata, so that only a reader of the consolidated copy can open it.

  zarr_python_consolidated.py verify DIR
      Opens DIR with zarr.open_consolidated after removing its .zarray,
      .zgroup and .zattrs documents (zarrcoro wrote the hierarchy and
      consolidated it; only the copy may be read) and prints the tree as
      JSON: {path: {"shape", "dtype", "fill_value", "attrs", "values"}}.

Run with /usr/bin/python3 (the pyenv python3 on PATH has no zarr).
"""
import json
import math
import os
import sys

import numpy as np
import zarr


def strip(root):
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f in (".zarray", ".zgroup", ".zattrs"):
                os.remove(os.path.join(dirpath, f))


def generate(out):
    store = zarr.DirectoryStore(out)
    root = zarr.group(store=store, overwrite=True)
    root.attrs["title"] = "consolidated"
    a = root.create_dataset("a", shape=(5,), chunks=(2,), dtype="<i2", compressor=None)
    a[:] = np.arange(5, dtype="<i2")
    sub = root.create_group("sub")
    sub.attrs["level"] = 1
    sub.create_dataset("b", shape=(3,), chunks=(2,), dtype="<f8", fill_value=float("nan"))
    zarr.consolidate_metadata(store)
    strip(out)


def plain(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return v


def verify(path):
    strip(path)
    root = zarr.open_consolidated(zarr.DirectoryStore(path), mode="r")
    tree = {"": {"attrs": dict(root.attrs)}}

    def visit(name, node):
        entry = {"attrs": dict(node.attrs)}
        if isinstance(node, zarr.Array):
            entry.update(shape=list(node.shape), dtype=node.dtype.str, fill_value=plain(node.fill_value),
                         values=[plain(x) for x in node[:].tolist()])
        tree[name] = entry

    root.visititems(visit)
    print(json.dumps(tree, sort_keys=True))


if __name__ == "__main__":
    {"generate": generate, "verify": verify}[sys.argv[1]](sys.argv[2])
