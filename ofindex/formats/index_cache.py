"""The per-user index cache: where the index of local files goes when no place next to their
directory is right (see :func:`ofindex.formats.placement.new_index_layout`).

It lives in ``$XDG_CACHE_HOME/ofindex/indexes/`` (``~/.cache/ofindex/indexes/`` without
it; ``$OFINDEX_INDEX_CACHE`` names another place), one directory per data directory, named by
the data directory's canonical absolute path (``os.path.realpath``) percent-encoded, so that
the name says whose indexes it holds::

    ~/.cache/ofindex/indexes/%2Fhome%2Falice/train.tfrecord.ofidx

A path whose encoding is longer than :data:`NAME_LIMIT` gets ``long-<sha256>`` instead. An
entry whose data directory no longer exists is removed the next time an index is placed here
(at most once every :data:`PRUNE_SECONDS`): nothing here outlives what it indexes for long.
Only files ofindex names are removed (sidecars, manifests, temporary files).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from urllib.parse import quote_from_bytes, unquote_to_bytes

from .sidecar import SUFFIX

#: The environment variable that puts the cache elsewhere (an absolute path).
ENV = "OFINDEX_INDEX_CACHE"
#: Longest encoded entry name (file names may have 255 bytes).
NAME_LIMIT = 200
#: Entries of removed directories are looked for at most this often (once an hour: a scan
#: reads one name per entry, so even thousands of entries cost milliseconds).
PRUNE_SECONDS = 3600
_LONG = "long-"
_PRUNED = ".pruned"
#: Names of the files ofindex makes in an entry (the only ones a prune removes): sidecars,
#: column sidecars and key indexes, temporary files, and the manifests
#: (``ofindex-manifest.json`` and ``.bin``).
_OUR_SUFFIXES = (SUFFIX, ".ofcol", ".ofkey", ".tmp")
_OUR_PREFIX = "ofindex-manifest."


def cache_root() -> str:
    """The cache's directory: ``$OFINDEX_INDEX_CACHE`` when set to an absolute path, else
    ``$XDG_CACHE_HOME/ofindex/indexes`` (an absolute ``XDG_CACHE_HOME``), else
    ``~/.cache/ofindex/indexes``."""
    chosen = os.environ.get(ENV, "")
    if os.path.isabs(chosen):
        return chosen
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ofindex", "indexes")


def cached_index_dir(data_dir: str) -> str:
    """The cache's directory for the index files of the files of ``data_dir``.

    Args:
        data_dir: A local directory (relative to the working directory, or ``""`` for it).

    Returns:
        The entry's path (it may not exist yet).
    """
    canonical = os.fsencode(os.path.realpath(data_dir or "."))
    name = quote_from_bytes(canonical, safe="")
    if len(name) > NAME_LIMIT:
        name = _LONG + hashlib.sha256(canonical).hexdigest()
    return os.path.join(cache_root(), name)


def _source(entry: str) -> str | None:
    """The data directory an entry's name encodes (``None`` for a ``long-`` name)."""
    if entry.startswith((_LONG, ".")):
        return None
    return os.fsdecode(unquote_to_bytes(entry))


def prune(root: str | None = None, *, now: float | None = None) -> list[str]:
    """Remove the entries whose data directory no longer exists, unless that was done less
    than :data:`PRUNE_SECONDS` ago. Best effort: what cannot be removed stays.

    Args:
        root: The cache's directory (default :func:`cache_root`).
        now: The time (default: the clock's).

    Returns:
        The data directories whose entries were removed.
    """
    root = cache_root() if root is None else root
    now = time.time() if now is None else now
    stamp = os.path.join(root, _PRUNED)
    try:
        if now - os.stat(stamp).st_mtime < PRUNE_SECONDS:
            return []
    except FileNotFoundError:
        if not os.path.isdir(root):  # no cache yet: nothing to drop, and nothing is made
            return []
    except OSError:
        return []
    removed = []
    with contextlib.suppress(OSError):
        with open(stamp, "wb"):
            pass
        for entry in os.listdir(root):
            source = _source(entry)
            if source is None or os.path.isdir(source):
                continue
            if _remove_entry(os.path.join(root, entry)):
                removed.append(source)
    return removed


def _remove_entry(entry: str) -> bool:
    """Remove ofindex's files of an entry, then the entry if that left it empty."""
    with contextlib.suppress(OSError):
        for name in os.listdir(entry):
            if name.endswith(_OUR_SUFFIXES) or name.startswith(_OUR_PREFIX):
                os.unlink(os.path.join(entry, name))
        os.rmdir(entry)
        return True
    return False


def usable() -> bool:
    """Whether this process may write index files into the cache (it, or the nearest
    directory above it that exists, is a writable directory)."""
    return may_create(cache_root())


def may_create(path: str) -> bool:
    """Whether this process may write into the directory ``path``, or create it: ``path``,
    else the nearest existing directory above it, is a directory it may write to."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    # as this process writes: its effective ids and capabilities, where the system says
    effective = os.access in os.supports_effective_ids
    return os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK,
                                              effective_ids=effective)
