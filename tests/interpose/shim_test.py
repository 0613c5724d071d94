#!/usr/bin/env python3
"""A driver layer between the application and the (simulated) driver, under
`stallscope run --sim`: the application's lookups and launches still go
through the layer (its own counts), and stallscope still records every
launch. Before the first-wins rule for resolvers, the layer's own lookup of
the layer below re-pointed stallscope there, and the layer was bypassed.

  shim_test.py --build DIR
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    exe = os.path.join(build, "bin", "stallscope")
    shim = os.path.join(build, "lib", "libdrivershim.so")
    probe = os.path.join(build, "bin", "shim_probe")
    with tempfile.TemporaryDirectory(prefix="stallscope-shim-") as work:
        env = dict(os.environ, SHIM_LOWER=os.path.join(build, "lib", "simgpu", "libcuda.so.1"))
        out = os.path.join(work, "trace")
        p = subprocess.run([exe, "run", "--sim", "-q", "--out", out, "--", probe, shim], env=env,
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            print(f"FAIL: the probe exited {p.returncode}: {p.stdout}{p.stderr}")
            return 1
        words = p.stdout.split()
        counts = dict(zip(words[0::2], map(int, words[1::2])))
        if counts.get("launches") != 5 or counts.get("lookups", 0) < 7:
            print(f"FAIL: the layer saw {counts}: expected 5 launches and every lookup (7)")
            return 1
        traces = glob.glob(os.path.join(out, "*.sstrace"))
        dump = subprocess.run([exe, "dump", traces[0]], capture_output=True, text=True, timeout=60)
        launches = sum(1 for line in dump.stdout.splitlines()
                       if line.startswith("call ") and " cuLaunchKernel " in line)
        if launches != 5:
            print(f"FAIL: stallscope recorded {launches} launches, expected 5")
            return 1
    print(f"ok: the layer saw {counts}, stallscope recorded 5 launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
