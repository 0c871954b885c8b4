"""Request-rate limits: 1, 64 and 1,024 readers of one dataset in a rate-limited store.

Measured, on the real reader code (``ofindex.open`` on ``simstore://``, the real samplers with
``num_replicas=N``, each batch's requests counted by the store): a reader's requests per batch
(data ranges, sidecar pages, stats), its request rounds and the bytes they move per byte of
record, for the full global shuffle and the block shuffle at several block sizes, over
``--batches`` consecutive batches of rank 0 after ``--warm`` batches (steady state: every
sidecar header already checked, as after the first pass of a long epoch; the page cache as the
warm-up left it). 1e9 records of ~200 bytes in 1e4 shards (``tools/sim_store.py``).

Modelled, not run (a 2-core machine cannot run 1,024 readers): the time of a batch for a reader
alone (per round ``ceil(requests / concurrency) * rtt + bytes / bandwidth``, as
``tools/bench_scale.py``), and N readers against S3's limit (5,500 GET/s per prefix, the
dataset in one prefix) in a discrete-event simulation in virtual time (``tools/rate_sim.py``):
each reader's batches are the measured rounds, each reader paces itself with the real
``AdaptiveRate`` and backs off with the real retry policy, the store admits requests by its
token bucket (``tools/sim_limits.py``). The same simulation without the pacers (backoff only,
as the SDKs' standard retry mode) is the peer. The model of ``ofindex.planning`` is printed
beside the measurement: on the very batches measured (after the same warm-up), and averaged
over the span ``ofindex plan`` looks at (two windows of a block shuffle: steady state).

Reported per (readers, order): records/s, requests/s per prefix, throttled answers, bytes moved
per useful byte, request cost per million records (S3 GET, $0.0004 per 1,000).

Usage: ``python tools/bench_ratelimit.py [--batches 6] [--readers 1,64,1024]``; JSON goes to
``bench-results/ratelimit.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_scale import BATCH, MEAN, PER_SHARD, Rounds, _headers_known  # noqa: E402
from benchlib import parse_args  # noqa: E402

BLOCK_SIZES = (64, 256, 1024, 4096)
WINDOW = 16


def _sampler(ds, order: str, block: int | None, readers: int):
    from ofindex.shuffle import BlockShuffleSampler, GlobalShuffleSampler

    if block is None:
        return GlobalShuffleSampler(ds, num_replicas=readers, rank=0, seed=0)
    return BlockShuffleSampler(ds, block_size=block, window=WINDOW, num_replicas=readers,
                               rank=0, seed=0)


def measure(ds, sim, block: int | None, readers: int, args) -> dict:
    """A reader's batches on the real reader code: requests, rounds, bytes (see the module)."""
    import numpy as np
    import sim_store

    from ofindex.planning.stores import store_limits

    stats = sim_store.STATS
    rounds = Rounds(ds._table.storage, stats)
    sampler = iter(_sampler(ds, "", block, readers))
    ds._table.shards[0].cache.memory.clear()
    for _ in range(args.warm):  # the page cache as a long epoch leaves it
        ds.__getitems__(list(itertools.islice(sampler, BATCH)))
    rows = []
    for _ in range(args.batches):
        idx = list(itertools.islice(sampler, BATCH))
        stats.reset()
        rounds.log.clear()
        got = ds.__getitems__(idx)
        assert [int.from_bytes(g[:8], "little") for g in got] == idx  # the records asked for
        by_kind = dict(stats.requests)
        rows.append({"rounds": [r for r, _ in rounds.log],
                     "round_bytes": [b for _, b in rounds.log],
                     "requests": sum(r for r, _ in rounds.log),
                     "data": by_kind.get("data", 0), "sidecar": by_kind.get("sidecar", 0),
                     "infos": stats.infos, "bytes": sum(stats.bytes.values()),
                     "useful": sum(len(g) for g in got)})
    for storage_method in Rounds.NAMES:  # unwrap for the next measurement
        vars(ds._table.storage).pop(storage_method, None)
    s3 = store_limits("s3")
    requests = [r["requests"] for r in rows]
    nrounds = max(len(r["rounds"]) for r in rows)
    per_round = [statistics.mean(r["rounds"][k] if k < len(r["rounds"]) else 0 for r in rows)
                 for k in range(nrounds)]
    bytes_round = [statistics.mean(r["round_bytes"][k] if k < len(r["round_bytes"]) else 0
                                   for r in rows) for k in range(nrounds)]
    seconds = sum(int(np.ceil(q / args.concurrency)) * s3.rtt + b / s3.bandwidth
                  for q, b in zip(per_round, bytes_round, strict=True))
    return {"requests_per_batch": statistics.mean(requests),
            "requests_min": min(requests), "requests_max": max(requests),
            "data_per_batch": statistics.mean(r["data"] for r in rows),
            "sidecar_per_batch": statistics.mean(r["sidecar"] for r in rows),
            "infos_per_batch": statistics.mean(r["infos"] for r in rows),
            "rounds": per_round, "round_bytes": bytes_round,
            "moved_per_useful": sum(r["bytes"] for r in rows) / sum(r["useful"] for r in rows),
            "batch_seconds": seconds}


def simulate(measured: dict, readers: int, pacing: bool, args) -> dict:
    """N readers of the measured batches against S3's limit, in virtual time."""
    from rate_sim import BatchShape, Simulation

    from ofindex.planning.stores import store_limits

    s3 = store_limits("s3")
    shape = BatchShape(tuple(max(1, round(q)) for q in measured["rounds"]),
                       tuple(measured["round_bytes"]), BATCH)
    t = time.process_time()
    got = Simulation(shape, readers, s3, rtt=s3.rtt, bandwidth=s3.bandwidth,
                     concurrency=args.concurrency, seconds=args.sim_seconds,
                     warmup=args.sim_warmup, pacing=pacing, seed=1).run()
    return {"records_per_s": got.records_per_s, "requests_per_s": got.requests_per_s,
            "throttled_fraction": got.throttled_fraction,
            "per_second_min": min(got.per_second, default=0),
            "per_second_max": max(got.per_second, default=0),
            "cpu_s": time.process_time() - t}


