"""Importing this makes ``ofindex._native`` the build named by ``OFINDEX_TEST_NATIVE_BUILD``
(a path to a compiled ``_native*.so``), when set; the sanitizer job (test_native_sanitized.py)
sets it so that the subprocesses of tests/native/test_native.py run its build too. Import it before
``ofindex``."""

import importlib.util
import os
import sys

_path = os.environ.get("OFINDEX_TEST_NATIVE_BUILD")
if _path and "ofindex._native" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("ofindex._native", _path)
    assert _spec is not None and _spec.loader is not None, _path
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["ofindex._native"] = _module
    _spec.loader.exec_module(_module)
