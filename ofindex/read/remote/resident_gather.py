"""Batches cut out of remote files the data cache holds whole in this process, as local
batches are cut out of memory maps: no planning, no look-up per block, no lock, no database.

When every file a batch touches is *resident* (each of its blocks kept on local disk and
mapped here, :meth:`DataCache.resident`) and every touched shard's sidecar is loaded, a
batch is: the shard of each record (one ``searchsorted``), its span from its sidecar (one
compiled look-up for the batch), its block and offset in the block (integer arithmetic on
the whole batch), then one compiled pass (``fill``) that checks each record's framing (and
TFRecord CRCs with ``verify``) and copies its payload, in the order asked for (a batch of
several MB in shares on the pool's threads too, as a local one). A record that
crosses a block boundary is joined into a buffer of its own first (records of 1 KB in blocks
of 1 MiB: one in a thousand).

Nothing is reported from here: a record that fails a check in cached bytes makes the batch
be read again by the block reads (:func:`~ofindex.read.access.cached.cached_blocks`), which
drop the damaged blocks, fetch them again and report a record that is bad in the remote file
too, as every read does.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ... import _accel
from ...cache.data import DataCache, ResidentFile
from ...errors import CorruptRecordError
from ...formats.sidecar import Sidecar
from ..mapped_gather import PARALLEL_BYTES, executor, first_failing, pool_shares, shares
from ..payloads import RecordChecks
from ..sum_checks import check_many, record_naming
from ..table import ShardTable

__all__ = ["ResidentShards", "resident_gather"]


@dataclasses.dataclass(frozen=True)
class ResidentShards:
    """The shards of a batch whose files are resident, with their loaded sidecars.

    Attributes:
        touched: The shard numbers.
        which: Per record of the batch, its shard as an index into ``touched`` (int64).
        local: Per record, its number inside its shard.
        sidecars: Each touched shard's sidecar.
        files: Each touched shard's data file, mapped whole.
    """

    touched: list[int]
    which: np.ndarray
    local: np.ndarray
    sidecars: list[Sidecar]
    files: list[ResidentFile]

    @classmethod
    def of(cls, table: ShardTable, indices: np.ndarray, data_cache: DataCache,
           checks: RecordChecks, native: ModuleType) -> ResidentShards | None:
        """The resident shards of records ``indices`` (valid, non-negative), or ``None`` when
        one is not (its sidecar not loaded yet, a block of its file not seen kept), or the
        pass of the compiled module ``native`` cannot check these records (TFRecord CRCs
        without the CPU's CRC instruction)."""
        if (checks.tfrecord_crcs and not native.hw_crc()) or not len(indices):
            return None
        touched, which, local = table.touched(indices)
        check_blocks = not checks.tfrecord_crcs
        sidecars: list[Sidecar] = []
        files: list[ResidentFile] = []
        for shard_no in touched:
            shard = table.shards[shard_no]
            if not shard.loaded:
                return None
            resident = data_cache.resident(shard.storage, shard.path, check_blocks)
            if resident is None:
                return None
            sidecars.append(shard.sidecar)
            files.append(resident)
        return cls(touched, which, local, sidecars, files)


def _spans(shards: ResidentShards, overhead: int,
           native: ModuleType) -> tuple[np.ndarray, np.ndarray] | None:
    """Each record's framing ``[start, end)`` in its file, from its sidecar's offsets, in
    one compiled pass (as :func:`~ofindex.read.mapped_gather` looks spans up in maps).

    Returns:
        The spans, or ``None`` when one lies past the end of its file's cached version (the
        planned reads then read it, and report what is wrong).

    Raises:
        SidecarError: A span that cannot hold a record (corrupt offsets), named by its
            sidecar as every read names it.
    """
    n = len(shards.which)
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    sidecars = shards.sidecars
    got = native.spans([f.size for f in shards.files], [s.offsets for s in sidecars],
                       [s.indexed_end for s in sidecars], shards.which, shards.local,
                       overhead, starts, ends)
    if got is None:
        return starts, ends
    problem, k = got
    if problem == _accel.SPAN_TOO_SHORT:  # the sidecar's own check names the record
        j = int(shards.which[k])
        sidecars[j].spans(shards.local[shards.which == j])
    return None


def resident_gather(table: ShardTable, checks: RecordChecks, shards: ResidentShards,
                    data_cache: DataCache, native: ModuleType) -> list[Any] | None:
    """The payloads of a batch of resident shards, in the order asked for (see the module).

    Args:
        table: The dataset's shards.
        checks: What to check in each record.
        shards: The batch's resident shards (:meth:`ResidentShards.of`).
        data_cache: The cache the files are resident in.
        native: The compiled module that copies and checks them.

    Returns:
        The payloads, or ``None`` when a record failed a check in the cached bytes (the
        files are then let go of: read the batch with the planned reads).

    Raises:
        SidecarError: A touched sidecar's offsets are corrupt (as every read reports it).
    """
    spans = _spans(shards, checks.overhead, native)
    if spans is None:
        return None  # past the end of the file's version: the planned reads report it
    starts, ends = spans
    files = shards.files
    step = files[0].step
    first = starts // step
    base = np.array([0, *itertools.accumulate(len(f.views) for f in files[:-1])],
                    dtype=np.int64)
    bufs: list[Any] = list(itertools.chain.from_iterable(f.views for f in files))
    slots = base[shards.which] + first
    offsets = starts - first * step
    for k in np.flatnonzero((ends - 1) // step != first).tolist():  # across blocks: joined
        views = files[int(shards.which[k])].views
        start, end = int(starts[k]), int(ends[k])
        bufs.append(b"".join(views[b][max(start, b * step) - b * step : end - b * step]
                             for b in range(start // step, (end - 1) // step + 1)))
        slots[k], offsets[k] = len(bufs) - 1, 0
    lengths = ends - starts - checks.overhead
    payloads: list[Any] = native.blank(lengths)
    fill = functools.partial(native.fill, bufs, slots, offsets, payloads)
    bad = _filled(fill, lengths, checks)
    try:
        if bad < 0:
            _check_sums(table, checks, shards, payloads)
            data_cache.note_used(files)
            return payloads
    except CorruptRecordError:
        pass
    data_cache.drop_resident(files)
    return None


def _filled(fill: Callable[..., int], lengths: np.ndarray, checks: RecordChecks) -> int:
    """Copy and check the records of a batch with ``fill(lo, hi, header, footer, crcs)``: a
    batch of at least :data:`~ofindex.read.mapped_gather.PARALLEL_BYTES` on the pool's
    threads too, as local batches are (:func:`~ofindex.read.mapped_gather.threaded_copies`);
    returns -1, or the first record that failed."""
    n = len(lengths)
    pool = executor()
    if pool is None or int(lengths.sum()) < PARALLEL_BYTES:
        return int(fill(0, n, checks.header, checks.footer, checks.tfrecord_crcs))

    def work(part: tuple[int, int]) -> int:
        return int(fill(part[0], part[1], checks.header, checks.footer, checks.tfrecord_crcs))

    first = first_failing(work, shares(lengths, pool_shares()), pool, n)
    return -1 if first == n else first


def _check_sums(table: ShardTable, checks: RecordChecks, shards: ResidentShards,
                payloads: list[Any]) -> None:
    """Check OFRecord payloads (in batch order) against their sidecars' checksums.

    Raises:
        CorruptRecordError: The first that differs.
    """
    if not checks.payload_sums:
        return
    for j, sidecar in enumerate(shards.sidecars):
        if sidecar.checksums is None:
            continue
        chosen = np.flatnonzero(shards.which == j)
        records = shards.local[chosen]
        check_many([payloads[k] for k in chosen.tolist()], sidecar.checksums[records],
                   record_naming(table.url(shards.touched[j]), sidecar.offsets, records))
