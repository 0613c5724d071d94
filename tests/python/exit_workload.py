"""Blocking calls while the interpreter shuts down, for run_case.py --case
exit / noblock. Must exit 0 under libstallscope.so.

    exit_workload.py noblock   CUDA set up, kernels launched, no blocking call
    exit_workload.py daemon    daemon threads (CDLL: GIL released; PyDLL: GIL
                               held) loop on launch + cuStreamSynchronize while
                               the main thread exits; an atexit handler and a
                               __del__ run at module teardown also synchronize
"""
import atexit
import ctypes
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_workload import Driver, check  # noqa: E402


def spin(drv, stream):
    drv.make_current()
    while True:
        drv.launch(drv.slow, stream)
        drv.lib.cuStreamSynchronize(stream)  # rc ignored: may fail at teardown


class SyncOnDelete:
    def __init__(self, drv, stream):
        self.drv, self.stream = drv, stream

    def __del__(self):
        # Runs during module teardown, when Python is finalizing.
        self.drv.launch(self.drv.fast, self.stream)
        self.drv.lib.cuStreamSynchronize(self.stream)


def main():
    mode = sys.argv[1]
    drv = Driver("cdll")
    stream = drv.stream()
    if mode == "noblock":
        for _ in range(5):
            drv.launch(drv.fast, stream)
        return 0
    pydrv = Driver("pydll")
    for d in (drv, pydrv):
        t = threading.Thread(target=spin, args=(d, d.stream()), daemon=True)
        t.start()
    atexit.register(lambda: check(drv.lib.cuStreamSynchronize(stream), "atexit sync"))
    global keep  # torn down with the module, at finalization
    keep = SyncOnDelete(pydrv, pydrv.stream())
    time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
