"""Many readers against one rate-limited store, in virtual time: a discrete-event simulation
of ``readers`` processes, each reading batches as the real reader does (rounds of concurrent
requests, each round waiting for the last), each with its own client-side pacer (the real
:class:`ofindex.transport.policy.AdaptiveRate`) and retry backoff (the real
:meth:`ofindex.transport.policy.RequestPolicy.delay`), against the store's limit (the real
:class:`sim_limits.StoreThrottle`), all on one virtual clock. Deterministic for a seed.

What is modelled, not run: a request takes ``rtt`` (half out, half back) plus its bytes at
``bandwidth / concurrency``; the store admits it when it arrives; every reader's requests count
against one scope (the dataset's prefix or bucket). The requests of each round come from the
real reader (measured in ``tools/bench_ratelimit.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from sim_limits import StoreThrottle

from ofindex.planning.stores import StoreLimits
from ofindex.transport.policy import AdaptiveRate, RequestPolicy


@dataclasses.dataclass(frozen=True)
class BatchShape:
    """One batch as a reader reads it: requests and bytes of each round, and its records."""

    rounds: tuple[int, ...]
    round_bytes: tuple[float, ...]
    records: int


@dataclasses.dataclass
class SimResult:
    """What the store and the readers did between ``warmup`` and the end."""

    seconds: float
    records: float
    answered: int
    throttled: int
    per_second: list[int]

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def requests_per_s(self) -> float:
        return self.answered / self.seconds

    @property
    def throttled_fraction(self) -> float:
        return self.throttled / max(1, self.answered + self.throttled)


class _Reader:
    """One reader process: its pacer, its current round, its requests waiting for a token
    (first come, first served) and in flight."""

    def __init__(self, sim: Simulation, number: int) -> None:
        self.sim, self.number = sim, number
        self.pacer = sim.make_pacer(sim.now)
        self.round = 0
        self.pending = 0  # requests of the round not started yet
        self.open = 0  # requests of the round not answered yet
        self.queue: collections.deque[int] = collections.deque()  # failures of each waiting
        self.pumping = False
        self.rng = random.Random(sim.seed * 1_000_003 + number)

    def start_round(self) -> None:
        shape = self.sim.shape
        self.open = self.pending = shape.rounds[self.round]
        for _ in range(min(self.sim.concurrency, self.pending)):
            self.pending -= 1
            self.send(0)

    def send(self, failures: int) -> None:
        sim = self.sim
        if not sim.pacing:
            sent = sim.clock
            sim.at(sent + sim.rtt / 2, lambda: self.arrive(sent, failures))
            return
        self.queue.append(failures)
        if not self.pumping:
            self.pump()

    def pump(self) -> None:
        """Send the waiting requests as the pacer gives tokens."""
        sim = self.sim
        self.pumping = False
        while self.queue:
            wait, ticket = self.pacer.reserve()
            if ticket is None:
                self.pumping = True
                sim.at(sim.clock + wait, self.pump)
                return
            failures = self.queue.popleft()
            sim.at(sim.clock + wait + sim.rtt / 2,
                   lambda t=ticket, f=failures: self.arrive(t, f))

    def arrive(self, sent: float, failures: int) -> None:
        sim = self.sim
        if sim.store.admit("bucket/dataset/part"):
            size = sim.shape.round_bytes[self.round] / max(1, sim.shape.rounds[self.round])
            took = sim.rtt / 2 + size * sim.concurrency / sim.bandwidth
            sim.at(sim.clock + took, self.answered)
        else:
            sim.at(sim.clock + sim.rtt / 2, lambda: self.throttled(sent, failures + 1))

    def answered(self) -> None:
        self.pacer.succeeded()
        sim = self.sim
        if sim.clock >= sim.warmup:  # records read, in proportion to the batch's requests
            sim.records += sim.shape.records / sum(sim.shape.rounds)
        self.open -= 1
        if self.pending:
            self.pending -= 1
            self.send(0)
        elif self.open == 0:
            self.next_round()

    def throttled(self, sent: float, failures: int) -> None:
        self.pacer.throttled(sent)
        pause = self.sim.policy.delay(failures, True, self.rng)
        self.sim.at(self.sim.clock + pause, lambda: self.send(failures))

    def next_round(self) -> None:
        self.round = (self.round + 1) % len(self.sim.shape.rounds)
        self.start_round()


class Simulation:
    """``readers`` readers reading batches of ``shape`` for ``seconds`` of virtual time.

    Args:
        shape: One batch's rounds.
        readers: Reader processes.
        limits: The store (its rate per scope).
        rtt: Seconds per round trip.
        bandwidth: Bytes per second per reader.
        concurrency: Requests in flight per reader.
        seconds: Virtual seconds simulated.
        warmup: Virtual seconds before the measurement starts.
        pacing: Readers pace themselves; without, only retries back off.
        seed: The jitter's seed.
        policy: The retry backoff.
        make_pacer: Makes each reader's pacer from the virtual clock (default: ours,
            :class:`AdaptiveRate`; anything with its ``reserve`` / ``throttled`` /
            ``succeeded``).
    """

    def __init__(self, shape: BatchShape, readers: int, limits: StoreLimits, *, rtt: float,
                 bandwidth: float, concurrency: int, seconds: float, warmup: float,
                 pacing: bool = True, seed: int = 0,
                 policy: RequestPolicy | None = None,
                 make_pacer: Callable[[Callable[[], float]], Any] = AdaptiveRate) -> None:
        self.shape, self.readers, self.rtt, self.bandwidth = shape, readers, rtt, bandwidth
        self.concurrency, self.seconds, self.warmup = concurrency, seconds, warmup
        self.pacing, self.seed, self.make_pacer = pacing, seed, make_pacer
        self.policy = policy or RequestPolicy()
        self.clock = 0.0
        self.store = StoreThrottle(limits, clock=self.now)
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self.counter = itertools.count()
        self.records = 0.0  # records read after the warm-up (a batch's share per answer)

    def now(self) -> float:
        return self.clock

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self.counter), action))

    def run(self) -> SimResult:
        """Simulate; returns what happened after the warm-up."""
        for k in range(self.readers):
            reader = _Reader(self, k)
            self.at(k * 1e-6, reader.start_round)  # all start at once, in a fixed order
        answered0 = throttled0 = 0
        measuring = False
        while self.events:
            when, _, action = heapq.heappop(self.events)
            if when > self.seconds:
                break
            if not measuring and when >= self.warmup:
                measuring = True
                answered0, throttled0 = self.store.answered(), self.store.throttled()
            self.clock = when
            action()
        meter = next(iter(self.store.meters.values()))
        first = int(self.warmup)
        per_second = [meter.per_second.get(s, 0) for s in range(first, int(self.seconds))]
        return SimResult(self.seconds - self.warmup, self.records,
                         self.store.answered() - answered0,
                         self.store.throttled() - throttled0, per_second)
