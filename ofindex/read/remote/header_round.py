"""Opening shards without a manifest: remote sidecars by their headers, not whole.

A version 2 or 3 sidecar starts with a fixed 512-byte header that gives its record count,
its data file's stamp (size and fingerprint) and the CRC of its body. So opening a remote
file, a list or a glob without a manifest fetches no whole sidecar: one concurrent round
(:class:`~ofindex.read.remote.rounds.Round`) fetches the first 512 bytes of every sidecar and,
with ``check_stale``, the stamp of every data file. Each header is checked (its own CRC, its
stamp against the data file's) and *pinned* on its shard (:meth:`Shard.pin`): from then on
the shard reads as one opened through a manifest does, by pages of its offsets
(:mod:`ofindex.read.remote.pages`), each page checked against the pinned header's indexed end, and
every header, page or whole sidecar fetched later, in any process, checked against the pinned
count, stamp and body CRC.

A version 1 sidecar (a variable header, maybe shorter than 512 bytes) is fetched whole in a
second round, as before; compressed-file sidecars (version 3) and small ones are pinned too,
and fetched whole when their shard is first read. Local sidecars are memory-mapped.
"""

from __future__ import annotations

import struct

from ...errors import IndexNotFoundError, RangeReadError
from ...formats.sidecar_header import HEADER_SIZE, VERSION, VERSION_PACKED, SidecarHeader
from ...formats.sidecar_header import decode_header as _decode_header
from ...storage import FileStamp
from ..shards import Shard, missing_indexes
from .index_round import run_round
from .pages import new_pager, pageable
from .rounds import IdentityChecks, Round, Slot


def open_sidecars(shards: list[Shard]) -> None:
    """Open the sidecars of ``shards`` for :func:`ofindex.open` without a manifest: local ones
    memory-mapped (their offsets checked against their CRC on first read), remote ones by
    their headers in one round (with their data files' stamps).

    Raises:
        IndexNotFoundError: Shards without a sidecar, all named at once (the others are
            opened: :attr:`Shard.found`).
        StaleIndexError: A data file is not the one its sidecar describes.
        SidecarError: A sidecar is corrupt.
    """
    missing: list[Shard] = []
    remote: list[Shard] = []
    for shard in shards:
        if shard.found:
            continue
        if not shard.index_storage.is_local:
            remote.append(shard)
            continue
        try:
            shard.load(check_body=False)
        except IndexNotFoundError:
            missing.append(shard)
    if remote:
        missing += _open_remote(remote)
    if missing:
        raise missing_indexes(missing, len(shards))


def _open_remote(shards: list[Shard]) -> list[Shard]:
    """Open remote sidecars by their headers (version 1 ones whole, in a second round).

    Returns:
        The shards that have no sidecar.
    """
    round_ = Round()
    identities = IdentityChecks()
    heads: list[Slot] = []
    for shard in shards:
        heads.append(round_.range(shard.index_storage, shard.index_path, 0, HEADER_SIZE))
        if shard.data_storage is not None:
            identities.queue(round_, shard)
    round_.run()
    missing: list[Shard] = []
    whole: list[Shard] = []
    grown: list[tuple[Shard, FileStamp]] = []  # data files longer than their sidecar's header
    for shard, head in zip(shards, heads, strict=True):
        got = round_.result(Round.RANGE, head)
        if isinstance(got, FileNotFoundError):
            missing.append(shard)
            continue
        header = _fixed_header(shard, got)
        current = (identities.current(round_, shard) if shard.data_storage is not None
                   else None)
        if header is None:
            whole.append(shard)  # version 1: the whole sidecar, checked as before
        elif current is not None and current.size > header.stamp.size:
            grown.append((shard, current))  # growth segments after its body, or stale
        else:
            _pin(shard, header)
            if current is not None:
                identities.add(shard, header.stamp, current)
    identities.settle()
    if whole or grown:
        missing += run_round([], whole + [shard for shard, _ in grown], check_body=False)
    for shard, current in grown:  # checked now against the stamp of the round, as the others
        if shard.found:
            identities.add(shard, shard.header.stamp, current)
    identities.settle()
    return missing


def _fixed_header(shard: Shard, got: bytes | BaseException) -> SidecarHeader | None:
    """The checked fixed header in the first 512 bytes of a sidecar, or ``None`` when it has
    none (version 1, or a file shorter than a header: the whole fetch then reads or refuses
    it).

    Raises:
        SidecarError: A corrupt header (bad magic, CRC or fields).
        StorageError, RangeReadError: The fetch failed for another reason than a short file.
    """
    if isinstance(got, RangeReadError):
        return None  # shorter than 512 bytes
    if isinstance(got, BaseException):
        raise got
    if len(got) >= 10 and struct.unpack_from("<H", got, 8)[0] not in (VERSION, VERSION_PACKED):
        return None  # version 1 (or an unknown version: the whole fetch names it)
    return _decode_header(got, path=shard.index_url)


def _pin(shard: Shard, header: SidecarHeader) -> None:
    """Pin a fetched header on its shard, with a pager that needs neither header nor stamp
    fetched again in this process (its data file is checked against the header in the same
    round: :class:`~.rounds.IdentityChecks`)."""
    shard.pin(header)
    pager = new_pager(shard)
    pager.accept(header)
    pager.fresh = True
    pager.whole = pager.whole or not pageable(header)
    shard.pager = pager
