#!/usr/bin/env python3
"""A small PyTorch training loop (an MLP on random data) with switchable
stalls, for validating stallscope on a real GPU against PyTorch's own
profiler. Each stall sits on a line marked `# STALL:<name>`.

  torch_train.py [--steps N] [--item] [--slow-loader MS] [--print-tensor]
                 [--sync] [--nvtx] [--profile TRACE.json] [--tiny]
                 [--summary FILE.json]

--tiny makes the loop launch-bound (batch 1, narrow layers) for measuring
stallscope's overhead; --profile runs it under torch.profiler (Kineto) and
exports a Chrome trace with ProfilerStep#N annotations."""
import argparse
import json
import time

import torch
import torch.utils.data


class SlowDataset(torch.utils.data.Dataset):
    """Random batches that take `delay_ms` to produce (a slow input pipeline)."""

    def __init__(self, n, shape, delay_ms):
        self.n, self.shape, self.delay = n, shape, delay_ms / 1000.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(*self.shape), torch.randint(0, 10, (self.shape[0],))


def read_loss(loss):
    return loss.item()  # STALL:item


def log_tensor(t):
    print(t[:2])  # STALL:print


def sync_after_logging():
    torch.cuda.synchronize()  # STALL:sync


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--item", action="store_true")
    ap.add_argument("--slow-loader", type=float, default=0.0)
    ap.add_argument("--print-tensor", action="store_true")
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--nvtx", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--profile")
    ap.add_argument("--summary")
    a = ap.parse_args()

    dev = torch.device("cuda")
    torch.manual_seed(0)
    width, batch = (64, 1) if a.tiny else (2048, 256)
    layers = 12 if a.tiny else 4
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = a.warmup + a.steps
    data = SlowDataset(total, (batch, width), a.slow_loader)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2 if a.slow_loader else 0,
                                         pin_memory=True)

    prof = None
    if a.profile:
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(wait=0, warmup=a.warmup, active=a.steps))
        prof.start()
    step_times = []
    last = None
    for i, (x, y) in enumerate(loader):
        t0 = time.perf_counter()
        if a.nvtx:
            torch.cuda.nvtx.range_push(f"step {i}")
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if a.item:
            last = read_loss(loss)
        if a.print_tensor:
            log_tensor(out)
        if a.sync:
            sync_after_logging()
        if a.nvtx:
            torch.cuda.nvtx.range_pop()
        if prof:
            prof.step()
        step_times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    if prof:
        prof.stop()
        prof.export_chrome_trace(a.profile)
    steady = step_times[a.warmup:]
    summary = {"steps": len(steady), "mean_step_s": sum(steady) / max(1, len(steady)), "last_loss": last}
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
