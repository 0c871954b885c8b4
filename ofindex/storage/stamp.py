"""What identifies one version of a file: its size, a cheap fingerprint, and a digest of its
content that every copy of the file shares (:func:`content_digest`: the CRC32C of its size and
of three small regions of its bytes; :mod:`.identity` for what it is for, docs/format.md for
the specification)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import struct
from collections.abc import Callable, Sequence
from typing import Any

import crc32c as _crc32c

from ..errors import NotAppendedError, StaleIndexError, hint

#: The digest scheme sidecars name (byte 49 of their header): 1 is the one below.
SCHEME = 1
#: Bytes of each region: a page of most file systems, one small ranged read of a bucket.
REGION_BYTES = 4096
#: Files up to this size are digested whole (the three regions would cover them anyway).
WHOLE_UP_TO = 3 * REGION_BYTES


def content_regions(size: int) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of a file of ``size`` bytes that its digest covers.

    Args:
        size: The file's size.

    Returns:
        ``[(0, size)]`` for a file of at most :data:`WHOLE_UP_TO` bytes; else its first
        :data:`REGION_BYTES`, the ones starting at ``(size - REGION_BYTES) // 2``, and its
        last ones, in that order.
    """
    if size <= WHOLE_UP_TO:
        return [(0, size)]
    middle = (size - REGION_BYTES) // 2
    return [(0, REGION_BYTES), (middle, middle + REGION_BYTES), (size - REGION_BYTES, size)]


def content_digest(size: int, parts: Sequence[bytes | bytearray | memoryview]) -> int:
    """The content digest of a file: CRC32C of its size (uint64, little-endian) followed by
    the bytes of its :func:`content_regions`, in order.

    Args:
        size: The file's size.
        parts: The bytes of each region, as :func:`content_regions` lists them.

    Returns:
        The digest (a uint32).
    """
    crc = _crc32c.crc32c(struct.pack("<Q", size))
    for part in parts:
        crc = _crc32c.crc32c(part, crc)
    return crc


#: ``read_ranges(paths, starts, ends)``: a storage's reads of byte ranges.
ReadRanges = Callable[[Sequence[str], Sequence[int], Sequence[int]],
                      Sequence[bytes | bytearray | memoryview]]


def read_digest(read_ranges: ReadRanges, path: str, size: int) -> int:
    """Read the regions of ``path`` (``size`` bytes) with ``read_ranges`` and return its
    content digest.

    Raises:
        RangeReadError: The file is shorter than ``size`` (it changed while read).
    """
    regions = content_regions(size)
    parts = read_ranges([path] * len(regions), [start for start, _ in regions],
                        [end for _, end in regions])
    return content_digest(size, parts)


