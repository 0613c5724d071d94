"""Workload of run_case.py's pyhooks case: drives a torch.profiler.profile
with the profiler's step protocol (start, step() per iteration, stop) and
prints what it saw as JSON. run_case.py puts a stand-in `torch` package
(torch.profiler.profiler.profile with the same start/step/stop protocol and
ProfilerStep#N names) and the job's own sitecustomize on PYTHONPATH; the real
torch runs in tests/frameworks (torch_profiler_item)."""
import json
import sys

import torch.profiler as tp  # the stand-in, imported after start-up as a job would

steps = int(sys.argv[1])
prof = tp.profile(schedule=True)
seen = {"start": prof.start(), "steps": [], "raised": False}
for _ in range(steps):
    seen["steps"].append(prof.step())
try:
    prof.step(fail=True)  # the schedule rejects the step: the error reaches the job unchanged
except ValueError as e:
    seen["raised"] = str(e) == "bad schedule"
seen["stop"] = prof.stop()
seen["wrapped"] = bool(getattr(tp.profile, "__stallscope_wrapped__", False))
seen["step_name"] = tp.profile.step.__name__
print(json.dumps(seen))
