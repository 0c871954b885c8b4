"""TensorFlow integration: a ``tf.data.Dataset`` of decoded batches of a global shuffle.

:class:`TFBatches` gives ``tf.data`` what its shuffle buffer cannot: every epoch is a full
shuffle of all records of all shards (the order of :class:`ofindex.shuffle.GlobalShuffleSampler`),
split over the input pipelines of a ``tf.distribute`` strategy, and its position is a
``tf.Variable`` that ``tf.train.Checkpoint`` saves with the model::

    import tensorflow as tf
    from ofindex.decode import BatchDecoder, FixedLen, VarLen
    from ofindex.integrations.tf import TFBatches

    spec = {"image": FixedLen((784,), "float32"), "label": FixedLen((), "int64"),
            "tags": VarLen("int64")}                  # VarLen -> tf.RaggedTensor
    batches = TFBatches(ofindex.open("data/"), 256, BatchDecoder(spec), seed=0)
    ckpt = tf.train.Checkpoint(model=model, data=batches)
    model.fit(batches.dataset(inputs="image", targets="label"), epochs=3)

Each batch is read with one ``__getitems__`` call and decoded with one ``BatchDecoder`` call,
in a ``tf.numpy_function`` per *batch* (never a Python call per record) run by a parallel
``map``, and the dataset ends with ``prefetch(AUTOTUNE)``.

* Epochs: one iteration of :meth:`TFBatches.dataset` is an epoch (``len(batches)`` batches,
  its known cardinality); the next iteration (Keras's next epoch, a ``repeat()``, a new
  ``for`` loop) continues with the next epoch's shuffle. Keras ``model.fit`` runs it without
  a warning.
* Position: :attr:`TFBatches.step` counts the batches *taken* from the dataset (batches
  prefetched but not yet taken are not counted), so restoring a checkpoint and iterating
  again resumes at the next batch, none lost or repeated. Transformations after
  :meth:`TFBatches.dataset` that take ahead (``prefetch``, ``shuffle``) count what they take.
* Ranks: ``input_context=`` (from ``strategy.distribute_datasets_from_function``) or
  ``num_replicas=``/``rank=``: each input pipeline reads a strided, disjoint share of every
  epoch.

:func:`file_infos` exports the record counts of an opened dataset (from its manifest or
sidecars) in the form TensorFlow's ``index_shuffle`` (``tf.data`` experimental) expects.
"""

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..decode import BatchDecoder, Ragged, VarLen
from ..errors import missing_extra
from ..read.dataset import Dataset
from ._batch_plan import BatchPlan
from ._fetch import BatchFetch, RecordSource
from ._typed_spec import feature_specs

try:
    import tensorflow as tf
except ImportError as _exc:  # pragma: no cover - exercised without TensorFlow only
    raise missing_extra("ofindex.integrations.tf", "tf", _exc) from _exc

__all__ = ["TFBatches", "feature_specs", "file_infos"]

#: Our value types as TensorFlow dtypes.
_TF_DTYPES = {"bytes": tf.string, "float32": tf.float32, "float64": tf.float64,
              "int32": tf.int32, "int64": tf.int64}
#: Elements: ``{name: tensor}``, or ``(inputs, targets)`` of tensors or dicts of them.
Element = dict[str, Any] | tuple[Any, ...]


