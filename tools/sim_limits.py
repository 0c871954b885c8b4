"""The request-rate limits and request prices of a real object store, for ``simstore://``
(``tools/sim_store.py``): a request over the limit is answered as S3 (``503 SlowDown``) or GCS
(``429``) answers it, through the exception the real client library raises, so that the reader
meets exactly what it meets in the cloud.

The figures are :data:`ofindex.planning.stores.STORES` (each with its public source). The
model of the store, not measured on it:

* each *scope* (S3: the object's prefix, the key up to its last ``/``; GCS: the bucket, the
  first part of the path) has a token bucket refilled at the store's read rate (GCS: the rate
  doubles every 20 minutes after the scope's first request, as a bucket under sustained load
  grows) and holding at most ``burst_seconds`` of it: a request finding no token is
  throttled. Real stores smooth over some seconds and grow on their own schedule; the bucket
  is the simplest model with the documented steady rate;
* only answered requests are priced (S3 and GCS do not charge throttled answers' data; the
  model counts them apart so a reader of the figures can price them too).

Everything runs on an injectable clock (``clock=``), so a simulation in virtual time and a
test are deterministic.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

from ofindex.planning.stores import StoreLimits, store_limits


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` held; a request takes one or is refused."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, max(1.0, burst)
        self.tokens, self.last = self.burst, now

    def take(self, now: float, rate: float | None = None) -> bool:
        """Whether a request at ``now`` gets a token (``rate``: the refill rate from now)."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if rate is not None:
            self.rate = rate
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclasses.dataclass
class ScopeMeter:
    """What one scope was asked: requests answered and throttled, by whole second."""

    answered: int = 0
    throttled: int = 0
    first: float = math.nan
    per_second: dict[int, int] = dataclasses.field(default_factory=dict)

    def peak_rate(self) -> int:
        """The most requests answered in one whole second."""
        return max(self.per_second.values(), default=0)


class StoreThrottle:
    """The limits of one store applied to the requests of ``simstore://``.

    Args:
        limits: The store (``store_limits("s3", reads_per_second=200)`` for a low limit).
        clock: Seconds, monotonic (default :func:`time.monotonic`).
        burst_seconds: Seconds of the rate a scope's bucket holds.
    """

    def __init__(self, limits: StoreLimits, clock: Callable[[], float] = time.monotonic,
                 burst_seconds: float = 1.0) -> None:
        self.limits, self.clock, self.burst_seconds = limits, clock, burst_seconds
        self.buckets: dict[str, TokenBucket] = {}
        self.meters: dict[str, ScopeMeter] = {}
        self.lock = threading.Lock()

    @classmethod
    def named(cls, store: str, reads_per_second: float | None = None,
              **kwargs: Callable[[], float] | float) -> StoreThrottle:
        """The throttle of store ``store`` (``s3``, ``gcs``), its rate replaced if given."""
        return cls(store_limits(store, reads_per_second=reads_per_second), **kwargs)  # type: ignore[arg-type]

    def scope_of(self, path: str) -> str:
        """The prefix (S3) or bucket (GCS) a request for ``path`` counts against."""
        path = path.split("://", 1)[-1].strip("/")
        if self.limits.scope == "prefix":
            return path.rsplit("/", 1)[0] if "/" in path else ""
        return path.split("/", 1)[0]

    def admit(self, path: str) -> bool:
        """Count a request for ``path``; whether the store answers it (else: throttled)."""
        scope = self.scope_of(path)
        now = self.clock()
        with self.lock:
            meter = self.meters.setdefault(scope, ScopeMeter(first=now))
            rate = self.limits.rate_after(now - meter.first)
            bucket = self.buckets.get(scope)
            if bucket is None:
                bucket = self.buckets[scope] = TokenBucket(rate, rate * self.burst_seconds, now)
            ok = math.isinf(rate) or bucket.take(now, rate)
            if ok:
                meter.answered += 1
                second = int(now - meter.first)
                meter.per_second[second] = meter.per_second.get(second, 0) + 1
            else:
                meter.throttled += 1
            return ok

    def check(self, path: str) -> None:
        """:meth:`admit`, raising what the store's client raises when throttled."""
        if not self.admit(path):
            raise throttled_error(self.limits.name, path)

    def answered(self) -> int:
        return sum(m.answered for m in self.meters.values())

    def throttled(self) -> int:
        return sum(m.throttled for m in self.meters.values())

    def dollars(self) -> float:
        """The price of the answered requests."""
        return self.limits.dollars(self.answered())


def throttled_error(store: str, path: str) -> Exception:
    """The exception the client library raises for a throttled read of ``path``: s3fs's
    ``OSError(EBUSY)`` from botocore's ``ClientError`` (``SlowDown``, HTTP 503) for S3,
    gcsfs's ``HttpError`` (code 429) for GCS; a plain stand-in with the status when the
    library is not installed."""
    if store == "gcs":
        try:
            from gcsfs.retry import HttpError
        except ImportError:
            return _Status(429, f"{path}: 429 Too Many Requests")
        return HttpError({"code": 429, "message": "The rate of requests to the bucket is too "
                                                  "high: reduce your request rate."})
    try:
        from botocore.exceptions import ClientError
        from s3fs.errors import translate_boto_error
    except ImportError:
        return _Status(503, f"{path}: 503 SlowDown: Please reduce your request rate.")
    error = ClientError({"Error": {"Code": "SlowDown",
                                   "Message": "Please reduce your request rate."},
                         "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject")
    translated: Exception = translate_boto_error(error)
    return translated


class _Status(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
