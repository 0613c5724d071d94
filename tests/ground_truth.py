"""Helpers over the simulator's ground truth (SIMGPU_TRACE), shared by the
end-to-end, scenario, framework and distributed tests (checks.py runs
their cases)."""


def union_in(intervals, lo, hi):
    """Nanoseconds of [lo, hi) covered by at least one of `intervals`
    ((start, end) pairs)."""
    total, cur_lo, cur_hi = 0, None, None
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= a:
            continue
        if cur_hi is None or a > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = a, b
        else:
            cur_hi = max(cur_hi, b)
    return total + (cur_hi - cur_lo if cur_hi is not None else 0)


def union_busy(ops, a, b):
    """Nanoseconds of [a, b) during which at least one of `ops` ran."""
    return union_in([(op["start_ns"], op["end_ns"]) for op in ops], a, b)


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


def device_gaps(ops):
    """The device's idle gaps (a, b, op, drained): [a, b) ends when `op`
    starts (ops by start) and began when `drained`, the op that ended last
    before it, ended."""
    gaps, busy_until, last = [], None, None
    for op in sorted(ops, key=lambda o: (o["start_ns"], o["end_ns"])):
        if busy_until is not None and op["start_ns"] > busy_until:
            gaps.append((busy_until, op["start_ns"], op, last))
        if busy_until is None or op["end_ns"] >= busy_until:
            busy_until, last = op["end_ns"], op
    return gaps


def until_submit(a, b, op):
    """A host stall ends when the host submits the op that ends the gap: the
    rest (the submitting call, then the launch latency: launch_overhead in
    docs/analyzer.md, or the simulated device starting late on a loaded
    machine) is not the host's."""
    return min(b, max(a, op["queued_ns"]))


def sync_wait_at_drain(a, drained, syncs):
    """How long the host had been waiting in a synchronizing call when the
    device drained at `a` (design.md's rule 1, from the simulator's own
    times, SIMGPU_SYNC_TRACE): the longest wait of a call in progress at
    `a`, or of a call that returned once its own op had started (a
    synchronous copy from pageable memory) when that op is the one that
    drained the device: from the call's start until the op started or the
    call returned. None: no call was waiting."""
    waits = [a - s["start_ns"] for s in syncs if s["start_ns"] <= a <= s["end_ns"]]
    if drained is not None:
        waits += [min(drained["start_ns"], s["end_ns"]) - s["start_ns"] for s in syncs
                  if s.get("tid") == drained.get("tid") and s["end_ns"] < a
                  and s["start_ns"] <= drained.get("queued_ns", -1) <= s["end_ns"]]
    return max(waits) if waits else None


def injected_after_syncs(ops, syncs, names=None):
    """Idle that began while the host was waiting in a synchronizing call
    (sync_wait_at_drain), as much of it as the host had waited before the
    drain: without the synchronization the host would have been that much
    further, and no more (design.md's counterfactual), and at most until
    the host submitted the next op. `names`: only the gaps ended by ops of
    these names (None: all). [(a, b, op)]."""
    out = []
    for a, b, op, drained in device_gaps(ops):
        if names is not None and op["name"] not in names:
            continue
        w = sync_wait_at_drain(a, drained, syncs)
        if w is not None:
            b = min(until_submit(a, b, op), a + w)
            if b > a:
                out.append((a, b, op))
    return out


# The analyzer's rule (analyzer/analyze/attribution.h hotspot_min_blocked_ns): a
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
