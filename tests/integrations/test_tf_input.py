"""ofindex.integrations.tf against real TensorFlow: every record once per epoch and equal to
``ds[i]`` decoded, a new permutation per epoch, ranks from ``tf.distribute.InputContext``,
``tf.train.Checkpoint`` resume without a record lost or repeated, Keras ``model.fit`` on the
tf.data path, and the ``file_infos`` that ``tf.data.experimental.index_shuffle`` takes."""

from __future__ import annotations

import os
import subprocess
import sys
from itertools import chain

import numpy as np
import pytest

from tests.kit.helpers import need

tf = need("tensorflow")
import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, decode_example  # noqa: E402
from ofindex.integrations.tf import TFBatches, file_infos  # noqa: E402
from tests.kit.example_shards import SPEC, write_examples  # noqa: E402

SIZES = [40, 25, 35]
N = sum(SIZES)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return ofindex.open(write_examples(tmp_path_factory.mktemp("tfin"), SIZES))


def _ids(data) -> list[int]:
    return [int(i) for batch in data for i in batch["id"].numpy()]


def test_every_record_once_and_equal_to_its_decoded_record(ds):
    batches = TFBatches(ds, 16, BatchDecoder(SPEC), seed=3)
    seen = []
    for batch in batches.dataset():
        assert isinstance(batch["tags"], tf.RaggedTensor)
        assert batch["x"].dtype == tf.float32 and batch["name"].dtype == tf.string
        for row, rid in enumerate(batch["id"].numpy().tolist()):
            want = decode_example(ds[rid], SPEC)
            assert rid == int(want["id"])
            np.testing.assert_array_equal(batch["x"][row].numpy(), [rid, rid + 0.5])
            np.testing.assert_array_equal(batch["x"][row].numpy(), want["x"])
            np.testing.assert_array_equal(batch["m"][row].numpy(), want["m"])
            np.testing.assert_array_equal(batch["tags"][row].numpy(), np.arange(rid % 4))
            assert batch["name"][row].numpy() == b"r%d" % rid == want["name"]
            assert batch["y"][row].numpy() == np.float32(rid / 100 if rid % 3 == 0 else -1)
            seen.append(rid)
    assert sorted(seen) == list(range(N)) and len(seen) == N
    assert int(batches.step.numpy()) == len(batches) == -(-N // 16) and batches.epoch == 1


def test_each_epoch_is_a_new_permutation(ds):
    data = TFBatches(ds, 10, BatchDecoder(SPEC), seed=0).dataset()
    first, second = _ids(data), _ids(data)  # the same dataset, iterated again: next epoch
    assert sorted(first) == sorted(second) == list(range(N))
    assert first != second and first != list(range(N))
    again = _ids(TFBatches(ds, 10, BatchDecoder(SPEC), seed=0).dataset())
    assert again == first  # a pure function of seed and epoch
    assert _ids(TFBatches(ds, 10, BatchDecoder(SPEC), shuffle=False).dataset()) == list(range(N))


def test_input_pipelines_partition_every_epoch(ds):
    shares = []
    for pipeline in range(4):
        context = tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=pipeline)
        shares.append(_ids(TFBatches(ds, 8, BatchDecoder(SPEC), seed=5,
                                     input_context=context).dataset()))
    assert all(len(s) == N // 4 for s in shares)
    assert sorted(chain.from_iterable(shares)) == list(range(N))
    with pytest.raises(ValueError, match="not both"):
        TFBatches(ds, 8, BatchDecoder(SPEC), input_context=context, rank=0)


def test_distribute_datasets_from_function(ds):
    strategy = tf.distribute.get_strategy()

    def make(context):
        return TFBatches(ds, 20, BatchDecoder(SPEC), input_context=context).dataset()

    got = [int(i) for batch in strategy.distribute_datasets_from_function(make)
           for i in batch["id"].numpy()]
    assert sorted(got) == list(range(N))


@pytest.mark.parametrize("taken", [3, 7 + 2])  # inside epoch 0; inside epoch 1
def test_checkpoint_resumes_without_loss_or_repeat(ds, tmp_path, taken):
    batches = TFBatches(ds, 16, BatchDecoder(SPEC), seed=1)
    data = batches.dataset()
    before: list[list[int]] = []
    while len(before) < taken:
        it = iter(data)
        for batch in it:
            before.append(batch["id"].numpy().tolist())
            if len(before) == taken:
                break
    path = tf.train.Checkpoint(data=batches).save(str(tmp_path / "ckpt"))
    rest = [b["id"].numpy().tolist() for b in it]  # the run goes on after the save
    following = [b["id"].numpy().tolist() for b in data]  # and into the next epoch
    resumed = TFBatches(ds, 16, BatchDecoder(SPEC), seed=1)
    tf.train.Checkpoint(data=resumed).restore(path).assert_consumed()
    assert int(resumed.step.numpy()) == taken
    # an iteration is an epoch's worth of batches from the position: the rest of this epoch,
    # then the start of the next (every Keras epoch has len(batches) steps)
    after = [b["id"].numpy().tolist() for b in resumed.dataset()]
    assert len(after) == len(batches) and after == (rest + following)[:len(batches)]
    epoch = taken // len(batches)
    whole = list(chain.from_iterable(before[epoch * len(batches):] + rest))
    assert sorted(whole) == list(range(N))
    assert int(resumed.step.numpy()) == taken + len(batches)


@pytest.mark.parametrize("options", [{}, {"drop_remainder": True}, {"shuffle": False},
                                     {"num_replicas": 3, "rank": 2}])
def test_cardinality_is_the_batches_of_an_epoch(ds, options):
    """Keras (and tf.data) know an epoch's length: the dataset's cardinality is len(batches),
    not UNKNOWN, and an iteration gives exactly that many batches, also after a restore."""
    batches = TFBatches(ds, 16, BatchDecoder(SPEC), **options)
    data = batches.dataset(inputs="x", targets="y")
    assert int(tf.data.experimental.cardinality(data)) == len(batches)
    assert int(data.cardinality()) == len(batches)
    assert sum(1 for _ in data) == len(batches)
    batches.step.assign(len(batches) + 1)  # a position restored inside an epoch
    assert sum(1 for _ in data) == len(batches)


def test_prefetched_batches_are_not_counted(ds):
    batches = TFBatches(ds, 4, BatchDecoder(SPEC))
    it = iter(batches.dataset())
    next(it)
    next(it)
    assert int(batches.step.numpy()) == 2  # prefetch read ahead; only two were taken


def test_restoring_another_inputs_position_is_refused(ds, tmp_path):
    batches = TFBatches(ds, 16, BatchDecoder(SPEC), seed=1)
    next(iter(batches.dataset()))
    path = tf.train.Checkpoint(data=batches).save(str(tmp_path / "ckpt"))
    other = TFBatches(ds, 16, BatchDecoder(SPEC), seed=2)
    tf.train.Checkpoint(data=other).restore(path)
    with pytest.raises(tf.errors.InvalidArgumentError, match="another input"):
        next(iter(other.dataset()))


def test_drop_remainder_gives_a_static_batch_dimension(ds):
    data = TFBatches(ds, 16, BatchDecoder(SPEC), drop_remainder=True).dataset()
    assert data.element_spec["x"].shape == (16, 2)
    assert data.element_spec["m"].shape == (16, 2, 3)
    assert len(_ids(data)) == (N // 16) * 16


def test_inputs_and_targets_elements(ds):
    data = TFBatches(ds, 16, BatchDecoder(SPEC)).dataset(inputs=["x", "m"], targets="y")
    x, y = next(iter(data))
    assert set(x) == {"x", "m"} and y.shape == (16,)
    with pytest.raises(ValueError, match="not features"):
        TFBatches(ds, 16, BatchDecoder(SPEC)).dataset(inputs="nope", targets="y")


def test_keras_fit_on_the_tf_data_path(ds):
    keras = need("keras")
    batches = TFBatches(ds, 16, BatchDecoder(SPEC), seed=0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e-5), loss="mse")
    history = model.fit(batches.dataset(inputs="x", targets="y"), epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    assert int(batches.step.numpy()) == 2 * len(batches)


@pytest.mark.slow  # a fresh process importing TensorFlow: about 20 s on 2 busy cores
def test_a_plain_keras_fit_prints_no_warning(tmp_path):
    """``model.fit(batches.dataset(...), epochs=3)`` in a fresh process, with the user's
    warning filters and TensorFlow's log level: Keras knows each epoch's 7 steps (no "Your
    input ran out of data", no "Unknown" step count), and says nothing about fit's default
    shuffle=True; nothing else of warning level is printed either."""
    need("keras")
    from tests.kit.keras_fit_check import NOISE, run_fit

    out, err = run_fit("tf", str(tmp_path))
    assert not NOISE.findall(out + err), (out + err)[-3000:]
    assert "7/7" in out and "Unknown" not in out
    assert out.strip().splitlines()[-1].startswith("steps=21 batches=7")


def test_only_keras_s_shuffle_warning_is_hidden(ds):
    """Making a shuffled dataset hides Keras's warning about fit(shuffle=True) on a
    tf.data.Dataset, that message from Keras alone; an unshuffled TFBatches hides nothing."""
    import warnings

    from keras.src.trainers.epoch_iterator import EpochIterator  # where fit() warns from

    other = tf.data.Dataset.range(4).batch(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TFBatches(ds, 16, BatchDecoder(SPEC), shuffle=False).dataset()
        EpochIterator(other, shuffle=True)
        assert [str(w.message)[:30] for w in caught] == ["`shuffle=True` was passed, but"]
        caught.clear()
        TFBatches(ds, 16, BatchDecoder(SPEC)).dataset()
        EpochIterator(other, shuffle=True)
        warnings.warn("`shuffle=True` was passed, but will be ignored since the data `x` was "
                      "provided as a tf.data.Dataset (not Keras's)", UserWarning, stacklevel=1)
        warnings.warn("another warning from Keras", UserWarning, stacklevel=1)
    assert [str(w.message)[-13:] for w in caught] == ["(not Keras's)", "ng from Keras"]


def test_specs_without_dtypes_are_refused(ds):
    for decoder in (BatchDecoder(None), BatchDecoder(["id"]), BatchDecoder({"id": None})):
        with pytest.raises(ValueError, match="dtype"):
            TFBatches(ds, 4, decoder)
    with pytest.raises(TypeError, match="BatchDecoder"):
        TFBatches(ds, 4, lambda records: records)
    with pytest.raises(ValueError, match="batch_size"):
        TFBatches(ds, 0, BatchDecoder(SPEC))


def test_file_infos_feed_index_shuffle(ds):
    infos = file_infos(ds)
    assert [i["num_elements"] for i in infos] == SIZES
    assert [os.path.basename(i["path"]) for i in infos] == [f"part-{k}.tfrecord" for k in
                                                             range(3)]
    assert all(set(i) == {"path", "num_elements"} for i in infos)
    records = ds[:]
    # not exported as tf.data.experimental.index_shuffle (TensorFlow 2.21): its module
    from tensorflow.python.data.experimental.ops.shuffle_ops import index_shuffle

    shuffled = index_shuffle(
        infos, lambda files: tf.data.Dataset.from_tensor_slices(records), seed=7)
    got = [bytes(r.numpy()) for r in shuffled]
    assert sorted(got) == sorted(records) and got != records
    with pytest.raises(TypeError, match="ofindex Dataset"):
        file_infos([1, 2])


def test_a_missing_tensorflow_names_the_extra():
    code = ("import sys; sys.modules['tensorflow'] = None\n"
            "try:\n    import ofindex.integrations.tf\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("MissingDependencyError") and "pip install 'ofindex[tf]'" in out
