#!/usr/bin/env python3
"""What-if predictions checked by running the changed program.

Each case runs a program (examples/train_loop, the scenario jobs,
torch_train.py, numba_train.py, cuda_python_train.py, two ranks of
ddp_train) under `stallscope run --sim` as it is
(the baseline), asks `stallscope whatif` for the step time after one change,
then runs the program with that change made for real (its switch: the
read-back or the synchronizing log line left out, half the input wait,
half the host work, the step's kernels launched as one CUDA graph) and
compares:

- the predicted mean step time with the measured one: within 3%, plus what
  the machine did to either run, from the ground truth (SIMGPU_TRACE): the
  time it has the launching thread waiting for a CPU (run-queue delay), per
  step, in the baseline and in the changed run, and the difference between
  the two runs' device busy time per step (the replay keeps the baseline's
  op durations; a loaded machine stretches the simulated device's ops in
  one run and not the other), and, as the programs print what their
  injected waits and host work (train_loop) or their sleeps and spins of
  50 us or more (the scenario jobs) really took, how far the
  changed run's host time is from the baseline's times the transformation's
  factor (a 4 ms sleep overshoots by another amount than a 2 ms one), and
  how much later than the simulator's node cost the changed run's graph
  nodes started (its device thread kept waiting), and for train_loop (one
  stream: an op is ready when submitted and its stream's previous op has
  ended), how much later than ready the changed run's device started any
  op.
  Neither the replay nor the changed program can know the other run's
  machine; on a quiet machine these terms are small and the 3% is what is
  tested;
- the predicted mean GPU idle per step with the measured one: within 5% of
  the measured step time, plus the same allowance;
- the replay's own error: the trace replayed unchanged, within 1% of the
  baseline;
- the same prediction from the middle third of the steps alone (`whatif
  --steps A-B`, the part of the trace they cover read): its baseline the
  trace's steps A to B, and its predicted mean step the changed run's mean
  over those steps within 3%, plus the allowance above as though every step's
  share of it had fallen in those steps (the whole run's, times the steps
  over the third's);
- every step predicted by windows of a sixth of the steps (`whatif --stream
  --window-steps N`, each window from its part of the file): its predicted
  mean step and idle against the changed run's, with the whole prediction's
  allowances.
- for --straggler-to-median (a distributed run), every step predicted by
  windows of a sixth of the steps, rank 0 read by slices: the whole run's
  replay's steps, step by step.

    whatif_test.py --build DIR --case NAME     (whatif_test.py --list)
"""
import collections
import fnmatch
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import Failure, Skip, check  # noqa: E402
from ground_truth import preempted_before, union_in  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios"))
import scenarios  # noqa: E402  (the scenario jobs' kernel durations)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_LOOP_SRC = os.path.join(ROOT, "examples", "train_loop.cc")
STEPS = 60
KERNELS = ("*gemm_fwd*=900,*gemm_bwd*=1400,*relu*=40,*sgd_update*=250,*loss_reduce*=30,*load_batch*=60,"
           "*tiny_elementwise*=2,*=20")


def marker_line(marker):
    return checks.marker_line(TRAIN_LOOP_SRC, marker)


