"""Hedged requests: a request of a batch that is far slower than its peers is sent once more,
and the first answer wins (the other is cancelled).

Object stores advise it for tail latency (S3: "track and aggressively retry slower
operations"; a request sent again takes another connection, often another server). A request
is hedged when it has run longer than ``hedge_factor`` times the median answer time of the
requests of its batch that have answered, and at least ``hedge_floor`` seconds (so that a fast
store is never asked twice for nothing); a batch hedges nothing before a quarter of its
requests (and at least two) have answered, since until then no peer says what slow is.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .retry import RetryPolicy

T = TypeVar("T")


class Hedger:
    """The answer times of one batch's requests, and the runner that hedges the slow ones.

    Args:
        policy: Its ``hedge_factor`` and ``hedge_floor`` say when a request is slow.
        size: Requests in the batch.
        on_hedge: Called each time a request is sent again (to count them).
    """

    def __init__(self, policy: RetryPolicy, size: int,
                 on_hedge: Callable[[], None] | None = None) -> None:
        self.factor = policy.hedge_factor
        self.floor = policy.hedge_floor
        self.enough = max(2, size // 4)
        self.enabled = size >= 2 and self.factor > 0
        self.times: list[float] = []
        self.on_hedge = on_hedge

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
        first: asyncio.Future[T] = asyncio.ensure_future(attempt())
        tasks: set[asyncio.Future[T]] = {first}
        try:
            while True:
                limit = self.threshold()
                waited = loop.time() - start
                wait = max(0.01, (limit if limit is not None else self.floor) - waited)
                if limit is None and waited >= self.floor:
                    wait = max(0.01, self.floor / 4)  # not enough answers yet: look again
                done, _ = await asyncio.wait(tasks, timeout=wait)
                if done and not first.cancelled() and first.exception() is None:  # usual: one wait
                    self.times.append(loop.time() - start)
                    return first.result()
                if done:
                    return await self._first_answer(tasks, start)
                limit = self.threshold()
                if limit is not None and loop.time() - start >= limit:
                    if self.on_hedge is not None:
                        self.on_hedge()
                    tasks.add(asyncio.ensure_future(attempt()))
                    return await self._first_answer(tasks, start)
        finally:
            pending = [task for task in tasks if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _first_answer(self, tasks: set[asyncio.Future[T]], start: float) -> T:
        failure: BaseException | None = None
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is None:
                    self.times.append(asyncio.get_running_loop().time() - start)
                    return task.result()
                failure = failure or exc
        assert failure is not None
        raise failure
