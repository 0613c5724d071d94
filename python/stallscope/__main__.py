"""`python -m stallscope ARGS...` runs the `stallscope` command installed with
this package (`pip install .` puts it in the environment's bin/ folder,
beside lib/libstallscope.so), with the same arguments and exit code:

    python -m stallscope run -- python train.py
    python -m stallscope report stallscope-20261203-101500
"""
import os
import shutil
import sys
import sysconfig


def command():
    """The path of the `stallscope` command: the one installed with this
    package, else the first on PATH; None when there is none."""
    for scheme_path in (sysconfig.get_path("data"), sys.prefix):
        exe = os.path.join(scheme_path, "bin", "stallscope")
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    return shutil.which("stallscope")


def main(argv):
    exe = command()
    if exe is None:
        sys.stderr.write("stallscope: the stallscope command is not installed with this package "
                         "(pip install the project, or put build/bin on PATH)\n")
        return 1
    os.execv(exe, [exe] + argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
