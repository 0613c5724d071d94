"""Cost of a blocking call as the application sees it: N cuStreamSynchronize
calls on an idle stream (they return at once), made DEPTH Python frames deep,
through ctypes.CDLL (GIL released). Prints one JSON line: ns per call
(median of REPEATS rounds). run_case.py --case bench runs it without the
library, with it but STALLSCOPE_PYTHON_STACKS=0, and with it."""
import ctypes
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_workload import Driver, check  # noqa: E402

N = int(os.environ.get("BENCH_N", "20000"))
DEPTH = int(os.environ.get("BENCH_DEPTH", "20"))
REPEATS = 5


def rounds(sync, stream):
    out = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        for _ in range(N):
            sync(stream)
        out.append((time.perf_counter_ns() - t0) / N)
    return out


def nest(depth, fn):
    if depth <= 1:
        return fn()
    return nest(depth - 1, fn)


def main():
    drv = Driver("cdll")
    stream = drv.stream()
    sync = drv.lib.cuStreamSynchronize
    check(sync(stream), "cuStreamSynchronize")
    rounds(sync, stream)  # warm up (caches, buffers)
    per = nest(DEPTH, lambda: rounds(sync, stream))
    per.sort()
    print(json.dumps({"ns_per_call": per[len(per) // 2], "rounds": per, "depth": DEPTH, "n": N}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
