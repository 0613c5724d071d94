#!/usr/bin/env python3
"""End-to-end tests: real processes under libstallscope.so on the simulated
GPU, the analyzer's answer checked against the simulator's ground truth
(SIMGPU_TRACE). One case per invocation: e2e.py --build DIR --case NAME."""
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ground_truth import (idle_mismatches, note_no_injected_idle, preempted_before,  # noqa: E402
                          preemption_mismatch, union_busy, until_submit, device_gaps, PREEMPT_SLACK_NS)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_SRC = os.path.join(ROOT, "examples", "train_loop.cc")
CUDA_EXAMPLE_SRC = os.path.join(ROOT, "examples", "cuda_train_loop.cu")
KERNELS = ("*gemm_fwd*=900,*gemm_bwd*=1400,*relu*=40,*sgd_update*=250,*loss_reduce*=30,*load_batch*=60,"
           "*tiny_elementwise*=2,*=20")
STEPS = 12
LAUNCH_DISPATCH_NS = 50_000  # analyzer/analyze/attribution.h launch_dispatch_ns
LAUNCH_LATENCY_NS = 20_000   # analyzer/analyze/attribution.h launch_latency_ns


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import SKIP, Failure, check  # noqa: E402


def marker_line(marker, src=EXAMPLE_SRC):
    return checks.marker_line(src, marker)


def run_traced(build, work, args, extra_env=None, run_args=()):
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env["SIMGPU_KERNEL_US"] = KERNELS
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    env.update(extra_env or {})
    cmd = [os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out] + list(run_args) + ["--"] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    rep = subprocess.run([os.path.join(build, "bin", "stallscope"), "report", out, "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    if rep.returncode != 0:
        raise Failure(f"report exited {rep.returncode}: {rep.stderr[-2000:]}")
    checks.check_windowed_report(os.path.join(build, "bin", "stallscope"), out, rep.stdout)
    checks.check_chunk_index(os.path.join(build, "bin", "stallscope"), out)
    checks.check_folder_one_at_a_time(os.path.join(build, "bin", "stallscope"), out, rep.stdout)
    report = json.loads(rep.stdout)
    for line in p.stdout.splitlines():
        if line.startswith("spin_on_cpu_share "):
            report["_spin_share"] = float(line.split()[1])
    truths = glob.glob(os.path.join(work, "truth-*.jsonl"))
    check(len(truths) == 1, f"expected one ground-truth file, found {truths}")
    with open(truths[0]) as f:
        truth = [json.loads(l) for l in f if l.strip()]
    return report, truth


def injected_gaps(truth, waits=None, clip_start=True):
    """Per step, (the device idle just before the step's first op, the batch
    copy host-to-device that follows the injected host wait, up to its
    submission (ground_truth.until_submit); of it the time the submitting
    thread was runnable but waiting for a CPU in the ground truth, at most
    the gap).
    waits: the program's own log of its input waits (train_loop
    --log-waits), one a step: the gap is cut to the end of the step's wait
    (the copy's call after it, its hook and the driver's path to the
    submission, is the host's work, launch_overhead: a sanitized build
    stretches it to 0.1 ms), and with clip_start to its start too (a drain
    before the wait began is not the wait's)."""
    pre_of = preempted_before(truth)
    gaps, busy_until = [], None
    for op in sorted(truth, key=lambda op: op["start_ns"]):
        if op["kind"] == "memcpy" and op["name"] == "HtoD":
            gap = 0
            if busy_until is not None:  # an op that overlapped the previous work ends no gap
                lo, hi = busy_until, until_submit(busy_until, op["start_ns"], op)
                if waits is not None:
                    w = waits[len(gaps)]
                    hi = min(hi, w["end_ns"])
                    if clip_start:
                        lo = max(lo, w["start_ns"])
                gap = max(0, hi - lo)
            gaps.append((gap, min(gap, pre_of[id(op)])))
        busy_until = op["end_ns"] if busy_until is None else max(busy_until, op["end_ns"])
    return gaps


def check_idle_matches_truth(report, truth):
    """Per-step GPU idle within 2% (or 100 us) of the ground truth."""
    problems = idle_mismatches(report, truth)
    check(not problems, problems[0] if problems else "")
    problem = preemption_mismatch(report, truth)
    check(problem is None, problem or "")


def check_marker_steps(report):
    check(report["step_source"] == "marker", f"step_source {report['step_source']}")
    check(len(report["steps"]) == STEPS, f"{len(report['steps'])} steps, expected {STEPS}")


def find_hotspot(report, line, file="train_loop.cc"):
    for h in report["hotspots"]:
        site = h["site"]
        if os.path.basename(site.get("file") or "") == file and site.get("line") == line:
            return h
    raise Failure(f"no hotspot at {file}:{line}; hotspots: "
                  + json.dumps([(h['api'], h['site']) for h in report['hotspots']]))


def case_readback(build, work):
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(STEPS), "--readback"])
    check_marker_steps(report)
    check_idle_matches_truth(report, truth)
    h = find_hotspot(report, marker_line("STALL:readback"))
    check(h["count"] == STEPS, f"read-back hotspot count {h['count']}, expected {STEPS} (one per step)")
    check(h["kind"] == "implicit", f"read-back kind {h['kind']}")
    check(h["idle_caused_ns"] > 0, "read-back hotspot caused no idle")


def case_sync_log(build, work):
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(STEPS), "--sync-log"])
    check_marker_steps(report)
    check_idle_matches_truth(report, truth)
    h = find_hotspot(report, marker_line("STALL:sync-log"))
    check(h["count"] == STEPS, f"sync-log hotspot count {h['count']}, expected {STEPS}")
    check(h["kind"] == "explicit", f"sync-log kind {h['kind']}")


def case_native_stacks(build, work):
    """The native stacks walked by each thread's cached rules are libgcc's:
    with STALLSCOPE_UNWIND=check the job walks every blocking call's stack
    both ways and counts those that differ (none may), and the default run
    finds the same hotspots, sites and frames as a run with libgcc's
    unwinder alone."""
    args = [os.path.join(build, "bin", "train_loop"), "--steps", str(STEPS), "--readback"]
    reports = {}
    for how in ("check", "libgcc", "rules"):
        os.makedirs(os.path.join(work, how))
        env = {} if how == "rules" else {"STALLSCOPE_UNWIND": how}
        reports[how], _ = run_traced(build, os.path.join(work, how), args, env)
    blocking = checks.check_stacks_compared(reports["check"])
    check(blocking >= STEPS, f"{blocking} blocking calls in the hotspots (expected at least {STEPS})")
    for how, report in reports.items():
        h = find_hotspot(report, marker_line("STALL:readback"))
        check(h["count"] == STEPS, f"{how}: the read-back counted {h['count']} times, expected {STEPS}")

    def sites(report):
        return sorted((h["api"], json.dumps(h["site"]), json.dumps(h["stack"])) for h in report["hotspots"])
    check(sites(reports["rules"]) == sites(reports["libgcc"]),
          f"hotspots by the rules {sites(reports['rules'])}, by libgcc {sites(reports['libgcc'])}")


