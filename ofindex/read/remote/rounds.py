"""A round of requests and the checks of the data files it touched.

A round gathers independent byte ranges, whole files and stamps, grouped by storage, and runs
them at once (:class:`Round`: one concurrent call per storage, a thread per storage when there
are several). The index rounds (:mod:`.index_round`) and the header round at open
(:mod:`.header_round`) queue their requests on one.

A round that fetches remote sidecars (or their headers, or pages) also asks for the data
files' stamps; each file is then checked by :func:`ofindex.storage.identity.check_identity`
(:class:`IdentityChecks`). Where the stamps cannot tell (a fingerprint that is not the
index's: a dataset indexed on one storage and read from a copy on another), the file's content
regions decide. When that is known before the round (an index built on local disk read from a
bucket or web server, or the other way around: fingerprints of kinds the storage never
reports), the regions are fetched in the same round as the stamp (:meth:`IdentityChecks.queue`:
over HTTP their own responses give the stamp, no HEAD is sent); otherwise the files that need
them are read in one more round for all of them (:meth:`IdentityChecks.settle`), never one
after another.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import functools
from typing import Any

from ...cache.chain import Chain, Kept, Want
from ...cache.keys import identity_entry, identity_key
from ...storage import FileStamp, Storage
from ...storage.identity import check_identity
from ...storage.stamp import Verdict, content_digest, content_regions
from ..shards import Shard

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


def content_expected(shard: Shard) -> bool:
    """Whether checking ``shard``'s data file will need its content, as far as is known before
    its stamp and header arrive: its index's fingerprint is of a kind its storage never
    reports (``mtime_ns`` is local files' own)."""
    storage = shard.data_storage
    if storage is None or shard.stamp_pending:  # a compact manifest's stamp: not read yet
        return False
    kind = (shard.fingerprint or "").partition(":")[0]
    return bool(kind) and (kind == "mtime_ns") != storage.is_local


@dataclasses.dataclass
class _Check:
    shard: Shard
    indexed: FileStamp
    current: FileStamp


class IdentityChecks:
    """The identity checks of one round: each data file's stamp queued with the round's
    requests (with its content regions when they will be needed), checked after it ran.

    With a node cache (``cache_dir=``), a data file found to have the digest its index names
    is remembered there by its URL and stamp, so that another process or run of the machine
    takes the same version of the file for checked with a stat alone."""

    def __init__(self) -> None:
        self._slots: dict[int, tuple[int, Slot]] = {}
        self._checks: list[_Check] = []

    def queue(self, round_: Round, shard: Shard) -> None:
        """Queue the stamp of ``shard``'s data file on ``round_``: with its content digest
        when its check will need it (:func:`content_expected`; over HTTP the regions' own
        responses then give the stamp, and no HEAD is sent) unless the machine may remember
        the check (a node cache: the stamp first), else a plain stat."""
        storage = shard.data_storage
        assert storage is not None
        if content_expected(shard) and _machine(shard) is None:
            slot = (Round.IDENTIFY, round_.identify(storage, shard.path, shard.size))
        else:
            slot = (Round.STAT, round_.stat(storage, shard.path))
        self._slots[id(shard)] = slot

    def current(self, round_: Round, shard: Shard) -> FileStamp:
        """The stamp ``round_`` brought back for ``shard``'s data file (queued by
        :meth:`queue`).

        Raises:
            DataFileNotFoundError, StorageError, RangeReadError: Its request failed.
        """
        kind, slot = self._slots[id(shard)]
        got = round_.result(kind, slot)
        if isinstance(got, BaseException):
            raise got
        stamp: FileStamp = got
        return stamp

    def add(self, shard: Shard, indexed: FileStamp, current: FileStamp) -> None:
        """Owe ``shard``'s data file (now ``current``, from :meth:`current`) the check against
        ``indexed``, its index's stamp (made by :meth:`settle`)."""
        self._checks.append(_Check(shard, indexed, current))

    def settle(self) -> None:
        """Check every data file owed a check, reading in one more round the content of those
        whose stamps cannot tell and whose digest did not come with their stamp.

        Raises:
            StaleIndexError: A data file is not the one its index describes.
            RangeReadError, StorageError: A region could not be read.
        """
        late: list[_Check] = []
        needed = [check for check in self._checks if self._needs_content(check)]
        needs = {id(check) for check in needed}
        remembered = _remembered(needed)
        for check in self._checks:
            if id(check) in remembered:
                _check(check, check.indexed.content)
            elif id(check) in needs and check.current.content is None:
                late.append(check)
            else:
                _check(check, check.current.content)
        self._checks = []
        if late:
            second = Round()
            slots = [_queue_regions(second, check.shard, check.current.size) for check in late]
            second.run()
            for check, regions in zip(late, slots, strict=True):
                _check(check, _digest(second, regions, check.current.size))
        _remember([check for check in needed if id(check) not in remembered])

    @staticmethod
    def _needs_content(check: _Check) -> bool:
        storage = check.shard.data_storage
        verdict, _ = check.indexed.judge(check.current)
        return (verdict is Verdict.CONTENT and storage is not None
                and not storage.expected.verified(check.shard.path, check.current))


def _machine(shard: Shard) -> Chain | None:
    """The cache chain a shard's identity check may be remembered in (one with a machine
    tier), or ``None``."""
    chain = shard.cache
    return None if chain is None or chain.machine is None else chain


def _identity_key(check: _Check) -> bytes:
    shard = check.shard
    assert shard.data_storage is not None and check.indexed.content is not None
    return identity_key(shard.data_storage.url(shard.path), check.current,
                        check.indexed.content)


def _remembered(checks: list[_Check]) -> set[int]:
    """The checks (by ``id``) the machine's cache remembers as passed."""
    found: set[int] = set()
    by_chain: dict[int, tuple[Chain, list[tuple[_Check, Want]]]] = {}
    for check in checks:
        chain = _machine(check.shard)
        if chain is not None:
            key = _identity_key(check)
            want = Want(None, key, functools.partial(_passed, key))
            by_chain.setdefault(id(chain), (chain, []))[1].append((check, want))
    for chain, members in by_chain.values():
        chain.recall([want for _, want in members])
        found.update(id(check) for check, want in members if want.value)
    return found


def _passed(key: bytes, entry: bytes) -> bool | None:
    """Whether a remembered entry is the one a passed check of ``key`` holds (anything else
    is damaged or tampered with: a miss)."""
    return True if entry == identity_entry(key) else None


def _remember(passed: list[_Check]) -> None:
    """Keep the checks that passed by their content in the machine's cache."""
    for check in passed:
        chain = _machine(check.shard)
        if chain is not None:
            key = _identity_key(check)
            chain.keep([Kept(None, key, True, identity_entry(key))])


def _queue_regions(round_: Round, shard: Shard, size: int) -> list[Slot]:
    """Queue the content regions of ``shard``'s data file, of ``size`` bytes."""
    storage = shard.data_storage
    assert storage is not None
    return [round_.range(storage, shard.path, start, end)
            for start, end in content_regions(size)]


def _digest(round_: Round, regions: list[Slot], size: int) -> int:
    """The content digest of regions fetched on ``round_``.

    Raises:
        RangeReadError, StorageError: A region's request failed.
    """
    parts = []
    for slot in regions:
        got = round_.result(Round.RANGE, slot)
        if isinstance(got, BaseException):
            raise got
        parts.append(got)
    return content_digest(size, parts)


def _check(check: _Check, digest: int | None) -> None:
    shard = check.shard
    assert shard.data_storage is not None
    check_identity(shard.data_storage, shard.path, check.indexed, check.current,
                   shard.index_url, digest)
