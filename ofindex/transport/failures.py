"""Failures of storage clients (botocore, aiohttp, gcsfs, the OS): what each says
(:func:`classify`: worth retrying or not, a throttling answer, a refused connection …), and
each as a one-line ofindex error that names the URL, the cause and the next step.

Transient: dropped or reset connections, connections refused by a store that answered this
process before (a restart), timeouts, HTTP 5xx / 429 / 408, S3's ``SlowDown`` and the other
throttling codes, a DNS server that answered "try again". Never transient: missing files,
permissions, a name that does not resolve, a connection refused where nothing ever answered
(a mistyped port or endpoint: said at once, :func:`nothing_listens`), a TLS handshake that
fails, bad arguments, and :class:`RangeReadError` for wrong bytes (retrying a server that
ignores ``Range`` only repeats the mistake).

The real cause is kept: a host name that does not resolve, a refused connection, a TLS
handshake that fails (``https://`` to a plain-HTTP server), a timeout, a write the server
refuses (a read-only web server or bucket) are each said as such, never as a missing file:
only a "not found" answer (404, ``NoSuchKey``) is a :class:`DataFileNotFoundError`.
"""

import asyncio
import errno
import re
import socket
import ssl
from typing import NamedTuple
from urllib.parse import urlsplit

from ..errors import (
    DataFileNotFoundError,
    MissingDependencyError,
    OfindexError,
    RangeReadError,
    StorageError,
    hint,
)

#: The extra that provides each protocol's fsspec implementation.
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http", "https": "http"}

#: Exception class names (from aiohttp, botocore, urllib3, gcsfs …) meaning "no connection".
_UNREACHABLE = {
    "ClientConnectorError", "EndpointConnectionError", "ConnectTimeoutError", "ConnectionError",
    "ConnectionRefusedError", "ServerTimeoutError", "ClientConnectionError", "ClientOSError",
    "ServerDisconnectedError", "gaierror", "ConnectTimeout", "NewConnectionError",
}
_NO_CREDENTIALS = {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError",
                   "RefreshError"}
_DENIED_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "401",
                 "Forbidden", "Unauthorized", "ExpiredToken", "InvalidToken"}
_NO_BUCKET_CODES = {"NoSuchBucket", "NoSuchKey", "404", "NotFound"}
#: Exception class names meaning "the request timed out".
_TIMEOUTS = {"ServerTimeoutError", "ConnectionTimeoutError", "SocketTimeoutError",
             "ReadTimeoutError", "ConnectTimeoutError", "FSTimeoutError", "ConnectTimeout",
             "ReadTimeout", "TimeoutError"}
#: Error codes of throttling answers (back off longer), besides HTTP 429 and 503; all but the
#: last say that the request *rate* is too high (a bare 503 is an outage, whatever the rate).
_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
                   "RequestThrottledException", "TooManyRequestsException",
                   "RequestLimitExceeded", "BandwidthLimitExceeded", "RequestThrottled",
                   "EC2ThrottledException", "ServiceUnavailable"}
#: Error codes of S3 (and other AWS services) worth retrying, as botocore's standard mode.
_RATE_LIMIT_CODES = _THROTTLE_CODES - {"ServiceUnavailable"}
_TRANSIENT_CODES = _THROTTLE_CODES | {"RequestTimeout", "RequestTimeoutException",
                                      "PriorRequestNotComplete", "InternalError"}
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
    "HTTPClientError",  # botocore: the answer could not be read (retried by its standard mode)
}
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
              ValueError, TypeError, KeyError, RangeReadError)
#: Packages whose own exception classes mean "the request failed" (reported as RangeReadError
#: naming the URL when they are not worth retrying, instead of leaking to the caller).
_CLIENT_PACKAGES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google",
                    "s3fs", "gcsfs", "fsspec")
#: HTTP statuses a server answers a write it will not take with (read-only, no PUT).
_WRITE_REFUSED = {401, 403, 405, 501}
_INDEX_DIR_HINT = hint("index_dir='DIR'", "--index-dir DIR")
_OPTIONS_HINT = hint("storage_options={...}", "-s KEY=VALUE")
_ANON_HINT = hint("storage_options={'anon': True}", "-s anon=true")
_ENDPOINT_HINT = hint(
    """storage_options={"client_kwargs": {"endpoint_url": "..."}}""",
    """-s 'client_kwargs={"endpoint_url": "..."}'""",
)
_MORE_TIME = hint("retries= / timeout=", "--retries / --timeout")


def first_line(exc: BaseException, limit: int = 200) -> str:
    """``"<Type>: <first line of the message>"``, at most ``limit`` characters."""
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    msg = msg if len(msg) <= limit else msg[: limit - 1] + "…"
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


