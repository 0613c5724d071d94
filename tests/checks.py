"""The one test library of the runners under tests/ (e2e, frameworks,
distributed, robustness, scenarios, python, package), on pytest:

- Failure (a check that did not hold), Skip (the case cannot run here: a
  part not built, an environment missing) and check();
- run(): one case, once (no retry: the oracles come from the ground truth of
  that run), Skip or a returned SKIP becoming pytest's skip with its reason;
- main(): a runner's command line. `--list` prints its case names, one a
  line (CMake makes one test per name); `--build DIR --case NAME` runs that
  case through pytest (tests/conftest.py: the work folder, kept when the
  case fails) and exits 0, 1, or SKIP (77, CTest's SKIP_RETURN_CODE).

A runner is a module with CASES (name -> case) and a pytest test:

    def test_case(case, build, work):
        checks.run(CASES[case], build, work)

    if __name__ == "__main__":
        sys.exit(checks.main(CASES, __file__))

`python3 -m pytest tests/e2e/e2e.py --build build` runs all its cases,
`-k NAME` some of them.
"""
import argparse
import os
import sys

SKIP = 77
TESTS = os.path.dirname(os.path.abspath(__file__))


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def check_same_bytes(what, got, against, want):
    """`got` (what `what` printed) is `want` (`against`'s) byte for byte;
    else the failure names the first byte that differs, with 200 on each
    side of it."""
    if got == want:
        return
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    raise Failure(f"{what} differs from {against} at byte {at}: "
                  f"{got[max(0, at - 200):at + 200]!r} against {want[max(0, at - 200):at + 200]!r}")


def check_windowed_report(exe, trace, whole):
    """The report of `trace` with idle attributed one step at a time
    (`report --window-steps 1`, each window from the part of the trace it
    reads), and with idle attributed from the file by slices two steps at
    a time (`report --stream --window-steps 2`), is `whole`, the report
    over all steps at once, byte for byte. Without predictions, `report
    --stream` makes the whole report from slices of the file, the reading's
    diagnostics included: it is `report --no-predict`'s, byte for byte;
    and so is its HTML page, drawn from the file by slices again (the
    device ops, and the idle gaps as the analysis gives them). Its Perfetto
    export by slices holds the whole reading's events, and its SQLite
    database by slices the whole reading's rows."""
    import subprocess

    def report(flags, fmt="json"):
        p = subprocess.run([exe, "report", trace, "--format", fmt] + flags,
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"report {' '.join(flags)} exited {p.returncode}: {p.stderr[-2000:]}")
        return p.stdout

    no_predict = report(["--no-predict"])
    html = report(["--no-predict"], "html")
    for flags, want, fmt in ((["--window-steps", "1"], whole, "json"),
                             (["--stream", "--window-steps", "2"], whole, "json"),
                             (["--no-predict", "--stream", "--window-steps", "2"], no_predict, "json"),
                             (["--no-predict", "--stream", "--window-steps", "2"], html, "html")):
        check_same_bytes(f"report --format {fmt} " + " ".join(flags), report(flags, fmt), "the whole report", want)
    check_same_exports(exe, trace, ["--no-predict"], ["--no-predict", "--stream", "--window-steps", "2"])


def check_same_exports(exe, path, whole_flags, sliced_flags, env=None):
    """The Perfetto export and the SQLite database of `path` with
    `sliced_flags` (from the file by slices, or, where they cannot be made
    so, read whole) are those with `whole_flags`: the same events, in
    another order, and the rest of the document the same; the same rows,
    ids included."""
    import json
    import os
    import sqlite3
    import subprocess
    import tempfile
    what = f"of {path} with {' '.join(sliced_flags)}"

    def run(flags, fmt, out=None):
        p = subprocess.run([exe, "report", path, "--format", fmt] + (["-o", out] if out else []) + flags,
                           env=env, capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"report --format {fmt} {' '.join(flags)} exited {p.returncode}: {p.stderr[-2000:]}")
        return p.stdout

    exports = [json.loads(run(flags, "perfetto")) for flags in (whole_flags, sliced_flags)]
    events = [sorted(json.dumps(e, sort_keys=True) for e in x.pop("traceEvents")) for x in exports]
    check(events[0] == events[1], f"report --format perfetto {what}: {len(events[1])} events, "
          f"{len(set(events[1]) ^ set(events[0]))} differ from the whole reading's {len(events[0])}")
    check(exports[0] == exports[1], f"report --format perfetto {what}: the header differs from the whole reading's")
    with tempfile.TemporaryDirectory() as d:
        tables = []
        for i, flags in enumerate((whole_flags, sliced_flags)):
            out = os.path.join(d, f"{i}.db")
            run(flags, "sqlite", out)
            con = sqlite3.connect(out)
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            tables.append({n: sorted(repr(r) for r in con.execute(f"SELECT * FROM {n}")) for n in names})
            con.close()
        check(sorted(tables[1]) == sorted(tables[0]), f"report --format sqlite {what}: not the whole reading's tables")
        for n, rows in tables[0].items():
            got = tables[1].get(n, [])
            check(got == rows, f"report --format sqlite {what}: table {n}: {len(got)} rows, "
                  f"{len(set(got) ^ set(rows))} differ from the whole reading's {len(rows)}")


