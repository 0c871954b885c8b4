"""Class-balanced batches of one dataset: :class:`BalancedSampler`, a weighted mixture of the
dataset's classes.

The classes are the distinct values of a column (``ds.groups(by)``: built with
``build_index(columns=[by])``); each is a source of the mixture of :mod:`.mixing`, so every
batch holds the given proportions of the classes (exactly, or sampled), each class globally
shuffled on its own (a Feistel permutation per class epoch: within a class epoch every record
of the class comes once) and starting its next epoch when it runs out. Checkpoints, ranks,
DataLoader workers, elastic resume (another number of ranks or workers) and new weights on
resume are the mixture's. Memory: the column's record numbers grouped by class (8 bytes a
record) and O(number of classes) besides.
"""

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ._data import identity_of
from .mixing import MixtureSampler
from .permutation import DEFAULT_ROUNDS

__all__ = ["BalancedSampler"]


class Grouped(Protocol):
    """What a balanced sampler draws from: an ofindex ``Dataset`` or view with columns."""

    def __len__(self) -> int: ...

    def groups(self, column: str) -> tuple[list[Any], list[np.ndarray]]: ...


def _grouped(data: object, by: str) -> Grouped:
    """The ofindex dataset ``data`` is or wraps (a ``TorchDataset``'s ``source``, a
    wrapper's ``dataset``), with its columns.

    Raises:
        TypeError: None of them has columns.
    """
    found = data
    for _ in range(4):  # a wrapper of a wrapper of a dataset, at most
        if callable(getattr(found, "groups", None)):
            return found  # type: ignore[return-value]
        found = getattr(found, "source", None) or getattr(found, "dataset", None)
    raise TypeError(f"BalancedSampler takes an ofindex Dataset (or a view of one, or a "
                    f"TorchDataset of one) whose column {by!r} was built, not "
                    f"{type(data).__name__}")


def _weights_of(values: list[Any], weights: Mapping[Any, float] | None, by: str
                ) -> list[tuple[int, float]]:
    """``(class number, weight)`` of the classes drawn (all with weight 1 by default; with a
    mapping, the classes it names with a positive weight)."""
    if weights is None:
        return [(k, 1.0) for k in range(len(values))]
    if not isinstance(weights, Mapping):
        raise TypeError(f"BalancedSampler: weights= is a mapping {{class: weight}} or None, "
                        f"not {type(weights).__name__}")
    where = {_key(v): k for k, v in enumerate(values)}
    unknown = [w for w in weights if _key(w) not in where]
    if unknown:
        shown = ", ".join(repr(v) for v in values[:10]) + (" ..." if len(values) > 10 else "")
        raise ValueError(f"BalancedSampler: weights name {unknown!r}, which no record of "
                         f"column {by!r} holds (its classes: {shown})")
    chosen = []
    for given, weight in weights.items():
        if not isinstance(weight, (int, float, np.integer, np.floating)) or \
                isinstance(weight, bool) or not np.isfinite(weight) or weight < 0:
            raise ValueError(f"BalancedSampler: the weight of class {given!r} must be a "
                             f"number >= 0, not {weight!r}")
        if weight > 0:
            chosen.append((where[_key(given)], float(weight)))
    if not chosen:
        raise ValueError("BalancedSampler: every class has weight 0; give one a positive "
                         "weight")
    return sorted(chosen)


