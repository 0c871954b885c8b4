"""Index rounds: every missing piece of index a read needs, fetched in one concurrent round.

A round gathers, for the shards a batch (or ``open``) touches, the remote sidecar pages and
headers it lacks (:mod:`ofindex.read.remote.pages`), the whole sidecars of the shards not read by
pages, and the data files' staleness ``stat``; it runs them at once, one call per storage
(:meth:`~ofindex.storage.Storage.fetch_round`, over HTTP the pages of one sidecar in one
multi-range request; a thread per storage when the sidecars live elsewhere than the data),
then checks and keeps what came back: the keys of the pages and headers are worked out and
the cache chain is called once (:class:`~ofindex.cache.chain.Chain`), which takes what this
process and the machine hold and has the rest fetched by the round. Where the data's storage
checks the stamp every read reports (:attr:`~ofindex.storage.Storage.checks_stamp_on_read`:
HTTP, each response's ``ETag`` and size), no ``stat`` is sent: the data file owes its
storage the check against its index (:meth:`~ofindex.storage.Storage.expect_indexed`), made
by its first response before any byte of it is handed out. Two entry points use it:

* :func:`load_sidecars`: the whole sidecars of some shards (compressed batches): local ones
  are memory-mapped one by one, remote ones fetched in one round;
* :func:`run_round`: the pages and whole sidecars a batch's records need
  (:func:`~ofindex.read.access.ranged.batch_spans` gives their byte spans).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

import numpy as np

from ...cache.chain import Kept, Want
from ...errors import IndexNotFoundError, SidecarError
from ...formats.sidecar import Sidecar
from ...formats.sidecar_header import HEADER_SIZE, SidecarHeader
from ..manifest_shards import queue_stamps, resolve_stamps, stamps_from_machine, take_stamps
from ..shards import Shard, missing_indexes
from .pages import (
    Pager,
    check_bounds,
    header_fetch_bytes,
    key_pager,
    page_range,
    parse_page_header,
    split_pages,
)
from .rounds import IdentityChecks, Round, Slot, content_expected


@dataclasses.dataclass
class PageRequest:
    """What one paged shard of a batch needs, and what the round brought back for it."""

    shard: Shard
    pager: Pager
    local: np.ndarray
    pages: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    missing: list[int] = dataclasses.field(default_factory=list)
    header_slot: int = -1      # the range holding the header (maybe with the first run)
    runs: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)
    wants: list[tuple[int, Want]] = dataclasses.field(default_factory=list)  # page, its want
    stat_queued: bool = False  # the data file's stamp comes in this round
    stamp_on_read: bool = False  # the data file's first read checks its stamp (no stat)
    fallback: bool = False     # read through the whole sidecar after all


@dataclasses.dataclass
class WholeRequest:
    """One shard whose sidecar the round fetches whole (or finds in the node cache)."""

    shard: Shard
    on_disk: Sidecar | None
    whole_slot: Slot | None = None
    stat_queued: bool = False


# -- whole sidecars -------------------------------------------------------------------------

def load_sidecars(shards: Iterable[Shard], *, check_body: bool = True) -> None:
    """Load the sidecars of ``shards`` not loaded yet in this process: local ones memory-mapped
    one by one, remote ones fetched in one round with their data files' stamps.
    ``check_body=False`` leaves the offsets of memory-mapped sidecars to be checked against
    their CRC when their shard is first read.

    Raises:
        IndexNotFoundError: Shards without a sidecar, all named at once.
        StaleIndexError, SidecarError: A sidecar does not describe its data file, or is
            corrupt.
    """
    cold: list[Shard] = []
    for shard in shards:
        if shard.loaded:
            continue
        if shard.opened:  # its header is checked in this process: nothing to fetch
            shard.load(check_body=check_body)
        else:
            cold.append(shard)
    missing: list[Shard] = []
    remote = [s for s in cold if not s.index_storage.is_local]
    for shard in cold:
        if shard.index_storage.is_local:
            try:
                shard.load(check_body=check_body)
            except IndexNotFoundError:
                missing.append(shard)
    if remote:
        missing += run_round([], remote, check_body=check_body)
    if missing:
        raise missing_indexes(missing, len(cold))


def stamp_rides(shard: Shard, stamps_first: bool) -> bool:
    """Whether the check of ``shard``'s data file against its index rides on the file's
    first read (its storage checks the stamp every read reports: HTTP) rather than a ``stat``
    in the index round: not when ``stamps_first`` (a data cache keys its blocks by the
    checked stamp before any byte is read), nor when the check will need the file's content
    (:func:`~.rounds.content_expected`: it is fetched in the round instead), nor for files
    that may grow (a longer file is checked by its first bytes, in the round)."""
    storage = shard.data_storage
    return (storage is not None and storage.checks_stamp_on_read and not stamps_first
            and not content_expected(shard) and not storage.expected.growing)


def _queue_whole(round_: Round, shard: Shard, identities: IdentityChecks,
                 stamps_first: bool = False) -> WholeRequest:
    """Queue the whole sidecar of ``shard`` (unless the node cache has it) and its data
    file's stamp (unless it rides on the first read: :func:`stamp_rides`)."""
    request = WholeRequest(shard, shard.disk_copy())
    if request.on_disk is None:
        request.whole_slot = round_.whole(shard.index_storage, shard.index_path)
    if shard.data_storage is not None and not stamp_rides(shard, stamps_first):
        identities.queue(round_, shard)
        request.stat_queued = True
    return request


