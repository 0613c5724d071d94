#!/usr/bin/env python3
"""A numba-cuda loop with switchable stalls: each step waits --input-ms for
its batch, uploads it, runs a few @cuda.jit kernels, and (per --stall) reads
a result back, synchronizes, or neither. It runs unmodified on a GPU and on
stallscope's simulated GPU (`stallscope run --sim`).

    stallscope run --sim -- python numba_train.py --stall readback

Stalls (each line marked `# STALL:<name>`):
  readback     copy_to_host() of the loss every step (pageable: synchronous)
  synchronize  cuda.synchronize() after logging
  clean        neither

Steps are marked with stallscope.step() (python/stallscope: nothing without
the library) when --markers is given; --log-waits FILE appends each input
wait's CLOCK_MONOTONIC [start, end) ns as a JSON line.
"""
import argparse
import contextlib
import json
import time

import numpy as np
from numba import cuda


@cuda.jit
def forward(x, w, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * w[i % w.size]


@cuda.jit
def loss_reduce(out, loss):
    i = cuda.grid(1)
    if i == 0:
        s = 0.0
        for j in range(out.size):
            s += out[j]
        loss[0] = s


@cuda.jit
def update(w, out, lr):
    i = cuda.grid(1)
    if i < w.size:
        w[i] -= lr * out[i]


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

    threads = 256
    blocks = (a.n + threads - 1) // threads
    host_x = np.random.default_rng(0).standard_normal(a.n).astype(np.float32)
    w = cuda.to_device(np.ones(a.n, dtype=np.float32))
    out = cuda.device_array(a.n, dtype=np.float32)
    loss = cuda.device_array(1, dtype=np.float32)
    stream = cuda.default_stream()
    # Warm-up outside the steps: compiles the kernels, first launches.
    x = cuda.to_device(host_x)
    forward[blocks, threads](x, w, out)
    loss_reduce[1, 1](out, loss)
    update[blocks, threads](w, out, 0.0)
    cuda.synchronize()
    waits = open(a.log_waits, "a") if a.log_waits else None
    for step in range(a.steps):
        with step_marker(step):
            t0 = time.monotonic_ns()
            time.sleep(a.input_ms / 1000.0)  # waiting for the next batch
            if waits:
                waits.write(json.dumps({"start_ns": t0, "end_ns": time.monotonic_ns()}) + "\n")
            x = cuda.to_device(host_x, stream=stream)
            for _ in range(4):
                forward[blocks, threads, stream](x, w, out)
            loss_reduce[1, 1, stream](out, loss)
            update[blocks, threads, stream](w, out, 0.01)
            if a.stall == "readback":
                value = loss.copy_to_host()  # STALL:readback
            elif a.stall == "synchronize":
                cuda.synchronize()  # STALL:synchronize
    cuda.synchronize()
    if waits:
        waits.close()
    print(json.dumps({"steps": a.steps}))


if __name__ == "__main__":
    main()
