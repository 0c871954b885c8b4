"""A plain ``model.fit(data, epochs=3)`` on an ofindex input, in a fresh process, as a user runs
it: ``python keras_fit_check.py tf|keras DIRECTORY``. Everything is imported and the model
built first; then a line ``--- fit ---`` is written to stdout and to stderr, so that whatever
``fit`` prints (Python warnings, Keras's and TensorFlow's logs) comes after it. The last line
of stdout is ``steps=<batches taken> batches=<batches per epoch>``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.kit import paths

MARK = "--- fit ---"
#: What counts as a warning in what fit prints: Python's warnings (``...Warning: text``),
#: Python logging's and absl's (``WARNING:absl:...``; not absl's one-line notice that it logs to
#: stderr) and TensorFlow's C++ log lines of warning level and above (``W0000 00:00:...``),
#: and Keras's texts whatever their form.
NOISE = re.compile(r"\w*Warning: |^WARNING:(?!.*absl::InitializeLog)|^ERROR:|^[WEF]\d{4} "
                   r"|ran out of data|will be ignored", re.MULTILINE)


def run_fit(which: str, directory: str) -> tuple[str, str]:
    """Run this script for ``which`` (``"tf"`` or ``"keras"``) with the environment a user has
    (TensorFlow's C++ log level not lowered) and return what ``fit`` wrote to stdout and to
    stderr (after the mark)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                            "PYTHONWARNINGS")}
    env["PYTHONPATH"] = paths.pythonpath()
    run = subprocess.run([sys.executable, "-m", __name__, which, directory],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return run.stdout.split(MARK, 1)[1], run.stderr.split(MARK, 1)[1]


def main(which: str, directory: str) -> None:
    """Write a small dataset into ``directory`` and fit a model on it for 3 epochs."""
    import keras
    import numpy as np
    import tensorflow as tf

    import ofindex
    from ofindex.decode import BatchDecoder
    from ofindex.integrations.keras import KerasBatches
    from ofindex.integrations.tf import TFBatches
    from tests.kit.example_shards import SPEC, write_examples

    ds = ofindex.open(write_examples(directory, [40, 25, 35]))
    dense = {name: fs for name, fs in SPEC.items() if name != "tags"}
    if which == "tf":
        batches: TFBatches | KerasBatches = TFBatches(ds, 16, BatchDecoder(SPEC), seed=0)
        data = batches.dataset(inputs="x", targets="y")
    else:
        batches = KerasBatches(ds, 16, BatchDecoder(dense), inputs="x", targets="y")
        data = batches
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e-5), loss="mse")
    for stream in (sys.stdout, sys.stderr):
        print(MARK, file=stream, flush=True)
    history = model.fit(data, epochs=3)
    assert np.isfinite(history.history["loss"]).all()
    steps = (int(batches.step.numpy()) if isinstance(batches, TFBatches)
             else batches.epoch * len(batches))
    print(f"steps={steps} batches={len(batches)} tf={tf.__version__}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
