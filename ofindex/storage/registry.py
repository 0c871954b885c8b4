"""Which backend serves a URL: local paths and ``file://`` go to :class:`LocalStorage`, every
other protocol to :class:`FsspecStorage`."""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidURLError
from .base import Storage
from .failures import missing_extra
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
        InvalidURLError: The protocol is unknown to fsspec (a ``ValueError``).
        MissingDependencyError: The protocol's library is not installed (an ``ImportError``
            naming the ``pip install 'ofindex[...]'`` to run).
    """
    protocol, sep, rest = url.partition("://")
    if not sep:
        return LocalStorage(), os.path.expanduser(url)
    if protocol in _LOCAL_PROTOCOLS:
        return LocalStorage(), rest
    import fsspec

    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        raise missing_extra(protocol, exc) from None
    except ValueError:
        raise InvalidURLError(
            f"{url}: unknown protocol {protocol!r}; use a local path or a URL such as "
            "s3://bucket/key, gs://bucket/key or https://host/path"
        ) from None
    path = cls._strip_protocol(url)
    return FsspecStorage(protocol, storage_options), path