def _key(value: Any) -> Any:
    """A class value as the classes are keyed (a ``str`` stands for its UTF-8 bytes, a numpy
    scalar for its Python value)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


class BalancedSampler(MixtureSampler):
    """Batches of one dataset in fixed proportions of the classes of a column.

    Use it as a DataLoader's ``sampler`` with ``batch_size=None`` (each item is a batch: a
    list of the dataset's record numbers), or iterate it and read ``ds[batch]``.

    Args:
        data: An ofindex ``Dataset`` (or a view of one: ``ds.where(...)``, or a
            ``TorchDataset`` of one) whose column ``by`` was built
            (``build_index(columns=[by])``).
        by: The column whose values are the classes (records without a value are left out).
        weights: ``None`` for equal shares of every class, or ``{class: weight}`` (any
            scale; classes not named, or of weight 0, are not drawn; a ``str`` names a bytes
            class by its UTF-8 bytes).
        batch_size: Records per batch.
        seed: Selects the classes' orders (and the draws when ``sampled``).
        sampled: Draw each record's class at random with the weights' probabilities instead
            of exact counts per batch.
        epoch_size: ``"sum"`` (the default: as many records as the classes drawn hold),
            ``"first"`` (the batches in which the first class drawn is read once) or a
            number of records.
        num_replicas: The number of ranks (``None``: from ``torch.distributed``, else 1).
        rank: This rank (``None``: from ``torch.distributed``, else 0).
        drop_last: Drop the epoch's last batches that do not split evenly over the ranks.
        rounds: Feistel rounds of the classes' permutations.

    Raises:
        TypeError: ``data`` has no columns (``groups``), or ``weights`` is not a mapping.
        ValueError: No record has a value of ``by``, weights name a class that does not
            exist or are not numbers >= 0, or as :class:`MixtureSampler`.
        ColumnError, ColumnNotFoundError: As ``data.groups(by)``.
    """

    def __init__(self, data: Grouped, by: str, weights: Mapping[Any, float] | None = None,
                 batch_size: int = 256, *, seed: int = 0, sampled: bool = False,
                 epoch_size: str | int = "sum", num_replicas: int | None = None,
                 rank: int | None = None, drop_last: bool = False,
                 rounds: int = DEFAULT_ROUNDS) -> None:
        values, members = _grouped(data, by).groups(by)
        if not values:
            raise ValueError(f"BalancedSampler: no record holds a value of column {by!r}")
        chosen = _weights_of(values, weights, by)
        #: The column whose values are the classes.
        self.by = by
        #: The classes drawn, in order (their values), and each one's records.
        self.classes = [values[k] for k, _ in chosen]
        self.members = np.concatenate([members[k] for k, _ in chosen]).astype(np.int64)
        super().__init__([len(members[k]) for k, _ in chosen], [w for _, w in chosen],
                         batch_size, seed=seed, sampled=sampled, epoch_size=epoch_size,
                         num_replicas=num_replicas, rank=rank, drop_last=drop_last,
                         rounds=rounds)
        self.datasets = [identity_of(data)]

    def _mapped(self, indices: np.ndarray) -> np.ndarray:
        """The dataset's records of the mixture's indices (class ``s``'s ``k``-th record)."""
        mapped: np.ndarray = self.members[indices]
        return mapped

    def class_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The class of each of the dataset's records ``indices``.

        Args:
            indices: Record numbers (as this sampler yields them).

        Returns:
            An int64 array: each record's class number in :attr:`classes`, -1 for a record
            of no class drawn.
        """
        wanted = np.asarray(indices, dtype=np.int64).reshape(-1)
        out = np.full(len(wanted), -1, dtype=np.int64)
        bounds = np.append(self.plan.offsets, len(self.members))
        for s in range(len(self.classes)):
            part = self.members[bounds[s]:bounds[s + 1]]
            at = np.searchsorted(part, wanted)
            hit = (at < len(part)) & (part[np.minimum(at, len(part) - 1)] == wanted)
            out[hit] = s
        return out

    def compatibility(self) -> dict[str, Any]:
        """The mixture's fields, and the column and its classes (a state saved with other
        classes drawn, or another column, is refused).

        Returns:
            The fields and their values.
        """
        fields = super().compatibility()
        digest = hashlib.sha256(repr([_key(v) for v in self.classes]).encode()).hexdigest()
        return {**fields, "by": self.by, "classes": digest[:16]}