class TFBatches(tf.Module):  # type: ignore[misc]
    """Decoded batches of globally shuffled epochs, as a ``tf.data.Dataset``, with a
    position ``tf.train.Checkpoint`` saves.

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitems__`` (or ``__getitem__``).
        batch_size: Records per batch (per input pipeline).
        decoder: A :class:`~ofindex.decode.BatchDecoder` of Examples or OFRecords whose spec
            maps every feature to ``FixedLen`` (a dense tensor ``(batch, *shape)``) or
            ``VarLen`` (a ``tf.RaggedTensor`` ``(batch, None)``).
        seed: Selects the shuffle, with the epoch.
        shuffle: ``False`` reads the records in dataset order.
        drop_remainder: Drop each epoch's last short batch (batches then have a static
            batch dimension).
        input_context: A ``tf.distribute.InputContext``: this pipeline reads share
            ``input_pipeline_id`` of ``num_input_pipelines``.
        num_replicas: The number of ranks, instead of ``input_context``.
        rank: This rank, instead of ``input_context``.
        parallel_batches: Batches read at once (``None``: ``tf.data.AUTOTUNE``).
        name: The ``tf.Module`` name.

    Raises:
        TypeError: ``decoder`` is not a ``BatchDecoder``.
        ValueError: ``batch_size < 1``, the source is empty, ``input_context`` is given with
            ``num_replicas``/``rank``, the ranks are invalid, or the spec has a feature
            without a dtype (see :func:`feature_specs`).
    """

    def __init__(self, source: RecordSource, batch_size: int, decoder: BatchDecoder, *,
                 seed: int = 0, shuffle: bool = True, drop_remainder: bool = False,
                 input_context: Any = None, num_replicas: int | None = None,
                 rank: int | None = None, parallel_batches: int | None = None,
                 name: str | None = None) -> None:
        super().__init__(name=name)
        self._features = feature_specs(decoder)
        world, me = _ranks(input_context, num_replicas, rank)
        self._plan = BatchPlan(len(source), batch_size, seed=seed, shuffle=shuffle,
                               drop_remainder=drop_remainder, num_replicas=world, rank=me)
        self._fetch = BatchFetch(source, decoder)
        self._shuffled = bool(shuffle)
        self._parallel = tf.data.AUTOTUNE if parallel_batches is None else int(parallel_batches)
        self._static_batch = self._plan.batch_size if drop_remainder else None
        self._identity = np.array([len(source), int(seed), self._plan.batch_size, world, me,
                                   int(bool(shuffle)), int(bool(drop_remainder))], np.int64)
        #: Batches taken from this input so far, over all epochs (the checkpointed position).
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        #: What the position belongs to (records, seed, batch size, ranks, ...): a restored
        #: position of another input is refused when the dataset is iterated.
        self.identity = tf.Variable(self._identity, trainable=False, name="identity")

    def __len__(self) -> int:
        """Batches per epoch (of this input pipeline's share)."""
        return len(self._plan)

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return int(self.step.numpy()) // len(self._plan)

    def indices(self, step: int) -> np.ndarray:
        """The global record numbers of batch ``step`` (counted over all epochs).

        Args:
            step: The batch: batch ``step % len(self)`` of epoch ``step // len(self)``.

        Returns:
            An int64 array of record numbers.

        Raises:
            IndexError: ``step`` is negative.
        """
        return self._plan.indices(step)

    def dataset(self, inputs: str | Sequence[str] | None = None,
                targets: str | Sequence[str] | None = None) -> tf.data.Dataset:
        """An epoch's worth of decoded batches (``len(self)``) as a ``tf.data.Dataset``.

        Every new iteration starts at :attr:`step` (the next batch not yet taken) and gives
        ``len(self)`` batches: a whole epoch, and the same dataset iterated again gives the
        next one. After a checkpoint restored in the middle of an epoch, an iteration is the
        rest of that epoch and the start of the next, so that every Keras epoch has the same
        number of steps. The dataset's cardinality is ``len(self)``, so Keras ``model.fit``
        knows the epoch's length; and as the batches are shuffled (``shuffle=True``), making
        the dataset hides Keras's warning that ``fit(shuffle=True)`` will not shuffle a
        ``tf.data.Dataset`` (that message only).

        Args:
            inputs: With ``targets``: the input features of ``(inputs, targets)`` elements
                (a name: that tensor; names: a dict; ``None``: every feature that is not a
                target, as a dict).
            targets: ``None``: elements are ``{name: tensor}``. A name or names: elements
                are ``(inputs, targets)``, as Keras ``model.fit`` takes them.

        Returns:
            A ``tf.data.Dataset``: dense tensors for ``FixedLen`` features, ``tf.string``
            for bytes, ``tf.RaggedTensor`` for ``VarLen``.

        Raises:
            ValueError: A name of ``inputs``/``targets`` is not a feature.
        """
        arrange = _arranger(list(self._features), inputs, targets)
        per_epoch = len(self._plan)
        identity = tf.constant(self._identity)

        def next_steps(_: tf.Tensor) -> tf.data.Dataset:
            same = tf.debugging.assert_equal(
                self.identity, identity, message="restored TFBatches position belongs to "
                "another input (records, seed, batch_size, num_replicas, rank, shuffle, "
                "drop_remainder differ): restore it into a TFBatches made the same way")
            with tf.control_dependencies([same]):
                start = self.step.read_value()
            return tf.data.Dataset.range(start, start + per_epoch)

        def taken(*parts: Any) -> Element:  # a tuple element comes as its parts
            self.step.assign_add(1)  # runs when the consumer takes the batch
            whole: Element = parts[0] if len(parts) == 1 else parts
            return whole

        # flat_map defers reading the position to each iteration, and hides the length:
        # assert_cardinality states it (Keras then runs len(self) steps an epoch, without
        # "Your input ran out of data")
        steps = tf.data.Dataset.range(1).flat_map(next_steps).apply(
            tf.data.experimental.assert_cardinality(per_epoch))
        batches = steps.map(self._read, num_parallel_calls=self._parallel, deterministic=True)
        counted = batches.map(arrange).prefetch(tf.data.AUTOTUNE).map(taken)
        options = tf.data.Options()
        # no prefetch after the count: the count must be of batches the consumer took
        options.experimental_optimization.inject_prefetch = False
        if self._shuffled:
            _quiet_keras_shuffle_warning()
        return counted.with_options(options)

    def _read(self, step: tf.Tensor) -> dict[str, tf.Tensor]:
        """Batch ``step`` in the graph: one ``numpy_function`` call reads and decodes it."""
        out_types = []
        for feature in self._features.values():
            out_types.append(_TF_DTYPES[feature.dtype])
            if isinstance(feature, VarLen):
                out_types.append(tf.int64)
        flat = tf.numpy_function(self._batch_arrays, [step], out_types, stateful=False)
        batch, at = {}, 0
        for name, feature in self._features.items():
            if isinstance(feature, VarLen):
                values, lengths = flat[at], flat[at + 1]
                values.set_shape([None])
                lengths.set_shape([self._static_batch])
                batch[name] = tf.RaggedTensor.from_row_lengths(values, lengths, validate=False)
                at += 2
            else:
                flat[at].set_shape([self._static_batch, *feature.shape])
                batch[name] = flat[at]
                at += 1
        return batch

    def _batch_arrays(self, step: np.ndarray) -> list[np.ndarray]:
        """Read and decode batch ``step``: the features' arrays, in spec order (a ``VarLen``
        feature gives its values and its row lengths)."""
        batch, _ = self._fetch(self._plan.indices(int(step)))
        out: list[np.ndarray] = []
        for name in self._features:
            value = batch[name]
            if isinstance(value, Ragged):
                out += [np.asarray(value.values), value.row_lengths]
            else:
                out.append(value)
        return out


