"""A batch's index round: the byte spans of its records, with every missing piece of index
(sidecar pages and headers, whole sidecars, the data files' staleness ``stat``) fetched in one
concurrent round per storage (see :mod:`ofindex.read.pages`)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from typing import Any

import numpy as np

from ..errors import SidecarError, StaleIndexError
from ..formats.sidecar_header import HEADER_SIZE
from ..storage import FileStamp, Storage
from .pages import (
    Pager,
    check_bounds,
    header_fetch_bytes,
    page_range,
    pager_of,
    parse_page_header,
    spans_from_pages,
    split_pages,
)
from .shards import Shard, prefetch_sidecars

#: Groups of one batch: ``(shard number, first item, one past the last item)``.
Groups = list[tuple[int, int, int]]


@dataclasses.dataclass
class _Want:
    """What one paged shard of the batch needs."""

    shard: Shard
    pg: Pager
    lo: int
    hi: int
    local: np.ndarray
    pages: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    missing: list[int] = dataclasses.field(default_factory=list)
    header_slot: int = -1      # the range holding the header (maybe with the first run)
    runs: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)
    stat_slot: int = -1
    fallback: bool = False     # read through the whole sidecar after all


class _Calls:
    """The requests of one round on one storage; :meth:`run` fills the results."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.ranges: list[tuple[str, int, int]] = []
        self.wholes: list[str] = []
        self.stats: list[str] = []
        self.got: tuple[list[Any], list[Any], list[Any]] = ([], [], [])

    def run(self) -> None:
        self.got = self.storage.fetch_round(self.ranges, self.wholes, self.stats)


class _Round:
    """Requests grouped by storage, run at once (a thread per storage when there are two)."""

    def __init__(self) -> None:
        self.calls: dict[int, _Calls] = {}

    def _on(self, storage: Storage) -> _Calls:
        c = self.calls.get(id(storage))
        if c is None:
            c = self.calls[id(storage)] = _Calls(storage)
        return c

    def range(self, storage: Storage, path: str, start: int, end: int) -> tuple[int, int]:
        c = self._on(storage)
        c.ranges.append((path, start, end))
        return id(storage), len(c.ranges) - 1

    def whole(self, storage: Storage, path: str) -> tuple[int, int]:
        c = self._on(storage)
        c.wholes.append(path)
        return id(storage), len(c.wholes) - 1

    def stat(self, storage: Storage, path: str) -> tuple[int, int]:
        c = self._on(storage)
        c.stats.append(path)
        return id(storage), len(c.stats) - 1

    def run(self) -> None:
        calls = [c for c in self.calls.values() if c.ranges or c.wholes or c.stats]
        if len(calls) == 1:
            calls[0].run()
        elif calls:
            with cf.ThreadPoolExecutor(len(calls)) as pool:
                for f in [pool.submit(c.run) for c in calls]:
                    f.result()

    def result(self, kind: int, slot: tuple[int, int]) -> Any:
        return self.calls[slot[0]].got[kind][slot[1]]


RANGE, WHOLE, STAT = 0, 1, 2


