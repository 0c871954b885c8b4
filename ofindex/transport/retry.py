"""Retries of transient storage failures, as the cloud SDKs do them: capped exponential
backoff with jitter, within a number of retries and an overall deadline.

The jitter is "equal jitter" (each wait drawn from the upper half of its bound) rather than
botocore's and Google's full jitter (the whole ``[0, bound]``): a batch waits for its slowest
request, and with full jitter the slowest of 64 requests is the one that drew a long wait.
Simulated for 64 requests, 10 retries from 0.25 s: after a 2 s outage a batch resumes in
3.5 s (median; full jitter: 8.8 s), and outages of 10 and 30 s are survived (full jitter
gives up on 0.7 % and 99.6 % of batches), for the same spread of the retries in time.

Transient: dropped or reset connections, connections refused by a store that answered this
process before (a restart), timeouts, HTTP 5xx / 429 / 408, S3's ``SlowDown`` and the other
throttling codes, a DNS server that answered "try again". Never transient: missing files,
permissions, a name that does not resolve, a connection refused where nothing ever answered
(a mistyped port or endpoint: said at once, :func:`~.failures.nothing_listens`), a TLS
handshake that fails, bad arguments, and :class:`RangeReadError` for wrong bytes (retrying a
server that ignores ``Range`` only repeats the mistake). Throttling answers (429, 503,
``SlowDown``) back off from a longer base, as botocore's standard mode does.

An answer that the request *rate* is too high (429, S3's ``SlowDown``:
:func:`~.failures.is_rate_limited`) also slows the whole process down (:mod:`.pacing`: every
request to that store waits for its turn at a rate that adapts), so that few requests meet
one. As in botocore's adaptive mode, such an answer is retried like any transient failure:
``timeout`` bounds everything a request does (its attempts, its backoff waits, its waits for
its turn at the paced rate) and ``retries`` every resend (``0``: none). Before a wait that
would end past the deadline, the request is given up at once (a server answering only 429
with ``timeout=5`` fails in under 5 s, not after ``throttle_patience``).

The policy of the storages created by a call is set with :func:`retry_settings` (what
``ofindex.open(retries=, timeout=)``, ``build_index`` and the command line's ``--retries`` /
``--timeout`` use); a storage keeps the policy it was created with, also when pickled.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import errno
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from ..errors import RangeReadError, StorageError, hint
from .failures import (
    endpoint_advice,
    first_line,
    is_dns_failure,
    is_rate_limited,
    is_refused,
    is_throttled,
    is_tls_failure,
    network_cause,
    nothing_listens,
    status_of,
    translate,
    unwrap_not_found,
)
from .pacing import AdaptiveRate

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
    "HTTPClientError",  # botocore: the answer could not be read (retried by its standard mode)
}
#: Error codes of S3 (and other AWS services) worth retrying, as botocore's standard mode.
_TRANSIENT_CODES = {
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete", "InternalError",
    "ServiceUnavailable", "SlowDown", "Throttling", "ThrottlingException", "ThrottledException",
    "RequestThrottledException", "TooManyRequestsException", "RequestLimitExceeded",
    "BandwidthLimitExceeded", "RequestThrottled", "EC2ThrottledException",
}
#: Packages whose own exception classes mean "the request failed" (reported as RangeReadError
#: naming the URL when they are not worth retrying, instead of leaking to the caller).
_CLIENT_PACKAGES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google",
                    "s3fs", "gcsfs", "fsspec")
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
              ValueError, TypeError, KeyError, RangeReadError)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a request is retried and when a slow one is sent again.

    Attributes:
        retries: Attempts after the first (``0``: none).
        timeout: Seconds from the first attempt after which a request is given up (an
            attempt still running then is cancelled; no retry starts past it); ``None`` or
            ``inf`` for no limit.
        base_delay: The wait before the first retry is drawn from ``[base_delay / 2,
            base_delay]``; each further retry doubles both ends (equal jitter), up to
            ``max_delay``.
        throttle_delay: The same base for throttling answers (HTTP 429 and 503, ``SlowDown``).
        max_delay: No wait is longer.
        hedge_factor: A request of a batch still unanswered after ``hedge_factor`` times the
            batch's median answer time (and at least ``hedge_floor`` seconds) is sent once
            more, and the first answer wins.
        hedge_floor: See ``hedge_factor``.
        throttle_patience: Seconds a request may spend backing off after answers that the
            request rate is too high (429, ``SlowDown``), within ``timeout`` and ``retries``
            (a bound for a policy without a timeout). ``None`` or ``inf``: no other limit.
    """

    retries: int = 10
    timeout: float | None = 60.0
    base_delay: float = 0.25
    throttle_delay: float = 1.0
    max_delay: float = 20.0
    hedge_factor: float = 4.0
    hedge_floor: float = 1.0
    throttle_patience: float | None = 600.0

    @property
    def attempts(self) -> int:
        """Attempts in all (the first and the retries)."""
        return max(0, self.retries) + 1

    @property
    def deadline(self) -> float | None:
        """:attr:`timeout` as a finite number of seconds, or ``None``."""
        t = self.timeout
        return None if t is None or math.isinf(t) else float(t)

    def delay(self, failed: int, throttled: bool = False,
              rng: random.Random | None = None) -> float:
        """The wait after ``failed`` failed attempts (1 for the first retry).

        Args:
            failed: Failed attempts so far.
            throttled: The last was a throttling answer (a longer base).
            rng: Draws the jitter (default: the ``random`` module's).

        Returns:
            Seconds to wait.
        """
        base = self.throttle_delay if throttled else self.base_delay
        bound = min(self.max_delay, base * 2.0 ** max(0, failed - 1))
        return (rng or random).uniform(bound / 2, bound)


