#!/usr/bin/env python3
"""hooks.def is checked against the toolkit at build time
(libinterpose/hooks_check.h): the table as it is compiles, and a copy with
one row's version or parameters changed does not, with a message naming the
row. Each change is one a hand-typed table makes: a per-thread twin given
its default form's version, a default form given its CUDA 2.x version, a
parameter of the wrong type, a row of a newer ABI given an older version.

  hooks_check_test.py CXX CUDA_INCLUDE_DIR LIBINTERPOSE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

# (what is changed, the row's text as it is, as it becomes, the name the
# error must give: the row's, or the PFN type that does not exist)
CHANGES = [
    ("a per-thread twin's version", r"HOOK_PT\(cuMemcpy, cuMemcpy, 4000, ptds, 7000,",
     "HOOK_PT(cuMemcpy, cuMemcpy, 4000, ptds, 4000,", "PFN_cuMemcpy_v4000_ptds"),
    ("a default form's version (the 32-bit CUDA 2.x ABI)",
     r"HOOK_PT\(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020,", "HOOK_PT(cuMemcpyDtoH_v2, cuMemcpyDtoH, 2000,",
     "cuMemcpyDtoH_v2"),
    ("a parameter's type", r"(HOOK_PT\(cuStreamSynchronize, [^\n]*\n\s*)\(CUstream s\)",
     r"\1(CUevent s)", "cuStreamSynchronize"),
    ("a newer ABI given an older version", r"HOOK\(cuCtxSynchronize_v2, cuCtxSynchronize, 13000,",
     "HOOK(cuCtxSynchronize_v2, cuCtxSynchronize, 2000,", "cuCtxSynchronize_v2"),
]


def compile_check(cxx, cuda_inc, header, table):
    cmd = [cxx, "-std=c++20", "-fsyntax-only", "-x", "c++", "-I", cuda_inc,
           f'-DSTALLSCOPE_HOOKS_DEF="{table}"', header]
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    cxx, cuda_inc, src = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
    header = os.path.join(src, "hooks_check.h")
    table = os.path.join(src, "hooks.def")
    with open(table) as f:
        text = f.read()
    p = compile_check(cxx, cuda_inc, header, table)
    if p.returncode != 0:
        print(f"FAIL: hooks.def as it is does not pass its check:\n{p.stderr[-3000:]}")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        for what, pattern, replacement, row in CHANGES:
            changed, n = re.subn(pattern, replacement, text, count=1)
            if n != 1:
                print(f"FAIL: {what}: the row {pattern!r} is not in hooks.def")
                failures += 1
                continue
            path = os.path.join(work, "hooks.def")
            with open(path, "w") as f:
                f.write(changed)
            p = compile_check(cxx, cuda_inc, header, path)
            errors = [l for l in p.stderr.splitlines() if "error" in l]
            if p.returncode == 0 or not any(row in l for l in errors):
                print(f"FAIL: {what} ({row}) built, or failed without naming the row: "
                      f"{errors[:3]}")
                failures += 1
            else:
                print(f"ok: {what} ({row}) fails the build: {errors[0].split('error: ')[-1][:160]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
