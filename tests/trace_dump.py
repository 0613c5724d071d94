"""Trace files as the tests read them: through `stallscope dump --format json`
(schema stallscope.dump/1, analyzer/report/dump.h), so the format is decoded
in one place, the analyzer's reader, and not again here.

    t = trace_dump.Trace(build, path)   # or trace_dump.load_dir(build, folder)
    t.pid, t.ppid, t.calls (tid, name, flags, correlation, python_frames),
    t.ops (the reader's dict of each: kind, name, start_ns, end_ns, device,
    stream, call), t.nvtx_types
"""
import glob
import json
import os
import subprocess

RECORD_PYTHON_STACK = 1  # trace::RecordFlags kRecordPythonStack
NVTX_STEP_BEGIN, NVTX_STEP_END = 6, 7  # trace::NvtxType


class Call:
    __slots__ = ("tid", "name", "flags", "correlation", "python_frames")

    def __init__(self, c):
        self.tid = c["tid"]
        self.name = c["api"]
        self.flags = c["flags"]
        self.correlation = c["correlation"]
        # [(file, function, line)] innermost first; [] without Python frames.
        self.python_frames = [tuple(f) for f in c.get("python_frames", [])]


class Trace:
    def __init__(self, build, path):
        self.path = path
        exe = os.path.join(build, "bin", "stallscope")
        p = subprocess.run([exe, "dump", path, "--format", "json"], capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            raise ValueError(f"{path}: stallscope dump exited {p.returncode}: {p.stderr.strip()[-1000:]}")
        d = json.loads(p.stdout)
        self.pid, self.ppid = d["pid"], d["ppid"]
        self.calls = [Call(c) for c in d["calls"]]
        self.ops = d["ops"]
        self.nvtx_types = [e["type"] for e in d["nvtx"]]


def load_dir(build, folder):
    return [Trace(build, p) for p in sorted(glob.glob(os.path.join(folder, "*.sstrace")))]
