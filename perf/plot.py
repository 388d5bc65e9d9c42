#!/usr/bin/python3
"""Charts of the benchmarks' --json records (PNG and SVG, with matplotlib).

    /usr/bin/python3 perf/plot.py [--out DIR] [--formats png,svg] FILE.json...

Each FILE is the --json output of one benchmark, recognised by its records:

- concurrent_reads: concurrent_reads_throughput.* (MB/s against readers, one
  line per dispatch mode, a panel per dataset and API, the codec-only limit
  as a dashed horizontal line: the median of the limits measured with
  each configuration, whose spread shows as a band) and
  concurrent_reads_loop_lag.* (the I/O loop's lag p99 against readers per
  dispatch mode, log scale, with the 1 ms target);
- disk_io: disk_io.* (ms per whole-array read and write, per layout:
  zarrcoro, the raw file-system limit, zarr-python 2 where it ran);
- sharded_reads: sharded_reads.* (MiB/s per workload against its codec-only
  limit, with the ratio; its "mb_s" keys hold MiB/s);
- perf/peers/run.sh: peers.* (each engine's time over the fastest peer's, per
  workload, log scale, with the 0.8 target; engines that could not run a
  workload have no mark there).

Needs matplotlib (Debian: python3-matplotlib, which ./setup.sh installs);
run it with /usr/bin/python3, the interpreter Debian's packages are for.
Exits 2 on a file it does not recognise.
"""
import argparse
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

# One colour and marker per dispatch mode, the same in every chart.
MODES = {"batched": ("tab:blue", "o"), "per-chunk": ("tab:orange", "s"), "inline": ("tab:red", "^")}
DPI = 90


def save(fig, out, name, formats):
    paths = []
    for fmt in formats:
        path = os.path.join(out, name + "." + fmt)
        # No creation date in the files, so that unchanged charts stay byte-identical.
        metadata = {"Software": None} if fmt == "png" else {"Date": None}
        fig.savefig(path, dpi=DPI, metadata=metadata)
        paths.append(path)
    plt.close(fig)
    return paths


def kind_of(records):
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        return None
    if all(r.get("benchmark") in ("concurrent_reads", "dispatch_overhead") for r in records):
        return "concurrent_reads"
    if all(r.get("benchmark") == "disk_io" for r in records):
        return "disk_io"
    if all("workload" in r and "codec_only_mb_s" in r for r in records):
        return "sharded_reads"
    if all(r.get("benchmark") == "peers" for r in records):
        return "peers"
    return None


def panels(records):
    """The concurrent_reads configurations grouped by (dataset, api), in order."""
    rows = [r for r in records if r.get("benchmark") == "concurrent_reads" and not r.get("error")]
    keys = []
    for r in rows:
        if (r["dataset"], r["api"]) not in keys:
            keys.append((r["dataset"], r["api"]))
    return [(k, [r for r in rows if (r["dataset"], r["api"]) == k]) for k in keys]