def case_device_sample(build, work):
    """Device timing on for one step in 4 (run --device-sample 4): the report
    holds the steps whose device work was timed, and the step's before (the
    recorder turns CUPTI's device kinds on at steps 3, 7, 11 and off after
    0, 4, 8). Each step's span is the one continuous timing gives (from the
    ground truth: it begins where the device work submitted before it ends),
    its idle matches the truth, and the read-back's idle is only what it
    caused inside those steps."""
    every = 4
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"), "--steps",
                                             str(STEPS), "--readback"],
                               run_args=["--device-sample", str(every)])
    expected = [k for k in range(STEPS) if k % every == 0]
    got = [st["index"] for st in report["steps"]]
    check(got == expected, f"steps {got}, expected {expected}")
    check_idle_matches_truth(report, truth)
    for st in report["steps"]:
        before = [op["end_ns"] for op in truth if op["queued_ns"] < st["host_start_ns"]]
        mine = [op["end_ns"] for op in truth if st["host_start_ns"] <= op["queued_ns"] < st["host_end_ns"]]
        check(mine, f"step {st['index']}: no ground-truth op submitted in it")
        start = max(before) if before else min(op["start_ns"] for op in truth)
        if not before:
            start = min(start, st["host_start_ns"])
        for what, value, want in (("start", st["start_ns"], start), ("end", st["end_ns"], max(mine))):
            check(abs(value - want) <= 5_000,
                  f"step {st['index']}: device {what} {value}, ground truth {want}")
    diags = {d["name"]: d for d in report["diagnostics"]}
    check(diags.get("device_timing_sampled", {}).get("count") == len(expected),
          f"device_timing_sampled: {diags.get('device_timing_sampled')}")
    for bad in ("cupti_records_stopped", "device_records_missing_at_exit", "device_timing_refused"):
        check(bad not in diags, f"{bad}: {diags.get(bad)}")
    h = find_hotspot(report, marker_line("STALL:readback"))
    sync = report["totals"]["idle_by_cause"]["sync"]
    check(h["idle_caused_ns"] == sync,
          f"read-back idle caused {h['idle_caused_ns']} ns, the timed steps' sync idle {sync} ns")
    check(len(expected) <= h["count"] < STEPS,
          f"read-back counted {h['count']} times: expected the timed steps' (and the steps' before them "
          f"that drained the device in one)")
    # Without step ranges the recorder sees no step: timing stays on, the
    # trace says so, and the analyzer's steps (its own) are all timed.
    os.makedirs(os.path.join(work, "no-nvtx"))
    report, truth = run_traced(build, os.path.join(work, "no-nvtx"),
                               [os.path.join(build, "bin", "train_loop"), "--steps", str(STEPS), "--readback",
                                "--no-nvtx"], run_args=["--device-sample", str(every)])
    diags = {d["name"]: d for d in report["diagnostics"]}
    check("device_timing_not_sampled" in diags and "device_timing_sampled" not in diags,
          f"without steps: diagnostics {sorted(diags)}")
    check(report["step_source"] != "marker", f"without steps: step_source {report['step_source']}")
    check_idle_matches_truth(report, truth)


def read_waits(path, steps):
    with open(path) as f:
        waits = [json.loads(line) for line in f if line.strip()]
    check(len(waits) == steps, f"{len(waits)} input waits logged, expected {steps}")
    return waits


def case_input(build, work):
    wait_us = 6000
    waits_log = os.path.join(work, "waits.jsonl")
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(STEPS), "--input-us", str(wait_us),
                                             "--log-waits", waits_log])
    check_marker_steps(report)
    check_idle_matches_truth(report, truth)
    # No synchronization precedes the wait, so the host ran ahead: the GPU
    # idles for the wait less the work still queued from the step before. The
    # injected idle is, in the ground truth, the gap before each step's first
    # op (its batch copy) while the program waited (its own log of the
    # waits); at least 90% of it is host_wait (steady-state steps, from
    # step 2).
    # Where the thread, woken, waited for a CPU (the ground truth's run-queue
    # delay), that part may be host_preempted instead.
    gaps = injected_gaps(truth, read_waits(waits_log, STEPS))
    check(len(gaps) == STEPS, f"{len(gaps)} batch copies in the ground truth, expected {STEPS}")
    for st, (gap, pre) in zip(report["steps"][2:], gaps[2:]):
        hw = st["idle_by_cause"]["host_wait"]
        hp = st["idle_by_cause"]["host_preempted"]
        check(hw >= 0.9 * (gap - pre) - 20_000 and hw + hp >= 0.9 * gap - 20_000,
              f"step {st['index']}: host_wait {hw} ns (host_preempted {hp} ns) < 90% of the injected "
              f"idle {gap} ns (of it {pre} ns preempted in the ground truth)")
    if sum(g for g, _ in gaps[2:]) == 0:
        note_no_injected_idle()
    check(not report["hotspots"], f"unexpected hotspots {report['hotspots']}")


