"""A tiny "training loop" that drives the (simulated) CUDA driver through
ctypes, for the Python call-site tests (run_case.py). Each step launches a few
kernels and then blocks at one marked line; the test checks that the report
names that line.

    sim_workload.py --lib cdll|pydll --block sync|dtoh --thread main|second --steps N [--markers]

ctypes.CDLL releases the GIL around each foreign call (as PyTorch does around
.item()); ctypes.PyDLL keeps holding it. Lines marked "# STALL:<name>" are the
expected hotspot sites; "# CALL:<name>" the expected caller frames.
"""
import argparse
import ctypes
import os
import sys
import threading

# The repository's package, unless the test runs the one installed with pip
# (tests/package).
if os.environ.get("STALLSCOPE_TEST_INSTALLED_PACKAGE") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python"))
import stallscope  # noqa: E402  (step markers; no-ops without the library)

c_void_p = ctypes.c_void_p


class CudaError(Exception):
    pass


def check(rc, what=""):
    if rc != 0:
        raise CudaError(f"{what} returned {rc}")


class Driver:
    def __init__(self, kind):
        loader = ctypes.PyDLL if kind == "pydll" else ctypes.CDLL
        self.lib = loader("libcuda.so.1")
        lib = self.lib
        for name in ("cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadData",
                     "cuModuleGetFunction", "cuStreamCreate", "cuLaunchKernel",
                     "cuStreamSynchronize", "cuMemAlloc_v2", "cuMemcpyDtoH_v2", "cuMemFree_v2"):
            getattr(lib, name).restype = ctypes.c_int
        lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(c_void_p), ctypes.c_int]
        lib.cuCtxSetCurrent.argtypes = [c_void_p]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(c_void_p), c_void_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(c_void_p), c_void_p, ctypes.c_char_p]
        lib.cuStreamCreate.argtypes = [ctypes.POINTER(c_void_p), ctypes.c_uint]
        lib.cuLaunchKernel.argtypes = [c_void_p] + [ctypes.c_uint] * 7 + [c_void_p, c_void_p, c_void_p]
        lib.cuStreamSynchronize.argtypes = [c_void_p]
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemcpyDtoH_v2.argtypes = [c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]

        check(lib.cuInit(0), "cuInit")
        self.ctx = c_void_p()
        check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), 0), "cuDevicePrimaryCtxRetain")
        self.make_current()
        self.module = c_void_p()
        image = ctypes.create_string_buffer(b"stallscope python test module\0" * 4)
        check(lib.cuModuleLoadData(ctypes.byref(self.module), image), "cuModuleLoadData")
        self.slow = self.function(b"slow_kernel")
        self.fast = self.function(b"fast_kernel")

    def make_current(self):
        check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def function(self, name):
        f = c_void_p()
        check(self.lib.cuModuleGetFunction(ctypes.byref(f), self.module, name), "cuModuleGetFunction")
        return f

    def stream(self):
        s = c_void_p()
        check(self.lib.cuStreamCreate(ctypes.byref(s), 0), "cuStreamCreate")
        return s

    def launch(self, f, stream):
        check(self.lib.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, None, None), "cuLaunchKernel")


def wait_sync(drv, stream):
    check(drv.lib.cuStreamSynchronize(stream), "cuStreamSynchronize")  # STALL:sync


def read_back(drv, host, dptr, nbytes):
    check(drv.lib.cuMemcpyDtoH_v2(host, dptr, nbytes), "cuMemcpyDtoH_v2")  # STALL:dtoh


def train_step(drv, stream, block, host, dptr):
    drv.launch(drv.fast, stream)
    drv.launch(drv.slow, stream)
    drv.launch(drv.fast, stream)
    if block == "sync":
        wait_sync(drv, stream)  # CALL:sync
    else:
        read_back(drv, host, dptr, ctypes.sizeof(host))  # CALL:dtoh


def train(drv, block, steps, second_thread, markers):
    if second_thread:
        drv.make_current()
    stream = drv.stream()
    host = (ctypes.c_float * 256)()
    dptr = ctypes.c_uint64()
    check(drv.lib.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.sizeof(host)), "cuMemAlloc_v2")
    for i in range(steps):
        if markers:
            with stallscope.step(i):
                train_step(drv, stream, block, host, dptr.value)
        else:
            train_step(drv, stream, block, host, dptr.value)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=["cdll", "pydll"], default="cdll")
    ap.add_argument("--block", choices=["sync", "dtoh"], default="sync")
    ap.add_argument("--thread", choices=["main", "second"], default="main")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--markers", action="store_true", help="wrap each step in stallscope.step(i)")
    ap.add_argument("--expect-library", action="store_true",
                    help="fail unless libstallscope.so is loaded (stallscope.enabled())")
    a = ap.parse_args()
    if a.expect_library and not stallscope.enabled():
        print("stallscope.enabled() is False under stallscope run", file=sys.stderr)
        return 3
    drv = Driver(a.lib)
    if a.thread == "main":
        train(drv, a.block, a.steps, False, a.markers)
    else:
        errors = []

        def body():
            try:
                train(drv, a.block, a.steps, True, a.markers)
            except Exception as e:  # reported by the main thread
                errors.append(e)

        t = threading.Thread(target=body, name="trainer")
        t.start()
        t.join()
        if errors:
            raise errors[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
