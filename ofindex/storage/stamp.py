"""What identifies one version of a file: its size and a cheap fingerprint."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from ..errors import StaleIndexError


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
    """

    size: int
    fingerprint: str = ""
    file_id: str = dataclasses.field(default="", compare=False, repr=False)

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


class ExpectedFiles:
    """The stamps a dataset checked its data files against, kept by the data's storage so
    that every later opening of a file (first read, reopen after ``fork`` or ``close()``, a
    handle evicted and reopened) is checked to be that same file.

    Picklable (a process started by ``spawn`` checks against the parent's stamps).
    """

    def __init__(self) -> None:
        self._stamps: dict[str, tuple[int, str, str]] = {}

    def __getstate__(self) -> dict[str, tuple[int, str, str]]:
        return self._stamps

    def __setstate__(self, state: dict[str, tuple[int, str, str]]) -> None:
        self._stamps = state

    def __len__(self) -> int:
        return len(self._stamps)

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
        why = FileStamp(*known).mismatch(current)
        if why:
            raise StaleIndexError(
                f"{url}: {why} since the dataset was opened, so its index no longer describes "
                "it; reopen the dataset (and rebuild the index if the data changed: "
                f"`ofindex build {url}`)"
            )


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