#: The policy of storages created now (``None``: the default :class:`RetryPolicy`).
_POLICY: contextvars.ContextVar[RetryPolicy | None] = contextvars.ContextVar(
    "ofindex_retry_policy", default=None)


def current_policy() -> RetryPolicy:
    """The policy a storage created now takes (see :func:`retry_settings`)."""
    return _POLICY.get() or RetryPolicy()


def with_settings(policy: RetryPolicy, retries: int | None = None,
                  timeout: float | None = None) -> RetryPolicy:
    """``policy`` with ``retries`` and ``timeout`` where given (``None`` keeps its own).

    Args:
        policy: The policy to start from.
        retries: Retries after the first attempt.
        timeout: Seconds after which a request is given up.

    Returns:
        The policy with the settings.

    Raises:
        ValueError: ``retries`` is negative or ``timeout`` not positive.
    """
    if retries is not None and (isinstance(retries, bool) or int(retries) != retries
                                or retries < 0):
        raise ValueError(f"retries must be a whole number >= 0, not {retries!r}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    changes: dict[str, float] = {}
    if retries is not None:
        changes["retries"] = int(retries)
    if timeout is not None:
        changes["timeout"] = float(timeout)
    return dataclasses.replace(policy, **changes) if changes else policy  # type: ignore[arg-type]


@contextlib.contextmanager
def retry_settings(retries: int | None = None, timeout: float | None = None, *,
                   policy: RetryPolicy | None = None) -> Iterator[RetryPolicy]:
    """Give the remote storages created inside the block ``retries`` and ``timeout``.

    Args:
        retries: Retries after the first attempt of a request (``None``: the default, 10).
        timeout: Seconds after which a request is given up, its retries included (``None``:
            the default, 60).
        policy: A whole policy to start from instead of the one in force (e.g. short waits).

    Yields:
        The policy in force inside the block.

    Raises:
        ValueError: A setting out of range.
    """
    chosen = with_settings(policy or current_policy(), retries, timeout)
    token = _POLICY.set(chosen)
    try:
        yield chosen
    finally:
        _POLICY.reset(token)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is worth retrying.

    Args:
        exc: The failure of one attempt.

    Returns:
        True for a transient failure (see the module's doc).
    """
    seen = 0
    current: BaseException | None = exc
    if is_tls_failure(exc) or is_dns_failure(exc) == "permanent":
        return False
    while current is not None and seen < 6:
        current = unwrap_not_found(current)  # fsspec's HTTP info: a 503 as FileNotFoundError
        # a FileNotFoundError is final even when a transient error is chained below it
        if (isinstance(current, _PERMANENT)
                and not isinstance(current, (ConnectionError, TimeoutError))
                and (not isinstance(current, OSError)
                     or current.errno not in _TRANSIENT_ERRNOS)):
            return False
        if isinstance(current, (ConnectionError, TimeoutError, asyncio.TimeoutError)):
            return True
        if type(current).__name__ in _TRANSIENT_NAMES:
            return True
        if _error_code(current) in _TRANSIENT_CODES:
            return True
        status = status_of(current)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(current, OSError) and current.errno in _TRANSIENT_ERRNOS:
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code") or "")
    return ""


_MORE_TIME = hint("retries= / timeout=", "--retries / --timeout")


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
    cause = network_cause(exc)
    err: OSError
    if cause is None:
        err = RangeReadError(
            f"{what}: {tries}: {first_line(exc)} (the server kept failing); try again later, "
            f"or wait longer with {_MORE_TIME}")
    else:
        err = StorageError(
            f"{what}: {tries}: {cause}; {endpoint_advice(what, exc) or 'check the network'}, "
            f"or wait longer with {_MORE_TIME} if the outage is passing")
    err.__cause__ = exc
    return err


def _from_client(exc: BaseException) -> bool:
    """Whether ``exc`` is a client library's own error (not a built-in one it raised)."""
    module = type(exc).__module__.split(".", 1)[0]
    return module in _CLIENT_PACKAGES and not isinstance(exc, (OSError, ValueError))


def permanent(what: str, exc: Exception) -> Exception:
    """What to raise for a failure not worth retrying: a client library's own error becomes a
    :class:`RangeReadError` naming ``what``; anything else is raised as it is.

    Args:
        what: The request, for the message.
        exc: The failure.

    Returns:
        The exception to raise.
    """
    if not _from_client(exc):
        return exc
    return RangeReadError(f"{what}: {type(exc).__name__}: {exc}")


class _Clock:
    """The time left to a request under its policy's deadline (everything it does counts:
    attempts, backoff, waits for the pacer), and its failures so far of each kind (throttling
    answers and the others back off each from their own count: a ``SlowDown`` after a few
    dropped connections waits as a first ``SlowDown`` does)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.start = time.monotonic()
        self.failed = {True: 0, False: 0}
        self.resent = 0  # attempts that failed and count against ``retries``
        self.rate_limits = 0  # answers that the request rate is too high
        self.rate_limited = 0.0  # seconds of backoff after them

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float | None:
        deadline = self.policy.deadline
        return None if deadline is None else deadline - self.elapsed

    def expired(self) -> bool:
        left = self.left()
        return left is not None and left <= 0.001

    def fits(self, wait: float) -> bool:
        """Whether a wait of ``wait`` seconds ends before the deadline."""
        left = self.left()
        return left is None or wait < left

    def timed_out(self, what: str, attempts: int) -> OSError:
        if self.rate_limits:
            return self.throttled(what, attempts, f"the timeout of {self.policy.timeout:g} s "
                                                  "is reached")
        return StorageError(
            f"{what}: no answer within {self.policy.timeout:g} s ({attempts} attempt"
            f"{'s' if attempts != 1 else ''}); the storage is slow or unreachable: check the "
            f"network, or wait longer with {_MORE_TIME}")

    def patient(self, pause: float) -> bool:
        """Whether a request answered "slow down" so far may back off ``pause`` more."""
        patience = self.policy.throttle_patience
        return patience is None or self.rate_limited + pause <= patience

    def throttled(self, what: str, attempts: int, why: str) -> StorageError:
        """The error for a request given up while the store answered that the request rate is
        too high (``why``: which bound ended it): the store refused to serve, a
        :class:`StorageError` (never a :class:`RangeReadError`, which says the bytes are not
        there)."""
        times = f"{self.rate_limits} time{'s' if self.rate_limits != 1 else ''}"
        return StorageError(
            f"{what}: the store answered that the request rate is too high (HTTP 429 or "
            f"SlowDown) {times} in {self.elapsed:.1f} s ({attempts} attempt"
            f"{'s' if attempts != 1 else ''}) and {why}; fewer readers or larger shuffle "
            f"blocks send fewer requests (see `ofindex plan`), or wait longer with "
            f"{_MORE_TIME}")


def _final(exc: Exception, what: str, attempts: int, clock: _Clock, why: str) -> Exception:
    """What to raise when ``exc`` is not retried (again, for ``why``): an ofindex error naming
    ``what``."""
    if is_rate_limited(exc):
        return clock.throttled(what, attempts, why)
    if is_transient(exc):
        return give_up(what, attempts, clock.elapsed, exc)
    translated = translate(exc, what)
    if translated is exc:
        return permanent(what, exc)
    assert isinstance(translated, Exception)
    return translated


def _pause(exc: Exception, attempt: int, clock: _Clock, what: str,
           pacer: AdaptiveRate | None) -> float:
    """The wait before the next attempt after ``exc``; raises the error to report instead when
    ``exc`` ends the retries (not transient, a refused connection where nothing ever answered,
    the last attempt, past the deadline, or out of ``throttle_patience``)."""
    policy = clock.policy
    rate_limited = is_rate_limited(exc)
    if rate_limited:
        clock.rate_limits += 1
    elif is_refused(exc) and (pacer is None or not pacer.answered):
        raise nothing_listens(what, exc) from exc
    transient = is_transient(exc)
    if transient and clock.expired():
        raise clock.timed_out(what, attempt + 1) from exc
    throttled = is_throttled(exc)
    clock.failed[throttled] += 1
    pause = policy.delay(clock.failed[throttled], throttled) if transient else 0.0
    clock.resent += 1
    if not transient or clock.resent >= policy.attempts or not clock.fits(pause):
        why = (hint(f"no retry is left (retries={policy.retries})",
                    f"no retry is left (--retries {policy.retries})")
               if clock.resent >= policy.attempts else
               f"the next try would pass the timeout of {policy.timeout:g} s")
        final = _final(exc, what, attempt + 1, clock, why)
        if final is exc:
            raise exc
        raise final from exc
    if rate_limited:
        if not clock.patient(pause):
            raise clock.throttled(what, attempt + 1, "RetryPolicy(throttle_patience="
                                  f"{policy.throttle_patience:g}) is used up") from exc
        clock.rate_limited += pause
    return pause


def _turn(pacer: AdaptiveRate, clock: _Clock, what: str,
          attempt: int) -> tuple[float, float | None]:
    """This request's turn at the store's paced rate: ``(wait, ticket)`` as
    :meth:`AdaptiveRate.reserve`; raises the error to report when the wait would end past the
    deadline."""
    wait, ticket = pacer.reserve()
    if wait > 0 and not clock.fits(wait):
        raise clock.throttled(what, attempt + 1, f"waiting for a turn at the rate it allows "
                                                 f"would pass the timeout of "
                                                 f"{clock.policy.timeout:g} s")
    return wait, ticket


#: ``asyncio.timeout`` where there is one (Python 3.11+): ``wait_for`` makes a task of every
#: attempt, a tenth of a millisecond a request on a busy core.
_TIMEOUT: Callable[[float], AbstractAsyncContextManager[None]] | None = getattr(
    asyncio, "timeout", None)


async def retry_async(fn: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str,
                      on_retry: Callable[[], None] | None = None,
                      pacer: AdaptiveRate | None = None) -> T:
    """Await ``fn()`` (each attempt within what is left of ``policy.timeout``); retry
    transient failures; then raise an ofindex error naming ``what`` (the URL and byte range).

    Args:
        fn: Makes one attempt.
        policy: The retries, waits and deadline.
        what: The request, for messages.
        on_retry: Called before each retry (to count them).
        pacer: The store's shared request rate (:mod:`.pacing`): each attempt waits for its
            turn, and tells it of a rate-limiting answer or a success.

    Returns:
        What ``fn()`` returned.

    Raises:
        StorageError: The storage could not be reached (nothing listens at the address: at
            once), gave no answer within the deadline, or kept answering that the request
            rate is too high until a bound (``retries``, ``timeout``, ``throttle_patience``).
        RangeReadError: It kept answering with errors, or wrong bytes.
        DataFileNotFoundError: It said the file does not exist.
    """
    clock = _Clock(policy)
    attempt = 0
    while True:
        ticket_at = 0.0
        while pacer is not None:  # wait for this request's turn at the store's rate
            wait, ticket = _turn(pacer, clock, what, attempt)
            if wait > 0:
                await asyncio.sleep(wait)
            if ticket is not None:
                ticket_at = ticket
                break
        left = clock.left()
        try:
            if left is None:
                got = await fn()
            elif _TIMEOUT is not None:  # 3.11+: cut the attempt without a task of its own
                async with _TIMEOUT(max(left, 0.001)):
                    got = await fn()
            else:
                got = await asyncio.wait_for(fn(), max(left, 0.001))
        except Exception as exc:
            _tell(pacer, exc, ticket_at)
            pause = _pause(exc, attempt, clock, what, pacer)
            if on_retry is not None:
                on_retry()
            await asyncio.sleep(pause)
            attempt += 1
            continue
        if pacer is not None:
            pacer.succeeded()
        return got


def retry_sync(fn: Callable[[], T], policy: RetryPolicy, what: str,
               on_retry: Callable[[], None] | None = None,
               pacer: AdaptiveRate | None = None) -> T:
    """Synchronous :func:`retry_async` for synchronous filesystems (``memory://``): an attempt
    is not cut at the deadline (no wait or retry starts past it); calls of an asynchronous
    filesystem go through :func:`retry_async` on its loop, which cuts them."""
    clock = _Clock(policy)
    attempt = 0
    while True:
        ticket_at = 0.0
        while pacer is not None:  # wait for this request's turn at the store's rate
            wait, ticket = _turn(pacer, clock, what, attempt)
            if wait > 0:
                time.sleep(wait)
            if ticket is not None:
                ticket_at = ticket
                break
        try:
            got = fn()
        except Exception as exc:
            _tell(pacer, exc, ticket_at)
            pause = _pause(exc, attempt, clock, what, pacer)
            if on_retry is not None:
                on_retry()
            time.sleep(pause)
            attempt += 1
            continue
        if pacer is not None:
            pacer.succeeded()
        return got


def _tell(pacer: AdaptiveRate | None, exc: Exception, ticket_at: float) -> None:
    """Tell the pacer of a rate-limiting answer (it lowers the rate), and that the store
    answered when the failure is not the network's (something listens there)."""
    if pacer is None:
        return
    if is_rate_limited(exc):
        pacer.throttled(ticket_at)
    if network_cause(exc) is None:
        pacer.heard()