def check_folder_one_at_a_time(exe, folder, whole, env=None):
    """`report FOLDER` past --stream-above (0 here) reads the folder's
    traces one at a time, twice each, and lets each go once analyzed (a
    process that launched no NCCL kernel, past the limit itself, is
    reported from its file by slices instead): its JSON report is `whole`
    (the default report's, the folder held whole) byte for byte, and its
    HTML page the held folder's; and so without predictions (a trace too
    small to predict goes by slices only then). A folder of one trace is
    left to check_windowed_report. Its Perfetto export and SQLite database
    are the held folder's too (check_same_exports)."""
    import glob
    import os
    import subprocess
    if not os.path.isdir(folder) or len(glob.glob(os.path.join(folder, "*.sstrace"))) < 2:
        return

    def report(flags, fmt):
        p = subprocess.run([exe, "report", folder, "--format", fmt] + flags, env=env,
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"report {' '.join(flags)} exited {p.returncode}: {p.stderr[-2000:]}")
        return p.stdout

    # Without predictions too: a trace too small to predict is read whole
    # where predictions are asked.
    for fmt, flags, want in (("json", [], whole), ("html", [], report([], "html")),
                             ("json", ["--no-predict"], report(["--no-predict"], "json")),
                             ("html", ["--no-predict"], report(["--no-predict"], "html"))):
        check_same_bytes(f"report --format {fmt} {' '.join(flags)} --stream-above 0 of {folder}",
                         report(flags + ["--stream-above", "0"], fmt), "the folder held whole", want)
    # The exports: a distributed run's analyzed rank by slices, its NCCL
    # waits applied to each slice.
    check_same_exports(exe, folder, ["--no-predict"], ["--no-predict", "--stream-above", "0"], env)


def check_chunk_index(exe, trace):
    """`dump --chunks` (the index pass) of every trace file under `trace`:
    its chunks tile the file from the header on, and its record counts are
    the reader's calls and device ops (`dump`)."""
    import glob
    import json
    import os
    import subprocess
    files = sorted(glob.glob(os.path.join(trace, "*.sstrace"))) if os.path.isdir(trace) else [trace]
    check(files, f"no trace files under {trace}")
    for path in files:
        p = subprocess.run([exe, "dump", path, "--chunks", "--format", "json"],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"dump --chunks {path} exited {p.returncode}: {p.stderr[-2000:]}")
        index = json.loads(p.stdout)
        chunks = index["chunks"]
        check(chunks, f"{path}: no chunks")
        for a, b in zip(chunks, chunks[1:]):
            check(a["offset"] + 24 + a["payload_bytes"] == b["offset"],
                  f"{path}: chunk at {a['offset']} does not end where the next begins ({b['offset']})")
        end = chunks[-1]["offset"] + 24 + chunks[-1]["payload_bytes"]
        check(index["truncated"] or end == index["bytes"],
              f"{path}: the chunks end at {end}, the file at {index['bytes']}")
        p = subprocess.run([exe, "dump", path, "--format", "json"], capture_output=True, text=True,
                           timeout=300)
        check(p.returncode == 0, f"dump {path} exited {p.returncode}: {p.stderr[-2000:]}")
        d = json.loads(p.stdout)
        counts = {}
        for c in chunks:
            counts[c["type"]] = counts.get(c["type"], 0) + c["count"]
        check(counts.get("api", 0) == len(d["calls"]),
              f"{path}: {counts.get('api', 0)} calls in the api chunks, {len(d['calls'])} read")
        check(counts.get("device", 0) == len(d["ops"]),
              f"{path}: {counts.get('device', 0)} ops in the device chunks, {len(d['ops'])} read")


