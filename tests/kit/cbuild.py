"""Compiling ofindex/csrc again inside a test: the sanitizer job (test_native_sanitized.py)
and the portability checks (test_native_portable.py) build their own variants of the module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig

from tests.kit import paths

CSRC = os.path.join(paths.PACKAGE, "csrc")
#: Warnings are errors in every test build.
STRICT = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
          "-Werror"]


def compiler() -> str:
    """The C compiler Python was built with (or gcc).

    Returns:
        Its absolute path.

    Raises:
        AssertionError: there is none (tools/run-tests.sh installs gcc).
    """
    cc = (sysconfig.get_config_var("CC") or "gcc").split()[0]
    found = shutil.which(cc) or shutil.which("gcc")
    assert found, "no C compiler: these tests need gcc (tools/run-tests.sh installs it)"
    return found


def sources() -> list[str]:
    """The module's C sources, sorted."""
    return sorted(os.path.join(CSRC, name) for name in os.listdir(CSRC) if name.endswith(".c"))


def module_path(directory: str) -> str:
    """Where a build of ``_native`` for this interpreter goes inside ``directory``."""
    return os.path.join(directory, "_native" + sysconfig.get_config_var("EXT_SUFFIX"))


def build(cc: str, files: list[str], out: str, flags: list[str]) -> None:
    """Compile and link ``files`` into the shared library ``out`` with zlib.

    Args:
        cc: the compiler.
        files: C sources.
        out: the library's path.
        flags: compiler flags (``-shared -fPIC`` and the warnings are the caller's).

    Raises:
        AssertionError: the compiler failed; the message has its command and output.
    """
    import numpy  # onerecord.c makes arrays with numpy's C API

    includes = {sysconfig.get_paths()["include"], sysconfig.get_paths()["platinclude"],
                numpy.get_include()}
    cmd = [cc, *flags, *(f"-I{d}" for d in sorted(includes)), *files, "-o", out, "-lz"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr}"
