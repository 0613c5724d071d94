#!/usr/bin/env python3
"""python/stallscope/fleet.py on a Dask LocalCluster against the serial path.

A 16-rank job of examples/ddp_train (one slow rank) runs under
`stallscope run --sim`; its 16 traces are then moved into 16 folders, one per
rank, as when each node of a cluster writes its own. Checks:
  - `python3 -m stallscope.fleet F0..F15 --format json` (2 worker processes)
    writes the same bytes as `stallscope report F0..F15 --format json`, and
    the text format too;
  - that report has 16 ranks[] and names the slow rank the straggler;
  - --budget runs the audit after the report, with its exit code;
  - a trace the binary cannot read fails the run with the binary's exit code
    and a message naming that trace.
Skips (exit 77) when scripts/setup-dask made no environment (PyPI
unreachable) or ddp_train was not built."""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH = os.path.join(ROOT, "scripts", "launch-ranks")
SKIP = 77
WORLD, STEPS, SLOW_RANK = 16, 8, 5
# On two shared cores 16 processes arrive tens of ms apart by scheduling
# alone; the slow rank's delay must stand out of that.
SLOW_US = 50_000


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from checks import Failure, check  # noqa: E402


def run(cmd, env, timeout=180, ok=True, cwd=None):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if ok and p.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-3000:]}")
    return p


def make_rank_folders(build, work):
    """Runs the job and moves rank r's trace into work/node{r}/; returns the
    folders in rank order."""
    env = dict(os.environ)
    env["SIMGPU_KERNEL_US"] = "*gemm_fwd*=400,*gemm_bwd*=300,*=20"
    out = os.path.join(work, "job")
    run([os.path.join(build, "bin", "stallscope"), "run", "--sim", "-q", "--out", out, "--",
         LAUNCH, "-n", str(WORLD), "--", os.path.join(build, "bin", "ddp_train"),
         "--steps", str(STEPS), "--buckets", "2", "--grad-bytes", str(2 << 20),
         "--slow-rank", str(SLOW_RANK), "--slow-us", str(SLOW_US)], env)
    traces = sorted(glob.glob(os.path.join(out, "*.sstrace")))
    check(len(traces) == WORLD, f"expected {WORLD} traces, got {traces}")
    folders = []
    for r, trace in enumerate(traces):  # rank-named: rank00000..., sorted by rank
        folder = os.path.join(work, f"node{r}")
        os.mkdir(folder)
        shutil.move(trace, folder)
        folders.append(folder)
    return folders


