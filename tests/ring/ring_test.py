#!/usr/bin/env python3
"""The flight recorder (`stallscope run --ring`, STALLSCOPE_RING): nothing is
written until a trigger, and each dump is an ordinary trace file holding the
last seconds of the run.

Each case runs examples/train_loop (or a Python job) on the simulated GPU
under `stallscope run --sim --ring W` and checks, against what the files
themselves record:

- the job's output is what it prints without stallscope;
- every dump reads, and `stallscope report` analyzes it;
- the regression trigger dumps where the rule, applied to the step times
  the files hold, says it should;
- a dump holds the end of the run up to its trigger (its last step range is
  the last step before the trigger), and no more than the window: the ring
  keeps whole drains (each writes a clock reading), those taken at most W
  before the trigger, so its first drain's reading is at most W plus the
  longest gap between the file's drains before its last host record (the
  trigger). Its records may begin earlier than that reading by the gap
  before the first drain kept, which the file cannot show: the drain
  before it was dropped, and a loaded machine can delay a drain far past
  the gaps it shows. When the ring dropped the run's first steps, the dump
  spans at least W less the longest gap.

    ring_test.py --build DIR --case NAME     (ring_test.py --list)
"""
import ctypes
import glob
import json
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import Failure, Skip, check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = "*=50"  # each of train_loop's six kernels a step 50 us on the simulated GPU


def exe(build, name):
    path = os.path.join(build, "bin", name)
    if not os.path.exists(path):
        raise Skip(f"bin/{name} not built")
    return path


def env(**extra):
    e = dict(os.environ, SIMGPU_KERNEL_US=KERNELS, PYTHONPATH=os.path.join(ROOT, "python"))
    e.pop("STALLSCOPE_RING", None)
    e.update(extra)
    return e


def clock_gaps(path):
    """The mono_ns of the file's kClock readings (one per drain; raw 24-byte
    records, never compressed: too small)."""
    b = open(path, "rb").read()
    off = struct.unpack_from("<I", b, 12)[0]
    monos = []
    while off + 24 <= len(b):
        _, typ, enc, _, count, size, _ = struct.unpack_from("<IHHIIII", b, off)
        if typ == 8 and enc == 0:
            for k in range(count):
                monos.append(struct.unpack_from("<QQQ", b, off + 24 + 24 * k)[1])
        off += 24 + size
    monos.sort()
    return monos


def read_dump(build, path):
    p = subprocess.run([exe(build, "stallscope"), "dump", path, "--format", "json"], capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 0, f"stallscope dump {path} exited {p.returncode}: {p.stderr[-1000:]}")
    d = json.loads(p.stdout)
    return d, report_json(build, path)


