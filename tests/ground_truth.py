"""Helpers over the simulator's ground truth (SIMGPU_TRACE), shared by the
end-to-end and scenario tests."""


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
