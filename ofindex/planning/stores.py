"""What each kind of store allows and charges: the request-rate limits and the prices of reads
that a plan (:mod:`ofindex.planning.advice`) and the simulated store (``tools/sim_store.py``)
work with, each figure with the public page it comes from.

* S3: "at least 3,500 PUT/COPY/POST/DELETE or 5,500 GET/HEAD requests per second per
  partitioned Amazon S3 prefix"; over it S3 answers ``503 Slow Down``
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html). S3
  partitions a busy prefix further on its own, over tens of minutes: 5,500 is what a new
  prefix gets. GET and HEAD on S3 Standard cost $0.0004 per 1,000 requests (us-east-1,
  https://aws.amazon.com/s3/pricing/).
* GCS: a bucket starts at "approximately 5000 object read requests per second", and a client
  should ramp up "doubling the request rate no faster than every 20 minutes"
  (https://cloud.google.com/storage/docs/request-rate); over it GCS answers ``429 Too Many
  Requests``. Object reads and metadata reads are Class B operations, $0.0004 per 1,000 on
  Standard storage in a region (https://cloud.google.com/storage/pricing).
* ``http``: a web server states no limit and no price (override them for a CDN that does).
* ``local``: no requests at all (a read is a memory-mapped copy).

The round-trip time and bandwidth per reader are not the store's but the reader's network
(20 ms and 1 GB/s: the ``+20 ms`` proxy of the benchmarks and a 10 Gbit/s NIC); every figure
can be overridden (:func:`store_limits`).
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["STORES", "StoreLimits", "store_for_url", "store_limits"]


@dataclasses.dataclass(frozen=True)
class StoreLimits:
    """The limits and prices of one store, and the reader's network to it.

    Attributes:
        name: ``s3``, ``gcs``, ``http`` or ``local``.
        reads_per_second: Read requests (GET / HEAD) per second the store answers per
            ``scope`` before throttling; ``inf`` for none.
        scope: What the limit is counted over: ``prefix`` (S3: the key up to its last ``/``),
            ``bucket`` (GCS), ``none``.
        ramp_doubling_s: For a store whose capacity grows under sustained load (GCS): seconds
            per doubling; ``None`` for a fixed limit.
        dollars_per_1000: Price of 1,000 read requests.
        throttle_answer: What the store answers over its limit.
        rtt: Seconds per request round trip from a reader.
        bandwidth: Bytes per second one reader receives.
        max_gap: Gap (bytes) between two wanted ranges that a read goes through rather than
            split (the reader's own setting for the store:
            :attr:`ofindex.storage.FsspecStorage.default_max_gap`).
        source: Where the limit and price are published.
    """

    name: str
    reads_per_second: float
    scope: str
    ramp_doubling_s: float | None
    dollars_per_1000: float
    throttle_answer: str
    rtt: float = 0.020
    bandwidth: float = 1e9
    max_gap: int = 256 << 10
    source: str = ""

    def rate_after(self, seconds: float) -> float:
        """Read requests per second the store answers per scope after ``seconds`` of
        sustained load (GCS: doubling every :attr:`ramp_doubling_s`; others: fixed).

        Args:
            seconds: Time under load so far.

        Returns:
            The limit then.
        """
        if self.ramp_doubling_s is None or math.isinf(self.reads_per_second):
            return self.reads_per_second
        return float(self.reads_per_second * 2.0 ** (max(0.0, seconds) / self.ramp_doubling_s))

    def dollars(self, requests: float) -> float:
        """The price of ``requests`` read requests."""
        return requests * self.dollars_per_1000 / 1000.0


STORES: dict[str, StoreLimits] = {
    "s3": StoreLimits(
        "s3", 5500.0, "prefix", None, 0.0004, "503 SlowDown",
        source="https://docs.aws.amazon.com/AmazonS3/latest/userguide/"
               "optimizing-performance.html; https://aws.amazon.com/s3/pricing/"),
    "gcs": StoreLimits(
        "gcs", 5000.0, "bucket", 1200.0, 0.0004, "429 Too Many Requests",
        source="https://cloud.google.com/storage/docs/request-rate; "
               "https://cloud.google.com/storage/pricing"),
    "http": StoreLimits("http", math.inf, "none", None, 0.0, "429 or 503"),
    "local": StoreLimits("local", math.inf, "none", None, 0.0, "-", rtt=0.0, bandwidth=2e9,
                         max_gap=64 << 10),
}

_BY_PROTOCOL = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "http": "http",
                "https": "http"}


def store_for_url(url: str) -> str:
    """The kind of store a URL or path is on: ``s3``, ``gcs``, ``http`` or ``local`` (any
    other protocol counts as ``http``: a remote store of unknown limits).

    Args:
        url: A URL or local path.

    Returns:
        A key of :data:`STORES`.
    """
    protocol, sep, _ = url.partition("://")
    if not sep or protocol == "file":
        return "local"
    return _BY_PROTOCOL.get(protocol.lower(), "http")


def store_limits(name: str, **overrides: float | None) -> StoreLimits:
    """The limits of store ``name`` with some figures replaced.

    Args:
        name: A key of :data:`STORES` (``s3``, ``gcs``, ``http``, ``local``).
        **overrides: Fields of :class:`StoreLimits` to replace (``None`` keeps the store's).

    Returns:
        The limits.

    Raises:
        ValueError: An unknown store or field, or a figure that is not positive.
    """
    if name not in STORES:
        raise ValueError(f"unknown store {name!r}: choose one of {', '.join(STORES)}")
    fields = {f.name for f in dataclasses.fields(StoreLimits)} - {"name", "scope", "source",
                                                                  "throttle_answer"}
    changes: dict[str, float] = {}
    for key, value in overrides.items():
        if key not in fields:
            raise ValueError(f"unknown store setting {key!r}: one of {', '.join(sorted(fields))}")
        if value is None:
            continue
        if key in ("reads_per_second", "bandwidth", "ramp_doubling_s") and not value > 0:
            raise ValueError(f"{key} must be positive, not {value!r}")
        if not value >= 0:
            raise ValueError(f"{key} must not be negative, not {value!r}")
        changes[key] = int(value) if key == "max_gap" else float(value)
    return dataclasses.replace(STORES[name], **changes)  # type: ignore[arg-type]
