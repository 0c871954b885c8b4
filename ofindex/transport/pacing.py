"""Client-side request-rate adaptation: a process slows its requests to a store that answers
"slow down" instead of failing them, as the AWS SDKs' *adaptive* retry mode does.

One :class:`AdaptiveRate` per store scope (the bucket of ``s3://`` / ``gs://`` URLs, the host
of ``http(s)://`` ones) is shared by every request of the process (:func:`pacer_for`). Until
the store first answers a rate-limiting error (HTTP 429, S3 ``SlowDown``, GCS ``429``: see
:func:`ofindex.transport.failures.is_rate_limited`) it does nothing. From then on each request
takes a token from a bucket refilled at the client's rate, waiting for one when there is none:

* on a rate-limiting answer, the rate drops to ``beta`` (0.7) times the rate the process was
  sending at (measured over the last second), once per round of requests: an answer to a
  request sent before the last drop does not drop it again (those were sent at the old rate);
* on each success, the rate grows back along a cubic curve (TCP CUBIC's, as botocore's
  ``CubicCalculator``): ``scale * (t - K)^3 + W_max``, where ``W_max`` is the rate at the last
  drop, ``t`` the seconds since it and ``K`` the time at which the curve regains ``W_max``: fast
  far below the rate that was throttled, slow near it, probing past it after ``K``; never more
  than twice the rate the process sends at (a rate it does not use says nothing);
* after :data:`RELAX_SECONDS` without a rate-limiting answer it lets go (no pacing, as before
  the first one): by then the curve is far above any rate a process sends at.

So a sustained throttle holds the process near the store's share of it, and a store that grows
(S3 partitions a busy prefix, GCS doubles a bucket's capacity every 20 minutes) is followed.
The clock is injectable (``clock=``): a simulation in virtual time and the tests are
deterministic.

A pacer also remembers whether its store ever answered this process (:attr:`AdaptiveRate.
answered`): a refused connection to a store that answered before is a restart or an outage,
worth retrying; to one that never did, nothing listens at the address (:mod:`.retry`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable

__all__ = ["AdaptiveRate", "forget_pacers", "pacer_for", "scope_of"]

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
    """The request rate of this process to one store scope (see the module).

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
