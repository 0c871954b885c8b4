"""Failures of storage clients (botocore, aiohttp, gcsfs, the OS) as one-line ofindex errors
that name the URL, the cause and the next step.

The real cause is kept: a host name that does not resolve, a refused connection, a TLS
handshake that fails (``https://`` to a plain-HTTP server), a timeout, a write the server
refuses (a read-only web server or bucket) are each said as such, never as a missing file:
only a "not found" answer (404, ``NoSuchKey``) is a :class:`DataFileNotFoundError`.
"""

import errno
import re
import socket
import ssl
from urllib.parse import urlsplit

from ..errors import (
    DataFileNotFoundError,
    MissingDependencyError,
    OfindexError,
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
#: Error codes of throttling answers (back off longer), besides HTTP 429 and 503.
_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
                   "RequestThrottledException", "TooManyRequestsException",
                   "RequestLimitExceeded", "BandwidthLimitExceeded", "RequestThrottled",
                   "EC2ThrottledException", "ServiceUnavailable"}
#: HTTP statuses a server answers a write it will not take with (read-only, no PUT).
_WRITE_REFUSED = {401, 403, 405, 501}
_INDEX_DIR_HINT = hint("index_dir='DIR'", "--index-dir DIR")
_OPTIONS_HINT = hint("storage_options={...}", "-s KEY=VALUE")
_ANON_HINT = hint("storage_options={'anon': True}", "-s anon=true")
_ENDPOINT_HINT = hint(
    """storage_options={"client_kwargs": {"endpoint_url": "..."}}""",
    """-s 'client_kwargs={"endpoint_url": "..."}'""",
)


