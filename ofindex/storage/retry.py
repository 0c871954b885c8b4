"""Bounded retries with exponential backoff for transient storage errors.

Transient: dropped or refused connections, timeouts, HTTP 5xx / 429 / 408 (however the
filesystem library reports them). Never transient: missing files, permissions, bad arguments,
and :class:`RangeReadError` for wrong bytes (retrying a server that ignores ``Range`` only
repeats the mistake).
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import RangeReadError
from .failures import first_line, translate, unreachable_advice

T = TypeVar("T")

_TRANSIENT_ERRNOS = {
    errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
    errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETRESET, errno.EAGAIN,
}
#: Exception class names (from aiohttp, botocore, urllib3, requests, google-auth …) that mean
#: "the connection failed, try again"; matched by name so no client library is imported here.
_TRANSIENT_NAMES = {
    "ClientConnectionError", "ClientOSError", "ServerDisconnectedError", "ClientPayloadError",
    "ServerTimeoutError", "ClientConnectorError", "ConnectionTimeoutError", "SocketTimeoutError",
    "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError",
    "ConnectTimeoutError", "ResponseStreamingError", "IncompleteReadError",
    "ProtocolError", "ChunkedEncodingError", "TransportError", "FSTimeoutError",
    "FlexibleChecksumError",  # botocore: the body does not match the checksum S3 sent
}
#: Packages whose own exception classes mean "the request failed" (reported as RangeReadError
#: naming the URL when they are not worth retrying, instead of leaking to the caller).
_CLIENT_PACKAGES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google",
                    "s3fs", "gcsfs", "fsspec")
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
              ValueError, TypeError, KeyError, RangeReadError)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` tries in all; waits ``base_delay * 2**k`` (full jitter, capped)."""

    attempts: int = 4
    base_delay: float = 0.05
    max_delay: float = 2.0

    def delay(self, failed: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * (2 ** failed)))


def _status_of(exc: BaseException) -> int | None:
    for attr in ("status", "code", "status_code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(value, int):
            return value
    return None


#: Connection failures botocore has already retried with backoff (about 7 s): retrying them
#: again would multiply the wait for an endpoint that is down or mistyped.
_RETRIED_BY_CLIENT = {"EndpointConnectionError", "ConnectTimeoutError"}


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is worth retrying."""
    seen = 0
    while exc is not None and seen < 6:
        if (type(exc).__name__ in _RETRIED_BY_CLIENT
                and type(exc).__module__.startswith("botocore")):
            return False
        if isinstance(exc, FileNotFoundError) and exc.__cause__ is not None:
            # fsspec's HTTP ``info`` reports every failure (503 too) as FileNotFoundError
            exc = exc.__cause__
            seen += 1
            continue
        # a FileNotFoundError is final even when a transient error is chained below it
        if (isinstance(exc, _PERMANENT) and not isinstance(exc, (ConnectionError, TimeoutError))
                and (not isinstance(exc, OSError) or exc.errno not in _TRANSIENT_ERRNOS)):
            return False
        if isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
            return True
        if type(exc).__name__ in _TRANSIENT_NAMES:
            return True
        status = _status_of(exc)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


def give_up(what: str, attempts: int, exc: BaseException) -> RangeReadError:
    """The error once a transient failure kept happening ``attempts`` times."""
    advice = unreachable_advice(exc)
    err = RangeReadError(
        f"{what}: failed after {attempts} attempt{'s' if attempts != 1 else ''}: "
        f"{first_line(exc)}" + (f"; {advice}" if advice else "")
    )
    err.__cause__ = exc
    return err


def _from_client(exc: BaseException) -> bool:
    """Whether ``exc`` is a client library's own error (not a built-in one it raised)."""
    module = type(exc).__module__.split(".", 1)[0]
    return module in _CLIENT_PACKAGES and not isinstance(exc, (OSError, ValueError))


def permanent(what: str, exc: Exception) -> Exception:
    """What to raise for a failure not worth retrying: a client library's own error becomes a
    :class:`RangeReadError` naming ``what``; anything else is raised as it is."""
    if not _from_client(exc):
        return exc
    return RangeReadError(f"{what}: {type(exc).__name__}: {exc}")


def _final(exc: Exception, what: str, attempts: int) -> Exception:
    """What to raise when ``exc`` is not retried (again): an ofindex error naming ``what``."""
    if is_transient(exc):
        return give_up(what, attempts, exc)
    translated = translate(exc, what)
    if translated is exc:
        return permanent(what, exc)
    assert isinstance(translated, Exception)
    return translated


def _raise_if_final(exc: Exception, attempt: int, policy: RetryPolicy, what: str) -> None:
    """Raise the error to report for ``exc`` when it ends the retries (not transient, or the
    last attempt); return when another attempt should follow."""
    if not is_transient(exc) or attempt + 1 >= policy.attempts:
        final = _final(exc, what, policy.attempts)
        if final is exc:
            raise exc
        raise final from exc


async def retry_async(fn: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> T:
    """Await ``fn()``; retry transient failures; then raise :class:`RangeReadError` naming
    ``what`` (the URL and byte range)."""
    for k in range(policy.attempts):
        try:
            return await fn()
        except Exception as exc:
            _raise_if_final(exc, k, policy, what)
            await asyncio.sleep(policy.delay(k))
    raise AssertionError("unreachable")  # pragma: no cover


def retry_sync(fn: Callable[[], T], policy: RetryPolicy, what: str) -> T:
    """Synchronous :func:`retry_async`."""
    for k in range(policy.attempts):
        try:
            return fn()
        except Exception as exc:
            _raise_if_final(exc, k, policy, what)
            time.sleep(policy.delay(k))
    raise AssertionError("unreachable")  # pragma: no cover
