#!/usr/bin/env python3
"""Python call-site tests: one case under one CPython from pyenv.

    run_case.py --build DIR --case 3.X_NAME      (run_case.py --list: the cases)

Runs tests/python/sim_workload.py (or exit_workload.py) under
`stallscope run --sim` with that interpreter, then checks
  - the trace (`stallscope dump --format json`, tests/trace_dump.py): every
    blocking call of the step loop carries a Python stack whose innermost
    frame is the marked line ("# STALL:<block>") and whose caller is the
    "# CALL:<block>" line, on the expected thread;
  - the report (`stallscope report DIR --format json`): a hotspot whose
    site.file ends with the script's name, whose site.line is the marked line
    and whose count is the number of steps.
Skips (exit 77, CTest's SKIP_RETURN_CODE) when that CPython is not installed.

Cases: {cdll,pydll}_{sync,dtoh}, thread_cdll_sync, thread_pydll_dtoh (the loop
on a second Python thread), markers (stallscope.step() markers reach the
trace), threads (6 threads, generators, coroutines, non-ASCII names), noblock
and exit (no crash while finalizing; exit code 0), bench (capture cost),
pyhooks (torch.profiler's ProfilerStep#N as ranges through stallscope run's
sitecustomize, with a stand-in torch.profiler; the job's own sitecustomize
still runs).
"""
import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import trace_dump  # noqa: E402
from ground_truth import MIN_BLOCKED_NS  # noqa: E402

WORKLOAD = os.path.join(HERE, "sim_workload.py")
EXIT_WORKLOAD = os.path.join(HERE, "exit_workload.py")
KERNELS = "slow_kernel=2000,*=20"
STEPS = 6
BLOCK_API = {"sync": "cuStreamSynchronize", "dtoh": "cuMemcpyDtoH_v2"}


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import Failure, Skip, check  # noqa: E402


def pyenv_root():
    if os.environ.get("PYENV_ROOT"):
        return os.environ["PYENV_ROOT"]
    try:
        r = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.path.expanduser("~/.pyenv") if os.path.isdir(os.path.expanduser("~/.pyenv")) \
        else "/root/.pyenv"


def find_python(ver):
    """The newest pyenv CPython 3.X.* interpreter, or None."""
    cands = []
    for root in dict.fromkeys([pyenv_root(), "/root/.pyenv"]):
        for exe in glob.glob(os.path.join(root, "versions", f"{ver}.*", "bin", f"python{ver}")):
            m = re.search(r"/versions/(\d+)\.(\d+)\.(\d+)/", exe)
            if m and os.access(exe, os.X_OK):
                cands.append((tuple(int(x) for x in m.groups()), exe))
    return max(cands)[1] if cands else None


def marked_line(path, marker):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith(marker):
                return n
    raise Failure(f"marker {marker} not found in {path}")


def run(build, work, argv, extra_env=None, timeout=120):
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env["SIMGPU_KERNEL_US"] = KERNELS
    env["SIMGPU_SYNC_TRACE"] = os.path.join(work, "sync-%p.jsonl")
    env.pop("STALLSCOPE_PYTHON_STACKS", None)
    env.update(extra_env or {})
    cmd = [os.path.join(build, "bin", "stallscope"), "run", "--sim", "--out", out, "--"] + argv
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return p, out


def report(build, out):
    rep = subprocess.run([os.path.join(build, "bin", "stallscope"), "report", out, "--format", "json"],
                         capture_output=True, text=True, timeout=120)
    check(rep.returncode == 0, f"report exited {rep.returncode}: {rep.stderr[-2000:]}")
    return json.loads(rep.stdout)


def check_trace(build, out, api, block, thread, steps):
    traces = trace_dump.load_dir(build, out)
    check(len(traces) == 1, f"expected one trace file in {out}, found {len(traces)}")
    t = traces[0]
    stall = marked_line(WORKLOAD, f"# STALL:{block}")
    caller = marked_line(WORKLOAD, f"# CALL:{block}")
    func = {"sync": "wait_sync", "dtoh": "read_back"}[block]
    calls = [c for c in t.calls if c.name == api]
    check(calls, f"no {api} call in the trace")
    hits = []
    for c in calls:
        frames = c.python_frames
        check(frames, f"{api} on tid {c.tid} has no Python stack")
        check(c.flags & trace_dump.RECORD_PYTHON_STACK, f"{api}: kRecordPythonStack flag not set")
        f, fn, line = frames[0]
        if f.endswith(os.path.basename(WORKLOAD)) and line == stall:
            check(fn == func, f"innermost function {fn!r}, expected {func!r}")
            check(len(frames) >= 2 and frames[1][2] == caller and frames[1][1] == "train_step",
                  f"caller frame {frames[1:2]}, expected train_step line {caller}")
            check(all(fr[0].endswith(".py") for fr in frames), f"odd frames {frames}")
            hits.append(c)
    check(len(hits) == steps, f"{len(hits)} {api} calls at line {stall}, expected {steps}: "
          f"{[c.python_frames[:1] for c in calls]}")
    on_main = [c.tid == t.pid for c in hits]
    if thread == "main":
        check(all(on_main), "expected the blocking calls on the main thread")
    else:
        check(not any(on_main), "expected the blocking calls on the second thread")
    outer = hits[0].python_frames[-1]
    want = "<module>" if thread == "main" else "_bootstrap"  # threading.Thread._bootstrap
    check(outer[1] == want, f"outermost frame {outer}, expected {want}")
    print(f"trace: {len(hits)} x {api} at {os.path.basename(WORKLOAD)}:{stall} ({func}), "
          f"stack depth {len(hits[0].python_frames)}")
    return stall


