"""Small helpers shared by the benchmarks: timing, datasets, result files."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from ofindex.cli.synthetic import write_dataset


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None,
               **smoke: Any) -> argparse.Namespace:
    """``parser.parse_args`` plus ``--smoke``: the given tiny settings replace the defaults, so
    that a test can check in seconds that the tool runs as documented. Smoke figures mean
    nothing, so they are written nowhere unless ``--out`` is given."""
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: check that the tool runs (its figures mean nothing)")
    args = parser.parse_args(argv)
    if args.smoke:
        for name, value in {"out": None, **smoke}.items():
            if getattr(args, name, None) == parser.get_default(name):
                setattr(args, name, value)
    return args


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` runs of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def dataset(root: str, name: str, records: int, shards: int, size: int,
            index: bool = True) -> list[str]:
    """Random-bytes TFRecord files under ``root/name``, generated once and reused."""
    d = os.path.join(root, name)
    marker = os.path.join(d, "_COMPLETE")
    if not os.path.exists(marker):
        paths = write_dataset(d, records, shards, kind="random", record_size=size, index=index)
        open(marker, "w").close()
        return paths
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f.startswith("part-") and "." not in f)


def read_all(paths: list[str]) -> None:
    """Pull files into the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


def report(rows: list[dict], out: str | None) -> None:
    for r in rows:
        extras = "  ".join(f"{k}={v}" for k, v in r.items() if k not in ("name",))
        print(f"{r['name']:<48} {extras}")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(rows, f, indent=2)
        print(f"wrote {out}")


def write_json(obj: object, out: str | None) -> None:
    """Write ``obj`` as JSON to ``out`` (directories made as needed); nothing without ``out``."""
    if not out:
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(obj, f, indent=2)
    print(f"wrote {out}")


def sidecar_path(data_path: str) -> str:
    """Where ofindex keeps the sidecar of an indexed data file (by default in the data
    directory's sibling index directory, ``<dir>.ofindex/``)."""
    import ofindex

    with ofindex.open(data_path, manifest=False) as ds:
        return str(ds.shards[0].index_url)


# -- interleaved rounds ------------------------------------------------------------------------
@dataclasses.dataclass
class Contender:
    """One way of reading, timed in turn with the others in every round.

    Attributes:
        name: What is measured, as the report names it.
        run: Does ``units`` units of work and returns the records read (or, for a contender
            that times itself in another process, ``(records, seconds)``).
        units: Units per round (set by :func:`calibrate` when 0).
        warm_up: Run it once before the rounds (not for one that starts a process of its own
            each time).
    """

    name: str
    run: Callable[[int], int | tuple[int, float] | tuple[int, float, float]]
    units: int = 0
    warm_up: bool = True


def _timed(c: Contender, units: int) -> tuple[int, float, float]:
    """Records read, wall seconds and CPU seconds (every thread of the process, or of the
    contender's own process) of one run."""
    cpu = time.process_time()
    t = time.perf_counter()
    got = c.run(units)
    if isinstance(got, tuple):
        return got[0], got[1], got[2] if len(got) > 2 else float("nan")
    return got, time.perf_counter() - t, time.process_time() - cpu


def calibrate(c: Contender, seconds: float) -> None:
    """Set ``c.units`` so that one round of it takes about ``seconds`` (warms it up too)."""
    if c.units:
        if c.warm_up:
            _timed(c, c.units)
        return
    units = 1
    while True:
        _, took, _ = _timed(c, units)
        if took >= seconds / 8 or units >= 1 << 24:
            break
        units *= 2
    c.units = max(1, round(units * seconds / max(took, 1e-9)))


def interleaved(contenders: list[Contender], n_rounds: int,
                seconds: float) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Records/s of each contender in each of ``n_rounds`` rounds, by the wall clock and per
    CPU second (all its threads: what it costs a machine that is busy with other work);
    each round times every contender once, in turn (so that the machine's drift falls on all
    of them alike)."""
    for c in contenders:
        calibrate(c, seconds)
    rates: dict[str, list[float]] = {c.name: [] for c in contenders}
    cpu_rates: dict[str, list[float]] = {c.name: [] for c in contenders}
    for _ in range(n_rounds):
        for c in contenders:
            count, took, cpu = _timed(c, c.units)
            rates[c.name].append(count / took)
            cpu_rates[c.name].append(count / cpu if cpu > 0 else float("nan"))
    return rates, cpu_rates


def spread(values: list[float], digits: int = 2) -> dict[str, float]:
    """Median, min and max of ``values``."""
    return {"median": round(statistics.median(values), digits),
            "min": round(min(values), digits), "max": round(max(values), digits)}


def ratios(rates: dict[str, list[float]], ours: str, peer: str) -> dict[str, float]:
    """``ours`` against ``peer``, round by round (median, min, max)."""
    return spread([a / b for a, b in zip(rates[ours], rates[peer], strict=True)])


def machine_load() -> dict[str, Any]:
    """The load on the machine now (it is shared: the figures' conditions)."""
    one, five, fifteen = os.getloadavg()
    return {"load_average": [round(one, 2), round(five, 2), round(fifteen, 2)],
            "cores": os.cpu_count()}


def hf_copy(records: Callable[[], Any], root: str, tag: str) -> str:
    """The records (``records()`` iterates them) saved once as a Hugging Face dataset of one
    binary column ``data`` under ``root`` (reused by every benchmark that compares with it)."""
    path = os.path.join(root, f"hf-{tag}")
    if not os.path.exists(path + ".done"):
        import datasets
        import pyarrow as pa

        table = pa.table({"data": pa.array(list(records()), type=pa.binary())})
        datasets.Dataset(table).save_to_disk(path)
        open(path + ".done", "w").close()
    return path
