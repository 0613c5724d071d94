#!/usr/bin/env python3
"""For every (name, version, flags) that NVIDIA's cudart 13.0 asks the driver
for, a lookup through stallscope's cuGetProcAddress returns either the
driver's own pointer or stallscope's wrapper of exactly the variant the driver
returned (same exported name: a _ptsz request reaches the _ptsz function), with
the same result and status as without stallscope.
  lookup_test.py PROBE REQUESTS SIMGPU_DIR PRELOAD_LIB"""
import os
import subprocess
import sys

probe, requests, simdir, preload = sys.argv[1:5]
env = dict(os.environ, LD_LIBRARY_PATH=simdir, STALLSCOPE_DISABLE="1")
bare = subprocess.run([probe, requests], env=env, capture_output=True, text=True, check=True).stdout
env["LD_PRELOAD"] = preload
hooked = subprocess.run([probe, requests], env=env, capture_output=True, text=True, check=True).stdout
bare_lines, hooked_lines = bare.splitlines(), hooked.splitlines()
with open(requests) as f:
    n_requests = sum(1 for _ in f)
assert len(bare_lines) == len(hooked_lines) == n_requests, (len(bare_lines), len(hooked_lines), n_requests)
wrapped = passed = 0
for b, h in zip(bare_lines, hooked_lines):
    req_b, res_b = b.split(" -> ")
    req_h, res_h = h.split(" -> ")
    assert req_b == req_h, (b, h)
    rb, sb, symb, modb = res_b.split()
    rh, sh, symh, modh = res_h.split()
    assert (rb, sb) == (rh, sh), f"{req_b}: result/status {rb}/{sb} bare, {rh}/{sh} under stallscope"
    assert symb == symh, f"{req_b}: driver returned {symb}, stallscope handed out {symh}"
    if modh == "libstallscope.so":
        wrapped += 1
    else:
        assert modh == modb, f"{req_b}: pointer from {modh}, expected {modb}"
        passed += 1
assert wrapped > 20, f"only {wrapped} lookups reached a wrapper"
print(f"ok: {n_requests} lookups, {wrapped} wrapped, {passed} passed through")
