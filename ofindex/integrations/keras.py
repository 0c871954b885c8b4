"""Keras 3 integration: a ``keras.utils.PyDataset`` of decoded batches of a global shuffle.

``model.fit`` takes it on any Keras backend, with worker threads or processes::

    from ofindex.decode import BatchDecoder, FixedLen
    from ofindex.integrations.keras import KerasBatches

    spec = {"image": FixedLen((784,), "float32"), "label": FixedLen((), "int64")}
    batches = KerasBatches(ofindex.open("data/"), 256, BatchDecoder(spec), inputs="image",
                           targets="label", workers=2, use_multiprocessing=True)
    model.fit(batches, epochs=3)

Item ``k`` is batch ``k`` of the current epoch, read with one ``__getitems__`` call and
decoded with one ``BatchDecoder`` call; every epoch is a new full shuffle of all records
(each epoch Keras runs moves to the next: Keras ≥ 3.5 calls ``on_epoch_begin`` and
``on_epoch_end``; outside Keras, call them around each epoch). The order is that
of :class:`ofindex.shuffle.GlobalShuffleSampler`, so ``num_replicas``/``rank`` split every
epoch into disjoint shares. Keras shuffles the order of the batches of an epoch too
(``fit(shuffle=True)``, its default): each record is still seen once per epoch.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..decode import BatchDecoder, Ragged
from ..errors import missing_extra
from ._batch_plan import BatchPlan
from ._fetch import BatchFetch, RecordSource

try:
    import keras
except ImportError as _exc:  # pragma: no cover - exercised without Keras only
    raise missing_extra("ofindex.integrations.keras", "keras", _exc) from _exc

__all__ = ["KerasBatches"]

#: A decoded batch ``{name: array}`` -> what Keras takes: ``(inputs, targets)``, ...
Arrange = Callable[[dict[str, Any]], Any]


class KerasBatches(keras.utils.PyDataset):  # type: ignore[misc]
    """Decoded batches of globally shuffled epochs for Keras 3 ``model.fit``.

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitems__`` (or ``__getitem__``).
        batch_size: Records per batch.
        decoder: Called once per batch with its list of records, e.g. a
            :class:`~ofindex.decode.BatchDecoder` with a mapping spec of ``FixedLen``
            features (Keras takes dense arrays).
        inputs: The input features: a name (that array), names (a dict of arrays) or
            ``None`` (every feature that is not a target, as a dict).
        targets: The target features (a name or names); ``None``: items are ``(inputs,)``.
        transform: Instead of ``inputs``/``targets``: makes the item from the decoded batch
            ``{name: array}`` (e.g. ``(x, y, sample_weight)``); must be picklable with
            ``use_multiprocessing``.
        seed: Selects the shuffle, with the epoch.
        shuffle: ``False`` reads the records in dataset order.
        drop_remainder: Drop each epoch's last short batch.
        num_replicas: The number of ranks sharing each epoch.
        rank: This rank.
        epoch: The epoch to start with (e.g. when resuming a run).
        workers: Keras's worker threads (or processes) reading batches.
        use_multiprocessing: Workers are processes (the dataset is copied into them).
        max_queue_size: Batches Keras keeps ready.

    Raises:
        ValueError: ``batch_size < 1``, the source is empty, ranks are invalid, or a name of
            ``inputs``/``targets`` is not in the decoder's spec.
    """

    def __init__(self, source: RecordSource, batch_size: int,
                 decoder: Callable[..., Any] | None, *,
                 inputs: str | Sequence[str] | None = None,
                 targets: str | Sequence[str] | None = None,
                 transform: Arrange | None = None, seed: int = 0, shuffle: bool = True,
                 drop_remainder: bool = False, num_replicas: int = 1, rank: int = 0,
                 epoch: int = 0, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10) -> None:
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing,
                         max_queue_size=max_queue_size)
        self._plan = BatchPlan(len(source), batch_size, seed=seed, shuffle=shuffle,
                               drop_remainder=drop_remainder, num_replicas=num_replicas,
                               rank=rank)
        self._fetch = BatchFetch(source, decoder)
        names = _spec_names(decoder)
        for name in [*_names(inputs), *_names(targets)]:
            if names is not None and name not in names:
                raise ValueError(f"{name!r} is not a feature of the decoder's spec {names}")
        self._inputs, self._targets, self._transform = inputs, targets, transform
        #: The epoch the items belong to (Keras's epochs move it on).
        self.epoch = int(epoch)
        self._in_epoch = False

    def __len__(self) -> int:
        """Batches per epoch (of this rank's share)."""
        return len(self._plan)

    def indices(self, index: int) -> np.ndarray:
        """The global record numbers of batch ``index`` of the current epoch.

        Args:
            index: The batch, in ``[0, len(self))``.

        Returns:
            An int64 array of record numbers.

        Raises:
            IndexError: ``index`` is outside ``[0, len(self))``.
        """
        if not 0 <= int(index) < len(self._plan):
            raise IndexError(f"batch {index} outside [0, {len(self._plan)})")
        return self._plan.indices(self.epoch * len(self._plan) + int(index))

    def __getitem__(self, index: int) -> Any:
        """Batch ``index`` of the current epoch, read and decoded.

        Args:
            index: The batch, in ``[0, len(self))``.

        Returns:
            ``transform(batch)``, else ``(inputs, targets)`` or ``(inputs,)``.

        Raises:
            IndexError: ``index`` is outside ``[0, len(self))``.
            ValueError: A feature Keras would receive is ragged (``VarLen``): give a
                ``transform`` that makes it dense.
        """
        batch, _ = self._fetch(self.indices(index))
        if self._transform is not None:
            return self._transform(batch)
        if not isinstance(batch, dict):
            return (batch,)
        x = self._pick(batch, self._inputs, exclude=_names(self._targets))
        if self._targets is None:
            return (x,)
        return x, self._pick(batch, self._targets, exclude=[])

    @staticmethod
    def _pick(batch: dict[str, Any], which: str | Sequence[str] | None,
              exclude: list[str]) -> Any:
        chosen = ([n for n in batch if n not in exclude] if which is None
                  else [which] if isinstance(which, str) else list(which))
        ragged = [n for n in chosen if isinstance(batch[n], Ragged)]
        if ragged:
            raise ValueError(f"features {ragged} are ragged (VarLen): Keras takes dense "
                             "arrays; give KerasBatches a transform= that pads them")
        return batch[which] if isinstance(which, str) else {n: batch[n] for n in chosen}

    def on_epoch_begin(self) -> None:
        """Keras starts an epoch: the next :meth:`on_epoch_end` ends it."""
        self._in_epoch = True

    def on_epoch_end(self) -> None:
        """Move to the next epoch's shuffle after an epoch Keras began (Keras also calls it
        when it resets its iterator, before the first epoch: that call is ignored)."""
        if self._in_epoch:
            self.epoch += 1
        self._in_epoch = False


def _names(which: str | Sequence[str] | None) -> list[str]:
    return [] if which is None else [which] if isinstance(which, str) else list(which)


def _spec_names(decoder: object) -> list[str] | None:
    """The feature names of a ``BatchDecoder`` with a mapping spec, else ``None``."""
    spec = decoder.spec if isinstance(decoder, BatchDecoder) else None
    return [str(n) for n in spec] if isinstance(spec, dict) else None
