#!/usr/bin/env python3
"""scripts/bench's side-by-side: the same simulated PyTorch run (the
launch-bound examples/torch_train.py --tiny) bare, under stallscope and
under torch.profiler (Kineto on the simulated CUPTI), then each tool's
analysis: `stallscope report` of its trace against Holistic Trace
Analysis's idle-time breakdown of Kineto's JSON, and HTA loading
stallscope's Perfetto export of its run.

Prints figures from one run (never asserted): the mean step time of each
configuration (medians over interleaved rounds, each beside bare), the
trace bytes, and the analyses' times and peak memory. Without the framework
environment (scripts/setup-frameworks) or HTA's (scripts/setup-hta) it says
so and prints what it can.

    torch_compare.py --build DIR [--steps N] [--rounds R]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM_LIBS = ["libcuda.so.1", "libcudart.so.13", "libcupti.so.13", "libnccl.so.2", "libcublas.so.13",
            "libcublasLt.so.13"]
ENV = {"SIMGPU_GEMM_TFLOPS": "2", "SIMGPU_KERNEL_US": "*=20"}

HTA_SCRIPT = r"""
import json, logging, sys, time, warnings
warnings.simplefilter("ignore"); logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
loaded = time.perf_counter()
try:
    a.get_idle_time_breakdown(ranks=[0], visualize=False)
    error = None
except Exception as e:  # reported, not fatal: the figure says why it is missing
    error = f"{type(e).__name__}: {e}"
done = time.perf_counter()
print(json.dumps({"load_s": loaded - t0, "idle_s": done - loaded, "error": error}))
"""


def hta_figure(h, mb):
    if h["error"]:
        return f"load {h['load_s']:.2f} s, {mb:.0f} MB peak, idle-time breakdown failed ({h['error']})"
    return f"load {h['load_s']:.2f} s + idle-time breakdown {h['idle_s']:.2f} s, {mb:.0f} MB peak"


def sim_env(build, extra=None):
    lib = os.path.join(build, "lib", "simgpu")
    env = dict(os.environ, LD_PRELOAD=":".join(os.path.join(lib, n) for n in SIM_LIBS), LD_LIBRARY_PATH=lib, **ENV)
    env.update(extra or {})
    return env


def run_job(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"torch_compare: {' '.join(cmd[:4])}... exited {p.returncode}: {p.stderr[-1500:]}")
    return p


def timed(cmd, env=None):
    """Wall seconds and peak RSS (MB) of one command (GNU time)."""
    import time
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, env=env, capture_output=True, text=True, timeout=1200)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"torch_compare: {' '.join(cmd[:3])}... exited {p.returncode}: {p.stderr[-1500:]}")
    return dt, int(p.stderr.strip().splitlines()[-1]) / 1024, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
    py = os.path.join(venv, "bin", "python")
    hta_py = os.path.join(os.environ.get("STALLSCOPE_HTA_VENV") or os.path.join(ROOT, "build", "hta-venv"),
                          "bin", "python")
    if not os.access(py, os.X_OK):
        print(f"torch.profiler comparison: skipped (no framework environment at {venv}; scripts/setup-frameworks)")
        return
    exe = os.path.join(a.build, "bin", "stallscope")
    job = [py, os.path.join(ROOT, "examples", "torch_train.py"), "--tiny", "--steps", str(a.steps), "--warmup", "5"]
    with tempfile.TemporaryDirectory(prefix="stallscope-torch-bench-") as work:
        configs = ["bare", "stallscope", "torch.profiler"]
        step = {c: [] for c in configs}
        for r in range(a.rounds):
            for c in configs[r % 3:] + configs[:r % 3]:
                summary = os.path.join(work, f"summary-{r}-{c}.json")
                if c == "bare":
                    run_job(job + ["--summary", summary], sim_env(a.build))
                elif c == "stallscope":
                    out = os.path.join(work, f"trace-{r}")
                    run_job([exe, "run", "--sim", "-q", "--out", out, "--"] + job + ["--summary", summary],
                            dict(os.environ, **ENV))
                else:
                    run_job(job + ["--summary", summary, "--profile", os.path.join(work, f"kineto-{r}.json")],
                            sim_env(a.build))
                step[c].append(json.load(open(summary))["mean_step_s"])
        base = statistics.median(step["bare"])
        parts = [f"{c} {statistics.median(step[c]) * 1e3:.2f} ms ({statistics.median(step[c]) / base:.3f} x)"
                 for c in configs[1:]]
        ours = glob.glob(os.path.join(work, "trace-0", "*.sstrace"))
        kineto = os.path.join(work, "kineto-0.json")
        print(f"torch.profiler comparison (torch_train --tiny, {a.steps} steps after 5, {a.rounds} interleaved "
              f"rounds): step time bare {base * 1e3:.2f} ms; " + "; ".join(parts) +
              f"; trace bytes: stallscope {sum(map(os.path.getsize, ours)) / 1e6:.2f} MB, Kineto JSON "
              f"{os.path.getsize(kineto) / 1e6:.2f} MB")
        dt, mb, _ = timed([exe, "report", os.path.join(work, "trace-0"), "--format", "json", "--no-predict"])
        line = f"analysis: stallscope report {dt:.2f} s, {mb:.0f} MB peak"
        if os.access(hta_py, os.X_OK):
            kdir = os.path.join(work, "kineto-dir")
            os.makedirs(kdir)
            os.rename(kineto, os.path.join(kdir, "rank-0.json"))
            _, mb, out = timed([hta_py, "-c", HTA_SCRIPT, kdir])
            h = json.loads(out.strip().splitlines()[-1])
            line += f"; HTA on Kineto's JSON: {hta_figure(h, mb)}"
            pdir = os.path.join(work, "perfetto-dir")
            os.makedirs(pdir)
            run_job([exe, "report", os.path.join(work, "trace-0"), "--format", "perfetto", "-o",
                     os.path.join(pdir, "rank-0.json")], None)
            _, mb, out = timed([hta_py, "-c", HTA_SCRIPT, pdir])
            h = json.loads(out.strip().splitlines()[-1])
            line += f"; HTA on stallscope's Perfetto export of its run: {hta_figure(h, mb)}"
        else:
            line += "; HTA: skipped (no environment; scripts/setup-hta)"
        print(line)


if __name__ == "__main__":
    main()
