"""Rounds of requests a remote read makes, counted from the calls into its storage."""

from __future__ import annotations


class Rounds:
    """Counts rounds of requests: each outermost call into the storage is one round."""

    def __init__(self, storage) -> None:
        self.calls: list[str] = []
        self.ranges: list[tuple[str, int, int]] = []
        self.wholes: list[str] = []
        self.depth = 0
        for name in ("fetch_round", "fetch_many", "read_ranges", "read_ranges_concat",
                     "read_all", "read", "stamp"):
            setattr(storage, name, self._wrap(name, getattr(storage, name)))

    def _wrap(self, name, fn):
        def wrapped(*args, **kwargs):
            if name == "fetch_round":
                self.ranges += list(args[0])
                self.wholes += list(args[1]) if len(args) > 1 else []
            if self.depth == 0:
                self.calls.append(name)
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
        return wrapped

    def clear(self) -> None:
        self.calls.clear()
        self.ranges.clear()
        self.wholes.clear()
