"""Helpers over the simulator's ground truth (SIMGPU_TRACE), shared by the
end-to-end and scenario tests."""
import argparse
import os
import shutil
import tempfile



def union_busy(ops, a, b):
    """Nanoseconds of [a, b) during which at least one of `ops` ran."""
    spans = sorted((max(op["start_ns"], a), min(op["end_ns"], b)) for op in ops
                   if op["end_ns"] > a and op["start_ns"] < b)
    busy, cur_s, cur_e = 0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        busy += cur_e - cur_s
    return busy


def idle_mismatches(report, truth):
    """Where a report's per-step GPU idle is not within 2% (or 100 us) of the
    ground truth's, or its causes do not sum to it: one message each, in
    step order (empty: none)."""
    problems = []
    for st in report["steps"]:
        a, b = st["start_ns"], st["end_ns"]
        true_idle = (b - a) - union_busy(truth, a, b)
        tol = max(0.02 * true_idle, 100_000)
        if abs(st["gpu_idle_ns"] - true_idle) > tol:
            problems.append(f"step {st['index']}: idle {st['gpu_idle_ns']} ns, truth {true_idle} ns "
                            f"(tolerance {tol:.0f})")
        if sum(st["idle_by_cause"].values()) != st["gpu_idle_ns"]:
            problems.append(f"step {st['index']}: causes do not sum to the idle time")
    return problems


# The analyzer's rule (analyzer/attribution.h hotspot_min_blocked_ns): a
# synchronizing call that returned within this did not block.
MIN_BLOCKED_NS = 5_000


def note_no_injected_idle():
    """Says that a run's injected stall left no GPU idle in its ground truth
    (a loaded machine stretched the device work over it): nothing to charge."""
    print("note: the injected stall left no GPU idle in the ground truth of this run (a loaded "
          "machine stretched the device work over it): nothing to charge")


def preempted_before(ops):
    """For each op (by id()), how long the host thread that enqueued it was
    runnable but waiting for a CPU since its previous submission: the
    difference of the run-queue delays the simulator read at the two
    submissions (SIMGPU_TRACE's `tid`, `run_delay_ns`); for a thread's first
    op, all its delay since it started (an upper bound: what came before its
    first submission is not told apart); 0 where the delay is unknown. What a
    loaded machine did to the host: the oracle's measure of preemption."""
    out, last = {}, {}
    for op in sorted(ops, key=lambda o: o.get("queued_ns", 0)):
        tid, delay = op.get("tid"), op.get("run_delay_ns", -1)
        prev = last.get(tid, 0)
        out[id(op)] = max(0, delay - prev) if delay >= 0 else 0
        if delay >= 0:
            last[tid] = delay
    return out


# Slack on host_preempted against the truth: the recorder's and the
# simulator's schedstat reads are not at the same instants (a read lies on
# either side of a scheduler switch).
PREEMPT_SLACK_NS = 200_000


def preemption_mismatch(report, ops):
    """host_preempted is time some launching thread was waiting for a CPU:
    its total cannot exceed what the threads that enqueued work were
    preempted in the ground truth (plus PREEMPT_SLACK_NS). A message when it
    does (None: it does not)."""
    truth = sum(preempted_before(ops).values())
    got = report["totals"]["idle_by_cause"].get("host_preempted", 0)
    if got > truth + PREEMPT_SLACK_NS:
        return (f"host_preempted {got} ns, but the threads that enqueued work were runnable "
                f"and waiting for a CPU only {truth} ns in the ground truth")
    return None


def run_case(cases, argv_prog, failure, skip=77):
    """main() of a test runner: `--build DIR --case NAME`, one run of
    cases[NAME](build, work) in a fresh work folder (no retry: the oracles
    come from the ground truth of that run). Prints ok / FAIL (keeping the
    folder) / skipped; returns the exit code (`skip` when the case returns
    it)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--case", required=True, choices=sorted(cases))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix=f"stallscope-{argv_prog}-{args.case}-")
    try:
        if cases[args.case](os.path.abspath(args.build), work) == skip:
            print(f"skipped {args.case}: not built")
            shutil.rmtree(work, ignore_errors=True)
            return skip
    except failure as e:
        print(f"FAIL {args.case}: {e}\n(kept {work})")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(f"ok {args.case}")
    return 0