SYNC_TRACE_API = {"sync": "cuStreamSynchronize", "dtoh": "cuMemcpy"}


def blocked_range(work, block, steps):
    """(least, most) hits the hotspot may count, from the simulator's own
    list of the calls that synchronized (SIMGPU_SYNC_TRACE): every marked
    call that waited over 5 us in the simulator is a hit (the hook's time
    encloses the simulator's); one that did not wait, because the host
    reached it after the 2 ms kernel had finished (a loaded machine
    deschedules it), may count or not by the hook's few microseconds."""
    api = SYNC_TRACE_API[block]
    syncs = []
    for path in glob.glob(os.path.join(work, "sync-*.jsonl")):
        with open(path) as f:
            syncs += [json.loads(l) for l in f if l.strip()]
    ours = [x for x in syncs if x["api"] == api]
    check(len(ours) == steps, f"the simulator saw {len(ours)} {api} calls, expected {steps}")
    least = sum(1 for x in ours if x["end_ns"] - x["start_ns"] > MIN_BLOCKED_NS)
    return least, steps


def check_report(rep, api, stall, steps, expected=None):
    hs = rep.get("hotspots", [])
    ours = [h for h in hs if h.get("api") == api]
    check(ours, f"no {api} hotspot: {[h.get('api') for h in hs]}")
    match = [h for h in ours
             if str(h.get("site", {}).get("file", "")).endswith(os.path.basename(WORKLOAD))
             and h.get("site", {}).get("line") == stall]
    check(match, f"no {api} hotspot at {os.path.basename(WORKLOAD)}:{stall}; sites: "
          f"{[h.get('site') for h in ours]}")
    h = match[0]
    least, most = expected or (steps, steps)
    check(least <= h.get("count", 0) <= most,
          f"hotspot count {h.get('count')}, expected {least}..{most} (calls that blocked in the "
          f"simulator .. calls made)")
    # Every blocking call from Python had its frames read (none lost).
    lost = [d for d in rep.get("diagnostics", []) if d.get("name") == "python_sites_lost"]
    check(not lost and all(x.get("sites_lost", 0) == 0 for x in hs),
          f"Python sites lost: {lost} {[(x.get('site'), x.get('sites_lost')) for x in hs]}")
    top = max(hs, key=lambda x: x.get("blocked_ns", 0))
    check(top is h, f"the top hotspot (blocked_ns) is {top.get('api')} at {top.get('site')}")
    print(f"report: {api} hotspot at {h['site']} count {h['count']}")


def threads(build, work, exe):
    """Every cuStreamSynchronize of 6 concurrent threads carries the right
    innermost frame: non-ASCII file and function names (latin-1, UCS-2 and
    UCS-4 str storage), generator and coroutine frames."""
    src = os.path.join(HERE, "threads_workload.py")
    script = os.path.join(work, "wörk_日本_\U00020000.py")
    shutil.copy(src, script)
    p, out = run(build, work, [exe, script], {"STALLSCOPE_TEST_DIR": HERE}, timeout=300)
    check(p.returncode == 0, f"exited {p.returncode}: {p.stderr[-3000:]}")
    expect = {marked_line(src, f"# STALL:{k}"): fn
              for k, fn in (("plain", "wärte_日本_\U00020000"), ("gen", "gen"), ("coro", "coro"))}
    t = trace_dump.load_dir(build, out)[0]
    seen = {}
    for c in t.calls:
        if c.name != "cuStreamSynchronize":
            continue
        frames = c.python_frames
        check(frames, f"a cuStreamSynchronize on tid {c.tid} has no Python stack")
        f, fn, line = frames[0]
        check(f == script, f"innermost file {f!r}, expected {script!r}")
        check(expect.get(line) == fn, f"innermost frame {fn!r} line {line}; expected {expect}")
        check(frames[-1][1] == "_bootstrap", f"outermost frame {frames[-1]}")
        seen[fn] = seen.get(fn, 0) + 1
    check(len(seen) == 3, f"frames seen: {seen}")
    print(f"threads: every cuStreamSynchronize has its site: {seen}")
    return 0