def case_host_busy(build, work):
    """CPU preprocessing on the launching thread (--cpu-us: a spin before each
    step's first CUDA call): the recorder's CPU-time samples show the thread
    on-CPU in the gap, so at least 90% of the injected idle is host_busy, and
    q3's evidence gives the on/off-CPU split."""
    cpu_us = 4000
    # More steps than the other cases: a slow start on a loaded machine can
    # leave the host a few steps ahead of the device, which the 4 ms spin
    # (longer than the ~2.8 ms of GPU work per step) then wins back.
    steps = 30
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(steps), "--cpu-us", str(cpu_us)])
    check(report["step_source"] == "marker", f"step_source {report['step_source']}")
    check(len(report["steps"]) == steps, f"{len(report['steps'])} steps, expected {steps}")
    check_idle_matches_truth(report, truth)
    gaps = injected_gaps(truth)
    check(len(gaps) == steps, f"{len(gaps)} batch copies in the ground truth, expected {steps}")
    idle_steps = [(st, gap) for st, (gap, _) in zip(report["steps"][2:], gaps[2:]) if gap > 0]
    pre = sum(p for g, p in gaps[2:] if g > 0)
    diags = [d["name"] if "name" in d else d.get("id") for d in report.get("diagnostics", [])]
    check("no_cpu_time" not in diags, f"no_cpu_time reported: {diags}")
    q3 = next(q for q in report["questions"] if q["id"] == "q3")
    check("on-CPU (host_busy" in q3["evidence"] and "off-CPU (host_wait" in q3["evidence"],
          f"q3 evidence lacks the on/off-CPU split: {q3['evidence']}")
    if not idle_steps:
        note_no_injected_idle()
        return
    busy = sum(st["idle_by_cause"]["host_busy"] for st, _ in idle_steps)
    host = busy + sum(st["idle_by_cause"]["host_wait"] + st["idle_by_cause"]["host_preempted"]
                      for st, _ in idle_steps)
    injected = sum(gap for _, gap in idle_steps)
    # The spin never sleeps: in the injected idle it is on-CPU except while
    # it waits for a CPU, which the ground truth says per gap (the submitting
    # thread's run-queue delay since its previous submission, at most the
    # gap). host_busy gets at least 90% of the rest, in the steps that had
    # idle: a loaded machine preempts the spin most in exactly those steps,
    # so the whole run's on-CPU share (the job prints it) is no bound for
    # them. PREEMPT_SLACK_NS: the recorder's and the simulator's schedstat
    # reads are not at the same instants.
    on_cpu = sum(gap - p for gap, p in gaps[2:] if gap > 0)
    share = report.get("_spin_share", 1.0)
    per_step = [(st['index'], st['idle_by_cause']) for st, _ in idle_steps][:4]
    check(busy >= 0.9 * on_cpu - 20_000 * len(idle_steps) - PREEMPT_SLACK_NS,
          f"host_busy {busy} ns < 90% of the injected idle {injected} ns less the {pre} ns the truth has "
          f"the thread waiting for a CPU, over {len(idle_steps)} steps (the run's spin was on-CPU "
          f"{share:.2f} of its time; per step: {per_step})")
    check(host >= 0.9 * injected - 20_000 * len(idle_steps),
          f"host_busy + host_wait + host_preempted {host} ns < 90% of the injected idle {injected} ns "
          f"(of it {pre} ns preempted in the ground truth; per step: {per_step})")


def case_cpu_samples_off(build, work):
    """STALLSCOPE_CPU_SAMPLES=0, on the host_busy loop (a 4 ms spin before
    each step's first CUDA call): the recorder reads no CPU clock, the trace
    says so (cpu_samples_off, and not no_cpu_time), the idle still matches
    the ground truth, and the injected idle goes to host_wait: with samples
    the same loop's is host_busy (case host_busy)."""
    steps = 20
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(steps), "--cpu-us", "4000"],
                               extra_env={"STALLSCOPE_CPU_SAMPLES": "0"})
    check(len(report["steps"]) == steps, f"{len(report['steps'])} steps, expected {steps}")
    check_idle_matches_truth(report, truth)
    diags = {d["name"] for d in report.get("diagnostics", [])}
    check("cpu_samples_off" in diags and "no_cpu_time" not in diags,
          f"diagnostics {sorted(diags)}: expected cpu_samples_off and not no_cpu_time")
    causes = report["totals"]["idle_by_cause"]
    check(causes["host_busy"] == 0 and causes["host_preempted"] == 0,
          f"host_busy {causes['host_busy']} ns, host_preempted {causes['host_preempted']} ns "
          f"without CPU samples")
    gaps = injected_gaps(truth)
    idle_steps = [(st, gap) for st, (gap, _) in zip(report["steps"][2:], gaps[2:]) if gap > 0]
    if not idle_steps:
        note_no_injected_idle()
        return
    wait = sum(st["idle_by_cause"]["host_wait"] for st, _ in idle_steps)
    injected = sum(gap for _, gap in idle_steps)
    check(wait >= 0.9 * injected - 20_000 * len(idle_steps),
          f"host_wait {wait} ns < 90% of the injected idle {injected} ns over {len(idle_steps)} steps")


def case_input_after_sync(build, work):
    wait_us = 4000
    waits_log = os.path.join(work, "waits.jsonl")
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(STEPS), "--input-us", str(wait_us),
                                             "--sync-log", "--log-waits", waits_log])
    check_marker_steps(report)
    check_idle_matches_truth(report, truth)
    # After a synchronization, rule 1 comes first: the sync gets the part the
    # host could have overlapped (the time it sat blocked while the GPU still
    # had work); the rest of the wait is host_wait. Together they explain at
    # least 90% of the injected idle (the ground truth's gap before each
    # step's batch copy, up to the end of the step's input wait), from step
    # 2. (How much of it is host_wait depends on how long the device work
    # ran, which a loaded machine stretches; the attribution unit tests pin
    # the split.)
    gaps = injected_gaps(truth, read_waits(waits_log, STEPS), clip_start=False)
    check(len(gaps) == STEPS, f"{len(gaps)} batch copies in the ground truth, expected {STEPS}")
    for st, (gap, _) in zip(report["steps"][2:], gaps[2:]):
        c = st["idle_by_cause"]
        got = c["host_wait"] + c["sync"] + c["host_preempted"]
        check(got >= 0.9 * gap - 20_000,
              f"step {st['index']}: sync+host_wait+host_preempted {got} of injected idle {gap}")


