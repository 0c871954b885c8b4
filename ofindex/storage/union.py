"""One storage for the files of several: what lets datasets opened apart be read as one.

Two storages can be joined when they are the same kind with the same settings (a local disk
with memory maps; the same fsspec protocol, options, concurrency and retry policy): the
joined storage reads any of their files and checks each file it opens against the stamps
of whichever storage expects it (:class:`~.stamp.ExpectedUnion`), and closes whenever one
of them does.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Storage
from .stamp import ExpectedUnion

__all__ = ["joined_storage"]


def joined_storage(storages: Sequence[Storage]) -> Storage | None:
    """A storage that reads the files of all ``storages``, or ``None`` when they differ.

    Args:
        storages: Storages, at least one.

    Returns:
        A new storage of their kind and settings with the union of their expected files
        (the one storage itself when all are the same object); ``None`` when two differ in
        kind or settings, or a kind does not say its settings (no ``__getstate__`` with an
        ``expected`` entry).

    Raises:
        ValueError: ``storages`` is empty.
    """
    if not storages:
        raise ValueError("joined_storage needs at least one storage")
    first = storages[0]
    if all(storage is first for storage in storages):
        return first
    kind = type(first)
    settings = []
    for storage in storages:
        settings_of = getattr(storage, "__getstate__", None)
        state = settings_of() if type(storage) is kind and settings_of is not None else None
        if not isinstance(state, dict) or "expected" not in state:
            return None
        settings.append({name: value for name, value in state.items() if name != "expected"})
    if any(other != settings[0] for other in settings[1:]):
        return None
    joined = kind.__new__(kind)
    restore = getattr(joined, "__setstate__", None)
    if restore is None:
        return None
    restore({**settings[0], "expected": ExpectedUnion([s.expected for s in storages])})
    for storage in storages:  # a source's dataset closed: the joined handles go too
        storage.close_together(joined)
    return joined
