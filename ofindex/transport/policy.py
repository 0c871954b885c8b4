"""One policy for every request: how it is retried, how long it may take, its turn at the pace
a throttled store allows, and when a slow one is sent again (:class:`RequestPolicy`).

**Retries** are those of the cloud SDKs: capped exponential backoff with jitter, within a
number of retries and an overall deadline. The jitter is "equal jitter" (each wait drawn from
the upper half of its bound) rather than botocore's and Google's full jitter (the whole
``[0, bound]``): a batch waits for its slowest request, and with full jitter the slowest of 64
requests is the one that drew a long wait. Simulated for 64 requests, 10 retries from 0.25 s:
after a 2 s outage a batch resumes in 3.5 s (median; full jitter: 8.8 s), and outages of 10 and
30 s are survived (full jitter gives up on 0.7 % and 99.6 % of batches), for the same spread of
the retries in time. Throttling answers (429, 503, ``SlowDown``) back off from a longer base, as
botocore's standard mode does. What is worth retrying: :func:`.failures.classify`. The loop is
our own: the same decisions on tenacity's ``AsyncRetrying`` behave the same under injected
faults and cost 5 times the CPU per request.

**The deadline** (``timeout``) bounds everything a request does: its attempts (one still
running then is cut), its backoff waits and its waits for its turn at a paced rate; before a
wait that would end past it the request is given up at once (a server answering only 429 with
``timeout=5`` fails in under 5 s). ``retries`` bounds every resend (``0``: none).

**Pacing**: an answer that the request *rate* is too high (429, S3's ``SlowDown``:
:class:`.failures.Failure`) is retried like any transient failure, and also slows the whole
process down (:class:`AdaptiveRate`: every request to that store waits for its turn at a rate
that adapts, as in botocore's adaptive mode), so that few requests meet one. Unlike
botocore's, which applies to S3 clients only, it paces every protocol, and it lowers the rate
once per round of answers rather than on each (botocore's falls to its floor at the onset of
throttling: a second with nothing answered; through s3fs against a store throttling at 100
GET/s, ours read 77 ranges/s and aiobotocore's adaptive mode 41, and its readers cancelled
while waiting for a token could hang on Python 3.11).

**Hedging**: a request of a batch far slower than its peers is sent once more and the first
answer wins (:class:`Hedger`). Object stores advise it for tail latency (S3: "track and
aggressively retry slower operations"; a request sent again takes another connection, often
another server): with 2 of 64 requests stalled 3 s a batch takes 1.0 s instead of 3.1 s, and
without a stall nothing is sent again.

The policy of the storages created by a call is set with :func:`retry_settings` (what
``ofindex.open(retries=, timeout=)``, ``build_index`` and the command line's ``--retries`` /
``--timeout`` use); a storage keeps the policy it was created with, also when pickled. The
measurements behind each part (and the libraries each was compared with): docs/design.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import math
import os
import random
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

from ..errors import DataFileNotFoundError, StorageError, hint
from .failures import Failure, classify, give_up, nothing_listens, permanent

T = TypeVar("T")

_MORE_TIME = hint("retries= / timeout=", "--retries / --timeout")


class Counts(Protocol):
    """Where a storage counts its data requests, the bytes they moved, and the requests sent
    again after a failure or for being slow."""

    requests: int
    bytes_read: int
    retries: int
    hedged: int


@dataclasses.dataclass(frozen=True)
class RequestPolicy:
    """How a request is retried, bounded in time, paced and hedged (see the module).

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
            more, and the first answer wins (``0``: never).
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

    def with_settings(self, retries: int | None = None,
                      timeout: float | None = None) -> RequestPolicy:
        """This policy with ``retries`` and ``timeout`` where given (``None`` keeps its own).

        Args:
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
        return dataclasses.replace(
            self, retries=self.retries if retries is None else int(retries),
            timeout=self.timeout if timeout is None else float(timeout))

    def hedger(self, size: int, counts: Counts | None = None) -> Hedger:
        """What hedges the requests of a batch of ``size`` requests (counted in ``counts``)."""
        return Hedger(self, size, counts)

    async def run(self, attempt: Callable[[], Awaitable[T]], what: str, *,
                  pacer: AdaptiveRate | None = None, counts: Counts | None = None,
                  hedger: Hedger | None = None) -> T:
        """Await ``attempt()`` under this policy: each attempt waits for its turn at the
        store's pace and runs within what is left of the deadline (hedged when ``hedger`` is
        given); transient failures are retried; then an ofindex error naming ``what`` is
        raised.

        Args:
            attempt: Makes one attempt.
            what: The request (URL and byte range), for messages.
            pacer: The store's shared request rate (:class:`AdaptiveRate`): told of rate-limiting
                answers and successes.
            counts: Where retries (and hedges) are counted.
            hedger: Hedges each attempt against the batch's others.

        Returns:
            What ``attempt()`` returned.

        Raises:
            StorageError: The storage could not be reached (nothing listens at the address: at
                once), gave no answer within the deadline, or kept answering that the request
                rate is too high until a bound (``retries``, ``timeout``,
                ``throttle_patience``).
            RangeReadError: It kept answering with errors, or wrong bytes.
            DataFileNotFoundError: It said the file does not exist.
        """
        request = _Request(self, what, pacer)
        once = attempt if hedger is None else lambda: hedger.run(attempt)
        while True:
            ticket = await request.turn()
            try:
                got = await request.within_deadline(once)
            except DataFileNotFoundError:
                # our clients' answer that the store has no such file (a 404, a missing
                # key): final, and nothing to classify (an open probes for optional files,
                # its binary manifest first: a miss there is no failure)
                if pacer is not None:
                    pacer.heard()
                raise
            except Exception as exc:
                pause = request.after(exc, ticket)
                if counts is not None:
                    counts.retries += 1
                await asyncio.sleep(pause)
                continue
            if pacer is not None:
                pacer.succeeded()
            return got


#: ``asyncio.timeout`` where there is one (Python 3.11+): ``wait_for`` makes a task of every
#: attempt, a tenth of a millisecond a request on a busy core.
_TIMEOUT: Callable[[float], AbstractAsyncContextManager[None]] | None = getattr(
    asyncio, "timeout", None)


class _Request:
    """One request under a policy: the time left to its deadline (everything it does counts:
    attempts, backoff, waits for the pacer), and its failures so far of each kind (throttling
    answers and the others back off each from their own count: a ``SlowDown`` after a few
    dropped connections waits as a first ``SlowDown`` does)."""

    def __init__(self, policy: RequestPolicy, what: str, pacer: AdaptiveRate | None) -> None:
        self.policy, self.what, self.pacer = policy, what, pacer
        self.start = time.monotonic()
        self.failed = {True: 0, False: 0}
        self.attempts = 0  # attempts made (each counts against ``retries``)
        self.rate_limits = 0  # answers that the request rate is too high
        self.rate_limited = 0.0  # seconds of backoff after them

    def left(self) -> float | None:
        deadline = self.policy.deadline
        return None if deadline is None else deadline - (time.monotonic() - self.start)

    def fits(self, wait: float) -> bool:
        """Whether a wait of ``wait`` seconds ends before the deadline."""
        left = self.left()
        return left is None or wait < left

    async def turn(self) -> float:
        """Wait for this request's turn at the store's paced rate; returns its ticket (see
        :meth:`AdaptiveRate.reserve`). Raises the error to report when the wait would end past
        the deadline."""
        while self.pacer is not None:
            wait, ticket = self.pacer.reserve()
            if wait > 0 and not self.fits(wait):
                raise self.throttled(f"waiting for a turn at the rate it allows would pass "
                                     f"the timeout of {self.policy.timeout:g} s",
                                     self.attempts + 1)
            if wait > 0:
                await asyncio.sleep(wait)
            if ticket is not None:
                return ticket
        return 0.0

    async def within_deadline(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``await attempt()``, cut at the deadline."""
        self.attempts += 1
        left = self.left()
        if left is None:
            return await attempt()
        if _TIMEOUT is not None:  # 3.11+: cut the attempt without a task of its own
            async with _TIMEOUT(max(left, 0.001)):
                return await attempt()
        return await asyncio.wait_for(attempt(), max(left, 0.001))

    def after(self, exc: Exception, ticket: float) -> float:
        """The wait before the next attempt after ``exc``; raises the error to report instead
        when ``exc`` ends the retries (not transient, a refused connection where nothing ever
        answered, the last attempt, past the deadline, or out of ``throttle_patience``)."""
        policy, pacer, failure = self.policy, self.pacer, classify(exc)
        if pacer is not None:
            if failure.rate_limited:
                pacer.throttled(ticket)
            if failure.network is None:
                pacer.heard()  # the store answered: something listens there
        if failure.rate_limited:
            self.rate_limits += 1
        elif failure.refused and (pacer is None or not pacer.answered):
            raise nothing_listens(self.what, exc) from exc
        left = self.left()
        if failure.transient and left is not None and left <= 0.001:
            raise self.timed_out() from exc
        self.failed[failure.throttled] += 1
        pause = (policy.delay(self.failed[failure.throttled], failure.throttled)
                 if failure.transient else 0.0)
        if not failure.transient or self.attempts >= policy.attempts or not self.fits(pause):
            final = self.final(exc, failure)
            if final is exc:
                raise exc
            raise final from exc
        if failure.rate_limited:
            if policy.throttle_patience is not None \
                    and self.rate_limited + pause > policy.throttle_patience:
                raise self.throttled(f"RequestPolicy(throttle_patience="
                                     f"{policy.throttle_patience:g}) is used up") from exc
            self.rate_limited += pause
        return pause

    def final(self, exc: Exception, failure: Failure) -> Exception:
        """What to raise when ``exc`` is not retried: an ofindex error naming the request."""
        policy = self.policy
        if self.attempts >= policy.attempts:
            why = hint(f"no retry is left (retries={policy.retries})",
                       f"no retry is left (--retries {policy.retries})")
        else:
            why = f"the next try would pass the timeout of {policy.timeout:g} s"
        if failure.rate_limited:
            return self.throttled(why)
        if failure.transient:
            return give_up(self.what, self.attempts, time.monotonic() - self.start, exc)
        return permanent(self.what, exc)

    def timed_out(self) -> OSError:
        if self.rate_limits:
            return self.throttled(f"the timeout of {self.policy.timeout:g} s is reached")
        return StorageError(
            f"{self.what}: no answer within {self.policy.timeout:g} s ({_times(self.attempts)}"
            f"); the storage is slow or unreachable: check the network, or wait longer with "
            f"{_MORE_TIME}")

    def throttled(self, why: str, attempts: int | None = None) -> StorageError:
        """The error for a request given up while the store answered that the request rate is
        too high (``why``: which bound ended it): the store refused to serve, a
        :class:`StorageError` (never a :class:`RangeReadError`, which says the bytes are not
        there)."""
        times = f"{self.rate_limits} time{'s' if self.rate_limits != 1 else ''}"
        tried = _times(self.attempts if attempts is None else attempts)
        return StorageError(
            f"{self.what}: the store answered that the request rate is too high (HTTP 429, "
            f"SlowDown or ServerBusy) {times} in {time.monotonic() - self.start:.1f} s "
            f"({tried}) and {why}; fewer readers or larger shuffle blocks send fewer requests "
            f"(see `ofindex plan`), or wait longer with {_MORE_TIME}")


