"""Later epochs from local disk: one cache of remote data per machine (``data_cache_bytes``).

With ``ofindex.open(url, cache_dir=DIR, data_cache_bytes=N)``, the bytes of remote data files
are kept in ``DIR`` in *blocks*: block ``k`` of a file is its bytes ``[k*B, (k+1)*B)``
(``B`` = :data:`DEFAULT_BLOCK_BYTES`; a file's last block is shorter, a file smaller than
``B`` is one block). A batch asks for the blocks its records lie in: those on disk are
memory-mapped from there, the others fetched in one round (the batch's data round, each
block one range) and kept. Every process of the machine shares the blocks: DataLoader
workers, ranks, the next run.

Why blocks, why 1 MiB, and why this store rather than diskcache's or fsspec's block cache:
the measurements are in ``docs/design.md`` ("Why our own caches on the machine").

Once this process has seen every block of a file kept (fetched here, or found on disk), the
file is *resident*: all its blocks are mapped once (:meth:`DataCache.resident`) and a batch
whose files are all resident is cut out of them by one compiled pass
(:mod:`ofindex.read.remote.resident_gather`), with no planning, no look-up per block, no lock and
no database: a later epoch then costs about what an epoch over local files costs. The
blocks' use is registered for the eviction once a minute per file
(:data:`~ofindex.cache.machine.TOUCH_AFTER`).

Sequential passes (iteration) read through the same blocks; compressed shards are read
without the cache.

What makes it safe:

* **Keyed by the remote object's identity.** A block's key is the file's URL, the size and
  ETag / generation the dataset checked it to have (:attr:`Storage.expected`), the block
  size and number (:func:`~ofindex.cache.keys.block_key`): a file replaced by another
  version has other keys, so a block of the old one is never served. Files the dataset did
  not check (``check_stale=False``, a server that reports no version) are read without it.
* **A torn block is never served.** Blocks are written under a temporary name and renamed;
  one is used only when its length, its header and its key check out
  (:mod:`ofindex.cache.block_file`). Its records are then checked as any remote read checks
  them (TFRecord CRCs with ``verify``); where they carry no CRC of their own (OFRecord,
  ``verify=False``) the block's CRC32C is checked when it is first mapped in a process. A
  record whose check fails in cached bytes makes the batch's cached blocks be dropped and
  the batch read again from the remote store.
* **Bounded, least recently used first, never the only copy.** Blocks are registered in
  ``DIR/ofindex-data.sqlite3`` (the layout of the page cache's database, :mod:`.entries_db`,
  with its own bound ``data_cache_bytes``): past the bound the least recently used are
  deleted. Only copies of remote data are kept; nothing else is ever deleted (the file of an
  entry is named by its key, never read from the database). A dataset larger than the bound
  is read without the cache (one warning): its blocks would be evicted before their other
  records are read.
* **Best effort.** A directory that cannot be used costs one warning (the page cache's, which
  shares the verdict); a block that cannot be written (a full disk) is served from memory
  and fetched again next time, with one warning per process.
"""

import collections
import dataclasses
import math
import os
import threading
import time
import warnings
from collections.abc import Sequence

import numpy as np

from ..errors import CacheDirWarning, DataCacheWarning
from ..formats.framing import Buffer
from ..storage import FileStamp, Storage, write_local_atomic
from . import block_file, block_plan
from .block_plan import Block, FileBlocks
from .dir_files import BLOCK_SUFFIX, block_name
from .entries_db import DATA_DB_NAME
from .machine import ENTRY_OVERHEAD, TOUCH_AFTER, NodeCache

__all__ = ["DEFAULT_BLOCK_BYTES", "CachedRead", "DataCache", "DataCacheWarning", "ResidentFile",
           "same_cache"]

#: Bytes per block (see the module's measurement).
DEFAULT_BLOCK_BYTES = 1 << 20
#: Blocks a process keeps memory-mapped (below the kernel's default bound of 65,530 maps).
MAX_MAPPED_BLOCKS = 4096
#: Blocks a process keeps mapped in files held whole (16 GiB of 1 MiB blocks; with the maps
#: above, a fifth of the kernel's default bound). Files are admitted while they fit and are
#: never evicted for others: a dataset larger than this is held in part, and batches that
#: touch its other files take the planned reads (mapping files in and out for each batch
#: would cost more than those).
MAX_RESIDENT_BLOCKS = 16384
#: Most bytes of neighbouring blocks fetched in one request (ranged GETs of 8-16 MB are what
#: S3's guidance gives for throughput; fewer, longer requests would use fewer connections).
MAX_RUN_BYTES = 16 << 20


