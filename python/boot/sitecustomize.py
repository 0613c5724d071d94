"""stallscope's start-up hook for Python jobs under `stallscope run`.

`stallscope run` appends this folder to PYTHONPATH, so Python's `site`
imports this file at start-up. It installs stallscope's Python hooks
(stallscope/_pyhooks.py: torch.profiler's ProfilerStep#N as step markers),
then runs the `sitecustomize` that the job would have run without
stallscope (the next one on sys.path), so the job's own start-up is
unchanged. STALLSCOPE_PYTHON_HOOKS=0 turns the hooks off.
"""


def _stallscope_start():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    # Once per process, even with two such folders on the path (two
    # installs): each would otherwise find and run the other.
    if getattr(sys, "_stallscope_site_done", False):
        return
    sys._stallscope_site_done = True
    try:
        name = "_stallscope_pyhooks"
        hooks = sys.modules.get(name)
        if hooks is None:
            spec = importlib.util.spec_from_file_location(name, os.path.join(here, name + ".py"))
            hooks = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(hooks)
            sys.modules[name] = hooks
        hooks.install()
    except Exception:  # the job starts whatever happens to stallscope's part
        pass

    # The job's own sitecustomize, if any: the next one on the path.
    path = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_stallscope_start()
del _stallscope_start
