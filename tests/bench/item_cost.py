#!/usr/bin/env python3
"""scripts/bench's cost of a recorded `.item()` in real PyTorch on the
simulated GPU: each `.item()` copies back to the host and waits for it,
blocking calls whose CPU samples, native stacks (through libtorch and the
CUDA runtime) and Python frames stallscope records. A loop of `.item()`
calls timed in the job (best of five batches), under `stallscope run --sim`
with the library disabled (STALLSCOPE_DISABLE=1), recording with the native
stacks walked by the cached rules (the default), and by libgcc's unwinder
(STALLSCOPE_UNWIND=libgcc); every process on CPU 0, the three interleaved
over rounds, medians. Prints one line (never asserted); without the
framework environment (scripts/setup-frameworks) it says so.

    item_cost.py --build DIR [--rounds R]
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = r"""
import time, torch
x = torch.ones(1, device="cuda")
for _ in range(2000):
    x.item()
best = None
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(20000):
        x.item()
    dt = (time.perf_counter() - t0) / 20000
    best = dt if best is None else min(best, dt)
print(f"item_ns {best * 1e9:.0f}")
"""

CONFIGS = {
    "disabled": {"STALLSCOPE_DISABLE": "1"},
    "rules": {},
    "libgcc": {"STALLSCOPE_UNWIND": "libgcc"},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        print(f"PyTorch .item() cost: skipped (no framework environment at {venv}; scripts/setup-frameworks)")
        return 0
    exe = os.path.join(args.build, "bin", "stallscope")
    out_root = os.path.join(os.path.abspath(args.build), "bench-item")
    os.makedirs(out_root, exist_ok=True)
    names = list(CONFIGS)
    ns = {c: [] for c in names}
    for r in range(args.rounds):
        for c in names[r % len(names):] + names[:r % len(names)]:
            env = dict(os.environ, **CONFIGS[c])
            for k in ("STALLSCOPE_DISABLE", "STALLSCOPE_UNWIND"):
                if k not in CONFIGS[c]:
                    env.pop(k, None)
            out = os.path.join(out_root, f"{c}-{r}")
            subprocess.run(["rm", "-rf", out], check=True)
            p = subprocess.run(["taskset", "-c", "0", exe, "run", "--sim", "--out", out, "--", py, "-c", JOB],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            line = [l for l in p.stdout.splitlines() if l.startswith("item_ns ")]
            if p.returncode != 0 or not line:
                print(f"PyTorch .item() cost: the job failed ({c}): {p.stderr[-500:]}")
                return 1
            ns[c].append(int(line[0].split()[1]))
    subprocess.run(["rm", "-rf", out_root], check=True)
    m = {c: statistics.median(v) for c, v in ns.items()}
    print(f"PyTorch .item() on the simulated GPU, every process on CPU 0 ({args.rounds} interleaved rounds): "
          f"{m['disabled'] / 1e3:.2f} us with the library disabled; recorded, {(m['rules'] - m['disabled']) / 1e3:.2f} "
          f"us more with the native stacks by cached rules, {(m['libgcc'] - m['disabled']) / 1e3:.2f} us more by "
          f"libgcc's unwinder")
    return 0


if __name__ == "__main__":
    sys.exit(main())
