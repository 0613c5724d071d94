#!/usr/bin/env python3
"""Robustness tests: stallscope never disturbs the job, and copes with CUPTI in
real conditions. Each case runs tests/robustness/rb_job (or rb_dlopen) on the
simulated GPU with libstallscope.so preloaded, often also without it, and
checks the job's output and exit code, the trace files (read through
`stallscope dump --format json`, tests/trace_dump.py) and the analyzer's
JSON report. One case per invocation: robustness.py --build DIR --case NAME."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

KERNELS = "*=2"
LAUNCH = ("cuLaunchKernel", "cuLaunchKernel_ptsz")


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import Failure, Skip, check  # noqa: E402
import trace_dump  # noqa: E402


class Ctx:
    def __init__(self, build, work):
        self.build = build
        self.work = work
        self.out = os.path.join(work, "trace")
        self.simgpu = os.path.join(build, "lib", "simgpu")
        self.preload = os.path.join(build, "lib", "libstallscope.so")
        self.job = os.path.join(build, "bin", "rb_job")
        self.stallscope = os.path.join(build, "bin", "stallscope")

    def env(self, traced=True, extra=None, libpath=None):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("STALLSCOPE_") or k in ("LD_PRELOAD", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "CUDA_HOME"):
                del env[k]
        env["LD_LIBRARY_PATH"] = libpath or self.simgpu
        env["SIMGPU_KERNEL_US"] = KERNELS
        if traced:
            env["LD_PRELOAD"] = self.preload
            env["STALLSCOPE_OUT"] = self.out
        env.update(extra or {})
        return env

    def run(self, args, traced=True, extra=None, libpath=None, timeout=90):
        return subprocess.run(args, env=self.env(traced, extra, libpath), capture_output=True,
                              text=True, timeout=timeout)

    def report(self, *paths):
        p = subprocess.run([self.stallscope, "report", *paths, "--format", "json"],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"report {paths} exited {p.returncode}: {p.stderr[-2000:]}")
        return json.loads(p.stdout)

    def dump_ok(self, path):
        p = subprocess.run([self.stallscope, "dump", path], capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"dump {path} exited {p.returncode}: {p.stderr[-1000:]}")

    def traces(self):
        return trace_dump.load_dir(self.build, self.out)


def launches(t, tid=None):
    return sum(1 for c in t.calls if c.name in LAUNCH and (tid is None or c.tid == tid))


def diag(report, name):
    for d in report["diagnostics"]:
        if d["name"] == name:
            return d
    return None


def one_trace(ctx):
    ts = ctx.traces()
    check(len(ts) == 1, f"expected one trace file, found {[t.path for t in ts]}")
    return ts[0]


def expect_ok(p, what="job"):
    check(p.returncode == 0, f"{what} exited {p.returncode}: {p.stderr[-2000:]}")


# ---- bounded memory -------------------------------------------------------

def case_budget(ctx):
    """A 1 MB budget (17 buffers) and 48 threads launching at once: the job
    finishes, records past the budget are dropped and counted, never waited
    for."""
    threads, n = 48, 3000
    t0 = time.monotonic()
    p = ctx.run([ctx.job, "storm", str(threads), str(n)], extra={"STALLSCOPE_BUFFER_MB": "1"})
    took = time.monotonic() - t0
    expect_ok(p)
    check(p.stdout == f"storm {threads} x {n} done\n", f"output {p.stdout!r}")
    rep = ctx.report(ctx.out)
    d = diag(rep, "dropped_records")
    check(d and d["count"] > 0, f"no dropped_records diagnostic: {rep['diagnostics']}")
    t = one_trace(ctx)
    recorded = launches(t)
    check(recorded + d["count"] >= threads * n,
          f"recorded {recorded} + dropped {d['count']} < {threads * n} launches")
    check(recorded < threads * n, "nothing was dropped from the trace")
    print(f"budget: {recorded} launches recorded, {d['count']} records dropped, {took:.1f} s")


def case_budget_memory(ctx):
    """STALLSCOPE_BUFFER_MB bounds what the library adds to the job's memory,
    CUPTI's activity buffers and the device records waiting for the writer
    included: 200000 launches of a 1 us kernel (device records arriving as
    fast as CUPTI delivers them) add at most the 1 MiB budget and 5 MiB of
    fixed cost to the job's peak RSS (code, thread stacks, tables, and the
    simulated CUPTI's staging of up to 1 MiB and its copy while it delivers:
    about 2 MiB quiet, 4 MiB beside other tests), less than with the default
    64 MiB budget; every launch is still recorded or counted as dropped."""
    args = [ctx.job, "simple", "200000"]
    rss = {}
    for name, traced, extra in (("bare", False, None), ("1MiB", True, {"STALLSCOPE_BUFFER_MB": "1"}),
                                ("default", True, None)):
        shutil.rmtree(ctx.out, ignore_errors=True)
        p = ctx.run(args, traced, dict(extra or {}, SIMGPU_KERNEL_US="*=1", RB_PRINT_HWM="1"))
        check(p.returncode == 0, f"{name}: job exited {p.returncode}: {p.stderr[-1000:]}")
        hwm = [l for l in p.stderr.splitlines() if l.startswith("VmHWM:")]
        check(hwm, f"{name}: the job printed no VmHWM: {p.stderr[-500:]}")
        rss[name] = int(hwm[-1].split()[1])  # kB
        if name == "1MiB":
            t = one_trace(ctx)
            rep = ctx.report(ctx.out)
            d = diag(rep, "dropped_records")
            dropped = d["count"] if d else 0
            check(launches(t) + dropped >= 200000, f"{launches(t)} launches recorded + {dropped} dropped")
    extra_kib = rss["1MiB"] - rss["bare"]
    check(extra_kib <= 1024 + 5 * 1024,
          f"with a 1 MiB budget the library added {extra_kib} KiB to the job's peak RSS ({rss})")
    check(rss["1MiB"] < rss["default"], f"the budget does not bound the memory: {rss}")
    print(f"budget_memory: peak RSS {rss['bare']} KiB bare, {rss['1MiB']} KiB with a 1 MiB budget, "
          f"{rss['default']} KiB with the default 64 MiB")


SOAK_THREADS, SOAK_LAUNCHES = 16, 625_000  # 10 million launches
SOAK_BUDGET_MB = 4


def case_soak(ctx):
    """10 million launches from 16 threads at once (about half an hour of a
    training job's launches, as fast as the machine takes them), with a 4 MiB
    budget (STALLSCOPE_BUFFER_MB):
    - the job's peak RSS grows by at most one and a half budgets and 8 MiB
      over the bare run's: the budget bounds the thread buffers, and a
      quarter of it each CUPTI's buffers and the device records waiting for
      the writer; code, tables and the acknowledgement window are the fixed
      part;
    - the calls are counted exactly: the trace's API calls plus the calls
      dropped over the budget (`dropped_calls`) are the calls made (the
      launches and the calls of set-up and teardown, counted by the same
      job with 100 launches a thread and nothing dropped);
    - the report is produced, its launches the trace's.
    The simulated driver's queue stands in for the real driver's push
    buffer, which has a fixed size: at 64 ops a stream (SIMGPU_QUEUE_DEPTH)
    the traced and the bare run hold the same, and what differs is
    stallscope's."""
    base = {"SIMGPU_KERNEL_US": "*=0", "SIMGPU_QUEUE_DEPTH": "64", "RB_PRINT_HWM": "1"}
    budget = {"STALLSCOPE_BUFFER_MB": str(SOAK_BUDGET_MB)}

    def peak(p, what):
        expect_ok(p, what)
        hwm = [l for l in p.stderr.splitlines() if l.startswith("VmHWM:")]
        check(hwm, f"{what}: the job printed no VmHWM: {p.stderr[-500:]}")
        return int(hwm[-1].split()[1])  # kB

    def calls(report):
        procs = report["processes"]
        check(len(procs) == 1, f"{len(procs)} processes in the report")
        d = diag(report, "dropped_calls")
        return procs[0]["api_calls"], (d["count"] if d else 0)

    shutil.rmtree(ctx.out, ignore_errors=True)
    small = 100
    peak(ctx.run([ctx.job, "storm", str(SOAK_THREADS), str(small)], True, dict(base, **budget)), "small run")
    made_small, dropped_small = calls(ctx.report(ctx.out))
    check(dropped_small == 0, f"the small run dropped {dropped_small} calls")
    overhead = made_small - SOAK_THREADS * small  # set-up and teardown calls
    check(overhead >= 0, f"the small run recorded {made_small} calls for {SOAK_THREADS * small} launches")

    bare = peak(ctx.run([ctx.job, "storm", str(SOAK_THREADS), str(SOAK_LAUNCHES)], False, base, timeout=600),
                "bare run")
    shutil.rmtree(ctx.out, ignore_errors=True)
    traced = peak(ctx.run([ctx.job, "storm", str(SOAK_THREADS), str(SOAK_LAUNCHES)], True,
                          dict(base, **budget), timeout=600), "traced run")
    report = ctx.report(ctx.out)
    recorded, dropped = calls(report)
    made = SOAK_THREADS * SOAK_LAUNCHES + overhead
    check(recorded + dropped == made,
          f"{recorded} calls in the trace + {dropped} dropped = {recorded + dropped}, the job made {made}")
    check(report["totals"]["launches"] <= SOAK_THREADS * SOAK_LAUNCHES,
          f"report launches {report['totals']['launches']}")
    extra_kib = traced - bare
    check(extra_kib <= 1.5 * SOAK_BUDGET_MB * 1024 + 8 * 1024,
          f"with a {SOAK_BUDGET_MB} MiB budget the library added {extra_kib} KiB to the job's peak RSS "
          f"(bare {bare} KiB, traced {traced} KiB)")
    size = sum(os.path.getsize(os.path.join(ctx.out, f)) for f in os.listdir(ctx.out))
    print(f"soak: {SOAK_THREADS * SOAK_LAUNCHES} launches from {SOAK_THREADS} threads; peak RSS {bare} KiB bare, "
          f"{traced} KiB traced with a {SOAK_BUDGET_MB} MiB budget (+{extra_kib} KiB); {recorded} calls "
          f"recorded + {dropped} dropped = {made} made; trace {size >> 20} MiB; diagnostics "
          f"{[(d['name'], d['count']) for d in report['diagnostics']]}")
    shutil.rmtree(ctx.out, ignore_errors=True)


def case_storm64(ctx):
    """64 threads launching at once: every thread's launches are in the trace,
    and each op is joined to a launch of the thread that submitted it (each
    thread's first launch, made before the thread registers, included)."""
    threads, n = 64, 500
    truth_path = os.path.join(ctx.work, "truth.jsonl")
    p = ctx.run([ctx.job, "storm", str(threads), str(n)], extra={"SIMGPU_TRACE": truth_path})
    expect_ok(p)
    t = one_trace(ctx)
    with open(truth_path) as f:
        truth = [json.loads(l) for l in f if l.strip()]
    checks.check_ops_joined_to_their_threads(t, truth)
    per_tid = {}
    for c in t.calls:
        if c.name in LAUNCH:
            per_tid[c.tid] = per_tid.get(c.tid, 0) + 1
    check(len(per_tid) == threads, f"{len(per_tid)} launching threads in the trace, expected {threads}")
    bad = {tid: k for tid, k in per_tid.items() if k != n}
    check(not bad, f"threads with a launch count other than {n}: {bad}")
    rep = ctx.report(ctx.out)
    check(rep["totals"]["launches"] == threads * n, f"report launches {rep['totals']['launches']}")
    check(diag(rep, "dropped_records") is None, "records dropped under the default budget")


# ---- threads and exits ----------------------------------------------------

def case_thread_exit(ctx):
    """A second thread launches and exits mid-run: its calls are in the trace."""
    n = 300
    p = ctx.run([ctx.job, "thread_exit", str(n)])
    expect_ok(p)
    t = one_trace(ctx)
    main = launches(t, t.pid)
    worker = launches(t) - main
    check(main == 2 * n, f"main thread launches {main}, expected {2 * n}")
    check(worker == n, f"exited thread's launches {worker}, expected {n}")
    rep = ctx.report(ctx.out)
    check(rep["totals"]["launches"] == 3 * n, f"report launches {rep['totals']['launches']}")


def case_exit_thread(ctx):
    """exit() from a non-main thread while the main thread launches: the exit
    code is the job's, the trace is complete and readable."""
    n = 200
    bare = ctx.run([ctx.job, "exit_thread", str(n)], traced=False)
    p = ctx.run([ctx.job, "exit_thread", str(n)])
    check(bare.returncode == 5 and p.returncode == 5, f"exit codes {bare.returncode}/{p.returncode}")
    check(p.stdout == bare.stdout, f"output changed: {bare.stdout!r} vs {p.stdout!r}")
    t = one_trace(ctx)
    worker = launches(t) - launches(t, t.pid)
    check(worker == n, f"exiting thread's launches {worker}, expected {n}")
    check(launches(t, t.pid) >= n, "main thread's launches missing")
    rep = ctx.report(ctx.out)
    check(diag(rep, "no_end_chunk") is None, "exit() from a thread left no end chunk")


def case_quick_exit(ctx):
    """_exit skips atexit: what the periodic writer flushed stays readable."""
    n = 200
    p = ctx.run([ctx.job, "quick_exit", str(n)])
    check(p.returncode == 3, f"exit code {p.returncode}")
    t = one_trace(ctx)
    check(launches(t) >= n, f"{launches(t)} launches on disk, expected at least the {n} before the drain")
    ctx.dump_ok(t.path)
    rep = ctx.report(ctx.out)
    check(diag(rep, "no_end_chunk") or diag(rep, "truncated_trace"), "no truncation warning")
    check(rep["totals"]["launches"] >= n, f"report launches {rep['totals']['launches']}")


# ---- a full disk ----------------------------------------------------------

def case_disk_full(ctx):
    """The trace folder's file system fills up mid-run, then space comes
    back: the job finishes normally with the same output; the file holds no
    torn chunk (the reader finds no damage and no truncation), and the
    report says how many records could not be written, exactly the calls
    missing against a run with room (the same job, its call count
    deterministic). Needs a small tmpfs: root, or a user namespace."""
    args = [ctx.job, "paced", "60", "100", "15"]
    roomy = ctx.run(args)
    expect_ok(roomy, "job with room")
    full_calls = len(one_trace(ctx).calls)
    roomy_bytes = sum(os.path.getsize(os.path.join(ctx.out, f)) for f in os.listdir(ctx.out))
    shutil.rmtree(ctx.out)
    bare = ctx.run(args, traced=False)
    expect_ok(bare, "job without stallscope")

    mnt = os.path.join(ctx.work, "small")
    os.makedirs(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True, text=True)
    if m.returncode != 0:
        raise Skip(f"cannot mount a small tmpfs: {m.stderr.strip()}")
    try:
        ctx.out = os.path.join(mnt, "trace")
        filler = os.path.join(mnt, "filler")
        # Leave room for about a third of what the job writes (the trace is
        # packed and compressed: a few bytes a call), never less than the
        # file's preamble and first chunks take (12 KiB): the first drains
        # fit, those of the first half's later rounds do not.
        room = max(12 * 1024, roomy_bytes // 3)
        with open(filler, "wb") as f:
            f.write(b"\0" * (1024 * 1024 - room))
        # The job stops after half its rounds (rb_job's RB_GATE) until the
        # gate file goes. Its records so far are more than the room: the
        # disk fills while the writer drains them. The filler goes once the
        # trace has stopped growing for a second (five drain periods: the
        # writer has tried them all), however slowly a loaded machine ran
        # the job up to the gate.
        gate = os.path.join(ctx.work, "gate")
        open(gate, "w").close()
        proc = subprocess.Popen(args, env=dict(ctx.env(), RB_GATE=gate), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        first = proc.stdout.readline()
        check(first == "gate\n", f"job printed {first!r} before its gate")
        last, still_since = -1, time.monotonic()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and time.monotonic() - still_since < 1.0:
            time.sleep(0.05)
            size = sum(os.path.getsize(os.path.join(ctx.out, f)) for f in os.listdir(ctx.out)) \
                if os.path.isdir(ctx.out) else 0
            if size != last:
                last, still_since = size, time.monotonic()
        os.remove(filler)
        os.remove(gate)
        out, err = proc.communicate(timeout=90)
        check(proc.returncode == 0, f"job exited {proc.returncode} on a full disk: {err[-2000:]}")
        check(out == bare.stdout, f"output {out!r}, without stallscope {bare.stdout!r}")
        try:
            t = one_trace(ctx)
        except ValueError as e:
            raise Failure(f"the trace does not read: {e}")
        rep = ctx.report(ctx.out)
        check(diag(rep, "corrupt_chunks") is None, f"damaged chunks: {diag(rep, 'corrupt_chunks')}")
        check(diag(rep, "truncated_trace") is None and diag(rep, "no_end_chunk") is None,
              "the trace is not whole")
        lost = diag(rep, "trace_write_failed")
        check(lost is not None, f"no trace_write_failed diagnostic; {len(t.calls)} of {full_calls} calls on disk")
        msg = lost["message"]
        lost_calls = int(msg.split(" of them API calls")[0].rsplit("(", 1)[1])
        check("No space left on device" in msg, f"message {msg!r}")
        check(len(t.calls) + lost_calls == full_calls,
              f"{len(t.calls)} calls on disk + {lost_calls} lost != {full_calls} made")
        check(0 < lost_calls < full_calls, f"{lost_calls} of {full_calls} calls lost")
        print(f"disk_full: {len(t.calls)} calls written, {lost_calls} lost while the disk was full, "
              f"{full_calls} made; {msg}")
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


# ---- fork -----------------------------------------------------------------

def fork_case(ctx, child_end):
    n = 150
    proc, out, err = run_unless_hung(ctx, [ctx.job, "fork", child_end, str(n)], f"fork/{child_end}")
    check(proc.returncode == 0, f"fork job exited {proc.returncode}: {err[-2000:]}")
    check(out == "fork child status 0\n", f"output {out!r}")
    ts = ctx.traces()
    parents = [t for t in ts if t.pid == proc.pid]
    children = [t for t in ts if t.pid != proc.pid]
    check(len(parents) == 1, f"parent files {[t.path for t in parents]}")
    parent = parents[0]
    check(launches(parent) == 2 * n, f"parent launches {launches(parent)}, expected {2 * n}")
    check(len(children) <= 1, f"child files {[t.path for t in children]}")
    for c in children:
        check(c.ppid == proc.pid, f"child file's ppid {c.ppid}, expected {proc.pid}")
        ctx.dump_ok(c.path)
        ctx.report(c.path)
        k = launches(c)
        # Never the parent's records: at most the child's own launches.
        check(k <= n, f"child file has {k} launches, more than the child made ({n})")
        if child_end == "exit":
            check(k == n, f"child ended with exit(): {k} launches, expected {n}")
    rep = ctx.report(ctx.out)
    check(rep["totals"]["launches"] >= 2 * n, f"report launches {rep['totals']['launches']}")
    pr = ctx.report(parent.path)
    check(diag(pr, "no_end_chunk") is None, "parent's trace is incomplete")
    print(f"fork/{child_end}: parent {launches(parent)} launches, child files "
          f"{[(os.path.basename(c.path), launches(c)) for c in children]}")


def hung_stacks(pgid):
    """Every thread's stack of the processes in group `pgid` (gdb, when it is
    there): what a hang waits on."""
    if not shutil.which("gdb"):
        return "(no gdb for the stacks)"
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.getpgid(int(pid)) == pgid:
                g = subprocess.run(["gdb", "-p", pid, "-batch", "-ex", "thread apply all bt 12"],
                                   capture_output=True, text=True, timeout=60)
                out.append(f"--- pid {pid}\n" + "\n".join(l for l in g.stdout.splitlines() if l.startswith(("#", "Thread"))))
        except (OSError, subprocess.SubprocessError):
            continue
    return "\n".join(out)


HUNG_IDLE_S = 10  # a process that used no CPU this long, in a job that forks children that live ms


def group_cpu(pgid):
    """{pid: CPU ticks used} of the processes in group `pgid`."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp (index 2), ..., utime and stime (11, 12).
        # A zombie (exited, not yet reaped) uses no CPU and waits for nothing.
        if int(fields[2]) == pgid and fields[0] != "Z":
            out[int(pid)] = int(fields[11]) + int(fields[12])
    return out


def wait_unless_hung(proc, idle_s=HUNG_IDLE_S):
    """(stdout, stderr, None) once `proc` ends, or (None, None, pid) when a
    child in its process group used no CPU for idle_s seconds: blocked on a
    lock it inherited, a hang. A loaded machine or a sanitized build makes
    the job slower, never idle, so no wall-clock limit stands for a hang."""
    seen = {}  # pid -> (ticks, since)
    while True:
        try:
            out, err = proc.communicate(timeout=1)
            return out, err, None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        cpu = group_cpu(proc.pid)
        for pid, ticks in cpu.items():
            # The parent too: its launching thread uses CPU while it waits
            # for a child, and its exit (the trace's last flush) does too.
            last = seen.get(pid)
            if last is None or last[0] != ticks:
                seen[pid] = (ticks, now)
            elif now - last[1] >= idle_s:
                return None, None, pid
        seen = {pid: v for pid, v in seen.items() if pid in cpu}


def run_unless_hung(ctx, args, what):
    """(proc, stdout, stderr) of the traced job `args` once it ends; a
    Failure with every thread's stack when one of its processes hangs (see
    wait_unless_hung), after killing the whole group."""
    proc = subprocess.Popen(args, env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    out, err, hung = wait_unless_hung(proc)
    if hung is not None:
        stacks = hung_stacks(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # a hung child holds the pipes too
        proc.communicate()
        raise Failure(f"{what}: process {hung} used no CPU for {HUNG_IDLE_S} s, hung\n{stacks}")
    return proc, out, err


def case_fork_storm(ctx):
    """A job forks 200 children, one after another, while a second thread
    keeps launching and synchronizing (a DataLoader's workers beside the
    training thread); the children exit with exit(), without CUDA or after
    5 launches of their own. No lock held by another thread at a fork
    (the simulator's CUPTI flusher delivering records, a thread staging
    one, stallscope's writer) may hang a child: 10 jobs of 10 end, each
    with its output, the parent's trace whole and every child's trace
    holding exactly its own launches. (Before the fix, 3 jobs of 3 hung
    without child launches and 4 of 5 with them.) A hang is found by
    wait_unless_hung, never by a wall-clock limit: beside two CPU hogs
    and a second test, 20 such jobs took over 120 s."""
    runs = 0
    for child_launches in (0, 5):
        for _ in range(5):
            shutil.rmtree(ctx.out, ignore_errors=True)
            proc, out, err = run_unless_hung(ctx, [ctx.job, "fork_storm", "200", str(child_launches)],
                                             f"run {runs + 1} (children with {child_launches} launches)")
            runs += 1
            check(proc.returncode == 0, f"job exited {proc.returncode}: {err[-2000:]}")
            check(out == "fork_storm 200 children, 0 failed\n", f"output {out!r}")
            ts = ctx.traces()
            parents = [t for t in ts if t.pid == proc.pid]
            children = [t for t in ts if t.pid != proc.pid]
            check(len(parents) == 1 and launches(parents[0]) > 0, "no parent trace with launches")
            pr = ctx.report(parents[0].path)
            check(diag(pr, "no_end_chunk") is None and diag(pr, "truncated_trace") is None,
                  "the parent's trace is not whole")
            if child_launches == 0:
                check(not children, f"{len(children)} trace files from children that made no CUDA call")
            else:
                check(len(children) == 200, f"{len(children)} child traces, expected 200")
                bad = [(t.path, launches(t)) for t in children if launches(t) != child_launches]
                check(not bad, f"child traces without exactly {child_launches} launches: {bad[:3]}")
    print(f"fork_storm: {runs} of {runs} jobs ended (200 forks each beside a launching thread)")


def case_fork_exit(ctx):
    fork_case(ctx, "exit")


def case_fork_underscore_exit(ctx):
    fork_case(ctx, "_exit")


def case_fork_exec(ctx):
    """fork + exec of a CUDA child: traced too, in its own file; the report
    over the folder works with several files."""
    n = 120
    proc, out, err = run_unless_hung(ctx, [ctx.job, "fork_exec", str(n)], "fork_exec")
    check(proc.returncode == 0, f"job exited {proc.returncode}: {err[-2000:]}")
    check(out == "simple done\nfork_exec child status 0\n", f"output {out!r}")
    ts = ctx.traces()
    check(len(ts) == 2, f"expected two trace files, found {[t.path for t in ts]}")
    parent = [t for t in ts if t.pid == proc.pid]
    child = [t for t in ts if t.pid != proc.pid]
    check(len(parent) == 1 and len(child) == 1, "one parent and one child file expected")
    check(child[0].ppid == proc.pid, f"child's ppid {child[0].ppid}")
    check(launches(parent[0]) == 2 * n, f"parent launches {launches(parent[0])}")
    check(launches(child[0]) == n, f"child launches {launches(child[0])}")
    rep = ctx.report(ctx.out)
    check(diag(rep, "multiple_processes"), "report over two files does not say so")


# ---- signals --------------------------------------------------------------

def run_until_signal(ctx, sig, traced, handler, delay=0.6):
    extra = {"RB_HANDLER": "1"} if handler else {}
    proc = subprocess.Popen([ctx.job, "signal", "100"], env=ctx.env(traced, extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    check(line == "ready\n", f"job said {line!r}")
    time.sleep(delay)
    proc.send_signal(sig)
    rest, err = proc.communicate(timeout=60)
    return proc.returncode, line + rest, err


def signal_case(ctx, sig, handler):
    rc_bare, out_bare, _ = run_until_signal(ctx, sig, False, handler)
    rc, out, err = run_until_signal(ctx, sig, True, handler)
    check(rc == rc_bare, f"exit status {rc} under stallscope, {rc_bare} without")
    check(out == out_bare, f"output changed: {out_bare!r} vs {out!r}")
    if handler:
        expect = 41 if sig == signal.SIGTERM else 40
        check(rc == expect, f"the job's handler did not run: status {rc}")
    else:
        check(rc == -sig, f"status {rc}, expected death by signal {sig}")
    t = one_trace(ctx)
    check(launches(t) >= 100, f"{launches(t)} launches on disk, expected at least the 100 before 'ready'")
    rep = ctx.report(ctx.out)
    if not handler:
        check(diag(rep, "no_end_chunk") or diag(rep, "truncated_trace"), "killed job's trace not marked")
    else:
        check(diag(rep, "no_end_chunk") is None, "a job that exited normally left no end chunk")


def case_sigterm_handler(ctx):
    signal_case(ctx, signal.SIGTERM, True)


def case_sigint_handler(ctx):
    signal_case(ctx, signal.SIGINT, True)


def case_sigterm_default(ctx):
    signal_case(ctx, signal.SIGTERM, False)


# ---- dlclose ----------------------------------------------------------------

def case_dlreopen(ctx):
    prog = os.path.join(ctx.build, "bin", "rb_dlopen")
    n = 100
    bare = ctx.run([prog, str(n)], traced=False)
    p = ctx.run([prog, str(n)])
    expect_ok(bare, "bare")
    expect_ok(p)
    check(p.stdout == bare.stdout == "dlreopen done\n", f"output {bare.stdout!r} / {p.stdout!r}")
    t = one_trace(ctx)
    check(launches(t) == 2 * n, f"{launches(t)} launches recorded, expected {2 * n}")


# ---- CUPTI ------------------------------------------------------------------

def cupti_state(ctx, extra=None, libpath=None, preload_extra=None):
    env_extra = dict(extra or {})
    if preload_extra:
        env_extra["LD_PRELOAD"] = ctx.preload + ":" + preload_extra
    p = ctx.run([ctx.job, "simple", "200"], extra=env_extra, libpath=libpath)
    expect_ok(p)
    check(p.stdout == "simple done\n", f"output {p.stdout!r}")
    return ctx.report(ctx.out)


def case_cupti_absent(ctx):
    rep = cupti_state(ctx, {"STALLSCOPE_NO_CUPTI": "1"})
    check(diag(rep, "cupti_unavailable"), f"no cupti_unavailable: {rep['diagnostics']}")
    check(rep["totals"]["launches"] == 200, f"launches {rep['totals']['launches']}")


def case_cupti_bad_path(ctx):
    rep = cupti_state(ctx, {"STALLSCOPE_CUPTI_PATH": os.path.join(ctx.work, "nonexistent", "libcupti.so.13")})
    check(diag(rep, "cupti_unavailable"), f"no cupti_unavailable: {rep['diagnostics']}")


def wheel_tree(ctx):
    """A driver-only library dir and a fake environment whose site-packages
    holds the simulated CUPTI where the nvidia-cuda-cupti wheel puts it."""
    drv = os.path.join(ctx.work, "drv")
    os.makedirs(drv)
    os.symlink(os.path.join(ctx.simgpu, "libcuda.so.1"), os.path.join(drv, "libcuda.so.1"))
    venv = os.path.join(ctx.work, "venv")
    site = os.path.join(venv, "lib", "python3.12", "site-packages")
    lib = os.path.join(site, "nvidia", "cuda_cupti", "lib")
    os.makedirs(lib)
    os.symlink(os.path.join(ctx.simgpu, "libcupti.so.13"), os.path.join(lib, "libcupti.so.13"))
    return drv, venv, site


def check_device_times(rep):
    check(diag(rep, "cupti_unavailable") is None, f"CUPTI not found: {rep['diagnostics']}")
    check(diag(rep, "no_device_ops") is None, "no device ops: the simulated CUPTI was not used")
    check(rep["totals"]["gpu_busy_ns"] > 0, "no GPU busy time")


def case_cupti_wheel_env(ctx):
    drv, venv, _ = wheel_tree(ctx)
    check_device_times(cupti_state(ctx, {"VIRTUAL_ENV": venv}, libpath=drv))
    shutil.rmtree(ctx.out)
    check_device_times(cupti_state(ctx, {"PYTHONPATH": os.path.join(venv, "lib", "python3.12", "site-packages")},
                                   libpath=drv))


def case_cupti_wheel_loaded(ctx):
    """A loaded .../site-packages/torch/lib/libtorch_cuda.so implies
    .../site-packages/nvidia/cuda_cupti/lib (found via dl_iterate_phdr)."""
    drv, _, site = wheel_tree(ctx)
    torch_lib = os.path.join(site, "torch", "lib")
    os.makedirs(torch_lib)
    fake = os.path.join(torch_lib, "libtorch_cuda.so")
    os.symlink(os.path.join(ctx.simgpu, "libcudart.so.13"), fake)
    check_device_times(cupti_state(ctx, libpath=drv, preload_extra=fake))


def cupti_job(ctx, mode):
    p = ctx.run([ctx.job, "cupti", mode, "400"])
    expect_ok(p)
    return p, ctx.report(ctx.out)


def case_cupti_steal(ctx):
    """The job registers its own CUPTI buffers after 400 launches: the
    records go to the job, stallscope says its records stopped."""
    p, rep = cupti_job(ctx, "steal")
    check("own buffers received: yes" in p.stdout, f"the job's CUPTI client got nothing: {p.stdout!r}")
    d = diag(rep, "cupti_records_stopped")
    check(d and d["count"] >= 1000, f"no cupti_records_stopped (>= 1000): {rep['diagnostics']}")


def case_cupti_disable(ctx):
    """The job disables the kernel activity kind after 400 launches: CUPTI
    still acknowledges the submissions, their device records never come;
    at exit that reads like work still queued, and the diagnostic names
    both (not "another profiler took the buffers")."""
    _, rep = cupti_job(ctx, "disable")
    d = diag(rep, "device_records_missing_at_exit")
    check(d and d["count"] >= 1000, f"no device_records_missing_at_exit (>= 1000): {rep['diagnostics']}")
    check(diag(rep, "cupti_records_stopped") is None, f"cupti_records_stopped: {rep['diagnostics']}")


def case_cupti_inflight(ctx):
    """The job exits with 400 kernels still queued (no final synchronize):
    their device records never come, and the report says so as work in
    flight at exit, not as another profiler taking CUPTI's buffers."""
    p = ctx.run([ctx.job, "inflight", "400"], extra={"SIMGPU_KERNEL_US": "inflight=2000,*=2"})
    expect_ok(p)
    rep = ctx.report(ctx.out)
    check(diag(rep, "cupti_records_stopped") is None, f"cupti_records_stopped: {rep['diagnostics']}")
    d = diag(rep, "device_records_missing_at_exit")
    check(d is not None and d["count"] >= 256, f"no device_records_missing_at_exit: {rep['diagnostics']}")
    print(f"cupti_inflight: {d['count']} submissions without a device record at exit")


def case_cupti_kept(ctx):
    """Control: same job without a CUPTI client of its own."""
    _, rep = cupti_job(ctx, "none")
    check(diag(rep, "cupti_records_stopped") is None, f"false cupti_records_stopped: {rep['diagnostics']}")
    check_device_times(rep)


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def test_case(case, build, work):
    checks.run(CASES[case], Ctx(build, work))


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
