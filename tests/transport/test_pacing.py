"""Throttling answers slow the reader down instead of failing it: the client-side pacer
(:mod:`ofindex.transport.policy`) in virtual time, the retry policy's treatment of "slow down"
answers, and reads from the simulated store (``tools/sim_store.py``) under a low request-rate
limit, answered as S3 and GCS answer (the real client libraries' exceptions)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys

import numpy as np
import pytest

import ofindex
from ofindex.errors import RangeReadError, StorageError
from ofindex.planning.stores import store_limits
from ofindex.transport.failures import classify
from ofindex.transport.policy import (
    BETA,
    HORIZON,
    RELAX_SECONDS,
    SCALE,
    AdaptiveRate,
    RequestPolicy,
    forget_pacers,
    pacer_for,
    retry_settings,
    scope_of,
)
from tests.kit import paths

sys.path.insert(0, paths.TOOLS)
import rate_sim
import sim_limits
import sim_store


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# -- the pacer ---------------------------------------------------------------------------------
def test_the_pacer_does_nothing_until_the_store_says_slow_down():
    clock = Clock()
    pacer = AdaptiveRate(clock)
    for _ in range(1000):
        assert pacer.reserve()[0] == 0.0
    pacer.succeeded()
    assert not pacer.enabled


def test_a_throttle_drops_the_rate_to_beta_times_the_measured_rate_once_per_round():
    clock = Clock()
    pacer = AdaptiveRate(clock)
    sends = []
    for _ in range(200):  # 200 requests over the last second: 200/s
        sends.append(pacer.reserve()[1])
        clock.t += 0.005
    pacer.throttled(sends[-1])
    assert pacer.enabled and pacer.rate == pytest.approx(BETA * 200, rel=0.02)
    rate = pacer.rate
    for sent in sends[:-1]:  # answers to requests sent at the old rate: no second drop
        pacer.throttled(sent)
    assert pacer.rate == rate and pacer.drops == 1 and pacer.throttles == 200


def test_paced_requests_are_spaced_at_the_rate():
    clock = Clock()
    pacer = AdaptiveRate(clock)
    for _ in range(100):
        pacer.reserve()
        clock.t += 0.01
    pacer.throttled(clock.t)
    rate = pacer.rate
    got = [pacer.reserve() for _ in range(50)]  # 50 at once: queued one token apart ...
    booked = [wait for wait, ticket in got if ticket is not None]
    assert len(booked) == int(HORIZON * rate)  # ... as far as the horizon
    assert np.diff(booked) == pytest.approx(np.full(len(booked) - 1, 1 / rate))
    later = [wait for wait, ticket in got if ticket is None]
    assert len(later) == 50 - len(booked) and min(later) > 0  # the others: ask again then
    clock.t += later[0]
    wait, ticket = pacer.reserve()
    assert ticket is not None and wait == pytest.approx(HORIZON)


def test_the_rate_recovers_along_the_cubic_curve_and_then_lets_go():
    clock = Clock()
    pacer = AdaptiveRate(clock)
    for _ in range(1000):
        pacer.reserve()
        clock.t += 0.001
    pacer.throttled(clock.t)
    peak, low = pacer.peak, pacer.rate
    assert low == pytest.approx(BETA * peak)
    knee = (peak * (1 - BETA) / SCALE) ** (1 / 3)
    rates = []
    for _ in range(1, 40):
        clock.t += knee / 10
        for _ in range(int(2 * peak * knee / 10)):  # keep sending: the cap is not binding
            pacer.reserve()
        pacer.succeeded()
        rates.append(pacer.rate)
    assert rates == sorted(rates)  # never down without a throttle
    assert rates[9] == pytest.approx(peak, rel=0.05)  # the curve regains W_max at K
    growth = np.diff(rates)
    assert growth[2] > growth[7] < growth[15]  # concave below the knee, convex after
    clock.t += RELAX_SECONDS + 1
    pacer.succeeded()
    assert not pacer.enabled and pacer.reserve()[0] == 0.0


def test_the_rate_grows_no_further_than_twice_what_is_sent():
    clock = Clock()
    pacer = AdaptiveRate(clock)
    for _ in range(10):  # 10 requests a second
        pacer.reserve()
        clock.t += 0.1
    pacer.throttled(clock.t)
    assert pacer.rate == pytest.approx(BETA * 10, rel=0.15)
    for _ in range(300):  # 30 s at 10/s: the curve is far above, the cap holds it
        pacer.reserve()
        pacer.succeeded()
        clock.t += 0.1
    assert 10 < pacer.rate <= 2 * 11  # twice the 10 (or 11, by the window's edge) sent a second


def test_pacers_are_shared_per_bucket_and_per_process():
    forget_pacers()
    assert scope_of("s3", "s3://bucket/a/b") == scope_of("s3", "bucket/c") == "s3://bucket"
    assert scope_of("https", "https://host:8080/x/y") == "https://host:8080"
    assert pacer_for("s3", "bucket/a") is pacer_for("s3", "s3://bucket/b")
    assert pacer_for("s3", "bucket/a") is not pacer_for("s3", "other/a")
    forget_pacers()


# -- many readers against one limit, in virtual time -------------------------------------------
SHAPE = rate_sim.BatchShape((300, 256), (300 * 300.0, 256 * 400.0), 256)


def _simulate(readers: int, pacing_on: bool) -> rate_sim.SimResult:
    limits = store_limits("s3", reads_per_second=400)
    return rate_sim.Simulation(SHAPE, readers, limits, rtt=0.02, bandwidth=1e9, concurrency=64,
                               seconds=90, warmup=30, pacing=pacing_on, seed=1).run()


def test_a_sustained_throttle_holds_the_readers_near_the_limit():
    paced = _simulate(16, True)
    unpaced = _simulate(16, False)
    # deterministic (virtual time, seeded jitter): the figures of this model, not of a clock
    assert 0.85 * 400 <= paced.requests_per_s <= 1.02 * 400
    assert paced.throttled_fraction < 0.05
    assert unpaced.throttled_fraction > 4 * paced.throttled_fraction
    assert paced.records_per_s == pytest.approx(paced.requests_per_s * 256 / 556, rel=0.05)
    assert min(paced.per_second) >= 0.5 * 400  # no second of collapse after the warm-up


# -- the retry policy --------------------------------------------------------------------------
def test_the_exceptions_of_the_clients_are_recognised_as_rate_limits():
    s3 = sim_limits.throttled_error("s3", "bucket/key")
    gcs = sim_limits.throttled_error("gcs", "bucket/key")
    for exc in (s3, gcs):
        assert classify(exc).rate_limited and classify(exc).throttled and classify(exc).transient
    assert type(s3).__name__ == "OSError" and type(gcs).__name__ == "HttpError"
    outage = OSError("service unavailable")
    outage.status = 503
    assert classify(outage).throttled and not classify(outage).rate_limited
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    head = translate_boto_error(ClientError(  # S3 over the rate to a HEAD: no body, no code
        {"Error": {"Code": "503", "Message": "Service Unavailable"},
         "ResponseMetadata": {"HTTPStatusCode": 503}}, "HeadObject"))
    assert classify(head).rate_limited


class Flaky:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> bytes:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return b"ok"


def retried(fn, policy: RequestPolicy, what: str, pacer=None):
    """``fn()`` (synchronous) as the attempt of one request under ``policy``."""

    async def attempt():
        return fn()

    return asyncio.run(policy.run(attempt, what, pacer=pacer))


class Told(AdaptiveRate):
    """A pacer that never waits, and counts what it is told."""

    def __init__(self) -> None:
        super().__init__(Clock())
        self.told: list[str] = []

    def reserve(self):
        return 0.0, self.clock()

    def throttled(self, ticket):
        self.told.append("throttled")

    def succeeded(self):
        self.told.append("succeeded")


def test_rate_limit_answers_are_retried_within_the_retries():
    """A "slow down" answer is retried like any transient failure (as botocore's adaptive
    mode does), within ``retries``: ``retries=0`` sends a request once."""
    quick = RequestPolicy(retries=25, base_delay=0.0001, throttle_delay=0.0001, max_delay=0.001)
    slow_down = [sim_limits.throttled_error("s3", "b/k") for _ in range(25)]
    fn = Flaky(slow_down)
    pacer = Told()
    assert retried(fn, quick, "s3://b/k: bytes [0, 2)", pacer=pacer) == b"ok"
    assert fn.calls == 26 and pacer.told == ["throttled"] * 25 + ["succeeded"]
    once = dataclasses.replace(quick, retries=0)
    fn = Flaky([sim_limits.throttled_error("gcs", "b/k")])
    with pytest.raises(StorageError, match=r"s3://b/k: bytes \[0, 2\): .*request rate is too "
                                           r"high.* 1 time .*no retry is left \(retries=0\)"):
        retried(fn, once, "s3://b/k: bytes [0, 2)", pacer=Told())
    assert fn.calls == 1
    outage = OSError("unavailable")
    outage.status = 503
    with pytest.raises(RangeReadError, match="1 attempt"):
        retried(Flaky([outage]), once, "s3://b/k: bytes [0, 2)")


def test_a_store_that_only_says_slow_down_is_given_up_after_the_patience():
    policy = RequestPolicy(retries=10**6, throttle_delay=0.001, throttle_patience=0.01)
    fn = Flaky([sim_limits.throttled_error("gcs", "b/k") for _ in range(10**4)])
    with pytest.raises(StorageError, match=r"s3://b/k: bytes \[0, 2\).*request rate is too "
                                           r"high.*throttle_patience.*ofindex plan"):
        retried(fn, policy, "s3://b/k: bytes [0, 2)")
    assert 3 <= fn.calls < 100


def test_the_timeout_bounds_the_waits_for_the_pacer_and_the_backoff():
    """A request never waits past its deadline, for its turn at a paced rate or for a
    backoff after "slow down" answers: it is given up as soon as the next wait would pass
    it (``timeout=5`` against a store answering only 429 waited ``throttle_patience``, 10
    minutes)."""
    pacer = AdaptiveRate()
    pacer.throttled(pacer.reserve()[1])  # 0.7 requests/s, no token: the next turn in 1.4 s
    policy = RequestPolicy(timeout=0.5)
    fn = Flaky([])
    with pytest.raises(StorageError, match=r"request rate is too high.*waiting for a turn at "
                                           r"the rate it allows would pass the timeout of 0.5"):
        retried(fn, policy, "s3://b/k: bytes [0, 2)", pacer=pacer)
    assert fn.calls == 0
    slow = RequestPolicy(timeout=0.5, throttle_delay=2.0)  # a first backoff of 1-2 s
    fn = Flaky([sim_limits.throttled_error("s3", "b/k")])
    with pytest.raises(StorageError, match=r"1 time .*the next try would pass the timeout"):
        retried(fn, slow, "s3://b/k: bytes [0, 2)")
    assert fn.calls == 1


# -- reads from the simulated store under a low limit ------------------------------------------
@pytest.fixture
def throttled_store():
    def make(store: str, rate: float) -> sim_limits.StoreThrottle:
        # a quarter second's burst: a round of ~70 requests at once cannot all pass
        sim_store.SimStore.throttle = sim_limits.StoreThrottle.named(
            store, rate, burst_seconds=0.25)
        return sim_store.SimStore.throttle

    forget_pacers()
    yield make
    sim_store.SimStore.throttle = None
    forget_pacers()


@pytest.mark.parametrize("store", ["s3", "gcs"])
def test_reads_under_a_low_limit_slow_down_and_never_fail(throttled_store, store):
    throttle = throttled_store(store, 40.0)
    url = sim_store.dataset_url(40_000, 4, 120)
    rng = np.random.default_rng(3)
    batches = [rng.choice(40_000, 64, replace=False) for _ in range(2)]
    sim_store.STATS.reset()
    # the default number of retries: the pacer keeps "slow down" answers rare enough
    with retry_settings(policy=RequestPolicy(base_delay=0.001, throttle_delay=0.05)):
        ds = ofindex.open(url)
        for idx in batches:  # every record is the one asked for (its payload names it)
            got = ds.__getitems__(idx)
            assert [int.from_bytes(g[:8], "little") for g in got] == idx.tolist()
    pacer = pacer_for("simstore", url)
    assert throttle.throttled() > 0 and pacer.enabled and pacer.drops >= 1
    served = sim_store.STATS.snapshot()
    misses = sim_store.STATS.requests.get("missing", 0)  # names probed at open: 404s first
    assert throttle.answered() == served[0] - misses + served[2]  # throttled: served nothing
    assert pacer.rate < 2 * 40  # slowed to about the limit (at most twice what it sends)


# -- S3 (moto) behind a proxy that answers "503 SlowDown" ------------------------------------
@pytest.mark.slow
def test_slowdown_answers_from_s3_never_fail_a_read(tmp_path, moto_server):
    """s3fs's own exceptions for S3's answers over the rate (``SlowDown`` to a GET, a bare 503
    to a HEAD) slow the reader down: nothing fails."""
    import uuid

    import s3fs

    from ofindex.cli.synthetic import write_dataset
    from tests.kit import servers
    from tests.kit.faultproxy import FaultProxy
    from tests.kit.helpers import index_dir_of

    d = str(tmp_path / "data")
    write_dataset(d, 600, 3)
    expected = [ofindex.open(d)[i] for i in range(600)]
    prefix = f"ofindex-test/paced-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_options(moto_server.url))
    for name in os.listdir(d):
        fs.put_file(os.path.join(d, name), f"{prefix}/{name}")
    for name in os.listdir(index_dir_of(d)):
        fs.put_file(os.path.join(index_dir_of(d), name), f"{prefix}.ofindex/{name}")
    forget_pacers()
    policy = RequestPolicy(base_delay=0.001, throttle_delay=0.005, max_delay=0.02)
    with FaultProxy(moto_server.url, slowdown_first=3) as proxy, retry_settings(policy=policy):
        ds = ofindex.open(f"s3://{prefix}", storage_options=servers.s3_options(proxy.url))
        idx = list(range(0, 600, 20))
        assert ds.__getitems__(idx) == [expected[i] for i in idx]
        assert [ds[i] for i in (0, 599)] == [expected[0], expected[599]]
    pacer = pacer_for("s3", f"s3://{prefix}")
    assert proxy.counts["slowdown"] == 3 and pacer.throttles == 3
    assert pacer.enabled and pacer.drops >= 1
    forget_pacers()
