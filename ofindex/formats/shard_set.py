"""Whether the files found for a dataset are all of it.

Two signs say that shards are missing, and :func:`check_shard_set` looks for both wherever a
dataset is opened or built from a directory or a glob, and for the first in a JSON manifest's
names (:func:`ofindex.formats.location.resolve`; ofindex writes no manifest for a set that
lacks shards, so a compact manifest, which no earlier version wrote, is not checked):

- names that say how many shards there are (``part-00003-of-00010``,
  ``train.tfrecord-3-of-10``): every number of such a family must be there (0 to N-1, or 1 to
  N for sets numbered from 1);
- the claim a :class:`~ofindex.write.ShardedWriter` holds on its directory while it publishes
  (:data:`PUBLISHING`, removed once the manifest is written): a directory that still holds
  it is a publication that did not finish, or one under way.

Either refuses the set (:class:`~ofindex.errors.IncompleteDatasetError`) unless the caller
accepts it (``allow_missing_shards=True``), which then warns (:class:`MissingShardsWarning`).
Files named one by one are the caller's choice and are not checked: one shard of a larger set
opens on its own.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Iterable, Sequence

from ..errors import IncompleteDatasetError, MissingShardsWarning, hint
from ..storage import Storage

#: The claim file a writer creates (exclusively) in its destination before it renames any
#: shard, and removes once the manifest is written.
PUBLISHING = ".ofindex-publishing"
#: ``<head><shard>-of-<count><tail>``: the head is the shortest that lets the rest match.
_OF_N = re.compile(r"(?P<head>.*?)(?P<shard>\d+)-of-(?P<count>\d+)(?P<tail>.*)", re.DOTALL)
#: Bytes of a claim read to say who holds it (a claim is about 100).
_CLAIM_BYTES = 4096
#: Missing shard numbers a message names (the count says how many there are in all).
_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class Gap:
    """A family of shard names (same head and count) that lacks members.

    Attributes:
        example: One name of the family, as found.
        count: The number of shards the names declare.
        present: How many of them are there.
        missing: The names of the first few missing ones.
    """

    example: str
    count: int
    present: int
    missing: tuple[str, ...]

    def describe(self) -> str:
        """One phrase for a message: how many are missing, and which."""
        more = self.count - self.present - len(self.missing)
        shown = ", ".join(self.missing) + (f" and {more:,} more" if more > 0 else "")
        return (f"{self.count - self.present:,} of the {self.count:,} shards that names like "
                f"{self.example} declare are missing ({shown})")


@dataclasses.dataclass
class _Family:
    """The ``-of-N`` names of one head and count seen so far."""

    example: str
    head: str
    count: str
    tail: str
    width: int
    numbers: set[int] = dataclasses.field(default_factory=set)

    def take(self, name: str) -> bool:
        """Add ``name`` if it is ``<head><width digits>-of-<count>`` and more, without a
        regular expression (a million names of one family take a fraction of a second)."""
        start, stop = len(self.head), len(self.head) + self.width
        rest = stop + 4 + len(self.count)
        if not (name.startswith(self.head) and name.startswith(self.count, stop + 4)
                and name[stop:stop + 4] == "-of-" and name[start:stop].isdigit()
                and not name[rest:rest + 1].isdigit()):
            return False
        self.numbers.add(int(name[start:stop]))
        return True

    def gap(self) -> Gap | None:
        """What the family lacks, or ``None`` when it is whole."""
        count, numbers = int(self.count), self.numbers
        first = 1 if 0 not in numbers and count in numbers else 0  # numbered 1..N
        present = sum(1 for k in numbers if first <= k < first + count)
        if count == 0 or present == count:
            return None
        missing: list[str] = []
        k = first
        while len(missing) < _SHOWN and k < first + count:  # ends after _SHOWN gaps
            if k not in numbers:
                missing.append(f"{self.head}{k:0{self.width}d}-of-{self.count}{self.tail}")
            k += 1
        return Gap(self.example, count, present, tuple(missing))


def shard_gaps(names: Iterable[str]) -> list[Gap]:
    """The families of ``-of-N`` names among ``names`` (base names) that lack members.

    A family is a head and a count: the tails may differ (``.gz`` on some shards).

    Args:
        names: File names (no directory).

    Returns:
        One :class:`Gap` per incomplete family, in the order their first name came.
    """
    families: dict[tuple[str, str], _Family] = {}
    last: _Family | None = None
    for name in names:
        if "-of-" not in name or (last is not None and last.take(name)):
            continue
        match = _OF_N.fullmatch(name)
        if match is None:
            continue
        key = (match["head"], match["count"])
        last = families.get(key)
        if last is None:
            last = families[key] = _Family(name, match["head"], match["count"], match["tail"],
                                           len(match["shard"]))
        last.numbers.add(int(match["shard"]))
    return [gap for gap in (f.gap() for f in families.values()) if gap is not None]


def unfinished(storage: Storage, directories: Sequence[str]) -> list[tuple[str, str]]:
    """The publication claims (:data:`PUBLISHING`) left in ``directories``, in one round of
    requests.

    Returns:
        ``(claim URL, who holds it)`` for each directory that has one.
    """
    paths = [storage.join(d, PUBLISHING) for d in directories]
    if not paths:
        return []
    _, stamps = storage.fetch_many([], paths)
    claims = []
    for path, stamp in zip(paths, stamps, strict=True):
        if isinstance(stamp, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
            continue
        if isinstance(stamp, BaseException):
            raise stamp
        claims.append((storage.url(path), holder_of(storage, path, stamp.size)))
    return claims


def holder_of(storage: Storage, path: str, size: int) -> str:
    """Who wrote the claim at ``path`` (of ``size`` bytes), in words (``pid 12 on host h at
    2025-01-01T00:00:00``); ``an unknown writer`` when it says nothing readable. Only the
    claim's head is read (a claim is a line of JSON), whatever its size."""
    try:
        info = json.loads(storage.read(path, 0, min(size, _CLAIM_BYTES)) if size else b"")
        return f"pid {int(info['pid'])} on {info['host']} at {info['time']}"
    except (ValueError, KeyError, TypeError):
        return "an unknown writer"


