"""A round of requests: independent byte ranges, whole files and stamps, grouped by storage
and run at once (one concurrent call per storage, a thread per storage when there are
several). The index rounds (:mod:`.index_round`), the header round at open
(:mod:`.header_round`) and the data files' identity checks (:mod:`.identity_round`) queue
their requests on one.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Any

from ..storage import Storage

#: Where a request's result is: ``(id of its storage, its position in that storage's list)``.
Slot = tuple[int, int]


class _StorageCalls:
    """The requests of one round on one storage; :meth:`run` fills the results."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.ranges: list[tuple[str, int, int]] = []
        self.wholes: list[str] = []
        self.stats: list[str] = []
        self.identifies: list[tuple[str, int]] = []
        self.got: tuple[list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [])

    def run(self) -> None:
        self.got = self.storage.fetch_round(self.ranges, self.wholes, self.stats,
                                            self.identifies)


class Round:
    """The requests of one round, grouped by storage and run at once."""

    RANGE, WHOLE, STAT, IDENTIFY = 0, 1, 2, 3

    def __init__(self) -> None:
        self.calls: dict[int, _StorageCalls] = {}

    def _on(self, storage: Storage) -> _StorageCalls:
        calls = self.calls.get(id(storage))
        if calls is None:
            calls = self.calls[id(storage)] = _StorageCalls(storage)
        return calls

    def range(self, storage: Storage, path: str, start: int, end: int) -> Slot:
        """Queue the bytes ``[start, end)`` of ``path``."""
        calls = self._on(storage)
        calls.ranges.append((path, start, end))
        return id(storage), len(calls.ranges) - 1

    def whole(self, storage: Storage, path: str) -> Slot:
        """Queue the whole of ``path``."""
        calls = self._on(storage)
        calls.wholes.append(path)
        return id(storage), len(calls.wholes) - 1

    def stat(self, storage: Storage, path: str) -> Slot:
        """Queue the stamp of ``path``."""
        calls = self._on(storage)
        calls.stats.append(path)
        return id(storage), len(calls.stats) - 1

    def identify(self, storage: Storage, path: str, size: int) -> Slot:
        """Queue the stamp of ``path`` with its content digest (see
        :meth:`~ofindex.storage.Storage.identify`)."""
        calls = self._on(storage)
        calls.identifies.append((path, size))
        return id(storage), len(calls.identifies) - 1

    def run(self) -> None:
        """Run every queued request (a thread per storage when there are several)."""
        calls = [c for c in self.calls.values()
                 if c.ranges or c.wholes or c.stats or c.identifies]
        if len(calls) == 1:
            calls[0].run()
        elif calls:
            with cf.ThreadPoolExecutor(len(calls)) as pool:
                for future in [pool.submit(c.run) for c in calls]:
                    future.result()

    def result(self, kind: int, slot: Slot) -> Any:
        """What came back for ``slot`` (the value, or the exception its request raised)."""
        return self.calls[slot[0]].got[kind][slot[1]]


