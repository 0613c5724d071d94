"""The multi-rank analysis of `stallscope report` on a Dask cluster.

`stallscope fleet` splits the analysis of a distributed run into two maps and
two reduces over small JSON documents (docs/fleet.md). This module submits
them to Dask: one `arrivals` task per trace, one `last` task, one `rank` task
per trace, one `report` task. Each task runs the `stallscope` binary on the
worker; the documents travel as task results (text), and a worker writes the
ones it gets to its own temporary files to hand them to the binary. The
result is the report `stallscope report FOLDER...` prints, byte for byte in
the JSON format.

The traces are read by the workers at the absolute paths the client sees:
on a cluster the folders must be on a file system that every worker mounts
at the same place (NFS, Lustre, GPFS, ...).

    python3 -m stallscope.fleet FOLDER... [--scheduler ADDR] [--stallscope PATH]
        [--format json|text] [-o OUT] [--step-pattern RE]
        [--budget FILE [--junit X] [--prometheus P]]

    from stallscope import fleet
    print(fleet.analyze(["run/node0", "run/node1"], scheduler="tcp://head:8786"))

Without --scheduler (or DASK_SCHEDULER_ADDRESS), a distributed.LocalCluster
is started for the run. The binary: --stallscope PATH, else the worker's
$STALLSCOPE_BIN, else `stallscope` on the worker's PATH. --budget runs
`stallscope audit` over the same folders on the client, after the report.
Needs dask[distributed] (scripts/setup-dask) on the client and the workers.
"""
import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["analyze", "expand_traces", "FleetError"]

TRACE_SUFFIX = b".sstrace"
FORMATS = ("json", "text")


class FleetError(RuntimeError):
    """A step failed: the trace or step, the binary's exit code and message.
    `exit_code` is the binary's (2: an unreadable trace, 1: a bad argument)."""

    def __init__(self, message, exit_code=2):
        super().__init__(message)
        self.exit_code = exit_code


def expand_traces(args):
    """The traces `stallscope report ARGS...` reads, in its order: a folder
    gives its *.sstrace files sorted by name, a file is kept as given."""
    out = []
    for arg in args:
        if not os.path.exists(arg):
            raise FileNotFoundError(f"{arg}: No such file or directory")
        if not os.path.isdir(arg):
            out.append(arg)
            continue
        # Sorted as bytes, as the binary sorts the names.
        names = sorted(n for n in os.listdir(os.fsencode(arg)) if n.endswith(TRACE_SUFFIX))
        if not names:
            raise FileNotFoundError(f"{arg}: no .sstrace files in this folder")
        sep = "" if arg.endswith("/") else "/"
        out.extend(arg + sep + os.fsdecode(n) for n in names)
    if not out:
        raise FileNotFoundError("no trace given")
    return out


# ---- tasks (run on the workers) ---------------------------------------------


def _binary(stallscope):
    path = stallscope or os.environ.get("STALLSCOPE_BIN") or shutil.which("stallscope")
    if not path:
        raise RuntimeError("no stallscope binary: give --stallscope, or set STALLSCOPE_BIN or "
                           "PATH on the workers")
    return path


def _fleet(stallscope, what, args):
    """Runs `stallscope fleet ARGS` and returns its stdout; raises
    RuntimeError naming `what` with the binary's exit code and message."""
    cmd = [_binary(stallscope), "fleet"] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError(f"{what}: cannot run {cmd[0]}: {e}") from None
    if p.returncode != 0:
        lines = [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("usage:")]
        message = lines[0] if lines else "(no message)"
        raise RuntimeError(f"{what}: stallscope fleet {args[0]} exited {p.returncode}: {message}",
                           p.returncode)
    return p.stdout


def _write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _pattern_args(step_pattern):
    return [] if step_pattern is None else ["--step-pattern", step_pattern]


def task_arrivals(stallscope, trace):
    return _fleet(stallscope, trace, ["arrivals", trace])


def task_last(stallscope, arrivals):
    with tempfile.TemporaryDirectory(prefix="stallscope-fleet-") as tmp:
        paths = [_write(tmp, f"arrivals-{i}.json", a) for i, a in enumerate(arrivals)]
        return _fleet(stallscope, "last arrivals", ["last"] + paths)


def task_rank(stallscope, trace, last, step_pattern):
    with tempfile.TemporaryDirectory(prefix="stallscope-fleet-") as tmp:
        return _fleet(stallscope, trace, ["rank", trace, "--last", _write(tmp, "last.json", last)]
                      + _pattern_args(step_pattern))


