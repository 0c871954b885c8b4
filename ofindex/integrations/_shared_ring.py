"""Reusable shared-memory blocks for the batches a worker process sends to its main process.

A batch made in a worker (a PyTorch DataLoader worker, a Grain ``mp_prefetch`` process)
reaches the main process through a queue. Pickled as plain arrays, a batch of 256 JPEGs of
~110 KB is 28 MB copied twice and written through a pipe (Grain: ~25 ms of the main
process's time per batch); shared as a fresh block per batch, it costs the kernel's zeroing
and a page fault per 4 KiB on both sides, and torch sends the block's file descriptor over a
socket with an authentication round trip for every storage of every batch (~0.8 ms of the
main process per MNIST-like batch of 256, more than the worker takes to make it).

So a worker keeps a small ring of blocks (anonymous shared memory, ``memfd_create``) and
decodes each batch straight into a free one. Pickled for a multiprocessing queue (the
``ForkingPickler`` that DataLoader and Grain use; any other pickler copies the data as
usual), an array on a block becomes a reference: the block's id, offset, shape and dtype.
The block's file descriptor travels with its references only until the main process says
(in the block's header) that it has mapped it; from then on a batch is a few hundred bytes
and the main process builds its arrays as views of memory it maps once.

A block is reused only once nothing refers to it:

* not in the worker: no array of the worker derives from the block (its root array's
  reference count is back to the ring's own);
* not in the main process: the header counts the arrays lent out (written by the worker
  only) and the arrays given back (written by the main process only, when the last view of
  an array it received dies), so each count has one writer; the block is free when they
  are equal.

A batch that is kept (or any view of it) is therefore never overwritten: its block stays out
of the ring's reach and the worker takes another block, or a fresh one. A block leaves the
ring for good (a bigger one replaces it, or the worker exits) by being *retired* in its
header: the main process unmaps it once its arrays are given back, and the worker releases
its memory at once if none is lent out. (A worker killed outright retires nothing: the main
process then keeps that worker's blocks mapped, at most :data:`SLOTS` of them, until it
exits.) The memory has no name, so nothing is left behind in ``/dev/shm``: it is freed when
the last process maps it no more. Where ``memfd_create`` does not exist (not Linux),
:data:`AVAILABLE` is False and callers allocate ordinary arrays.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import mmap
import os
import sys
import threading
import weakref
from multiprocessing import util
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import numpy as np

#: Whether this platform has anonymous shared memory that can be passed by descriptor.
AVAILABLE = hasattr(os, "memfd_create")

#: Blocks each worker keeps (a batch takes one for its numbers and one per bytes feature;
#: a few batches are in flight: the loader's prefetch, the one being used).
SLOTS = 8

#: Bytes before a block's data: its header of int64 words.
HEADER = 64
_LENT, _RETURNED, _RETIRED, _MAPPED = range(4)
#: Every array handed out starts on this boundary.
ALIGN = 64


class _Block:
    """One block of a worker's ring: a memfd mapping with its header and its root array
    (every array handed out is a view of the root)."""

    _serial = itertools.count()

    def __init__(self, capacity: int) -> None:
        self.pid = os.getpid()
        self.ident = f"{self.pid}-{next(self._serial)}-{os.urandom(6).hex()}"
        self.capacity = capacity
        self.fd = os.memfd_create("ofindex-batch", getattr(os, "MFD_CLOEXEC", 0))
        os.ftruncate(self.fd, HEADER + capacity)
        self.memory = mmap.mmap(self.fd, HEADER + capacity)
        self.header = np.frombuffer(self.memory, np.int64, HEADER // 8, 0)
        self.root = np.frombuffer(self.memory, np.uint8, capacity, HEADER).view(SharedArray)
        self.root._block = self
        self.address: int = self.root.__array_interface__["data"][0]
        self.own = self._references()
        _MAPPINGS.add(self.ident, self.memory, self.header)  # so that this process can read
        # references to its own blocks (Grain drains its own queue when it stops)

    def _references(self) -> int:
        return sys.getrefcount(self.root)

    def free(self) -> bool:
        """Whether no array of this process nor of another refers to the block's data."""
        return (self.header[_LENT] == self.header[_RETURNED]
                and self._references() == self.own)

    def holds(self, array: np.ndarray) -> int | None:
        """The offset of ``array``'s data in this block, or ``None`` if it is not a
        contiguous array within it (a copy, a strided view)."""
        if not array.flags.c_contiguous or os.getpid() != self.pid or self.fd < 0:
            return None
        offset = int(array.__array_interface__["data"][0]) - self.address
        if offset < 0 or offset + array.nbytes > self.capacity:
            return None
        return offset

    def _release_pages(self) -> None:
        """Free the data pages now for every process that maps them (the main process may
        keep its mapping until it next looks at its mappings; it reads only the header)."""
        advice = getattr(mmap, "MADV_REMOVE", None)
        start = -(-HEADER // mmap.PAGESIZE) * mmap.PAGESIZE
        length = (HEADER + self.capacity - start) // mmap.PAGESIZE * mmap.PAGESIZE
        if advice is None or length <= 0:
            return
        with contextlib.suppress(OSError):  # an older kernel: freed with the last mapping
            self.memory.madvise(advice, start, length)

    def retire(self) -> None:
        """Take the block out of use for good: the main process unmaps it once it gave back
        every array; its memory is released now when none is lent out."""
        if self.fd < 0:
            return
        self.header[_RETIRED] = 1
        if self.header[_LENT] == self.header[_RETURNED]:
            self._release_pages()
        os.close(self.fd)
        self.fd = -1
        _MAPPINGS.remove(self.ident)


class SharedArray(np.ndarray):
    """A numpy array on a block of a worker's ring (or a view of one).

    Sent through a multiprocessing queue it travels as a reference to the block (see the
    module doc); with any other pickler, or when it is not within a block (a copy made with
    ``array.copy()`` keeps the type), its data is pickled as usual. Operations on it give
    ordinary arrays.
    """

    _block: _Block | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self._block = getattr(obj, "_block", None)

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        if return_scalar:
            return array[()]
        return array.view(np.ndarray)  # results of ufuncs are ordinary arrays

    def __reduce__(self) -> Any:
        return np.ndarray.__reduce__(self.view(np.ndarray))

    def __reduce_ex__(self, protocol: Any) -> Any:
        return np.ndarray.__reduce_ex__(self.view(np.ndarray), protocol)


def reference(array: np.ndarray) -> tuple[Any, ...] | None:
    """What a multiprocessing queue sends for ``array``: ``(block id, capacity, descriptor or
    None, offset, shape, dtype)``, counted as lent out; ``None`` when ``array`` is not a
    contiguous array on a block of this process's ring.

    Args:
        array: Any array (a :class:`SharedArray` or a view of one).

    Returns:
        The arguments of :func:`attach`, or ``None``.
    """
    block = getattr(array, "_block", None)
    if block is None:
        return None
    offset = block.holds(array)
    if offset is None:
        return None
    block.header[_LENT] += 1
    # the descriptor travels until the receiver says it mapped the block
    announce = DupFd(block.fd) if block.header[_MAPPED] == 0 else None
    return (block.ident, block.capacity, announce, offset, tuple(array.shape), array.dtype)


def _reduce_shared(array: SharedArray) -> Any:
    """ForkingPickler's reduction of a :class:`SharedArray`: a reference to its block, or
    the data when it is not on one."""
    ref = reference(array)
    if ref is None:
        return np.ndarray.__reduce__(array.view(np.ndarray))
    return attach, ref


ForkingPickler.register(SharedArray, _reduce_shared)


class _Mappings:
    """The blocks this process has mapped: its own ring's, and those of the workers that
    sent it arrays (kept until their worker retires them and every array is given back)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[mmap.mmap, np.ndarray]] = {}

    def add(self, ident: str, memory: mmap.mmap, header: np.ndarray) -> None:
        with self._lock:
            self._entries[ident] = (memory, header)

    def remove(self, ident: str) -> None:
        with self._lock:
            self._entries.pop(ident, None)

    def get(self, ident: str) -> tuple[mmap.mmap, np.ndarray] | None:
        with self._lock:
            return self._entries.get(ident)

    def map(self, ident: str, capacity: int, announce: Any) -> tuple[mmap.mmap, np.ndarray]:
        """The mapping of a block whose descriptor came with a reference (mapped once)."""
        fd = announce.detach()
        try:
            with self._lock:
                known = self._entries.get(ident)
                if known is not None:
                    return known
                memory = mmap.mmap(fd, HEADER + capacity)
                header = np.frombuffer(memory, np.int64, HEADER // 8, 0)
                self._entries[ident] = (memory, header)
                header[_MAPPED] = 1
        finally:
            os.close(fd)
        self.sweep()
        return memory, header

    def settled(self, ident: str) -> None:
        """Forget block ``ident`` if its worker retired it and every array is back."""
        with self._lock:
            entry = self._entries.get(ident)
            if entry is not None and _done(entry[1]):
                del self._entries[ident]

    def sweep(self) -> None:
        """Forget every retired block whose arrays are all back."""
        with self._lock:
            for ident in [k for k, (_, h) in self._entries.items() if _done(h)]:
                del self._entries[ident]


def _done(header: np.ndarray) -> bool:
    return bool(header[_RETIRED]) and header[_LENT] == header[_RETURNED]


_MAPPINGS = _Mappings()


def attach(ident: str, capacity: int, announce: Any, offset: int, shape: tuple[int, ...],
           dtype: np.dtype[Any]) -> np.ndarray:
    """An array sent by :func:`reference`, as a view of the block's memory (mapped on the
    first reference); it is given back to the worker's ring when its last view dies.

    Raises:
        RuntimeError: The block was never mapped here and its descriptor did not come (the
            reference was read by another process than the one its worker sends to).
    """
    entry = _MAPPINGS.map(ident, capacity, announce) if announce is not None else None
    entry = entry or _MAPPINGS.get(ident)
    if entry is None:
        raise RuntimeError(f"shared-memory block {ident} of a worker process is not mapped in "
                           f"process {os.getpid()}: arrays of a worker's batch can be read "
                           "only by the process its loader delivers them to")
    memory, header = entry
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(memory, dtype, count, HEADER + offset)
    # on ``flat``: every view of the result keeps it alive (numpy points views at the first
    # array above the mapping), so it dies with the last of them
    weakref.finalize(flat, _give_back, ident, header)
    return flat.reshape(shape)


def _give_back(ident: str, header: np.ndarray) -> None:
    """Count an array back (its last view died in this process)."""
    header[_RETURNED] += 1
    if header[_RETIRED]:
        _MAPPINGS.settled(ident)


class SharedRing:
    """A worker's ring of reusable shared-memory blocks.

    Args:
        slots: Blocks kept; when none is free, a batch gets a fresh block of its own,
            retired once its arrays are given back.
    """

    def __init__(self, slots: int = SLOTS) -> None:
        self.slots = slots
        self._blocks: list[_Block] = []
        self._extra: list[_Block] = []  # fresh blocks taken when every slot was in use
        self._pid = -1
        self._lock = threading.Lock()
        self.fresh = 0  # batches that found no free block (for tests and tuning)

    def take(self, size: int) -> SharedArray:
        """``size`` bytes of shared memory for one batch, 64-byte aligned: a view of a free
        block (one is added, or a free one replaced by a bigger one, when none is big
        enough), or of a fresh block of its own when every block is in use.

        Args:
            size: Bytes needed.

        Returns:
            A ``uint8`` :class:`SharedArray` of ``size`` bytes.
        """
        with self._lock:
            if os.getpid() != self._pid:  # new, or forked: the parent's blocks are not ours
                self._blocks, self._extra, self._pid = [], [], os.getpid()
                # multiprocessing's workers leave with os._exit after running its
                # finalizers; other processes run atexit
                util.Finalize(None, self.retire_all, exitpriority=10)
                atexit.register(self.retire_all)
            view = self._pick(size).root[:size]
            assert isinstance(view, SharedArray)
            return view

    def _pick(self, size: int) -> _Block:
        for spent in [b for b in self._extra if b.free()]:
            spent.retire()
            self._extra.remove(spent)
        free = [b for b in self._blocks if b.free()]
        fits = [b for b in free if b.capacity >= size]
        if fits:  # the smallest that fits: big blocks stay for big batches
            return min(fits, key=lambda b: b.capacity)
        block = _Block(max(size + size // 4, 1 << 20))  # room to grow a little
        if free:
            self._blocks[self._blocks.index(free[0])] = block
            free[0].retire()
        elif len(self._blocks) < self.slots:
            self._blocks.append(block)
        else:
            self.fresh += 1
            self._extra.append(block)
        return block

    @property
    def blocks(self) -> int:
        """The number of blocks in the ring (for tests and tuning)."""
        return len(self._blocks)

    def retire_all(self) -> None:
        """Retire every block (the process is exiting)."""
        with self._lock:
            if os.getpid() != self._pid:
                return
            for block in self._blocks + self._extra:
                block.retire()
            self._blocks, self._extra = [], []


#: This process's ring (used in worker processes only).
RING = SharedRing()


def carve(shapes: dict[str, tuple[tuple[int, ...], np.dtype[Any]]]) -> tuple[int, dict[str,
                                                                                  slice]]:
    """Where each output of a batch lies in one block: ``(total bytes, {name: byte
    range})``, every range starting on a 64-byte boundary.

    Args:
        shapes: ``{name: (shape, dtype)}`` of the outputs.
    """
    ranges, at = {}, 0
    for name, (shape, dtype) in shapes.items():
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        ranges[name] = slice(at, at + size)
        at += -(-size // ALIGN) * ALIGN
    return at, ranges


def ring_arrays(shapes: dict[str, tuple[tuple[int, ...], np.dtype[Any]]]) -> dict[str,
                                                                                  np.ndarray]:
    """Uninitialised arrays for a batch's outputs, all on one block of this process's ring
    (to be sent through a multiprocessing queue without a copy).

    Args:
        shapes: ``{name: (shape, dtype)}`` of the outputs.

    Returns:
        ``{name: SharedArray}``.
    """
    total, ranges = carve(shapes)
    memory = RING.take(total)
    return {name: memory[ranges[name]].view(dtype).reshape(shape)
            for name, (shape, dtype) in shapes.items()}


def in_worker_process() -> bool:
    """Whether this process was started by ``multiprocessing`` (a Grain ``mp_prefetch``
    process, a DataLoader worker): the batches it makes are likely sent to its parent."""
    import multiprocessing

    return AVAILABLE and multiprocessing.parent_process() is not None
