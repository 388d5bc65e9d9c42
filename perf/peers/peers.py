"""zarrcoro beside the engines a user would pick instead, on the same files.

Measures, in seconds, the time of whole operations (read all, write all,
round trip, N read calls) by zarrcoro (its C++ engine through the blocking
API, its Python binding, and zarr-python with zarrcoro's codec pipeline),
TensorStore, zarrs (zarrs-python's codec pipeline in zarr-python),
zarr-python 3 with its default BatchedCodecPipeline and with its
FusedCodecPipeline, the baseline of zarr-python calling its codecs with no
thread hop (direct_pipeline.py), and the raw and codec-only limits (the file system alone; libzstd alone), on the workloads
of workloads.py. Run it through run.sh, which makes the virtual environment
and builds the C++ program:

    perf/peers/run.sh [--quick] [--json FILE] [--rounds N] [--only SUBSTR,...] [--size N] [--dir PARENT]

How: the shared arrays are written once (by zarr-python) into a temporary
directory under --dir (default: the system's); for each workload every engine
first runs the operation once untimed, and what it read, or wrote (read back
by zarr-python), is compared with the data; an engine that cannot do the
workload, or gets other data, is shown so, with the reason. Then the engines
run in interleaved rounds (each round every engine once, the order rotated
by one per round) and the table shows the median of the rounds. The page
cache is warm: every file has been written or read before the rounds, and
the machine has the memory to keep them all. The engines write into
directories of their own, by default on tmpfs (see write_parent), emptied
of chunks before each timed write (untimed).

The table's last columns are zarrcoro's time over the fastest peer's (the
fastest of TensorStore, zarrs, zarr-python and its fused pipeline): the
target is at most 0.8 (zarrcoro 25 % faster); '*' marks a row that misses it.
"""
import argparse
import dataclasses
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

import workloads as wl
from engines import (CppProgram, LimitEngine, NotAvailable, TensorStoreEngine, ZarrcoroCppEngine,
                     ZarrcoroPythonEngine, ZarrPythonEngine)

TARGET = 0.8
LEGEND = ("zarrcoro: the C++ engine, blocking API; zc python: its Python binding; zarr+zc: zarr-python with\n"
          "zarrcoro's codec pipeline (zarrcoro.pipeline.CodecPipeline); zarrs: zarr-python with zarrs-python's\n"
          "ZarrsCodecPipeline (strict); zarr: zarr-python's default BatchedCodecPipeline; zarr fused: its\n"
          "FusedCodecPipeline; zarr direct: FusedCodecPipeline with no thread hop (direct_pipeline.py; a baseline,\n"
          "not a peer); raw: the file system alone (memcpy for a memory store); codec: libzstd alone.\n"
          "pipe/direct: zarr+zc over zarr direct (zarrcoro's pipeline against zarr-python calling its codecs\n"
          "inline). n/a: the engine cannot run the workload, for the reason below.")


@dataclasses.dataclass
class Cell:
    """One (workload, engine): the seconds (wall clock, and CPU time of the
    engine's process) of each round, or why there are none."""
    rounds: list = dataclasses.field(default_factory=list)
    cpu_rounds: list = dataclasses.field(default_factory=list)
    reason: str = None

    @property
    def seconds(self):
        return statistics.median(self.rounds) if self.rounds and not self.reason else None

    @property
    def cpu_seconds(self):
        return statistics.median(self.cpu_rounds) if self.cpu_rounds and not self.reason else None


def make_engines(program):
    engines = [ZarrcoroCppEngine(program), ZarrcoroPythonEngine(), TensorStoreEngine(),
               ZarrPythonEngine("zarrs", "zarrs", "zarrs.ZarrsCodecPipeline", {"codec_pipeline.strict": True}),
               ZarrPythonEngine("zarr-python", "zarr", "zarr.core.codec_pipeline.BatchedCodecPipeline"),
               ZarrPythonEngine("zarr-python-fused", "zarr fused", "zarr.core.codec_pipeline.FusedCodecPipeline"),
               ZarrPythonEngine("zarrcoro-pipeline", "zarr+zc", "zarrcoro.pipeline.CodecPipeline",
                                role="zarrcoro", ratio_label="pipe"),
               ZarrPythonEngine("zarr-python-direct", "zarr direct", "direct_pipeline.DirectCodecPipeline",
                                role="baseline"),
               LimitEngine(program, "raw"), LimitEngine(program, "codec")]
    return engines


