#!/usr/bin/python3
"""The slice viewer's .npy parser (examples/server/viewer/viewer.js, under
node) against files written by numpy: every numeric dtype in both byte
orders, float16, NaN and infinities, Fortran order, format 2.0, a 0-d array;
and non-numeric files (strings, structs, complex) refused with a message.

    /usr/bin/python3 npy_check.py VIEWER_JS

Exit status 0: passed; 1: failed; 77: skipped (no node or no numpy), unless
the environment variable CI is set.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def skip(why):
    if os.environ.get("CI"):
        print("FAIL: CI must run this test, but " + why)
        sys.exit(1)
    print("SKIPPED: " + why)
    sys.exit(SKIP)


# Runs under node (`node -e`: process.argv[1] is the first argument): parses each file named, prints one
# JSON line per file (values as strings so that NaN and infinities survive).
NODE = r"""
const fs = require('fs');
const viewer = require(process.argv[1]);
for (const file of process.argv.slice(2)) {
  const b = fs.readFileSync(file);
  try {
    const npy = viewer.parseNpy(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
    console.log(JSON.stringify({ file, descr: npy.descr, shape: npy.shape, fortran: npy.fortranOrder,
                                 values: Array.from(npy.values, String) }));
  } catch (e) {
    console.log(JSON.stringify({ file, error: e.message }));
  }
}
"""


def main():
    viewer_js = os.path.abspath(sys.argv[1])
    node = shutil.which("node")
    if not node:
        skip("no node")
    try:
        import numpy as np
    except ImportError:
        skip("/usr/bin/python3 has no numpy (Debian package python3-numpy)")

    work = tempfile.mkdtemp(prefix="zarrcoro-npy-")
    try:
        cases = {}  # file -> (expected values in file order, shape, fortran) or the start of an error message
        base = np.arange(-6, 6).reshape(3, 4)
        for t in ["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"]:
            for order in "<>":
                dt = np.dtype(order + t) if t not in ("b1", "i1", "u1") else np.dtype(t)
                a = (base % 2 == 0) if t == "b1" else (np.abs(base) if t[0] == "u" else base)
                a = a.astype(dt)
                if t[0] == "f":
                    a = (base * 0.5).astype(dt)
                    a[0, 0], a[0, 1], a[0, 2] = np.nan, np.inf, -np.inf
                if t in ("i8", "u8"):
                    a[2, 3] = 2 ** 53 if t == "i8" else 2 ** 63  # exact in a double
                name = os.path.join(work, "%s_%s.npy" % (t, "le" if order == "<" else "be"))
                np.save(name, a)
                cases[name] = (a.astype(np.float64).ravel(), list(a.shape), False)
        a = np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4))
        name = os.path.join(work, "fortran.npy")
        np.save(name, a)
        cases[name] = (a.ravel(order="F").astype(np.float64), [3, 4], True)
        a = np.arange(6, dtype=">u2").reshape(2, 3)
        name = os.path.join(work, "v2.npy")
        with open(name, "wb") as f:
            np.lib.format.write_array(f, a, version=(2, 0))
        cases[name] = (a.ravel().astype(np.float64), [2, 3], False)
        name = os.path.join(work, "scalar.npy")
        np.save(name, np.float64(2.5))
        cases[name] = (np.array([2.5]), [], False)
        for n, a, why in [("strings", np.array(["ab", "c"]), "not numeric"),
                          ("bytes", np.array([b"ab", b"c"]), "not numeric"),
                          ("struct", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]), "structured"),
                          ("complex", np.zeros(2, dtype="<c8"), "complex")]:
            name = os.path.join(work, n + ".npy")
            np.save(name, a)
            cases[name] = why
        truncated = os.path.join(work, "truncated.npy")
        with open(os.path.join(work, "f4_le.npy"), "rb") as f:
            data = f.read()
        with open(truncated, "wb") as f:
            f.write(data[:-3])
        cases[truncated] = "truncated"

        p = subprocess.run([node, "-e", NODE, viewer_js] + list(cases), capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            print(p.stderr)
            print("FAIL: node exited with %d" % p.returncode)
            return 1
        results = {r["file"]: r for r in map(json.loads, p.stdout.splitlines())}
        failures = 0
        for name, want in cases.items():
            got = results.get(name, {"error": "no result"})
            short = os.path.basename(name)
            if isinstance(want, str):
                ok = "error" in got and want in got["error"]
                detail = got.get("error", "parsed without an error")
            else:
                values, shape, fortran = want
                ok = "error" not in got and got["shape"] == shape and got["fortran"] == fortran and \
                    [repr(float(v)) for v in values] == [repr(float(v)) for v in got["values"]]
                detail = got
            print(("ok   " if ok else "FAIL ") + short + ("" if ok else ": %s" % (detail,)))
            failures += not ok
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
