"""The compiled module stays portable: its threads on POSIX, on Windows, and without any.

The module starts helper threads in two places (csrc/checker.c, csrc/batches.c) through
csrc/threads.h, which maps them onto POSIX threads, the Windows API or nothing. Wheels for
Windows and macOS are built by cibuildwheel on those platforms' runners, which this machine
is not (pyproject.toml, [tool.cibuildwheel]); what can be checked here is checked here:

- the thread layer alone (tests/kit/native_threads_check.c) runs on this machine's POSIX
  threads, refuses to start a thread when built without any, and compiles and links for
  Windows with mingw-w64 (tools/run-tests.sh installs it; the program is not run there);
- the whole module built with ``-DOFINDEX_NO_THREADS`` (what a platform with neither gets)
  passes the compiled module's own tests and the Checker's, taking its inline paths;
- no source includes a platform header outside a guard that names its platform.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.kit import cbuild, paths

CHECK = os.path.join(paths.KIT, "native_threads_check.c")
MINGW = "x86_64-w64-mingw32-gcc"

#: Headers every C11 compiler has, plus Python's, numpy's (whose C API onerecord.c uses: its
#: headers come with every numpy) and zlib's (which the build links).
PORTABLE_HEADERS = {
    "Python.h", "numpy/arrayobject.h", "zlib.h", "stdint.h", "string.h", "stddef.h",
    "stdlib.h", "stdio.h", "limits.h", "assert.h", "errno.h", "math.h", "float.h",
}

#: Loads the build named by OFINDEX_TEST_NATIVE_BUILD (tests/kit/native_build.py) and runs the
#: test files given, checking first that it is the thread-less build.
BOOT = """
import os, sys
from tests.kit import native_build
from ofindex import _accel
assert _accel.native is not None and _accel.native.__file__ == os.environ[
    "OFINDEX_TEST_NATIVE_BUILD"], "the thread-less build is not the one in use"
assert _accel.native.threads == "none", _accel.native.threads
import pytest
sys.exit(int(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]])))
"""


def _check_program(tmp_path, cc: str, *flags: str, suffix: str = "") -> str:
    out = str(tmp_path / f"threads_check{suffix}")
    cmd = [cc, "-std=c11", *cbuild.STRICT, f"-I{cbuild.CSRC}", *flags, CHECK, "-o", out]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"
    return out


def test_the_thread_layer_hands_values_over_on_posix_threads(tmp_path):
    program = _check_program(tmp_path, cbuild.compiler(), "-pthread")
    done = subprocess.run([program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "pthreads: 20000 values handed over\n", \
        done.stdout + done.stderr


def test_the_thread_layer_refuses_to_start_a_thread_without_threads(tmp_path):
    program = _check_program(tmp_path, cbuild.compiler(), "-DOFINDEX_NO_THREADS")
    done = subprocess.run([program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "none: thread_start refused\n", \
        done.stdout + done.stderr


def test_the_thread_layer_compiles_and_links_for_windows(tmp_path):
    mingw = shutil.which(MINGW)
    assert mingw, (f"{MINGW} not found: tools/run-tests.sh installs Debian's "
                   "gcc-mingw-w64-x86-64-win32 for this check")
    program = _check_program(tmp_path, mingw, suffix=".exe")
    with open(program, "rb") as handle:
        image = handle.read()
    assert image[:2] == b"MZ"  # a Windows executable
    pe_offset = int.from_bytes(image[0x3C:0x40], "little")
    assert image[pe_offset:pe_offset + 4] == b"PE\0\0"
    # the Windows branch was compiled, not the POSIX one: its imports are the Windows API's
    assert b"SleepConditionVariableSRW" in image and b"_beginthreadex" in image
    assert b"pthread_create" not in image


@pytest.mark.slow
def test_the_module_without_threads_passes_the_native_and_checker_tests(tmp_path):
    library = cbuild.module_path(str(tmp_path))
    cbuild.build(cbuild.compiler(), cbuild.sources(), library,
                 ["-O1", *cbuild.STRICT, "-fPIC", "-shared", "-DOFINDEX_NO_THREADS"])
    env = {**os.environ, "PYTHONPATH": paths.pythonpath(),
           "OFINDEX_PURE_PYTHON": "0", "OFINDEX_TEST_NATIVE_BUILD": library,
           "OFINDEX_FUZZ_EXAMPLES": "300"}
    tests = [os.path.join(paths.TESTS, name)
             for name in ("native/test_native.py", "read/sequential/test_checker.py")]
    tests.append(os.path.join(paths.TESTS, "read", "sequential", "test_batched_reads.py") + "::"
                 "test_list_batches_checked_on_a_second_thread_name_the_first_bad_record")
    done = subprocess.run([sys.executable, "-c", BOOT, *tests], capture_output=True, text=True,
                          env=env, cwd=paths.ROOT, timeout=280)
    report = done.stdout[-6000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"exit {done.returncode}:\n{report}"
    assert " passed" in done.stdout and "failed" not in done.stdout, report


def _unguarded_includes(text: str) -> list[str]:
    """The headers ``#include <...>``d outside every ``#if``/``#ifdef`` of a C file
    (its include guard, ``#ifndef X_H`` on the first directive line, does not count)."""
    depth, found = 0, []
    directives = re.findall(r"^\s*#\s*(\w+)\s*(.*)$", text, flags=re.M)
    guard = directives and directives[0][0] == "ifndef" and directives[0][1].endswith("_H")
    for number, (name, rest) in enumerate(directives):
        if name in ("if", "ifdef", "ifndef"):
            depth += 0 if (guard and number == 0) else 1
        elif name == "endif":
            depth = max(depth - 1, 0)
        elif name == "include" and depth == 0 and rest.startswith("<"):
            found.append(rest[1:rest.index(">")])
    return found


def test_no_platform_header_is_included_without_a_guard():
    for name in sorted(os.listdir(cbuild.CSRC)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(cbuild.CSRC, name), encoding="utf-8") as handle:
                headers = _unguarded_includes(handle.read())
            assert set(headers) <= PORTABLE_HEADERS, (name, set(headers) - PORTABLE_HEADERS)


def test_the_include_scan_sees_an_unguarded_platform_header():
    # the check above proves something only if it would see an offending include
    assert _unguarded_includes("#include <pthread.h>\n#include <stdint.h>\n") == [
        "pthread.h", "stdint.h"]
    assert _unguarded_includes("#ifdef __linux__\n#include <sys/mman.h>\n#endif\n") == []
    assert _unguarded_includes("#ifndef A_H\n#define A_H\n#include <unistd.h>\n#endif\n") == [
        "unistd.h"]