def _take_whole(round_: Round, request: WholeRequest, check_body: bool,
                identities: IdentityChecks) -> bool:
    """Accept a whole sidecar the round fetched (or found on disk); ``False`` when there is
    none (its shard has no index)."""
    shard = request.shard
    if request.on_disk is not None:
        sidecar, nbytes = request.on_disk, 0
    else:
        assert request.whole_slot is not None
        raw = round_.result(Round.WHOLE, request.whole_slot)
        if isinstance(raw, FileNotFoundError):
            return False
        if isinstance(raw, BaseException):
            raise raw
        sidecar, nbytes = shard.from_fetched(raw)
    current = identities.current(round_, shard) if request.stat_queued else None
    # the data file: checked below, against the state accepted (a sidecar grown since the
    # manifest was written is taken as it was then)
    stamp = shard.accept(sidecar, nbytes, None, check_body=check_body).header.stamp
    if current is not None:
        identities.add(shard, stamp, current)
    elif shard.data_storage is not None:  # checked on first read
        shard.data_storage.expect_indexed(shard.path, stamp, shard.index_url)
    return True


# -- pages ----------------------------------------------------------------------------------

def run_round(paged: list[PageRequest], whole: list[Shard], *,
              check_body: bool = True, stamps_first: bool = False) -> list[Shard]:
    """One round for the pages of ``paged`` and the whole sidecars of ``whole``: the keys of
    the pages and headers worked out, then one call to the cache chain, which takes what
    this process and the machine hold and has the rest fetched at once with the stamps
    still to check (:class:`_Fetch`), checked and kept.

    Returns:
        The shards of ``whole`` that have no sidecar.

    Raises:
        StaleIndexError, SidecarError, RangeReadError: As reads do.
    """
    chain = (paged[0].shard if paged else whole[0]).cache
    if chain is not None and chain.machine is not None:  # the keys need the stamps: those
        stamps_from_machine([r.shard for r in paged] + whole, chain)  # of compact manifests
        resolve_stamps(whole)  # a whole sidecar's copy on the machine is found by its stamp
    fetch = _Fetch(paged, whole, stamps_first)
    wants = [want for request in paged for want in _wants(request)]
    if chain is None:
        fetch(wants, [])
    else:
        chain.read(wants, fetch)
    missing = [w.shard for w in fetch.wholes
               if not _take_whole(fetch.round, w, check_body, fetch.identities)]
    _settle(fetch.identities, fetch.wholes)  # before any byte of a data file is read
    for request in paged:
        if request.stat_queued and not request.fallback:
            request.pager.fresh = True
    fallback = [r.shard for r in paged if r.fallback]
    if fallback:  # version 1 or compressed after all: their whole sidecars, one more round
        missing += run_round([], fallback, stamps_first=stamps_first)
    return missing


