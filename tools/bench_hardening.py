#!/usr/bin/env python3
"""Cost of issue 16's read-path checks: ``ds[i]`` and ``__getitems__`` of 256 random records,
this checkout against a base checkout, in one process, interleaved round by round.

The base checkout's package is copied to a temporary directory as ``ofindex_base`` and
imported beside ``ofindex`` (the read, format and storage layers import relatively), so both
read the same files in the same process, alternating which goes first. Cases: TFRecord (CRCs
checked), OFRecord without sidecar checksums (only the span checks are new), and OFRecord with
checksums (which this checkout verifies on read and the base ignores), each with memory maps
and with ``pread`` (``mmap=False``). Prints each case's median throughput ratio this / base
(< 1: this checkout is slower) with its spread, and writes JSON.

    git archive <base commit> | tar -x -C /tmp/ofindex-base
    (cd /tmp/ofindex-base && python setup.py -q build_ext --inplace)
    python tools/bench_hardening.py --base /tmp/ofindex-base --records 100000 --rounds 9

``--faults`` runs the fault scenario of issue 14 instead: batches of 64 random records from
nginx through tests/kit/faultproxy.py (connections dropped, 503 SlowDown answers, requests stalled
for 3 s, and a 2-second blackout halfway), one request per record as from an object store,
with the former retry policy (4 attempts from 50 ms, no hedging) and with the default one.
Prints and writes, for each, the batches that failed, the time, the retries and the hedged
requests.

    python tools/bench_hardening.py --faults --batches 60
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

import ofindex


def load_base(checkout: str) -> object:
    """The base checkout's ``ofindex`` package, imported as ``ofindex_base``."""
    where = tempfile.mkdtemp(prefix="ofindex-base-")
    shutil.copytree(os.path.join(checkout, "ofindex"), os.path.join(where, "ofindex_base"))
    sys.path.insert(0, where)
    import ofindex_base

    return ofindex_base


def make_data(root: str, records: int) -> dict[str, str]:
    rng = np.random.default_rng(0)
    payloads = [rng.bytes(int(s)) for s in rng.integers(100, 300, records)]
    out = {}
    for name, fmt, sums in (("tfrecord", "tfrecord", False), ("ofrecord", "ofrecord", False),
                            ("ofrecord+checksums", "ofrecord", True)):
        path = os.path.join(root, f"{name}-{records}")
        with ofindex.Writer(path, format=fmt, checksums=sums) as w:
            w.write_many(payloads)
        out[name] = path
    return out


#: Faults of the fault run, per request.
FAULTS = {"drop": 0.05, "slowdown": 0.05, "stall": 0.01, "stall_seconds": 3.0}


def fault_run(batches: int, out: str) -> None:
    """The fault scenario (see the module's doc): both policies, one after the other."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from ofindex.cli.synthetic import write_dataset
    from ofindex.transport import store
    from ofindex.transport.policy import RequestPolicy, retry_settings
    from tests.kit import servers
    from tests.kit.faultproxy import FaultProxyProcess

    policies = {"former (4 attempts from 50 ms, no hedging)": RequestPolicy(
                    retries=3, base_delay=0.05, throttle_delay=0.05, max_delay=2.0,
                    hedge_factor=0),
                "default": RequestPolicy()}
    root = tempfile.mkdtemp(prefix="ofindex-bench-faults-")
    records = 20_000
    write_dataset(os.path.join(root, "d"), records, 8, kind="random", record_size=400, seed=2)
    summary = {}
    with servers.start_nginx(root) as nginx:
        for seed, (name, policy) in enumerate(policies.items()):
            with FaultProxyProcess(nginx.url, seed=seed, **FAULTS) as proxy, \
                    retry_settings(policy=policy):
                ds = ofindex.open(f"{proxy.url}/d/")
                ds.max_gap = 0  # one request per record: as many chances for a fault
                store.SUPPORT[store.host_of(proxy.url)] = False  # as an object store
                rng = np.random.default_rng(seed)
                failed, times, errors = 0, [], {}
                start = time.perf_counter()
                for b in range(batches):
                    if b == batches // 2:
                        proxy.blackout(2.0)
                    t = time.perf_counter()
                    try:
                        ds.__getitems__(rng.integers(0, records, 64))
                    except ofindex.OfindexError as exc:
                        failed += 1
                        errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    times.append(time.perf_counter() - t)
                total = time.perf_counter() - start
                storage = ds._table.storage
                row = {"batches": batches, "failed": failed, "errors": errors,
                       "seconds": round(total, 2),
                       "batch_p50_s": round(statistics.median(times), 3),
                       "batch_max_s": round(max(times), 2),
                       "slowest_batches": {b: round(times[b], 2) for b in sorted(
                           range(batches), key=times.__getitem__)[-3:]},
                       "requests": storage.requests, "retries": storage.retries,
                       "hedged": storage.hedged}
            row["faults"] = dict(proxy.counts)
            summary[name] = row
            print(f"{name}: {failed}/{batches} batches failed {errors or ''}, {total:.1f} s "
                  f"(batch p50 {row['batch_p50_s']} s, slowest {row['slowest_batches']}), "
                  f"{storage.requests} requests, {storage.retries} retries, "
                  f"{storage.hedged} hedged; faults {row['faults']}", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"faults": FAULTS, "blackout_s": 2.0, "summary": summary}, f, indent=2)
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", help="a checkout of ofindex (compiled module built in place) to "
                   "compare with (required without --faults)")
    p.add_argument("--faults", action="store_true", help="run the fault scenario instead")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--singles", type=int, default=20_000)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--out", default="bench-results/hardening.json")
    args = p.parse_args()
    if args.faults:
        fault_run(args.batches, args.out.replace("hardening.json", "hardening-faults.json"))
        return
    if not args.base:
        p.error("--base is required (or --faults)")
    base = load_base(args.base)
    root = tempfile.mkdtemp(prefix="ofindex-bench-hardening-")
    paths = make_data(root, args.records)
    rng = np.random.default_rng(1)
    singles = rng.integers(0, args.records, args.singles).tolist()
    batches = [rng.integers(0, args.records, 256) for _ in range(args.batches)]

    def one(ds) -> float:
        t = time.perf_counter()
        for i in singles:
            ds[i]
        return len(singles) / (time.perf_counter() - t)

    def many(ds) -> float:
        t = time.perf_counter()
        for b in batches:
            ds.__getitems__(b)
        return len(batches) * 256 / (time.perf_counter() - t)

    summary = {}
    for name, path in paths.items():
        for mmap in (True, False):
            this, that = ofindex.open(path, mmap=mmap), base.open(path, mmap=mmap)
            for what, fn in (("ds[i]", one), ("getitems(256)", many)):
                ratios = []
                for r in range(args.rounds):
                    if r % 2:
                        b = fn(that)
                        a = fn(this)
                    else:
                        a = fn(this)
                        b = fn(that)
                    ratios.append(a / b)
                key = f"{name} {'mmap' if mmap else 'pread'} {what}"
                summary[key] = {"median_ratio": statistics.median(ratios),
                                "ratios": [round(x, 3) for x in ratios]}
                print(f"{key:<42} this/base {statistics.median(ratios):.3f}  "
                      f"(rounds {min(ratios):.2f}-{max(ratios):.2f})", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"records": args.records, "rounds": args.rounds, "summary": summary}, f,
                  indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
