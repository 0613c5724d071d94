#!/usr/bin/env python3
"""Framework tests: real, unmodified PyTorch code (examples/torch_train.py) on
the simulated GPU under `stallscope run --sim`, the report checked against
the simulator's ground truth: SIMGPU_TRACE (device ops) and
SIMGPU_SYNC_TRACE (the driver calls that synchronized with the device).

  frameworks_test.py --build DIR --case NAME

Needs the framework environment (scripts/setup-frameworks makes
build/frameworks-venv; STALLSCOPE_FRAMEWORKS_VENV overrides): without it,
or when its Python cannot import torch under the simulator, the case exits
77 (CTest: skipped) and prints why.

Checks of a stall case (`torch_<stall>`, NVTX step markers;
`torch_profiler_item`: torch.profiler's ProfilerStep#N):
- exactly the loop's steps;
- per-step GPU idle within 2% (or 100 us) of the ground truth, the causes
  summing to it;
- per step, the launches equal the kernels the ground truth saw queued in
  the step's host range, and the synchronizing calls equal the calls the
  simulator says synchronized (SIMGPU_SYNC_TRACE);
- the hotspot at the `# STALL:<name>` line of torch_train.py: its kind, its
  fix, hit in every step whose synchronizing calls blocked (SIMGPU_SYNC_TRACE;
  every step from the second on); no hotspot anywhere at a library frame;
- the injected idle, measured in the ground truth, charged >= 90% to the
  stall's cause, from the second step on (the first pays first-call costs).
  For a synchronizing stall the injected idle is the device idle that began
  while the host was inside a synchronizing call (SIMGPU_SYNC_TRACE), up to
  how long the host had waited in it before the drain; for an input stall,
  the idle during the loop's input waits as the program logged them
  (torch_train.py --log-waits); for tiny ops, the idle before each of them.
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ground_truth import (MIN_BLOCKED_NS, device_gaps, idle_mismatches, injected_after_syncs,  # noqa: E402
                          note_no_injected_idle, preemption_mismatch, until_submit)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "distributed"))
import nccl_test  # noqa: E402  (the ground truth's collectives: truth_ops, truth_waits)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_TRAIN = os.path.join(ROOT, "examples", "torch_train.py")
NUMBA_TRAIN = os.path.join(ROOT, "examples", "numba_train.py")
CUDA_PYTHON_TRAIN = os.path.join(ROOT, "examples", "cuda_python_train.py")
TORCH_DDP = os.path.join(ROOT, "examples", "torch_ddp.py")
STEPS = 10
SLACK_NS = 20_000    # per step, on the 90% rule (timer and wake-up granularity)
# GEMMs at 2 TFLOP/s: about 13 ms of device work per step (the MLP's 4
# layers of 256 x 2048 x 2048), longer than the host's share of a step.
# STALLSCOPE_UNWIND=check: every native stack the recorder walks by its
# cached rules is walked by libgcc's unwinder too, and a difference counted
# (run_traced requires none).
ENV = {"SIMGPU_GEMM_TFLOPS": "2", "SIMGPU_KERNEL_US": "*sin_kernel*=3,*=20", "STALLSCOPE_UNWIND": "check"}


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import Failure, Skip, check  # noqa: E402
import trace_dump  # noqa: E402


def venv_python():
    venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        raise Skip(f"no framework environment at {venv} (scripts/setup-frameworks makes it when PyPI is "
                   "reachable)")
    return py


def marker_line(marker, src=TORCH_TRAIN):
    return checks.marker_line(src, f"# {marker}")


def read_jsonl(pattern):
    out = []
    for path in glob.glob(pattern):
        with open(path) as f:
            out.extend(json.loads(l) for l in f if l.strip())
    return out


def run_traced(build, work, args, extra_env=None):
    """Runs args under `stallscope run --sim`; returns the JSON report, the
    ground-truth ops of the traced process and its synchronizing calls."""
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env.update(ENV)
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    env["SIMGPU_SYNC_TRACE"] = os.path.join(work, "sync-%p.jsonl")
    env.update(extra_env or {})
    exe = os.path.join(build, "bin", "stallscope")
    cmd = [exe, "run", "--sim", "--out", out, "--"] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        if "import torch" in p.stderr or "ImportError" in p.stderr or "OSError" in p.stderr:
            raise Skip(f"torch does not import under the simulator: {p.stderr[-1500:]}")
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-3000:]}")
    rep = subprocess.run([exe, "report", out, "--format", "json"], capture_output=True, text=True, timeout=300)
    if rep.returncode != 0:
        raise Failure(f"report exited {rep.returncode}: {rep.stderr[-2000:]}")
    with open(os.path.join(work, "report.json"), "w") as f:
        f.write(rep.stdout)
    checks.check_windowed_report(exe, out, rep.stdout)
    checks.check_folder_one_at_a_time(exe, out, rep.stdout)
    report = json.loads(rep.stdout)
    checks.check_stacks_compared(report)  # ENV's STALLSCOPE_UNWIND=check
    pid = os.path.basename(glob.glob(os.path.join(out, "*.sstrace"))[0]).rsplit("-", 1)[-1].split(".")[0]
    truth = read_jsonl(os.path.join(work, f"truth-{pid}.jsonl"))
    syncs = read_jsonl(os.path.join(work, f"sync-{pid}.jsonl"))
    check(truth, f"no ground truth for pid {pid}")
    checks.check_ops_joined_to_their_threads(
        trace_dump.Trace(build, glob.glob(os.path.join(out, f"*-{pid}.sstrace"))[0]), truth)
    return report, truth, syncs


# ---- checks ----

def check_steps(report, n):
    check(report["step_source"] == "marker", f"step_source {report['step_source']}")
    check(len(report["steps"]) == n, f"{len(report['steps'])} steps, expected {n}")


def check_idle_matches_truth(report, truth):
    problems = idle_mismatches(report, truth)
    check(not problems, problems[0] if problems else "")


def check_counts_match_truth(report, truth, syncs):
    """Launches: kernels the simulator saw queued in the step's host range
    (cuBLAS's GEMMs included). Synchronizing calls: the simulator's own list."""
    for st in report["steps"]:
        a, b = st["host_start_ns"], st["host_end_ns"]
        kernels = sum(1 for op in truth if op["kind"] == "kernel" and a <= op["queued_ns"] < b)
        check(st["launches"] == kernels,
              f"step {st['index']}: {st['launches']} launches, the ground truth queued {kernels} kernels")
        n = sum(1 for s in syncs if a <= s["start_ns"] < b)
        check(st["sync_count"] == n,
              f"step {st['index']}: {st['sync_count']} synchronizing calls, the simulator saw {n} "
              f"({sorted({s['api'] for s in syncs if a <= s['start_ns'] < b})})")


def is_library(path):
    return ("/site-packages/" in path or "/dist-packages/" in path or "/lib/python3." in path
            or path.startswith("<frozen"))


def check_sites_are_user_code(report):
    for h in report["hotspots"]:
        site = h["site"].get("file") or ""
        python_frames = [f for f in h["stack"] if f.get("module") == "python"]
        users = [f for f in python_frames if not is_library(f.get("file") or "")]
        if users:
            check(not is_library(site), f"hotspot {h['api']} at library frame {site}:{h['site']['line']} "
                                        f"though {users[0]['file']}:{users[0]['line']} is user code")


def find_hotspot(report, line, file=TORCH_TRAIN):
    for h in report["hotspots"]:
        site = h["site"]
        if os.path.realpath(site.get("file") or "") == os.path.realpath(file) and site.get("line") == line:
            return h
    raise Failure(f"no hotspot at {os.path.basename(file)}:{line}; hotspots: "
                  + json.dumps([(h["api"], h["site"].get("file"), h["site"].get("line")) for h in report["hotspots"]]))


def injected_during(truth, waits):
    """The device idle during the program's input waits, as the program
    logged them (--log-waits: what each wait really took), each with the
    share of its wait the main thread spent off-CPU (1 - its logged thread
    CPU time over its wall time; 1 where the program logs no CPU time)."""
    out = []
    for a, b, op, _ in device_gaps(truth):
        b = until_submit(a, b, op)
        for w in waits:
            lo, hi = max(a, w["start_ns"]), min(b, w["end_ns"])
            if hi > lo:
                wall = max(1, w["end_ns"] - w["start_ns"])
                off = 1.0 - min(1.0, w.get("cpu_ns", 0) / wall)
                out.append((lo, hi, off))
    return out


def injected_before(truth, name_part):
    return [(a, until_submit(a, b, op)) for a, b, op, _ in device_gaps(truth) if name_part in op["name"]]


def check_share(report, gaps, causes, truth):
    """A run whose stall left no GPU idle in the ground truth (its input
    waits all overlapped device work, as a clean run's do, or a loaded
    machine stretched the device work over them) has nothing to charge.
    A host stall's share may go to host_preempted where a loaded machine had
    the thread waiting for a CPU: accepted with the host causes, its total
    bounded by the ground truth's waits (preemption_mismatch)."""
    problem = preemption_mismatch(report, truth)
    check(problem is None, problem or "")
    if "host_wait" in causes:
        causes = tuple(causes) + ("host_preempted",)
    steps = report["steps"][1:]
    per_step = [0] * len(steps)
    off_cpu = 0.0  # of the injected idle, what the truth has the host spend off-CPU
    for g in gaps:
        a, b, off = g if len(g) == 3 else (g[0], g[1], 1.0)
        for i, st in enumerate(steps):
            lo, hi = max(a, st["start_ns"]), min(b, st["end_ns"])
            if hi > lo:
                per_step[i] += hi - lo
                off_cpu += off * (hi - lo)
    total = sum(per_step)
    if total == 0:
        note_no_injected_idle()
        return
    got_total = 0
    for st, inj in zip(steps, per_step):
        got = sum(st["idle_by_cause"][c] for c in causes)
        got_total += min(got, inj)
        check(got + SLACK_NS >= 0.9 * inj,
              f"step {st['index']}: {'+'.join(causes)} {got} ns < 90% of the injected idle {inj} ns; "
              f"causes {st['idle_by_cause']}")
    check(got_total >= 0.9 * total,
          f"{'+'.join(causes)} {got_total} ns < 90% of the injected idle {total} ns")
    if "host_wait" in causes:
        # Where the program's own clocks have the waiting thread off-CPU
        # (asleep, or runnable but waiting for a CPU), most of that must be
        # found off-CPU; the on-CPU rest (a batch unpickled and pinned) is
        # host_busy's. A loaded machine that lets the workers keep ahead
        # leaves mostly on-CPU waits.
        wait = sum(min(st["idle_by_cause"]["host_wait"] + st["idle_by_cause"]["host_preempted"], inj)
                   for st, inj in zip(steps, per_step))
        check(wait >= 0.5 * off_cpu,
              f"host_wait+host_preempted {wait} ns is not most of the injected wait's off-CPU part "
              f"{off_cpu:.0f} ns (of {total} ns)")


# ---- PyTorch stalls ----
# stall -> (marker, kind, words of the fix, how the injected idle is found, its causes)
SYNC = ("sync",)
STALLS = {
    "item": ("STALL:item", "implicit", "scalar read-back", "sync", SYNC),
    "print": ("STALL:print", "implicit", "read-back", "sync", SYNC),
    "synchronize": ("STALL:sync", "explicit", "explicit sync", "sync", SYNC),
    "if": ("STALL:if", "implicit", "scalar read-back", "sync", SYNC),
    "cpu": ("STALL:cpu", "implicit", "device-to-host", "sync", SYNC),
    "tolist": ("STALL:tolist", "implicit", "device-to-host", "sync", SYNC),
    "nonzero": ("STALL:nonzero", "implicit", "read-back", "sync", SYNC),
    "clip_norm": ("STALL:clip_norm", "implicit", "scalar read-back", "sync", SYNC),
    "pageable": ("STALL:pageable", "implicit", "host-to-device", "sync", SYNC),
    # The main thread waits for the workers' batches off-CPU, and unpickles
    # and pins them on-CPU: both are the input pipeline's.
    "dataloader": (None, None, None, "input", ("host_wait", "host_busy")),
    # A sleep for each batch: host_wait, with host_busy for the on-CPU share of
    # the gap around it (the analyzer splits a gap by its CPU time, not by
    # where in the gap it ran; check_share also wants host_wait the larger).
    "pinned": (None, None, None, "input", ("host_wait", "host_busy")),
    "tiny": (None, None, None, "tiny", ("launch_overhead", "host_busy")),
    "clean": (None, None, None, "input", ("host_wait", "host_busy")),
}
# Hits per step at the stall's line: one read-back (None: several, e.g. the
# upload of x and y, or print's formatting reading several values).
PER_STEP = {"item": 1, "synchronize": 1, "if": 1, "cpu": 1, "tolist": 1, "nonzero": 1, "clip_norm": 1}


def blocking_syncs(report, syncs, min_ns=MIN_BLOCKED_NS):
    """Per step, the simulator's synchronizing calls in its host range that
    lasted over min_ns (a loaded host may reach a read-back after the device
    has drained, and then nothing blocked)."""
    return [sum(1 for x in syncs if st["host_start_ns"] <= x["start_ns"] < st["host_end_ns"]
                and x["end_ns"] - x["start_ns"] > min_ns) for st in report["steps"]]


def torch_case(stall, model_args=(), markers="nvtx"):
    """markers: nvtx (torch.cuda.nvtx ranges) or profiler (torch.profiler's
    ProfilerStep#N, seen through stallscope's Python hooks; the range the
    profiler leaves open after the loop is not a step)."""
    def run(build, work):
        py = venv_python()
        waits_log = os.path.join(work, "waits.jsonl")
        args = [py, TORCH_TRAIN, "--stall", stall, "--steps", str(STEPS), "--markers", markers,
                "--log-waits", waits_log] + list(model_args)
        env = {}
        if stall == "dataloader":
            args += ["--collate-ms", "40", "--workers", "2"]  # 20 ms a batch: slower than the device
        elif stall == "tiny":
            # A fast device (GEMMs at 50 TFLOP/s, 3 us elementwise kernels): the
            # host's launches are the limit.
            env.update({"SIMGPU_GEMM_TFLOPS": "50", "SIMGPU_KERNEL_US": "*=3"})
        else:
            args += ["--input-ms", "2"]
        report, truth, syncs = run_traced(build, work, args, env)
        waits = read_jsonl(waits_log)
        marker, kind, fix, inject, causes = STALLS[stall]
        check_steps(report, STEPS)
        check_idle_matches_truth(report, truth)
        check_counts_match_truth(report, truth, syncs)
        check_sites_are_user_code(report)
        if marker:
            h = find_hotspot(report, marker_line(marker))
            check(h["kind"] == kind, f"{marker}: kind {h['kind']}, expected {kind}")
            check(fix in h["suggestion"], f"{marker}: fix {h['suggestion']!r} does not say {fix!r}")
            # Hit in every step whose synchronizing call blocked in the
            # simulator, and in no step without one. A call the host reached
            # after the device had drained (a slow first iteration; a
            # pageable upload at a step's start, once the input wait let the
            # queue empty) did not block: one that returned within the
            # analyzer's 5 us counts or not by the host's few microseconds.
            blocked = blocking_syncs(report, syncs)
            least = sum(1 for n in blocked if n)
            most = sum(1 for n in blocking_syncs(report, syncs, -1) if n)
            check(least <= h["steps"] <= most,
                  f"{marker}: hit in {h['steps']} of {STEPS} steps; {least} blocked, {most} synchronized")
            if stall in PER_STEP:
                check(h["count"] == PER_STEP[stall] * h["steps"],
                      f"{marker}: {h['count']} hits in {h['steps']} steps, expected {PER_STEP[stall]} a step")
        elif stall != "tiny":
            check(not report["hotspots"], f"{stall}: hotspots "
                  + json.dumps([(h["api"], h["site"]) for h in report["hotspots"]]))
        if inject == "sync":
            gaps = [(a, b) for a, b, _ in injected_after_syncs(truth, syncs)]
        elif inject == "input":
            gaps = injected_during(truth, waits)
        else:
            gaps = injected_before(truth, "sin_kernel")
        check_share(report, gaps, causes, truth)
    return run


CASES = {f"torch_{s}": torch_case(s) for s in STALLS}
# A transformer encoder block (self-attention, layer norms, feed-forward;
# the same optimizer) instead of the MLP, 32 sequences a batch.
CASES["torch_transformer_item"] = torch_case("item", ("--model", "transformer", "--batch", "32"))
# torch.profiler's ProfilerStep#N as the step markers (no NVTX).
CASES["torch_profiler_item"] = torch_case("item", markers="profiler")


# ---- numba-cuda and cuda-python (NVRTC in the process) ----
# Steps marked with stallscope.step() (python/stallscope); kernels long enough
# that the device, not the host, sets the pace.
SMALL_KERNELS = "*forward*=1500,*loss_reduce*=200,*update*=300,*=20"
SMALL_STALLS = {
    "readback": ("STALL:readback", "implicit", "read-back", SYNC),
    "synchronize": ("STALL:synchronize", "explicit", "explicit sync", SYNC),
    "clean": (None, None, None, ("host_wait", "host_busy")),
}


def small_case(program, stall):
    def run(build, work):
        py = venv_python()
        waits_log = os.path.join(work, "waits.jsonl")
        args = ["env", "PYTHONPATH=" + os.path.join(ROOT, "python"), py, program, "--stall", stall,
                "--steps", str(STEPS), "--markers", "--log-waits", waits_log]
        report, truth, syncs = run_traced(build, work, args, {"SIMGPU_KERNEL_US": SMALL_KERNELS})
        waits = read_jsonl(waits_log)
        marker, kind, fix, causes = SMALL_STALLS[stall]
        check_steps(report, STEPS)
        check_idle_matches_truth(report, truth)
        check_counts_match_truth(report, truth, syncs)
        check_sites_are_user_code(report)
        if marker:
            h = find_hotspot(report, marker_line(marker, program), program)
            check(h["kind"] == kind, f"{marker}: kind {h['kind']}, expected {kind}")
            check(fix in h["suggestion"], f"{marker}: fix {h['suggestion']!r} does not say {fix!r}")
            check(h["steps"] == STEPS and h["count"] == STEPS,
                  f"{marker}: {h['count']} hits in {h['steps']} of {STEPS} steps, expected one a step")
            gaps = [(a, b) for a, b, _ in injected_after_syncs(truth, syncs)]
        else:
            check(not report["hotspots"], "clean: hotspots "
                  + json.dumps([(h["api"], h["site"]) for h in report["hotspots"]]))
            gaps = injected_during(truth, waits)
        check_share(report, gaps, causes, truth)
    return run


def case_torch_device_sample(build, work):
    """PyTorch's own training loop (NVTX step ranges, a loss .item() a step)
    with device timing on for one step in 3 (STALLSCOPE_DEVICE_SAMPLE=3):
    the report holds steps 0, 3, 6 and 9, each with the ground truth's idle,
    every kernel the simulator saw queued in it counted, and the .item()
    hotspot hit only in the reported steps and the lead steps before them
    (whose read-back's drain is the reported step's idle)."""
    every = 3
    py = venv_python()
    args = [py, TORCH_TRAIN, "--stall", "item", "--steps", str(STEPS), "--markers", "nvtx", "--input-ms", "2"]
    report, truth, syncs = run_traced(build, work, args, {"STALLSCOPE_DEVICE_SAMPLE": str(every)})
    want = [k for k in range(STEPS) if k % every == 0]
    got = [st["index"] for st in report["steps"]]
    check(report["step_source"] == "marker", f"step_source {report['step_source']}")
    check(got == want, f"steps {got}, expected {want}")
    check_idle_matches_truth(report, truth)
    check_counts_match_truth(report, truth, syncs)
    names = {d["name"]: d for d in report["diagnostics"]}
    check(names.get("device_timing_sampled", {}).get("count") == len(want),
          f"device_timing_sampled: {names.get('device_timing_sampled')}")
    for bad in ("device_records_missing_at_exit", "device_timing_refused"):
        check(bad not in names, f"{bad}: {names.get(bad)}")
    # The .item() of each reported step, and the one of a lead step (timed,
    # not reported) whose drain left the reported step's device idle.
    h = find_hotspot(report, marker_line("STALL:item"))
    leads = sum(1 for k in range(STEPS) if k % every == every - 1)
    check(h["steps"] <= len(want) and h["steps"] <= h["count"] <= h["steps"] + leads,
          f".item(): {h['count']} hits in {h['steps']} steps; {len(want)} steps reported, {leads} lead steps")
    least = sum(1 for n in blocking_syncs(report, syncs) if n)
    check(h["steps"] >= least, f".item(): hit in {h['steps']} steps, {least} of the reported ones blocked")


def case_torch_ddp(build, work):
    """DistributedDataParallel under torchrun on the simulated NCCL, 2 ranks,
    rank 1 waiting 20 ms more for each batch. The stragglers named are those
    the analyzer's rule makes of the ground truth's late arrivals
    (nccl_test.check_stragglers: on a quiet machine rank 1; on a loaded one
    the slowed rank's lead may drown in preemption of both), the wait each
    caused within 5% of the truth's (the other rank's waits for it at every
    collective inside the steps), and q5 names the first. 32 steps: with two ranks, arriving last is a
    coin toss (only one of DDP's two buckets a step waits for the slow
    rank), and the binomial test needs that many to tell (16 steps gave 18
    of 25 late arrivals, p about 0.02, in one run)."""
    py = venv_python()
    world, slow, steps = 2, 1, 32
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env.update(ENV)
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    exe = os.path.join(build, "bin", "stallscope")
    cmd = [exe, "run", "--sim", "-q", "--out", out, "--", py, "-m", "torch.distributed.run",
           "--nproc-per-node", str(world), TORCH_DDP, "--steps", str(steps), "--slow-rank", str(slow),
           "--slow-ms", "20"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}: {p.stdout[-1500:]}\n{p.stderr[-3000:]}")
    rep = subprocess.run([exe, "report", out, "--format", "json"], capture_output=True, text=True, timeout=300)
    check(rep.returncode == 0, f"report exited {rep.returncode}: {rep.stderr[-2000:]}")
    checks.check_windowed_report(exe, out, rep.stdout)
    checks.check_folder_one_at_a_time(exe, out, rep.stdout)
    report = json.loads(rep.stdout)
    ranks = {r["rank"]: r for r in report.get("ranks", [])}
    check(sorted(ranks) == list(range(world)), f"ranks[] {sorted(ranks)}")
    for r in ranks.values():
        check(r["steps"] == steps, f"rank {r['rank']}: {r['steps']} steps, expected {steps}")
    for f in sorted(glob.glob(os.path.join(out, "*.sstrace"))):
        one = subprocess.run([exe, "report", f, "--format", "json"], capture_output=True, text=True, timeout=300)
        check(one.returncode == 0, f"report {f} exited {one.returncode}: {one.stderr[-2000:]}")
        checks.check_stacks_compared(json.loads(one.stdout), os.path.basename(f))
    _, by = nccl_test.truth_ops(work)
    late, caused, _ = nccl_test.truth_waits(by, ranks)
    named = nccl_test.check_stragglers(report, late, caused, ranks, slow)
    print(f"torch_ddp: stragglers {named} (the slowed rank: {slow})")


CASES["torch_ddp"] = case_torch_ddp
CASES["torch_device_sample"] = case_torch_device_sample


AUTO_MIN_PHASE_GAP_NS = 50_000  # analyzer/analyze/steps.h kAutoMinPhaseGapNs


def wait_phase_stands_out(truth, waits):
    """The analyzer's phase rule (analyzer/analyze/steps.cc) on the ground truth:
    per position in the loop's iterations (the ops queued from one input
    wait's end to the next's), the median host gap before the op, less the
    time the submitting thread waited for a CPU since its previous op. True
    when the gap before each iteration's first op (the one after the wait)
    is >= 50 us and at least twice any other position's."""
    ops = sorted(truth, key=lambda o: o["queued_ns"])
    prev_rd = {}
    gap = []  # per op: host gap before it, preemption removed
    for i, op in enumerate(ops):
        g = op["queued_ns"] - ops[i - 1]["queued_ns"] if i else 0
        rd = op.get("run_delay_ns", 0)
        g -= min(g, max(0, rd - prev_rd.get(op.get("tid"), rd)))
        prev_rd[op.get("tid")] = rd
        gap.append(g)
    iters = []
    for k, w in enumerate(waits):
        end = waits[k + 1]["start_ns"] if k + 1 < len(waits) else None
        iters.append([gap[i] for i, op in enumerate(ops)
                      if op["queued_ns"] >= w["end_ns"] and (end is None or op["queued_ns"] < end)])
    length = min((len(x) for x in iters[:-1]), default=0)
    if length < 2:
        return False
    med = []
    for o in range(length):
        g = sorted(x[o] for x in iters[:-1])
        med.append(g[len(g) // 2])
    return med[0] >= AUTO_MIN_PHASE_GAP_NS and med[0] >= 2 * max(med[1:])


def auto_case(stall):
    """No markers: stallscope finds the loop's steps itself. The loop's
    iterations, each beginning at the first submission after its input wait
    (as the program logged it: no op was queued between the wait's end and
    the step's start), with the launches of both of torch's launching
    threads (Python, autograd) in each, equal to the ground truth and the
    same every step; a stall's hotspot hit once in every iteration. The
    warm-up pass before the loop does an iteration's work (forward, backward,
    optimizer) and may be found as one more step before the first wait:
    it must then begin before the first wait does.

    The steps begin right after the input waits only when the waits make the
    host's longest silence in the iteration (the analyzer's phase rule
    applied to the ground truth, wait_phase_stands_out). On a loaded machine
    the DataLoader's workers keep up with a preempted main thread, most
    waits last 0.1 ms, and no call of the iteration is preceded by a gap
    that stands out: the steps must then begin at one and the same call of
    every iteration."""
    def run(build, work):
        py = venv_python()
        waits_log = os.path.join(work, "waits.jsonl")
        args = [py, TORCH_TRAIN, "--stall", stall, "--steps", str(STEPS), "--log-waits", waits_log]
        args += ["--collate-ms", "40"] if stall == "dataloader" else ["--input-ms", "2"]
        report, truth, syncs = run_traced(build, work, args)
        waits = sorted(read_jsonl(waits_log), key=lambda w: w["start_ns"])
        check(report["step_source"] == "auto", f"step_source {report['step_source']}")
        steps = report["steps"]
        check(len(waits) == STEPS, f"{len(waits)} waits logged")
        check(len(steps) in (STEPS, STEPS + 1), f"{len(steps)} steps, expected {STEPS}")
        if len(steps) == STEPS + 1:
            check(steps[0]["host_start_ns"] < waits[0]["start_ns"],
                  "an extra step that is not the warm-up pass before the loop")
        loop = steps[-STEPS:]
        strict = wait_phase_stands_out(truth, waits)
        offsets = set()
        for st, w in zip(loop, waits):
            check(st["host_start_ns"] >= w["end_ns"],
                  f"step {st['index']} begins before its input wait ended")
            early = [op for op in truth if w["end_ns"] <= op["queued_ns"] < st["host_start_ns"]]
            if strict:
                check(not early, f"step {st['index']} begins after {len(early)} ops submitted since its wait")
            offsets.add(len(early))
        if not strict:
            print("note: no input wait stands out in the ground truth's host gaps; "
                  f"steps begin {sorted(offsets)} ops after their waits")
            check(len(offsets) == 1, f"the steps begin at different calls of the iteration: "
                  f"{sorted(offsets)} ops after their waits")
        check_idle_matches_truth(report, truth)
        check_counts_match_truth(report, truth, syncs)
        # Steps that begin inside an iteration: the last holds only the rest
        # of the loop's last iteration.
        full = loop if offsets == {0} else loop[:-1]
        launches = {st["launches"] for st in full}
        check(len(launches) == 1, f"launches differ from step to step: {[st['launches'] for st in loop]}")
        if stall == "item":
            h = find_hotspot(report, marker_line("STALL:item"))
            check(h["count"] == STEPS, f"item: {h['count']} hits, expected {STEPS}")
    return run


CASES["torch_auto_item"] = auto_case("item")
CASES["torch_auto_dataloader"] = auto_case("dataloader")

for _stall in SMALL_STALLS:
    CASES[f"numba_{_stall}"] = small_case(NUMBA_TRAIN, _stall)
    CASES[f"cuda_python_{_stall}"] = small_case(CUDA_PYTHON_TRAIN, _stall)


def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