def report_json(build, path):
    r = subprocess.run([exe(build, "stallscope"), "report", path, "--format", "json", "--no-predict"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"stallscope report {path} exited {r.returncode}: {r.stderr[-1000:]}")
    return json.loads(r.stdout)


def step_ranges(d):
    out = []
    for r in d["ranges"]:
        name = r.get("name", "")
        if name.startswith("step "):
            out.append((int(name.split()[1]), r["start_ns"], r["end_ns"]))
    return sorted(out)


def check_window(build, path, window_s, last_step):
    """The dump at `path` reads, ends with step `last_step` and spans the
    window (see the module's docstring)."""
    d, report = read_dump(build, path)
    steps = step_ranges(d)
    check(steps, f"{path}: no step ranges")
    check(steps[-1][0] == last_step, f"{path}: last step {steps[-1][0]}, expected {last_step}")
    check(report["steps"], f"{path}: the report found no steps")
    monos = clock_gaps(path)
    check(len(monos) >= 2, f"{path}: {len(monos)} clock readings")
    drain = max(b - a for a, b in zip(monos[1:], monos[2:])) if len(monos) > 2 else monos[-1] - monos[0]
    # The window ends at the trigger: the job's last host record before it,
    # which may come well after the last step (at exit, the job's final wait
    # for a device that ran behind it).
    end = max([c["exit_ns"] for c in d["calls"]] + [r["end_ns"] for r in d["ranges"]])
    span = end - steps[0][1]
    window = window_s * 1e9
    print(f"{os.path.basename(path)}: steps {steps[0][0]}..{steps[-1][0]}, span {span / 1e6:.0f} ms (the steps' "
          f"{(steps[-1][2] - steps[0][1]) / 1e6:.0f} ms), window {window / 1e6:.0f} ms, longest drain gap "
          f"{drain / 1e6:.0f} ms")
    kept = end - monos[1]  # from the first drain held (monos[0]: the run's first clock pair, always kept)
    check(kept <= window + drain, f"{path}: its first drain {kept / 1e6:.0f} ms before its end, over the window "
          f"{window / 1e6:.0f} ms + {drain / 1e6:.0f} ms")
    if steps[0][0] > 0:  # the ring dropped the first steps: it was full
        check(span >= window - drain, f"{path}: span {span / 1e6:.0f} ms, under the window {window / 1e6:.0f} "
              f"ms less {drain / 1e6:.0f} ms")
    return steps


def bare_output(build, args):
    p = subprocess.run([exe(build, "train_loop")] + args, capture_output=True, text=True, timeout=300,
                       env=dict(env(), LD_LIBRARY_PATH=os.path.join(build, "lib", "simgpu")))
    check(p.returncode == 0, f"train_loop {args} without stallscope exited {p.returncode}: {p.stderr[-1000:]}")
    return p.stdout


def job_pid(run_pid, timeout=30):
    """The job `stallscope run` started (its one child)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            kids = open(f"/proc/{run_pid}/task/{run_pid}/children").read().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.01)
    raise Failure("stallscope run started no job")


def case_signal_and_exit(build, work):
    """SIGUSR2 mid-run, then the job's exit: two dumps, each the last
    second before its trigger."""
    out = os.path.join(work, "trace")
    steps, window = 12000, 1.0
    args = ["--steps", str(steps)]
    cmd = [exe(build, "stallscope"), "run", "--sim", "-q", "--ring", str(window), "--out", out, "--",
           exe(build, "train_loop")] + args
    p = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = job_pid(p.pid)
    time.sleep(2.0)
    os.kill(pid, signal.SIGUSR2)
    stdout, stderr = p.communicate(timeout=300)
    check(p.returncode == 0, f"the job exited {p.returncode}: {stderr[-2000:]}")
    check(stdout == bare_output(build, args), f"output {stdout!r} differs from the job's own")
    files = sorted(glob.glob(os.path.join(out, "*.sstrace")), key=os.path.getmtime)
    check(len(files) == 2, f"expected two dumps (the signal's, the exit's), found {files}")
    # The signal's dump: the steps up to the signal (the writer answers
    # within its wait of 200 ms), never the last one.
    d, _ = read_dump(build, files[0])
    first = step_ranges(d)
    check(first and first[-1][0] < steps - 1, f"{files[0]}: holds the run's last step")
    check_window(build, files[0], window, first[-1][0])
    check(check_window(build, files[1], window, steps - 1)[0][0] > 0, "the exit's dump holds the whole run")
    # The folder: the two dumps are one process, so the report is the
    # exit's dump's, and the signal's is named as left out (not a second
    # process).
    folder = report_json(build, out)
    names = {x["name"]: x for x in folder["diagnostics"]}
    check("multiple_processes" not in names, f"the dumps read as several processes: {names.get('multiple_processes')}")
    left = names.get("earlier_dumps")
    check(left is not None and left["count"] == 1 and os.path.basename(files[0]) in left["message"]
          and os.path.basename(files[1]) not in left["message"], f"earlier_dumps: {left}")
    alone = report_json(build, files[1])
    check(folder["steps"] == alone["steps"], "the folder's steps are not the exit dump's")


def check_compressed_at_dump(build, path):
    """The ring holds its records, CPU samples and NVTX events packed but not
    compressed, and a dump compresses what it writes, where libzstd.so.1
    loads: every such chunk of 256 bytes or more is compressed (a loop's
    packed records shrink several times; smaller chunks are written as
    they are)."""
    try:
        ctypes.CDLL("libzstd.so.1")
    except OSError:
        return
    p = subprocess.run([exe(build, "stallscope"), "dump", path, "--chunks", "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"dump --chunks exited {p.returncode}: {p.stderr[-1000:]}")
    windowed = [c for c in json.loads(p.stdout)["chunks"]
                if c["type"] in ("api", "device", "correlation", "cpu-sched", "nvtx")]
    check(any("zstd" in c["encoding"] for c in windowed), f"{path}: no record chunk compressed")
    plain = [c for c in windowed if "zstd" not in c["encoding"] and c["payload_bytes"] >= 256]
    check(not plain, f"{path}: {len(plain)} of {len(windowed)} record chunks not compressed, e.g. {plain[:2]}")


def case_api(build, work):
    """stallscope_dump() from the job (train_loop --dump-at): a dump that
    ends with the step it was asked after; and without --ring the call is
    refused and the run traced whole."""
    out = os.path.join(work, "trace")
    args = ["--steps", "400", "--dump-at", "150"]
    cmd = [exe(build, "stallscope"), "run", "--sim", "-q", "--ring", "30", "--out", out, "--",
           exe(build, "train_loop")] + args
    p = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"the job exited {p.returncode}: {p.stderr[-2000:]}")
    check("dump after step 150: written" in p.stdout, f"output {p.stdout!r}")
    bare = bare_output(build, args)
    check(p.stdout.replace("written", "no stallscope") == bare, f"output {p.stdout!r}, without stallscope {bare!r}")
    files = sorted(glob.glob(os.path.join(out, "*.sstrace")), key=os.path.getmtime)
    check(len(files) == 2, f"expected two dumps (the call's, the exit's), found {files}")
    steps = check_window(build, files[0], 30, 150)
    check(steps[0][0] == 0, f"the whole run fits the 30 s window: starts at step {steps[0][0]}")
    check_window(build, files[1], 30, 399)
    # The second dump writes the chunks the first compressed and the ones
    # held since.
    for f in files:
        check_compressed_at_dump(build, f)
    # Without the ring: refused, and the trace is the usual one.
    out2 = os.path.join(work, "whole")
    p = subprocess.run([exe(build, "stallscope"), "run", "--sim", "-q", "--out", out2, "--",
                        exe(build, "train_loop")] + args, env=env(), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and "dump after step 150: refused" in p.stdout, f"without --ring: {p.stdout!r}")
    whole = glob.glob(os.path.join(out2, "*.sstrace"))
    check(len(whole) == 1, f"without --ring: {whole}")
    check(step_ranges(read_dump(build, whole[0])[0])[-1][0] == 399, "without --ring: not the whole run")


def case_python(build, work):
    """stallscope.dump() from Python: False before the recorder started
    (no CUDA call yet), True once it has (a cuCtxSynchronize through
    ctypes), False without --ring; the dump reads."""
    script = os.path.join(work, "job.py")
    with open(script, "w") as f:
        f.write("import ctypes, stallscope\n"
                "before = stallscope.dump()\n"
                "cuda = ctypes.CDLL('libcuda.so.1')\n"
                "dev, ctx = ctypes.c_int(), ctypes.c_void_p()\n"
                "assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0\n"
                "assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0\n"
                "assert cuda.cuCtxSetCurrent(ctx) == 0 and cuda.cuCtxSynchronize() == 0\n"
                "print(before, stallscope.dump())\n")
    for ring, want in ((["--ring", "10"], "False True"), ([], "False False")):
        out = os.path.join(work, "trace" + ("-ring" if ring else ""))
        p = subprocess.run([exe(build, "stallscope"), "run", "--sim", "-q"] + ring + ["--out", out, "--",
                           sys.executable, script], env=env(), capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"{ring}: exited {p.returncode}: {p.stderr[-2000:]}")
        check(p.stdout.strip() == want, f"{ring}: printed {p.stdout.strip()!r}, expected {want!r}")
        files = glob.glob(os.path.join(out, "*.sstrace"))
        check(len(files) == (2 if ring else 1), f"{ring}: files {files}")
        for path in files:
            d, _ = read_dump(build, path)
            check(any(c["api"] == "cuCtxSynchronize" for c in d["calls"]), f"{path}: no cuCtxSynchronize call")


def regression_triggers(begins, k, m, n, history=64, min_history=8):
    """The steps whose begin the regression rule (common/step_regression.h)
    fires at, from the step begins in order: a step is slow when it took over
    k x the median (the upper middle one) of the at most `history` steps
    before it; m slow in a row fire, at most n times, and after a firing m
    steps in a row that are not slow re-arm it."""
    times, fired = [], []
    slow_run = normal_run = 0
    armed = True
    for i in range(1, len(begins)):
        t = begins[i][1] - begins[i - 1][1]
        if len(times) >= min_history:
            window = sorted(times[-history:])
            slow = t > k * window[len(window) // 2]
            slow_run, normal_run = (slow_run + 1, 0) if slow else (0, normal_run + 1)
            if not armed and normal_run >= m:
                armed = True
            if armed and slow_run >= m and len(fired) < n:
                fired.append(begins[i][0])
                armed = False
        times.append(t)
    return fired


def case_regression(build, work):
    """The step-time regression trigger: train_loop's input slows 6-fold
    from step 150 (--slow-from). The rule, applied to the step begins the
    exit's dump holds (the whole run: the window is 30 s), says at which
    steps the recorder should have dumped; there is one dump for each, in
    order, ending after the slow steps that fired it, and its diagnostics
    count it. The job's output is its own."""
    out = os.path.join(work, "trace")
    args = ["--steps", "300", "--input-us", "500", "--slow-from", "150", "--slow-input-us", "3000"]
    cmd = [exe(build, "stallscope"), "run", "--sim", "-q", "--ring", "30", "--ring-regression", "2:3",
           "--out", out, "--", exe(build, "train_loop")] + args
    p = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"the job exited {p.returncode}: {p.stderr[-2000:]}")
    def own(text):  # less the times the job measured of its own waits
        return [line for line in text.splitlines() if not line.startswith("scaled_")]
    check(own(p.stdout) == own(bare_output(build, args)), f"output {p.stdout!r} differs from the job's own")
    files = sorted(glob.glob(os.path.join(out, "*.sstrace")), key=os.path.getmtime)
    check(files, "no dump at all")
    whole, report = read_dump(build, files[-1])
    steps = step_ranges(whole)
    check(len(steps) == 300 and steps[0][0] == 0, f"the exit's dump holds steps {steps[0][0]}..{steps[-1][0]}")
    fired = regression_triggers([(n, start) for n, start, _ in steps], 2.0, 3, 8)
    print(f"the rule fires at steps {fired}; dumps: {[os.path.basename(f) for f in files]}")
    check(fired, "the job's own step times never regressed (is --slow-from working?)")
    check(len(files) == len(fired) + 1, f"{len(files) - 1} regression dumps, the rule fires {len(fired)} times")
    counted = next((d["count"] for d in report["diagnostics"] if d["name"] == "ring_regression_dumps"), 0)
    check(counted == len(fired), f"ring_regression_dumps {counted}, expected {len(fired)}")
    for path, step in zip(files, fired):
        d, rep = read_dump(build, path)
        held = step_ranges(d)
        check(held and held[-1][0] >= step - 1, f"{path}: its last whole step is {held[-1][0] if held else None}, "
              f"but step {step} began when the rule fired")
        check(held[-1][0] < 299, f"{path}: holds the run's last step: not dumped when the steps regressed")
        check(rep["steps"], f"{path}: the report found no steps")