def task_report(stallscope, last, summaries, fmt, step_pattern):
    with tempfile.TemporaryDirectory(prefix="stallscope-fleet-") as tmp:
        paths = [_write(tmp, f"summary-{i}.json", s) for i, s in enumerate(summaries)]
        return _fleet(stallscope, "report",
                      ["report", "--last", _write(tmp, "last.json", last), "--format", fmt]
                      + _pattern_args(step_pattern) + paths)


# ---- client -------------------------------------------------------------------


def _submit_all(client, stallscope, traces, step_pattern, fmt):
    arrivals = [client.submit(task_arrivals, stallscope, t, pure=False) for t in traces]
    last = client.submit(task_last, stallscope, arrivals, pure=False)
    summaries = [client.submit(task_rank, stallscope, t, last, step_pattern, pure=False)
                 for t in traces]
    report = client.submit(task_report, stallscope, last, summaries, fmt, step_pattern,
                           pure=False)
    return report.result()


def analyze(folders, scheduler=None, stallscope=None, step_pattern=None, fmt="json",
            client=None, workers=None):
    """The report over the traces of `folders` (folders or trace files, as
    for `stallscope report`), computed on a Dask cluster: the scheduler at
    `scheduler` (else $DASK_SCHEDULER_ADDRESS), an existing `client`, or a
    LocalCluster of `workers` processes (default: one per core) started for
    the call. Returns the report's text; raises FleetError when a step fails."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: json or text")
    traces = [os.path.abspath(t) for t in expand_traces(list(folders))]
    if stallscope is not None and os.sep in stallscope:
        stallscope = os.path.abspath(stallscope)
    import cloudpickle
    import distributed

    # The tasks travel by value: the workers need dask, not this package.
    module = sys.modules[__name__]
    by_value = __name__ != "__main__"  # __main__ travels by value anyway
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    cluster = None
    try:
        if client is None:
            scheduler = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
            if scheduler:
                client = distributed.Client(scheduler)
            else:
                n = workers or os.cpu_count() or 1
                cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1,
                                                   processes=True, dashboard_address=None,
                                                   silence_logs=logging.CRITICAL)
                client = distributed.Client(cluster)
            own_client = True
        else:
            own_client = False
        try:
            return _submit_all(client, stallscope, traces, step_pattern, fmt)
        except RuntimeError as e:
            code = e.args[1] if len(e.args) > 1 and isinstance(e.args[1], int) else 2
            raise FleetError(str(e.args[0]) if e.args else str(e), code) from None
        finally:
            if own_client:
                client.close()
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
        if cluster is not None:
            cluster.close()


def _audit(stallscope, folders, a):
    cmd = [_binary(stallscope), "audit"] + folders + ["--budget", a.budget]
    if a.junit:
        cmd += ["--junit", a.junit]
    if a.prometheus:
        cmd += ["--prometheus", a.prometheus]
    cmd += _pattern_args(a.step_pattern)
    return subprocess.run(cmd).returncode


def _emit(out, text):
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    # As the binary's -o: a new file, never overwritten, mode 0640.
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m stallscope.fleet",
        description="The report of `stallscope report FOLDER...` computed on a Dask cluster "
                    "(docs/fleet.md). The workers read the traces: on a cluster, from a shared "
                    "file system mounted at the same path.")
    p.add_argument("folders", nargs="+", metavar="FOLDER", help="trace folders or files")
    p.add_argument("--scheduler", help="Dask scheduler address (default: "
                   "$DASK_SCHEDULER_ADDRESS, else a LocalCluster for this run)")
    p.add_argument("--workers", type=int, help="LocalCluster worker processes (default: cores)")
    p.add_argument("--stallscope", help="the stallscope binary on the workers (default: "
                   "$STALLSCOPE_BIN, else stallscope on PATH)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("-o", dest="out", help="write the report to OUT (a new file, mode 0640)")
    p.add_argument("--step-pattern", help="NVTX range names that mark steps (as for report)")
    p.add_argument("--budget", help="then run `stallscope audit` over the same folders on this "
                   "machine with this budget; exit 3 when it is exceeded")
    p.add_argument("--junit", help="with --budget: JUnit XML (a new file)")
    p.add_argument("--prometheus", help="with --budget: Prometheus text-format metrics")
    a = p.parse_args(argv)
    if (a.junit or a.prometheus) and not a.budget:
        p.error("--junit and --prometheus need --budget")
    try:
        text = analyze(a.folders, scheduler=a.scheduler, stallscope=a.stallscope,
                       step_pattern=a.step_pattern, fmt=a.format, workers=a.workers)
        _emit(a.out, text)
    except FleetError as e:
        print(f"stallscope.fleet: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(f"stallscope.fleet: {e}", file=sys.stderr)
        return 2
    if a.budget:
        return _audit(a.stallscope, a.folders, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
