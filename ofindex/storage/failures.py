"""Failures of storage clients (botocore, aiohttp, gcsfs, the OS) as one-line ofindex errors
that name the URL, the cause and the next step."""

import errno
import re

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
    advice = unreachable_advice(exc)
    if advice:
        return StorageError(f"{what}: cannot reach the storage ({first_line(exc)}); {advice}")
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


_OS_ADVICE = {
    errno.EACCES: "check its permissions (ls -l), or run as a user who may read and write it",
    errno.EPERM: "check its permissions (ls -l), or run as a user who may read and write it",
    errno.EROFS: "the file system is read-only: keep the sidecars elsewhere with --index-dir",
    errno.ENOSPC: "the disk is full: free some space, or keep the sidecars elsewhere with "
                  "--index-dir",
    errno.EISDIR: "name a file, or the directory itself without a trailing glob",
}


def describe(exc: BaseException) -> tuple[str, bool]:
    """One line for a failure that no layer translated (the command line prints it).

    Returns:
        ``(line, foreseen)``: ``foreseen`` is true for failures the line fully explains (an
        operating-system error on a named file), false for the unexpected ones.
    """
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        advice = _OS_ADVICE.get(exc.errno or 0)
        line = f"{exc.filename}: {exc.strerror}" + (f"; {advice}" if advice else "")
        return line, True
    return first_line(exc), False