@dataclasses.dataclass(frozen=True)
class FileStamp:
    """Size and fingerprint of one version of a file.

    Attributes:
        size: File size in bytes.
        fingerprint: ``"<kind>:<value>"`` (``mtime_ns``, ``etag``, ``generation`` …) as the
            storage reports it, or ``""`` when it reports none.
        file_id: Which file this is on its filesystem (``"<device>:<inode>"`` for local
            files), or ``""``. Not stored in sidecars (a copy of a file keeps its index) and
            not part of equality; :meth:`mismatch` compares it when both stamps have one, so a
            file replaced by rename after a dataset was opened is told from the one checked.
        content: The CRC32C digest of sampled regions of the file's content
            (:func:`content_digest`), which sidecars store (not those of ofindex
            0.2), or ``None``: an index that predates it, or a stamp as storage reports it (a
            stat reads no content). Not part of equality (a stat's stamp has none to
            compare).
    """

    size: int
    fingerprint: str = ""
    file_id: str = dataclasses.field(default="", compare=False, repr=False)
    content: int | None = dataclasses.field(default=None, compare=False)

    @property
    def kind(self) -> str:
        """The fingerprint's kind (``"mtime_ns"``, ``"etag"``, ``"generation"`` …), or ``""``."""
        return self.fingerprint.partition(":")[0]

    def judge(self, current: FileStamp) -> tuple[Verdict, str]:
        """Say whether ``current`` is the file version this (indexed) stamp describes, as far
        as the stamps alone tell: the decision every check of a data file against its index
        starts from (:func:`.identity.check_identity` reads the content when it must).

        * another size: :attr:`Verdict.CHANGED`;
        * the same fingerprint (kind and value): :attr:`Verdict.SAME` (the fast path);
        * otherwise, with a content digest: :attr:`Verdict.CONTENT` (a copy, an upload, a
          ``touch``, or a same-size replacement: only the content tells them apart);
        * without one (an index built by ofindex 0.2): a fingerprint of the same
          kind that differs is :attr:`Verdict.CHANGED`, one of another kind (a local index of
          a file since uploaded) :attr:`Verdict.SAME` by size alone, as those releases
          judged.

        Args:
            current: The stamp the file has now (as its storage reports it).

        Returns:
            The verdict, and for :attr:`Verdict.CHANGED` what changed (a phrase).
        """
        if self.size != current.size:
            return Verdict.CHANGED, f"its size changed from {self.size} to {current.size} bytes"
        if self.fingerprint and self.fingerprint == current.fingerprint:
            return Verdict.SAME, ""
        if self.content is not None:
            return Verdict.CONTENT, ""
        kind, _, value = self.fingerprint.partition(":")
        ckind, _, cvalue = current.fingerprint.partition(":")
        if kind and kind == ckind and value != cvalue:
            return Verdict.CHANGED, f"its {kind} changed from {value} to {cvalue}"
        return Verdict.SAME, ""

    def content_differs(self, digest: int) -> str | None:
        """Say why a file whose content digest is ``digest`` is not the one this (indexed)
        stamp describes, or ``None`` when the digests agree.

        Args:
            digest: The file's content digest now (:func:`.identity.read_content_digest`).
        """
        if self.content is None or digest == self.content:
            return None
        return (f"its content differs from what was indexed (the same {self.size} bytes, "
                f"content digest 0x{digest:08x}, indexed 0x{self.content:08x}: another file of "
                "the same size)")

    def mismatch(self, current: FileStamp) -> str | None:
        """Say why ``current`` is not the file version this stamp describes.

        Fingerprints are compared only when both have the same kind: a sidecar built locally
        (``mtime_ns``) stays valid for a copy uploaded to a bucket (``etag``).

        Args:
            current: The stamp the file has now.

        Returns:
            A phrase such as ``"its size changed from 10 to 12 bytes"``, or ``None`` when
            ``current`` is the same version.
        """
        if self.size != current.size:
            return f"its size changed from {self.size} to {current.size} bytes"
        kind, _, value = self.fingerprint.partition(":")
        ckind, _, cvalue = current.fingerprint.partition(":")
        if kind and kind == ckind and value != cvalue:
            return f"its {kind} changed from {value} to {cvalue}"
        if self.file_id and current.file_id and self.file_id != current.file_id:
            return "it was replaced by another file (its inode changed)"
        return None


class Verdict(enum.Enum):
    """What the stamps of a data file say of it against its index (:meth:`FileStamp.judge`)."""

    #: The same version: the fingerprints agree (or, for an old index, the sizes do).
    SAME = "same"
    #: Another version: the size differs (or, for an old index, a fingerprint of one kind).
    CHANGED = "changed"
    #: Same size, and the fingerprints cannot tell: compare the content digest.
    CONTENT = "content"


def stale_index(index_url: str, url: str, why: str) -> StaleIndexError:
    """The error for a data file that is not the one its index describes.

    Args:
        index_url: The sidecar.
        url: The data file.
        why: What changed (:meth:`FileStamp.mismatch`).
    """
    return StaleIndexError(
        f"{index_url}: index is stale for {url}: {why} since it was indexed; rebuild it with "
        + hint(f"ofindex.build_index({url!r}) (or open the dataset with rebuild_stale=True)",
               f"`ofindex build {url}`"))


