"""Saved states, read and checked in one place.

A state is the JSON-serialisable dict a sampler writes (``state_at``, ``state_dict``, and
through them ``ResumableLoader``, ``GrainBatches`` and ``GrainMixture``).  Loading one reads
every field with its exact type (an integer is an ``int``: not a ``bool``, a ``float`` or a
``str``), checks its range, and refuses a missing or unknown field, with a
:class:`~ofindex.errors.StateError` that names the field, the value and what to do.

Whether a state belongs to the sampler loading it is decided by :func:`check_compatible`
alone, on the fields each sampler lists (``compatibility()``): those are written into every
state and compared, type and value, on load.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import StateError

__all__ = [
    "MAX_EPOCH",
    "MAX_STREAM",
    "STATE_VERSION",
    "MixtureResume",
    "Resume",
    "StateFields",
    "check_compatible",
    "check_data",
    "check_mixture_epoch",
    "epoch_number",
    "read_mixture_state",
    "read_sampler_state",
]

#: The version of the states written (a state of another version is refused).
STATE_VERSION = 1
#: The largest epoch: four billion epochs is past any run (a larger number is a step count or
#: a damaged state).
MAX_EPOCH = 2**32 - 1
#: The most records a mixture's source streams may reach (its offsets, and the records of
#: all batches up to a state's epoch end): stream arithmetic is int64, and this leaves it a
#: factor of two of headroom.
MAX_STREAM = 2**62

_RESAVE = ("the state is damaged, edited or from another program: load a checkpoint this "
           "sampler saved (loader.state_dict() / sampler.state_dict())")


def _shown(value: object) -> str:
    text = repr(value)
    text = text if len(text) <= 80 else text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _whole(value: object) -> int | None:
    """``value`` as an ``int`` when it is one exactly (not a bool, a float or a string)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _is_int(value: object) -> bool:
    return _whole(value) is not None


def epoch_number(epoch: object, who: str) -> int:
    """An epoch given to ``set_epoch``: a whole number in ``[0, MAX_EPOCH]``.

    Args:
        epoch: The value given.
        who: The method, for the message (``"GlobalShuffleSampler.set_epoch"``).

    Returns:
        The epoch as an ``int``.

    Raises:
        StateError: ``epoch`` is not an ``int`` (a ``bool``, ``float`` or ``str``), or is
            negative or above ``MAX_EPOCH`` (a state could not hold it).
    """
    number = _whole(epoch)
    if number is None or not 0 <= number <= MAX_EPOCH:
        raise StateError(f"{who}({epoch!r}): the epoch must be a whole number (int) in "
                         f"[0, {MAX_EPOCH}], got {_shown(epoch)}; count epochs from 0, "
                         "e.g. for epoch in range(epochs): loader.set_epoch(epoch)")
    return number


class StateFields:
    """Typed reads of one state's fields; every refusal names the field and the value.

    Args:
        state: The state loaded.
        what: What it is the state of, for messages (``"GlobalShuffleSampler state"``).

    Raises:
        StateError: ``state`` is not a dict.
    """

    def __init__(self, state: object, what: str) -> None:
        if not isinstance(state, Mapping):
            raise StateError(f"{what}: a saved state is a dict (from state_dict()), got "
                             f"{_shown(state)}; {_RESAVE}")
        self.state, self.what = state, what
        self.taken: set[object] = set()

    def refuse(self, name: str, value: object, wanted: str) -> StateError:
        """The error for a field whose value is not what it must be.

        Args:
            name: The field.
            value: Its value.
            wanted: What it must be, for the message.
        """
        return StateError(f"{self.what}: field {name!r} is {_shown(value)}; it must be "
                          f"{wanted}; {_RESAVE}")

    def optional(self, name: str) -> object:
        """The raw value of a field that states of earlier versions lack (marked as read), or
        ``None`` when absent."""
        self.taken.add(name)
        return self.state.get(name)

    def take(self, name: str) -> object:
        """The raw value of a field (marked as read).

        Args:
            name: The field.

        Returns:
            Its value, unchecked.

        Raises:
            StateError: The state has no such field.
        """
        if name not in self.state:
            raise StateError(f"{self.what}: field {name!r} is missing (the state has "
                             f"{sorted(map(str, self.state))}); {_RESAVE}")
        self.taken.add(name)
        return self.state[name]

    def integer(self, name: str, low: int, high: int | None = None) -> int:
        """A field holding a whole number in ``[low, high]``.

        Args:
            name: The field.
            low: The smallest value allowed.
            high: The largest value allowed (``None``: no bound).

        Returns:
            The number, as an ``int``.

        Raises:
            StateError: The field is missing, not an ``int``, or out of range.
        """
        value = self.take(name)
        return self._integer(name, value, low, high)

    def _integer(self, name: str, value: object, low: int, high: int | None) -> int:
        span = f"in [{low}, {high}]" if high is not None else f">= {low}"
        number = _whole(value)
        if number is None:
            raise self.refuse(name, value, f"a whole number (int) {span}")
        if number < low or (high is not None and number > high):
            raise self.refuse(name, value, f"a whole number {span}")
        return number

    def integers(self, name: str, count: int, low: int, high: int) -> list[int]:
        """A field holding a list of ``count`` whole numbers, each in ``[low, high]``.

        Args:
            name: The field.
            count: The length the list must have.
            low: The smallest value allowed.
            high: The largest value allowed.

        Returns:
            The numbers, as ints.

        Raises:
            StateError: The field is missing, not such a list, or a number is out of range.
        """
        value = self.take(name)
        if not isinstance(value, (list, tuple)) or len(value) != count:
            raise self.refuse(name, value, f"a list of {count} whole numbers")
        return [self._integer(f"{name}[{k}]", v, low, high) for k, v in enumerate(value)]

    def weights(self, name: str, count: int) -> list[float]:
        """A field holding a list of ``count`` positive finite numbers.

        Args:
            name: The field.
            count: The length the list must have.

        Returns:
            The numbers, as floats.

        Raises:
            StateError: The field is missing or not such a list.
        """
        value = self.take(name)
        if not isinstance(value, (list, tuple)) or len(value) != count:
            raise self.refuse(name, value, f"a list of {count} positive numbers")
        for k, weight in enumerate(value):
            if not (isinstance(weight, (int, float, np.integer, np.floating))
                    and not isinstance(weight, (bool, np.bool_))
                    and math.isfinite(weight) and weight > 0):
                raise self.refuse(f"{name}[{k}]", weight, "a positive finite number")
        return [float(w) for w in value]

    def finish(self) -> None:
        """Refuse the fields no read asked for.

        Raises:
            StateError: The state has a field this version does not write.
        """
        unknown = sorted(str(k) for k in self.state if k not in self.taken)
        if unknown:
            raise StateError(f"{self.what}: unknown field(s) {unknown} (a state of version "
                             f"{STATE_VERSION} has only {sorted(map(str, self.taken))}); "
                             f"{_RESAVE}")


