"""Which backend serves a URL: local paths and ``file://`` go to :class:`LocalStorage`, every
other protocol to :class:`FsspecStorage`."""

from __future__ import annotations

import os
from typing import Any

from .base import Storage
from .local import LocalStorage
from .remote import FsspecStorage

_LOCAL_PROTOCOLS = {"", "file", "local"}


def is_local_url(url: str) -> bool:
    """Tell whether ``url`` is a local path (no protocol, ``file://`` or ``local://``)."""
    protocol, sep, _ = url.partition("://")
    return not sep or protocol in _LOCAL_PROTOCOLS


def storage_for(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Storage, str]:
    """Find the backend for ``url`` and the path that backend uses for it.

    Args:
        url: A local path or a URL of any fsspec protocol (``s3://``, ``gs://``, ``https://`` …).
        storage_options: Options for the fsspec filesystem (ignored for local paths).

    Returns:
        ``(storage, path)``.

    Raises:
        ValueError: The protocol is unknown to fsspec.
        ImportError: The protocol's library is not installed (see :func:`missing_extra`).
    """
    protocol, sep, rest = url.partition("://")
    if not sep:
        return LocalStorage(), os.path.expanduser(url)
    if protocol in _LOCAL_PROTOCOLS:
        return LocalStorage(), rest
    import fsspec

    cls = fsspec.get_filesystem_class(protocol)
    path = cls._strip_protocol(url)
    return FsspecStorage(protocol, storage_options), path
