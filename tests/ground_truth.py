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
