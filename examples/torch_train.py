#!/usr/bin/env python3
"""A PyTorch training loop (an MLP trained with SGD on random data) with
switchable stalls: one of the forced synchronizations users write, an input
pipeline that cannot keep up, or launch-bound tiny ops. It runs unmodified
on a GPU and on stallscope's simulated GPU (`stallscope run --sim`), and is
the loop scripts/gpu-validate runs beside torch.profiler.

    python torch_train.py --stall item --steps 12 --input-ms 2
    stallscope run --sim -- python torch_train.py --stall print --markers nvtx

Stalls (--stall; each line that makes one is marked `# STALL:<name>`):
  item         loss.item() every step (a logged loss)
  print        print() of a CUDA tensor
  synchronize  torch.cuda.synchronize() after logging       (STALL:sync)
  if           a Python `if` on a CUDA tensor
  cpu          .cpu() of the predictions
  tolist       .tolist() of the predictions
  nonzero      an op whose output size depends on the data (boolean masking)
  clip_norm    clip_grad_norm_ with the norm logged
  dataloader   a DataLoader with workers and a slow collate_fn (--collate-ms)
  pageable     the batch copied from pageable memory
  pinned       the batch copied from pinned memory with non_blocking=True
  tiny         many tiny elementwise ops (launch-bound)
  clean        none of them (the default)

Every step first waits --input-ms for its batch (a loader slower than
nothing, as real ones are), except with --stall dataloader, where the
loader's workers make the wait. Step markers: --markers nvtx
(torch.cuda.nvtx ranges "step N"), profiler (torch.profiler's ProfilerStep#N)
or none (stallscope finds the steps itself). One warm-up pass runs before the
loop, outside every step.

scripts/gpu-validate's flags: --item, --print-tensor, --sync, --slow-loader MS
(= --stall dataloader --collate-ms MS), --nvtx (= --markers nvtx), --tiny
(batch 1, narrow layers: launch-bound, for the hook's overhead), --warmup N
(loop iterations before the measured ones), --profile TRACE.json (run under
torch.profiler with CPU and CUDA activities and export its Chrome trace),
--summary FILE.json (steps, mean host step time, last logged loss).
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.utils.data

STALLS = ["item", "print", "synchronize", "if", "cpu", "tolist", "nonzero", "clip_norm", "dataloader",
          "pageable", "pinned", "tiny", "clean"]


class RandomBatches(torch.utils.data.Dataset):
    """Random samples, made on the loader's workers."""

    def __init__(self, n, features, classes):
        self.n, self.features, self.classes = n, features, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.features, generator=g), int(torch.randint(self.classes, (1,), generator=g))


class SlowCollate:
    """Stacks a batch after a fixed delay (decoding, augmentation on the
    worker). A class, not a closure, so that worker processes can take it."""

    def __init__(self, delay_s):
        self.delay_s = delay_s

    def __call__(self, samples):
        time.sleep(self.delay_s)
        xs, ys = zip(*samples)
        return torch.stack(xs), torch.tensor(ys)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stall", default="clean", choices=STALLS)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=0, help="loop iterations before the measured ones")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--model", default="mlp", choices=["mlp", "transformer"],
                   help="an MLP of --layers Linear+ReLU, or a transformer encoder block (self-attention, "
                        "layer norms, feed-forward) over sequences of --seq tokens of --width // 8 features")
    p.add_argument("--seq", type=int, default=64, help="--model transformer: tokens a sample")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--input-ms", type=float, default=0.0, help="host wait for each batch")
    p.add_argument("--collate-ms", type=float, default=6.0, help="--stall dataloader: the collate_fn's time")
    p.add_argument("--workers", type=int, default=2, help="--stall dataloader: loader workers")
    p.add_argument("--tiny-ops", type=int, default=200, help="--stall tiny: tiny ops a step (two kernels each)")
    p.add_argument("--markers", default="none", choices=["none", "nvtx", "profiler"])
    p.add_argument("--log-waits", help="append each input wait's CLOCK_MONOTONIC [start, end) ns to this "
                                       "file, one JSON object a line (what the wait really took)")
    # scripts/gpu-validate's flags
    p.add_argument("--item", action="store_true")
    p.add_argument("--print-tensor", action="store_true")
    p.add_argument("--sync", action="store_true")
    p.add_argument("--slow-loader", type=float, default=0.0)
    p.add_argument("--nvtx", action="store_true")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--profile")
    p.add_argument("--summary")
    a = p.parse_args()
    for flag, stall in ((a.item, "item"), (a.print_tensor, "print"), (a.sync, "synchronize"),
                        (a.slow_loader > 0, "dataloader")):
        if flag:
            a.stall = stall
    if a.slow_loader > 0:
        a.collate_ms = a.slow_loader
    if a.nvtx:
        a.markers = "nvtx"
    if a.tiny:
        a.width, a.batch, a.layers = 64, 1, 12
    return a


