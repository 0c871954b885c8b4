"""Writing a dataset's key indexes from its shards' column sidecars (the last step of a build
with ``columns=`` that writes a manifest; see :mod:`.key_file`).

Each column's values are read from every shard's column sidecar (checked against the shard's
sidecar), numbered globally, sorted by value and then record, and written as one key index
beside the manifest. The sort is done in memory: about 16 bytes per record with a value for
number columns, and the values' own size plus 16 bytes for bytes columns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..storage import Storage
from .column_file import column_path, decode_column
from .key_file import encode_key_index, key_file_name
from .packed import PackedBytes
from .shard_reader import ShardPlace, check_meta
from .value_types import ValueType, joined_type

#: Longest key sorted with numpy as fixed-width strings (longer ones are sorted by Python).
_WIDEST_NUMPY_KEY = 256


@dataclasses.dataclass
class _Gathered:
    """A column's values over the dataset, with their global record numbers."""

    vtype: ValueType
    parts: list[tuple[np.ndarray | PackedBytes, np.ndarray]]


def _gather(shards: Sequence[ShardPlace], column: str) -> _Gathered:
    types, names = [], []
    parts: list[tuple[np.ndarray | PackedBytes, np.ndarray]] = []
    first = 0
    for shard in shards:
        path = column_path(shard.index_path, column)
        url = shard.index_storage.url(path)
        meta, values, valid = decode_column(shard.index_storage.read_all(path), url)
        check_meta(meta, shard, column)
        types.append(meta.header.vtype)
        names.append(shard.data_url)
        if meta.header.vtype is not ValueType.NONE:
            keep = valid.copy()
            if isinstance(values, np.ndarray) and values.dtype.kind == "f":
                keep &= ~np.isnan(values)  # NaN equals nothing: no key
            picked = np.flatnonzero(keep)
            chosen = values if len(picked) == len(keep) else (
                values.take(picked) if isinstance(values, PackedBytes) else values[picked])
            parts.append((chosen, picked + first))
        first += shard.records
    return _Gathered(joined_type(types, column, names), parts)


#: Numbers whose range needs at most this many bits are sorted by numpy's radix sort (a
#: stable sort of uint8 or uint16 keys: a million labels of 10 classes in 4.6 ms of CPU,
#: where the stable sort of their int64 values takes 39 ms).
_RADIX_BITS = 16


def stable_order(words: np.ndarray) -> np.ndarray:
    """The stable order of unsigned 64-bit ``words`` (ties keep their order): that of the
    numbers above their least, by numpy's radix sort when they fit in 16 bits, else by one
    sort of the numbers and their positions packed in one word when both fit (a million
    13-byte ids: 60 ms of CPU where numpy's argsort takes 104 ms), else numpy's stable
    argsort."""
    count = len(words)
    if count < 2:
        return np.arange(count, dtype=np.int64)
    shifted = words - words.min()
    ored = int(np.bitwise_or.reduce(shifted))
    if ored == 0:  # all equal
        return np.arange(count, dtype=np.int64)
    low_zeros = (ored & -ored).bit_length() - 1  # bits every number has clear: left out
    shifted >>= np.uint64(low_zeros)
    bits = (ored >> low_zeros).bit_length()
    if bits <= _RADIX_BITS:
        narrow = shifted.astype(np.uint8 if bits <= 8 else np.uint16)
        radix: np.ndarray = np.argsort(narrow, kind="stable")
        return radix.astype(np.int64, copy=False)
    position_bits = (count - 1).bit_length()
    if bits + position_bits > 64:
        order: np.ndarray = np.argsort(words, kind="stable")
        return order
    packed = (shifted << np.uint64(position_bits)) | np.arange(count, dtype=np.uint64)
    packed.sort()  # ties are then in the order of their positions: stable
    positions: np.ndarray = (packed & np.uint64((1 << position_bits) - 1)).astype(np.int64)
    return positions


