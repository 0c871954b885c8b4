"""What a dataset writer killed outright (``kill -9``, a power cut) leaves behind, found and
described: its shards and their sidecars under hidden names (:func:`hidden_name`), which
nothing reads and nothing removes, since no process can tell that the writer that made them is
gone (the names carry no owner; a writer may still be running).

``ofindex info`` and a rerun of ``ofindex convert`` into the directory say what is there, how
big it is, and the command that removes it; they delete nothing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex

from ofindex.formats.location import sidecar_location
from ofindex.storage import Storages

#: The hidden names a writer gives its shards while it writes (``.<token>-<stream>-<n>``),
#: and whatever is made from them (``.writing.ofidx`` sidecars, ``.<pid>.tmp`` files).
_HIDDEN = re.compile(r"^\.(?P<token>[0-9a-f]{8})-[0-9]+-[0-9]{5}\.writing(\..*)?$")


def hidden_name(token: str, stream: int, shard: int) -> str:
    """The hidden name of a shard being written: writer ``token``, ``stream``, ``shard``."""
    return f".{token}-{stream}-{shard:05d}.writing"


@dataclasses.dataclass(frozen=True)
class Leftovers:
    """The hidden files of unfinished writers in a directory and its index directory.

    Attributes:
        directory: The dataset's directory, as named.
        places: ``{directory: [file names]}`` of the directories holding them.
        tokens: The writers' tokens (the part of the names that tells writers apart).
        bytes: Their total size.
    """

    directory: str
    places: dict[str, list[str]]
    tokens: tuple[str, ...]
    bytes: int

    @property
    def count(self) -> int:
        """How many files."""
        return sum(len(names) for names in self.places.values())

    def describe(self) -> str:
        """One line: what was left, that nothing reads it, and the command that removes it."""
        first = next(iter(self.places.values()))[0]
        writers = "a writer" if len(self.tokens) == 1 else f"{len(self.tokens)} writers"
        remove = " ".join(f"{shlex.quote(place.rstrip(os.sep) + os.sep)}.{token}-*.writing*"
                          for place in self.places for token in self.tokens)
        return (f"{self.directory} holds {self.count} hidden file(s), {self.bytes / 1e6:,.1f} "
                f"MB, left by {writers} that did not finish (killed while writing: {first} "
                f"…); nothing reads them. Once no conversion or writer is running into "
                f"{self.directory}, remove them: rm -f {remove}")


def find_leftovers(directory: str, index_dir: str | None = None) -> Leftovers | None:
    """The hidden files of unfinished writers in a local ``directory`` and where its sidecars
    go (``DIR.ofindex/`` or ``index_dir``).

    Args:
        directory: A dataset's directory (a URL or anything but a local directory: ``None``).
        index_dir: Where its sidecars go, when not the default place.

    Returns:
        What was found, or ``None`` when nothing was.
    """
    if "://" in directory or not os.path.isdir(directory):
        return None
    storages = Storages({})
    storage, path = storages.for_url(os.path.abspath(directory))
    try:
        _, sidecar = sidecar_location(storage, os.path.join(path, "x"), index_dir, storages)
    except (OSError, ValueError):
        sidecar = None
    places: dict[str, list[str]] = {}
    tokens: set[str] = set()
    size = 0
    seen = set()
    for place in (directory, None if sidecar is None else os.path.dirname(sidecar)):
        if place is None or os.path.realpath(place) in seen or not os.path.isdir(place):
            continue
        seen.add(os.path.realpath(place))
        try:
            with os.scandir(place) as listing:
                for entry in listing:
                    found = _HIDDEN.match(entry.name)
                    if found is None or not entry.is_file(follow_symlinks=False):
                        continue
                    places.setdefault(place, []).append(entry.name)
                    tokens.add(found["token"])
                    size += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    if not places:
        return None
    return Leftovers(directory, {p: sorted(names) for p, names in places.items()},
                     tuple(sorted(tokens)), size)