def bench(build, work, exe):
    """Added cost per blocking call: no library / library without Python
    stacks / library with them. Fails only when the Python capture alone
    costs more than the whole 5 us budget (a loose bound for shared CI).
    5,000 calls a round here (BENCH_N, 20,000 when the workload runs by
    hand): the case runs alone, once per Python, and most of its time was
    the traced runs and reading their traces back."""
    script = os.path.join(HERE, "bench_workload.py")
    n = {"BENCH_N": os.environ.get("BENCH_N", "5000")}
    env = dict(os.environ, SIMGPU_KERNEL_US=KERNELS,
               LD_LIBRARY_PATH=os.path.join(build, "lib", "simgpu"), **n)
    env.pop("LD_PRELOAD", None)
    p = subprocess.run([exe, script], env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"bench without the library exited {p.returncode}: {p.stderr[-2000:]}")
    base = json.loads(p.stdout.strip().splitlines()[-1])
    res = {}
    for name, extra in (("native", {"STALLSCOPE_PYTHON_STACKS": "0"}), ("python", {})):
        os.makedirs(os.path.join(work, name))
        p, out = run(build, os.path.join(work, name), [exe, script], dict(extra, **n), timeout=300)
        check(p.returncode == 0, f"bench ({name}) exited {p.returncode}: {p.stderr[-2000:]}")
        res[name] = json.loads(p.stdout.strip().splitlines()[-1])
        t = trace_dump.load_dir(build, out)[0]
        with_py = sum(1 for c in t.calls if c.name == "cuStreamSynchronize" and c.python_frames)
        check((with_py > 0) == (name == "python"), f"{name}: {with_py} calls with a Python stack")
    b, n, py = base["ns_per_call"], res["native"]["ns_per_call"], res["python"]["ns_per_call"]
    print(f"bench ({exe}, {base['depth']} Python frames deep, median ns per cuStreamSynchronize): "
          f"no library {b:.0f}, library without Python stacks {n:.0f} (+{n - b:.0f}), "
          f"with Python stacks {py:.0f} (+{py - b:.0f}); Python capture alone +{py - n:.0f} ns")
    check(py - n <= 5000, f"Python capture costs {py - n:.0f} ns per blocking call (> 5 us)")
    return 0


PYHOOKS_WORKLOAD = os.path.join(HERE, "pyhooks_workload.py")
# A stand-in for torch.profiler: the profile class's step protocol as torch
# 2.x has it (start opens ProfilerStep#0, step closes #k and opens #k+1,
# stop closes the open one), and the job's own sitecustomize.
STAND_IN = {
    "torch/__init__.py": "",
    "torch/profiler/__init__.py": "from .profiler import profile  # noqa: F401\n",
    "torch/profiler/profiler.py": """
class record_function:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class profile:
    def __init__(self, schedule=None):
        self.record_steps = schedule is not None
        self.step_num = 0
        self.step_rec_fn = None

    def _enter(self):
        if self.record_steps:
            self.step_rec_fn = record_function("ProfilerStep#" + str(self.step_num))
            self.step_rec_fn.__enter__()

    def _exit(self):
        if self.record_steps and self.step_rec_fn:
            self.step_rec_fn.__exit__(None, None, None)
            self.step_rec_fn = None

    def start(self):
        self._enter()
        return "started"

    def step(self, fail=False):
        self._exit()
        if fail:
            raise ValueError("bad schedule")
        self.step_num += 1
        self._enter()
        return self.step_num

    def stop(self):
        self._exit()
        return "stopped"
""",
    "sitecustomize.py": "import os\nopen(os.environ['JOB_SITE_MARK'], 'a').write('ran\\n')\n",
}


