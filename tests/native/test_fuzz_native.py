"""The fuzz tier's run of the compiled module's hostile-argument fuzzer (tests/kit/fuzz_native.py):
a fresh seed on every run and ten times the inputs of the default tier's run, which keeps one
fixed seed (tests/native/test_native.py::test_hostile_arguments_fuzz). A failure names its seed and
example number; ``python tests/kit/fuzz_native.py --seed S --start K --examples 1 --only T``
replays it, and the failing case becomes a fixed case of tests/native/test_native.py.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from tests.kit import paths
from tests.kit.fuzzkit import SCALE

#: Inputs per target, as the default tier's 10,000 take about 8 s.
EXAMPLES = max(1, int(100_000 * SCALE))


@pytest.mark.fuzz
@pytest.mark.timeout(60 + EXAMPLES // 200)
def test_explore_hostile_arguments_fuzz():
    seed = random.SystemRandom().randrange(2**32)
    env = {**os.environ, "PYTHONPATH": paths.pythonpath()}
    done = subprocess.run([sys.executable, os.path.join(paths.KIT, "fuzz_native.py"), "--examples",
                           str(EXAMPLES), "--seed", str(seed)], capture_output=True, text=True,
                          env=env, timeout=30 + EXAMPLES // 200)
    assert done.returncode == 0, f"exit {done.returncode}, seed {seed}:\n{done.stderr[-4000:]}"
