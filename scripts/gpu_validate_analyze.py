#!/usr/bin/env python3
"""The analysis half of scripts/gpu-validate: reads the tarball the GPU half
wrote, runs `stallscope report` on every trace, and sets stallscope's figures
beside PyTorch profiler's (Kineto) ones: kernels per step, GPU busy per step,
the injected sync lines found at their file and line, and the overhead ratio.
Prints a markdown table for docs/validation.md and writes
gpu-validate-summary.json."""
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile

root, tarball = sys.argv[1:3]
stallscope = os.path.join(root, "build", "bin", "stallscope")
work = tempfile.mkdtemp(prefix="gpu-validate-")
with tarfile.open(tarball) as t:
    t.extractall(work)


def marker_line(path, marker):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if marker in line:
                return n
    return None


def report(trace_dir):
    p = subprocess.run([stallscope, "report", trace_dir, "--format", "json"], capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip()}
    return json.loads(p.stdout)


def union(spans):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def kineto_steps(path):
    """Per ProfilerStep#N: kernels and GPU busy (us) of the device ops whose
    launching runtime/driver call lies in the step (by correlation, as HTA)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = []
    for e in events:
        m = re.match(r"ProfilerStep\s*#\s*(\d+)", e.get("name", ""))
        if m and e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op"):
            steps.append((int(m.group(1)), e["ts"], e["ts"] + e["dur"]))
    steps.sort()
    launch_ts = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch_ts[e["args"]["correlation"]] = e["ts"]
    per = {n: {"kernels": 0, "spans": []} for n, _, _ in steps}
    for e in events:
        cat = e.get("cat")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") != "X":
            continue
        ts = launch_ts.get(e.get("args", {}).get("correlation"))
        if ts is None:
            continue
        for n, a, b in steps:
            if a <= ts < b:
                per[n]["spans"].append((e["ts"], e["ts"] + e["dur"]))
                per[n]["kernels"] += cat == "kernel"
                break
    return {n: {"kernels": v["kernels"], "busy_us": union(v["spans"])} for n, v in per.items()}


summary = {"gpu": open(os.path.join(work, "gpu.txt")).read().strip() if os.path.exists(os.path.join(work, "gpu.txt")) else ""}
rows = []
torch_src = os.path.join(root, "examples", "torch_train.py")
cuda_src = os.path.join(root, "examples", "cuda_train_loop.cu")
expected_sites = {"torch-item": (torch_src, "STALL:item"), "torch-print-tensor": (torch_src, "STALL:print"),
                  "torch-sync": (torch_src, "STALL:sync"), "cuda-readback": (cuda_src, "STALL:readback"),
                  "cuda-sync-log": (cuda_src, "STALL:sync-log")}
for d in sorted(glob.glob(os.path.join(work, "traces", "*"))):
    name = os.path.basename(d)
    r = report(d)
    entry = {"name": name}
    if "error" in r:
        entry["error"] = r["error"]
        summary[name] = entry
        continue
    steps = r["steps"]
    entry["steps"] = len(steps)
    entry["launches"] = r["totals"]["launches"]
    entry["syncs"] = r["totals"]["syncs"]
    entry["idle_per_step_us"] = statistics.mean(s["gpu_idle_ns"] for s in steps) / 1000 if steps else 0
    entry["hotspots"] = [(h["api"], h["site"].get("file"), h["site"].get("line"), h["count"]) for h in r["hotspots"][:3]]
    if name in expected_sites:
        src, marker = expected_sites[name]
        want = marker_line(src, marker)
        entry["expected_site"] = f"{os.path.basename(src)}:{want}"
        entry["site_found"] = any(os.path.basename(f or "") == os.path.basename(src) and l == want
                                  for _, f, l, _ in entry["hotspots"])
    stall = name[len("torch-"):] if name.startswith("torch-") else None
    kin = os.path.join(work, f"kineto-{stall}.json") if stall else None
    if kin and os.path.exists(kin):
        k = kineto_steps(kin)
        ours = {s["index"]: s for s in steps}
        pairs = [(ours[n], k[n]) for n in sorted(k) if n in ours]
        if pairs:
            entry["kernels_per_step"] = {"stallscope": statistics.mean(o["launches"] for o, _ in pairs),
                                         "kineto": statistics.mean(v["kernels"] for _, v in pairs)}
            b_ours = statistics.mean(o["gpu_busy_ns"] / 1000 for o, _ in pairs)
            b_kin = statistics.mean(v["busy_us"] for _, v in pairs)
            entry["gpu_busy_per_step_us"] = {"stallscope": b_ours, "kineto": b_kin,
                                             "diff_pct": 100 * (b_ours - b_kin) / b_kin if b_kin else None}
    summary[name] = entry
    rows.append(entry)

bare = [json.load(open(p))["mean_step_s"] for p in sorted(glob.glob(os.path.join(work, "overhead-bare-*.json")))]
hooked = [json.load(open(p))["mean_step_s"] for p in sorted(glob.glob(os.path.join(work, "overhead-hooked-*.json")))]
if bare and hooked:
    summary["overhead"] = {"bare_step_us": 1e6 * statistics.median(bare), "hooked_step_us": 1e6 * statistics.median(hooked),
                           "ratio": statistics.median(hooked) / statistics.median(bare), "runs": len(bare)}

with open("gpu-validate-summary.json", "w") as f:
    json.dump(summary, f, indent=1)
print(f"GPU: {summary['gpu']}\n")
print("| run | steps | launches | idle/step | kernels/step (ours / Kineto) | GPU busy/step (ours / Kineto) | injected line found |")
print("|---|---|---|---|---|---|---|")
for e in rows:
    kps = e.get("kernels_per_step")
    busy = e.get("gpu_busy_per_step_us")
    print(f"| {e['name']} | {e['steps']} | {e['launches']} | {e['idle_per_step_us']:.0f} us | "
          f"{'%.1f / %.1f' % (kps['stallscope'], kps['kineto']) if kps else '-'} | "
          f"{'%.0f / %.0f us (%+.1f%%)' % (busy['stallscope'], busy['kineto'], busy['diff_pct'] or 0) if busy else '-'} | "
          f"{(e['expected_site'] + (' yes' if e['site_found'] else ' NO')) if 'expected_site' in e else '-'} |")
if "overhead" in summary:
    o = summary["overhead"]
    print(f"\noverhead (launch-bound loop, median of {o['runs']} interleaved runs): "
          f"{o['bare_step_us']:.1f} us bare, {o['hooked_step_us']:.1f} us under stallscope, ratio {o['ratio']:.3f}")
print("\nwrote gpu-validate-summary.json")
