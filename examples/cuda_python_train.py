#!/usr/bin/env python3
"""A cuda-python (cuda.bindings) loop whose kernels NVRTC compiles in the same
process, with switchable stalls: each step waits --input-ms for its batch,
uploads it, launches the kernels with cuLaunchKernel and (per --stall) reads
the loss back or synchronizes the context. It runs unmodified on a GPU and on
stallscope's simulated GPU (`stallscope run --sim`).

    stallscope run --sim -- python cuda_python_train.py --stall readback

Stalls (each line marked `# STALL:<name>`):
  readback     cuMemcpyDtoH of the loss every step
  synchronize  cuCtxSynchronize after logging
  clean        neither

--markers marks steps with stallscope.step() (python/stallscope);
--log-waits FILE appends each input wait's CLOCK_MONOTONIC [start, end) ns.
"""
import argparse
import contextlib
import ctypes
import json
import time

import numpy as np
from cuda.bindings import driver as cu
from cuda.bindings import nvrtc

SOURCE = rb"""
extern "C" __global__ void forward(const float* x, const float* w, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] * w[i];
}
extern "C" __global__ void loss_reduce(const float* out, float* loss, int n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += out[i];
    *loss = s;
  }
}
"""


def ok(result):
    """The values of a cuda.bindings call, raising on an error status."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if isinstance(err, cu.CUresult) and err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver: {err.name}")
    if isinstance(err, nvrtc.nvrtcResult) and err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC: {err.name}")
    return values[0] if len(values) == 1 else values


def compile_ptx():
    prog = ok(nvrtc.nvrtcCreateProgram(SOURCE, b"train.cu", 0, [], []))
    try:
        ok(nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_90"]))
    except RuntimeError:
        size = ok(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(log.decode(errors="replace"))
    ptx = b" " * ok(nvrtc.nvrtcGetPTXSize(prog))
    ok(nvrtc.nvrtcGetPTX(prog, ptx))
    ok(nvrtc.nvrtcDestroyProgram(prog))
    return ptx


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stall", default="clean", choices=["readback", "synchronize", "clean"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--n", type=int, default=1 << 16)
    p.add_argument("--input-ms", type=float, default=2.0)
    p.add_argument("--markers", action="store_true")
    p.add_argument("--log-waits")
    a = p.parse_args()
    step_marker = contextlib.nullcontext
    if a.markers:
        import stallscope
        step_marker = stallscope.step

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    ptx = compile_ptx()  # NVRTC, in this process
    module = ok(cu.cuModuleLoadData(ptx))
    forward = ok(cu.cuModuleGetFunction(module, b"forward"))
    reduce_ = ok(cu.cuModuleGetFunction(module, b"loss_reduce"))
    stream = ok(cu.cuStreamCreate(0))

    n = a.n
    nbytes = n * 4
    host_x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x, w, out, loss = (ok(cu.cuMemAlloc(size)) for size in (nbytes, nbytes, nbytes, 4))
    ok(cu.cuMemcpyHtoD(w, np.ones(n, dtype=np.float32).ctypes.data, nbytes))
    value = np.zeros(1, dtype=np.float32)
    n_arg = np.array([n], dtype=np.int32)
    args = [np.array([int(p)], dtype=np.uint64) for p in (x, w, out)]
    fwd_params = np.array([a_.ctypes.data for a_ in args] + [n_arg.ctypes.data], dtype=np.uint64)
    red_args = [np.array([int(out)], dtype=np.uint64), np.array([int(loss)], dtype=np.uint64)]
    red_params = np.array([a_.ctypes.data for a_ in red_args] + [n_arg.ctypes.data], dtype=np.uint64)
    threads = 256
    blocks = (n + threads - 1) // threads

    def launch(fn, grid, params):
        ok(cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, stream, params.ctypes.data, 0))

    # Warm-up outside the steps.
    launch(forward, blocks, fwd_params)
    ok(cu.cuCtxSynchronize())
    waits = open(a.log_waits, "a") if a.log_waits else None
    for step in range(a.steps):
        with step_marker(step):
            t0 = time.monotonic_ns()
            time.sleep(a.input_ms / 1000.0)  # waiting for the next batch
            if waits:
                waits.write(json.dumps({"start_ns": t0, "end_ns": time.monotonic_ns()}) + "\n")
            ok(cu.cuMemcpyHtoDAsync(x, host_x.ctypes.data, nbytes, stream))
            for _ in range(4):
                launch(forward, blocks, fwd_params)
            launch(reduce_, 1, red_params)
            if a.stall == "readback":
                ok(cu.cuMemcpyDtoH(value.ctypes.data, loss, 4))  # STALL:readback
            elif a.stall == "synchronize":
                ok(cu.cuCtxSynchronize())  # STALL:synchronize
    ok(cu.cuCtxSynchronize())
    if waits:
        waits.close()
    print(json.dumps({"steps": a.steps}))


if __name__ == "__main__":
    main()