def _same(saved: object, current: object) -> bool:
    """Equal in value and in kind (``True`` is not ``1``, ``1.0`` is not ``1``)."""
    if isinstance(current, Mapping):
        return (isinstance(saved, Mapping) and set(saved) == set(current)
                and all(_same(saved[k], current[k]) for k in current))
    if isinstance(current, (list, tuple)):
        return (isinstance(saved, (list, tuple)) and len(saved) == len(current)
                and all(_same(s, c) for s, c in zip(saved, current, strict=True)))
    if isinstance(current, bool) or _is_int(current):
        kind_matches = isinstance(saved, bool) if isinstance(current, bool) else _is_int(saved)
        return kind_matches and saved == current
    return type(saved) is type(current) and saved == current


#: The fields that name the data a state was saved on (:attr:`ofindex.Dataset.identity`, one
#: per source for a mixture): compared where both the state and the sampler name one (a state
#: of ofindex 0.2, or a sampler given a bare record count, names none).
DATA_FIELDS = ("dataset", "datasets")


def _identity_or_none(fields: StateFields, name: str, value: object, many: bool) -> object:
    """``value`` checked to be what a data field holds (an identity or ``None``; with
    ``many``, a list of them), else a :class:`StateError`."""
    def one(item: object) -> bool:
        return item is None or (isinstance(item, str) and len(item) == 16
                                and all(c in "0123456789abcdef" for c in item))

    listed = value is None or (isinstance(value, (list, tuple)) and all(map(one, value)))
    if listed if many else one(value):
        return value
    raise fields.refuse(name, value, "a list of dataset identities (16 hexadecimal digits) or "
                                     "nulls" if many else
                        "a dataset identity (16 hexadecimal digits) or null")


def _other_data(saved: object, mine: object) -> bool:
    """Whether a state's data field names other data than the sampler's (``None`` on either
    side, or in a list, names nothing to compare)."""
    if saved is None or mine is None:
        return False
    if isinstance(mine, (list, tuple)):
        return (not isinstance(saved, (list, tuple)) or len(saved) != len(mine)
                or any(_other_data(s, m) for s, m in zip(saved, mine, strict=True)))
    return saved != mine


def check_data(fields: StateFields, current: Mapping[str, object]) -> None:
    """Refuse a state saved on other data than the sampler's, as its identity tells (the
    ``dataset``/``datasets`` fields; another dataset of the same length and seed would
    otherwise resume as if it were the same).

    Raises:
        StateError: The identities differ, or the field holds something else.
    """
    for name in DATA_FIELDS:
        if name not in current:
            continue
        mine = current[name]
        saved = _identity_or_none(fields, name, fields.optional(name),
                                  many=isinstance(mine, (list, tuple)))
        if _other_data(saved, mine):
            raise StateError(
                f"{fields.what} was saved on another dataset than this one ({name} "
                f"{saved!r}; this sampler's data is {mine!r}), though of the same length and "
                "seed: resume on the dataset that saved it (a copy of it, moved, uploaded or "
                "downloaded, has the same identity), or start this run afresh")


