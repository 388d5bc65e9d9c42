#!/usr/bin/python3
"""perf/plot.py on the records its charts in perf/plots/ were made from
(perf/plots/records/*.json, one file per benchmark): every chart is written
as PNG and SVG, and a file of another kind is refused (exit 2).

    /usr/bin/python3 check.py SOURCE_DIR

Exit status 0: passed; 1: failed; 77: skipped (no matplotlib), unless the
environment variable CI is set.
"""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    src = sys.argv[1]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            print("FAIL: CI must run this test, but %s has no matplotlib (python3-matplotlib)" % sys.executable)
            return 1
        print("SKIPPED: %s has no matplotlib (Debian package python3-matplotlib)" % sys.executable)
        return 77
    plot = os.path.join(src, "perf", "plot.py")
    records = os.path.join(src, "perf", "plots", "records")
    inputs = [os.path.join(records, n + ".json") for n in ("concurrent_reads", "disk_io", "sharded_reads")]
    charts = ["concurrent_reads_throughput", "concurrent_reads_loop_lag", "disk_io", "sharded_reads"]
    out = tempfile.mkdtemp(prefix="zarrcoro-plot-")
    failures = 0
    try:
        p = subprocess.run([sys.executable, plot, "--out", out] + inputs, capture_output=True, text=True, timeout=120)
        print(p.stdout + p.stderr)
        if p.returncode != 0:
            print("FAIL: plot.py exited with %d" % p.returncode)
            return 1
        for name in charts:
            for ext, magic in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b"<?xml")):
                path = os.path.join(out, name + "." + ext)
                ok = os.path.exists(path) and open(path, "rb").read(len(magic)) == magic and os.path.getsize(path) > 1000
                print(("ok   " if ok else "FAIL ") + name + "." + ext)
                failures += not ok
        bad = os.path.join(out, "bad.json")
        with open(bad, "w") as f:
            f.write('[{"something": "else"}]')
        p = subprocess.run([sys.executable, plot, "--out", out, bad], capture_output=True, text=True, timeout=60)
        ok = p.returncode == 2 and "not the --json records" in p.stderr
        print(("ok   " if ok else "FAIL ") + "a file of another kind is refused")
        failures += not ok
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
