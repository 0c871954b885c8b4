"""Which backend serves a URL, made once per call that reads or writes.

Local paths and ``file://`` go to :class:`LocalStorage` (:class:`MappedLocalStorage` when memory
maps are asked for), every other protocol to :class:`FsspecStorage`. A :class:`Storages` is made
by each ``ofindex.open`` or build with that call's settings (storage options, memory maps,
concurrency, retry policy) and hands out one storage per protocol: the manifest reader, the
directory listing, the sidecars' place, the builder and the dataset all use the same object,
configured once when it is made.
"""

from __future__ import annotations

import os
from typing import Any

from ..transport.clients import strip_protocol
from ..transport.policy import current_policy
from .base import Storage
from .fsspec_storage import FsspecStorage
from .local import LocalStorage
from .mapped import MappedLocalStorage

_LOCAL_PROTOCOLS = {"", "file", "local"}


def is_local_url(url: str) -> bool:
    """Tell whether ``url`` is a local path (no protocol, ``file://`` or ``local://``)."""
    protocol, sep, _ = url.partition("://")
    return not sep or protocol in _LOCAL_PROTOCOLS


class Storages:
    """The storages of one call: one per protocol, made on first use with the call's settings.

    Args:
        storage_options: Options for the fsspec filesystems (ignored for local paths).
        mmap: Local files are read through memory maps.
        max_concurrency: Remote requests in flight at once for one batch (default 64).
        max_inflight_bytes: Bound on remote response bytes held before they are copied out
            (default 128 MiB).
        retries: Retries of a remote request after its first attempt (default: those of the
            policy in force, see :func:`ofindex.transport.policy.retry_settings`).
        timeout: Seconds after which a remote request is given up (likewise).

    Raises:
        ValueError: ``retries`` is negative or ``timeout`` not positive.
    """

    def __init__(self, storage_options: dict[str, Any] | None = None, *, mmap: bool = False,
                 max_concurrency: int | None = None, max_inflight_bytes: int | None = None,
                 retries: int | None = None, timeout: float | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        self.mmap = mmap
        self.max_concurrency = 64 if max_concurrency is None else max(1, int(max_concurrency))
        self.max_inflight_bytes = (128 << 20 if max_inflight_bytes is None
                                   else max(1, int(max_inflight_bytes)))
        self.policy = current_policy().with_settings(retries, timeout)
        self._made: dict[str, Storage] = {}

    def __repr__(self) -> str:
        return f"Storages({sorted(self._made)})"

    def for_url(self, url: str) -> tuple[Storage, str]:
        """The storage serving ``url`` and the path that storage uses for it.

        Args:
            url: A local path or a URL of any fsspec protocol (``s3://``, ``gs://``,
                ``https://`` …).

        Returns:
            ``(storage, path)``; the same storage object for every URL of one protocol.

        Raises:
            InvalidURLError: The protocol is unknown to fsspec (a ``ValueError``).
            MissingDependencyError: The protocol's library is not installed (an
                ``ImportError`` naming the ``pip install 'ofindex[...]'`` to run).
        """
        protocol, sep, rest = url.partition("://")
        if not sep or protocol in _LOCAL_PROTOCOLS:
            path = os.path.expanduser(url) if not sep else rest
            return self._local(), path
        path = strip_protocol(url, protocol, self.storage_options)
        storage = self._made.get(protocol)
        if storage is None:
            storage = self._made[protocol] = FsspecStorage(
                protocol, self.storage_options, max_concurrency=self.max_concurrency,
                max_inflight_bytes=self.max_inflight_bytes, policy=self.policy)
        return storage, path

    def _local(self) -> Storage:
        storage = self._made.get("")
        if storage is None:
            storage = self._made[""] = MappedLocalStorage() if self.mmap else LocalStorage()
        return storage


def storage_for(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, str]:
    """Find the backend for one ``url`` on its own (see :meth:`Storages.for_url`; calls that
    touch several files make one :class:`Storages` instead).

    Args:
        url: A local path or a URL of any fsspec protocol.
        storage_options: Options for the fsspec filesystem (ignored for local paths).

    Returns:
        ``(storage, path)``.

    Raises:
        InvalidURLError: The protocol is unknown to fsspec (a ``ValueError``).
        MissingDependencyError: The protocol's library is not installed.
    """
    return Storages(storage_options).for_url(url)
