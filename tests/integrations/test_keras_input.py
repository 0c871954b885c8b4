"""ofindex.integrations.keras against real Keras 3: a PyDataset whose batches cover every
record once per epoch (equal to ``ds[i]`` decoded), reshuffled each epoch, split over ranks,
fed by Keras's own enqueuer with worker threads and processes, and trained by ``model.fit``."""

from __future__ import annotations

import subprocess
import sys
from itertools import chain

import numpy as np
import pytest

from tests.kit.helpers import need

keras = need("keras")
import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, decode_example  # noqa: E402
from ofindex.integrations.keras import KerasBatches  # noqa: E402
from tests.kit.example_shards import SPEC, write_examples  # noqa: E402

SIZES = [40, 25, 35]
N = sum(SIZES)
DENSE = {k: v for k, v in SPEC.items() if k != "tags"}


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return ofindex.open(write_examples(tmp_path_factory.mktemp("keras"), SIZES))


def _epoch_ids(batches) -> list[int]:
    batches.on_epoch_begin()
    ids = [int(i) for k in range(len(batches)) for i in batches[k][0]["id"]]
    batches.on_epoch_end()
    return ids


def test_items_cover_every_record_once_equal_to_decoded(ds):
    batches = KerasBatches(ds, 16, BatchDecoder(DENSE), targets="y", seed=2)
    assert len(batches) == -(-N // 16)
    seen = []
    for k in range(len(batches)):
        x, y = batches[k]
        for row, rid in enumerate(x["id"].tolist()):
            want = decode_example(ds[rid], DENSE)
            np.testing.assert_array_equal(x["x"][row], [rid, rid + 0.5])
            np.testing.assert_array_equal(x["m"][row], want["m"])
            assert y[row] == want["y"] and x["name"][row] == b"r%d" % rid
            seen.append(rid)
    assert sorted(seen) == list(range(N))
    with pytest.raises(IndexError):
        batches[len(batches)]


def test_each_epoch_is_a_new_permutation_and_ranks_partition(ds):
    batches = KerasBatches(ds, 10, BatchDecoder(DENSE), targets="y")
    first, second = _epoch_ids(batches), _epoch_ids(batches)
    assert sorted(first) == sorted(second) == list(range(N)) and first != second
    resumed = KerasBatches(ds, 10, BatchDecoder(DENSE), targets="y", epoch=1)
    assert _epoch_ids(resumed) == second
    shares = [_epoch_ids(KerasBatches(ds, 10, BatchDecoder(DENSE), targets="y",
                                      num_replicas=4, rank=r)) for r in range(4)]
    assert sorted(chain.from_iterable(shares)) == list(range(N))


@pytest.mark.parametrize("multiprocessing", [False, True])
def test_keras_enqueuer_with_workers_delivers_every_record_once_per_epoch(ds, multiprocessing):
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    batches = KerasBatches(ds, 8, BatchDecoder(DENSE), targets="y", seed=4, workers=2,
                           use_multiprocessing=multiprocessing)
    adapter = PyDatasetAdapter(batches, shuffle=True)  # what model.fit feeds from
    epochs = []
    for _ in range(2):
        adapter.on_epoch_begin()
        it = adapter.get_numpy_iterator()
        epochs.append([int(i) for _ in range(len(batches)) for i in next(it)[0]["id"]])
        adapter.on_epoch_end()
    assert [sorted(e) for e in epochs] == [list(range(N))] * 2
    assert set(map(tuple, epochs)) == {tuple(e) for e in epochs} and epochs[0] != epochs[1]


@pytest.mark.parametrize("workers,multiprocessing", [(1, False), (2, True)])
def test_model_fit(ds, workers, multiprocessing):
    batches = KerasBatches(ds, 16, BatchDecoder(DENSE), inputs="x", targets="y",
                           workers=workers, use_multiprocessing=multiprocessing)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e-5), loss="mse")
    history = model.fit(batches, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    assert batches.epoch == 2  # one new shuffle per epoch Keras ran, no more


def test_keras_knows_the_batches_of_an_epoch(ds):
    from keras.src.trainers.data_adapters import get_data_adapter

    batches = KerasBatches(ds, 16, BatchDecoder(DENSE), inputs="x", targets="y")
    adapter = get_data_adapter(batches, shuffle=True)  # as model.fit takes it
    assert batches.num_batches == adapter.num_batches == len(batches) == -(-N // 16)


@pytest.mark.slow  # a fresh process importing TensorFlow: about 20 s on 2 busy cores
def test_a_plain_keras_fit_prints_no_warning(tmp_path):
    """``model.fit(batches, epochs=3)`` in a fresh process, with the user's warning filters
    and TensorFlow's log level: Keras runs the 7 steps of each epoch, and nothing of warning
    level is printed (no "Your input ran out of data", nothing about shuffle=True)."""
    from tests.kit.keras_fit_check import NOISE, run_fit

    out, err = run_fit("keras", str(tmp_path))
    assert not NOISE.findall(out + err), (out + err)[-3000:]
    assert "7/7" in out and "Unknown" not in out
    assert out.strip().splitlines()[-1].startswith("steps=21 batches=7")


def test_ragged_features_need_a_transform(ds):
    batches = KerasBatches(ds, 8, BatchDecoder(SPEC), targets="y")
    with pytest.raises(ValueError, match="ragged"):
        batches[0]
    padded = KerasBatches(ds, 8, BatchDecoder(SPEC), transform=lambda b: (
        b["x"], b["tags"].row_lengths.astype(np.float32)))
    x, lengths = padded[0]
    assert x.shape == (8, 2) and lengths.tolist() == [int(v) % 4 for v in x[:, 0]]
    with pytest.raises(ValueError, match="not a feature"):
        KerasBatches(ds, 8, BatchDecoder(SPEC), targets="label")


def test_a_missing_keras_names_the_extra():
    code = ("import sys; sys.modules['keras'] = None\n"
            "try:\n    import ofindex.integrations.keras\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("MissingDependencyError") and "pip install 'ofindex[keras]'" in out
