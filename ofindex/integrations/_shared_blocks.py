"""Tensors on a DataLoader worker's ring of shared-memory blocks (:mod:`._shared_ring`).

A worker decodes a batch straight into a block of its ring and returns tensors on it
(:class:`LentTensor`). Sent through the DataLoader's result queue, such a tensor travels as a
reference to its block, not as a storage whose file descriptor torch would pass over a socket
for every batch; the main process rebuilds it as a tensor on its own mapping of the block
(mapped once), which gives the block back to the worker's ring when its storage dies.
Anything else (``torch.save`` in the worker, an operation's result) is an ordinary tensor.
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import torch
    from torch.multiprocessing.reductions import reduce_tensor
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.torch", "torch", _exc) from _exc

from ._shared_ring import AVAILABLE, RING, SharedArray, attach, reference

__all__ = ["AVAILABLE", "RING", "LentTensor", "lend", "shared_bytes"]


class LentTensor(torch.Tensor):
    """A tensor on a block of the worker's ring (see the module doc). Operations on it give
    plain tensors."""

    _array: np.ndarray

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        """Run ``func`` as on plain tensors, so that its results are plain tensors (an
        in-place operation returns the lent tensor itself). torch's public protocol, at ~4.5
        us an operation on a lent tensor over torch's private switch that does the same."""
        return torch.Tensor.__torch_function__(  # type: ignore[no-untyped-call]
            func, (torch.Tensor,), args, kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickled by anything but a queue
        return self.as_subclass(torch.Tensor).__reduce_ex__(protocol)  # type: ignore[no-untyped-call]


def _reduce_lent(tensor: LentTensor) -> Any:
    """ForkingPickler's reduction of a :class:`LentTensor`: a reference to its block."""
    array = getattr(tensor, "_array", None)
    ref = reference(array) if array is not None else None
    if ref is None:  # not (or no longer) on a block: torch's own sharing
        return reduce_tensor(tensor.as_subclass(torch.Tensor))  # type: ignore[no-untyped-call]
    return _received, ref


def _received(*ref: Any) -> torch.Tensor:
    """A lent tensor arriving in the main process (given back when its storage dies)."""
    return torch.from_numpy(attach(*ref))


ForkingPickler.register(LentTensor, _reduce_lent)


def shared_bytes(size: int) -> SharedArray | torch.Tensor:
    """``size`` bytes for a worker's batch: a ``uint8`` array on the ring, or (without
    ``memfd_create``) a tensor in fresh shared memory that torch shares as usual."""
    if AVAILABLE:
        return RING.take(size)
    return torch.empty(size, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]


def lend(memory: np.ndarray | torch.Tensor, dtype: np.dtype[Any],
         shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor of ``dtype`` and ``shape`` on ``memory`` (from :func:`shared_bytes`):
    a :class:`LentTensor` on the ring, or a view of the shared tensor."""
    if isinstance(memory, torch.Tensor):
        return memory.view(torch.from_numpy(np.empty(0, dtype)).dtype).view(shape)
    array = memory.view(dtype).reshape(shape)
    lent = torch.from_numpy(array).as_subclass(LentTensor)
    lent._array = array
    return lent
