"""Is a sampler read ahead of the training loop?  Finding the DataLoader that drives a pass.

A ``torch.utils.data.DataLoader`` with worker processes takes ``prefetch_factor * num_workers``
batches of indices from its sampler before the training loop has received the first batch,
and stays that far ahead: a sampler's own position is then past what the loop consumed, and a
checkpoint of it would lose the prefetched batches on resume.  A sampler records, when a pass
starts, the DataLoader iterator pulling it (:func:`driving_loader`), and asks at checkpoint
time how many batches that iterator holds which the loop has not received yet
(:func:`batches_ahead`).

torch is never imported here: a pass is driven by a DataLoader only if torch's data loader
module is already loaded.  The iterator is found among the callers of the sampler's first
``next()`` (torch's ``_BaseDataLoaderIter._next_index``, which torchdata's
``StatefulDataLoader`` inherits); it is held by a weak reference.
"""

import inspect
import sys
import weakref
from dataclasses import dataclass
from types import FrameType

__all__ = ["Driver", "batches_ahead", "called_by", "driving_loader"]

_LOADER_MODULE = "torch.utils.data.dataloader"
_FRAMES = 8  # caller frames searched: sampler generators, torch's BatchSampler, _next_index


@dataclass(frozen=True)
class Driver:
    """The DataLoader iterator that pulls a sampler's current pass.

    Args:
        iterator: A weak reference to the iterator (``_BaseDataLoaderIter``).
        num_workers: Its worker processes (0: batches are made when the loop asks).
    """

    iterator: weakref.ref[object]
    num_workers: int


def _loader_iter_type() -> type | None:
    module = sys.modules.get(_LOADER_MODULE)
    found = getattr(module, "_BaseDataLoaderIter", None) if module is not None else None
    return found if isinstance(found, type) else None


def _callers(depth: int) -> list[FrameType]:
    frames: list[FrameType] = []
    here = inspect.currentframe()  # this function's frame; its caller's caller comes first
    frame = here.f_back.f_back if here is not None and here.f_back is not None else None
    del here  # a frame held in its own locals is a reference cycle
    while frame is not None and len(frames) < depth:
        frames.append(frame)
        frame = frame.f_back
    return frames


def driving_loader() -> Driver | None:
    """The DataLoader iterator among the callers of the running code, if any.

    Call it from the body of a sampler's ``__iter__`` generator, which runs on the first
    ``next()`` of the pass.

    Returns:
        The :class:`Driver`, or ``None`` when no DataLoader drives the pass (a plain ``for``
        loop over the sampler, Grain, or torch not loaded).
    """
    kind = _loader_iter_type()
    if kind is None:
        return None
    for frame in _callers(_FRAMES):
        owner = frame.f_locals.get("self")
        if isinstance(owner, kind):
            return Driver(weakref.ref(owner), int(getattr(owner, "_num_workers", 0)))
    return None


def called_by(driver: Driver) -> bool:
    """Whether the running code was called by ``driver``'s iterator (torchdata's
    ``StatefulDataLoader`` saves a sampler's state when it takes the indices of a batch,
    which is exact)."""
    loader = driver.iterator()
    return loader is not None and any(
        frame.f_locals.get("self") is loader for frame in _callers(4 * _FRAMES))


def batches_ahead(driver: Driver | None) -> int:
    """Batches of indices ``driver`` took from the sampler that the loop has not received.

    Args:
        driver: The pass's :class:`Driver`, or ``None``.

    Returns:
        0 without a driver, without workers, or once the iterator is gone; else the
        iterator's outstanding batches, or ``-1`` when this version of torch does not say.
    """
    if driver is None or driver.num_workers == 0:
        return 0
    loader = driver.iterator()
    if loader is None:
        return 0
    sent, received = getattr(loader, "_send_idx", None), getattr(loader, "_rcvd_idx", None)
    if not isinstance(sent, int) or not isinstance(received, int):
        return -1
    return sent - received