def panel_title(dataset, rows):
    r = rows[0]
    return "%s (%s, %d KiB chunks), %s API" % (dataset, r["codec"], r["chunk_bytes"] // 1024, rows[0]["api"])


def grid(n):
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def plot_concurrent_reads(records, out, formats):
    groups = panels(records)
    if not groups:
        raise ValueError("no concurrent_reads configuration without an error")
    threads = sorted({r["codec_threads"] for _, rows in groups for r in rows})
    paths = []

    fig, axes = grid(len(groups))
    for ax, ((dataset, api), rows) in zip(axes, groups):
        for mode, (colour, marker) in MODES.items():
            pts = sorted((r["readers"], r["throughput_mb_s"]) for r in rows if r["dispatch"] == mode)
            if pts:
                ax.plot(*zip(*pts), color=colour, marker=marker, label=mode)
        limits = [r["codec_only_mb_s"] for r in rows if r["codec_only_mb_s"] > 0]
        if limits:
            kind = rows[0].get("codec_only_kind", "codec only")
            ax.axhline(statistics.median(limits), color="black", linestyle="--", linewidth=1,
                       label="limit: %s (median)" % kind)
            ax.axhspan(min(limits), max(limits), color="gray", alpha=0.15, linewidth=0)
        ax.set_title(panel_title(dataset, rows), fontsize=9)
        ax.set_xscale("log", base=2)
        readers = sorted({r["readers"] for r in rows})
        ax.set_xticks(readers, [str(n) for n in readers])
        ax.set_xlabel("readers (one chunk per call)")
        ax.set_ylabel("MB/s decoded")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("concurrent_reads: throughput by dispatch mode (codec pool: %s thread(s); band: the limit's spread)"
                 % ",".join(map(str, threads)), fontsize=10)
    fig.tight_layout()
    paths += save(fig, out, "concurrent_reads_throughput", formats)

    fig, axes = grid(len(groups))
    for ax, ((dataset, api), rows) in zip(axes, groups):
        for mode, (colour, marker) in MODES.items():
            pts = sorted((r["readers"], max(r["loop_lag_p99_us"], 1) / 1000) for r in rows if r["dispatch"] == mode)
            if pts:
                ax.plot(*zip(*pts), color=colour, marker=marker, label=mode)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="target: 1 ms")
        ax.set_title(panel_title(dataset, rows), fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
        readers = sorted({r["readers"] for r in rows})
        ax.set_xticks(readers, [str(n) for n in readers])
        ax.set_xlabel("readers (one chunk per call)")
        ax.set_ylabel("loop lag p99 (ms)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("concurrent_reads: I/O-loop lag p99 (a 1 ms timer on the runtime's io_context)", fontsize=10)
    fig.tight_layout()
    paths += save(fig, out, "concurrent_reads_loop_lag", formats)
    return paths


def plot_disk_io(records, out, formats):
    ops = [op for op in ("read", "write") if any(r["op"] == op for r in records)]
    fig, axes = plt.subplots(1, len(ops), figsize=(5.2 * len(ops), 3.6), squeeze=False)
    for ax, op in zip(axes[0], ops):
        rows = [r for r in records if r["op"] == op]
        layouts = [r["layout"] for r in rows]
        series = [("zarrcoro", "zarrcoro_ms", "tab:blue"), ("raw limit", "limit_ms", "tab:gray"),
                  ("zarr-python 2", "zarr_python_ms", "tab:green")]
        series = [s for s in series if any(r.get(s[1]) for r in rows)]
        width = 0.8 / len(series)
        for k, (label, key, colour) in enumerate(series):
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(rows))]
            ys = [r.get(key) or 0 for r in rows]
            bars = ax.bar(xs, ys, width, label=label, color=colour)
            for b, r, y in zip(bars, rows, ys):
                if key == "zarrcoro_ms" and r.get("ratio_to_limit"):
                    ax.annotate("%.2fx" % r["ratio_to_limit"], (b.get_x() + b.get_width() / 2, y),
                                ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(rows)), layouts, fontsize=8)
        ax.set_ylabel("ms (whole array, min of rounds)")
        ax.set_title("%s of 1e6 int32 in 1000 chunks" % ("reads" if op == "read" else "writes"), fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    fig.suptitle("disk_io: filesystem store against the raw file limit (label: zarrcoro / limit)", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "disk_io", formats)


def plot_sharded_reads(records, out, formats):
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = ["%s\n%d reader%s" % (r["workload"], r["readers"], "" if r["readers"] == 1 else "s") for r in records]
    xs = range(len(records))
    ax.bar([x - 0.2 for x in xs], [r["throughput_mb_s"] for r in records], 0.4, label="zarrcoro", color="tab:blue")
    ax.bar([x + 0.2 for x in xs], [r["codec_only_mb_s"] for r in records], 0.4, label="codec-only limit",
           color="tab:gray")
    for x, r in zip(xs, records):
        ax.annotate("%.2fx" % r["ratio"], (x - 0.2, r["throughput_mb_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(xs), names, fontsize=8)
    ax.set_ylabel("MiB/s decoded")  # sharded_reads' "mb_s" keys are MiB/s (its table says so)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    ax.set_title("sharded_reads: 256\u00b3 uint16, 128\u00b3 shards of 32\u00b3 zstd chunks (label: ratio)", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "sharded_reads", formats)


def plot_peers(records, out, formats):
    workloads = list(dict.fromkeys(r["workload"] for r in records))
    engines = list(dict.fromkeys(r["engine"] for r in records))
    role = {r["engine"]: r["role"] for r in records}
    seconds = {(r["workload"], r["engine"]): r["seconds"] for r in records}
    best = {}
    for w in workloads:
        peers = [seconds[(w, e)] for e in engines if role[e] == "peer" and seconds.get((w, e))]
        best[w] = min(peers) if peers else None
    fig, ax = plt.subplots(figsize=(max(6.4, 0.32 * len(workloads) + 2), 4.6))
    markers = "os^vDP*Xhd<>"
    for k, e in enumerate(engines):
        pts = [(i, seconds[(w, e)] / best[w]) for i, w in enumerate(workloads) if seconds.get((w, e)) and best[w]]
        if not pts:
            continue
        style = {"zarrcoro": {"markersize": 7}, "peer": {"markersize": 5},
                 "baseline": {"markersize": 5, "fillstyle": "none"},
                 "limit": {"markersize": 5, "fillstyle": "none"}}[role[e]]
        ax.plot(*zip(*pts), linestyle="none", marker=markers[k % len(markers)], label=e, **style)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.axhline(0.8, color="black", linestyle="--", linewidth=1, label="target: 0.8x the fastest peer")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax.set_xticks(range(len(workloads)), workloads, rotation=90, fontsize=7)
    ax.set_ylabel("seconds / fastest peer's seconds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncol=2)
    quick = " (--quick)" if records[0].get("quick") else ""
    ax.set_title("perf/peers%s: time over the fastest peer's\n(median of interleaved rounds; lower is faster)"
                 % quick, fontsize=9)
    fig.tight_layout()
    return save(fig, out, "peers", formats)


PLOTTERS = {"concurrent_reads": plot_concurrent_reads, "disk_io": plot_disk_io, "sharded_reads": plot_sharded_reads,
            "peers": plot_peers}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="--json output of concurrent_reads, disk_io, sharded_reads or peers")
    ap.add_argument("--out", default=".", help="directory for the charts (default: the current one)")
    ap.add_argument("--formats", default="png,svg", help="comma-separated matplotlib formats (default png,svg)")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    os.makedirs(args.out, exist_ok=True)
    plt.rcParams.update({"svg.hashsalt": "zarrcoro", "font.size": 8})  # reproducible SVG ids
    for path in args.files:
        with open(path) as f:
            records = json.load(f)
        kind = kind_of(records)
        if kind is None:
            print("plot.py: %s: not the --json records of concurrent_reads, disk_io, sharded_reads or peers" % path,
                  file=sys.stderr)
            return 2
        for p in PLOTTERS[kind](records, args.out, formats):
            print("wrote", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