def _number_order(keys: np.ndarray) -> np.ndarray:
    """The stable order of numeric keys (int64 through :func:`stable_order`, floats by
    numpy's stable argsort: ``-0.0`` and ``0.0`` are equal keys, whose bits differ)."""
    if keys.dtype.kind == "i":
        flipped = keys.astype(np.int64).view(np.uint64) ^ np.uint64(1 << 63)  # int64 order
        return stable_order(flipped)
    order: np.ndarray = np.argsort(keys, kind="stable")
    return order


def _bytes_order(keys: PackedBytes) -> np.ndarray:
    """The stable order of bytes values (ties keep their order).

    The values are zero-padded to one width, the leading bytes all of them share (an id's
    ``img-000``) left out, and the rest compared as big-endian uint64 words, then by length
    (a value is before a longer one that it starts, even one that only adds zero bytes):
    numpy sorts numbers several times faster than fixed-width strings (a million 13-byte ids
    as ``S13``: 1.7 s). Ids whose distinct bytes fit in one word are sorted by one sort of
    it (:func:`stable_order`): a million 13-byte ids, 0.06 s of CPU where the lexsort of both
    words and the lengths takes 0.19-0.24 s.
    """
    lengths = keys.lengths
    widest = int(lengths.max()) if len(lengths) else 0
    if widest > _WIDEST_NUMPY_KEY or widest == 0:
        items = keys.tolist()
        return np.array(sorted(range(len(items)), key=items.__getitem__), dtype=np.int64)
    table = np.zeros((len(keys), widest), dtype=np.uint8)
    if keys.width() == widest:
        base = int(keys.offsets[0])
        table[:] = keys.data[base:base + widest * len(keys)].reshape(len(keys), widest)
    else:
        for length in np.unique(lengths).tolist():
            chosen = np.flatnonzero(lengths == length)
            table[chosen, :length] = keys.data[keys.offsets[chosen][:, None]
                                               + np.arange(length)]
    differing = np.flatnonzero((table != table[0]).any(axis=0))
    shared = int(differing[0]) if len(differing) else widest
    rest = table[:, shared:]
    words = max(1, -(-rest.shape[1] // 8))
    padded = np.zeros((len(keys), 8 * words), dtype=np.uint8)
    padded[:, :rest.shape[1]] = rest
    columns = padded.view(">u8").astype(np.uint64)
    if words == 1 and int(lengths.min()) == widest:
        return stable_order(columns[:, 0])
    order: np.ndarray = np.lexsort((lengths, *(columns[:, k] for k in reversed(range(words)))))
    return order


def build_key_index(shards: Sequence[ShardPlace], column: str, identity: str,
                    storage: Storage, path: str) -> int:
    """Write the key index of ``column`` of the dataset ``shards`` (in order) at ``path``.

    Args:
        shards: The dataset's shards, in order.
        column: The column.
        identity: The dataset's identity.
        storage: Where the key index goes.
        path: Its path (see :func:`~ofindex.columns.key_file.key_file_name`).

    Returns:
        The bytes written.

    Raises:
        ColumnError: Shards store the column as different types.
        ColumnNotFoundError, StaleIndexError, SidecarError: A shard's column sidecar is
            missing, of another version of its sidecar, or damaged.
    """
    gathered = _gather(shards, column)
    vtype = gathered.vtype
    total = sum(shard.records for shard in shards)
    records = (np.concatenate([r for _, r in gathered.parts]) if gathered.parts
               else np.zeros(0, dtype=np.int64))
    keys: np.ndarray | PackedBytes
    if vtype is ValueType.BYTES:
        keys = PackedBytes.concat(v for v, _ in gathered.parts if isinstance(v, PackedBytes))
        order = _bytes_order(keys)
        keys = keys.take(order)
    else:
        numbers = [v for v, _ in gathered.parts if isinstance(v, np.ndarray)]
        keys = np.concatenate(numbers) if numbers else np.zeros(0, dtype=vtype.dtype)
        order = _number_order(keys)  # records ascend already: ties keep them so
        keys = keys[order]
    parts = encode_key_index(column, vtype, keys, records[order], total, identity)
    storage.write_atomic(path, list(parts))
    return sum(map(len, parts))


def key_index_path(storage: Storage, directory: str, column: str) -> str:
    """Where the key index of ``column`` goes in ``directory``."""
    return storage.join(directory, key_file_name(column))
