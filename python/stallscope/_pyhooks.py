"""Python-level step markers that need no change to the job.

torch.profiler's step annotations (``ProfilerStep#N``) are RecordFunction
events inside torch: no NVTX range and no CUDA call marks them, so the
preload library cannot see them. When libstallscope.so is loaded, this
module wraps ``torch.profiler.profile``'s ``start``, ``step`` and ``stop`` so
that each ``ProfilerStep#N`` the profiler opens is also a stallscope range of
the same name and extent (``stallscope_range_start`` / ``stallscope_range_end``
of the C API): the report's steps are then the profiler's steps.

The wrappers call the original methods unchanged, with the same arguments,
results and exceptions; stallscope's own part never raises. The class is
patched when ``torch.profiler.profiler`` is imported (a finder on
``sys.meta_path`` that returns to the normal import for every other module),
or at once when it already is. Without the library nothing is patched.

Installed by ``stallscope run`` (its ``sitecustomize`` on ``PYTHONPATH`` loads
this file as ``_stallscope_pyhooks``) and by ``import stallscope``. ``STALLSCOPE_PYTHON_HOOKS=0`` turns it off.
"""
import sys

TARGET = "torch.profiler.profiler"
STEP_PREFIX = "ProfilerStep#"
_WRAPPED = "__stallscope_wrapped__"
_state = {"installed": False}


def enabled():
    import os
    return os.environ.get("STALLSCOPE_PYTHON_HOOKS", "1") != "0"


def _library():
    """(range_start, range_end) from the preloaded library, or None."""
    try:
        import ctypes
        process = ctypes.CDLL(None)
        start = getattr(process, "stallscope_range_start", None)
        end = getattr(process, "stallscope_range_end", None)
    except (OSError, AttributeError):
        return None
    if start is None or end is None:
        return None
    start.argtypes = [ctypes.c_char_p]
    start.restype = ctypes.c_uint64
    end.argtypes = [ctypes.c_uint64]
    end.restype = None
    return start, end


def patch_profiler(module, lib=None):
    """Wraps module.profile's start/step/stop. True when patched (now or
    before)."""
    cls = getattr(module, "profile", None)
    if cls is None:
        return False
    if cls.__dict__.get(_WRAPPED):
        return True
    lib = lib or _library()
    if lib is None:
        return False
    range_start, range_end = lib
    import functools
    import weakref
    open_ranges = weakref.WeakKeyDictionary()

    def open_range(prof):
        try:
            if getattr(prof, "record_steps", False) and getattr(prof, "step_rec_fn", None) is not None:
                rid = range_start(f"{STEP_PREFIX}{int(prof.step_num)}".encode())
                if rid:
                    open_ranges[prof] = rid
        except Exception:  # stallscope's part never fails the job
            pass

    def close_range(prof):
        try:
            rid = open_ranges.pop(prof, 0)
            if rid:
                range_end(rid)
        except Exception:
            pass

    orig_start, orig_step, orig_stop = cls.start, cls.step, cls.stop

    @functools.wraps(orig_start)
    def start(self, *args, **kwargs):
        result = orig_start(self, *args, **kwargs)
        open_range(self)
        return result

    @functools.wraps(orig_step)
    def step(self, *args, **kwargs):
        close_range(self)
        result = orig_step(self, *args, **kwargs)
        open_range(self)
        return result

    @functools.wraps(orig_stop)
    def stop(self, *args, **kwargs):
        close_range(self)
        return orig_stop(self, *args, **kwargs)

    cls.start, cls.step, cls.stop = start, step, stop
    setattr(cls, _WRAPPED, True)
    return True


class _PatchingLoader:
    """The module's own loader; patches the module after it has run."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            patch_profiler(module)
        except Exception:  # the import succeeds whatever happens to stallscope's part
            pass

    def __getattr__(self, name):  # get_source, get_code, is_package, ...
        return getattr(self._loader, name)


class _Finder:
    """On sys.meta_path: finds nothing itself; for TARGET it asks the other
    finders and wraps the loader they return."""

    stallscope_finder = True

    def find_spec(self, name, path=None, target=None):
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or getattr(finder, "stallscope_finder", False):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
            return spec
        return None


def install():
    """Installs the hooks once per process (when enabled)."""
    if _state["installed"] or not enabled():
        return
    _state["installed"] = True
    try:
        module = sys.modules.get(TARGET)
        if module is not None:
            patch_profiler(module)
        elif not any(getattr(f, "stallscope_finder", False) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
    except Exception:  # never fails the import that installs it
        pass