class _Fetch:
    """The network part of an index round: the pieces the cache chain did not hold, the
    compact manifests' stamps pages, the whole sidecars and the data files' stamps, fetched
    in one round, then checked; what is to be kept is added to ``kept`` as it is checked."""

    def __init__(self, paged: list[PageRequest], whole: list[Shard],
                 stamps_first: bool) -> None:
        self.paged, self.whole, self.stamps_first = paged, whole, stamps_first
        self.round = Round()
        self.identities = IdentityChecks()
        self.wholes: list[WholeRequest] = []

    def __call__(self, missing: list[Want], kept: list[Kept]) -> None:
        round_, identities = self.round, self.identities
        pending = [r.shard for r in self.paged] + self.whole
        pending_stamps = any(shard.stamp_pending for shard in pending)
        stamps = queue_stamps(pending, round_.range) if pending_stamps else []
        for request in self.paged:
            request.missing = [page for page, want in request.wants if want.value is None]
            request.pages = {page: want.value for page, want in request.wants
                             if want.value is not None}
            _queue_pages(round_, request, identities, self.stamps_first)
        self.wholes = [_queue_whole(round_, shard, identities, self.stamps_first)
                       for shard in self.whole]
        round_.run()
        if pending_stamps:
            take_stamps(stamps, lambda slot: round_.result(Round.RANGE, slot), pending, kept)
        for request in self.paged:
            if not request.pager.keyed:
                key_pager(request.shard, request.pager)
            _take_pages(round_, request, kept, identities)