def case_tiny(build, work):
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(STEPS), "--tiny", "300",
                                             "--dispatch-us", "12"])
    check_marker_steps(report)
    check_idle_matches_truth(report, truth)
    tot = report["totals"]
    lo = tot["idle_by_cause"]["launch_overhead"]
    # The idle that rule 2 must charge to launch_overhead, from the ground
    # truth: every device gap ended by an op whose thread had submitted its
    # previous op less than launch_dispatch_ns (50 us) before, up to the
    # op's submission and the launch latency after it. Every host gap
    # between calls inside such an interval is shorter than the threshold
    # (so never split by preemption), and the time inside calls is
    # launch_overhead too. Where a loaded machine stretched an interval past
    # the threshold (preemption, a slow CPU), the rule charges by what the
    # thread did, and the oracle asks nothing.
    steps = report["steps"]
    prev_of, last = {}, {}  # id(op) -> its thread's previous submission
    for op in sorted(truth, key=lambda o: o["queued_ns"]):
        prev_of[id(op)] = last.get(op.get("tid"))
        last[op.get("tid")] = op["queued_ns"]
    expected = short = 0
    for a, b, op, _ in device_gaps(truth):
        prev = prev_of[id(op)]
        if prev is None or op["queued_ns"] - prev >= LAUNCH_DISPATCH_NS:
            continue
        short += 1
        # Up to the submission, and the launch latency after it: the
        # submitting call returns after it, so its first launch_latency_ns
        # (20 us) past the submission are launch_overhead as well.
        hi = min(b, max(a, op["queued_ns"] + LAUNCH_LATENCY_NS))
        for st in steps:
            expected += max(0, min(hi, st["end_ns"]) - max(a, st["start_ns"]))
    check(tot["gpu_idle_ns"] > 0, "no GPU idle in a loop of tiny kernels")
    check(lo >= 0.9 * expected,
          f"launch_overhead {lo} ns < 90% of the idle the ground truth leaves after launches "
          f"submitted within {LAUNCH_DISPATCH_NS} ns of the previous ({expected} ns over {short} gaps); "
          f"causes {tot['idle_by_cause']}")
    print(f"tiny: launch_overhead {lo} ns, at least {expected} ns by the ground truth ({short} gaps), "
          f"idle {tot['gpu_idle_ns']} ns")
    check(tot["launches"] >= STEPS * 302, f"launches {tot['launches']}")


def case_clean(build, work):
    report, truth = run_traced(build, work, [os.path.join(build, "bin", "train_loop"),
                                             "--steps", str(STEPS)])
    check_marker_steps(report)
    check_idle_matches_truth(report, truth)
    check(not report["hotspots"], f"clean run has hotspots: {report['hotspots']}")
    a = min(s["start_ns"] for s in report["steps"])
    b = max(s["end_ns"] for s in report["steps"])
    true_busy = union_busy(truth, a, b)
    busy = report["totals"]["gpu_busy_ns"]
    check(abs(busy - true_busy) <= 0.02 * true_busy, f"GPU busy {busy} vs truth {true_busy}")


def case_two_processes(build, work):
    """Two jobs traced into one folder at once (`stallscope run -- sh -c
    'train_loop ... & train_loop ... --readback; wait'`): the report lists
    both, each with the ground truth's device ops, kernels and steps for its
    pid, and analyzes the one with more device ops, whose read-back is its
    hotspot once a step. Read one at a time and each by slices (past
    --stream-above 0, neither launched an NCCL kernel), the folder gives the
    same report and page (checks.check_folder_one_at_a_time)."""
    exe = os.path.join(build, "bin", "stallscope")
    loop = os.path.join(build, "bin", "train_loop")
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env["SIMGPU_KERNEL_US"] = KERNELS
    env["SIMGPU_TRACE"] = os.path.join(work, "truth-%p.jsonl")
    steps = {"small": STEPS, "large": STEPS + 8}
    script = (f"'{loop}' --steps {steps['small']} & '{loop}' --steps {steps['large']} --readback; wait")
    p = subprocess.run([exe, "run", "--sim", "-q", "--out", out, "--", "/bin/sh", "-c", script], env=env,
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"run exited {p.returncode}: {p.stderr[-2000:]}")
    rep = subprocess.run([exe, "report", out, "--format", "json"], capture_output=True, text=True, timeout=300)
    check(rep.returncode == 0, f"report exited {rep.returncode}: {rep.stderr[-2000:]}")
    report = json.loads(rep.stdout)
    truth = {}  # pid -> its device ops
    for path in glob.glob(os.path.join(work, "truth-*.jsonl")):
        pid = int(re.search(r"truth-(\d+)\.jsonl$", path).group(1))
        with open(path) as f:
            truth[pid] = [json.loads(l) for l in f if l.strip()]
    procs = {pr["pid"]: pr for pr in report["processes"]}
    check(sorted(procs) == sorted(truth), f"processes {sorted(procs)}, ground truth for {sorted(truth)}")
    for pid, ops in truth.items():
        pr = procs[pid]
        kernels = sum(op["kind"] == "kernel" for op in ops)
        check(pr["device_ops"] == len(ops) and pr["launches"] == kernels,
              f"pid {pid}: {pr['device_ops']} device ops, {pr['launches']} launches; the ground truth "
              f"{len(ops)} ops, {kernels} kernels")
        check(pr["steps"] in steps.values(), f"pid {pid}: {pr['steps']} steps")
    most = max(truth, key=lambda pid: len(truth[pid]))
    analyzed = [pid for pid, pr in procs.items() if pr["analyzed"]]
    check(analyzed == [most], f"analyzed {analyzed}, the most device ops in pid {most}")
    check(procs[most]["steps"] == steps["large"], f"the analyzed process has {procs[most]['steps']} steps")
    h = find_hotspot(report, marker_line("STALL:readback"))
    check(h["count"] == steps["large"], f"read-back hotspot count {h['count']}, expected {steps['large']}")
    checks.check_folder_one_at_a_time(exe, out, rep.stdout)


def case_cuda_runtime(build, work):
    """The CUDA C++ example (nvcc --cudart shared) through the simulated
    runtime, which resolves the driver as NVIDIA's does: its launches are
    recorded through the cuGetProcAddress path and both injected syncs are
    found at their lines in the .cu file."""
    exe = os.path.join(build, "bin", "cuda_train_loop")
    if not os.path.exists(exe):
        return SKIP
    for flag, marker in (("--readback", "STALL:readback"), ("--sync-log", "STALL:sync-log")):
        sub = os.path.join(work, flag.strip("-"))
        os.makedirs(sub)
        report, truth = run_traced(build, sub, [exe, "--steps", str(STEPS), flag])
        check_marker_steps(report)
        check_idle_matches_truth(report, truth)
        check(report["totals"]["launches"] >= STEPS * 4, f"launches {report['totals']['launches']}")
        h = find_hotspot(report, marker_line(marker, CUDA_EXAMPLE_SRC), "cuda_train_loop.cu")
        check(h["count"] == STEPS, f"{marker}: count {h['count']}, expected {STEPS}")


