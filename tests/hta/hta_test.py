#!/usr/bin/env python3
"""Holistic Trace Analysis reads stallscope's timeline export: a training
loop runs under `stallscope run --sim` (an input wait before every step and
a loss read back at its end), `stallscope report --format perfetto` exports
it as rank-0.json, and HTA (from the virtual environment scripts/setup-hta
makes; exit 77, skipped, when it is absent) loads the folder. Checks:
- HTA's idle-time breakdown per step and stream (its own parse, correlation
  join and iterations) agrees within 1% with stallscope's recomputation under
  HTA's definition (the export's stallscope.hta_idle_time_us), and its sums
  over the steps equal HTA's get_idle_time_breakdown per stream;
- HTA's kernel and GPU-op counts equal the JSON report's launches and device
  ops; HTA finds every step.
Usage: hta_test.py --build DIR"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = "*gemm_fwd*=900,*gemm_bwd*=1400,*relu*=40,*sgd_update*=250,*loss_reduce*=30,*load_batch*=60,*=20"
STEPS = 8
INPUT_US = 3000


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def close(a, b, rel=0.01, floor_us=1.0):
    """Within 1% of the larger, or a microsecond (HTA's time unit)."""
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), floor_us)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-3000:]}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    venv = os.environ.get("STALLSCOPE_HTA_VENV", os.path.join(args.build, "hta-venv"))
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        print(f"skipped: no HTA environment at {venv} (scripts/setup-hta makes it when PyPI is reachable)")
        return SKIP
    exe = os.path.join(args.build, "bin", "stallscope")
    with tempfile.TemporaryDirectory(prefix="stallscope-hta-") as work:
        env = dict(os.environ, SIMGPU_KERNEL_US=KERNELS)
        traces = os.path.join(work, "trace")
        run([exe, "run", "--sim", "--out", traces, "--", os.path.join(args.build, "bin", "train_loop"),
             "--steps", str(STEPS), "--input-us", str(INPUT_US), "--readback"], env=env)
        report = json.loads(run([exe, "report", traces, "--format", "json"]).stdout)
        export_dir = os.path.join(work, "hta")
        os.mkdir(export_dir)
        export = os.path.join(export_dir, "rank-0.json")
        run([exe, "report", traces, "--format", "perfetto", "-o", export])
        with open(export) as f:
            ours = json.load(f)["stallscope"]["hta_idle_time_us"]
        out = os.path.join(work, "hta.json")
        run([py, os.path.join(os.path.dirname(os.path.abspath(__file__)), "hta_probe.py"), export_dir, out])
        with open(out) as f:
            hta = json.load(f)

    steps = len(report["steps"])
    if steps != STEPS:
        fail(f"report has {steps} steps, expected {STEPS}")
    if hta["iterations"] != list(range(STEPS)):
        fail(f"HTA found iterations {hta['iterations']}, expected 0..{STEPS - 1}")

    # Counts: every launch submits one kernel, every op belongs to a step.
    launches = sum(s["launches"] for s in report["steps"])
    device_ops = report["processes"][0]["device_ops"]
    print(f"kernels: HTA {hta['kernels']}, report launches {launches}; "
          f"GPU ops: HTA {hta['gpu_ops']}, report device_ops {device_ops}")
    if hta["kernels"] != launches or hta["gpu_ops"] != device_ops:
        fail("HTA's counts differ from the report's")

    # HTA's public breakdown per stream equals the sum of the per-step rows
    # computed on its dataframe (the per-step rows are HTA's rule).
    for r in hta["public"]:
        total = sum(x[r["category"]] for x in hta["per_step"] if x["stream"] == r["stream"])
        if not close(total, r["idle_time"], rel=0.0, floor_us=0.01):
            fail(f"HTA's {r['category']} on stream {r['stream']}: get_idle_time_breakdown "
                 f"{r['idle_time']}, per-step sum {total}")

    # Per step and stream: HTA versus stallscope's recomputation.
    ours_by_key = {(r["step"], r["stream"]): r for r in ours}
    hta_by_key = {(r["step"], r["stream"]): r for r in hta["per_step"]}
    if set(ours_by_key) != set(hta_by_key):
        fail(f"(step, stream) rows differ: stallscope {sorted(ours_by_key)}, HTA {sorted(hta_by_key)}")
    host_total = 0
    print("step stream  host_wait_us (HTA / stallscope)  kernel_wait  other   stallscope host_wait cause")
    for key in sorted(hta_by_key):
        h, o = hta_by_key[key], ours_by_key[key]
        native = report["steps"][key[0]]["idle_by_cause"]["host_wait"] / 1000 if key[0] >= 0 else 0
        print(f"{key[0]:4d} {key[1]:6d}  {h['host_wait']:12.0f} / {o['host_wait']:<12d} "
              f"{h['kernel_wait']:5.0f}/{o['kernel_wait']:<5d} {h['other']:5.0f}/{o['other']:<5d} "
              f"{native:10.0f}")
        if h["ops"] != o["ops"]:
            fail(f"step {key[0]} stream {key[1]}: HTA has {h['ops']} ops, stallscope {o['ops']}")
        for cat in ("host_wait", "kernel_wait", "other"):
            if not close(h[cat], o[cat]):
                fail(f"step {key[0]} stream {key[1]}: {cat} HTA {h[cat]} us, stallscope {o[cat]} us")
        host_total += h["host_wait"]
    # The injected input wait is there, as host wait, in every step but the first
    # (whose first op has no earlier op on its stream).
    if host_total < (STEPS - 1) * INPUT_US * 0.9:
        fail(f"HTA host wait {host_total} us over the run, expected at least {(STEPS - 1) * INPUT_US * 0.9}")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