def batch_spans(shards: list[Shard], groups: Groups,
                local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte spans ``(starts, ends)`` of a batch's records, grouped by shard.

    Args:
        shards: The dataset's shards.
        groups: ``(shard number, lo, hi)``: items ``lo..hi-1`` of ``local`` are in that shard.
        local: Record numbers inside their shard.

    Returns:
        The framing's byte range of every item.

    Raises:
        IndexNotFoundError, StaleIndexError, SidecarError, RangeReadError: As reads do.
    """
    wants: list[_Want | None] = []
    whole: list[Shard] = []
    for s, lo, hi in groups:
        shard = shards[s]
        pg = pager_of(shard)
        if pg is not None:
            wants.append(_Want(shard, pg, lo, hi, local[lo:hi]))
            continue
        wants.append(None)
        if shard.cache is not None and not shard.loaded:
            whole.append(shard)
    paged = [w for w in wants if w is not None]
    if paged or len(whole) > 1:
        _index_round(paged, whole)
    starts = np.empty(len(local), dtype=np.int64)
    ends = np.empty(len(local), dtype=np.int64)
    for (s, lo, hi), w in zip(groups, wants, strict=True):
        if w is not None and not w.fallback:
            starts[lo:hi], ends[lo:hi] = spans_from_pages(w.shard, w.pg, w.pages, w.local)
        else:
            starts[lo:hi], ends[lo:hi] = shards[s].sidecar.spans(local[lo:hi])
    return starts, ends


def _index_round(paged: list[_Want], whole: list[Shard]) -> None:
    cache = (paged[0].shard if paged else whole[0]).cache
    assert cache is not None
    for w in paged:  # this process's pages first
        for page in np.unique(w.local // w.pg.page_records).tolist():
            arr = cache.pages.get((id(w.shard), page))
            if arr is None:
                w.missing.append(page)
            else:
                w.pages[page] = arr
    node = cache.node
    if node is not None:
        _from_node(paged, node.get(_node_keys(paged)))
    rnd = _Round()
    for w in paged:
        _plan(rnd, w)
    disk = {id(s): s._from_disk() for s in whole}
    whole_slots = {id(s): rnd.whole(s.index_storage, s.index_path)
                   for s in whole if disk[id(s)] is None}
    stat_slots = {id(s): rnd.stat(s.data_storage, s.path)
                  for s in whole if s.data_storage is not None}
    rnd.run()
    to_node: list[tuple[bytes, bytes]] = []
    for w in paged:
        _take(rnd, w, to_node)
    if node is not None and to_node:
        node.put(to_node)
    for s in whole:
        _accept_whole(rnd, s, disk[id(s)], whole_slots.get(id(s)), stat_slots.get(id(s)))
    fallback = [w.shard for w in paged if w.fallback]
    if fallback:  # version 1 or compressed after all: their whole sidecars, one more round
        prefetch_sidecars(fallback)
        for shard in fallback:
            shard.sidecar  # noqa: B018  (loads a lone shard)


def _node_keys(paged: list[_Want]) -> list[bytes]:
    keys = []
    for w in paged:
        if not w.pg.checked:
            keys.append(w.pg.header_key)
        keys += [w.pg.page_key(p) for p in w.missing]
    return keys


def _from_node(paged: list[_Want], found: dict[bytes, bytes]) -> None:
    """Take what the machine's cache holds (only pages whose header checked out get there)."""
    if not found:
        return
    for w in paged:
        pg = w.pg
        raw = found.get(pg.header_key) if not pg.checked else None
        if raw is not None:
            try:
                header = parse_page_header(w.shard, raw)
            except SidecarError:  # a damaged or tampered entry: a miss, fetched again
                header = None
            if header is not None:
                pg.accept(header)
        if not pg.checked:
            continue
        still = []
        for page in w.missing:
            blob = found.get(pg.page_key(page))
            count = min(pg.page_records, w.shard.records - page * pg.page_records) + 1
            arr = _cached_page(w.shard, pg, page, blob, count)
            if arr is not None:
                w.pages[page] = arr
                w.shard.cache.pages.put((id(w.shard), page), arr)  # type: ignore[union-attr]
            else:
                still.append(page)
        w.missing = still


def _cached_page(shard: Shard, pg: Pager, page: int, blob: bytes | None,
                 count: int) -> np.ndarray | None:
    """A page found in the node cache, or ``None`` (a miss) when it is not there or does not
    hold ``count`` bounds that any build could have written (a damaged or tampered entry)."""
    if blob is None or len(blob) != 8 * count:
        return None
    arr = np.frombuffer(blob, dtype="<u8")
    try:
        check_bounds(shard, pg, page * pg.page_records, arr)
    except SidecarError:
        return None
    return arr


def _plan(rnd: _Round, w: _Want) -> None:
    """Queue the header (if not checked yet), the missing pages (neighbours merged) and the
    data file's stamp (once) of one shard."""
    shard, pg = w.shard, w.pg
    ist, path, n = shard.index_storage, shard.index_path, shard.records
    runs: list[list[int]] = []
    for page in sorted(w.missing):
        if runs and page == runs[-1][1] + 1:
            runs[-1][1] = page
        else:
            runs.append([page, page])
    need_header = not pg.checked
    for first, last in runs:
        a, b = page_range(pg, n, first, last)
        if need_header and a <= HEADER_SIZE + 8 * pg.page_records:  # the header rides along
            w.header_slot = rnd.range(ist, path, 0, b)[1]
            w.runs.append((first, last, w.header_slot, a))
            need_header = False
        else:
            w.runs.append((first, last, rnd.range(ist, path, a, b)[1], 0))
    if need_header:
        w.header_slot = rnd.range(ist, path, 0, header_fetch_bytes(shard))[1]
    if not pg.fresh and shard.data_storage is not None:
        w.stat_slot = rnd.stat(shard.data_storage, shard.path)[1]


def _take(rnd: _Round, w: _Want, to_node: list[tuple[bytes, bytes]]) -> None:
    """Check the header, the data file's stamp and keep the pages of one shard."""
    shard, pg = w.shard, w.pg
    ist = id(shard.index_storage)
    if w.header_slot >= 0:
        got = rnd.result(RANGE, (ist, w.header_slot))
        if isinstance(got, FileNotFoundError):
            raise shard._not_found() from None
        header = None if isinstance(got, BaseException) else parse_page_header(shard, got)
        if header is None:  # version 1 (maybe shorter than 512 bytes), compressed, or worse
            pg.whole = w.fallback = True
            return
        pg.accept(header)
        head = bytes(got[:HEADER_SIZE])
        to_node.append((pg.header_key, head + bytes(HEADER_SIZE - len(head))))
    if w.stat_slot >= 0:
        assert shard.data_storage is not None
        current = rnd.result(STAT, (id(shard.data_storage), w.stat_slot))
        if isinstance(current, BaseException):
            raise current
        indexed = shard._expected()  # the checked header's stamp
        assert indexed is not None
        _check_fresh(shard, indexed, current)
        shard.data_storage.expect(shard.path, current)
        pg.fresh = True
    cache = shard.cache
    assert cache is not None
    for first, last, slot, skip in w.runs:
        got = rnd.result(RANGE, (ist, slot))
        if isinstance(got, BaseException):
            raise got
        for page, arr in split_pages(pg, shard.records, first, last,
                                     memoryview(got)[skip:], shard).items():
            w.pages[page] = arr
            cache.pages.put((id(shard), page), arr)
            to_node.append((pg.page_key(page), arr.tobytes()))


def _check_fresh(shard: Shard, indexed: FileStamp, current: FileStamp) -> None:
    why = indexed.mismatch(current)
    if why:
        assert shard.data_storage is not None
        url = shard.data_storage.url(shard.path)
        raise StaleIndexError(f"{shard.index_url}: index is stale for {url}: {why} since it "
                              f"was indexed; rebuild it with `ofindex build {url}`")


def _accept_whole(rnd: _Round, shard: Shard, on_disk: Any, slot: tuple[int, int] | None,
                  stat: tuple[int, int] | None) -> None:
    """Accept a whole sidecar fetched (or found on disk) in the round."""
    if on_disk is not None:
        sc, nbytes = on_disk, 0
    else:
        assert slot is not None
        raw = rnd.result(WHOLE, slot)
        if isinstance(raw, FileNotFoundError):
            raise shard._not_found() from None
        if isinstance(raw, BaseException):
            raise raw
        sc, nbytes = shard._from_raw(raw)
    current = None if stat is None else rnd.result(STAT, stat)
    if isinstance(current, BaseException):
        raise current
    shard._accept(sc, nbytes, current)
