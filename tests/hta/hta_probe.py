#!/usr/bin/env python3
"""Runs Holistic Trace Analysis over a folder of exported traces (inside the
virtual environment scripts/setup-hta makes) and writes what it found as
JSON: HTA's own idle-time breakdown per stream (get_idle_time_breakdown),
the same classification per step from HTA's parsed trace, and HTA's counts
of GPU kernels and ops. Usage: hta_probe.py TRACE_DIR OUT.json"""
import json
import sys

from hta.trace_analysis import TraceAnalysis

GPU_OP_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL_WAIT = 30  # HTA's default consecutive_kernel_delay


def per_step(analysis):
    """HTA's rule for each GPU op (the gap to the previous op on its stream:
    host wait when its runtime call began after that op ended, kernel wait
    under KERNEL_WAIT, other otherwise), summed per (iteration, stream) on
    HTA's own dataframe: its timestamps, correlation join and iterations."""
    trace = analysis.t.get_trace(0)
    ids = analysis.t.symbol_table.get_sym_id_map()
    cat_ids = [ids[c] for c in GPU_OP_CATS if c in ids]
    ops = trace[trace["stream"].ne(-1) & trace["cat"].isin(cat_ids)]
    ops = ops.join(trace[["ts"]], on="index_correlation", rsuffix="_runtime")
    rows = {}
    for stream, s in ops.groupby("stream"):
        s = s.sort_values(by="ts")
        prev_end = (s["ts"] + s["dur"]).shift(1)
        gap = s["ts"] - prev_end
        host = s["ts_runtime"] > prev_end
        kernel = ~host & (gap < KERNEL_WAIT)
        for it, g, h, k in zip(s["iteration"], gap, host, kernel):
            r = rows.setdefault((int(it), int(stream)), {"step": int(it), "stream": int(stream), "ops": 0,
                                                         "host_wait": 0.0, "kernel_wait": 0.0,
                                                         "other": 0.0})
            r["ops"] += 1
            if g != g:  # NaN: the stream's first op
                continue
            r["host_wait" if h else "kernel_wait" if k else "other"] += float(g)
    return sorted(rows.values(), key=lambda r: (r["step"], r["stream"]))


def main():
    trace_dir, out = sys.argv[1:3]
    analysis = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=True)
    public, _ = analysis.get_idle_time_breakdown(visualize=False)
    trace = analysis.t.get_trace(0)
    ids = analysis.t.symbol_table.get_sym_id_map()
    count = {c: int((trace["cat"] == ids[c]).sum()) if c in ids else 0 for c in GPU_OP_CATS}
    result = {
        "public": [{"stream": int(r.stream), "category": str(r.idle_category),
                    "idle_time": float(r.idle_time)} for r in public.itertuples()],
        "per_step": per_step(analysis),
        "kernels": count["kernel"],
        "gpu_ops": sum(count.values()),
        "iterations": [int(i) for i in analysis.t.get_iterations(0)],
    }
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
