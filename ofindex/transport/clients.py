"""The fsspec filesystem of a protocol, made for :class:`~ofindex.storage.remote.FsspecStorage`:
its connection pool sized for our concurrency, and the client library's own retry loop
turned off, so that one policy (:mod:`.retry`: ``retries=`` / ``timeout=``) governs every
storage and the waits of two loops never multiply (gcsfs alone waits about 30 s before
reporting a host name that does not resolve; botocore up to 5 attempts per request).
"""

from __future__ import annotations

import os
import threading
import types
from typing import Any

from .failures import missing_extra

S3_PROTOCOLS = ("s3", "s3a")
GCS_PROTOCOLS = ("gs", "gcs")


def s3_options(options: dict[str, Any], max_concurrency: int) -> dict[str, Any]:
    """``options`` for s3fs with a pool of ``max_concurrency`` connections (botocore's holds
    10) and botocore's retries off (one attempt), unless the caller set them."""
    out = dict(options)
    config = dict(out.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", max_concurrency)
    config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
    out["config_kwargs"] = config
    return out


def _without_own_retries(fs: Any) -> None:
    """Turn off the retry loops of s3fs and gcsfs on ``fs`` (an instance: other users of the
    library keep theirs). A library whose internals differ keeps its loop."""
    if type(fs).__module__.startswith("s3fs") and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1  # s3fs's loop around every call: one attempt
    request = getattr(type(fs), "_request", None)
    inner = getattr(request, "__wrapped__", None)
    if type(fs).__module__.startswith("gcsfs") and callable(inner):
        # gcsfs wraps _request in retry_request (6 attempts, fixed when the class is made)
        fs._request = types.MethodType(inner, fs)


#: This process's filesystems, by protocol, options and pool size: one client per filesystem
#: per process, shared by every storage (and dataset) that reads it.
_CLIENTS: dict[tuple[str, str, int], Any] = {}
_CLIENTS_PID = [os.getpid()]
_CLIENTS_LOCK = threading.Lock()


def shared_filesystem(protocol: str, options: dict[str, Any], max_concurrency: int) -> Any:
    """This process's fsspec filesystem of ``protocol`` with ``options`` (made on first use:
    see :func:`make_filesystem`). A forked child makes its own: an async filesystem's event
    loop and sessions must not cross a ``fork``.

    Args:
        protocol: The fsspec protocol.
        options: Its storage options.
        max_concurrency: Requests we run at once (the connection pool's size for S3).

    Raises:
        MissingDependencyError: The protocol's library is not installed.
    """
    from fsspec.utils import tokenize

    key = (protocol, tokenize(options), max_concurrency)
    with _CLIENTS_LOCK:
        if _CLIENTS_PID[0] != os.getpid():  # the parent's: never used (nor finalized) here
            ORPHANS.extend(_CLIENTS.values())
            _CLIENTS.clear()
            _CLIENTS_PID[0] = os.getpid()
        fs = _CLIENTS.get(key)
        if fs is None:
            fs = _CLIENTS[key] = make_filesystem(protocol, options, max_concurrency)
        return fs


#: Filesystems of parent processes, kept alive after a fork so that their finalizers never
#: run in the child (they would try to close sessions on the parent's dead event loop).
ORPHANS: list[Any] = []


def make_filesystem(protocol: str, options: dict[str, Any], max_concurrency: int) -> Any:
    """A new fsspec filesystem of ``protocol`` (not fsspec's cached instance: its pool is
    sized and its retries turned off here).

    Args:
        protocol: The fsspec protocol.
        options: Its storage options.
        max_concurrency: Requests we run at once (the connection pool's size for S3).

    Raises:
        MissingDependencyError: The protocol's library is not installed.
    """
    if protocol in GCS_PROTOCOLS:
        # gcsfs >= 2026 otherwise probes gRPC for 40-60 s per call (no effect once gcsfs is
        # imported; an explicit user setting wins)
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import fsspec

    if protocol in S3_PROTOCOLS:
        options = s3_options(options, max_concurrency)
    if protocol in (*S3_PROTOCOLS, *GCS_PROTOCOLS, "http", "https"):
        # no listings cache: the client is shared by every open in this process, and a
        # listing cached by one (a build's) would give a later open the ETag a file had
        # then, hiding a rewrite from the staleness check (an explicit setting wins)
        options = {"use_listings_cache": False, **options}
    try:
        fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    except ImportError as exc:
        raise missing_extra(protocol, exc) from None
    _without_own_retries(fs)
    return fs