#: Keras's fit(shuffle=True), its default, warns for every tf.data.Dataset that it cannot shuffle
#: it and expects it shuffled already: a shuffled TFBatches dataset is (globally, each epoch).
_KERAS_SHUFFLE_WARNING = (r"`shuffle=True` was passed, but will be ignored since the data `x` "
                          r"was provided as a tf\.data\.Dataset")


def _quiet_keras_shuffle_warning() -> None:
    """Hide Keras's warning that fit(shuffle=True) leaves a ``tf.data.Dataset`` as it is (that
    message, from Keras, only; added once however often it is called)."""
    warnings.filterwarnings("ignore", message=_KERAS_SHUFFLE_WARNING, category=UserWarning,
                            module=r"keras\.")


def _ranks(input_context: Any, num_replicas: int | None,
           rank: int | None) -> tuple[int, int]:
    """``(num_replicas, rank)`` from a ``tf.distribute.InputContext`` or the numbers given
    (1 and 0 by default)."""
    if input_context is not None:
        if num_replicas is not None or rank is not None:
            raise ValueError("give input_context or num_replicas/rank, not both")
        return int(input_context.num_input_pipelines), int(input_context.input_pipeline_id)
    return (1 if num_replicas is None else int(num_replicas)), (0 if rank is None else int(rank))


def _arranger(names: list[str], inputs: str | Sequence[str] | None,
              targets: str | Sequence[str] | None) -> Callable[[dict[str, Any]], Element]:
    """The map from a decoded batch ``{name: tensor}`` to the element asked for."""
    if targets is None:
        if inputs is not None:
            raise ValueError("inputs= needs targets= (without targets elements are "
                             "{name: tensor})")
        return lambda batch: batch
    target_names = [targets] if isinstance(targets, str) else list(targets)
    if inputs is None:
        input_names: str | list[str] = [n for n in names if n not in target_names]
    else:
        input_names = inputs if isinstance(inputs, str) else list(inputs)
    unknown = [n for n in [*([input_names] if isinstance(input_names, str) else input_names),
                           *target_names] if n not in names]
    if unknown:
        raise ValueError(f"{unknown} are not features of the decoder's spec {names}")

    def pick(batch: dict[str, Any], which: str | list[str]) -> Any:
        return batch[which] if isinstance(which, str) else {n: batch[n] for n in which}

    target_pick: str | list[str] = targets if isinstance(targets, str) else target_names
    return lambda batch: (pick(batch, input_names), pick(batch, target_pick))


def file_infos(dataset: Dataset) -> list[dict[str, Any]]:
    """The ``file_infos`` of TensorFlow's ``index_shuffle``: every shard's path and record
    count, from the dataset's manifest or sidecars (no data file is read).

    TensorFlow (2.21) has not exported ``index_shuffle`` under ``tf.data.experimental`` yet:
    it is ``tensorflow.python.data.experimental.ops.shuffle_ops.index_shuffle``.

    ``index_shuffle(file_infos(ds), reader_factory, seed=...)`` shuffles globally with
    TensorFlow's own permutation, given a ``reader_factory`` whose datasets support random
    access (``TFRecordDataset`` does not; :class:`TFBatches` reads TFRecords at random).
    A shard indexed only up to a valid prefix (``allow_partial``) counts its indexed records.

    Args:
        dataset: An ofindex ``Dataset`` (``ofindex.open(...)``).

    Returns:
        ``[{"path": url, "num_elements": records}, ...]`` in shard order.

    Raises:
        TypeError: ``dataset`` is not an ofindex ``Dataset``.
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"file_infos needs an ofindex Dataset (ofindex.open(...)), got "
                        f"{type(dataset).__name__}")
    return [{"path": shard.url, "num_elements": shard.records} for shard in dataset.shards]
