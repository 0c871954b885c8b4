"""What the samplers sample: the ``data`` argument (a dataset, anything with ``len()``, a
record count) and, for the block shuffle, the shard sizes behind it."""

from collections.abc import Sequence, Sized

import numpy as np

#: What a sampler samples: a dataset (an ofindex ``Dataset`` or any object with ``len()``) or
#: a number of records.
Data = Sized | int
#: Per-shard record counts, in dataset order.
ShardSizes = Sequence[int] | np.ndarray

_FORMS = "an ofindex Dataset, any object with len(), or a number of records (int)"
_SHARD_FORMS = ("an ofindex Dataset (its shards are used), any object with len() (one shard), "
                "a number of records (int, one shard), or shard_sizes=[records per shard]")


def record_count(data: object, who: str, forms: str = _FORMS) -> int:
    """The number of records ``data`` stands for (>= 1)."""
    if isinstance(data, (bool, np.bool_)) or not isinstance(data, (int, np.integer, Sized)):
        raise TypeError(f"{who} takes {forms}; got {type(data).__name__}")
    if isinstance(data, (str, bytes)):
        raise TypeError(f"{who} takes {forms}; got the {type(data).__name__} {data!r} "
                        "(open the dataset first: ofindex.open(...))")
    try:
        n = int(data) if isinstance(data, (int, np.integer)) else len(data)
    except TypeError:  # e.g. a 0-d array: Sized, but len() refuses it
        raise TypeError(f"{who} takes {forms}; got {type(data).__name__} without a length") \
            from None
    if n < 1:
        raise ValueError(f"cannot sample from an empty dataset (n={n})")
    return n


def _counts(sizes: object, what: str) -> list[int] | None:
    """``sizes`` as per-shard counts if it is a list/tuple/1-D array of numbers, else None."""
    if isinstance(sizes, np.ndarray):
        if sizes.dtype.kind not in "iuf":
            return None
        arr = sizes.reshape(-1)
    elif isinstance(sizes, (list, tuple)):
        if not all(isinstance(c, (int, float, np.integer, np.floating))
                   and not isinstance(c, (bool, np.bool_)) for c in sizes):
            return None
        arr = np.asarray(sizes, dtype=np.float64 if any(
            isinstance(c, (float, np.floating)) for c in sizes) else np.int64).reshape(-1)
    else:
        return None
    if arr.dtype.kind == "f" and not np.array_equal(arr, np.floor(arr)):
        raise ValueError(f"{what} must be whole record counts, got {arr.tolist()}")
    if (arr < 0).any():
        raise ValueError(f"{what} must be non-negative record counts, got {arr.tolist()}")
    return [int(c) for c in arr.astype(np.int64)]


def shard_sizes_of(data: object, shard_sizes: object) -> list[int]:
    """The per-shard record counts :class:`BlockShuffleSampler` is asked to sample."""
    who = "BlockShuffleSampler"
    if shard_sizes is not None:
        if data is not None:
            raise TypeError(f"{who}: give the data or shard_sizes=, not both")
        sizes = _counts(shard_sizes, "shard_sizes")
        if sizes is None:
            raise TypeError(f"{who}: shard_sizes must be a list, tuple or 1-D array of "
                            f"per-shard record counts; got {type(shard_sizes).__name__}")
        return sizes
    if data is None:
        raise TypeError(f"{who} takes {_SHARD_FORMS}; got None")
    cum = getattr(data, "cumulative_counts", None)
    if cum is not None:  # a Dataset: records in shards 0..k
        cum = np.asarray(cum() if callable(cum) else cum, dtype=np.int64).reshape(-1)
        return [int(c) for c in np.diff(cum, prepend=0)]
    sizes = _counts(data, "shard sizes")  # the older positional form: BlockShuffleSampler([..])
    return sizes if sizes is not None else [record_count(data, who, _SHARD_FORMS)]


def identity_of(data: object) -> str | None:
    """The identity of the ofindex dataset ``data`` is or wraps (its ``identity``; a wrapper's
    ``source`` or ``dataset``: ``TensorBatches``, ``TorchDataset`` …), or ``None`` (a record
    count, or another kind of data)."""
    for _ in range(4):  # a wrapper of a wrapper of a dataset, at most
        if data is None or isinstance(data, (int, np.integer)):
            return None
        identity = getattr(data, "identity", None)
        if isinstance(identity, str):
            return identity
        data = getattr(data, "source", None) or getattr(data, "dataset", None)
    return None