def _times(attempts: int) -> str:
    return f"{attempts} attempt{'s' if attempts != 1 else ''}"


class Hedger:
    """The answer times of one batch's requests, and the runner that hedges the slow ones.

    A request is hedged when it has run longer than ``hedge_factor`` times the median answer
    time of the requests of its batch that have answered, and at least ``hedge_floor``
    seconds (so that a fast store is never asked twice for nothing); a batch hedges nothing
    before a quarter of its requests (and at least two) have answered, since until then no
    peer says what slow is.

    Args:
        policy: Its ``hedge_factor`` and ``hedge_floor`` say when a request is slow.
        size: Requests in the batch.
        counts: Where each request sent again is counted.
    """

    def __init__(self, policy: RequestPolicy, size: int, counts: Counts | None = None) -> None:
        self.factor, self.floor = policy.hedge_factor, policy.hedge_floor
        self.enough = max(2, size // 4)
        self.enabled = size >= 2 and self.factor > 0
        self.times: list[float] = []
        self.counts = counts

    def threshold(self) -> float | None:
        """Seconds after which a request of the batch is slow, or ``None`` while too few have
        answered to say."""
        if len(self.times) < self.enough:
            return None
        return max(self.factor * statistics.median(self.times), self.floor)

    async def run(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Await ``attempt()``; when it turns out slow, start a second ``attempt()`` and return
        the first answer (a failure of one waits for the other; both failing raises the
        first failure). The attempt still running then is cancelled.

        Args:
            attempt: Makes one request.

        Returns:
            The first answer.

        Raises:
            Exception: What the attempt raised (both, when hedged).
        """
        if not self.enabled:
            return await attempt()
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks: set[asyncio.Future[T]] = {asyncio.ensure_future(attempt())}
        try:
            while len(tasks) == 1:
                limit, waited = self.threshold(), loop.time() - start
                # too few answers yet to say what slow is (past the floor): look again soon
                wait = (self.floor / 4 if limit is None and waited >= self.floor
                        else (limit or self.floor) - waited)
                done, _ = await asyncio.wait(tasks, timeout=max(0.01, wait))
                if done:
                    break
                limit = self.threshold()
                if limit is not None and loop.time() - start >= limit:
                    if self.counts is not None:
                        self.counts.hedged += 1
                    tasks.add(asyncio.ensure_future(attempt()))
            failure: BaseException | None = None
            while tasks:  # the first answer wins; a failure waits for the other attempt
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    exc = task.exception()
                    if exc is None:
                        self.times.append(loop.time() - start)
                        return task.result()
                    failure = failure or exc
            assert failure is not None
            raise failure
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)


#: The rate falls to this fraction of the measured sending rate on a rate-limiting answer.
BETA = 0.7
#: The cubic curve's scale (requests/s per s^3): botocore's constant.
SCALE = 0.4
#: Never slower than this (requests per second).
MIN_RATE = 0.5
#: Seconds of requests the bucket holds at most: small bursts stay small.
BURST_SECONDS = 0.25
#: Seconds ahead a token is reserved at most (a request further back asks again then).
HORIZON = 0.25
#: Seconds over which the sending rate is measured.
WINDOW = 1.0
#: Seconds without a rate-limiting answer after which the process stops pacing.
RELAX_SECONDS = 60.0


class AdaptiveRate:
    """The request rate of this process to one store scope: client-side pacing.

    One per store scope (the bucket of ``s3://`` / ``gs://`` URLs, the host of ``http(s)://``
    ones) is shared by every request of the process (:func:`pacer_for`). Until the store first
    answers a rate-limiting error it does nothing; from then on each request takes a token from
    a bucket refilled at the client's rate, waiting for one when there is none:

    * on a rate-limiting answer, the rate drops to BETA (0.7) times the rate the process was
      sending at (measured over the last second), once per round of requests: an answer to a
      request sent before the last drop does not drop it again (those were sent at the old rate;
      botocore's adaptive mode drops on each, see docs/design.md);
    * on each success, the rate grows back along a cubic curve (TCP CUBIC's, as botocore's
      CubicCalculator): scale * (t - K)^3 + W_max, where W_max is the rate at the last drop, t
      the seconds since it and K the time at which the curve regains W_max: fast far below the
      rate that was throttled, slow near it, probing past it after K; never more than twice the
      rate the process sends at (a rate it does not use says nothing);
    * after RELAX_SECONDS without a rate-limiting answer it lets go (no pacing, as before the
      first one): by then the curve is far above any rate a process sends at.

    So a sustained throttle holds the process near the store's share of it, and a store that
    grows (S3 partitions a busy prefix, GCS doubles a bucket's capacity every 20 minutes) is
    followed. The clock is injectable: a simulation in virtual time and the tests are
    deterministic. A pacer also remembers whether its store ever answered this process: a
    refused connection to a store that answered before is a restart or an outage, worth
    retrying; to one that never did, nothing listens at the address.

    Args:
        clock: Seconds, monotonic (default :func:`time.monotonic`).
        answered: The store answered this process already (a forked child's pacer inherits
            its parent's word).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 answered: bool = False) -> None:
        self.clock = clock
        #: The store answered a request of this process (successfully or not) at least once.
        self.answered = answered
        self.enabled = False
        self.rate = 0.0  # requests per second allowed (once enabled)
        self.tokens = 0.0
        self.refilled = clock()
        self.peak = 0.0  # W_max: the rate the last drop was from
        self.dropped_at = -float("inf")
        self.sent: collections.deque[float] = collections.deque()
        self.throttles = 0  # rate-limiting answers seen
        self.drops = 0  # times the rate was lowered
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        state = f"{self.rate:.1f}/s" if self.enabled else "not limited"
        return f"AdaptiveRate({state}, {self.throttles} throttled)"

    # -- sending ---------------------------------------------------------------------------
    def reserve(self) -> tuple[float, float | None]:
        """Take a token for one request, or say when to ask again.

        A token is reserved only within :data:`HORIZON` seconds: a request further back in
        the queue is told to come back (and ask at the rate of then) rather than committed to
        a wait computed at a rate that may have grown meanwhile.

        Returns:
            ``(wait, ticket)``: wait ``wait`` seconds, then send the request if ``ticket`` is
            not ``None`` (the clock time its token was taken at, the rate of then: pass it to
            :meth:`throttled`), else call again (then a token is within reach at the rate of
            now).
        """
        with self.lock:
            now = self.clock()
            wait = 0.0
            if self.enabled:
                self.tokens = min(self.tokens + (now - self.refilled) * self.rate,
                                  max(1.0, self.rate * BURST_SECONDS))
                self.refilled = now
                if self.tokens < 1.0:
                    wait = (1.0 - self.tokens) / self.rate
                    if wait > HORIZON * (1 + 1e-9):  # (rounding must not keep it out)
                        return max(wait - HORIZON, 1e-6), None
                self.tokens -= 1.0
            send = now + wait
            self.sent.append(send)
            while self.sent and self.sent[0] <= send - WINDOW:
                self.sent.popleft()
            return wait, now

    def measured(self, now: float) -> float:
        """Requests per second sent over the last :data:`WINDOW` seconds."""
        while self.sent and self.sent[0] <= now - WINDOW:
            self.sent.popleft()
        return len(self.sent) / WINDOW

    # -- answers ---------------------------------------------------------------------------
    def throttled(self, ticket: float) -> None:
        """The store answered a request that it is over its rate: lower the rate (once per
        round: not for requests whose token was taken before the last drop, at the rate that
        was already lowered).

        Args:
            ticket: What :meth:`reserve` gave for the request.
        """
        with self.lock:
            self.throttles += 1
            if ticket < self.dropped_at:
                return
            now = self.clock()
            sending = self.measured(now)
            base = min(sending, self.rate) if self.enabled else sending
            self.peak = max(base, MIN_RATE)
            self.rate = max(MIN_RATE, base * BETA)
            self.tokens = min(self.tokens, 0.0)
            self.refilled = now
            self.dropped_at = now
            self.enabled = True
            self.drops += 1

    def heard(self) -> None:
        """The store answered a request (whatever it said): something listens there."""
        self.answered = True

    def succeeded(self) -> None:
        """The store answered a request: let the rate grow along the cubic curve."""
        self.answered = True
        if not self.enabled:
            return
        with self.lock:
            now = self.clock()
            elapsed = now - self.dropped_at
            if elapsed > RELAX_SECONDS:
                self.enabled = False
                return
            knee = (self.peak * (1.0 - BETA) / SCALE) ** (1.0 / 3.0)
            cubic = SCALE * (elapsed - knee) ** 3 + self.peak
            cap = max(2.0 * self.measured(now), MIN_RATE)
            grown = min(cubic, cap)
            if grown > self.rate:  # the curve only raises it; drops come from throttling
                self.tokens = min(self.tokens + (now - self.refilled) * self.rate,
                                  max(1.0, self.rate * BURST_SECONDS))
                self.refilled = now
                self.rate = grown


def scope_of(protocol: str, path: str) -> str:
    """What a store counts a request's rate against, as far as this process can tell: the
    bucket (``s3``, ``gs``: the first part of the path) or the host (``http(s)``).

    Args:
        protocol: The fsspec protocol.
        path: The path or URL of the request.

    Returns:
        ``protocol://scope``.
    """
    rest = path.split("://", 1)[-1].lstrip("/")
    return f"{protocol}://{rest.split('/', 1)[0]}"


_PACERS: dict[str, AdaptiveRate] = {}
_PACERS_PID = [os.getpid()]
_PACERS_LOCK = threading.Lock()


def pacer_for(protocol: str, path: str) -> AdaptiveRate:
    """This process's :class:`AdaptiveRate` for the scope of ``path`` (made on first use; a
    forked child starts its own: the rate measured by its parent is not the child's, but a
    store that answered the parent is known to listen).

    Args:
        protocol: The fsspec protocol.
        path: The path or URL of the request.

    Returns:
        The shared pacer.
    """
    key = scope_of(protocol, path)
    with _PACERS_LOCK:
        if _PACERS_PID[0] != os.getpid():
            answered = [scope for scope, parents in _PACERS.items() if parents.answered]
            _PACERS.clear()
            _PACERS.update((scope, AdaptiveRate(answered=True)) for scope in answered)
            _PACERS_PID[0] = os.getpid()
        pacer = _PACERS.get(key)
        if pacer is None:
            pacer = _PACERS[key] = AdaptiveRate()
        return pacer


def forget_pacers() -> None:
    """Drop this process's pacers: every store is unpaced again (for tests and benchmarks that
    throttle on purpose)."""
    with _PACERS_LOCK:
        _PACERS.clear()


#: The policy of storages created now (``None``: the default :class:`RequestPolicy`).
_POLICY: contextvars.ContextVar[RequestPolicy | None] = contextvars.ContextVar(
    "ofindex_request_policy", default=None)


def current_policy() -> RequestPolicy:
    """The policy a storage created now takes (see :func:`retry_settings`)."""
    return _POLICY.get() or RequestPolicy()


@contextlib.contextmanager
def retry_settings(retries: int | None = None, timeout: float | None = None, *,
                   policy: RequestPolicy | None = None) -> Iterator[RequestPolicy]:
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
    chosen = (policy or current_policy()).with_settings(retries, timeout)
    token = _POLICY.set(chosen)
    try:
        yield chosen
    finally:
        _POLICY.reset(token)
