#!/usr/bin/env python3
"""zarrcoro-server's I/O loop scheduling by its command line (issue #15).

By default the server runs its loop's thread under SCHED_FIFO while the loop
is light, where the kernel permits it (CAP_SYS_NICE or RLIMIT_RTPRIO >= 1)
and the cgroup sets no CPU quota; it says which in one info line, never a
warning. --no-loop-realtime leaves it normal; --loop-realtime warns where
refused. Read from /metrics (zarrcoro_io_loop_realtime) and the log.

    loop_realtime_default.py SERVER
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def fifo_permitted():
    """Whether this process may enter SCHED_FIFO (as the server would)."""
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        os.sched_setscheduler(0, before[0], before[1])
        return True
    except PermissionError:
        return False


def cpu_quota():
    """Whether this process's cgroup or an ancestor has a CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us).

    Found independently of the server's code, from the same kernel files: the
    cgroup mounts from /proc/self/mountinfo, the process's cgroups from
    /proc/self/cgroup."""
    mounts = {}  # "v2" or "v1cpu" -> (root within the hierarchy, mount point)
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        fstype, options = fields[fields.index("-") + 1], fields[fields.index("-") + 3]
        if fstype == "cgroup2":
            mounts.setdefault("v2", (fields[3], fields[4]))
        elif fstype == "cgroup" and "cpu" in options.split(","):
            mounts.setdefault("v1cpu", (fields[3], fields[4]))
    for line in open("/proc/self/cgroup"):
        hid, controllers, path = line.rstrip("\n").split(":", 2)
        if hid == "0" and "v2" in mounts:
            (root, point), name, unlimited = mounts["v2"], "cpu.max", lambda v: v.startswith("max")
        elif "cpu" in controllers.split(",") and "v1cpu" in mounts:
            (root, point), name, unlimited = mounts["v1cpu"], "cpu.cfs_quota_us", lambda v: v == "-1"
        else:
            continue
        if root != "/" and path.startswith(root):
            path = path[len(root):]
        parts = [p for p in path.split("/") if p]
        for k in range(len(parts), -1, -1):  # the cgroup, then each ancestor
            try:
                with open(os.path.join(point, *parts[:k], name)) as f:
                    if not unlimited(f.read().strip()):
                        return True
            except OSError:
                pass
    return False


def realtime_gauge(server, args, root):
    """The server's zarrcoro_io_loop_realtime once it has settled, and its log."""
    p = subprocess.Popen([server, "--root", root, "--listen", "127.0.0.1:0"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        m = re.match(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if not m:
            raise RuntimeError("the server said %r" % line)
        value = None
        for _ in range(100):  # the loop enters SCHED_FIFO through a handler it runs: wait for it
            body = urllib.request.urlopen(m.group(1) + "/metrics", timeout=10).read().decode()
            value = int(float(re.search(r"^zarrcoro_io_loop_realtime (\S+)$", body, re.M).group(1)))
            if value == 1:
                break
            time.sleep(0.02)
        return value
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
        realtime_gauge.log = err
        realtime_gauge.status = p.returncode


def main():
    server = sys.argv[1]
    fifo, quota = fifo_permitted(), cpu_quota()
    print("SCHED_FIFO permitted here: %s; a CPU quota: %s" % (fifo, quota))
    failures = []
    with tempfile.TemporaryDirectory() as root:
        for args, expect, said_expected in [
                ([], 1 if fifo and not quota else 0, ["info"]),
                (["--no-loop-realtime"], 0, []),
                (["--loop-realtime"], 1 if fifo else 0, (["warning"] if quota else []) + (["info"] if fifo else ["warning"])),
                (["--io-threads", "2"], 0, [])]:
            got = realtime_gauge(server, args, root)
            lines = [l for l in realtime_gauge.log.splitlines() if "server: the" in l and "I/O loop" in l]
            said = [("warning" if "[warning]" in l else "info" if "[info]" in l else "?") for l in lines]
            print("%-22s zarrcoro_io_loop_realtime %s (expected %s); said %s (expected %s); exit %s" %
                  (" ".join(args) or "(default)", got, expect, said, said_expected, realtime_gauge.status))
            if got != expect:
                failures.append("%s: zarrcoro_io_loop_realtime %s, expected %s" % (args, got, expect))
            if said != said_expected:
                failures.append("%s: said %s, expected %s: %r" % (args, said, said_expected, realtime_gauge.log))
            if got == 1 and not any("runs under SCHED_FIFO" in l for l in lines):
                failures.append("%s: real-time without saying so: %r" % (args, realtime_gauge.log))
            if realtime_gauge.status != 0:
                failures.append("%s: exit status %s after SIGTERM" % (args, realtime_gauge.status))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