def pyhooks(build, work, exe):
    """torch.profiler's ProfilerStep#N reach the trace as ranges of the same
    names through stallscope's Python hooks (stallscope run's
    sitecustomize), the job's own sitecustomize still runs, the profiler's
    results and errors reach the job unchanged, and STALLSCOPE_PYTHON_HOOKS=0
    turns the hooks off."""
    job = os.path.join(work, "job")
    for rel, text in STAND_IN.items():
        os.makedirs(os.path.dirname(os.path.join(job, rel)), exist_ok=True)
        with open(os.path.join(job, rel), "w") as f:
            f.write(text)
    exe_stallscope = os.path.join(build, "bin", "stallscope")
    for hooks in ("1", "0"):
        mark = os.path.join(work, f"site-{hooks}.txt")
        sub = os.path.join(work, f"hooks{hooks}")
        os.makedirs(sub)
        p, out = run(build, sub, [exe, PYHOOKS_WORKLOAD, str(STEPS)],
                     {"PYTHONPATH": job, "JOB_SITE_MARK": mark, "STALLSCOPE_PYTHON_HOOKS": hooks})
        check(p.returncode == 0, f"hooks={hooks}: exited {p.returncode}: {p.stderr[-3000:]}")
        seen = json.loads(p.stdout.strip().splitlines()[-1])
        check(seen["start"] == "started" and seen["steps"] == list(range(1, STEPS + 1))
              and seen["raised"] and seen["stop"] == "stopped",
              f"hooks={hooks}: the profiler's results changed: {seen}")
        check(seen["step_name"] == "step", f"hooks={hooks}: step is named {seen['step_name']}")
        check(os.path.exists(mark), f"hooks={hooks}: the job's own sitecustomize did not run")
        check(seen["wrapped"] == (hooks == "1"), f"hooks={hooks}: wrapped {seen['wrapped']}")
        names = []
        for trace in glob.glob(os.path.join(out, "*.sstrace")):
            d = subprocess.run([exe_stallscope, "dump", trace], capture_output=True, text=True, timeout=60)
            check(d.returncode == 0, f"dump exited {d.returncode}: {d.stderr[-1000:]}")
            names += re.findall(r'^range tid \d+ "(ProfilerStep#\d+)"', d.stdout, re.M)
        # #0 from start, #1..#STEPS from the steps; the failed step opened none.
        want = [f"ProfilerStep#{k}" for k in range(STEPS + 1)] if hooks == "1" else []
        check(names == want, f"hooks={hooks}: ranges {names}, expected {want}")
    print(f"pyhooks: {STEPS + 1} ProfilerStep ranges recorded, none with STALLSCOPE_PYTHON_HOOKS=0")
    return 0


def one(build, work, version, case):
    exe = find_python(version)
    if not exe:
        raise Skip(f"CPython {version} is not installed under pyenv")
    print(f"python: {exe}")
    if case in ("noblock", "exit"):
        p, out = run(build, work, [exe, EXIT_WORKLOAD, "noblock" if case == "noblock" else "daemon"])
        check(p.returncode == 0, f"exited {p.returncode}: {p.stderr[-3000:]}")
        traces = trace_dump.load_dir(build, out)
        if case == "exit":
            check(traces, "no trace written")
            n = sum(1 for t in traces for c in t.calls if c.name == "cuStreamSynchronize")
            check(n > 0, "no cuStreamSynchronize recorded")
            print(f"exit: rc 0, {n} cuStreamSynchronize calls recorded")
        else:
            print(f"noblock: rc 0, {len(traces)} trace file(s)")
        return 0
    if case == "threads":
        return threads(build, work, exe)
    if case == "bench":
        return bench(build, work, exe)
    if case == "pyhooks":
        return pyhooks(build, work, exe)
    if case == "markers":
        p, out = run(build, work, [exe, WORKLOAD, "--markers", "--expect-library", "--steps", str(STEPS)])
        check(p.returncode == 0, f"exited {p.returncode}: {p.stderr[-3000:]}")
        t = trace_dump.load_dir(build, out)[0]
        begins, ends = t.nvtx_types.count(trace_dump.NVTX_STEP_BEGIN), t.nvtx_types.count(trace_dump.NVTX_STEP_END)
        check(begins == STEPS and ends == STEPS,
              f"{begins} step begins and {ends} step ends in the trace, expected {STEPS}")
        print(f"markers: {begins} stallscope_step_begin / {ends} stallscope_step_end recorded")
        return 0
    m = re.fullmatch(r"(thread_)?(cdll|pydll)_(sync|dtoh)", case)
    check(m, f"unknown case {case}")
    thread = "second" if m.group(1) else "main"
    lib, block = m.group(2), m.group(3)
    api = BLOCK_API[block]
    p, out = run(build, work, [exe, WORKLOAD, "--lib", lib, "--block", block,
                               "--thread", thread, "--steps", str(STEPS)])
    check(p.returncode == 0, f"exited {p.returncode}: {p.stderr[-3000:]}")
    stall = check_trace(build, out, api, block, thread, STEPS)
    check_report(report(build, out), api, stall, STEPS, blocked_range(work, block, STEPS))
    return 0


# Every case under every CPython 3.9-3.13 (CTest: python3.X_CASE).
VERSIONS = ("3.9", "3.10", "3.11", "3.12", "3.13")
NAMES = ("cdll_sync", "pydll_sync", "cdll_dtoh", "pydll_dtoh", "thread_cdll_sync", "thread_pydll_dtoh",
         "threads", "markers", "noblock", "exit", "bench", "pyhooks")
CASES = {f"{v}_{n}": functools.partial(one, version=v, case=n) for v in VERSIONS for n in NAMES}


def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