def case_device_sample(build, work):
    """The ring with device timing on for one step in 5 (--device-sample 5),
    dumped at exit after the ring dropped the run's start: in the dump, every
    submission of step K (the job's own number, from its NVTX range) is timed
    (no untimed flag, a device op joined) when K mod 5 is 0 or 4, and untimed
    (flagged, no op) otherwise, the dump carrying the turn made before its
    window; the report keeps exactly the steps K mod 5 == 0 it holds, each
    with its idle and the device work it submitted."""
    out = os.path.join(work, "trace")
    every, steps = 5, 6000
    cmd = [exe(build, "stallscope"), "run", "--sim", "-q", "--ring", "0.5", "--device-sample", str(every),
           "--out", out, "--", exe(build, "train_loop"), "--steps", str(steps)]
    p = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"the job exited {p.returncode}: {p.stderr[-2000:]}")
    files = glob.glob(os.path.join(out, "*.sstrace"))
    check(len(files) == 1, f"expected the exit's dump, found {files}")
    d, report = read_dump(build, files[0])
    ranges = step_ranges(d)
    check(ranges and ranges[0][0] > every, f"the ring kept the run's start: steps from {ranges[0][0] if ranges else None}")
    turns = d["device_timing"]
    check(turns and turns[0]["ns"] < ranges[0][1], f"no timing turn before the window's first step: {turns[:2]}")
    check(all(t["every"] == every for t in turns), f"turns with another period: {turns[:4]}")
    calls = sorted((c for c in d["calls"] if c["correlation"] != 0), key=lambda c: c["enter_ns"])
    i = 0
    for k, start, end in ranges:
        while i < len(calls) and calls[i]["enter_ns"] < start:
            i += 1
        mine = []
        while i < len(calls) and calls[i]["enter_ns"] < end:
            mine.append(calls[i])
            i += 1
        check(mine, f"step {k}: no submissions in the dump")
        timed = k % every in (0, every - 1)
        for c in mine:
            untimed = bool(c["flags"] & 2)
            check(untimed != timed and (c["ops"] > 0) == timed,
                  f"step {k} ({'timed' if timed else 'untimed'}): {c['api']} flags {c['flags']}, {c['ops']} ops")
    got = [ranges[st["index"]][0] for st in report["steps"]]
    want = [k for k, _, _ in ranges if k % every == 0]
    check(got == want, f"reported steps {got[:6]}..., expected {want[:6]}...")
    names = {x["name"]: x for x in report["diagnostics"]}
    check(names.get("device_timing_sampled", {}).get("count") == len(want),
          f"device_timing_sampled: {names.get('device_timing_sampled')}")
    for st in report["steps"]:
        check(st["launches"] > 0 and st["end_ns"] > st["start_ns"], f"step {st['index']}: {st}")