def predicted(sim, block: int | None, readers: int, args) -> dict:
    """The plan's model of the same reader's requests per batch: over the very batches
    measured (after the same warm-up), and over the span ``ofindex plan`` averages."""
    import numpy as np

    from ofindex.planning import DatasetShape, plan_shuffle, store_limits
    from ofindex.planning.requests import batch_requests, reader_batches
    from ofindex.shuffle import BlockShuffleOrder, GlobalShuffleOrder

    shards = np.array([sim.count(k) for k in range(sim.shards)])
    sizes = np.array([sim.shard_size(k) for k in range(sim.shards)])
    shape, s3 = DatasetShape.of(shards, sizes), store_limits("s3")
    order = (GlobalShuffleOrder(sim.records, seed=0) if block is None
             else BlockShuffleOrder(shards.tolist(), block, WINDOW, seed=0))
    same = reader_batches(order, sim.records, readers, BATCH, args.warm + args.batches)
    plan = plan_shuffle(shape, s3, readers, 1.0, block_sizes=[] if block is None else [block],
                        window=WINDOW, concurrency=args.concurrency)
    return {"same_batches": batch_requests(shape, same, s3, warm=args.warm).requests,
            "plan": plan.candidates[-1].per_batch.requests}


def run(args) -> dict:
    import sim_store

    import ofindex
    from ofindex.planning.stores import store_limits

    records = int(float(args.records))
    shards = max(1, records // PER_SHARD)
    url = sim_store.dataset_url(records, shards, MEAN)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    ds = ofindex.open(url, max_concurrency=args.concurrency)
    _headers_known(ds, sim)
    s3 = store_limits("s3")
    out = {"records": records, "shards": shards, "mean_record_bytes": MEAN, "batch": BATCH,
           "window": WINDOW, "store": {"name": s3.name, "reads_per_second": s3.reads_per_second,
                                       "dollars_per_1000": s3.dollars_per_1000,
                                       "source": s3.source},
           "settings": {k: getattr(args, k) for k in ("batches", "warm", "concurrency",
                                                      "sim_seconds", "sim_warmup")},
           "rtt": s3.rtt, "bandwidth": s3.bandwidth, "rows": []}
    for readers in (int(r) for r in args.readers.split(",")):
        for block in (None, *BLOCK_SIZES):
            m = measure(ds, sim, block, readers, args)
            alone = BATCH / m["batch_seconds"]
            paced, unpaced = simulate(m, readers, True, args), simulate(m, readers, False, args)
            row = {"readers": readers, "order": "global" if block is None else f"block {block}",
                   "block_size": block, "measured": m,
                   "model_requests_per_batch": predicted(sim, block, readers, args),
                   "records_per_s_unthrottled": readers * alone,
                   "paced": paced, "unpaced": unpaced,
                   "dollars_per_million_records":
                       s3.dollars(m["requests_per_batch"] / BATCH * 1e6)}
            out["rows"].append(row)
            print(f"{readers:>5} readers {row['order']:<11} req/batch "
                  f"{m['requests_per_batch']:6.1f} "
                  f"(model {row['model_requests_per_batch']['same_batches']:6.1f}, plan "
                  f"{row['model_requests_per_batch']['plan']:6.1f}) "
                  f"moved/useful x{m['moved_per_useful']:5.1f} | records/s "
                  f"{paced['records_per_s']:8.0f} "
                  f"(unthrottled {row['records_per_s_unthrottled']:9.0f}) "
                  f"req/s {paced['requests_per_s']:5.0f} "
                  f"throttled {paced['throttled_fraction']:.3f} "
                  f"(no pacing: {unpaced['records_per_s']:7.0f} rec/s, "
                  f"{unpaced['throttled_fraction']:.3f}) "
                  f"${row['dollars_per_million_records']:.3f}/M", flush=True)
    return out


def remodel(path: str, args) -> None:
    """Recompute the modelled columns of a result file (nothing is measured again)."""
    import sim_store

    with open(path) as f:
        result = json.load(f)
    records = int(result["records"])
    url = sim_store.dataset_url(records, int(result["shards"]), MEAN)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    for key in ("batches", "warm", "concurrency"):
        setattr(args, key, result["settings"][key])
    for row in result["rows"]:
        row.pop("predicted_requests_per_batch", None)
        row["model_requests_per_batch"] = predicted(sim, row["block_size"], row["readers"], args)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", default="1e9")
    p.add_argument("--readers", default="1,64,1024")
    p.add_argument("--batches", type=int, default=6, help="batches measured per case")
    p.add_argument("--warm", type=int, default=4, help="batches read before measuring")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per reader")
    p.add_argument("--sim-seconds", type=float, default=60.0)
    p.add_argument("--sim-warmup", type=float, default=20.0)
    p.add_argument("--out", default="bench-results/ratelimit.json")
    p.add_argument("--remodel", metavar="JSON", help="only recompute the modelled columns of "
                   "a result file (after a change to the model)")
    args = parse_args(p, argv, records="1e7", readers="1,64", batches=1, warm=1,
                      sim_seconds=6.0, sim_warmup=2.0)
    if args.remodel:
        remodel(args.remodel, args)
        return 0
    result = run(args)
    if args.out is None:
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