# ---- checking ---------------------------------------------------------------------------------

def read_back(path):
    """An engine's written array as zarr-python (default pipeline) reads it."""
    import zarr
    from zarr.storage import LocalStore
    with zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline"}):
        return zarr.open_array(LocalStore(path), mode="r")[...]


def check(engine, w, target):
    """Runs the workload once, untimed, and compares what it read or wrote
    with the data. Raises NotAvailable with the reason when it cannot."""
    _, _, got = engine.run(w, target, check=True)
    if engine.role == "limit":
        return
    if w.op in ("write", "round_trip"):
        got = read_back(target)
    elif w.op == "mem_write":
        _, _, got = engine.run(dataclasses.replace(w, op="mem_read"), check=True)
    expected = w.expected()
    if got is None or got.size != expected.size or not np.array_equal(np.asarray(got).reshape(expected.shape),
                                                                       expected):
        raise NotAvailable("WRONG DATA: what it %s differs from the data" %
                           ("wrote" if "write" in w.op or w.op == "round_trip" else "read"))


def short(e):
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text if len(text) < 160 else text[:157] + "..."


# ---- one workload ------------------------------------------------------------------------------

def run_workload(w, engines, rounds, write_root, log):
    cells = {e.key: Cell() for e in engines}
    active = []
    for e in engines:
        cell = cells[e.key]
        if e.unavailable:
            cell.reason = e.unavailable
            continue
        target = wl.engine_dir(w.array, e.key, write_root) if w.op in ("write", "round_trip") else None
        try:
            if target:
                wl.clear_chunks(target)
            check(e, w, target)
        except NotAvailable as x:
            cell.reason = short(x)
        except Exception as x:  # a peer's own error: shown, never hidden
            cell.reason = "failed: %s: %s" % (type(x).__name__, short(x))
        else:
            active.append((e, target))
    for r in range(rounds):
        k = r % len(active) if active else 0
        for e, target in active[k:] + active[:k]:
            cell = cells[e.key]
            if cell.reason:
                continue
            if target:  # a write starts from an empty directory
                wl.clear_chunks(target)
            gc.collect()
            try:
                seconds, cpu, _ = e.run(w, target)
            except Exception as x:
                cell.reason = "failed in round %d: %s: %s" % (r + 1, type(x).__name__, short(x))
                continue
            cell.rounds.append(seconds)
            cell.cpu_rounds.append(cpu)
    for _, target in active:  # the written chunks go (the directories stay: engines hold them open)
        if target:
            wl.clear_chunks(target)
    log("  %-28s %s" % (w.name, "  ".join("%s %s" % (e.label, fmt(cells[e.key].seconds)) for e in engines)))
    return cells


# ---- the report ----------------------------------------------------------------------------------

def fmt(seconds):
    if seconds is None:
        return "n/a"
    if seconds >= 10:
        return "%.1f" % seconds
    if seconds >= 1:
        return "%.2f" % seconds
    if seconds >= 0.1:
        return "%.3f" % seconds
    return "%.4f" % seconds


def fastest_peer(engines, cells):
    times = [(cells[e.key].seconds, e.label) for e in engines if e.role == "peer" and cells[e.key].seconds]
    return min(times) if times else (None, None)


def ratio(engine, engines, cells, cpu=False):
    """zarrcoro's seconds over the fastest peer's (with `cpu`: their CPU seconds)."""
    s = cells[engine.key].seconds
    best, label = fastest_peer(engines, cells)
    if cpu and s and best:
        s = cells[engine.key].cpu_seconds
        best = [cells[e.key].cpu_seconds for e in engines if e.label == label][0]
    return s / best if s and best else None


