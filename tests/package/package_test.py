"""stallscope installed the way users install it (tests/CMakeLists.txt):

    package_test.py --build DIR --case cmake_install|pip_install

cmake_install: `cmake --install` of the build into a fresh prefix lays out
bin/, lib/, include/ and share/ as CMakeLists.txt says, and the installed
command traces the installed example on the installed simulator.

pip_install: `pip install .` into a fresh virtual environment (build/
package-venv) builds and installs the command, libstallscope.so, the
simulator and the Python package; `python -m stallscope run --sim` then
traces a Python job that marks its steps with the installed package's
stallscope.step(), and the installed `stallscope report` reads it. It builds
the C++ parts once more (minutes), so it runs only when
STALLSCOPE_TEST_PACKAGE=1 (.ci/run sets it), and it needs PyPI for
scikit-build-core.

Oracles: the steps the job marked, the line the job blocked at every step,
and the build tree's own `stallscope report` of the same trace (the
installed analyzer must give the same report, byte for byte).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import checks  # noqa: E402
from checks import Skip, check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOAD = os.path.join(ROOT, "tests", "python", "sim_workload.py")
STEPS = 5

# What a prefix holds after `cmake --install` (CMakeLists.txt, "Installed layout").
LAYOUT = [
    "bin/stallscope",
    "lib/libstallscope.so",
    "lib/stallscope-python/sitecustomize.py",
    "lib/stallscope-python/_stallscope_pyhooks.py",
    "lib/simgpu/libcuda.so.1",
    "lib/simgpu/libcudart.so.13",
    "lib/simgpu/libcupti.so.13",
    "lib/simgpu/libnccl.so.2",
    "lib/simgpu/libcublas.so.13",
    "lib/simgpu/libcublasLt.so.13",
    "include/stallscope/stallscope.h",
    "share/doc/stallscope/README.md",
    "share/doc/stallscope/docs/analyzer.md",
]


def run(cmd, **kw):
    kw.setdefault("timeout", 600)
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def check_layout(prefix, paths):
    missing = [p for p in paths if not os.path.exists(os.path.join(prefix, p))]
    check(not missing, f"not installed under {prefix}: {missing}")
    check(os.access(os.path.join(prefix, "bin/stallscope"), os.X_OK), "bin/stallscope is not executable")


def sync_line():
    """The line of sim_workload.py that blocks every step (# STALL:sync)."""
    with open(WORKLOAD) as f:
        for n, line in enumerate(f, 1):
            if "# STALL:sync" in line:
                return n
    raise AssertionError("no STALL:sync line in sim_workload.py")


def check_report(installed_cmd, build, trace_dir, expect_steps, site_file=None, site_line=None):
    """The installed command's report of trace_dir: the steps, the hotspot at
    the blocking line (when given), and the same JSON as the build tree's
    command."""
    p = run(installed_cmd + ["report", trace_dir, "--format", "json"])
    check(p.returncode == 0, f"installed stallscope report exited {p.returncode}: {p.stderr[-2000:]}")
    ref = run([os.path.join(build, "bin", "stallscope"), "report", trace_dir, "--format", "json"])
    check(ref.returncode == 0, f"the build's stallscope report exited {ref.returncode}: {ref.stderr[-2000:]}")
    check(p.stdout == ref.stdout, "the installed analyzer's report differs from the build tree's")
    rep = json.loads(p.stdout)
    steps = rep["steps"]
    check(len(steps) == expect_steps, f"{len(steps)} steps, the job ran {expect_steps}")
    if site_file is None:
        return rep
    hot = rep["hotspots"]
    check(hot, "no hotspot")
    site = hot[0]["site"]
    check(os.path.basename(site["file"]) == site_file and site["line"] == site_line,
          f"top hotspot at {site['file']}:{site['line']}, the job blocked at {site_file}:{site_line}")
    return rep


def case_cmake_install(build, work):
    prefix = os.path.join(work, "prefix")
    p = run(["cmake", "--install", build, "--prefix", prefix])
    check(p.returncode == 0, f"cmake --install exited {p.returncode}: {p.stderr[-2000:]}")
    example = "share/stallscope/examples/train_loop"
    check_layout(prefix, LAYOUT + [example])
    trace = os.path.join(work, "trace")
    # The installed command finds libstallscope.so and the simulator at bin/../lib.
    env = dict(os.environ)
    env.pop("STALLSCOPE_LIBDIR", None)
    p = run([os.path.join(prefix, "bin", "stallscope"), "run", "--sim", "--out", trace, "--",
             os.path.join(prefix, example), "--steps", str(STEPS), "--readback"], env=env)
    check(p.returncode == 0, f"installed run exited {p.returncode}: {p.stderr[-2000:]}")
    check_report([os.path.join(prefix, "bin", "stallscope")], build, trace, STEPS)
    print(f"cmake --install: {len(LAYOUT) + 1} paths in place; the installed example traced, {STEPS} steps")


def case_pip_install(build, work):
    if os.environ.get("STALLSCOPE_TEST_PACKAGE") != "1":
        raise Skip("builds the C++ parts again (minutes): set STALLSCOPE_TEST_PACKAGE=1 (.ci/run does)")
    venv = os.path.join(build, "package-venv")
    shutil.rmtree(venv, ignore_errors=True)
    p = run([sys.executable, "-m", "venv", venv])
    check(p.returncode == 0, f"python -m venv: {p.stderr[-2000:]}")
    py = os.path.join(venv, "bin", "python")
    p = run([py, "-m", "pip", "install", "--quiet", ROOT], timeout=3600)
    if p.returncode != 0 and ("No matching distribution" in p.stderr or "Failed to establish" in p.stderr
                              or "Could not find a version" in p.stderr):
        raise Skip(f"PyPI unreachable for the build backend: {p.stderr.strip().splitlines()[-1]}")
    check(p.returncode == 0, f"pip install . exited {p.returncode}: {p.stderr[-3000:]}")
    check_layout(venv, LAYOUT)
    # slow_kernel outlasts any launch, so the synchronize after it blocks
    # every step: at the default 20 us a woken simulated device thread that
    # takes the launching core (27 us a launch in one CI run) had it done
    # before the synchronize, and there was no hotspot to find.
    env = dict(os.environ, STALLSCOPE_TEST_INSTALLED_PACKAGE="1", SIMGPU_KERNEL_US="*slow_kernel*=2000,*=20")
    env.pop("STALLSCOPE_LIBDIR", None)
    env.pop("PYTHONPATH", None)
    where = run([py, "-c", "import stallscope, stallscope.fleet; print(stallscope.__file__)"], env=env)
    check(where.returncode == 0, f"import stallscope: {where.stderr[-2000:]}")
    check(os.path.realpath(where.stdout.strip()).startswith(os.path.realpath(venv)),
          f"stallscope imported from {where.stdout.strip()}, not the environment")
    trace = os.path.join(work, "trace")
    p = run([py, "-m", "stallscope", "run", "--sim", "--out", trace, "--",
             py, WORKLOAD, "--markers", "--expect-library", "--steps", str(STEPS)], env=env)
    check(p.returncode == 0, f"python -m stallscope run exited {p.returncode}: {p.stderr[-2000:]}")
    rep = check_report([os.path.join(venv, "bin", "stallscope")], build, trace, STEPS,
                       "sim_workload.py", sync_line())
    check(rep["step_source"] == "marker", f"step_source {rep['step_source']}: the package's step() was not seen")
    print(f"pip install: {len(LAYOUT)} paths in {venv}; python -m stallscope run traced {STEPS} marked steps, "
          f"the hotspot at sim_workload.py:{sync_line()}")


CASES = {"cmake_install": case_cmake_install, "pip_install": case_pip_install}

def test_case(case, build, work):
    checks.run(CASES[case], build, work)


if __name__ == "__main__":
    sys.exit(checks.main(CASES, __file__))
