"""Blocks of shared memory that a DataLoader worker reuses for the batches it sends.

A batch made in a worker reaches the main process in shared memory. A fresh block per batch
costs the kernel's zeroing and a page fault per 4 KiB of it, on both sides: for a batch of
256 JPEGs of ~110 KB (28 MB) that is about 18 ms, more than reading and decoding the batch.
A worker therefore keeps a few blocks and reuses one only once nothing refers to it:

* no tensor in the worker: the use count of the block's storage is back to the ring's own;
* none in the main process: each tensor lent out (pickled to the main process) adds one to
  the block's counter (in a small shared array of its own), and arrives there with a
  finalizer on its storage that subtracts one again once no tensor or view uses the
  storage any more (torch keeps a storage's Python object as long as the storage lives).

So a batch that is kept (or any view of it) is never overwritten: its block simply stays
out of the ring's reach, and the worker takes another block or a fresh one.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import torch
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.torch", "torch", _exc) from _exc

#: Blocks each worker keeps (a batch takes one for its numbers and one per bytes feature;
#: a few batches are in flight: the DataLoader's prefetch, the one being used).
SLOTS = 8


def _use_count(block: torch.Tensor) -> int:
    """References to ``block``'s storage from tensors of this process (see the module doc)."""
    count: int = torch._C._storage_Use_Count(block.untyped_storage()._cdata)
    return count


#: Whether this torch tells the use count of a storage (an internal function since 2.0).
_CAN_COUNT = hasattr(torch._C, "_storage_Use_Count")


def _new_shared(size: int) -> torch.Tensor:
    """A fresh ``uint8`` tensor of ``size`` bytes in shared memory."""
    proto = torch.empty(0, dtype=torch.uint8)
    block: torch.Tensor = proto.new(proto._typed_storage()._new_shared(  # type: ignore[no-untyped-call]
        size, device="cpu"))
    return block


class _Block:
    """One reusable block: its tensor, its counter of tensors lent out (a view of the ring's
    shared counters), and the use count of its storage when only the ring refers to it."""

    def __init__(self, size: int, lent: torch.Tensor) -> None:
        self.tensor = _new_shared(size)
        self.lent = lent
        self.lent.zero_()
        self.own = _use_count(self.tensor)

    @property
    def capacity(self) -> int:
        return self.tensor.numel()

    def free(self) -> bool:
        """Whether no tensor of this process nor of another refers to the block's data."""
        return int(self.lent.item()) == 0 and _use_count(self.tensor) == self.own


class LentTensor(torch.Tensor):
    """A tensor on a reused block: pickled to the main process, it counts itself as lent
    out there (see the module doc). Operations on it give plain tensors."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]
    _lent: torch.Tensor

    def __reduce_ex__(self, protocol: Any) -> Any:
        lent = getattr(self, "_lent", None)
        plain = self.as_subclass(torch.Tensor)
        if lent is None:  # not made by the ring (e.g. a copy): pickled as a plain tensor
            return plain.__reduce_ex__(protocol)  # type: ignore[no-untyped-call]
        lent += 1
        return _received, (plain, lent)


def _received(plain: torch.Tensor, lent: torch.Tensor) -> torch.Tensor:
    """A lent tensor arriving in the main process, given back to the worker's ring once no
    tensor uses its storage any more."""
    weakref.finalize(plain.untyped_storage(), _give_back, lent.numpy())
    return plain


def _give_back(counter: np.ndarray) -> None:
    """Count a lent tensor back (its storage died in this process)."""
    counter[0] -= 1


class SharedBlocks:
    """A worker's ring of reusable shared-memory blocks.

    Args:
        slots: Blocks kept; when none is free, a batch gets a fresh block of its own.
    """

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self._blocks: list[_Block] = []
        self._counters: torch.Tensor | None = None
        self._pid = os.getpid()
        self.fresh = 0  # batches that found no free block (for tests and tuning)

    def take(self, size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``size`` bytes of shared memory for one batch: a view of a free block (one is
        added, or a free one grown, when none is big enough), or a fresh block of its own
        when every block is in use.

        Args:
            size: Bytes needed.

        Returns:
            ``(memory, counter)``: a ``uint8`` tensor of ``size`` bytes, 64-byte aligned, and
            its block's lent-out counter to give :func:`lend` (``None`` for a fresh block).
        """
        if not _CAN_COUNT:  # torch without storage use counts: a fresh block each time
            self.fresh += 1
            return _new_shared(size), None
        if os.getpid() != self._pid:  # forked: the parent's blocks are not ours to reuse
            self._blocks, self._counters, self._pid = [], None, os.getpid()
        if self._counters is None:
            self._counters = _new_shared(8 * self.slots).view(torch.int64)
        free = [k for k, b in enumerate(self._blocks) if b.free()]
        fits = [k for k in free if self._blocks[k].capacity >= size]
        if fits:  # the smallest that fits: big blocks stay for big batches
            block = self._blocks[min(fits, key=lambda k: self._blocks[k].capacity)]
        elif free or len(self._blocks) < self.slots:
            k = free[0] if free else len(self._blocks)
            block = _Block(max(size + size // 4, 1 << 20),  # room to grow a little
                           self._counters[k:k + 1])
            if free:
                self._blocks[k] = block
            else:
                self._blocks.append(block)
        else:
            self.fresh += 1
            return _new_shared(size), None
        return block.tensor[:size], block.lent


def lend(tensor: torch.Tensor, counter: torch.Tensor | None) -> torch.Tensor:
    """``tensor`` (a view of memory from :meth:`SharedBlocks.take`) as it should be handed
    out: a :class:`LentTensor` counted in ``counter`` when pickled, or itself (``None``)."""
    if counter is None:
        return tensor
    lent = tensor.as_subclass(LentTensor)
    lent._lent = counter
    return lent


#: This process's ring (used in DataLoader workers only).
BLOCKS = SharedBlocks()