class RequestFailure(Exception):
    """A failed request of a client library whose own retry loop is bypassed (gcsfs's:
    :mod:`.clients`): a server's answer worth retrying (``status``: 5xx, 408, 429), or a
    failed connection (no status; the failure is its cause). Neither one of the library's
    exception classes nor an ``OSError`` (which aiohttp wraps in its own), so the library's
    loop lets it through to :mod:`.policy`.

    Args:
        message: What failed.
        status: The HTTP status of the answer, if there was one.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Failure(NamedTuple):
    """What one failed attempt says (:func:`classify`).

    Attributes:
        transient: Worth retrying (see the module).
        throttled: A throttling answer (HTTP 429 or 503, ``SlowDown`` …): back off longer.
        rate_limited: The store says the request *rate* is too high (429, S3's ``SlowDown``
            and AWS's other throttling codes; to a HEAD, which has no body, S3 answers a 503
            without a code): slow the process down (:mod:`.policy`).
        refused: The connection was refused (nothing listens, or a server restarts there).
        network: What went wrong on the way to the store, in words naming the host, or
            ``None`` when the store answered.
    """

    transient: bool
    throttled: bool
    rate_limited: bool
    refused: bool
    network: str | None


def classify(exc: BaseException) -> Failure:
    """Say what the failure ``exc`` of one attempt is.

    Args:
        exc: The failure (its causes are looked at too).

    Returns:
        The :class:`Failure`.
    """
    chain = _chain(exc)
    real = _chain(_unwrap(exc))
    return Failure(_transient(exc), any(_throttling(e) for e in chain),
                   any(_rate_limiting(e) for e in chain),
                   any(isinstance(e, ConnectionRefusedError) or (
                       isinstance(e, OSError) and e.errno == errno.ECONNREFUSED) for e in real),
                   _network_cause(exc))


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from, outermost first."""
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(out) < 8:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def _code(exc: BaseException) -> str:
    """The error code an exception carries (botocore's, a status, or one its message names)."""
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, dict) and response.get("Error", {}).get("Code"):
        return str(response["Error"]["Code"])
    for attr in ("status", "code", "status_code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return str(value)
    # error codes named in the message (never bare numbers: "403 bytes read" is no status)
    m = re.search(r"\b(AccessDenied|NoSuchBucket|NoSuchKey|InvalidAccessKeyId|"
                  r"SignatureDoesNotMatch)\b", str(exc))
    return m.group(1) if m else ""


def _status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (aiohttp, gcsfs, botocore), or ``None``."""
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


def _throttling(exc: BaseException) -> bool:
    return (_status(exc) in (429, 503) or _code(exc) in _THROTTLE_CODES
            or "reduce your request rate" in str(exc))


def _rate_limiting(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)  # S3 to a HEAD: a 503 whose code is "503"
    return (_status(exc) == 429 or _code(exc) in _RATE_LIMIT_CODES
            or "reduce your request rate" in str(exc)
            or (isinstance(response, dict) and response.get("Error", {}).get("Code") == "503"))


def _transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is worth retrying."""
    if _tls_failure(exc) or _dns_failure(exc) == "permanent":
        return False
    current: BaseException | None = exc
    for _ in range(6):
        if current is None:
            return False
        current = _unwrap(current)  # fsspec's HTTP info: a 503 as FileNotFoundError
        # a FileNotFoundError is final even when a transient error is chained below it
        if (isinstance(current, _PERMANENT)
                and not isinstance(current, (ConnectionError, TimeoutError))
                and (not isinstance(current, OSError)
                     or current.errno not in _TRANSIENT_ERRNOS)):
            return False
        if isinstance(current, (ConnectionError, TimeoutError, asyncio.TimeoutError)) \
                or type(current).__name__ in _TRANSIENT_NAMES \
                or _code(current) in _TRANSIENT_CODES:
            return True
        status = _status(current)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return True
        current = current.__cause__ or current.__context__
    return False


def _unwrap(exc: BaseException) -> BaseException:
    """The real failure under a ``FileNotFoundError`` that is not one (fsspec's HTTP ``info``
    reports every failure, a host that does not resolve, a 503 …, as ``FileNotFoundError``
    raised from it): one whose cause is not a 404, ``NoSuchKey`` or a library's own way of
    saying so (memory://'s ``KeyError``). ``exc`` itself otherwise."""
    for _ in range(4):
        cause = exc.__cause__
        if not isinstance(exc, FileNotFoundError) or cause is None:
            return exc
        status = _status(cause)
        if isinstance(cause, FileNotFoundError) or status in (404, 410) \
                or _code(cause) in _NO_BUCKET_CODES \
                or (status is None and not isinstance(cause, OSError)):
            return exc
        exc = cause
    return exc


def _endpoint(chain: list[BaseException]) -> str | None:
    """``host:port`` the failed connection was to, where the error says."""
    for e in chain:
        host = getattr(e, "host", None)
        if isinstance(host, str) and host:
            port = getattr(e, "port", None)
            return f"{host}:{port}" if isinstance(port, int) else host
        kwargs = getattr(e, "kwargs", None)  # botocore: EndpointConnectionError, SSLError
        url = kwargs.get("endpoint_url") if isinstance(kwargs, dict) else None
        if isinstance(url, str) and url:
            return urlsplit(url).netloc or url
    return None


def _dns_failure(exc: BaseException) -> str | None:
    """``"permanent"`` when ``exc`` comes from a host name that does not resolve,
    ``"transient"`` when the DNS server said "try again", ``None`` for other failures."""
    for e in _chain(exc):
        if isinstance(e, socket.gaierror):
            return "transient" if e.errno == socket.EAI_AGAIN else "permanent"
        if type(e).__name__ in ("NameResolutionError", "ClientConnectorDNSError"):
            return "permanent"
    return None


def _tls_failure(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a failed TLS handshake or certificate check (not from a
    connection dropped halfway, which is worth retrying)."""
    for e in _chain(exc):
        if isinstance(e, ssl.SSLError):
            return not isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
        if type(e).__name__ in ("SSLError", "ClientConnectorCertificateError",
                                "CertificateError"):
            return True
    return False


def _network_cause(exc: BaseException) -> str | None:
    """What went wrong on the way to the storage, in words (naming the host), or ``None``
    when the failure is not a network one (the server answered)."""
    chain = _chain(_unwrap(exc))
    where = _endpoint(chain)
    at = f" {where}" if where else ""
    dns = _dns_failure(exc)
    if dns == "permanent":
        host = where.rsplit(":", 1)[0] if where else "the host"
        return f"could not resolve host {host!r} (no such name in DNS: {first_line(chain[-1])})"
    if dns == "transient":
        return f"the DNS server did not answer for{at or ' the host'} (try again)"
    if _tls_failure(exc):
        tls = next((e for e in chain if isinstance(e, ssl.SSLError)), chain[-1])
        return (f"the TLS (https) handshake with{at or ' the server'} failed "
                f"({first_line(tls)}); if the server speaks plain HTTP, use http:// "
                "instead of https://")
    names = {type(e).__name__ for e in chain}
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return f"connection refused by{at or ' the server'} (is it running?)"
    if names & _TIMEOUTS or any(isinstance(e, TimeoutError) for e in chain):
        return f"timed out waiting for{at or ' the server'} ({first_line(exc)})"
    if names & _UNREACHABLE or any(isinstance(e, ConnectionError) for e in chain):
        return f"the connection to{at or ' the server'} failed ({first_line(exc)})"
    return None


def _advice(what: str, exc: BaseException) -> str | None:
    """The next step when the endpoint cannot be reached: for a bucket URL, check it; for an
    ``http(s)://`` URL, whose host is the endpoint (the failure names it), only a word on a
    host name that does not resolve."""
    if what.startswith(("http://", "https://")):
        return "check the host name in the URL" if _dns_failure(exc) == "permanent" else None
    chain = _chain(exc)
    if {type(e).__name__ for e in chain} & _UNREACHABLE or any(
            isinstance(e, (ConnectionError, TimeoutError)) for e in chain):
        return (f"check the network and the endpoint ({_ENDPOINT_HINT}, or AWS_ENDPOINT_URL "
                "for S3)")
    return None


def nothing_listens(what: str, exc: BaseException) -> StorageError:
    """The error for a connection refused by an address that never answered this process (a
    mistyped port or endpoint, a server not started): said at once, never retried.

    Args:
        what: The request (URL and action), for the message.
        exc: The failure.

    Returns:
        The error to raise.
    """
    where = _endpoint(_chain(_unwrap(exc)))
    at = f" at {where}" if where else " at the address"
    if what.startswith(("http://", "https://")):
        advice = "check the host and port in the URL, and that the server is running"
    else:
        advice = (f"check the endpoint ({_ENDPOINT_HINT}, or AWS_ENDPOINT_URL for S3) and "
                  "that the server is running")
    return StorageError(f"{what}: nothing listens{at} (connection refused); {advice}")


def give_up(what: str, attempts: int, elapsed: float, exc: BaseException) -> OSError:
    """The error once a transient failure kept happening: a :class:`StorageError` when the
    storage could not be reached (connections, timeouts), a :class:`RangeReadError` when it
    answered with errors (5xx, 429) every time.

    Args:
        what: The request (URL and byte range), for the message.
        attempts: Attempts made.
        elapsed: Seconds since the first.
        exc: The last failure.

    Returns:
        The error to raise (its cause set to ``exc``).
    """
    tries = f"failed after {attempts} attempt{'s' if attempts != 1 else ''} in {elapsed:.1f} s"
    cause = _network_cause(exc)
    err: OSError
    if cause is None:
        err = RangeReadError(
            f"{what}: {tries}: {first_line(exc)} (the server kept failing); try again later, "
            f"or wait longer with {_MORE_TIME}")
    else:
        err = StorageError(
            f"{what}: {tries}: {cause}; {_advice(what, exc) or 'check the network'}, "
            f"or wait longer with {_MORE_TIME} if the outage is passing")
    err.__cause__ = exc
    return err


def permanent(what: str, exc: Exception) -> Exception:
    """What to raise for a failure not worth retrying: an ofindex error naming ``what`` (URL
    and action), or ``exc`` itself when it already is one or is of a kind callers handle.

    A "not found" answer is a :class:`DataFileNotFoundError`, missing or refused credentials
    and an unreachable store a :class:`StorageError`, a client library's own error of no
    known kind a :class:`RangeReadError`.

    Args:
        what: The request, for the message.
        exc: The failure.

    Returns:
        The exception to raise.
    """
    if isinstance(exc, OfindexError):
        return exc
    unwrapped = _unwrap(exc)
    real = unwrapped if isinstance(unwrapped, Exception) else exc
    chain = _chain(real)
    codes = {_code(e) for e in chain}
    if isinstance(real, FileNotFoundError) or codes & _NO_BUCKET_CODES:
        why = "the bucket does not exist" if "NoSuchBucket" in codes else "not found"
        return DataFileNotFoundError(f"{what}: {why} ({first_line(real)})")
    if {type(e).__name__ for e in chain} & _NO_CREDENTIALS:
        return StorageError(
            f"{what}: no credentials found ({first_line(real)}); set them as for any client "
            f"of this storage (for S3 the AWS_* environment variables or a profile, for GCS "
            f"GOOGLE_APPLICATION_CREDENTIALS), or read public data anonymously with "
            f"{_ANON_HINT}")
    if isinstance(real, PermissionError) or codes & _DENIED_CODES:
        return StorageError(
            f"{what}: access denied ({first_line(real)}); check the credentials (for S3 the "
            f"AWS_* environment variables or a profile, for GCS a token) or pass them with "
            f"{_OPTIONS_HINT}")
    cause = _network_cause(real)
    if cause is not None:
        advice = _advice(what, real)
        return StorageError(f"{what}: cannot reach the storage: {cause}"
                            + (f"; {advice}" if advice else ""))
    if isinstance(real, ImportError):
        return MissingDependencyError(f"{what}: {first_line(real)}")
    module = type(real).__module__.split(".", 1)[0]
    if module in _CLIENT_PACKAGES and not isinstance(real, (OSError, ValueError)):
        return RangeReadError(f"{what}: {type(real).__name__}: {real}")
    return real


def not_writable(what: str, exc: BaseException) -> OfindexError | None:
    """The error for a write the storage refused because the location is read-only (HTTP
    405/403/501 on PUT, S3 ``AccessDenied``, a read-only or unwritable local directory), or
    ``None`` for other failures.

    Args:
        what: The file written (URL or path), for the message.
        exc: The failure.

    Returns:
        The error to raise, or ``None``.
    """
    chain = _chain(exc)
    refused = any(_status(e) in _WRITE_REFUSED or _code(e) in _DENIED_CODES
                  or isinstance(e, PermissionError) or "Forbidden" in str(e)
                  or getattr(e, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM)
                  for e in chain)
    if not refused:
        return None
    culprit = next((e for e in reversed(chain) if _status(e) or _code(e)), chain[-1])
    return StorageError(
        f"{what}: cannot write here, the location is read-only or not writable for you "
        f"({first_line(culprit)}); keep the indexes elsewhere with {_INDEX_DIR_HINT} (a local "
        "directory or a bucket you may write to), and open the data with the same")


def missing_extra(protocol: str, exc: BaseException) -> MissingDependencyError:
    """The error for a protocol whose fsspec implementation cannot be imported."""
    extra = EXTRAS.get(protocol)
    how = (f"pip install 'ofindex[{extra}]'" if extra
           else "install the fsspec implementation named above")
    return MissingDependencyError(
        f"{protocol}:// URLs need an optional dependency that is not installed "
        f"({first_line(exc)}); run: {how}")
