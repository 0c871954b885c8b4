"""This process's clients: the fsspec filesystem of each protocol and options, and the HTTP
client (:mod:`.http`) of each set of options, made on first use in each process and shared by
every storage (and dataset) that reads through them. A forked child makes its own: an async
client's event loop and sessions must not cross a ``fork``.

Only the libraries' public API is used (a test greps for private names). Their own retry
loops are turned off where a public option allows, so that one policy (:mod:`.policy`:
``retries=`` / ``timeout=``) governs every request and the waits of two loops never multiply:
botocore's by its ``retries`` config (one attempt), s3fs's by its public ``retries``
attribute. gcsfs's cannot be (6 attempts, about 30 s of waits before it reports even a host
name that does not resolve, fixed by a decorator when its class is made): instead a client
middleware on its session (``session_kwargs``, aiohttp 3.12+) hands every failure of a request
to our policy as an error gcsfs's loop does not catch (:class:`.failures.RequestFailure`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ..errors import InvalidURLError
from .failures import RequestFailure, missing_extra
from .http import HttpClient

T = TypeVar("T")

S3_PROTOCOLS = ("s3", "s3a")
GCS_PROTOCOLS = ("gs", "gcs")
#: The fsspec protocols served by HTTP servers (ranged reads through :class:`.HttpClient`).
HTTP_PROTOCOLS = frozenset({"http", "https"})

#: This process's clients, by kind, protocol, options and pool size.
_CLIENTS: dict[tuple[str, str, int], Any] = {}
_CLIENTS_PID = [os.getpid()]
_CLIENTS_LOCK = threading.Lock()
#: Clients of parent processes, kept alive after a fork so that their finalizers never run in
#: the child (they would try to close sessions on the parent's dead event loop).
ORPHANS: list[Any] = []


def _shared(kind: str, options: dict[str, Any], size: int, make: Callable[[], T]) -> T:
    """This process's client of ``kind`` for ``options`` and ``size`` (``make()`` on first
    use)."""
    from fsspec.utils import tokenize

    key = (kind, tokenize(options), size)
    with _CLIENTS_LOCK:
        if _CLIENTS_PID[0] != os.getpid():  # the parent's: never used (nor finalized) here
            ORPHANS.extend(_CLIENTS.values())
            _CLIENTS.clear()
            _CLIENTS_PID[0] = os.getpid()
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = make()
        return client


def shared_filesystem(protocol: str, options: dict[str, Any], max_concurrency: int) -> Any:
    """This process's fsspec filesystem of ``protocol`` with ``options`` (made on first use:
    see :func:`make_filesystem`).

    Args:
        protocol: The fsspec protocol.
        options: Its storage options.
        max_concurrency: Requests we run at once (the connection pool's size for S3).

    Raises:
        MissingDependencyError: The protocol's library is not installed.
    """
    http = shared_http_client(options) if protocol in HTTP_PROTOCOLS else None
    return _shared(protocol, options, max_concurrency,
                   lambda: make_filesystem(protocol, options, max_concurrency, http))


def shared_http_client(options: dict[str, Any]) -> HttpClient:
    """This process's :class:`.HttpClient` for the HTTP storage ``options``."""
    return _shared("http-client", options, 0, lambda: HttpClient(options))


def make_filesystem(protocol: str, options: dict[str, Any], max_concurrency: int,
                    http: HttpClient | None = None) -> Any:
    """A new fsspec filesystem of ``protocol`` (not fsspec's cached instance: its pool is
    sized and its retries turned off here).

    Args:
        protocol: The fsspec protocol.
        options: Its storage options.
        max_concurrency: Requests we run at once (the connection pool's size for S3).
        http: The HTTP client whose session an HTTP filesystem shares (fsspec's public
            ``get_client`` option).

    Raises:
        MissingDependencyError: The protocol's library is not installed.
    """
    import fsspec

    if protocol in S3_PROTOCOLS:
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", max_concurrency)  # botocore's holds 10
        config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
        options = {**options, "config_kwargs": config}
    if protocol in GCS_PROTOCOLS:
        options = {**options, "session_kwargs": _with_middleware(options)}
    if http is not None:
        options = {**options, "get_client": http.session_for_fsspec}
    if protocol in (*S3_PROTOCOLS, *GCS_PROTOCOLS, *HTTP_PROTOCOLS):
        # no listings cache: the client is shared by every open in this process, and a
        # listing cached by one (a build's) would give a later open the ETag a file had
        # then, hiding a rewrite from the staleness check (an explicit setting wins)
        options = {"use_listings_cache": False, **options}
    try:
        fs = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    except ImportError as exc:
        raise missing_extra(protocol, exc) from None
    if protocol in S3_PROTOCOLS and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1  # s3fs's loop around every call: one attempt
    return fs


def filesystem_for(url: str, storage_options: Mapping[str, Any] | None = None) -> Any:
    """fsspec's filesystem of ``url``'s protocol with ``storage_options`` (its library imported
    on first use), for the few small files read or written whole outside a storage (a TFDS
    builder's metadata).

    Args:
        url: A local path or a URL.
        storage_options: Options for the filesystem.

    Returns:
        The filesystem.

    Raises:
        ImportError: The protocol's library is not installed.
        ValueError: The protocol is unknown to fsspec.
    """
    import fsspec.core

    return fsspec.core.url_to_fs(url, **dict(storage_options or {}))[0]


def strip_protocol(url: str, protocol: str) -> str:
    """The path fsspec's filesystem of ``protocol`` names ``url`` by (its library imported on
    first use).

    Args:
        url: A URL of ``protocol``.
        protocol: Its fsspec protocol.

    Returns:
        The path.

    Raises:
        InvalidURLError: An unknown protocol.
        MissingDependencyError: Its library is not installed.
    """
    import fsspec.core

    try:
        stripped: str = fsspec.core.strip_protocol(url)
    except ImportError as exc:
        raise missing_extra(protocol, exc) from None
    except ValueError:
        raise InvalidURLError(
            f"{url}: unknown protocol {protocol!r}; use a local path or a URL such as "
            "s3://bucket/key, gs://bucket/key or https://host/path"
        ) from None
    return stripped


def _with_middleware(options: dict[str, Any]) -> dict[str, Any]:
    """gcsfs's ``session_kwargs`` with :func:`_hand_over` as the session's first middleware
    (unchanged where aiohttp has no client middlewares: gcsfs then retries on its own)."""
    import aiohttp

    session = dict(options.get("session_kwargs") or {})
    if "middlewares" in inspect.signature(aiohttp.ClientSession).parameters:
        session["middlewares"] = (_hand_over, *session.get("middlewares", ()))
    return session


async def _hand_over(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """An aiohttp client middleware: a failed connection, or an answer worth retrying (5xx,
    408, 429), becomes a :class:`.RequestFailure`, which gcsfs's retry loop does not catch."""
    import aiohttp

    try:
        response = await handler(request)
    except aiohttp.ClientError as exc:
        raise RequestFailure(str(exc)) from exc
    if response.status >= 500 or response.status in (408, 429):
        response.release()
        raise RequestFailure(f"HTTP {response.status} from {request.url}", response.status)
    return response


async def call(fs: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``fs.<method>(*args, **kwargs)`` on the running event loop: an asynchronous
    filesystem's coroutine of that method (``_<method>``: fsspec's documented async API), a
    synchronous one's method in a thread (so that a deadline can give up waiting for it).

    Args:
        fs: An fsspec filesystem.
        method: A public method of ``fsspec.AbstractFileSystem`` (``info``, ``cat_file``…).

    Returns:
        What the method returns.
    """
    if getattr(fs, "async_impl", False):
        return await getattr(fs, "_" + method)(*args, **kwargs)
    return await asyncio.to_thread(getattr(fs, method), *args, **kwargs)


@atexit.register
def _close_sessions() -> None:
    """Close this process's HTTP sessions on their event loop (fsspec's, which still runs)."""
    if _CLIENTS_PID[0] != os.getpid():
        return
    for client in list(_CLIENTS.values()):
        loop = getattr(client, "loop", None)
        if isinstance(client, HttpClient) and loop is not None and loop.is_running():
            with contextlib.suppress(Exception):  # stopped meanwhile: nothing to close on
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=5)
