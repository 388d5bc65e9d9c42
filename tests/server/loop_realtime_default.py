#!/usr/bin/env python3
"""zarrcoro-server's I/O loop scheduling by its command line (issue #15).

By default the server runs its loop's thread under SCHED_FIFO while the loop
is light, where the kernel permits it (CAP_SYS_NICE or RLIMIT_RTPRIO >= 1);
where it does not, the thread stays normal and the server says so in one
line, not a warning. --no-loop-realtime leaves it normal; --loop-realtime
warns where refused. Read from /metrics (zarrcoro_io_loop_realtime).

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


def main():
    server = sys.argv[1]
    permitted = fifo_permitted()
    print("SCHED_FIFO permitted here: %s" % permitted)
    failures = []
    with tempfile.TemporaryDirectory() as root:
        for args, expect, warns in [([], 1 if permitted else 0, False),
                                    (["--no-loop-realtime"], 0, False),
                                    (["--loop-realtime"], 1 if permitted else 0, not permitted),
                                    (["--io-threads", "2"], 0, False)]:
            got = realtime_gauge(server, args, root)
            log = realtime_gauge.log
            refused_line = "SCHED_FIFO was refused" in log
            warned = refused_line and "warn" in log.split("SCHED_FIFO was refused")[0].splitlines()[-1]
            print("%-22s zarrcoro_io_loop_realtime %s (expected %s); refusal logged: %s, as a warning: %s" %
                  (" ".join(args) or "(default)", got, expect, refused_line, warned))
            if got != expect:
                failures.append("%s: zarrcoro_io_loop_realtime %s, expected %s" % (args, got, expect))
            if refused_line != (expect == 0 and not permitted and "--no-loop-realtime" not in args
                                and "--io-threads" not in args):
                failures.append("%s: refusal line %s in %r" % (args, refused_line, log))
            if warned != warns:
                failures.append("%s: refusal as a warning %s, expected %s: %r" % (args, warned, warns, log))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
