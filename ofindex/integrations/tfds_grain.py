"""Grain pipelines over a TFDS / RLDS dataset opened with :func:`ofindex.open_tfds`.

A split and its ``steps`` are Grain random-access sources as they are
(``grain.MapDataset.source(ds.steps)``: one step per ``__getitem__``, which reads its whole
episode). :func:`step_batches` reads whole batches instead: Grain shuffles and batches the
step numbers, and each batch is decoded by one ``steps.batch`` call (each episode read once,
the images decoded together)::

    batches = step_batches(ds.steps, batch_size=256, seed=0)
    for batch in batches.to_iter_dataset():   # {name: array (256, ...)}
        ...
"""

from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import grain
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.tfds_grain", "grain", _exc) from _exc

from ..tfds import StepsView

__all__ = ["step_batches"]


class _DecodeSteps:
    """Picklable map function: a batch of step numbers -> the decoded steps."""

    def __init__(self, steps: StepsView) -> None:
        self.steps = steps

    def __call__(self, positions: Any) -> dict[str, Any]:
        return self.steps.batch(np.asarray(positions, dtype=np.int64))


def step_batches(steps: StepsView, batch_size: int, *, seed: int | None = 0,
                 drop_remainder: bool = True) -> Any:
    """A Grain ``MapDataset`` of decoded batches of steps.

    Args:
        steps: ``ofindex.open_tfds(...).steps``.
        batch_size: Steps per batch.
        seed: Grain's global shuffle of the steps (``None``: in order).
        drop_remainder: Leave out the last batch when it is short.

    Returns:
        ``grain.MapDataset`` whose elements are ``{name: array (batch_size, ...)}``; Grain's
        checkpointing (``to_iter_dataset()`` iterators' ``get_state``) resumes it.

    Raises:
        ValueError: ``batch_size`` is not positive.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    numbers = grain.MapDataset.range(len(steps))
    if seed is not None:
        numbers = numbers.shuffle(seed=seed)
    batched = numbers.batch(batch_size, drop_remainder=drop_remainder,
                            batch_fn=lambda values: np.asarray(values, dtype=np.int64))
    return batched.map(_DecodeSteps(steps))