class ExpectedFiles:
    """The stamps a dataset checked its data files against, kept by the data's storage so
    that every later opening of a file (first read, reopen after ``fork`` or ``close()``, a
    handle evicted and reopened) is checked to be that same file.

    A storage whose reads report the file's stamp (HTTP: each response's ``ETag`` and size)
    is also given the stamp a file's *index* names before the file was checked
    (:meth:`expect_indexed`): the first response then checks it (:meth:`observe`), so the
    check costs no request of its own.

    Picklable (a process started by ``spawn`` checks against the parent's stamps; a check
    still owed to an index is made again by the new process's first batch).
    """

    def __init__(self) -> None:
        self._stamps: dict[str, tuple[int, str, str]] = {}
        #: path -> (the stamp its index gives, the index's URL): checked on the next stamp seen
        self._indexed: dict[str, tuple[FileStamp, str]] = {}
        #: The files may grow (a dataset read as growing: ``ofindex.open(..., growing=True)``,
        #: refreshed or followed): a file longer than expected is the file expected with
        #: records appended (its first bytes are checked where it is indexed again: refresh),
        #: a shorter one or another inode is not.
        self.growing = False

    def __getstate__(self) -> tuple[dict[str, tuple[int, str, str]], bool]:
        return self._stamps, self.growing

    def __setstate__(self, state: tuple[dict[str, tuple[int, str, str]], bool]) -> None:
        self._stamps, self.growing = state
        self._indexed = {}

    def __len__(self) -> int:
        return len(self._stamps)

    def verified(self, path: str, current: FileStamp) -> bool:
        """Whether ``path`` was checked against its index in this dataset (in this process or
        the one it was pickled from) as the very version ``current`` stamps: same size and
        fingerprint, so its content need not be read again."""
        known = self._stamps.get(path)
        return (known is not None and bool(current.fingerprint)
                and (known[0], known[1]) == (current.size, current.fingerprint))

    def stamp_of(self, path: str) -> FileStamp | None:
        """The stamp ``path`` was checked to have (the identity of the version read), or
        ``None`` when it was not checked in this dataset."""
        known = self._stamps.get(path)
        return None if known is None else FileStamp(*known)

    def expect(self, path: str, stamp: FileStamp, url: str) -> None:
        """Remember ``stamp`` as what ``path`` must be from now on.

        Args:
            path: The file.
            stamp: Its stamp, as just checked against its index.
            url: The file as messages name it.

        Raises:
            StaleIndexError: ``path`` was expected to be another file already (it was replaced
                since it was first checked, e.g. in the process that opened the dataset).
        """
        self.check(path, stamp, url)
        self._stamps[path] = (stamp.size, stamp.fingerprint, stamp.file_id)

    def check(self, path: str, current: FileStamp, url: str) -> None:
        """Check that ``path`` (now ``current``) is the file expected, if one is.

        Raises:
            StaleIndexError: It is not (naming the file and what changed).
        """
        known = self._stamps.get(path)
        if known is None:
            return
        expected = FileStamp(*known)
        if self.growing and appended_to(expected, current):
            return
        why = expected.mismatch(current)
        if why and self.growing:
            raise NotAppendedError(
                f"{url}: read as a growing file, but {why}: it was truncated or replaced, not "
                "appended to; the records read so far may not be in it any more: reopen the "
                f"dataset (and index the file again: `ofindex build {url}`)")
        if why:
            raise StaleIndexError(
                f"{url}: {why} since the dataset was opened, so its index no longer describes "
                "it; reopen the dataset (and rebuild the index if the data changed: "
                f"`ofindex build {url}`)"
            )

    def expect_indexed(self, path: str, indexed: FileStamp, index_url: str) -> None:
        """Owe ``path`` a check against the stamp its index gives, made by :meth:`observe`
        when a read first reports the file's stamp (only for storages whose reads do).

        Args:
            path: The data file.
            indexed: The stamp its (checked) index gives.
            index_url: The index, as messages name it.
        """
        self._indexed[path] = (indexed, index_url)

    def watches(self, path: str) -> bool:
        """Whether a stamp seen for ``path`` has anything to be checked against."""
        return path in self._stamps or path in self._indexed

    def owes(self, path: str) -> bool:
        """Whether ``path`` still owes the check against its index (:meth:`expect_indexed`)."""
        return path in self._indexed

    def observe(self, path: str, current: FileStamp, url: str) -> int | None:
        """Check a stamp a read reported for ``path``: against its index the first time (then
        remembered as with :meth:`expect`), and against the stamp expected.

        Args:
            path: The data file.
            current: Its stamp as the read reported it.
            url: The file as messages name it.

        Returns:
            ``None`` when settled; else the content digest its index gives, when the stamps
            cannot tell (:attr:`Verdict.CONTENT`): the caller reads the file's digest and
            calls :meth:`observe_content` before handing out any of its bytes.

        Raises:
            StaleIndexError: It is not the file its index describes, or not the one expected.
        """
        owed = self._indexed.get(path)
        if owed is None:
            self.check(path, current, url)
            return None
        indexed, index_url = owed
        verdict, why = indexed.judge(current)
        if verdict is Verdict.CHANGED:
            raise stale_index(index_url, url, why)
        if verdict is Verdict.CONTENT and not self.verified(path, current):
            return indexed.content
        self._settle(path, current, url)
        return None

    def observe_content(self, path: str, current: FileStamp, url: str, digest: int) -> None:
        """Finish the check :meth:`observe` left to the content: ``digest`` is the file's.

        Raises:
            StaleIndexError: Its content is not what its index describes.
        """
        owed = self._indexed.get(path)
        if owed is None:
            self.check(path, current, url)
            return
        indexed, index_url = owed
        why = indexed.content_differs(digest)
        if why:
            raise stale_index(index_url, url, why)
        self._settle(path, current, url)

    def _settle(self, path: str, current: FileStamp, url: str) -> None:
        self.expect(path, current, url)
        self._indexed.pop(path, None)