@dataclasses.dataclass
class CachedRead:
    """Ranges read through the cache: the blocks they lie in, at hand.

    Attributes:
        plan: Where each range is (:class:`~ofindex.read.block_plan.BlockPlan`).
        views: The bytes of each block of the plan, by slot.
        begin: First byte of each range in its file.
        fetched: The bytes of the ranges fetched as they are, by range.
        cached: The blocks that were served from the cache (not fetched), by file name.
    """

    plan: block_plan.BlockPlan
    views: list[Buffer]
    begin: np.ndarray
    fetched: dict[int, Buffer]
    cached: list[str]

    def buffer(self) -> bytearray:
        """The ranges concatenated.

        Returns:
            Their bytes, back to back in the order asked for.
        """
        return self.plan.assemble(self.begin, self.views, self.fetched)


@dataclasses.dataclass
class ResidentFile:
    """Every block of one version of a remote file, mapped in this process: the whole file
    at hand, block ``k`` holding its bytes ``[k*step, (k+1)*step)``.

    Attributes:
        views: Each block's payload, in order (checked as :func:`block_file.map_block` checks).
        names: Each block's file name in the cache directory.
        step: Bytes per block.
        size: The file's bytes.
        checked: Whether the blocks' payload CRCs were checked when they were mapped.
        used_at: When the blocks' last use was last registered in the database.
    """

    views: list[memoryview]
    names: list[str]
    step: int
    size: int
    checked: bool
    used_at: float = 0.0


#: Files whose block keys a process remembers (their keys are cheap to work out again).
_MAX_FILES = 4096


