"""Concurrent blocking calls from several Python threads, from plain
functions, generators and coroutines, with non-ASCII function names (and,
as run_case.py --case threads copies it, a non-ASCII file name). Each sync
site is marked "# STALL:<name>"; run_case.py checks every recorded
cuStreamSynchronize against them."""
import os
import sys
import threading

sys.path.insert(0, os.environ.get("STALLSCOPE_TEST_DIR", os.path.dirname(os.path.abspath(__file__))))
from sim_workload import Driver, check  # noqa: E402

THREADS = 6
ITERS = 200


def wärte_日本_𠀀(drv, s):
    check(drv.lib.cuStreamSynchronize(s), "sync")  # STALL:plain


def gen(drv, s, n):
    for i in range(n):
        drv.launch(drv.fast, s)
        check(drv.lib.cuStreamSynchronize(s), "sync")  # STALL:gen
        yield i


async def coro(drv, s):
    check(drv.lib.cuStreamSynchronize(s), "sync")  # STALL:coro


def worker(drv, k):
    drv.make_current()
    s = drv.stream()
    for _ in range(ITERS):
        drv.launch(drv.fast, s)
        if k % 2:
            wärte_日本_𠀀(drv, s)
        else:
            list(gen(drv, s, 1))
    c = coro(drv, s)
    try:
        c.send(None)
    except StopIteration:
        pass


def main():
    drv = Driver("pydll" if "--pydll" in sys.argv else "cdll")
    ts = [threading.Thread(target=worker, args=(drv, k)) for k in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