def case_names_follow_window(build, work):
    """A step's own name ("step N", new every step) is forgotten once the
    ring holds nothing that names it: the exit's dump names every range it
    holds, and its string table holds the names its records use plus at
    most the recorder's compaction batch (4,096 new names between
    compactions, libinterpose/recorder.cc), not every step's name of the
    run."""
    out = os.path.join(work, "trace")
    steps, window = 40000, 0.2
    cmd = [exe(build, "stallscope"), "run", "--sim", "-q", "--ring", str(window), "--out", out, "--",
           exe(build, "train_loop"), "--steps", str(steps)]
    p = subprocess.run(cmd, env=env(SIMGPU_KERNEL_US="*=2"), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"the job exited {p.returncode}: {p.stderr[-2000:]}")
    files = glob.glob(os.path.join(out, "*.sstrace"))
    check(len(files) == 1, f"expected the exit's dump, found {files}")
    d, _ = read_dump(build, files[0])
    ranges = step_ranges(d)
    check(ranges and ranges[-1][0] == steps - 1, f"the dump's last step is not the run's: {ranges[-1:]}")
    pushes = [e for e in d["nvtx"] if e["type"] == 1]  # trace::NvtxType kPush
    check(pushes, "no NVTX pushes in the dump")
    unnamed = [e for e in pushes if not e["name"].startswith("step ")]
    check(not unnamed, f"{len(unnamed)} of {len(pushes)} pushes without their name, e.g. {unnamed[:2]}")
    used = {e["name"] for e in d["nvtx"] if e["name"]} | {o["name"] for o in d["ops"] if o["name"]}
    chunks = subprocess.run([exe(build, "stallscope"), "dump", files[0], "--chunks", "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    check(chunks.returncode == 0, f"dump --chunks exited {chunks.returncode}: {chunks.stderr[-1000:]}")
    held = sum(c["count"] for c in json.loads(chunks.stdout)["chunks"] if c["type"] == "string")
    print(f"{steps} steps; the dump holds steps {ranges[0][0]}..{ranges[-1][0]}, {len(used)} names used, "
          f"{held} strings")
    check(ranges[0][0] > 4096 + len(used), "the window held most of the run: the test shows nothing")
    check(held <= len(used) + 4096, f"the dump holds {held} strings for {len(used)} names its records use")


def case_names_forgotten_when_written(build, work):
    """Writing the whole trace, a step's own name is forgotten once every
    record naming it is in the file, and gets a new id when it comes back:
    the recorder's table follows the names in use, not every step's name of
    the run. With names repeating every 10,000 steps over 40,000, the file
    holds more string entries than the 10,000 names (a recorder that kept
    them all would hold each once), and every push is named as the job
    named it."""
    out = os.path.join(work, "trace")
    steps, period = 40000, 10000
    cmd = [exe(build, "stallscope"), "run", "--sim", "-q", "--out", out, "--",
           exe(build, "train_loop"), "--steps", str(steps), "--name-period", str(period)]
    p = subprocess.run(cmd, env=env(SIMGPU_KERNEL_US="*=2"), capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"the job exited {p.returncode}: {p.stderr[-2000:]}")
    files = glob.glob(os.path.join(out, "*.sstrace"))
    check(len(files) == 1, f"expected one trace, found {files}")
    d, _ = read_dump(build, files[0])
    pushes = [e for e in d["nvtx"] if e["type"] == 1]  # trace::NvtxType kPush
    check(len(pushes) == steps, f"{len(pushes)} pushes for {steps} steps")
    wrong = [(i, e["name"]) for i, e in enumerate(pushes) if e["name"] != f"step {i % period}"]
    check(not wrong, f"{len(wrong)} pushes not named as the job named them, e.g. {wrong[:3]}")
    chunks = subprocess.run([exe(build, "stallscope"), "dump", files[0], "--chunks", "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    check(chunks.returncode == 0, f"dump --chunks exited {chunks.returncode}: {chunks.stderr[-1000:]}")
    held = sum(c["count"] for c in json.loads(chunks.stdout)["chunks"] if c["type"] == "string")
    others = len({o["name"] for o in d["ops"] if o["name"]})
    print(f"{steps} steps named with {period} names: {held} strings in the file ({others} kernel names)")
    check(held > period + others + 4096,
          f"{held} strings for {period} step names and {others} kernel names: none was forgotten and named again")


def case_bad_spec(build, work):
    """A window that is neither seconds nor megabytes: a one-line usage
    error, and the job does not run."""
    p = subprocess.run([exe(build, "stallscope"), "run", "--sim", "--ring", "ten", "--out",
                        os.path.join(work, "t"), "--", "true"], env=env(), capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 1, f"exited {p.returncode}")
    check("--ring" in p.stderr and "SECONDS" in p.stderr, f"stderr {p.stderr!r}")
    for bad in ("2", "1:3", "2:0", "off:3"):
        p = subprocess.run([exe(build, "stallscope"), "run", "--sim", "--ring", "10", "--ring-regression", bad,
                            "--out", os.path.join(work, "t"), "--", "true"], env=env(), capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 1 and "--ring-regression" in p.stderr.splitlines()[0] and "K:M" in p.stderr,
              f"--ring-regression {bad}: exited {p.returncode}, stderr {p.stderr!r}")


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
