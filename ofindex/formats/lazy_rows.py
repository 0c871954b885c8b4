"""Sequences whose items are made when asked for: a compact manifest's files and shards, a
cluster build's results. A million of them are rows of columns, not a million objects."""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class LazyRows(Sequence[T], abc.ABC):
    """A sequence that makes item ``k`` with :meth:`make` when asked for (indexing with
    negative numbers and slices as a list does)."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def make(self, k: int) -> T:
        """Item ``k`` (``0 <= k < len(self)``)."""

    @overload
    def __getitem__(self, k: int) -> T: ...

    @overload
    def __getitem__(self, k: slice) -> list[T]: ...

    def __getitem__(self, k: int | slice) -> T | list[T]:
        n = len(self)
        if isinstance(k, slice):
            return [self.make(j) for j in range(*k.indices(n))]
        if not -n <= k < n:
            raise IndexError(f"item {k} of {n}")
        return self.make(k % n)

    def __iter__(self) -> Iterator[T]:
        return (self.make(k) for k in range(len(self)))