def case_auto_steps(build, work):
    """Steps without NVTX: found from the repeating launch sequence. The true
    steps are the loop's 12 iterations; each begins with its batch copy
    (HtoD), the first device op of the step in the ground truth. The count
    may lose one step to a warm-up that differs (train_loop has none), so
    11..12 pass. A step boundary is right when the first ground-truth op
    that runs in a step's device span (which begins where the previous
    step's last op ended) is that step's batch copy."""
    for name, extra in (("readback", ["--readback"]), ("input", ["--input-us", "3000"])):
        sub = os.path.join(work, name)
        os.makedirs(sub)
        report, truth = run_traced(build, sub, [os.path.join(build, "bin", "train_loop"),
                                                "--steps", str(STEPS), "--no-nvtx"] + extra)
        check(report["step_source"] == "auto", f"{name}: step_source {report['step_source']}")
        steps = report["steps"]
        check(STEPS - 1 <= len(steps) <= STEPS, f"{name}: {len(steps)} steps, expected {STEPS}")
        check_idle_matches_truth(report, truth)
        ops = sorted(truth, key=lambda op: (op["start_ns"], op["end_ns"]))
        copies = [op for op in ops if op["kind"] == "memcpy" and op["name"] == "HtoD"]
        check(len(copies) == STEPS, f"{name}: {len(copies)} batch copies in the ground truth")
        skipped = STEPS - len(steps)  # a step lost at the start, if any
        for st, copy in zip(steps, copies[skipped:]):
            # Ops of the previous step end at the step's start (a few ns of
            # skew between the simulator's clock reads allowed).
            first = next((op for op in ops if op["end_ns"] > st["start_ns"] + 1000), None)
            check(first is copy,
                  f"{name}: step {st['index']} starts at {st['start_ns']}; its first op is {first}, "
                  f"expected the batch copy {copy}")


