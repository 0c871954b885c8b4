"""What :class:`~ofindex.integrations.grain.GrainBatches` and
:class:`~ofindex.integrations.grain_mixing.GrainMixture` share: Grain ``MapDataset``s whose
elements are whole decoded batches.

* Read options: Grain's defaults (16 threads, 500 elements read ahead per process) are made
  for elements of 1-10 KiB. An element here is a batch (28 MB for 256 ImageNet-like records),
  read and decoded by compiled code that already uses every core without the GIL: 500
  batches ahead would be 14 GB per process, and extra threads only contend.
  :func:`batch_read_options` (one thread, two batches ahead) is the default of
  ``to_iter_dataset`` for these datasets and what ``repeat`` and slices of them give.
* Memory: in a worker process (``mp_prefetch``) the outputs of a batch are decoded into the
  worker's shared-memory ring (:mod:`._shared_ring`), so that Grain's queue carries a
  reference to them instead of pickling the arrays through a pipe (bytes features packed with
  ``pack_bytes`` are a :class:`~ofindex.decode.Ragged` that Grain pickles whole: 28 MB
  per batch, ~25 ms of the main process).
"""

from __future__ import annotations

import builtins
from typing import Any

from ..errors import missing_extra

try:
    import grain
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.grain", "grain", _exc) from _exc

from ._fetch import Allocate
from ._shared_ring import in_worker_process, ring_arrays

__all__ = ["BatchElements", "batch_allocator", "batch_read_options"]

#: Threads reading batches in each process, and batches read ahead (see the module doc:
#: on 2 cores, 1 thread and 2 ahead kept up with 16 and 500 on ImageNet-like batches).
READ_THREADS = 1
READ_AHEAD = 2


def batch_read_options() -> grain.ReadOptions:
    """Grain ``ReadOptions`` for a dataset whose elements are whole batches (see the module
    doc): ``ReadOptions(num_threads=1, prefetch_buffer_size=2)``.

    Returns:
        The options; give them to ``to_iter_dataset`` of a pipeline derived from a
        ``GrainBatches`` in other ways than ``repeat``, slices and ``until_epoch``.
    """
    return grain.ReadOptions(num_threads=READ_THREADS, prefetch_buffer_size=READ_AHEAD)


def batch_allocator() -> Allocate | None:
    """Where a batch's outputs go: the shared-memory ring in a worker process, ``None``
    (the decoder's own arrays) elsewhere."""
    return ring_arrays if in_worker_process() else None


class BatchElements(grain.MapDataset):  # type: ignore[misc]
    """A ``MapDataset`` of whole batches: read with :func:`batch_read_options` unless told
    otherwise; ``repeat`` and slices stay such datasets."""

    def to_iter_dataset(self, read_options: grain.ReadOptions | None = None, *,
                        allow_nones: bool = False) -> grain.IterDataset:
        """This dataset as an ``IterDataset`` (see Grain's ``MapDataset.to_iter_dataset``).

        Args:
            read_options: Grain's read options; ``None``: :func:`batch_read_options`.
            allow_nones: As for Grain's.

        Returns:
            The ``IterDataset``.
        """
        return super().to_iter_dataset(read_options or batch_read_options(),
                                       allow_nones=allow_nones)

    def repeat(self, num_epochs: int | None = None, **kwargs: Any) -> BatchElements:
        """Grain's ``repeat``, still read as batches.

        Args:
            num_epochs: Passes; ``None``: endless.
            **kwargs: Passed to Grain's ``repeat``.

        Returns:
            The repeated dataset.
        """
        return Elements(super().repeat(num_epochs, **kwargs))

    def slice(self, sl: builtins.slice) -> BatchElements:
        """Grain's ``slice``, still read as batches.

        Args:
            sl: The elements kept.

        Returns:
            The sliced dataset.
        """
        return Elements(super().slice(sl))


class Elements(BatchElements):
    """Another ``MapDataset`` of batches (a repeat or a slice) read as batches."""

    def __init__(self, parent: grain.MapDataset) -> None:
        super().__init__(parent)

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, builtins.slice):
            return self.slice(index)
        return self._parent[index]

    def __str__(self) -> str:
        return f"Elements({self._parent})"