def _wants(request: PageRequest) -> list[Want]:
    """The keys of what one paged shard of a batch needs: its header (unless checked in this
    process) and its pages, on the machine only when the shard's stamp is known (else it
    comes in the round: fetched, not looked for)."""
    shard, pager = request.shard, request.pager
    if not pager.keyed and not shard.stamp_pending:
        key_pager(shard, pager)
    keyed = pager.keyed
    wants: list[Want] = []
    if not pager.checked:  # first: the pages found on the machine need their header
        wants.append(Want(None, pager.header_key if keyed else None,
                          functools.partial(_header_held, shard, pager)))
    # (a set, not np.unique: numpy's first unique() imports numpy.ma, ~50 ms in a new
    # process, and a shard's records of one batch are few)
    for page in sorted(set((request.local // pager.page_records).tolist())):
        want = Want((id(shard), page), pager.page_key(page) if keyed else None,
                    functools.partial(_page_held, shard, pager, page))
        request.wants.append((page, want))
        wants.append(want)
    return wants


def _header_held(shard: Shard, pager: Pager, raw: bytes) -> SidecarHeader | None:
    """A header the machine held, checked and taken, or ``None`` (a miss)."""
    try:
        header = parse_page_header(shard, raw)
    except SidecarError:  # a damaged or tampered entry: a miss, fetched again
        return None
    if header is not None:
        pager.accept(header)
    return header


def _page_held(shard: Shard, pager: Pager, page: int, blob: bytes) -> np.ndarray | None:
    """A page the machine held (only pages whose header checked out get there), or ``None``
    (a miss) when its header is not checked in this process or it does not hold the bounds
    any build could have written (a damaged or tampered entry)."""
    if not pager.checked:
        return None
    count = min(pager.page_records, shard.records - page * pager.page_records) + 1
    if len(blob) != 8 * count:
        return None
    page_bounds = np.frombuffer(blob, dtype="<u8")
    try:
        check_bounds(shard, pager, page * pager.page_records, page_bounds)
    except SidecarError:
        return None
    return page_bounds


def _settle(identities: IdentityChecks, wholes: list[WholeRequest]) -> None:
    """Check the data files a round touched against their indexes. The round accepted its
    whole sidecars before (their shards count as loaded): when a check fails, which stops
    the checks of the files after it too, every one of them is dropped again, so that no
    read goes through a sidecar whose data file was not found to be the one it indexes.

    Raises:
        StaleIndexError, RangeReadError, StorageError: As :meth:`IdentityChecks.settle`.
    """
    try:
        identities.settle()
    except BaseException:
        for request in wholes:
            request.shard.unload()
        raise


def _queue_pages(round_: Round, request: PageRequest, identities: IdentityChecks,
                 stamps_first: bool) -> None:
    """Queue the header (if not checked yet), the missing pages (neighbours merged) and the
    data file's stamp (once, unless it rides on the first read: :func:`stamp_rides`) of one
    shard."""
    shard, pager = request.shard, request.pager
    storage, path, n = shard.index_storage, shard.index_path, shard.records
    runs: list[list[int]] = []
    for page in sorted(request.missing):
        if runs and page == runs[-1][1] + 1:
            runs[-1][1] = page
        else:
            runs.append([page, page])
    need_header = not pager.checked
    for first, last in runs:
        start, end = page_range(pager, n, first, last)
        if need_header and start <= HEADER_SIZE + 8 * pager.page_records:  # the header
            request.header_slot = round_.range(storage, path, 0, end)[1]  # rides along
            request.runs.append((first, last, request.header_slot, start))
            need_header = False
        else:
            request.runs.append((first, last, round_.range(storage, path, start, end)[1], 0))
    if need_header:
        request.header_slot = round_.range(storage, path, 0, header_fetch_bytes(shard))[1]
    if not pager.fresh and shard.data_storage is not None:
        if stamp_rides(shard, stamps_first):
            request.stamp_on_read = True  # the data's first response is checked instead
        else:
            identities.queue(round_, shard)
            request.stat_queued = True


def _take_pages(round_: Round, request: PageRequest, kept: list[Kept],
                identities: IdentityChecks) -> None:
    """Check the header, the data file's stamp and keep the pages of one shard."""
    shard, pager = request.shard, request.pager
    storage_id = id(shard.index_storage)
    if request.header_slot >= 0:
        got = round_.result(Round.RANGE, (storage_id, request.header_slot))
        if isinstance(got, FileNotFoundError):
            raise shard.not_found() from None
        header = None if isinstance(got, BaseException) else parse_page_header(shard, got)
        if header is None:  # version 1 (maybe shorter than 512 bytes), compressed, or worse
            pager.whole = request.fallback = True
            return
        pager.accept(header)
        head = bytes(got[:HEADER_SIZE])
        kept.append(Kept(None, pager.header_key, header, head + bytes(HEADER_SIZE - len(head))))
    if request.stat_queued:
        assert shard.data_storage is not None
        current = identities.current(round_, shard)
        indexed = shard.expected_stamp()  # the checked header's stamp
        assert indexed is not None
        identities.add(shard, indexed, current)  # settled after the round (pager.fresh then)
    elif request.stamp_on_read:
        assert shard.data_storage is not None
        indexed = shard.expected_stamp()
        assert indexed is not None
        shard.data_storage.expect_indexed(shard.path, indexed, shard.index_url)
        pager.fresh = True
    for first, last, slot, skip in request.runs:
        got = round_.result(Round.RANGE, (storage_id, slot))
        if isinstance(got, BaseException):
            raise got
        for page, page_bounds in split_pages(pager, shard.records, first, last,
                                             memoryview(got)[skip:], shard).items():
            request.pages[page] = page_bounds
            kept.append(Kept((id(shard), page), pager.page_key(page), page_bounds,
                             page_bounds.tobytes()))