def first_line(exc: BaseException, limit: int = 200) -> str:
    """``"<Type>: <first line of the message>"``, at most ``limit`` characters."""
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    msg = msg if len(msg) <= limit else msg[: limit - 1] + "…"
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(out) < 8:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
    for attr in ("status", "code", "status_code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return str(value)
    # error codes named in the message (never bare numbers: "403 bytes read" is no status)
    m = re.search(r"\b(AccessDenied|NoSuchBucket|NoSuchKey|InvalidAccessKeyId|"
                  r"SignatureDoesNotMatch)\b", str(exc))
    return m.group(1) if m else ""


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an error carries (aiohttp, gcsfs, botocore), or ``None``.

    Args:
        exc: An exception of a storage client.

    Returns:
        The status code, or ``None``.
    """
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


def _genuinely_missing(cause: BaseException) -> bool:
    """Whether the cause of a ``FileNotFoundError`` says the file is missing (a 404, or a
    library's own way of saying so, such as memory://'s ``KeyError``) rather than that the
    request failed (another status, a connection or TLS error)."""
    status = status_of(cause)
    if isinstance(cause, FileNotFoundError) or status in (404, 410) \
            or _error_code(cause) in _NO_BUCKET_CODES:
        return True
    return status is None and not isinstance(cause, OSError)


def unwrap_not_found(exc: BaseException) -> BaseException:
    """The real failure under a ``FileNotFoundError`` that is not one: fsspec's HTTP ``info``
    reports every failure (a host that does not resolve, a 503 …) as ``FileNotFoundError``
    raised from it. ``exc`` itself otherwise.

    Args:
        exc: A failure.

    Returns:
        The failure to report.
    """
    seen = 0
    while (isinstance(exc, FileNotFoundError) and exc.__cause__ is not None
           and not _genuinely_missing(exc.__cause__) and seen < 4):
        exc = exc.__cause__
        seen += 1
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


def is_dns_failure(exc: BaseException) -> str | None:
    """``"permanent"`` when ``exc`` comes from a host name that does not resolve,
    ``"transient"`` when the DNS server said "try again", ``None`` for other failures.

    Args:
        exc: A failure.

    Returns:
        The kind, or ``None``.
    """
    for e in _chain(exc):
        if isinstance(e, socket.gaierror):
            return "transient" if e.errno == socket.EAI_AGAIN else "permanent"
        if type(e).__name__ in ("NameResolutionError", "ClientConnectorDNSError"):
            return "permanent"
    return None


def is_refused(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a refused connection: nothing listens at the address (or a
    server is restarting there, when it answered before).

    Args:
        exc: A failure.

    Returns:
        True for a refused connection.
    """
    return any(isinstance(e, ConnectionRefusedError)
               or (isinstance(e, OSError) and e.errno == errno.ECONNREFUSED)
               for e in _chain(unwrap_not_found(exc)))


def nothing_listens(what: str, exc: BaseException) -> StorageError:
    """The error for a connection refused by an address that never answered this process (a
    mistyped port or endpoint, a server not started): said at once, never retried.

    Args:
        what: The request (URL and action), for the message.
        exc: The failure.

    Returns:
        The error to raise.
    """
    where = _endpoint(_chain(unwrap_not_found(exc)))
    at = f" at {where}" if where else " at the address"
    if what.startswith(("http://", "https://")):
        advice = "check the host and port in the URL, and that the server is running"
    else:
        advice = (f"check the endpoint ({_ENDPOINT_HINT}, or AWS_ENDPOINT_URL for S3) and "
                  "that the server is running")
    return StorageError(f"{what}: nothing listens{at} (connection refused); {advice}")


def is_tls_failure(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a failed TLS handshake or certificate check (not from a
    connection dropped halfway, which is worth retrying).

    Args:
        exc: A failure.

    Returns:
        True for a TLS failure.
    """
    for e in _chain(exc):
        if isinstance(e, ssl.SSLError):
            return not isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
        if type(e).__name__ in ("SSLError", "ClientConnectorCertificateError",
                                "CertificateError"):
            return True
    return False


def is_throttled(exc: BaseException) -> bool:
    """Whether ``exc`` is a throttling answer (HTTP 429 or 503, S3 ``SlowDown`` …).

    Args:
        exc: A failure.

    Returns:
        True for a throttling answer.
    """
    for e in _chain(exc):
        if status_of(e) in (429, 503) or _error_code(e) in _THROTTLE_CODES:
            return True
        if "reduce your request rate" in str(e):
            return True
    return False


#: Error codes meaning "over the request rate" (a bare 503 is an outage, not a rate limit).
_RATE_LIMIT_CODES = _THROTTLE_CODES - {"ServiceUnavailable"}


def is_rate_limited(exc: BaseException) -> bool:
    """Whether ``exc`` is the store saying the request rate is too high: HTTP 429 (GCS and
    web servers), S3's ``SlowDown`` (a 503 with that code; to a HEAD, which has no body, a 503
    without a code) and AWS's other throttling codes, or a message asking to "reduce your
    request rate". A web server's bare 503 is not: the service is unavailable, whatever the
    rate.

    Args:
        exc: A failure.

    Returns:
        True for a rate-limiting answer.
    """
    for e in _chain(exc):
        if status_of(e) == 429 or _error_code(e) in _RATE_LIMIT_CODES:
            return True
        if "reduce your request rate" in str(e) or _s3_head_503(e):
            return True
    return False


def _s3_head_503(exc: BaseException) -> bool:
    """S3's answer over the rate to a HEAD: a 503 with no body, so botocore has no error code
    but the status (``"503"``) to give."""
    response = getattr(exc, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") == "503"


def network_cause(exc: BaseException) -> str | None:
    """What went wrong on the way to the storage, in words (naming the host), or ``None``
    when the failure is not a network one (the server answered).

    Args:
        exc: A failure.

    Returns:
        The cause in words, or ``None``.
    """
    chain = _chain(unwrap_not_found(exc))
    where = _endpoint(chain)
    at = f" {where}" if where else ""
    dns = is_dns_failure(exc)
    if dns == "permanent":
        host = where.rsplit(":", 1)[0] if where else "the host"
        return f"could not resolve host {host!r} (no such name in DNS: {first_line(chain[-1])})"
    if dns == "transient":
        return f"the DNS server did not answer for{at or ' the host'} (try again)"
    if is_tls_failure(exc):
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
    statuses = {status_of(e) for e in chain}
    codes = {_error_code(e) for e in chain}
    refused = bool(statuses & _WRITE_REFUSED or codes & _DENIED_CODES
                   or any(isinstance(e, PermissionError) or "Forbidden" in str(e)
                          or getattr(e, "errno", None) in (errno.EROFS, errno.EACCES,
                                                           errno.EPERM)
                          for e in chain))
    if not refused:
        return None
    culprit = next((e for e in reversed(chain) if status_of(e) or _error_code(e)), chain[-1])
    return StorageError(
        f"{what}: cannot write here, the location is read-only or not writable for you "
        f"({first_line(culprit)}); keep the indexes elsewhere with {_INDEX_DIR_HINT} (a local "
        "directory or a bucket you may write to), and open the data with the same"
    )


def missing_extra(protocol: str, exc: BaseException) -> MissingDependencyError:
    """The error for a protocol whose fsspec implementation cannot be imported."""
    extra = EXTRAS.get(protocol)
    how = (f"pip install 'ofindex[{extra}]'" if extra
           else "install the fsspec implementation named above")
    return MissingDependencyError(
        f"{protocol}:// URLs need an optional dependency that is not installed "
        f"({first_line(exc)}); run: {how}"
    )


def translate(exc: BaseException, what: str) -> BaseException:
    """Turn a storage client's failure into an ofindex error naming ``what`` (URL and action).

    Returns ``exc`` itself when it already is an :class:`OfindexError`, or when it is of a
    kind callers handle themselves (``FileNotFoundError`` stays one: it becomes a
    :class:`DataFileNotFoundError`).
    """
    if isinstance(exc, OfindexError):
        return exc
    exc = unwrap_not_found(exc)
    chain = _chain(exc)
    codes = {_error_code(e) for e in chain}
    if isinstance(exc, FileNotFoundError) or codes & _NO_BUCKET_CODES:
        why = "the bucket does not exist" if "NoSuchBucket" in codes else "not found"
        return DataFileNotFoundError(f"{what}: {why} ({first_line(exc)})")
    if {type(e).__name__ for e in chain} & _NO_CREDENTIALS:
        return StorageError(
            f"{what}: no credentials found ({first_line(exc)}); set them as for any client of "
            f"this storage (for S3 the AWS_* environment variables or a profile, for GCS "
            f"GOOGLE_APPLICATION_CREDENTIALS), or read public data anonymously with "
            f"{_ANON_HINT}"
        )
    if isinstance(exc, PermissionError) or codes & _DENIED_CODES:
        return StorageError(
            f"{what}: access denied ({first_line(exc)}); check the credentials (for S3 the "
            f"AWS_* environment variables or a profile, for GCS a token) or pass them with "
            f"{_OPTIONS_HINT}"
        )
    cause = network_cause(exc)
    if cause is not None:
        advice = endpoint_advice(what, exc)
        return StorageError(f"{what}: cannot reach the storage: {cause}"
                            + (f"; {advice}" if advice else ""))
    if isinstance(exc, ImportError):
        return MissingDependencyError(f"{what}: {first_line(exc)}")
    return exc


def unreachable_advice(exc: BaseException) -> str | None:
    """The next step when ``exc`` (or its cause) says the endpoint cannot be reached."""
    chain = _chain(exc)
    if {type(e).__name__ for e in chain} & _UNREACHABLE or any(
        isinstance(e, (ConnectionError, TimeoutError)) for e in chain
    ):
        return (f"check the network and the endpoint ({_ENDPOINT_HINT}, or AWS_ENDPOINT_URL "
                "for S3)")
    return None


def endpoint_advice(what: str, exc: BaseException) -> str | None:
    """:func:`unreachable_advice` for a bucket URL; for an ``http(s)://`` URL, whose host is
    the endpoint (the failure names it), only a word on a host name that does not resolve.

    Args:
        what: The URL (and action) failed.
        exc: The failure.

    Returns:
        The advice, or ``None``.
    """
    if what.startswith(("http://", "https://")):
        return "check the host name in the URL" if is_dns_failure(exc) == "permanent" else None
    return unreachable_advice(exc)
