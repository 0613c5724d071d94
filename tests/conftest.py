"""pytest's side of the test runners (see checks.py): the --build option,
the cases of a runner's CASES as one parametrized test_case, and a work
folder per case, removed when the case passes or skips and kept (and named)
when it fails."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--build", help="the build folder (bin/stallscope, lib/)")


def pytest_generate_tests(metafunc):
    cases = getattr(metafunc.module, "CASES", None)
    if "case" in metafunc.fixturenames and cases is not None:
        metafunc.parametrize("case", sorted(cases))


@pytest.fixture
def build(request):
    path = request.config.getoption("--build")
    if not path:
        raise pytest.UsageError("--build DIR is required")
    return os.path.abspath(path)


@pytest.fixture
def work(request):
    prog = os.path.splitext(os.path.basename(request.module.__file__))[0]
    path = tempfile.mkdtemp(prefix=f"stallscope-{prog}-{request.node.callspec.id}-")
    yield path
    if not getattr(request.node, "stallscope_failed", False):
        shutil.rmtree(path, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when != "call" or not report.failed:
        return
    item.stallscope_failed = True
    # A check that did not hold is its message and the kept folder, not a
    # traceback through the runner.
    if call.excinfo is not None and call.excinfo.errisinstance((checks.Failure, subprocess.TimeoutExpired)):
        report.longrepr = f"FAIL {item.name}: {call.excinfo.value}\n(kept {item.funcargs.get('work')})"
