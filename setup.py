"""Build hook for the optional compiled module ``ofindex._native`` (all metadata lives in
pyproject.toml). Without a C compiler (or zlib's headers) the install still succeeds and
ofindex runs its pure-Python loops instead, with one notice saying so; ``ofindex info`` tells
which is in use. Wheels carry the compiled module, so installing one needs no compiler."""

import sys
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError

#: What a missing or failing compiler, linker or header raises.
BUILD_FAILURES = (BaseError, CCompilerError, OSError)

NOTICE = ("ofindex: NOTICE: the compiled loops (ofindex._native) could not be built ({why}); "
          "ofindex is installed with its pure-Python loops: the same results and errors, "
          "slower. Install a wheel, or a C compiler and zlib's headers (Debian: gcc "
          "zlib1g-dev) and reinstall; `ofindex info` shows `loops: compiled` then.")


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into one notice instead of a failed install."""

    failed = False

    def run(self) -> None:
        try:
            super().run()
        except BUILD_FAILURES as exc:  # no compiler at all, or nothing built to copy
            self._notice(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except BUILD_FAILURES as exc:  # the compiler or the linker failed (no zlib headers)
            self._notice(exc)

    def _notice(self, exc: BaseException) -> None:
        if OptionalBuildExt.failed:
            return  # one notice
        OptionalBuildExt.failed = True
        why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        print(NOTICE.format(why=why), file=sys.stderr)



def numpy_headers() -> list[str]:
    """Where numpy's C headers are (onerecord.c makes arrays with numpy's C API); none when
    numpy is not installed, and then the compile fails into the notice above."""
    try:
        import numpy
    except ImportError:
        return []
    return [numpy.get_include()]


# inflate.c links the system's zlib (headers: zlib1g-dev / zlib-devel; vcpkg's zlib.lib on
# Windows)
ZLIB = "zlib" if sys.platform == "win32" else "z"
setup(ext_modules=[Extension("ofindex._native", sorted(glob("ofindex/csrc/*.c")),
                             depends=glob("ofindex/csrc/*.h"), libraries=[ZLIB],
                             include_dirs=numpy_headers())],
      cmdclass={"build_ext": OptionalBuildExt})