def main():
    a = parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    if a.model == "transformer":
        d = max(8, a.width // 8)
        block = nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=4 * d, batch_first=True)
        model = nn.Sequential(nn.Unflatten(1, (a.seq, d)), block, nn.Flatten(),
                              nn.Linear(a.seq * d, a.classes)).to(dev)
        features = a.seq * d
    else:
        mods = []
        for _ in range(a.layers):
            mods += [nn.Linear(a.width, a.width), nn.ReLU()]
        model = nn.Sequential(*mods, nn.Linear(a.width, a.classes)).to(dev)
        features = a.width
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    total = a.warmup + a.steps

    # Host batches made before the loop: the loop's host time is the input
    # wait and the launches, not random-number generation.
    pinned = a.stall == "pinned"
    host_batches = []
    for _ in range(4):
        x, y = torch.randn(a.batch, features), torch.randint(a.classes, (a.batch,))
        host_batches.append((x.pin_memory(), y.pin_memory()) if pinned else (x, y))
    loader = None
    if a.stall == "dataloader":
        loader = iter(torch.utils.data.DataLoader(
            RandomBatches(a.batch * (total + 2), features, a.classes), batch_size=a.batch, num_workers=a.workers,
            collate_fn=SlowCollate(a.collate_ms / 1000.0), pin_memory=True))

    prof = None
    if a.profile:
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            # One cycle, ending with the last step: its trace is handed to
            # on_trace_ready (an export after stop() finds nothing left, and
            # a second cycle would overwrite the file with an empty one).
            schedule=torch.profiler.schedule(wait=0, warmup=a.warmup, active=a.steps, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(a.profile))
    elif a.markers == "profiler":
        # The step annotations only (ProfilerStep#N ranges): the schedule
        # waits past the last step, so nothing is collected.
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      schedule=torch.profiler.schedule(wait=total + 1, warmup=0, active=1))
    # Warm-up outside the steps: first launches, the caching allocator, cuBLAS,
    # the optimizer's momentum buffers (a zero learning rate leaves the model
    # as it was).
    x, y = host_batches[0]
    lr = opt.param_groups[0]["lr"]
    opt.param_groups[0]["lr"] = 0.0
    loss_fn(model(x.to(dev)), y.to(dev)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    opt.param_groups[0]["lr"] = lr
    torch.cuda.synchronize()
    if prof:
        prof.start()

    step_times, step_cpu, logged = [], [], None
    waits = open(a.log_waits, "a") if a.log_waits else None

    def waited(t0, cpu0):
        # What the wait was: its wall time, and of it the main thread's CPU
        # time (unpickling and pinning a batch is on-CPU, waiting for a
        # worker is not).
        if waits:
            waits.write(json.dumps({"start_ns": t0, "end_ns": time.monotonic_ns(),
                                    "cpu_ns": time.thread_time_ns() - cpu0}) + "\n")

    for step in range(total):
        t0, cpu_t0 = time.perf_counter(), time.thread_time_ns()
        if a.markers == "nvtx":
            torch.cuda.nvtx.range_push(f"step {step}")
        if loader is not None:
            w0, c0 = time.monotonic_ns(), time.thread_time_ns()
            x, y = next(loader)  # the workers' slow collate_fn: the wait is here
            waited(w0, c0)
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        else:
            if a.input_ms > 0:
                w0, c0 = time.monotonic_ns(), time.thread_time_ns()
                time.sleep(a.input_ms / 1000.0)  # waiting for the next batch
                waited(w0, c0)
            x, y = host_batches[step % len(host_batches)]
            if a.stall == "pageable":
                x, y = x.to(dev), y.to(dev)  # STALL:pageable
            else:
                x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        out = model(x)
        loss = loss_fn(out, y)
        if a.stall == "tiny":
            for _ in range(a.tiny_ops):
                loss = torch.sin(loss) + loss  # STALL:tiny
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.stall == "clip_norm":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            logged = norm.item()  # STALL:clip_norm
        opt.step()

        if a.stall == "item":
            logged = loss.item()  # STALL:item
        elif a.stall == "print":
            print("loss", out[:2, :2])  # STALL:print
        elif a.stall == "synchronize":
            torch.cuda.synchronize()  # STALL:sync
        elif a.stall == "if":
            if loss > 1e9:  # STALL:if
                print("diverged")
        elif a.stall == "cpu":
            preds = out.argmax(dim=1).cpu()  # STALL:cpu
        elif a.stall == "tolist":
            preds = out.argmax(dim=1).tolist()  # STALL:tolist
        elif a.stall == "nonzero":
            hard = out[out.max(dim=1).values > 0.5]  # STALL:nonzero
        if a.markers == "nvtx":
            torch.cuda.nvtx.range_pop()
        if prof:
            prof.step()
        step_times.append(time.perf_counter() - t0)
        step_cpu.append(time.thread_time_ns() - cpu_t0)
    torch.cuda.synchronize()
    if waits:
        waits.close()
    if prof:
        prof.stop()
    steady = step_times[a.warmup:]
    # The main thread's CPU time a step (its Python, the framework's
    # dispatch, the driver's calls): what a loaded machine stretches
    # without preempting the thread.
    steady_cpu = step_cpu[a.warmup:]
    summary = {"steps": len(steady), "mean_step_s": sum(steady) / max(1, len(steady)),
               "mean_step_cpu_s": sum(steady_cpu) / 1e9 / max(1, len(steady_cpu)), "last_loss": logged}
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
