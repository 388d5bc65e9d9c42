#!/usr/bin/python3
"""The slice viewer (/view/<array> of zarrcoro-server) in a real browser.

    /usr/bin/python3 test_viewer.py --server zarrcoro-server --cli zarrcoro

Makes arrays with numpy and `zarrcoro import`, starts the server on a free
loopback port, and loads the viewer in headless Chromium (Debian's
`chromium`, offline: nothing but 127.0.0.1 is loaded), which writes a
screenshot and the DOM after the page has drawn. Checks:

- a 300 x 400 float32 array, value i + j, chunks 64 x 64, gray colour map,
  contrast from the data ("auto"): the page's title is "ok ...", the
  contrast range it chose is the data's [0, 698], and the pixels at sampled
  elements (a grid, the diagonal, both axes) are the gray levels of their
  values (+-2 of 255), monotone along the diagonal and the axes, darkest at
  (0, 0), brightest at (299, 399);
- a 3-D int16 array with the displayed dimensions swapped and another index
  chosen in the URL (?y=2&x=1&at=3,0,0): the pixels follow that slice;
- a string array: the page shows an error (title "error: ...", the message
  in the page), not a blank page;
- the browser's console stays empty (no script error, no failed request);
- the pixel checks reject a blank image and the error page's screenshot, so
  they cannot pass vacuously.

Exit status 0: passed; 1: failed; 77: skipped (no chromium or no numpy),
unless the environment variable CI is set, which makes a missing chromium a
failure. Takes about 15 s (three browser runs).
"""
import argparse
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77
WINDOW = (1000, 700)
failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
        print("FAIL:", message)
    return ok


def skip(why):
    if os.environ.get("CI"):
        print("FAIL: CI must run the browser test, but " + why)
        sys.exit(1)
    print("SKIPPED: " + why)
    sys.exit(SKIP)


# ---- PNG (8-bit RGB or RGBA, not interlaced: what Chromium writes) ----------