def check_compatible(fields: StateFields, current: Mapping[str, object], advice: str) -> None:
    """Decide whether a loaded state belongs to the sampler loading it.

    This is the one place where that is decided: each sampler lists the fields that must
    agree in its ``compatibility()`` (record sampler: its kind, ``n``, ``seed`` and order
    ``params``; mixture: its kind, the sources' ``sizes``, ``seed``, ``batch_size``,
    ``sampled`` and ``rounds``), writes them into every state, and every one is compared
    here, in value and type; the data fields (:data:`DATA_FIELDS`: the dataset's identity)
    by :func:`check_data`.

    Args:
        fields: The state being loaded.
        current: The loading sampler's compatibility fields.
        advice: What to do instead, for the message.

    Raises:
        StateError: A field is missing or differs.
    """
    check_data(fields, current)
    differ = {}
    for name, mine in current.items():
        if name in DATA_FIELDS:
            continue
        saved = fields.take(name)
        if not _same(saved, mine):
            differ[name] = (saved, mine)
    if differ:
        detail = "; ".join(f"{name!r} saved {saved!r}, current {mine!r}"
                           for name, (saved, mine) in differ.items())
        raise StateError(f"{fields.what} does not match this sampler: {detail}; {advice}")


def _version(fields: StateFields) -> None:
    version = fields.take("version")
    if not _is_int(version) or version != STATE_VERSION:
        raise StateError(f"{fields.what}: unsupported state version {_shown(version)} (this "
                         f"ofindex reads version {STATE_VERSION}); load it with the ofindex "
                         "version that saved it, or start the run afresh")


@dataclass(frozen=True)
class Resume:
    """Where a record sampler's state resumes: the epoch and its global position."""

    epoch: int
    position: int


def read_sampler_state(state: object, what: str, current: Mapping[str, object],
                       n: int) -> Resume:
    """Check a record sampler's state (see :class:`~ofindex.shuffle.GlobalShuffleSampler`).

    Args:
        state: The state loaded.
        what: The sampler's kind, for messages.
        current: The sampler's compatibility fields (:func:`check_compatible`).
        n: The sampler's number of records.

    Returns:
        The epoch and position to resume at.

    Raises:
        StateError: A field is missing, unknown, of the wrong type or out of range, or the
            state was saved by another sampler.
    """
    fields = StateFields(state, f"{what} state")
    _version(fields)
    check_compatible(fields, current, "resume with the same dataset, seed and order "
                     "parameters as the run that saved it")
    resume = Resume(fields.integer("epoch", 0, MAX_EPOCH), fields.integer("position", 0, n))
    fields.integer("num_replicas", 1)
    fields.integer("consumed", 0, n)
    fields.finish()
    return resume


@dataclass(frozen=True)
class MixtureResume:
    """Where a mixture's state resumes: the epoch, batch position and stream offsets."""

    epoch: int
    position: int
    offsets: list[int]


def read_mixture_state(state: object, current: Mapping[str, object], sources: int,
                       num_batches: int, batch_size: int) -> MixtureResume:
    """Check a :class:`~ofindex.shuffle.MixtureSampler`'s state.

    Args:
        state: The state loaded.
        current: The sampler's compatibility fields (:func:`check_compatible`).
        sources: The number of sources mixed.
        num_batches: Batches per mixture epoch.
        batch_size: Records per batch.

    Returns:
        The epoch, batch position and per-source stream offsets to resume at.

    Raises:
        StateError: A field is missing, unknown, of the wrong type or out of range, or the
            state was saved for other sources, seed, batch size or mode.
    """
    fields = StateFields(state, "MixtureSampler state")
    _version(fields)
    check_compatible(fields, current, "resume with the same sources (sizes), seed, batch "
                     "size and mode (weights may change)")
    fields.weights("weights", sources)
    epoch = fields.integer("epoch", 0, MAX_EPOCH)
    check_mixture_epoch(epoch, num_batches, batch_size, "MixtureSampler state")
    resume = MixtureResume(epoch, fields.integer("position", 0, num_batches),
                           fields.integers("offsets", sources, 0, MAX_STREAM))
    fields.finish()
    return resume


def check_mixture_epoch(epoch: int, num_batches: int, batch_size: int, who: str) -> None:
    """Refuse a mixture epoch whose batches would take the streams past ``MAX_STREAM``.

    Args:
        epoch: The mixture epoch.
        num_batches: Batches per mixture epoch.
        batch_size: Records per batch.
        who: What is checked, for the message.

    Raises:
        StateError: ``(epoch + 1) * num_batches * batch_size > MAX_STREAM``.
    """
    if (epoch + 1) * num_batches * batch_size > MAX_STREAM:
        raise StateError(f"{who}: epoch {epoch} of {num_batches} batches of {batch_size} "
                         f"would take the sources' streams past {MAX_STREAM} records; "
                         "count mixture epochs from 0")