def check_ops_joined_to_their_threads(trace, truth):
    """Each device op the reader of a trace file (`trace`, a
    trace_dump.Trace) joined to a call is joined to a call of the thread
    that, in the simulator's ground truth (`truth`, its ops), submitted it.
    Ops are matched to the truth by stream and device times (the trace's
    clock conversion may move them by some nanoseconds; a stream's ops run
    one after another, so each matches one, or the check itself is broken)."""
    import bisect
    streams = {}
    for op in truth:
        streams.setdefault((op["device"], op["stream"]), []).append(op)
    starts = {}
    for key, ops in streams.items():
        ops.sort(key=lambda o: o["start_ns"])
        starts[key] = [o["start_ns"] for o in ops]
    slack = 100  # ns
    joined = matched = 0
    for op in trace.ops:
        if op["call"] < 0:
            continue
        joined += 1
        key = (op["device"], op["stream"])
        ops = streams.get(key, [])
        i = bisect.bisect_left(starts.get(key, []), op["start_ns"] - slack)
        same = [o for o in ops[i:i + 3] if abs(o["start_ns"] - op["start_ns"]) <= slack
                and abs((o["end_ns"] - o["start_ns"]) - (op["end_ns"] - op["start_ns"])) <= slack]
        if len(same) != 1:
            continue
        matched += 1
        call = trace.calls[op["call"]]
        check(call.tid == same[0]["tid"],
              f"{trace.path}: the op {op['name'] or op['kind']} at {op['start_ns']} ns is joined to "
              f"{call.name} of thread {call.tid} (correlation {call.correlation}); thread "
              f"{same[0]['tid']} submitted it")
    check(joined > 0, f"{trace.path}: no op is joined to a call")
    check(matched == joined,
          f"{trace.path}: {joined - matched} of {joined} joined ops match no one op of the ground truth")


def check_stacks_compared(report, what="the job"):
    """Under STALLSCOPE_UNWIND=check: no native stack walked by the cached
    rules differs from libgcc's, and every blocking call's was walked by
    the rules (none left to libgcc), so each was compared. Returns the
    blocking calls in the hotspots."""
    diags = {d["name"]: d for d in report["diagnostics"]}
    check("native_stacks_differ" not in diags,
          f"{what}: native stacks walked by the cached rules differ from libgcc's: "
          f"{diags.get('native_stacks_differ')}")
    blocking = sum(h["count"] for h in report["hotspots"])
    checked = diags.get("native_stacks_checked", {}).get("count", 0)
    check(checked >= blocking, f"{what}: {checked} native stacks compared with libgcc's, {blocking} blocking calls "
          "in the hotspots")
    return blocking


def marker_line(src, marker):
    """The number of the first line of `src` that ends with `marker` (the
    `// STALL:<name>` comments the tests find call sites by)."""
    with open(src) as f:
        for n, line in enumerate(f, 1):
            if line.rstrip().endswith(marker):
                return n
    raise Failure(f"marker {marker} not in {src}")


def run(case, *args):
    """Runs `case(*args)` under pytest: Skip, or SKIP returned, skips."""
    import pytest
    try:
        rc = case(*args)
    except Skip as e:
        pytest.skip(str(e))
    if rc == SKIP:
        pytest.skip("not built")


class _Outcome:
    """A pytest plugin that remembers whether the case was skipped."""

    def __init__(self):
        self.skipped = False

    def pytest_runtest_logreport(self, report):
        self.skipped = self.skipped or report.skipped


def main(cases, path, argv=None):
    ap = argparse.ArgumentParser(prog=os.path.basename(path))
    ap.add_argument("--build")
    ap.add_argument("--case", choices=sorted(cases))
    ap.add_argument("--list", action="store_true", help="print the case names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(sorted(cases)))
        return 0
    if not args.build or not args.case:
        ap.error("--build and --case are required (or --list)")
    import pytest
    sys.dont_write_bytecode = True  # nothing written into the source tree
    outcome = _Outcome()
    rc = pytest.main([f"{os.path.abspath(path)}::test_case[{args.case}]",
                      f"--build={os.path.abspath(args.build)}", f"--rootdir={TESTS}",
                      "-q", "-s", "-rs", "-p", "no:cacheprovider", "--tb=short"],
                     plugins=[outcome])
    if rc == 0 and outcome.skipped:
        return SKIP
    return 0 if rc == 0 else 1