def fleet(py, build, folders, args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    return subprocess.run([py, "-m", "stallscope.fleet"] + folders +
                          ["--workers", "2", "--stallscope", os.path.join(build, "bin", "stallscope")]
                          + args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    venv = os.environ.get("STALLSCOPE_DASK_VENV", os.path.join(ROOT, "build", "dask-venv"))
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py) or subprocess.run([py, "-c", "import dask.distributed"],
                                                capture_output=True).returncode != 0:
        print(f"skipped: no Dask environment at {venv} "
              "(scripts/setup-dask makes it when PyPI is reachable)")
        return SKIP
    if not os.path.exists(os.path.join(build, "bin", "ddp_train")):
        print("skipped: ddp_train was not built")
        return SKIP
    work = tempfile.mkdtemp(prefix="stallscope-fleet-test-")
    try:
        folders = make_rank_folders(build, work)
        # Relative folder names, as a user types them: the workers get
        # absolute paths, the report does not depend on them.
        names = [os.path.basename(f) for f in folders]
        stallscope = os.path.join(build, "bin", "stallscope")
        env = dict(os.environ)
        for fmt in ("json", "text"):
            color = ["--color", "never"] if fmt == "text" else []
            serial = run([stallscope, "report"] + names + ["--format", fmt] + color, env, cwd=work)
            t0 = time.monotonic()
            out = os.path.join(work, f"fleet.{fmt}")
            p = fleet(py, build, names, ["--format", fmt, "-o", out], work)
            elapsed = time.monotonic() - t0
            check(p.returncode == 0, f"fleet exited {p.returncode}: {p.stderr[-3000:]}")
            with open(out) as f:
                got = f.read()
            check(got == serial.stdout,
                  f"{fmt}: fleet report differs from `stallscope report`:\n{got[:1500]}\n---\n"
                  f"{serial.stdout[:1500]}")
            check(os.stat(out).st_mode & 0o777 == 0o640, f"{out}: mode {oct(os.stat(out).st_mode)}")
            print(f"{fmt}: fleet over {len(names)} folders on 2 Dask workers = serial "
                  f"({len(got)} bytes, {elapsed:.1f} s)")
            if fmt == "json":
                got_json, report = got, json.loads(got)
        ranks = sorted(r["rank"] for r in report.get("ranks", []))
        check(ranks == list(range(WORLD)), f"ranks[] {ranks}")
        st = report["stragglers"]
        # The slow rank first (it caused the most wait); a rank the machine
        # made late too (two cores for 16 ranks) may follow it.
        check(st and st[0]["rank"] == SLOW_RANK, f"stragglers {st}, expected rank {SLOW_RANK} first")
        # -o never overwrites, as the binary's.
        p = fleet(py, build, names, ["--format", "json", "-o", os.path.join(work, "fleet.json")],
                  work)
        check(p.returncode != 0 and "fleet.json" in p.stderr, f"overwrote -o: {p.stderr}")
        # --budget: the audit over the same folders after the report; its exit
        # code (3: exceeded) and its JUnit file, as `stallscope audit` gives.
        budget = os.path.join(work, "budget.toml")
        with open(budget, "w") as f:
            f.write(f"min_steps = {STEPS * 100}\n")
        junit = os.path.join(work, "audit.xml")
        p = fleet(py, build, names, ["--format", "json", "-o", os.path.join(work, "b.json"),
                                     "--budget", budget, "--junit", junit], work)
        want = run([stallscope, "audit"] + names + ["--budget", budget], env, ok=False, cwd=work)
        check(p.returncode == want.returncode == 3,
              f"--budget: exit {p.returncode}, audit alone {want.returncode}: {p.stderr[-1000:]}")
        check(os.path.exists(junit) and "min_steps" in open(junit).read(), "--junit: no JUnit file")
        check(open(os.path.join(work, "b.json")).read() == got_json, "--budget: report differs")
        # Two traces of one process (as a flight recorder's dumps are; here a
        # copy: the same process and clock) and a rank with no trace: the
        # fleet's report names them as `report` does (earlier_dumps,
        # missing_ranks), byte for byte.
        dup = os.path.join(work, "dup")
        os.mkdir(dup)
        src = glob.glob(os.path.join(folders[3], "*.sstrace"))[0]
        shutil.copy(src, os.path.join(dup, "copy-" + os.path.basename(src)))
        some = [n for i, n in enumerate(names) if i != 5] + ["dup"]
        serial = run([stallscope, "report"] + some + ["--format", "json"], env, cwd=work)
        p = fleet(py, build, some, ["--format", "json"], work)
        check(p.returncode == 0, f"fleet with a copy and a missing rank exited {p.returncode}: {p.stderr[-3000:]}")
        check(p.stdout == serial.stdout, f"with a copy and a missing rank: fleet report differs from `stallscope "
              f"report`:\n{p.stdout[:1500]}\n---\n{serial.stdout[:1500]}")
        said = {d["name"]: d for d in json.loads(serial.stdout)["diagnostics"]}
        check("earlier_dumps" in said and "missing_ranks" in said and said["missing_ranks"]["count"] == 1,
              f"with a copy and a missing rank: diagnostics {sorted(said)}")
        # A broken trace: its name and the binary's message and exit code.
        bad = os.path.join(work, "broken")
        os.mkdir(bad)
        with open(os.path.join(bad, "rank00016.x.sstrace"), "wb") as f:
            f.write(b"not a trace")
        p = fleet(py, build, names[:2] + ["broken"], ["--format", "json"], work)
        want = run([stallscope, "report", "broken"], env, ok=False, cwd=work)
        check(p.returncode == want.returncode == 2,
              f"broken trace: exit {p.returncode} (report: {want.returncode})")
        check("rank00016.x.sstrace" in p.stderr and "not a stallscope trace" in p.stderr,
              f"broken trace: message {p.stderr[-1000:]}")
        print(f"16 ranks, straggler rank {st[0]['rank']} (last {st[0]['times_last']} times); "
              "a broken trace fails with its name")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
