"""PyTorch batches of a TFDS / RLDS dataset opened with :func:`ofindex.open_tfds`.

:class:`TfdsBatches` is a map-style dataset whose item is a whole batch: ``data[indices]``
decodes the steps (or episodes) at ``indices`` at once (each episode read once, the images
of the batch decoded together) and gives tensors::

    ds = ofindex.open_tfds(path, split="train")
    data = TfdsBatches(ds.steps)
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=0), 256, drop_last=True)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=2)

Episodes (``TfdsBatches(ds, episodes="padded")``) have steps of different lengths: padded
to the longest of the batch (``(B, T_max, ...)``, with ``steps_length`` ``(B,)``), or
``episodes="ragged"``: every step of the batch back to back with the episodes' lengths
(:class:`~ofindex.integrations.torch.RaggedTensors`).
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import torch
    import torch.utils.data as _tud
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.tfds_torch", "torch", _exc) from _exc

from ..tfds import StepsView, TfdsDataset
from .torch import RaggedTensors

__all__ = ["EPISODE_LAYOUTS", "TfdsBatches"]

#: How a batch of episodes holds steps of different lengths.
EPISODE_LAYOUTS = ("padded", "ragged")


def _tensors(value: Any) -> Any:
    """Numeric arrays as tensors sharing their memory; ``bytes`` arrays stay numpy; lists
    (variable-length sequences inside a step) become lists of tensors."""
    if isinstance(value, dict):
        return {name: _tensors(v) for name, v in value.items()}
    if isinstance(value, list):
        return [_tensors(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OSU":
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, np.generic) and not isinstance(value, np.bytes_):
        return torch.from_numpy(np.asarray(value))
    return value


def _pad(arrays: list[np.ndarray], longest: int) -> np.ndarray:
    """Arrays of ``(T_k, ...)`` zero-padded to ``(len, longest, ...)``."""
    first = arrays[0]
    out = np.zeros((len(arrays), longest, *first.shape[1:]), dtype=first.dtype)
    if first.dtype == object:
        out[...] = b""
    for k, array in enumerate(arrays):
        out[k, :len(array)] = array
    return out


def _join_steps(steps: list[Any], layout: str, lengths: np.ndarray) -> Any:
    """The ``steps`` dicts of several episodes as one padded array or ragged values."""
    if isinstance(steps[0], dict):
        return {name: _join_steps([s[name] for s in steps], layout, lengths)
                for name in steps[0]}
    if isinstance(steps[0], list):  # a variable-length sequence in each step
        if layout == "padded":
            return [row for episode in steps for row in episode]
        return RaggedTensors([row for episode in steps for row in episode],
                             torch.from_numpy(lengths))
    if layout == "padded":
        return _pad(steps, int(lengths.max()) if len(lengths) else 0)
    return RaggedTensors(_tensors(np.concatenate(steps)), torch.from_numpy(lengths))


def _stack(values: list[Any]) -> Any:
    """Non-step features of a batch of episodes stacked (a list when shapes differ)."""
    if isinstance(values[0], dict):
        return {name: _stack([v[name] for v in values]) for name in values[0]}
    arrays = [np.asarray(v) for v in values]
    if all(a.shape == arrays[0].shape for a in arrays) and not isinstance(values[0], list):
        if arrays[0].dtype.kind in "OSU":  # bytes: an object array of them, as TFDS
            out = np.empty(len(values), dtype=object)
            out[:] = values
            return out
        return np.stack(arrays)
    return values


class TfdsBatches(_tud.Dataset[Any]):
    """Map-style dataset whose items are whole decoded batches of a TFDS split's steps or
    episodes, as tensors.

    Args:
        view: ``ds.steps`` (batches of steps: every feature ``(B, ...)``) or the
            :class:`~ofindex.tfds.TfdsDataset` itself (batches of examples; RLDS episodes
            laid out as ``episodes`` says).
        episodes: For episodes: ``"padded"`` (steps zero-padded to the batch's longest
            episode, lengths in ``steps_length``) or ``"ragged"`` (steps back to back as
            :class:`~ofindex.integrations.torch.RaggedTensors`).
        history: For steps: give each step with the ``history - 1`` steps of its episode
            before it, ``(B, history, ...)``, and ``mask`` ``(B, history)``
            (:meth:`ofindex.tfds.StepsView.history`); ``None``: the steps alone.

    Raises:
        ValueError: ``episodes`` is neither layout, or ``history`` is not a positive
            number of steps of ``ds.steps``.
        TypeError: ``view`` is neither a split nor its steps.
    """

    def __init__(self, view: StepsView | TfdsDataset, *, episodes: str = "padded",
                 history: int | None = None) -> None:
        if episodes not in EPISODE_LAYOUTS:
            raise ValueError(f"episodes={episodes!r}: use one of {', '.join(EPISODE_LAYOUTS)}")
        if not isinstance(view, (StepsView, TfdsDataset)):
            raise TypeError(f"TfdsBatches takes ofindex.open_tfds(...) or its .steps, not "
                            f"{type(view).__name__}")
        if history is not None and (not isinstance(view, StepsView) or history < 1):
            raise ValueError(f"history={history!r} takes a positive number of steps and "
                             "ds.steps, not the episodes")
        self.view = view
        self.episodes = episodes
        self.history = history

    @property
    def identity(self) -> str:
        """The view's identity (resume states carry it)."""
        return self.view.identity

    def __len__(self) -> int:
        """The number of steps (or examples) of the view (the sampler makes the batches).

        Returns:
            ``len(view)``.
        """
        return len(self.view)

    def __getitem__(self, indices: Sequence[int] | np.ndarray | int) -> Any:
        """One decoded batch.

        Args:
            indices: The positions of the batch (one position: a batch of one).

        Returns:
            ``{name: tensor (B, ...)}`` (``bytes`` features as numpy arrays of ``bytes``).
        """
        positions = np.atleast_1d(np.asarray(indices, dtype=np.int64))
        if isinstance(self.view, StepsView):
            if self.history is not None:
                return _tensors(self.view.history(positions, self.history))
            return _tensors(self.view.batch(positions))
        examples = self.view.__getitems__(positions)
        out: dict[str, Any] = {}
        for name in examples[0]:
            column = [e[name] for e in examples]
            feature = self.view.features[name]
            if feature.is_dataset:
                lengths = np.asarray([len(_first_leaf(c)) for c in column], dtype=np.int64)
                out[name] = _join_steps(column, self.episodes, lengths)
                out[f"{name}_length"] = lengths
            else:
                out[name] = _stack(column)
        return _tensors(out)


def _first_leaf(tree: Any) -> Any:
    while isinstance(tree, dict):
        tree = next(iter(tree.values()))
    return tree
