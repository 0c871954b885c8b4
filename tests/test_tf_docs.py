"""Every Python block of docs/tensorflow.md runs as written (a fresh interpreter each, in a
working directory with `data/`: MNIST-like records, not yet indexed, as tests/test_docs.py
makes for the README)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")
pytest.importorskip("datasets")

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "tensorflow.md")


def python_blocks() -> list[str]:
    """The bodies of the page's ```python blocks (split on the fences)."""
    with open(PAGE, encoding="utf-8") as f:
        parts = f.read().split("```")
    return [part[len("python\n"):] for part in parts[1::2] if part.startswith("python\n")]


BLOCKS = python_blocks()


def test_the_page_has_its_examples():
    assert len(BLOCKS) >= 5


@pytest.fixture(scope="module")
def cwd(tmp_path_factory):
    from ofindex.cli.synthetic import write_dataset

    root = tmp_path_factory.mktemp("tfdocs")
    write_dataset(str(root / "data"), 3000, 4, index=False)
    return str(root)


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_block_runs(number, cwd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    run = subprocess.run([sys.executable, "-c", BLOCKS[number]], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (f"docs/tensorflow.md python block {number}:\n"
                                 f"{BLOCKS[number]}\n--- stderr\n{run.stderr[-3000:]}")