def case_auto_two_streams(build, work):
    """Automatic steps on the runtime-API loop with two streams and an event
    dependency (the loss reduced on a second stream): exactly the loop's
    iterations, each with all its launches, none outside every step."""
    exe = os.path.join(build, "bin", "cuda_train_loop")
    if not os.path.exists(exe):
        return SKIP
    for name, extra in (("input", ["--input-us", "2000"]), ("readback", ["--readback"]), ("none", [])):
        sub = os.path.join(work, name)
        os.makedirs(sub)
        report, truth = run_traced(build, sub, [exe, "--steps", "9", "--no-nvtx", "--two-streams"] + extra)
        check(report["step_source"] == "auto", f"{name}: step_source {report['step_source']}")
        steps = report["steps"]
        kernels = sum(1 for op in truth if op["kind"] == "kernel")
        check(len(steps) == 9, f"{name}: {len(steps)} steps, expected 9")
        check(all(st["launches"] == kernels // 9 for st in steps),
              f"{name}: launches per step {[st['launches'] for st in steps]}, the ground truth has {kernels}")
        check_idle_matches_truth(report, truth)


# analyzer/compare/compare.h: a cause changed when |delta| per step is at least
# kCompareMinChange of the larger side and kCompareMinStepShare of BASE's
# mean step; q2 when GPU idle per step drops by kQ2MinIdleDrop (and the share).
COMPARE_MIN_CHANGE, COMPARE_MIN_STEP_SHARE, Q2_MIN_IDLE_DROP = 0.5, 0.02, 0.25


def truth_per_step(report, truth):
    """From a run's ground truth over its report's steady steps (from the
    third): (mean GPU idle per step, mean injected idle per step: the gap
    before each step's batch copy, up to its submission, injected_gaps)."""
    steps = report["steps"][2:]
    idle = [(st["end_ns"] - st["start_ns"]) - union_busy(truth, st["start_ns"], st["end_ns"])
            for st in steps]
    gaps = [g for g, _ in injected_gaps(truth)[2:]]
    n = max(1, len(steps))
    return sum(idle) / n, sum(gaps) / max(1, len(gaps))


def case_compare(build, work):
    """q2 from two runs: train_loop with a 4 ms input wait per step (BASE)
    and without (OTHER, the synthetic-input run). Where the ground truths
    show the input wait as idle that the other run does not have (compare's
    own rules on the truth's numbers, with a 10% margin for the analyzer's
    tolerance), `stallscope compare` must name host_wait and call the job
    input-bound, and q2 must say yes; where a loaded machine stretched the
    device work over the wait, the truth has nothing to find and neither is
    required."""
    dirs, runs = {}, {}
    for name, extra in (("base", ["--input-us", "4000"]), ("other", [])):
        sub = os.path.join(work, name)
        os.makedirs(sub)
        runs[name] = run_traced(build, sub, [os.path.join(build, "bin", "train_loop"), "--steps",
                                             str(STEPS)] + extra)
        dirs[name] = os.path.join(sub, "trace")
    exe = os.path.join(build, "bin", "stallscope")
    p = subprocess.run([exe, "compare", dirs["base"], dirs["other"], "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"compare exited {p.returncode}: {p.stderr[-2000:]}")
    c = json.loads(p.stdout)
    check(c["schema"] == "stallscope.compare/1", f"schema {c['schema']}")
    check(c["base"]["steps"] == STEPS and c["other"]["steps"] == STEPS,
          f"steps {c['base']['steps']} / {c['other']['steps']}")
    base_idle, base_inj = truth_per_step(*runs["base"])
    other_idle, other_inj = truth_per_step(*runs["other"])
    base_steps = runs["base"][0]["steps"][2:]
    mean_step = sum(st["end_ns"] - st["start_ns"] for st in base_steps) / max(1, len(base_steps))
    floor = COMPARE_MIN_STEP_SHARE * mean_step
    drop = 0.9 * base_inj - 1.1 * other_inj
    v = c["verdict"]
    hw = c["deltas"]["idle_by_cause"]["host_wait"]
    truth = (f"truth per step: injected idle {base_inj:.0f} -> {other_inj:.0f} ns, GPU idle "
             f"{base_idle:.0f} -> {other_idle:.0f} ns, step {mean_step:.0f} ns")
    if drop >= 1.1 * floor and drop >= 1.1 * COMPARE_MIN_CHANGE * base_inj:
        check("host_wait" in v and "input-bound" in v, f"verdict: {v} ({truth})")
        check(hw["delta"] < 0 and hw["other"] <= 0.5 * hw["base"], f"host_wait delta {hw} ({truth})")
    else:
        print(f"note: the ground truth shows too little input idle to remove ({truth}): "
              f"verdict not required: {v}")
    idle_drop = 0.9 * base_idle - 1.1 * other_idle
    if idle_drop >= 1.1 * floor and idle_drop >= 1.1 * Q2_MIN_IDLE_DROP * base_idle:
        check(c["q2"]["answer"] == "yes", f"q2 {c['q2']} ({truth})")
    else:
        print(f"note: the ground truth's idle does not shrink enough for q2's rule ({truth})")
    t = subprocess.run([exe, "compare", dirs["base"], dirs["other"]], capture_output=True, text=True,
                       timeout=300)
    check(t.returncode == 0 and "Verdict:" in t.stdout, f"text compare: {t.returncode} {t.stdout[-500:]}")


DOC = os.path.join(ROOT, "docs", "analyzer.md")


def documented_queries():
    """The example queries of docs/analyzer.md's "SQLite export" section:
    (name, sql) for every ```sql block, named by its `-- name:` line."""
    with open(DOC) as f:
        text = f.read()
    start = text.index("\n## SQLite export\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    out = []
    for block in re.findall(r"```sql\n(.*?)```", section, re.S):
        m = re.search(r"^-- name: (\w+)", block, re.M)
        check(m, f"a documented query has no '-- name:' line:\n{block}")
        out.append((m.group(1), block))
    return out


def case_sqlite(build, work):
    """--format sqlite on a real trace (read-backs, logging syncs, input
    waits, tiny kernels): every example query of docs/analyzer.md runs on
    the database, and its numbers equal the JSON report's (idle by cause
    per step and in total, busy, launches, syncs, hotspot counts and idle
    caused, q6's short kernels, steps over 30% idle). Also: -o is required
    and never overwrites."""
    import sqlite3
    # Tiny kernels of (nominally) 0 us: shorter than their launch calls.
    report, _ = run_traced(build, work, [os.path.join(build, "bin", "train_loop"), "--steps", str(STEPS),
                                         "--readback", "--sync-log", "--input-us", "2000", "--tiny", "40"],
                           {"SIMGPU_KERNEL_US": "*tiny_elementwise*=0," + KERNELS})
    check_marker_steps(report)
    exe = os.path.join(build, "bin", "stallscope")
    trace = os.path.join(work, "trace")
    db_path = os.path.join(work, "run.db")
    p = subprocess.run([exe, "report", trace, "--format", "sqlite"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 1 and "-o" in p.stderr, f"sqlite without -o: exit {p.returncode} {p.stderr!r}")
    p = subprocess.run([exe, "report", trace, "--format", "sqlite", "-o", db_path], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, f"sqlite export exited {p.returncode}: {p.stderr[-2000:]}")
    check(os.stat(db_path).st_mode & 0o777 == 0o640, f"mode {oct(os.stat(db_path).st_mode)}")
    size = os.path.getsize(db_path)
    p = subprocess.run([exe, "report", trace, "--format", "sqlite", "-o", db_path], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 1 and os.path.getsize(db_path) == size, f"overwrite: exit {p.returncode}")

    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    check(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity check failed")
    meta = dict(db.execute("SELECT key, value FROM meta"))
    check(meta["schema"] == "stallscope.sqlite/1", f"meta {meta}")
    check(meta["step_source"] == report["step_source"], f"step_source {meta['step_source']}")
    steps = {s["index"]: s for s in report["steps"]}
    tot = report["totals"]
    hotspots = {h["fingerprint"]: h for h in report["hotspots"]}
    check(hotspots, "the run has no hotspots")

    def idle_by_cause_per_step(rows):
        got = {}
        for step, cause, ns in rows:
            got[(step, cause)] = ns
        for i, st in steps.items():
            for cause, ns in st["idle_by_cause"].items():
                check(got.get((i, cause), 0) == ns, f"step {i} {cause}: {got.get((i, cause), 0)} != {ns}")
        check(len(got) == sum(1 for st in steps.values() for ns in st["idle_by_cause"].values() if ns),
              "rows for causes without idle")

    def idle_by_cause(rows):
        got = {cause: ns for cause, ns, _ in rows}
        for cause, ns in tot["idle_by_cause"].items():
            check(got.get(cause, 0) == ns, f"{cause}: {got.get(cause, 0)} != {ns}")
        check(abs(sum(pct for _, _, pct in rows) - 100) < 1, "shares do not sum to 100%")

    def busy_per_step(rows):
        check(len(rows) == len(steps), f"{len(rows)} rows for {len(steps)} steps")
        for step, step_ns, busy_ns, _ in rows:
            st = steps[step]
            check(step_ns == st["end_ns"] - st["start_ns"], f"step {step} span")
            check(busy_ns == st["gpu_busy_ns"], f"step {step}: busy {busy_ns} != {st['gpu_busy_ns']}")
        check(sum(r[2] for r in rows) == tot["gpu_busy_ns"], "busy total")

    def launches_and_syncs_per_step(rows):
        got = {step: (launches, syncs) for step, launches, syncs in rows}
        for i, st in steps.items():
            check(got.get(i, (0, 0)) == (st["launches"], st["sync_count"]),
                  f"step {i}: {got.get(i)} != {(st['launches'], st['sync_count'])}")
        check(sum(v[0] for v in got.values()) == tot["launches"], "launches total")
        check(sum(v[1] for v in got.values()) == tot["syncs"], "syncs total")

    def top_sync_sites(rows):
        check(len(rows) == min(10, len(hotspots)), f"{len(rows)} sites for {len(hotspots)} hotspots")
        idle = [r[7] for r in rows]
        check(idle == sorted(idle, reverse=True), "not sorted by idle caused")
        for file, line, function, api, kind, calls, blocked, caused, fp in rows:
            h = hotspots[fp]
            check((h["site"]["file"], h["site"]["line"], h["site"]["function"], h["api"], h["kind"]) ==
                  (file, line, function, api, kind), f"site of {fp}")
            check((calls, blocked, caused) == (h["count"], h["blocked_ns"], h["idle_caused_ns"]),
                  f"{fp}: {(calls, blocked, caused)} != {(h['count'], h['blocked_ns'], h['idle_caused_ns'])}")
        top = sorted(report["hotspots"], key=lambda h: -h["idle_caused_ns"])[:10]
        check({r[8] for r in rows} == {h["fingerprint"] for h in top} or len(hotspots) > 10, "top sites")
        line = marker_line("STALL:readback")
        check(any(os.path.basename(r[0]) == "train_loop.cc" and r[1] == line for r in rows),
              f"the read-back at train_loop.cc:{line} is not among the top sites")

    def short_kernels(rows):
        q6 = next(q for q in report["questions"] if q["id"] == "q6")
        m = re.search(r"(\d+) of (\d+) kernels", q6["evidence"])
        check(m, f"q6 evidence: {q6['evidence']}")
        check(sum(r[1] for r in rows) == int(m.group(1)), f"short kernels {sum(r[1] for r in rows)}: {q6}")
        check(int(m.group(1)) >= STEPS * 20, f"the tiny kernels were not shorter than their launches: {q6}")
        check(any("tiny_elementwise" in (r[0] or "") for r in rows), f"no tiny kernel: {rows[:5]}")

    def idle_steps(rows):
        want = {i for i, st in steps.items() if st["gpu_idle_ns"] * 10 > (st["end_ns"] - st["start_ns"]) * 3}
        check({r[0] for r in rows} == want, f"steps over 30% idle {sorted(r[0] for r in rows)} != {sorted(want)}")
        check(want, "no step over 30% idle")

    def ops_behind_top_hotspot(rows):
        check(rows, "nothing ran on the GPU during the top hotspot's calls")
        for call_id, enter, exit_, _, _, start, end in rows:
            check(start < exit_ and end > enter, f"op [{start}, {end}) outside call {call_id}")

    checkers = {f.__name__: f for f in (idle_by_cause_per_step, idle_by_cause, busy_per_step,
                                         launches_and_syncs_per_step, top_sync_sites, short_kernels,
                                         idle_steps, ops_behind_top_hotspot)}
    queries = documented_queries()
    names = [n for n, _ in queries]
    check(sorted(names) == sorted(checkers), f"documented queries {names}, checked {sorted(checkers)}")
    for name, sql in queries:
        try:
            rows = db.execute(sql).fetchall()
        except sqlite3.Error as e:
            raise Failure(f"query {name}: {e}")
        try:
            checkers[name](rows)
        except Failure as e:
            raise Failure(f"query {name}: {e}")
    check(db.execute("SELECT COUNT(*) FROM api_calls").fetchone()[0] > STEPS * 40, "too few calls")
    db.close()


def prometheus_parser():
    """prometheus_client's text-format parser (Debian python3-prometheus-client,
    installed by scripts/setup). Debian installs it for its own python3; an
    interpreter elsewhere on PATH finds it through Debian's dist-packages,
    appended last so that nothing else is shadowed. None when absent."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
        return text_string_to_metric_families
    except ImportError:
        pass
    debian = "/usr/lib/python3/dist-packages"
    if os.path.isdir(os.path.join(debian, "prometheus_client")) and debian not in sys.path:
        sys.path.append(debian)
        try:
            from prometheus_client.parser import text_string_to_metric_families
            return text_string_to_metric_families
        except ImportError:
            pass
    return None


def case_audit(build, work):
    """stallscope audit on real traces: train_loop --readback (a read-back
    hotspot every step) and a clean run. A budget forbidding the read-back's
    fingerprint fails (exit 3, the violation on stderr, a JUnit failure
    naming the hotspot's site and fingerprint, Prometheus metrics equal to
    the JSON report); the clean run with the read-back run as its
    "no new hotspot" baseline passes, and the read-back run against the
    clean baseline fails. A bad budget exits 1 with file:line."""
    import xml.etree.ElementTree as ET
    exe = os.path.join(build, "bin", "stallscope")
    runs, reports = {}, {}
    for name, extra in (("readback", ["--readback"]), ("clean", [])):
        sub = os.path.join(work, name)
        os.makedirs(sub)
        reports[name], _ = run_traced(build, sub, [os.path.join(build, "bin", "train_loop"),
                                                   "--steps", str(STEPS)] + extra)
        runs[name] = os.path.join(sub, "trace")
    rb = find_hotspot(reports["readback"], marker_line("STALL:readback"))
    check(not reports["clean"]["hotspots"], f"clean run has hotspots: {reports['clean']['hotspots']}")

    def audit(run, budget, *extra):
        return subprocess.run([exe, "audit", run, "--budget", budget] + list(extra),
                              capture_output=True, text=True, timeout=300)

    fail_budget = os.path.join(work, "nightly.toml")
    with open(fail_budget, "w") as f:
        f.write(f'# nightly budget\nmin_steps = {STEPS}\nmax_gpu_idle_share = 0.99\n'
                f'forbidden_fingerprints = ["{rb["fingerprint"]}"]\n'
                f'[max_idle_share_by_cause]\nsync = 1.0\nother = 1.0\n')
    junit, prom = os.path.join(work, "audit.xml"), os.path.join(work, "stallscope.prom")
    p = audit(runs["readback"], fail_budget, "--junit", junit, "--prometheus", prom)
    check(p.returncode == 3, f"audit over budget exited {p.returncode}: {p.stderr[-2000:]}")
    err = [l for l in p.stderr.splitlines() if l.strip()]
    check(len(err) == 1 and rb["fingerprint"] in err[0] and "forbidden_fingerprints" in err[0],
          f"stderr should name the one violation: {p.stderr!r}")
    check("budget exceeded" in p.stdout, f"summary: {p.stdout}")

    suite = ET.parse(junit).getroot()
    check(suite.tag == "testsuite", f"root {suite.tag}")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    check(sorted(cases) == sorted(["min_steps", "max_gpu_idle_share", "max_idle_share_by_cause.sync",
                                   "max_idle_share_by_cause.other", "forbidden_fingerprints"]),
          f"test cases {sorted(cases)}")
    check(suite.get("tests") == "5" and suite.get("failures") == "1", f"suite {suite.attrib}")
    failures = [(n, c.find("failure")) for n, c in cases.items() if c.find("failure") is not None]
    check(len(failures) == 1 and failures[0][0] == "forbidden_fingerprints", f"failures {failures}")
    msg = failures[0][1].get("message")
    line = marker_line("STALL:readback")
    for part in (rb["fingerprint"], f"train_loop.cc:{line}", rb["api"], f"{rb['count']} calls"):
        check(part in msg, f"JUnit failure message lacks {part!r}: {msg}")

    parse = prometheus_parser()
    with open(prom) as f:
        text = f.read()
    check(os.stat(prom).st_mode & 0o777 == 0o640, f"metrics mode {oct(os.stat(prom).st_mode)}")
    # Strict line syntax (the exposition format), whatever parser is present.
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? '
                        r'[-+]?[0-9.eE+-]+$|^[a-zA-Z_:][a-zA-Z0-9_:]* (NaN|[-+]?Inf)$')
    for l in text.splitlines():
        check(l.startswith("# HELP ") or l.startswith("# TYPE ") or sample.match(l), f"bad line {l!r}")
    tot = reports["readback"]["totals"]
    if parse is not None:
        fams = {f.name: f for f in parse(text)}
        val = lambda name, **labels: next(s.value for s in fams[name].samples if s.labels == labels)
        for name in ("stallscope_gpu_idle_ratio", "stallscope_idle_seconds", "stallscope_syncs_per_step",
                     "stallscope_hotspot_idle_caused_seconds", "stallscope_budget_violations"):
            check(name in fams and fams[name].type == "gauge", f"{name} missing or not a gauge")
        check(val("stallscope_budget_violations") == 1, "violations metric")
        for cause, ns in tot["idle_by_cause"].items():
            check(abs(val("stallscope_idle_seconds", cause=cause) - ns / 1e9) < 1e-9, f"idle {cause}")
        span = tot["gpu_busy_ns"] + tot["gpu_idle_ns"]
        check(abs(val("stallscope_gpu_idle_ratio") - tot["gpu_idle_ns"] / span) < 1e-9, "idle ratio")
        check(abs(val("stallscope_syncs_per_step") - tot["syncs"] / STEPS) < 1e-9, "syncs per step")
        hs = [s for s in fams["stallscope_hotspot_idle_caused_seconds"].samples
              if s.labels["fingerprint"] == rb["fingerprint"]]
        check(len(hs) == 1 and abs(hs[0].value - rb["idle_caused_ns"] / 1e9) < 1e-9
              and f"train_loop.cc:{line}" in hs[0].labels["site"], f"hotspot metric {hs}")

    # The metrics file is replaced by the next audit; a file that is not
    # stallscope's is never touched.
    base_budget = os.path.join(work, "no-new.json")
    with open(base_budget, "w") as f:
        json.dump({"no_new_hotspots": True, "max_syncs_per_step": 1.5}, f)
    p = audit(runs["clean"], base_budget, "--baseline", runs["readback"], "--prometheus", prom)
    check(p.returncode == 0, f"clean run against the read-back baseline exited {p.returncode}: "
          f"{p.stdout}{p.stderr[-2000:]}")
    with open(prom) as f:
        check("stallscope_budget_violations 0\n" in f.read(), "metrics file not replaced")
    p = audit(runs["readback"], base_budget, "--baseline", runs["clean"])
    check(p.returncode == 3 and rb["fingerprint"] in p.stderr and "no_new_hotspots" in p.stderr,
          f"read-back run against the clean baseline: {p.returncode} {p.stderr!r}")
    other = os.path.join(work, "node.prom")
    with open(other, "w") as f:
        f.write("node_x 1\n")
    p = audit(runs["clean"], base_budget, "--baseline", runs["readback"], "--prometheus", other)
    check(p.returncode == 1 and open(other).read() == "node_x 1\n", f"foreign metrics file: {p.returncode}")

    # Usage and budget errors: exit 1, one line; unreadable trace: exit 2.
    p = audit(runs["clean"], base_budget)
    check(p.returncode == 1 and "--baseline" in p.stderr, f"no_new_hotspots without a baseline: {p.returncode}")
    bad = os.path.join(work, "bad.toml")
    with open(bad, "w") as f:
        f.write("min_steps = 3\nmax_syncs_per_stp = 1\n")
    p = audit(runs["clean"], bad)
    check(p.returncode == 1 and f"{bad}:2: unknown key 'max_syncs_per_stp'" in p.stderr
          and len(p.stderr.strip().splitlines()) == 1, f"unknown key: {p.returncode} {p.stderr!r}")
    with open(bad, "w") as f:
        f.write("min_steps = 3\nmax_gpu_idle_share = \n")
    p = audit(runs["clean"], bad)
    check(p.returncode == 1 and f"{bad}:2:" in p.stderr, f"syntax error: {p.returncode} {p.stderr!r}")
    p = audit(os.path.join(work, "missing"), base_budget, "--baseline", runs["clean"])
    check(p.returncode == 2, f"missing trace: {p.returncode}")
    if parse is None:
        print("prometheus_client is not installed (scripts/setup installs python3-prometheus-client): "
              "the metrics were checked by line syntax only")
        return SKIP


def case_no_cuda(build, work):
    out = os.path.join(work, "trace")
    p = subprocess.run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out, "--", "/bin/true"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"/bin/true under stallscope exited {p.returncode}")
    check(not glob.glob(os.path.join(out, "*.sstrace")), "a process without CUDA left a trace file")
    p = subprocess.run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out, "--",
                        "sh", "-c", "echo hello; exit 7"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 7, f"exit code {p.returncode}, expected 7")
    check(p.stdout == "hello\n", f"stdout changed: {p.stdout!r}")


def case_return_codes(build, work):
    probe = os.path.join(build, "bin", "hook_probe")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "lib", "simgpu")
    bare = subprocess.run([probe], env=env, capture_output=True, text=True, timeout=60)
    env["LD_PRELOAD"] = os.path.join(build, "lib", "libstallscope.so")
    env["STALLSCOPE_OUT"] = os.path.join(work, "trace")
    hooked = subprocess.run([probe], env=env, capture_output=True, text=True, timeout=60)
    check(bare.returncode == 0 and hooked.returncode == 0, f"probe exited {bare.returncode}/{hooked.returncode}")
    check(bare.stdout == hooked.stdout, f"results differ under stallscope:\n{bare.stdout}\n---\n{hooked.stdout}")
    check(glob.glob(os.path.join(work, "trace", "*.sstrace")), "the hooked probe left no trace")


def case_needed(build, work):
    lib = os.path.join(build, "lib", "libstallscope.so")
    out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    needed = re.findall(r"Shared library: \[([^\]]+)\]", out)
    allowed = r"libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64"
    # A sanitized build (scripts/test-sanitized) links the sanitizers' runtimes.
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        if re.search(r"^STALLSCOPE_SANITIZE:STRING=.+$", f.read(), re.M):
            allowed += r"|libasan|libubsan|libtsan"
    allowed = re.compile(rf"^({allowed})\.so")
    bad = [n for n in needed if not allowed.match(n)]
    check(not bad, f"libstallscope.so needs {bad}")


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
