"""The compiled module under AddressSanitizer and UBSan: a quick job of the test command.

``ofindex/csrc`` is compiled again with ``-fsanitize=address,undefined`` into a temporary
directory; a subprocess (the ASan runtime preloaded, as the interpreter itself is not
instrumented) loads that build as ``ofindex._native`` and runs tests/native/test_native.py, the
hostile-argument fuzzer (tests/kit/fuzz_native.py) and tests/native/test_native_mutation.py (lists
changed by Python code during a call) on it. Any out-of-bounds access, use after free, signed
overflow, misaligned load or shift out of range aborts the subprocess and fails the test with
the sanitizer's report.

Needs gcc and its sanitizer runtimes (Debian: the ``gcc`` package pulls in ``libasan8`` and
``libubsan1``); ``tools/run-tests.sh`` installs ``gcc`` when it is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.kit import cbuild, paths

ROOT = paths.ROOT
FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer",
         "-g", "-O1", *cbuild.STRICT, "-fPIC", "-shared"]
ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87",
}
#: Inputs per target for the fuzzer under the sanitizers (slower than the plain run).
FUZZ_EXAMPLES = int(os.environ.get("OFINDEX_FUZZ_EXAMPLES", 3000))

#: Runs the test files named by its arguments on the sanitized build (their subprocesses load it
#: too, through tests/kit/native_build.py), checking first that the build and the runtimes are in
#: use.
BOOT = """
import os, sys
from tests.kit import native_build
from ofindex import _accel
assert _accel.native is not None and _accel.native.__file__ == os.environ[
    "OFINDEX_TEST_NATIVE_BUILD"], "the sanitized build is not the one in use"
maps = open("/proc/self/maps").read()
assert "libasan" in maps and "libubsan" in maps, "sanitizer runtimes not loaded"
import pytest
sys.exit(int(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]])))
"""


def _runtime(cc: str, name: str) -> str:
    path = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert os.path.isabs(path) and os.path.exists(path), (
        f"{cc} has no {name}: install gcc's sanitizer runtimes (Debian: libasan8, libubsan1)")
    return os.path.realpath(path)


def _run(args: list[str], libasan: str, timeout: float,
         **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **ENV, "LD_PRELOAD": libasan,
           "PYTHONPATH": paths.pythonpath(), "OFINDEX_PURE_PYTHON": "0", **env_vars}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


@pytest.fixture(scope="module")
def toolchain():
    cc = cbuild.compiler()
    return cc, _runtime(cc, "libasan.so"), _runtime(cc, "libubsan.so")


@pytest.mark.slow
def test_native_tests_and_fuzzer_pass_under_asan_and_ubsan(toolchain, tmp_path):
    cc, libasan, _ = toolchain
    lib = cbuild.module_path(str(tmp_path))
    cbuild.build(cc, cbuild.sources(), lib, FLAGS)
    tests = [os.path.join(paths.TESTS, "native", name)
             for name in ("test_native.py", "test_native_mutation.py")]
    done = _run(["-c", BOOT, *tests], libasan, timeout=300,
                OFINDEX_TEST_NATIVE_BUILD=lib, OFINDEX_FUZZ_EXAMPLES=str(FUZZ_EXAMPLES))
    report = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == 0, f"exit {done.returncode}:\n{report}"
    assert " passed" in done.stdout and "failed" not in done.stdout, report


def test_the_sanitizers_do_catch_errors_here(toolchain, tmp_path):
    # the job above proves something only if a bad access would fail it on this machine
    cc, libasan, _ = toolchain
    src = tmp_path / "canary.c"
    src.write_text(
        "#include <stdlib.h>\n#include <limits.h>\n"
        "int heap_overflow(int i) { char *p = malloc(8); int v = p[8 + i]; free(p); return v; }\n"
        "int signed_overflow(int i) { return INT_MAX - 1 + i; }\n")
    loose = [f for f in FLAGS if not f.startswith(("-Werror", "-fsanitize="))]
    for kind in ("address", "undefined"):  # one build per sanitizer: each must catch its own
        cbuild.build(cc, [str(src)], str(tmp_path / f"{kind}.so"),
                     [f"-fsanitize={kind}", *loose])
    load = "import ctypes; lib = ctypes.CDLL({!r}); "
    done = _run(["-c", load.format(str(tmp_path / "address.so")) + "lib.heap_overflow(0)"],
                libasan, timeout=60)
    assert done.returncode == 86 and "heap-buffer-overflow" in done.stderr, done.stderr[-2000:]
    done = _run(["-c", load.format(str(tmp_path / "undefined.so")) + "lib.signed_overflow(5)"],
                libasan, timeout=60)
    assert done.returncode == 87 and "signed integer overflow" in done.stderr, \
        done.stderr[-2000:]