def stallscope(build, args, timeout=300):
    p = subprocess.run([os.path.join(build, "bin", "stallscope")] + args, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise Failure(f"stallscope {' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


class TrainLoop:
    """examples/train_loop (C++, driver API), STEPS marked steps."""
    source = TRAIN_LOOP_SRC
    # One stream, no events, host functions or collectives: an op is ready
    # when it is submitted and its stream's previous op has ended.
    ready_by_stream_order = True

    def __init__(self, **env):
        self.env = dict({"SIMGPU_KERNEL_US": KERNELS}, **env)

    def command(self, build, args):
        exe = os.path.join(build, "bin", "train_loop")
        if not os.path.exists(exe):
            raise Skip("bin/train_loop not built")
        return [exe, "--steps", str(STEPS)] + args


class TorchTrain:
    """examples/torch_train.py on PyTorch (the framework environment),
    STEPS steps marked with NVTX ranges; its GEMMs at 2 TFLOP/s (as
    tests/frameworks), so a step's device work outlasts the host's."""
    source = os.path.join(ROOT, "examples", "torch_train.py")
    env = {"SIMGPU_GEMM_TFLOPS": "2", "SIMGPU_KERNEL_US": "*sin_kernel*=3,*=20"}

    logs_waits = True

    def command(self, build, args, waits_log=None):
        venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
        py = os.path.join(venv, "bin", "python")
        if not os.access(py, os.X_OK):
            raise Skip(f"no framework environment at {venv} (scripts/setup-frameworks makes it)")
        extra = ["--log-waits", waits_log] if waits_log else []
        return [py, self.source, "--steps", str(STEPS), "--markers", "nvtx"] + extra + args


class SmallPython:
    """examples/numba_train.py or cuda_python_train.py (numba-cuda and
    cuda-python in the framework environment), STEPS steps marked with
    stallscope.step(); kernels long enough that the device sets the pace
    (as tests/frameworks). Each input wait's real length is logged
    (--log-waits), for the allowance."""
    logs_waits = True

    def __init__(self, name):
        self.source = os.path.join(ROOT, "examples", name)
        self.env = {"SIMGPU_KERNEL_US": "*forward*=1500,*loss_reduce*=200,*update*=300,*=20"}

    def command(self, build, args, waits_log=None):
        venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
        py = os.path.join(venv, "bin", "python")
        if not os.access(py, os.X_OK):
            raise Skip(f"no framework environment at {venv} (scripts/setup-frameworks makes it)")
        extra = ["--log-waits", waits_log] if waits_log else []
        return ["env", "PYTHONPATH=" + os.path.join(ROOT, "python"), py, self.source, "--steps", str(STEPS),
                "--markers"] + extra + args


class CudaTrainLoop(TrainLoop):
    """examples/cuda_train_loop.cu (CUDA C++, runtime API, built with nvcc),
    STEPS marked steps, the kernel durations of TrainLoop."""
    ready_by_stream_order = False  # two streams and event waits (--two-streams)
    source = os.path.join(ROOT, "examples", "cuda_train_loop.cu")

    def command(self, build, args):
        exe = os.path.join(build, "bin", "cuda_train_loop")
        if not os.path.exists(exe):
            raise Skip("bin/cuda_train_loop not built (no nvcc)")
        return [exe, "--steps", str(STEPS)] + args


class Scenario:
    """One of tests/scenarios' jobs (scenario.cc), STEPS marked steps, with
    the scenarios' kernel durations; --no-sync, --wait-scale and
    --busy-scale make the changes real."""
    source = os.path.join(ROOT, "tests", "scenarios", "scenario.cc")

    def __init__(self, name, kernels=scenarios.KERNELS):
        self.name = name
        self.env = dict({"SIMGPU_KERNEL_US": kernels}, **scenarios.SCENARIOS[name].get("env", {}))
        # host_func: the kernels before and after its host function.
        self.host_func_pair = ("batch_load", "consume_a") if name == "host_func" else None
        # cross_stream: the producer and the consumer that waits for it.
        self.event_pair = ("producer_long", "consume_a") if name == "cross_stream" else None

    def command(self, build, args):
        exe = os.path.join(build, "bin", "scenario")
        if not os.path.exists(exe):
            raise Skip("bin/scenario not built")
        return [exe, "--scenario", self.name, "--steps", str(STEPS)] + args


def run(build, work, name, program, args, scale_kernels=None):
    """Runs `program` with `args` under stallscope; (trace folder, report,
    the truth's preemption of the launching thread per step, the truth's
    device busy time per step, summed over the devices (with the kernels
    that `scale_kernels`, {glob: factor}, matches at their duration times
    the factor: what the change asks of them), the (sleep, spin, host
    function) ns the program says its scaled host time took, or None)."""
    out = os.path.join(work, name)
    env = dict(os.environ, SIMGPU_TRACE=os.path.join(work, f"truth-{name}-%p.jsonl"), **program.env)
    waits_log = os.path.join(work, f"waits-{name}.jsonl") if getattr(program, "logs_waits", False) else None
    cmd = [os.path.join(build, "bin", "stallscope"), "run", "--sim", "-q", "--out", out, "--"] + \
        (program.command(build, args, waits_log) if waits_log else program.command(build, args))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    report = json.loads(stallscope(build, ["report", out, "--format", "json"]))
    check(len(report["steps"]) == STEPS, f"{name}: {len(report['steps'])} steps, expected {STEPS}")
    truths = glob.glob(os.path.join(work, f"truth-{name}-*.jsonl"))
    check(len(truths) == 1, f"{name}: expected one ground-truth file, found {truths}")
    with open(truths[0]) as f:
        ops = [json.loads(line) for line in f if line.strip()]
    preempted = sum(preempted_before(ops).values())
    def factor(op):
        for glob, x in (scale_kernels or {}).items():
            if op["kind"] == "kernel" and fnmatch.fnmatchcase(op.get("name", ""), glob):
                return x
        return 1
    # Every device's busy time (cross_stream's producer runs on a second
    # device, on the step's critical path), in [lo, hi).
    def busy_in(lo, hi):
        return sum(union_in([(op["start_ns"], op["start_ns"] + factor(op) * (op["end_ns"] - op["start_ns"]))
                             for op in ops if op.get("device", 0) == dev], lo, hi)
                   for dev in {op.get("device", 0) for op in ops})
    busy = busy_in(0, 1 << 62)
    printed = re.search(r"^scaled_sleep_ns (\d+) scaled_spin_ns (\d+)$", p.stdout, re.M)
    host_func = re.search(r"^host_func_ns (\d+)$", p.stdout, re.M)
    host = (int(printed[1]), int(printed[2]), int(host_func[1]) if host_func else 0) if printed else None
    if waits_log and os.path.exists(waits_log):  # what the input waits really took
        with open(waits_log) as f:
            waits = [json.loads(line) for line in f if line.strip()]
        host = (sum(w["end_ns"] - w["start_ns"] for w in waits), 0, 0)
    # The simulator's hand-off around a host function (the device thread
    # handing it to the host-function thread, that thread waiting for a CPU,
    # the device noticing its end): the stream's delay between the kernels
    # around it, less what the function itself took (it prints that).
    handoff = 0
    pair = getattr(program, "host_func_pair", None)
    if pair and host and host[2]:
        before = sorted((op for op in ops if op.get("name") == pair[0]), key=lambda o: o["start_ns"])
        after = sorted((op for op in ops if op.get("name") == pair[1]), key=lambda o: o["start_ns"])
        handoff = sum(a["start_ns"] - b["end_ns"] for b, a in zip(before, after)) - host[2]
    late = 0
    if getattr(program, "event_pair", None):
        late = device_lateness(ops, program.event_pair)
        # Two simulated devices, each a thread that must run to end a kernel
        # on time, beside the job on two cores: when the truth has the
        # producer's kernels running far past their set time, the machine,
        # not the change, sets the step, and the case cannot tell.
        name = program.event_pair[0]
        set_us = float(re.search(name + r"=(\d+)", program.env["SIMGPU_KERNEL_US"])[1])
        runs = sorted(op["end_ns"] - op["start_ns"] for op in ops if op.get("name") == name)
        stretch = runs[len(runs) // 2] / (set_us * 1000) if runs else 1
        if stretch > 1.25:
            raise Skip(f"{name}: the simulated device ran it {stretch:.2f} times its set {set_us:.0f} us (median, "
                       f"ground truth): this machine keeps the second device's thread from its CPU")
    # Programs whose ops are ready by stream order alone: every ready op the
    # simulated device started late (its thread kept from a CPU), graph
    # nodes beyond the node cost included; else the graph nodes alone.
    ready_late = ready_lateness(ops, program.env) if getattr(program, "ready_by_stream_order", False) else 0
    # The launching thread's CPU time a step, where the program says it
    # (torch_train's summary line).
    cpu = None
    summary = re.search(r'^\{.*"mean_step_cpu_s": ([0-9.e+-]+).*\}$', p.stdout, re.M)
    if summary:
        cpu = float(summary[1]) * 1e9
    return Run(out, report, preempted / STEPS, busy / STEPS, host,
               max(late_nodes(ops, program.env), ready_late) / STEPS, handoff / STEPS, late / STEPS, cpu, busy_in)


class Run:
    """`busy_in(lo, hi)`: the truth's device busy time in [lo, hi)."""
    def __init__(self, out, report, preempted, busy, host, late_nodes, handoff=0, late=0, cpu=None, busy_in=None):
        self.out, self.report, self.preempted, self.busy = out, report, preempted, busy
        self.host, self.late_nodes, self.handoff, self.late = host, late_nodes, handoff, late
        self.cpu, self.busy_in = cpu, busy_in


def device_lateness(ops, event_pair):
    """How much later than they could have the simulated devices started the
    ops, in all: each op after the later of its submission and the previous
    op of its stream, and the consumer of `event_pair` after its step's
    producer too (the event it waits for). A loaded machine keeps a device
    thread from starting what is ready; the replay keeps the baseline's
    delays, and the changed run has its own."""
    producers = sorted((op["end_ns"] for op in ops if op.get("name") == event_pair[0]))
    consumers = iter(producers)
    late, prev = 0, {}
    for op in sorted(ops, key=lambda o: o["start_ns"]):
        key = (op.get("device", 0), op["stream"])
        bound = max(op["queued_ns"], prev.get(key, 0))
        if op.get("name") == event_pair[1]:
            bound = max(bound, next(consumers, 0))
        late += max(0, op["start_ns"] - bound)
        prev[key] = op["end_ns"]
    return late


def ready_lateness(ops, env):
    """How much later the simulated devices started ops than they were
    ready, in all: after the later of the op's submission and the end of its
    stream's previous op, plus SIMGPU_GRAPH_NODE_US between two nodes of one
    graph."""
    node_ns = float(env.get("SIMGPU_GRAPH_NODE_US", "0.5")) * 1000
    late, prev = 0, {}
    for op in sorted(ops, key=lambda o: o["start_ns"]):
        key = (op.get("device", 0), op["stream"])
        p = prev.get(key)
        bound = op["queued_ns"]
        if p is not None:
            bound = max(bound, p["end_ns"] + (node_ns if p["correlation"] == op["correlation"] else 0))
        late += max(0, op["start_ns"] - bound)
        prev[key] = op
    return late


def late_nodes(ops, env):
    """How much later than SIMGPU_GRAPH_NODE_US after the previous node the
    graph nodes of the ground truth started, in all (the simulated device
    thread itself kept waiting by a busy machine): what a prediction with
    that node cost cannot know."""
    node_ns = float(env.get("SIMGPU_GRAPH_NODE_US", "0.5")) * 1000
    late, prev = 0, {}
    for op in sorted(ops, key=lambda o: o["start_ns"]):
        key = (op.get("device", 0), op["stream"])
        p = prev.get(key)
        if p is not None and p["correlation"] == op["correlation"]:
            late += max(0, op["start_ns"] - p["end_ns"] - node_ns)
        prev[key] = op
    return late


def factor_of(transform, flag):
    """The factor `transform` gives `flag`, 1 when it does not."""
    for f, value in zip(transform, transform[1:]):
        if f == flag:
            return float(value)
    return 1.0


def mean(values, first=0):
    return sum(values[first:]) / len(values[first:])


def mean_step(report, first=0):
    return mean([s["end_ns"] - s["start_ns"] for s in report["steps"]], first)


def mean_idle(report, first=0):
    return mean([s["gpu_idle_ns"] for s in report["steps"]], first)


# compare() measures from the second step: the first pays first-call costs
# (the driver's lazy set-up, the recorder's first unwind, the simulator's
# host-function thread starting) that a loaded machine can stretch in one
# run and not the other, and the prediction keeps the baseline's (one
# quiet-suite baseline of scenario_host_func: 42.6 ms in its first step, its
# host 38 ms in cuLaunchHostFunc's first call, not waiting for a CPU; 2.0 ms
# a step after, as in the changed run).
STEADY = 1


def compare(build, work, base_args, changed_args, transform, program=TrainLoop(), changed_program=None,
            scale_kernels=None):
    """`changed_program`: the changed run's program, when the change is in
    its environment (a kernel's time); `scale_kernels`: {glob: factor} of
    that change, for the device busy time the changed run should have."""
    b = run(build, work, "base", program, base_args, scale_kernels)
    base, base_report, base_pre, base_busy, base_host = b.out, b.report, b.preempted, b.busy, b.host
    w = json.loads(stallscope(build, ["whatif", base, "--format", "json"] + transform))
    for key in ("baseline", "predicted", "transformations", "assumptions"):
        check(key in w, f"whatif JSON lacks {key}")
    check(abs(w["baseline"]["mean_step_ns"] - mean_step(base_report)) <= 1,
          f"baseline.mean_step_ns {w['baseline']['mean_step_ns']}, the report's {mean_step(base_report):.0f}")
    check(abs(w["replay_error"]) <= 0.01, f"the replay's own error {w['replay_error']:.4f} (over 1%)")
    if transform[:1] == ["--remove-sync"]:
        # The report's own prediction for that hotspot is the same replay.
        fingerprint = re.search(r"\((\w+)\)$", w["transformations"][0]["target"])[1]
        h = [h for h in base_report["hotspots"] if h["fingerprint"] == fingerprint]
        check(len(h) == 1, f"no hotspot {fingerprint} in the report")
        saving = w["baseline"]["mean_step_ns"] - w["predicted"]["mean_step_ns"]
        check(h[0].get("predicted_saving_ns") == saving,
              f"the report predicts {h[0].get('predicted_saving_ns')} ns saved per step, whatif {saving}")
    c = run(build, work, "changed", changed_program or program, changed_args)
    changed_report, changed_pre, changed_busy, changed_host = c.report, c.preempted, c.busy, c.host
    measured, predicted = mean_step(changed_report, STEADY), mean(w["predicted"]["step_ns"], STEADY)
    host_off = 0
    if base_host or changed_host:  # a change to none or from none prints one side only
        base_host, changed_host = base_host or (0, 0, 0), changed_host or (0, 0, 0)
        flags = ("--scale-host-wait", "--scale-host-busy", "--scale-host-func")
        host_off = sum(abs(changed_host[k] - factor_of(transform, f) * base_host[k])
                       for k, f in enumerate(flags)) / STEPS
    # The hand-off around host functions: the prediction scales the
    # baseline's with the function (the trace cannot tell them apart).
    handoff_off = abs(c.handoff - factor_of(transform, "--scale-host-func") * b.handoff)
    # The launching thread's on-CPU work a step, where both runs say it and
    # the change is to the input waits alone: the prediction keeps the
    # baseline's host work, and a loaded machine stretches it without
    # preempting the thread (one quiet-suite run had torch_train's Python
    # and dispatch at 4.6 ms a step against the baseline's 4.05 ms; the
    # waits were exactly half). Not for a removed synchronization: without
    # it the host runs ahead of the device, into launches that wait on a
    # full queue, and its CPU time is the change's (2.2 -> 4.2 ms a step
    # for torch_train's .item()), while the device sets the step.
    cpu_off = 0
    flags = {f for f in transform if f.startswith("--")}
    if b.cpu is not None and c.cpu is not None and flags == {"--scale-host-wait"}:
        cpu_off = abs(c.cpu - b.cpu)
    allowance = (base_pre + changed_pre + abs(changed_busy - base_busy) + host_off + c.late_nodes
                 + handoff_off + abs(c.late - b.late) + cpu_off) / measured
    error = (predicted - measured) / measured
    idle_error = (mean(w["predicted"]["step_idle_ns"], STEADY) - mean_idle(changed_report, STEADY)) / measured
    print(f"{' '.join(transform)}: baseline {mean_step(base_report, STEADY) / 1e3:.1f} us, predicted {predicted / 1e3:.1f} us, "
          f"measured {measured / 1e3:.1f} us: error {100 * error:+.2f}% (allowed 3% + {100 * allowance:.2f}% "
          f"for the machine); idle per step error {100 * idle_error:+.2f}% of the step; replay error "
          f"{100 * w['replay_error']:+.2f}%" + (f"; launching thread's CPU a step {b.cpu / 1e3:.0f} -> "
                                                f"{c.cpu / 1e3:.0f} us" if cpu_off else ""))
    check(abs(error) <= 0.03 + allowance,
          f"predicted {predicted:.0f} ns, measured {measured:.0f} ns: error {100 * error:+.2f}% "
          f"(allowed 3% + {100 * allowance:.2f}% for the machine); {w['headline']}")
    check(abs(idle_error) <= 0.05 + allowance,
          f"predicted idle per step off by {100 * idle_error:+.2f}% of the step (allowed 5% + "
          f"{100 * allowance:.2f}%)")
    if "--straggler-to-median" not in transform:
        first, last = STEPS // 3, 2 * STEPS // 3 - 1
        part = json.loads(stallscope(build, ["whatif", base, "--format", "json", "--steps", f"{first}-{last}"]
                                     + transform))
        check(part.get("steps", {}).get("first") == first and part["steps"].get("last") == last
              and part["steps"].get("of") == STEPS, f"whatif --steps: steps {part.get('steps')}")
        check(part["steps"]["calls_and_ops_read"] <= part["steps"]["calls_and_ops"],
              f"whatif --steps: read more than the trace holds: {part['steps']}")
        check(part["baseline"]["step_ns"] == w["baseline"]["step_ns"][first:last + 1],
              "whatif --steps: the baseline's steps are not the trace's")
        steps = changed_report["steps"][first:last + 1]
        measured_part = sum(s["end_ns"] - s["start_ns"] for s in steps) / len(steps)
        error_part = (part["predicted"]["mean_step_ns"] - measured_part) / measured_part

        def part_busy(r):  # the truth's device busy time a step over these steps' device span
            s = r.report["steps"]
            return r.busy_in(s[first]["start_ns"], s[last]["end_ns"]) / len(steps)
        # The machine's share as for the whole run, all of it possibly in
        # these steps; and the device busy time these steps took in each
        # run: a loaded machine stretches the simulated kernels of some
        # steps of one run and others of the other, a difference the whole
        # run's means can cancel (one loaded run: these steps' kernels came
        # to 9.1 ms a step in the baseline and 11.2 in the changed run, where
        # the kernels are set to 1.9 ms a step).
        busy_part = abs(part_busy(c) - part_busy(b))
        allowance_part = allowance * STEPS / len(steps) + busy_part / measured_part
        print(f"--steps {first}-{last} ({part['steps']['calls_and_ops_read']} of "
              f"{part['steps']['calls_and_ops']} calls and ops read): predicted "
              f"{part['predicted']['mean_step_ns'] / 1e3:.1f} us (the whole trace's replay "
              f"{sum(w['predicted']['step_ns'][first:last + 1]) / len(steps) / 1e3:.1f} us), measured "
              f"{measured_part / 1e3:.1f} us: error {100 * error_part:+.2f}% (allowed 3% + "
              f"{100 * allowance_part:.2f}%, of which these steps' device busy time {100 * busy_part / measured_part:.2f}%)")
        check(abs(error_part) <= 0.03 + allowance_part,
              f"whatif --steps {first}-{last}: predicted {part['predicted']['mean_step_ns']:.0f} ns, measured "
              f"{measured_part:.0f} ns: error {100 * error_part:+.2f}% (allowed 3% + "
              f"{100 * allowance_part:.2f}%)")
    # Every step again, by windows of a sixth of the steps, each from its
    # part of the file (as a trace past --stream-above is); a distributed
    # run's analyzed rank too.
    per = STEPS // 6
    win = json.loads(stallscope(build, ["whatif", base, "--format", "json", "--stream", "--window-steps",
                                        str(per)] + transform))
    check(win.get("windows", {}).get("count") == 6 and len(win["predicted"]["step_ns"]) == STEPS,
          f"whatif by windows: {win.get('windows')}, {len(win['predicted']['step_ns'])} steps")
    check(win["baseline"]["step_ns"] == w["baseline"]["step_ns"],
          "whatif by windows: the baseline's steps are not the trace's")
    predicted_win = mean(win["predicted"]["step_ns"], STEADY)
    error_win = (predicted_win - measured) / measured
    idle_error_win = (mean(win["predicted"]["step_idle_ns"], STEADY) - mean_idle(changed_report, STEADY)) / measured
    print(f"by {per}-step windows ({win['windows']['largest_calls_and_ops_read']} calls and ops read at most "
          f"at once, of {win['steps']['calls_and_ops']}): predicted {predicted_win / 1e3:.1f} "
          f"us (whole {predicted / 1e3:.1f} us): error {100 * error_win:+.2f}%; idle per step error "
          f"{100 * idle_error_win:+.2f}% of the step")
    check(abs(error_win) <= 0.03 + allowance,
          f"whatif by windows: predicted {predicted_win:.0f} ns, measured {measured:.0f} ns: "
          f"error {100 * error_win:+.2f}% (allowed 3% + {100 * allowance:.2f}%)")
    check(abs(idle_error_win) <= 0.05 + allowance,
          f"whatif by windows: predicted idle per step off by {100 * idle_error_win:+.2f}% of the step "
          f"(allowed 5% + {100 * allowance:.2f}%)")
    return w


def case_remove_readback(build, work):
    compare(build, work, ["--readback"], [],
            ["--remove-sync", f"train_loop.cc:{marker_line('STALL:readback')}"])


def case_remove_sync_log(build, work):
    compare(build, work, ["--sync-log"], [],
            ["--remove-sync", f"examples/train_loop.cc:{marker_line('STALL:sync-log')}"])


# The host-bound loops: a step's device work is about 2.7 ms (KERNELS), so
# 6 ms of input wait or host work a step binds the loop, and half of it
# (3 ms) still does, by less.
def case_scale_input(build, work):
    compare(build, work, ["--input-us", "6000"], ["--input-us", "3000"], ["--scale-host-wait", "0.5"])


def case_scale_host_work(build, work):
    compare(build, work, ["--cpu-us", "6000"], ["--cpu-us", "3000"], ["--scale-host-busy", "0.5"])


def case_no_input_wait(build, work):
    """Synthetic input: the loop becomes device-bound."""
    compare(build, work, ["--input-us", "6000"], [], ["--scale-host-wait", "0"])


def case_torch_remove_item(build, work):
    """The real PyTorch loop: `loss.item()` every step, removed."""
    line = checks.marker_line(TorchTrain.source, "# STALL:item")
    compare(build, work, ["--stall", "item"], ["--stall", "clean"], ["--remove-sync", f"torch_train.py:{line}"],
            TorchTrain())


def case_cuda_remove_readback(build, work):
    """The runtime-API loop with its loss reduced on a second stream that
    waits for the training stream's event: the read-back removed."""
    program = CudaTrainLoop()
    line = checks.marker_line(program.source, "// STALL:readback")
    compare(build, work, ["--two-streams", "--readback"], ["--two-streams"],
            ["--remove-sync", f"cuda_train_loop.cu:{line}"], program)


def case_cuda_input_half(build, work):
    program = CudaTrainLoop()
    compare(build, work, ["--two-streams", "--input-us", "6000"], ["--two-streams", "--input-us", "3000"],
            ["--scale-host-wait", "0.5"], program)


def case_torch_input_half(build, work):
    """The real PyTorch loop waiting 24 ms for each batch (a step's device
    work is about 13 ms), then 12 ms (twice the workers)."""
    compare(build, work, ["--input-ms", "24"], ["--input-ms", "12"], ["--scale-host-wait", "0.5"], TorchTrain())


def case_graph(build, work):
    """Launch-bound: 42 short kernels a step, each after 10 us of dispatch
    work; predicted with --launch-cost at the simulator's node cost over
    every step (the program captures every step's kernels, launch-bound or
    not: a loaded machine can stretch a step's short kernels past its
    launches), then run with the step's kernels captured once and launched
    as a CUDA graph (train_loop --graph)."""
    program = TrainLoop(SIMGPU_GRAPH_NODE_US="1", SIMGPU_QUEUE_DEPTH="128")
    w = compare(build, work, ["--tiny", "40", "--dispatch-us", "10"], ["--tiny", "40", "--dispatch-us", "10", "--graph"],
                ["--launch-cost", "1000", "--launch-steps", f"0-{STEPS - 1}"], program)
    # Every launch of every step is in a stretch: each stretch keeps its
    # first launch and folds the rest (a host wait of 50 us or more that the
    # machine put between two launches splits a step's stretch in two).
    x = [t for t in w["transformations"] if t["kind"] == "launch_cost"]
    check(len(x) == 1, f"transformations {w['transformations']}")
    stretches = int(re.search(r"(\d+) stretches", x[0]["target"])[1])
    check(stretches >= STEPS and x[0]["changed"] + stretches == STEPS * 42,
          f"expected the {STEPS * 42} launches of {STEPS} steps in {stretches} stretches: {x}")


DDP_WORLD, DDP_SLOW = 2, 1


class DdpTrain:
    """DDP_WORLD ranks of examples/ddp_train (C++, driver API and NCCL),
    rank DDP_SLOW waiting 3 ms more for its input before every step."""
    steps = 30
    env = {"SIMGPU_KERNEL_US": "*gemm_fwd*=400,*gemm_bwd*=300,*=20"}
    slow_args = ["--slow-rank", str(DDP_SLOW), "--slow-us", "3000"]
    ready_by_stream_order = True  # one stream: an op is ready when submitted and its predecessor has ended

    def command(self, build, slow_args):
        exe = os.path.join(build, "bin", "ddp_train")
        if not os.path.exists(exe):
            raise Skip("bin/ddp_train not built")
        return [os.path.join(ROOT, "scripts", "launch-ranks"), "-n", str(DDP_WORLD), "--", exe, "--steps",
                str(self.steps), "--buckets", "2", "--grad-bytes", str(2 << 20)] + slow_args


class TorchDdp:
    """examples/torch_ddp.py: PyTorch DistributedDataParallel under torchrun
    on the simulated NCCL (the framework environment), DDP_WORLD ranks, rank
    DDP_SLOW waiting 10 ms more for each batch; GEMMs at 0.5 TFLOP/s, so
    that a step's device work (about 6 ms) outlasts its host work, which
    two ranks' Python on two cores stretch as the machine lets them."""
    steps = 16
    env = {"SIMGPU_GEMM_TFLOPS": "0.5", "SIMGPU_KERNEL_US": "*sin_kernel*=3,*=20"}
    slow_args = ["--slow-rank", str(DDP_SLOW), "--slow-ms", "10"]

    def command(self, build, slow_args):
        venv = os.environ.get("STALLSCOPE_FRAMEWORKS_VENV") or os.path.join(ROOT, "build", "frameworks-venv")
        py = os.path.join(venv, "bin", "python")
        if not os.access(py, os.X_OK):
            raise Skip(f"no framework environment at {venv} (scripts/setup-frameworks makes it)")
        return [py, "-m", "torch.distributed.run", "--nproc-per-node", str(DDP_WORLD),
                os.path.join(ROOT, "examples", "torch_ddp.py"), "--steps", str(self.steps)] + slow_args


def run_ddp(build, work, name, program, slow_args):
    """DDP_WORLD ranks of `program` under stallscope; (folder, the report
    over it (rank 0's steps), every rank's ground-truth ops by rank)."""
    out = os.path.join(work, name)
    env = dict(os.environ, SIMGPU_TRACE=os.path.join(work, f"truth-{name}-%p.jsonl"), **program.env)
    cmd = [os.path.join(build, "bin", "stallscope"), "run", "--sim", "-q", "--out", out, "--"] + \
        program.command(build, slow_args)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    report = json.loads(stallscope(build, ["report", out, "--format", "json", "--no-predict"]))
    check(len(report["steps"]) == program.steps, f"{name}: {len(report['steps'])} steps, expected {program.steps}")
    by_rank = {}
    for path in glob.glob(os.path.join(work, f"truth-{name}-*.jsonl")):
        with open(path) as f:
            ops = [json.loads(line) for line in f if line.strip()]
        ranks = {op["rank"] for op in ops if op["kind"] == "nccl"}
        if len(ranks) == 1:
            by_rank[ranks.pop()] = ops
    check(sorted(by_rank) == list(range(DDP_WORLD)), f"{name}: ground truth for ranks {sorted(by_rank)}")
    return out, report, by_rank


def truth_arrivals(by_rank):
    """{(comm, seq): {rank: arrival}} from the ranks' ground truth (an NCCL
    op's start is its rank's arrival)."""
    arrivals = collections.defaultdict(dict)
    for r, ops in by_rank.items():
        for op in ops:
            if op["kind"] == "nccl":
                arrivals[(op["comm"], op["seq"])].setdefault(r, op["start_ns"])
    return arrivals


def rank0_waits(by_rank, report, slow=None):
    """Rank 0's wait for the last rank in all, inside its steps (`report`'s:
    the collectives rank 0 submitted between its first step's host start and
    its last step's end; start-up's, NCCL's rendezvous and the first
    broadcasts, are in none), from the ground truth (an NCCL op's start is
    its rank's arrival): at every collective instance, the latest arrival
    less rank 0's; with `slow`, as if that rank had arrived no later than
    the instance's median (what --straggler-to-median assumes of the
    others)."""
    lo, hi = report["steps"][0]["host_start_ns"], report["steps"][-1]["end_ns"]
    inside = {(op["comm"], op["seq"]) for op in by_rank[0] if op["kind"] == "nccl" and lo <= op["queued_ns"] < hi}
    total = 0
    for key, at in truth_arrivals(by_rank).items():
        if key not in inside or 0 not in at or len(at) < 2:
            continue
        times = dict(at)
        if slow is not None and slow in times:
            median = sorted(times.values())[(len(times) - 1) // 2]
            times[slow] = min(times[slow], median)
        total += max(0, max(times.values()) - at[0])
    return total


def straggler(build, work, program):
    """A data-parallel job (DDP_WORLD ranks of `program`) whose rank DDP_SLOW
    waits longer for input before every step: --straggler-to-median predicts
    rank 0's step time with that rank as early as the median, then the job
    runs without the slow rank. Beside the machine's terms of every case (rank
    0's preemption, the change in its device busy time), the allowance has
    how far rank 0's wait for the last rank in the changed run is from the
    wait the prediction keeps (the other ranks' arrivals as in the
    baseline, from the baseline's ground truth): on two cores three ranks
    arrive as the machine lets them, which no trace of another run can
    tell; and how far rank 0's device lateness (ready ops its simulated
    device started late, its thread kept from a CPU: ready_lateness) in the
    changed run is from the baseline's, which the replay keeps (for a
    program whose ops are ready by stream order alone: ddp_train's one
    stream; PyTorch's NCCL stream waits for events of the compute stream,
    which that measure cannot tell from lateness)."""
    steps = program.steps
    base, base_report, base_truth = run_ddp(build, work, "base", program, program.slow_args)
    # The rank whatif takes: the report's first straggler, else the rank the
    # ground truth has last most often (on a loaded machine, not always the
    # one the job slowed).
    last = collections.Counter()
    for at in truth_arrivals(base_truth).values():
        if len(at) >= 2:
            last[max(at, key=at.get)] += 1
    named = [st["rank"] for st in base_report["stragglers"]]
    want = named[0] if named else max(sorted(last), key=lambda r: last[r])
    if want == 0:
        raise Skip(f"rank 0, the analyzed one, is the slowest here (stragglers {named}, last arrivals "
                   f"{dict(last)}): --straggler-to-median predicts for the others only")
    w = json.loads(stallscope(build, ["whatif", base, "--format", "json", "--straggler-to-median"]))
    check(abs(w["replay_error"]) <= 0.01, f"the replay's own error {w['replay_error']:.4f} (over 1%)")
    x = [t for t in w["transformations"] if t["kind"] == "straggler_to_median"]
    check(len(x) == 1 and x[0]["target"].startswith(f"rank {want} ") and x[0]["changed"] > 0,
          f"transformations {w['transformations']}, expected rank {want} (stragglers {named}, last "
          f"arrivals {dict(last)})")
    _, changed_report, changed_truth = run_ddp(build, work, "changed", program, [])
    measured, predicted = mean_step(changed_report), w["predicted"]["mean_step_ns"]
    # Inside rank 0's steps only: start-up (NCCL's rendezvous, three ranks
    # starting on two cores) is in no step.
    def in_steps(report, truth):
        lo, hi = report["steps"][0]["host_start_ns"], report["steps"][-1]["end_ns"]
        ops = truth[0]
        pre = preempted_before(ops)
        return (sum(pre[id(op)] for op in ops if lo <= op["queued_ns"] < hi),
                union_in([(op["start_ns"], op["end_ns"]) for op in ops if op["kind"] != "nccl"], lo, hi),
                ready_lateness([op for op in ops if lo <= op["queued_ns"] < hi], program.env)
                if getattr(program, "ready_by_stream_order", False) else 0)
    (pre_b, busy_b, late_b), (pre_c, busy_c, late_c) = (in_steps(base_report, base_truth),
                                                        in_steps(changed_report, changed_truth))
    pre = (pre_b + pre_c) / steps
    busy = [busy_b / steps, busy_c / steps]
    late = abs(late_c - late_b) / steps
    waits = abs(rank0_waits(changed_truth, changed_report) - rank0_waits(base_truth, base_report, DDP_SLOW)) / steps
    allowance = (pre + abs(busy[1] - busy[0]) + waits + late) / measured
    error = (predicted - measured) / measured
    print(f"--straggler-to-median: baseline {mean_step(base_report) / 1e3:.1f} us, predicted {predicted / 1e3:.1f} us, "
          f"measured {measured / 1e3:.1f} us: error {100 * error:+.2f}% (allowed 3% + {100 * allowance:.2f}% for the "
          f"machine: preemption {100 * pre / measured:.2f}%, device busy {100 * abs(busy[1] - busy[0]) / measured:.2f}%, "
          f"the other ranks' arrivals {100 * waits / measured:.2f}%, device lateness {100 * late / measured:.2f}%); "
          f"replay error "
          f"{100 * w['replay_error']:+.2f}%")
    check(abs(error) <= 0.03 + allowance,
          f"predicted {predicted:.0f} ns, measured {measured:.0f} ns: error {100 * error:+.2f}% "
          f"(allowed 3% + {100 * allowance:.2f}% for the machine); {w['headline']}")
    # Every step again, by windows of a sixth of the steps, rank 0 read by
    # slices, each window's part with its NCCL waits for the other ranks
    # and its collectives moved as the whole run's replay moves them: the
    # same steps as the whole run's replay, step by step.
    per = steps // 6
    win = json.loads(stallscope(build, ["whatif", base, "--format", "json", "--stream", "--window-steps", str(per),
                                        "--straggler-to-median"]))
    differ = sum(a != b for a, b in zip(win["predicted"]["step_ns"], w["predicted"]["step_ns"]))
    print(f"by {per}-step windows ({win.get('windows', {}).get('largest_calls_and_ops_read')} calls and ops read at "
          f"most at once): predicted {win['predicted']['mean_step_ns'] / 1e3:.1f} us; {differ} of "
          f"{len(w['predicted']['step_ns'])} steps differ from the whole run's replay" +
          "".join(f"; step {k}: {a} against {b} ns" for k, (a, b) in
                  enumerate(zip(win["predicted"]["step_ns"], w["predicted"]["step_ns"])) if a != b))
    n = len(w["predicted"]["step_ns"])
    check(win.get("windows", {}).get("count") == (n + per - 1) // per, f"whatif by windows: {win.get('windows')}")
    check(win["predicted"]["step_ns"] == w["predicted"]["step_ns"]
          and win["transformations"] == w["transformations"],
          f"whatif by windows: {differ} predicted steps differ from the whole run's replay; transformations "
          f"{win['transformations']} against {w['transformations']}")


def case_straggler(build, work):
    straggler(build, work, DdpTrain())


def case_torch_ddp_straggler(build, work):
    """The PyTorch multi-rank run."""
    straggler(build, work, TorchDdp())


def small_python_cases(name, tag):
    program = SmallPython(name)

    def remove(stall):
        def case(build, work):
            line = checks.marker_line(program.source, f"# STALL:{stall}")
            compare(build, work, ["--stall", stall], ["--stall", "clean"],
                    ["--remove-sync", f"{name}:{line}"], program)
        return case

    def input_half(build, work):
        compare(build, work, ["--input-ms", "4"], ["--input-ms", "2"], ["--scale-host-wait", "0.5"], program)

    return {f"{tag}_remove_readback": remove("readback"), f"{tag}_remove_synchronize": remove("synchronize"),
            f"{tag}_input_half": input_half}


def case_unchanged(build, work):
    """No transformation: the prediction is the replay, within 1% of the
    baseline; and the same program run again measures within the same
    bounds as any other case."""
    w = compare(build, work, [], [], [])
    check(w["transformations"] == [], f"transformations {w['transformations']}")


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}
CASES.update(small_python_cases("numba_train.py", "numba"))
CASES.update(small_python_cases("cuda_python_train.py", "cuda_python"))


def scenario_case(name, transform_of, changed):
    def case(build, work):
        program = Scenario(name)
        compare(build, work, [], changed, transform_of(program), program)
    return case


def remove_stall(name):
    return lambda program: ["--remove-sync", f"scenario.cc:{checks.marker_line(program.source, f'// STALL:{name}')}"]


# The scenarios whose stall a transformation removes: the synchronizing
# ones with their sync left out, the host-bound ones with their host time
# halved (and input removed).
for _name in ("scalar_read", "sync_log", "print_burst", "free_sync", "pageable_htod"):
    CASES[f"scenario_{_name}"] = scenario_case(_name, remove_stall(_name), ["--no-sync"])
CASES["scenario_input"] = scenario_case("input", lambda p: ["--scale-host-wait", "0.5"], ["--wait-scale", "0.5"])
CASES["scenario_input_none"] = scenario_case("input", lambda p: ["--scale-host-wait", "0"], ["--wait-scale", "0"])
CASES["scenario_jitter"] = scenario_case("jitter", lambda p: ["--scale-host-wait", "0.5"], ["--wait-scale", "0.5"])
CASES["scenario_busy_host"] = scenario_case("busy_host", lambda p: ["--scale-host-busy", "0.5"],
                                            ["--busy-scale", "0.5"])
CASES["scenario_clean"] = scenario_case("clean", lambda p: [], [])
# A kernel on another device that the work stream waits for (an event
# wait) made twice as fast: the changed run's kernel times say so.
CASES["scenario_cross_stream"] = lambda build, work: compare(
    build, work, [], [], ["--scale-kernel", "producer_long=0.5"], Scenario("cross_stream"),
    Scenario("cross_stream", scenarios.KERNELS.replace("producer_long=3000", "producer_long=1500")),
    {"producer_long": 0.5})
# A host function on the work stream at half its time.
CASES["scenario_host_func"] = scenario_case("host_func", lambda p: ["--scale-host-func", "0.5"],
                                            ["--host-func-scale", "0.5"])
# The launch-bound ones: their step's kernels captured once and launched as
# a CUDA graph (scenario --graph), predicted at the default node cost (the
# simulator's default too: SIMGPU_GRAPH_NODE_US 0.5).
for _name in ("small_batches", "light_model"):
    CASES[f"scenario_{_name}_graph"] = scenario_case(_name, lambda p: ["--launch-cost"], ["--graph"])


def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
