"""``ofindex plan``: which shuffle reaches a target throughput under a store's request-rate
limit, and what it costs in mixing and requests (:mod:`ofindex.planning`)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ..errors import OfindexError
from ..planning import ShufflePlan, plan_for
from .exitcodes import EXIT_OK, UsageError


def _print(plan: ShufflePlan) -> None:
    store = plan.store
    limit = ("no limit" if math.isinf(store.reads_per_second)
             else f"{store.reads_per_second:,.0f} reads/s per {store.scope} "
                  f"(over it: {store.throttle_answer})")
    print(f"store:   {store.name}: {limit}, ${store.dollars_per_1000:g} per 1,000 reads, "
          f"rtt {store.rtt * 1e3:g} ms, {store.bandwidth / 1e6:,.0f} MB/s per reader")
    print(f"readers: {plan.readers} x batches of {plan.batch_size}; target "
          f"{plan.target:,.0f} records/s")
    print(f"{'order':<12} {'req/batch':>9} {'records/s':>11} {'req/s':>9} {'mixing':>8} "
          f"{'$/M rec':>8} {'moved/used':>10}")
    for c in plan.candidates:
        mark = (" *" if c is plan.chosen else "") + ("  (throttled)" if c.throttled else "")
        print(f"{c.name:<12} {c.per_batch.requests:>9.1f} {c.records_per_s:>11,.0f} "
              f"{c.requests_per_s:>9,.0f} {c.mixing.value:>8.4f} "
              f"{c.dollars_per_million:>8.4f} {c.moved_per_useful:>10.1f}{mark}")
    print(plan.advice())


def cmd_plan(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """``ofindex plan``: the candidates, the chosen one and why."""
    limits = {"reads_per_second": args.reads_per_second, "dollars_per_1000": args.price,
              "rtt": args.rtt, "bandwidth": args.bandwidth}
    try:
        plan = plan_for(args.paths, args.readers, args.target, store=args.store,
                        storage_options=options, index_dir=args.index_dir, limits=limits,
                        batch_size=args.batch_size, concurrency=args.concurrency,
                        window=args.window, block_sizes=args.block_sizes,
                        allow_missing_shards=args.allow_missing_shards)
    except ValueError as exc:
        if isinstance(exc, OfindexError):  # the dataset's (a stale index …): said as it is
            raise
        raise UsageError(str(exc)) from None  # a setting out of range for this dataset
    if args.json:
        chosen = plan.chosen
        print(json.dumps({
            "store": plan.store.name, "reads_per_second": plan.store.reads_per_second,
            "readers": plan.readers, "batch_size": plan.batch_size, "target": plan.target,
            "candidates": plan.table(),
            "chosen": None if chosen is None else {"order": chosen.order,
                                                   "block_size": chosen.block_size,
                                                   "window": chosen.window},
            "advice": plan.advice()}, indent=2))
        return EXIT_OK
    _print(plan)
    return EXIT_OK
