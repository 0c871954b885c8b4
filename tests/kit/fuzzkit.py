"""Shared by the fuzz tests (tests/*/test_fuzz_*.py): the property every target is held to, the
allocation bound, the example budget and the tally of outcomes.

The property: a call returns correct data or raises an :class:`ofindex.OfindexError` — never
another exception, a crash (the compiled module's fuzzer runs in a subprocess), a hang (the
suite's per-test timeout) or an allocation larger than the input warrants (measured with
tracemalloc: the peak of traced memory during the call).

Every target runs in two tiers. The default tier (:func:`budget`) draws a fixed number of
inputs under the loaded hypothesis profile — "ci" (tests/conftest.py): derandomized, no example
database, so a run of the same code gives the same result — plus the failures the fuzz tier
found, pinned as ``@example`` decorators. The fuzz tier (:func:`explore`, the ``fuzz`` marker,
deselected by default; ``bash tools/run-fuzz.sh``) draws fresh random inputs on every run,
many more of them, and keeps what fails in the example database (``.hypothesis/``) to replay
it first next time.

``OFINDEX_FUZZ_SCALE`` scales the fuzz tier's budgets (default 1: ten times the default tier's).
``OFINDEX_FUZZ_LOG=<file>`` appends each target's tally as a JSON line (inputs tried, outcome
counts), for the figures of a closing note.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, settings

from ofindex import OfindexError

SCALE = float(os.environ.get("OFINDEX_FUZZ_SCALE", 1))
#: Allocation headroom of any call, beyond what its input warrants: Python objects, numpy
#: temporaries, a module imported on first use.
SLACK = 256 << 10


Test = TypeVar("Test", bound=Callable[..., Any])


def budget(examples: int) -> settings:
    """The default tier's settings for a target: ``examples`` inputs, drawn as the loaded
    profile says (the "ci" profile: the same inputs on every run, no deadline, no database)."""
    return settings(max_examples=examples, suppress_health_check=list(HealthCheck))


def explore(examples: int) -> Callable[[Test], Test]:
    """The fuzz tier's twin of a target: marked ``fuzz`` (deselected by default) and run
    under the "explore" profile whatever profile is loaded — fresh random inputs on every run,
    failures saved to and replayed from ``.hypothesis/`` — ``examples`` inputs times
    ``OFINDEX_FUZZ_SCALE``."""
    explored = settings(settings.get_profile("explore"), max_examples=max(1, int(examples * SCALE)),
                        suppress_health_check=list(HealthCheck))

    def twin(test: Test) -> Test:
        marked: Test = pytest.mark.fuzz(explored(test))
        return marked

    return twin


class Tally:
    """Outcome counts of one fuzz target; written out at the end of the test session."""

    registry: ClassVar[dict[str, Tally]] = {}

    def __init__(self, target: str) -> None:
        self.target = target
        self.inputs = 0
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.peak = 0  # largest traced allocation peak of a call, bytes
        Tally.registry[target] = self

    def input(self) -> None:
        self.inputs += 1

    def add(self, outcome: str) -> None:
        self.outcomes[outcome] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "inputs": self.inputs, "max_peak_bytes": self.peak,
                "outcomes": dict(self.outcomes)}


def write_log() -> None:
    """Append every tally to ``$OFINDEX_FUZZ_LOG`` (called at session end by conftest)."""
    path = os.environ.get("OFINDEX_FUZZ_LOG")
    if not path or not Tally.registry:
        return
    with open(path, "a", encoding="utf-8") as f:
        for tally in Tally.registry.values():
            f.write(json.dumps(tally.as_dict()) + "\n")


class AllocationError(AssertionError):
    """A call allocated more than its input warrants."""


def guarded(fn: Callable[[], Any], limit: int, tally: Tally | None = None,
            name: str = "") -> tuple[str, Any]:
    """Run ``fn()`` under the property: ``("ok", value)`` or ``(error class, error)`` for an
    :class:`OfindexError`; any other exception propagates (the test fails), and so does a
    traced allocation peak above ``limit + SLACK`` bytes. A call that imported a module
    (numpy imports some submodules on first use) is measured again: what it allocated the
    first time depends on which tests ran before it, not on its input."""
    modules = len(sys.modules)
    got, peak = _measured(fn)
    if peak > limit + SLACK and len(sys.modules) > modules:
        got, peak = _measured(fn)
    if peak > limit + SLACK:
        raise AllocationError(f"{name or fn!r} allocated {peak} bytes at its peak; the input "
                              f"warrants at most {limit} (+{SLACK} slack)")
    if tally is not None:
        tally.add(f"{name}: {got[0]}" if name else got[0])
        tally.peak = max(tally.peak, peak)
    return got


def _measured(fn: Callable[[], Any]) -> tuple[tuple[str, Any], int]:
    """``fn()``'s outcome (see :func:`guarded`) and the peak of memory traced meanwhile."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        value = fn()
        got: tuple[str, Any] = ("ok", value)
    except OfindexError as exc:
        got = (type(exc).__name__, exc)
    finally:
        peak = tracemalloc.get_traced_memory()[1] - before
        if started:
            tracemalloc.stop()
    return got, peak