class DataCache:
    """Blocks of remote data files kept in ``directory``, bounded by ``max_bytes``.

    Picklable: each process keeps its own memory maps (a new process starts with none).

    Args:
        directory: The cache directory (``cache_dir``).
        max_bytes: Bound on the bytes of the blocks kept (``data_cache_bytes``).
        block_bytes: Bytes per block.
        problem: Why the directory cannot be used, when the caller found out already (no
            second warning), or ``None`` to check it now.

    Raises:
        ValueError: ``max_bytes`` or ``block_bytes`` is not a positive number.
    """

    def __init__(self, directory: str, max_bytes: int, *,
                 block_bytes: int = DEFAULT_BLOCK_BYTES, problem: str | None = None) -> None:
        if isinstance(max_bytes, bool) or int(max_bytes) <= 0:
            raise ValueError(f"data_cache_bytes must be a positive number of bytes, got "
                             f"{max_bytes!r}")
        if isinstance(block_bytes, bool) or int(block_bytes) <= 0:
            raise ValueError(f"block_bytes must be a positive number of bytes, got "
                             f"{block_bytes!r}")
        self.block_bytes = int(block_bytes)
        self.index = NodeCache(directory, int(max_bytes), database=DATA_DB_NAME,
                               files=BLOCK_SUFFIX, problem=problem)
        self._process_state()
        if self.index.problem is None:
            block_file.sweep_temporaries(self.index.directory, time.time())

    def _process_state(self) -> None:
        self._pid = os.getpid()
        #: key -> (payload view, last use registered, payload CRC checked)
        self._mapped: collections.OrderedDict[bytes, tuple[memoryview, float, bool]] = (
            collections.OrderedDict())
        self._lock = threading.Lock()
        self._files: dict[tuple[str, FileStamp], FileBlocks] = {}
        #: Files mapped whole (:meth:`resident`).
        self._resident: dict[tuple[str, FileStamp], ResidentFile] = {}
        self._resident_blocks = 0
        self._warned = False
        #: Blocks served from the cache / fetched by planned reads, in this process.
        self.hits = self.misses = 0
        #: Batches served from files mapped whole, in this process.
        self.resident_batches = 0

    def _own_process(self) -> None:
        """Start this process's state afresh after a fork (the parent's lock may have been
        held by one of its threads at the fork, and would stay held here)."""
        if self._pid != os.getpid():
            self._process_state()

    def __getstate__(self) -> tuple[NodeCache, int]:
        return (self.index, self.block_bytes)

    def __setstate__(self, state: tuple[NodeCache, int]) -> None:
        self.index, self.block_bytes = state
        self._process_state()

    def __repr__(self) -> str:
        return (f"DataCache({self.directory!r}, max_bytes={self.max_bytes}, "
                f"block_bytes={self.block_bytes})")

    @property
    def directory(self) -> str:
        """The cache directory."""
        return self.index.directory

    @property
    def max_bytes(self) -> int:
        """The bound on the bytes kept."""
        return self.index.max_bytes

    def usable(self) -> bool:
        """Whether this process uses the cache.

        Returns:
            ``False`` once the directory was found unusable (warned about once).
        """
        return self.index.usable()

    def fits(self, sizes: Sequence[int]) -> bool:
        """Whether files of ``sizes`` bytes fit the bound whole, with their blocks' overhead.

        Args:
            sizes: The files' sizes (a size not known, below 0, does not fit).

        Returns:
            Whether every block of them can be kept at once.
        """
        if any(size < 0 for size in sizes):
            return False
        blocks = sum(math.ceil(size / self.block_bytes) for size in sizes)
        return sum(sizes) + blocks * (block_file.HEADER_SIZE + ENTRY_OVERHEAD) <= self.max_bytes

    # -- reads ------------------------------------------------------------------------------
    def read(self, storage: Storage, names: Sequence[str], files: Sequence[int] | np.ndarray,
             starts: Sequence[int] | np.ndarray, ends: Sequence[int] | np.ndarray, *,
             check_blocks: bool = True) -> CachedRead:
        """The ranges ``[starts[k], ends[k])`` of files ``names[files[k]]`` of ``storage``:
        from the blocks kept here, the others fetched in one round (and kept).

        Args:
            storage: The remote storage of the files (its checked stamps key the blocks).
            names: The files.
            files: Each range's file (an index into ``names``).
            starts: First byte of each range.
            ends: One past the last byte of each.
            check_blocks: Check a block's payload CRC when it is first mapped in this
                process (for records that carry no CRC of their own).

        Returns:
            The blocks the ranges lie in (:meth:`CachedRead.buffer` concatenates the
            ranges), and which were served from the cache.

        Raises:
            RangeReadError, DataFileNotFoundError, StorageError: As the storage's reads.
        """
        self._own_process()
        begin = np.asarray(starts, dtype=np.int64).reshape(-1)
        end = np.asarray(ends, dtype=np.int64).reshape(-1)
        which = np.asarray(files, dtype=np.int64).reshape(-1)
        owners: dict[str, FileBlocks | None] = {}

        def file_blocks(path: str) -> FileBlocks | None:
            blocks = owners[path] = self._file_blocks(storage, path)
            return blocks

        plan = block_plan.plan(names, which, begin, end, file_blocks)
        found, cached = self._find(plan.blocks, check_blocks)
        missing = [block for block in plan.blocks if block.key not in found]
        runs = block_plan.runs(missing, MAX_RUN_BYTES)
        direct = plan.direct
        fetched = storage.read_ranges(
            [run[0].path for run in runs] + [names[int(which[k])] for k in direct],
            [run[0].start for run in runs] + [int(begin[k]) for k in direct],
            [run[-1].end for run in runs] + [int(end[k]) for k in direct],
        ) if missing or direct else []
        got: list[tuple[bytes, memoryview]] = []
        for run, data in zip(runs, fetched, strict=False):  # each block a view of its run
            whole = memoryview(data)
            got += [(block.key, whole[block.start - run[0].start : block.end - run[0].start])
                    for block in run]
        found.update(got)
        kept = self._keep(got)
        for block in plan.blocks:  # what a whole file's map (resident) can be made of
            if block.key in found and (block.key in kept or block_name(block.key) in cached):
                owner = owners[block.path]
                assert owner is not None  # only blocks of known files are planned
                owner.seen.add(owner.number(block))
        with self._lock:
            self.hits += len(cached)
            self.misses += len(missing)
        views: list[Buffer] = [found[block.key] for block in plan.blocks]
        return CachedRead(plan, views, begin,
                          dict(zip(direct, fetched[len(runs):], strict=True)), cached)

    def _file_blocks(self, storage: Storage, path: str) -> FileBlocks | None:
        """The blocks of ``path`` as the dataset checked it, or ``None`` when its version is
        unknown (read without the cache)."""
        stamp = storage.expected.stamp_of(path)
        if stamp is None or not stamp.fingerprint or stamp.size <= 0:
            return None
        url = storage.url(path)
        with self._lock:
            blocks = self._files.get((url, stamp))
            if blocks is None:
                if len(self._files) >= _MAX_FILES:
                    self._files.clear()
                blocks = self._files[(url, stamp)] = FileBlocks(url, path, stamp,
                                                                self.block_bytes)
        return blocks

    def _find(self, wanted: list[Block],
              check_blocks: bool) -> tuple[dict[bytes, memoryview], list[str]]:
        """The blocks of ``wanted`` this process has mapped or the directory holds (their
        last use registered), and their file names."""
        found: dict[bytes, memoryview] = {}
        touched: list[tuple[str, int]] = []
        if not wanted or not self.usable():
            return found, []
        now = time.time()
        with self._lock:
            for block in wanted:
                view = self._mapped_view(block, check_blocks, now, touched)
                if view is not None:
                    found[block.key] = view
        if touched:
            self.index.note_files(touched)  # a file found without its row is adopted
        return found, [block_name(key) for key in found]

    def _mapped_view(self, block: Block, check_blocks: bool, now: float,
                     touched: list[tuple[str, int]]) -> memoryview | None:
        """One block from this process's maps or the directory (under the lock)."""
        key, length = block.key, block.end - block.start
        entry = self._mapped.get(key)
        if entry is not None and check_blocks and not entry[2]:
            entry = None  # mapped without its CRC checked, for reads that need it: map again
        if entry is None:
            view = block_file.map_block(self.directory, block_name(key), key, length,
                                       check_blocks)
            if view is None:
                return None
            entry = self._mapped[key] = (view, 0.0, check_blocks)
            while len(self._mapped) > MAX_MAPPED_BLOCKS:
                self._mapped.popitem(last=False)  # unmapped when no read holds it any more
        self._mapped.move_to_end(key)
        if entry[1] < now - TOUCH_AFTER:
            touched.append((block_name(key), block_file.HEADER_SIZE + length))
            self._mapped[key] = (entry[0], now, entry[2])
        return entry[0]

    # -- whole files --------------------------------------------------------------------------
    def resident(self, storage: Storage, path: str, check_blocks: bool) -> ResidentFile | None:
        """Every block of ``path`` (the version the dataset checked) mapped in this process,
        when this process has seen each of them kept: the file read as a local one is.

        Mapped once, when the planned reads have found or fetched every block of the file
        (:attr:`FileBlocks.seen`); then a batch costs a dictionary look-up per file, no
        lock, no database (:meth:`note_used` registers the blocks' use once per
        :data:`~ofindex.cache.machine.TOUCH_AFTER` seconds). Files are admitted while the
        process holds fewer than :data:`MAX_RESIDENT_BLOCKS` blocks so mapped.

        Args:
            storage: The remote storage of the file.
            path: The file.
            check_blocks: The blocks' payload CRCs must have been checked (reads whose
                records carry no CRC of their own).

        Returns:
            The file's blocks, or ``None`` (a block not seen yet, or no longer valid on
            disk, or a file whose version is unknown).
        """
        if self._pid != os.getpid():
            self._process_state()
        stamp = storage.expected.stamp_of(path)
        if stamp is None:
            return None
        key = (storage.url(path), stamp)
        found = self._resident.get(key)
        if found is not None and (found.checked or not check_blocks):
            return found
        blocks = self._files.get(key)
        if blocks is None or len(blocks.seen) < blocks.count or not self.usable():
            return None
        with self._lock:
            return self._map_whole(key, blocks, check_blocks)

    def _map_whole(self, key: tuple[str, FileStamp], blocks: FileBlocks,
                   check_blocks: bool) -> ResidentFile | None:
        """Map every block of a file (under the lock), or ``None`` at the first one that is
        not valid on disk (forgotten as seen: the planned reads fetch it again)."""
        count = blocks.count
        old = self._resident.get(key)
        held = self._resident_blocks - (0 if old is None else len(old.views))
        if held + count > MAX_RESIDENT_BLOCKS:
            return None
        views: list[memoryview] = []
        names: list[str] = []
        for number in range(count):
            block = blocks.block(number)
            name = block_name(block.key)
            entry = self._mapped.get(block.key)
            view = entry[0] if entry is not None and (entry[2] or not check_blocks) else (
                block_file.map_block(self.directory, name, block.key, block.end - block.start,
                                    check_blocks))
            if view is None:
                blocks.seen.discard(number)
                return None
            views.append(view)
            names.append(name)
        resident = self._resident[key] = ResidentFile(views, names, blocks.step,
                                                      blocks.stamp.size, check_blocks)
        self._resident_blocks = held + count
        return resident

    def note_used(self, files: Sequence[ResidentFile]) -> None:
        """Register the use of whole files' blocks (for the least-recently-used eviction),
        at most once per :data:`~ofindex.cache.machine.TOUCH_AFTER` seconds per file.

        Args:
            files: The files a batch read.
        """
        self.resident_batches += 1
        now = time.time()
        due = [f for f in files if f.used_at < now - TOUCH_AFTER]
        if not due:
            return
        for resident in due:
            resident.used_at = now
        self.index.note_files([(name, block_file.HEADER_SIZE + len(view)) for f in due
                               for name, view in zip(f.names, f.views, strict=True)])

    def drop_resident(self, files: Sequence[ResidentFile]) -> None:
        """Let go of whole files' maps (a record failed its check in them: the planned reads
        check their blocks again, and fetch what is damaged).

        Args:
            files: The files.
        """
        drop = {id(f) for f in files}
        with self._lock:
            for key in [k for k, f in self._resident.items() if id(f) in drop]:
                self._resident_blocks -= len(self._resident.pop(key).views)
                blocks = self._files.get(key)
                if blocks is not None:
                    blocks.seen.clear()

    # -- writes -----------------------------------------------------------------------------
    def _keep(self, fetched: list[tuple[bytes, memoryview]]) -> set[bytes]:
        """Keep fetched blocks (those the bound can hold), registered before they are
        written so that the bound counts every block on disk; the keys of those written."""
        entries = {block_name(key): (key, data) for key, data in fetched
                   if block_file.HEADER_SIZE + len(data) + ENTRY_OVERHEAD <= self.max_bytes}
        if not entries or not self.usable():
            return set()
        evicted = self.index.note_files(
            [(name, block_file.HEADER_SIZE + len(data)) for name, (_, data) in entries.items()])
        failed: list[str] = []
        kept: set[bytes] = set()
        for name, (key, data) in entries.items():
            if name in evicted:  # the bound cannot hold it after all
                continue
            try:  # renamed into place, not flushed: each block carries its own checks
                write_local_atomic(os.path.join(self.directory, name),
                                   [block_file.header(key, data), data], durable=False,
                                   owned=True)
            except OSError as error:
                failed.append(name)
                self._warn_write(error)
            else:
                kept.add(key)
        if failed:
            self.index.forget(failed)
        return kept

    def _warn_write(self, error: OSError) -> None:
        if self._warned:
            return
        self._warned = True
        warnings.warn(CacheDirWarning(
            f"cache_dir {self.directory!r} cannot keep a block of data ({error.strerror or error});"
            " reading on, fetching again what was not kept (free some space, or pass a smaller "
            "data_cache_bytes=)"), stacklevel=5)

    def forget(self, names: Sequence[str]) -> None:
        """Drop blocks (damaged copies): unmapped here, deleted from the directory, fetched
        again when next asked for.

        Args:
            names: The blocks' file names (as :attr:`CachedRead.cached` gives them).
        """
        self._own_process()
        drop = set(names)
        with self._lock:
            for key in [key for key in self._mapped if block_name(key) in drop]:
                del self._mapped[key]
        self.drop_resident([f for f in self._resident.values() if drop.intersection(f.names)])
        self.index.forget(list(drop))

    def held_bytes(self) -> int:
        """Bytes of blocks the cache holds now.

        Returns:
            The bytes counted for every process's blocks (with their overhead).
        """
        return self.index.held_bytes()

    def close(self) -> None:
        """Let go of this process's maps and database connection (reopened on next use)."""
        self._own_process()
        with self._lock:
            self._mapped.clear()
            self._resident.clear()
            self._resident_blocks = 0
        self.index.close()


def same_cache(caches: Sequence[DataCache | None]) -> DataCache | None:
    """The data cache several datasets share, for a dataset over all their shards.

    Args:
        caches: Each dataset's data cache, or ``None``.

    Returns:
        The first, when all are caches of the same directory, bound and block size; else
        ``None``.
    """
    first = caches[0] if caches else None
    if first is None:
        return None
    for other in caches[1:]:
        if other is None or (other.directory, other.max_bytes, other.block_bytes) != (
                first.directory, first.max_bytes, first.block_bytes):
            return None
    return first