def appended_to(before: FileStamp, current: FileStamp) -> bool:
    """Whether ``current`` may be ``before`` with bytes appended, as far as stamps tell: not
    shorter, and (where both name one) the same file on its filesystem (an append keeps the
    inode; a file replaced by rename has another). Its first bytes are not compared here.

    Args:
        before: The file's stamp as last checked.
        current: Its stamp now.
    """
    if current.size < before.size:
        return False
    return not (before.file_id and current.file_id and before.file_id != current.file_id)


#: Longer version identifiers are stored as their SHA-256 (sidecar headers have a fixed size).
MAX_FINGERPRINT_VALUE = 256


def fingerprint_from_info(info: dict[str, Any]) -> str:
    """The cheapest version identifier a backend reports: generation, ETag, or mtime."""
    for key, kind in (("generation", "generation"), ("ETag", "etag"), ("etag", "etag"),
                      ("mtime", "mtime"), ("LastModified", "mtime"), ("updated", "mtime"),
                      ("Last-Modified", "mtime"), ("created", "created")):
        value = info.get(key)
        if value not in (None, ""):
            text = str(value).strip(chr(34))
            if len(text.encode("utf-8")) > MAX_FINGERPRINT_VALUE:  # fits a sidecar header
                text = "sha256=" + hashlib.sha256(text.encode("utf-8")).hexdigest()
            return f"{kind}:{text}"
    return ""


class ExpectedUnion(ExpectedFiles):
    """The expected files of several storages seen as one (:func:`.union.joined_storage`):
    a file is checked against the stamp whichever part holds, and the parts stay the
    sources' own objects, so a stamp a source learns later (a shard loaded lazily) is checked
    here too. Picklable with its parts (pickled together with their storages, they stay
    shared in the new process).

    Args:
        parts: The expected files of each storage joined.
    """

    def __init__(self, parts: list[ExpectedFiles]) -> None:
        super().__init__()
        self.parts = list(parts)

    def __reduce__(self) -> tuple[type[ExpectedUnion], tuple[list[ExpectedFiles]]]:
        return ExpectedUnion, (self.parts,)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def expect_indexed(self, path: str, indexed: FileStamp, index_url: str) -> None:
        """Owe the check in the first part (see :meth:`ExpectedFiles.expect_indexed`)."""
        self.parts[0].expect_indexed(path, indexed, index_url)

    def watches(self, path: str) -> bool:
        """Whether a part has anything to check ``path`` against."""
        return any(part.watches(path) for part in self.parts)

    def owes(self, path: str) -> bool:
        """Whether a part still owes ``path`` the check against its index."""
        return any(part.owes(path) for part in self.parts)

    def observe(self, path: str, current: FileStamp, url: str) -> int | None:
        """Let every part check a stamp a read reported (see :meth:`ExpectedFiles.observe`).

        Returns:
            The content digest a part's index gives when the stamps cannot tell, else
            ``None``.

        Raises:
            StaleIndexError: A part's index or expected stamp does not describe the file.
        """
        owed = None
        for part in self.parts:
            digest = part.observe(path, current, url)
            owed = digest if digest is not None else owed
        return owed

    def observe_content(self, path: str, current: FileStamp, url: str, digest: int) -> None:
        """Let every part finish the check by content (see
        :meth:`ExpectedFiles.observe_content`).

        Raises:
            StaleIndexError: A part's index does not describe the file's content.
        """
        for part in self.parts:
            part.observe_content(path, current, url, digest)

    def verified(self, path: str, current: FileStamp) -> bool:
        """Whether a part checked ``path`` as the version ``current`` stamps."""
        return any(part.verified(path, current) for part in self.parts)

    def expect(self, path: str, stamp: FileStamp, url: str) -> None:
        """Check ``stamp`` against every part, then remember it in the first (see
        :meth:`ExpectedFiles.expect`).

        Raises:
            StaleIndexError: A part expects ``path`` to be another file.
        """
        self.check(path, stamp, url)
        self.parts[0].expect(path, stamp, url)

    def stamp_of(self, path: str) -> FileStamp | None:
        """The stamp a part checked ``path`` to have, or ``None``."""
        for part in self.parts:
            stamp = part.stamp_of(path)
            if stamp is not None:
                return stamp
        return None

    def check(self, path: str, current: FileStamp, url: str) -> None:
        """Check ``path`` against the stamp of every part that has one.

        Raises:
            StaleIndexError: It is not the file a part expects.
        """
        for part in self.parts:
            part.check(path, current, url)