def read_png(path):
    """(width, height, rows): rows[y] is a bytes object of RGB triples."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(path + " is not a PNG")
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = ihdr
    if depth != 8 or color not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d, colour type %d, interlace %d" % (depth, color, interlace))
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        elif f != 0:
            raise ValueError("bad PNG filter %d" % f)
        prev = line
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
    return width, height, rows


# ---- the browser ---------------------------------------------------------------

def browse(chromium, url, work, name):
    """Loads `url`; returns (dom, png path, console lines)."""
    shot = os.path.join(work, name + ".png")
    profile = tempfile.mkdtemp(prefix="profile-", dir=work)
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--mute-audio",
           "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
           "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
           "--user-data-dir=" + profile, "--force-device-scale-factor=1",
           "--window-size=%d,%d" % WINDOW, "--virtual-time-budget=15000",
           "--enable-logging=stderr", "--v=0", "--screenshot=" + shot, "--dump-dom", url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    if p.returncode != 0 or not os.path.exists(shot):
        print(p.stderr[-3000:])
        raise RuntimeError("chromium failed (exit %d) on %s" % (p.returncode, url))
    return p.stdout, shot, console


def title_of(dom):
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    return html.unescape(m.group(1)) if m else ""


def drawn_of(dom):
    m = re.search(r'data-drawn="([^"]*)"', dom)
    return json.loads(html.unescape(m.group(1))) if m else None


# ---- the pixel checks --------------------------------------------------------

def pixel_problems(png, drawn, shape, value, gradient):
    """What is wrong with the slice drawn in `png` (gray colour map), as a
    list of messages: `value(y, x)` is the element at row y, column x of the
    slice of `shape` (rows, columns); `drawn` the page's data-drawn record.
    `gradient`: also require monotone luminance along the diagonal and axes."""
    width, height, rows = png
    if not drawn:
        return ["the page recorded no drawn view"]
    lo, hi = drawn["vmin"], drawn["vmax"]
    if not hi > lo:
        return ["empty contrast range [%s, %s]" % (lo, hi)]
    s, dpr = drawn["scale"], drawn["dpr"]
    ny, nx = shape

    def pixel(y, x):  # the screenshot pixel at the centre of element (y, x), or None
        px = int((drawn["left"] + (x + 0.5 - drawn["x0"]) * s) * dpr)
        py = int((drawn["top"] + (y + 0.5 - drawn["y0"]) * s) * dpr)
        if not (0 <= px < width and 0 <= py < height):
            return None
        return tuple(rows[py][3 * px:3 * px + 3])

    def gray(v):
        return round(min(1.0, max(0.0, (v - lo) / (hi - lo))) * 255)

    problems, seen, levels = [], 0, set()
    grid = [(round(i * (ny - 1) / 15), round(j * (nx - 1) / 15)) for i in range(16) for j in range(16)]
    for y, x in grid:
        p = pixel(y, x)
        if p is None:
            continue
        seen += 1
        levels.add(p)
        want = gray(value(y, x))
        if max(p) - min(p) > 1 or abs(p[0] - want) > 2:
            problems.append("element (%d, %d) = %s: pixel %s, expected gray %d" % (y, x, value(y, x), p, want))
    if seen < 200:
        problems.append("only %d of %d sampled elements are on the screenshot" % (seen, len(grid)))
    if len(levels) < 20:
        problems.append("the slice looks blank: %d distinct colours at %d sampled elements" % (len(levels), seen))
    if gradient:
        n = min(ny, nx)
        lines = {"diagonal": [(round(k * (ny - 1) / (n - 1)), round(k * (nx - 1) / (n - 1))) for k in range(n)],
                 "first column": [(y, 0) for y in range(ny)], "first row": [(0, x) for x in range(nx)],
                 "last column": [(y, nx - 1) for y in range(ny)], "last row": [(ny - 1, x) for x in range(nx)]}
        for name, points in lines.items():
            lum = [pixel(y, x) for y, x in points]
            if any(p is None for p in lum):
                problems.append("the %s is not on the screenshot" % name)
                continue
            lum = [sum(p) / 3 for p in lum]
            drops = [k for k in range(1, len(lum)) if lum[k] < lum[k - 1]]
            if drops:
                problems.append("luminance drops along the %s at step %d (%s -> %s)"
                                % (name, drops[0], lum[drops[0] - 1], lum[drops[0]]))
            if lum[-1] - lum[0] < 100:
                problems.append("the %s barely changes: %s -> %s" % (name, lum[0], lum[-1]))
        first, last = pixel(0, 0), pixel(ny - 1, nx - 1)
        if first is None or max(first) > 4:
            problems.append("element (0, 0) is not black: %s" % (first,))
        if last is None or min(last) < 251:
            problems.append("element (%d, %d) is not white: %s" % (ny - 1, nx - 1, last))
    return problems


def check_page(chromium, base, path, work, name, shape, value, gradient, expect_range=None):
    dom, shot, console = browse(chromium, base + path, work, name)
    title = title_of(dom)
    drawn = drawn_of(dom)
    print("%s: title %r, drawn %s" % (path, title, drawn))
    check(title.startswith("ok "), "%s: the title is %r, not 'ok ...'" % (path, title))
    check(not console, "%s: the console is not empty: %s" % (path, console))
    if drawn and expect_range is not None:
        check([drawn["vmin"], drawn["vmax"]] == expect_range,
              "%s: contrast range %s, expected the data range %s" % (path, [drawn["vmin"], drawn["vmax"]], expect_range))
    png = read_png(shot)
    problems = pixel_problems(png, drawn, shape, value, gradient)
    for p in problems[:10]:
        check(False, "%s: %s" % (path, p))
    return png, drawn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (screenshots)")
    args = ap.parse_args()

    chromium = next((shutil.which(c) for c in ("chromium", "chromium-browser") if shutil.which(c)), None)
    if not chromium:
        skip("no chromium (Debian package chromium; ./setup.sh installs it)")
    try:
        import numpy as np
    except ImportError:
        skip("/usr/bin/python3 has no numpy (Debian package python3-numpy)")

    work = tempfile.mkdtemp(prefix="zarrcoro-viewer-")
    root = os.path.join(work, "root")
    server = None
    try:
        # The arrays, through `zarrcoro import` of .npy files.
        def make(name, a, chunks):
            npy = os.path.join(work, name.replace("/", "_") + ".npy")
            np.save(npy, a)
            cmd = [args.cli, "import", npy, os.path.join(root, name)] + (["--chunks", chunks] if chunks else [])
            subprocess.run(cmd, check=True, capture_output=True)

        i, j = np.indices((300, 400))
        make("grad", (i + j).astype(np.float32), "64,64")
        k, i, j = np.indices((5, 40, 30))
        make("cube", (100 * k + 2 * i - j).astype(np.int16), "2,16,16")
        make("strings", np.array(["abc", "de", "f"], dtype="<U3"), None)

        server = subprocess.Popen([args.server, "--root", root, "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                  text=True)
        line = server.stdout.readline()
        m = re.match(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if not m:
            raise RuntimeError("the server said %r" % line)
        base = m.group(1)

        # A gradient, gray, contrast from the data.
        grad_png, grad_drawn = check_page(chromium, base, "/view/grad?cmap=gray", work, "grad", (300, 400),
                                          lambda y, x: y + x, True, expect_range=[0, 698])
        # A slice across a 3-D array: rows along dimension 2, columns along dimension 1, index 3 in dimension 0.
        check_page(chromium, base, "/view/cube?cmap=gray&y=2&x=1&at=3,0,0", work, "cube", (30, 40),
                   lambda y, x: 300 + 2 * x - y, False)

        # A string array: an error on the page.
        dom, shot, console = browse(chromium, base + "/view/strings", work, "strings")
        title = title_of(dom)
        print("/view/strings: title %r" % title)
        check(title.startswith("error: ") and "not numeric" in title, "/view/strings: title %r" % title)
        m = re.search(r'<div id="error" role="alert">(.*?)</div>', dom, re.S)
        check(m and "not numeric" in html.unescape(m.group(1)), "/view/strings: no error message on the page")
        check(not console, "/view/strings: the console is not empty: %s" % console)

        # The checks are not vacuous: they reject the error page's screenshot
        # and a blank (uniform) image with the gradient's geometry.
        err_png = read_png(shot)
        check(pixel_problems(err_png, grad_drawn, (300, 400), lambda y, x: y + x, True),
              "the pixel checks accept the error page's screenshot")
        w, h, _ = grad_png
        blank = (w, h, [bytes([128, 128, 128]) * w] * h)
        check(pixel_problems(blank, grad_drawn, (300, 400), lambda y, x: y + x, True),
              "the pixel checks accept a blank image")
    finally:
        if server:
            server.terminate()
            server.wait(timeout=15)
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all viewer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
