"""Build hook for the optional compiled module ``ofindex._native`` (all metadata lives in
pyproject.toml). Without a C compiler the install still succeeds and ofindex runs its pure
Python loops instead; ``ofindex info`` tells which is in use."""

from glob import glob

from setuptools import Extension, setup

# inflate.c links the system's zlib (headers: zlib1g-dev / zlib-devel)
setup(ext_modules=[Extension("ofindex._native", sorted(glob("ofindex/csrc/*.c")),
                             depends=glob("ofindex/csrc/*.h"), libraries=["z"],
                             optional=True)])
