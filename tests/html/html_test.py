#!/usr/bin/env python3
"""The HTML report in a real browser: `stallscope report --format html` of a
trace is opened from disk by headless Chromium, which must log no console or
script error, whose DOM must hold every section (a kernel named
`<script>alert(1)</script>` shown as text, no element injected), and whose
screenshot must show the charts. Figures are checked against the JSON report
of the same trace. Exit 77 (skipped) without Chromium.

One case per invocation: html_test.py --build DIR --case generated|sim
  generated: a synthetic trace (stallscope_gen_trace) of 700 steps whose
             kernels are named `<script>alert(1)</script>`;
  sim:       examples/train_loop --readback run under `stallscope run --sim`.
"""
import argparse
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
HOSTILE = "<script>alert(1)</script>"
SECTIONS = ("verdict", "questions", "utilization", "step-bars", "scatter", "hotspots", "idle-causes",
            "kernels", "steps", "diagnostics", "about")
# Colours the charts fill with (analyzer/report/html.cc): busy compute and idle sync.
CHART_COLOURS = {(0x2C, 0xA0, 0x2C), (0xD6, 0x27, 0x28)}


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import Failure, check  # noqa: E402


def find_chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    if p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def chromium(exe, work, url, mode):
    """Runs headless Chromium on `url`; returns (stdout, stderr)."""
    profile = tempfile.mkdtemp(prefix="profile-", dir=work)
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--disable-background-networking", "--disable-sync",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=3000", "--hide-scrollbars", "--window-size=1100,1800"] + mode + [url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HOME=work))
    if p.returncode != 0:
        raise Failure(f"chromium {' '.join(mode)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout, p.stderr


def console_errors(stderr):
    """Console messages and uncaught errors the page caused (Chromium logs
    them as `CONSOLE(line)] "..."` or `Uncaught ...`; its own start-up noise
    about D-Bus and the like is not the page's)."""
    return [l for l in stderr.splitlines()
            if "CONSOLE" in l or "Uncaught" in l or "Content Security Policy" in l
            or "Refused to" in l]


def png_pixels(path):
    """Decodes an 8-bit RGB or RGBA, non-interlaced PNG: (width, height, rows
    of bytes, bytes per pixel)."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG")
    pos, idat, hdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    width, height, depth, ctype, _, _, interlace = hdr
    check(depth == 8 and ctype in (2, 6) and interlace == 0, f"unexpected PNG format {hdr}")
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif ftype == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif ftype == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif ftype == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, rows, bpp


def check_screenshot(path):
    width, height, rows, bpp = png_pixels(path)
    colours = set()
    for line in rows:
        for x in range(0, width * bpp, bpp):
            colours.add(bytes(line[x:x + 3]))
    check(len(colours) > 20, f"screenshot has {len(colours)} distinct colours: blank?")
    missing = [c for c in CHART_COLOURS if bytes(c) not in colours]
    check(not missing, f"screenshot lacks the chart colours {missing}")
    return len(colours)


def check_page(exe, work, html_path, report):
    url = "file://" + os.path.abspath(html_path)
    dom, err = chromium(exe, work, url, ["--dump-dom"])
    errors = console_errors(err)
    check(not errors, "console errors:\n" + "\n".join(errors))
    check("<html" in dom and "</html>" in dom, f"no DOM dumped: {dom[:200]!r}")
    for sid in SECTIONS:
        check(f'id="{sid}"' in dom, f"section {sid} missing from the DOM")
    check(not re.search(r"<script", dom, re.I), "a script element is in the DOM")
    steps = len(report["steps"])
    check(f"{steps} step" in dom, f"the page does not state the {steps} steps of the JSON report")
    for h in report["hotspots"][:5]:
        check(h["fingerprint"] in dom, f"hotspot {h['fingerprint']} missing")
    shot = os.path.join(work, "page.png")
    _, err = chromium(exe, work, url, [f"--screenshot={shot}"])
    errors = console_errors(err)
    check(not errors, "console errors:\n" + "\n".join(errors))
    return dom, check_screenshot(shot)


def report_of(build, trace, work):
    exe = os.path.join(build, "bin", "stallscope")
    html = os.path.join(work, "report.html")
    run([exe, "report", trace, "--format", "html", "-o", html])
    report = json.loads(run([exe, "report", trace, "--format", "json"]).stdout)
    # Without -o the page goes to stdout, the same bytes.
    with open(html) as f:
        check(run([exe, "report", trace, "--format", "html"]).stdout == f.read(),
              "stdout and -o pages differ")
    return html, report


def case_generated(build, work, exe):
    gen = os.path.join(build, "analyzer", "stallscope_gen_trace")
    if not os.path.exists(gen):
        return SKIP
    trace = os.path.join(work, "gen.sstrace")
    run([gen, trace, "700", HOSTILE])
    html, report = report_of(build, trace, work)
    dom, colours = check_page(exe, work, html, report)
    # The kernel's name is text: escaped in the serialized DOM, never markup.
    check("&lt;script&gt;alert(1)&lt;/script&gt;" in dom, "the kernel's name is not shown as text")
    check(HOSTILE not in dom, "the kernel's name became markup")
    check("mean of 2 consecutive steps" in dom, "700 steps are not drawn in buckets")
    print(f"generated: {os.path.getsize(html)} bytes, {colours} colours")


def case_sim(build, work, exe):
    loop = os.path.join(build, "bin", "train_loop")
    if not os.path.exists(loop):
        return SKIP
    out = os.path.join(work, "trace")
    env = dict(os.environ, SIMGPU_KERNEL_US="*gemm_fwd*=900,*gemm_bwd*=1400,*=30")
    run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out, "--",
         loop, "--steps", "8", "--readback"], env=env)
    html, report = report_of(build, out, work)
    check(report["hotspots"], "the read-back left no hotspot")
    dom, colours = check_page(exe, work, html, report)
    check("train_loop.cc" in dom, "the hotspot's site is not shown")
    print(f"sim: {os.path.getsize(html)} bytes, {colours} colours")


CASES = {"generated": case_generated, "sim": case_sim}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    args = ap.parse_args()
    exe = find_chromium()
    if exe is None:
        print("skipped: chromium not installed (scripts/setup installs it)")
        return SKIP
    work = tempfile.mkdtemp(prefix=f"stallscope-html-{args.case}-")
    try:
        if CASES[args.case](os.path.abspath(args.build), work, exe) == SKIP:
            print(f"skipped {args.case}: not built")
            shutil.rmtree(work, ignore_errors=True)
            return SKIP
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL {args.case}: {e}\n(kept {work})")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(f"ok {args.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
