#!/usr/bin/env python3
"""PyTorch DistributedDataParallel on NCCL: the MLP of torch_train.py trained
on every rank, one rank optionally slow (it waits --slow-ms more for each
batch). Start it with torchrun; it runs unmodified on GPUs and on
stallscope's simulated GPU and NCCL:

    stallscope run --sim -- torchrun --nproc-per-node 3 torch_ddp.py --slow-rank 1 --slow-ms 3

Steps are NVTX ranges ("step N", torch.cuda.nvtx). Every rank uses device 0
of the simulated GPU (each process has its own); on a real machine rank r
uses device LOCAL_RANK.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--input-ms", type=float, default=1.0, help="every rank's wait for each batch")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=3.0, help="the slow rank's extra wait")
    a = p.parse_args()

    local = int(os.environ.get("LOCAL_RANK", "0"))
    device_count = torch.cuda.device_count()
    dev = torch.device("cuda", local % device_count)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank = dist.get_rank()

    torch.manual_seed(0)
    mods = []
    for _ in range(a.layers):
        mods += [nn.Linear(a.width, a.width), nn.ReLU()]
    model = DistributedDataParallel(nn.Sequential(*mods, nn.Linear(a.width, 10)).to(dev), device_ids=[dev])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch, a.width).pin_memory()
    y = torch.randint(10, (a.batch,)).pin_memory()

    # Warm-up outside the steps (DDP's first iteration builds its buckets).
    loss_fn(model(x.to(dev)), y.to(dev)).backward()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    dist.barrier()

    wait_ms = a.input_ms + (a.slow_ms if rank == a.slow_rank else 0.0)
    for step in range(a.steps):
        torch.cuda.nvtx.range_push(f"step {step}")
        time.sleep(wait_ms / 1000.0)  # waiting for the next batch
        xb, yb = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = loss_fn(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients, bucket by bucket
        opt.step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"ddp: {dist.get_world_size() if dist.is_initialized() else 'done'} {a.steps} steps")


if __name__ == "__main__":
    main()
