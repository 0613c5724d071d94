#!/usr/bin/env python3
"""scripts/bench's measure of a join that needs no CUPTI call per launch
(issue 17): matching each stream's submissions to its device ops by their
order, instead of the external correlation id the recorder pushes into
CUPTI around every launch.

Runs real jobs under `stallscope run --sim` (train_loop: one launching
thread; examples/torch_train.py: PyTorch's main and autograd threads on one
stream, with the framework environment; ddp_train: two ranks with NCCL),
reads each trace with `stallscope dump --format json` and, per process,
joins by order as a recorder without the per-launch push and pop could:
- a call's stream handle (the per-thread default stream per thread) is
  mapped to CUPTI's stream id once, as cuptiGetStreamIdEx would give it
  (here: the id the correlation join shows for that handle most often);
- on each CUPTI stream, the submitting calls in order of entry are paired
  with the device ops in order of start.
Prints, per job, the ops the order join gives the same submitting call as
the correlation join, and the pairs it gets wrong. Figures from one run,
never asserted.

    join_order.py --build DIR
"""
import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PER_THREAD = (0, 2)  # the null handle (a _ptsz entry's), CU_STREAM_PER_THREAD


def order_join(d, drop=None):
    """(ops joined, ops the order join pairs with the same call, ops it
    pairs with another or none). `drop`: the index of one op CUPTI is taken
    to have lost (left out of the order join, counted as joined)."""
    calls, ops = d["calls"], d["ops"]

    def key(c):
        return (c["stream"], c["tid"]) if c["stream"] in PER_THREAD else (c["stream"], 0)

    votes = collections.defaultdict(collections.Counter)
    for op in ops:
        if op["call"] >= 0:
            votes[key(calls[op["call"]])][op["stream"]] += 1
    to_id = {k: v.most_common(1)[0][0] for k, v in votes.items()}
    subs = collections.defaultdict(list)
    for i, c in enumerate(calls):
        if c["correlation"] != 0 and key(c) in to_id:
            subs[to_id[key(c)]].append(i)
    by_stream = collections.defaultdict(list)
    for i, op in enumerate(ops):
        if i != drop:
            by_stream[op["stream"]].append(op)
    joined = same = 0
    for sid, stream_ops in by_stream.items():
        stream_ops.sort(key=lambda o: (o["start_ns"], o["end_ns"]))
        order = sorted(subs.get(sid, []), key=lambda i: calls[i]["enter_ns"])
        for k, op in enumerate(stream_ops):
            if op["call"] < 0:
                continue
            joined += 1
            same += k < len(order) and order[k] == op["call"]
    if drop is not None and ops[drop]["call"] >= 0:
        joined += 1
    return joined, same, joined - same


def run(build, work, name, cmd, env=None):
    out = os.path.join(work, name)
    e = dict(os.environ, SIMGPU_KERNEL_US="*=20", **(env or {}))
    p = subprocess.run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "-q", "--out", out, "--"] + cmd,
                       env=e, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return f"{name}: the job exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"
    joined = same = wrong = lost_same = 0
    for path in sorted(glob.glob(os.path.join(out, "*.sstrace"))):
        d = json.loads(subprocess.run([os.path.join(build, "bin", "stallscope"), "dump", path, "--format", "json"],
                                      capture_output=True, text=True, check=True).stdout)
        j, s, w = order_join(d)
        joined, same, wrong = joined + j, same + s, wrong + w
        # One record lost a tenth of the way in (by start time).
        if d["ops"]:
            first = sorted(range(len(d["ops"])), key=lambda i: d["ops"][i]["start_ns"])[len(d["ops"]) // 10]
            lost_same += order_join(d, first)[1]
    share = same / joined if joined else 0.0
    return (f"{name}: {same:,} of {joined:,} ops ({100 * share:.2f}%) paired as the correlation join pairs "
            f"them, {wrong:,} not; with one device record lost a tenth of the way in, "
            f"{100 * lost_same / joined if joined else 0:.1f}%")


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--build", required=True)
    a = a.parse_args()
    build = os.path.abspath(a.build)
    venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
    py = os.path.join(venv, "bin", "python")
    with tempfile.TemporaryDirectory() as work:
        lines = [run(build, work, "train_loop", [os.path.join(build, "bin", "train_loop"), "--steps", "200",
                                                 "--readback"])]
        if os.path.exists(py):
            lines.append(run(build, work, "torch_train", [py, os.path.join(ROOT, "examples", "torch_train.py"),
                                                          "--steps", "20", "--stall", "item"],
                             {"SIMGPU_GEMM_TFLOPS": "2"}))
        else:
            lines.append("torch_train: skipped (no framework environment: scripts/setup-frameworks)")
        launcher = os.path.join(ROOT, "scripts", "launch-ranks")
        lines.append(run(build, work, "ddp_train (2 ranks)", [launcher, "-n", "2", "--", os.path.join(build, "bin", "ddp_train"),
                                                               "--steps", "50"]))
    print("join by per-stream order instead of CUPTI's external correlation (no CUPTI call per launch): "
          + "; ".join(lines))


if __name__ == "__main__":
    sys.exit(main())
