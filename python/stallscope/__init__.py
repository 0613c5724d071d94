"""stallscope step markers for Python training loops.

When the job runs under ``stallscope run`` (libstallscope.so preloaded), these
call the library's exported C API ``stallscope_step_begin(uint64)`` /
``stallscope_step_end()`` so that the report's steps follow your loop exactly.
Without the library they do nothing, so the same script runs unchanged.

    import stallscope
    for i, batch in enumerate(loader):
        with stallscope.step(i):
            train_step(batch)
"""
import contextlib
import ctypes
import itertools
import threading

__all__ = ["step", "step_begin", "step_end", "enabled", "dump"]

# torch.profiler's ProfilerStep#N as step markers (see _pyhooks; `stallscope
# run` installs them at start-up, importing this package does too).
from . import _pyhooks as _hooks  # noqa: E402

_hooks.install()

_lock = threading.Lock()
_resolved = False
_begin = None
_end = None
_dump = None
_counter = itertools.count()


def _resolve():
    global _resolved, _begin, _end, _dump
    if _resolved:
        return
    with _lock:
        if _resolved:
            return
        begin = end = None
        try:
            process = ctypes.CDLL(None)
            begin = getattr(process, "stallscope_step_begin", None)
            end = getattr(process, "stallscope_step_end", None)
        except (OSError, AttributeError):
            begin = end = None
        if begin is not None and end is not None:
            begin.argtypes = [ctypes.c_uint64]
            begin.restype = None
            end.argtypes = []
            end.restype = None
        else:
            begin = end = None
        _begin, _end = begin, end
        dump = getattr(process, "stallscope_dump", None) if begin is not None else None
        if dump is not None:
            dump.argtypes = []
            dump.restype = ctypes.c_int
        _dump = dump
        _resolved = True


def enabled():
    """True when libstallscope.so is loaded in this process."""
    _resolve()
    return _begin is not None


def step_begin(index=None):
    """Marks the start of training step `index` (default: a running count)
    on the calling thread. Returns the index used."""
    _resolve()
    if index is None:
        index = next(_counter)
    index = int(index)
    if _begin is not None:
        _begin(index & 0xFFFFFFFFFFFFFFFF)
    return index


def step_end():
    """Marks the end of the current step on the calling thread."""
    _resolve()
    if _end is not None:
        _end()


@contextlib.contextmanager
def step(index=None):
    """Context manager around one training step; see step_begin."""
    i = step_begin(index)
    try:
        yield i
    finally:
        step_end()


def dump():
    """Flight-recorder mode (``stallscope run --ring``, STALLSCOPE_RING): writes
    what the ring holds, the last seconds or megabytes of the trace, to a new
    trace file now. True when a file was written; False when the job is not
    recorded in ring mode (or the file could not be written)."""
    _resolve()
    return _dump is not None and _dump() == 0