def check_shard_set(storage: Storage, names: Iterable[str], directories: Sequence[str], *,
                    allow: bool, what: str) -> bool:
    """Refuse (or, allowed, warn about) a set of shards that is not whole.

    Args:
        storage: Storage of the files.
        names: The base names of the files found by a listing, a glob or a manifest.
        directories: The directories they came from, whose publication claim is looked for
            (none for a manifest: it is written after every shard is in place).
        allow: Accept a set that lacks shards (``allow_missing_shards=True``), with a
            :class:`MissingShardsWarning`.
        what: The dataset as the user named it, for the message.

    Returns:
        Whether the set is whole (``False``: shards are missing, and ``allow`` accepted it).

    Raises:
        IncompleteDatasetError: Shards are missing and ``allow`` is false.
    """
    problems = [f"{url} is still there: the publication of a writer ({holder}) did not finish, "
                "or is under way, so shards may be missing"
                for url, holder in unfinished(storage, directories)]
    problems += [gap.describe() for gap in shard_gaps(names)]
    if not problems:
        return True
    found = "; ".join(problems)
    if allow:
        warnings.warn(f"{what}: {found}; taken as it is (allow_missing_shards=True), and no "
                      "manifest is written for it", MissingShardsWarning, stacklevel=4)
        return False
    raise IncompleteDatasetError(
        f"{what}: {found}. This is not a whole dataset: if it is the output of a writer that "
        "did not finish, remove it (the directory and its index directory) and run the writer "
        "again; if it is a copy, copy the missing shards too; to read only the shards that are "
        f"there, pass {hint('allow_missing_shards=True', '--allow-missing-shards')}")