def limit_ratio(engines, cells, cpu=False):
    """The slower limit's time over the fastest peer's: the ratio an engine
    would reach doing only the limits' work (the larger of the two, as it
    must do both); above 0.8, the target is out of reach."""
    key = "cpu_seconds" if cpu else "seconds"
    limits = [getattr(cells[e.key], key) for e in engines if e.role == "limit" and getattr(cells[e.key], key)]
    best, label = fastest_peer(engines, cells)
    if cpu and best:
        best = [cells[e.key].cpu_seconds for e in engines if e.label == label][0]
    return max(limits) / best if limits and best else None


def _by_key(engines, key):
    return next((e for e in engines if e.key == key), None)


def pipeline_over_direct(cells, cpu=False):
    """zarr-python with zarrcoro's pipeline over zarr-python calling its
    codecs inline (the #4293 baseline)."""
    key = "cpu_seconds" if cpu else "seconds"
    p, d = getattr(cells["zarrcoro-pipeline"], key), getattr(cells["zarr-python-direct"], key)
    return p / d if p and d else None


def table(workloads, engines, results, rounds, cpu=False):
    zc = [e for e in engines if e.role == "zarrcoro"]
    pipe = _by_key(engines, "zarrcoro-pipeline"), _by_key(engines, "zarr-python-direct")
    header = ["workload"] + [e.label for e in engines] + ["%s/peer" % e.ratio_label for e in zc] + ["lim/peer"]
    if all(pipe):
        header.append("pipe/direct")
    rows, notes = [], []
    for w in workloads:
        cells = results[w.name]
        row = [w.name]
        for e in engines:
            cell = cells[e.key]
            if cell.reason:
                if cell.reason not in notes:
                    notes.append(cell.reason)
                row.append("n/a[%d]" % (notes.index(cell.reason) + 1))
            else:
                row.append(fmt(cell.cpu_seconds if cpu else cell.seconds))
        for e in zc:
            r = ratio(e, engines, cells, cpu)
            row.append("-" if r is None else "%.2f%s" % (r, "*" if r > TARGET else ""))
        floor = limit_ratio(engines, cells, cpu)
        row.append("-" if floor is None else "%.2f" % floor)
        if all(pipe):
            r = pipeline_over_direct(cells, cpu)
            row.append("-" if r is None else "%.2f" % r)
        rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))]
    lines += ["  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)) for r in rows]
    lines.append("")
    if cpu:
        lines.append("CPU seconds (user + system, all threads of the engine's process) in the same rounds, median; "
                     "ratios: zarrcoro's over\nthe CPU seconds of the peer fastest by the clock (* = above %.1f)"
                     % TARGET)
        return "\n".join(lines)
    lines.append("seconds: median of %d interleaved rounds, warm page cache; ratios: zarrcoro / fastest peer "
                 "(target <= %.1f, * = missed);\nlim/peer: the slower limit over the fastest peer (what doing only "
                 "the limits' work would reach)" % (rounds, TARGET))
    lines.append(LEGEND)
    for i, n in enumerate(notes):
        lines.append("[%d] %s" % (i + 1, n))
    return "\n".join(lines)


def records(workloads, engines, results, args):
    out = []
    for w in workloads:
        cells = results[w.name]
        best, best_label = fastest_peer(engines, cells)
        for e in engines:
            cell = cells[e.key]
            rec = {"benchmark": "peers", "workload": w.name, "engine": e.key, "role": e.role,
                   "seconds": cell.seconds, "min_seconds": min(cell.rounds) if cell.seconds else None,
                   "rounds": cell.rounds, "cpu_seconds": cell.cpu_seconds, "cpu_rounds": cell.cpu_rounds,
                   "available": cell.reason is None, "reason": cell.reason,
                   "op": w.op, "threads": w.threads, "note": w.note, "quick": args.quick}
            if e.role == "zarrcoro":
                r = ratio(e, engines, cells)
                rec.update(ratio_to_fastest_peer=r, fastest_peer=best_label, fastest_peer_seconds=best,
                           meets_target=None if r is None else r <= TARGET,
                           limit_ratio_to_fastest_peer=limit_ratio(engines, cells))
            if e.key == "zarrcoro-pipeline" and "zarr-python-direct" in cells:
                rec.update(ratio_to_direct=pipeline_over_direct(cells))
            out.append(rec)
    return out


def versions(engines):
    import numcodecs
    import zarr
    out = {"numpy": np.__version__, "numcodecs": numcodecs.__version__, "zarr": zarr.__version__}
    from importlib.metadata import PackageNotFoundError, version
    for name in ("tensorstore", "zarrs"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    zp = [e for e in engines if e.key == "zarrcoro-python"][0]
    out["zarrcoro (Python)"] = zp.version or "missing"
    return out


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def write_parent(quick):
    """Where the engines write: tmpfs (/dev/shm) when it has room, else the
    system's temporary directory. The rounds delete what an engine wrote and
    write it again; on an ext4 without a journal (this VM's), a file created
    within 30 s of other files' deletion in its inode group makes the
    allocator step over each of them, so creations get slower round after
    round by an amount set by where the directory lies, not by the engine.
    tmpfs has no such allocator. (Reads stay on the system's temporary
    directory: tmpfs refuses preadv2's RWF_NOWAIT, which zarrcoro's file
    store uses to tell a page-cached file from one it would wait for.)"""
    need = (1 if quick else 3) << 30
    try:
        if shutil.disk_usage("/dev/shm").free > need and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return None


def stolen_seconds():
    """CPU time the hypervisor took from this machine since boot ("steal" in /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


# ---- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpp", required=True, help="the built zarrcoro_peers program")
    ap.add_argument("--quick", action="store_true", help="smaller arrays and fewer rounds (a few minutes)")
    ap.add_argument("--json", help="write one record per (workload, engine) to FILE")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 9, 7 with --quick)")
    ap.add_argument("--only", default="", help="comma-separated substrings: only the workloads whose name has one")
    ap.add_argument("--size", type=int, help="edge of the zarr_benchmarks arrays (default 512, 256 with --quick)")
    ap.add_argument("--cpu", action="store_true", help="also print the table of CPU seconds")
    ap.add_argument("--no-codec-sched-idle", action="store_true",
                    help="zarrcoro's C++ engine with its codec threads under the normal policy (nice 10), not "
                         "SCHED_IDLE (the binding keeps its default)")
    ap.add_argument("--no-io-uring", action="store_true",
                    help="zarrcoro's C++ engine with its file store's blocking fallback pool instead of io_uring")
    ap.add_argument("--dir", default=None,
                    help="parent of the temporary directory of the shared arrays (default: the system's)")
    ap.add_argument("--write-dir", default=None,
                    help="parent of the temporary directory the engines write into (default: /dev/shm when it has "
                         "room, else the system's temporary directory)")
    args = ap.parse_args()
    rounds = args.rounds or (7 if args.quick else 9)
    start = time.monotonic()

    def log(text):
        print("[%5.0fs] %s" % (time.monotonic() - start, text), flush=True)

    stolen_at_start = stolen_seconds()
    root = tempfile.mkdtemp(prefix="zarrcoro-peers-", dir=args.dir)
    write_root = tempfile.mkdtemp(prefix="zarrcoro-peers-writes-", dir=args.write_dir or write_parent(args.quick))
    program = None
    engines = []
    try:
        cpp_args = ["--no-codec-sched-idle"] * args.no_codec_sched_idle + ["--no-io-uring"] * args.no_io_uring
        program = CppProgram(args.cpp, root, cpp_args)
        engines = make_engines(program)
        log("machine: %s, %d hardware threads, load average %s; shared arrays in %s, writes in %s" % (
            platform.machine(), os.cpu_count(), load_average(), root, write_root))
        log("versions: " + ", ".join("%s %s" % kv for kv in versions(engines).items()))
        work = wl.build(root, args.quick, [s for s in args.only.split(",") if s], args.size, log=log)
        results = {}
        for w in work:
            results[w.name] = run_workload(w, engines, rounds, write_root, log)
        log("done, load average %s; the VM's host took %.1f s of CPU time during the run (steal)"
            % (load_average(), stolen_seconds() - stolen_at_start))
        print()
        print(table(work, engines, results, rounds))
        if args.cpu:
            print()
            print(table(work, engines, results, rounds, cpu=True))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(records(work, engines, results, args), f, indent=1)
                f.write("\n")
            print("wrote %d records to %s" % (len(work) * len(engines), args.json))
    finally:
        for e in engines:
            e.close()
        if program:
            program.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(write_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
