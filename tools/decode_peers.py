"""The peers of tools/bench_decode.py that index TFRecord files for random access in place:
``tfr-reader`` (a Cython indexer, a polars index) and ``tfd-utils`` (an index by a key feature).

On the one-record rows' dataset (Examples of ``key``, ``label``, ``payload``: one TFRecord file,
a hard link of it per tool, so that each keeps its own index beside it), in interleaved rounds
(tools/benchlib.py), by the wall clock and per CPU second:

- one random record decoded: ``ofindex.open(..., decode=Decoder(spec))[i]`` (a dict of numpy
  arrays), tfr-reader's ``ds[i]`` (its ``Feature``: the record parsed by its Cython decoder,
  values read on access), and tfd-utils' ``get_record(key)`` (a protobuf ``Example``; it has no
  access by position, so its row reads random keys: another operation, shown for scale);
- random batches of 256: ``BatchDecoder(spec)(ds[batch])`` (a dict of arrays) against
  tfr-reader's ``ds[batch]`` (a list of ``Feature``); tfd-utils has no batch read;
- the index build of the whole file: ``ofindex.build_index(path, workers=1)``, tfr-reader's
  ``build_index_from_dataset_dir(processes=1)`` (its parquet index of offsets) and tfd-utils'
  indexing by ``key`` (one process; it parses every record for its key; its first access to a
  missing index also takes a lock that waits 1 s, left out), each round from scratch; CPU time
  counts the processes a build starts (tfr-reader's pool).

Goal (issue 45): ofindex at least 2x both on every row where both offer the operation.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from benchlib import Contender, ratios, spread
from benchlib import interleaved as interleaved_rates

BATCH = 256
#: The rows compared, and with whom: (ours, peer, whether the peer does the same operation).
COMPARED = [("ofindex open(decode=Decoder(spec))[i]", "tfr-reader ds[i]", True),
            ("ofindex open(decode=Decoder(spec))[i]", "tfd-utils get_record(key)", False),
            ("ofindex BatchDecoder(spec)(ds[batch])", "tfr-reader ds[batch]", True)]
BUILDS = ("ofindex build_index", "tfr-reader build_index_from_dataset_dir",
          "tfd-utils index by key")


def _linked(path: str, directory: str) -> str:
    """A hard link of ``path`` in ``directory`` (made once): one data file, an index per tool."""
    os.makedirs(directory, exist_ok=True)
    linked = os.path.join(directory, os.path.basename(path))
    if not os.path.exists(linked):
        os.link(path, linked)
    return linked


def _quiet(fn: Callable[[], Any]) -> Any:
    """``fn()`` with its progress lines on stdout and stderr dropped."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn()


class _Peers:
    """Each tool's reader of the same file (``None`` where the tool is not installed), and
    why a tool is missing."""

    def __init__(self, path: str, root: str, spec: dict) -> None:
        import ofindex
        from ofindex.decode import BatchDecoder, Decoder

        self.missing: dict[str, str] = {}
        self.paths = {tool: _linked(path, os.path.join(root, tool))
                      for tool in ("ofindex", "tfr-reader", "tfd-utils")}
        self.raw = ofindex.open(self.paths["ofindex"], build_missing=True)
        self.decoded = ofindex.open(self.paths["ofindex"], decode=Decoder(spec))
        self.batch_decoder = BatchDecoder(spec)
        self.tfr: Any = None
        self.tfd: Any = None
        try:
            import tfr_reader

            # its reader logs each load at INFO (and sets the root logger's level to INFO)
            logging.getLogger("TFRecordDatasetReader").setLevel(logging.WARNING)
            directory = os.path.dirname(self.paths["tfr-reader"])
            if not os.path.exists(os.path.join(directory, "tfrds-reader-index.parquet")):
                _quiet(lambda: tfr_reader.TFRecordDatasetReader.build_index_from_dataset_dir(
                    directory, filepattern="*.tfrecord", processes=1))
            self.tfr = tfr_reader.TFRecordDatasetReader(directory, verbose=False)
        except ImportError as exc:
            self.missing["tfr-reader"] = f"skipped (tfr-reader not installed: {exc})"
        try:
            from tfd_utils.random_access import TFRecordRandomAccess

            self.tfd = _quiet(lambda: self._tfd_reader(TFRecordRandomAccess))
        except ImportError as exc:
            self.missing["tfd-utils"] = f"skipped (tfd-utils not installed: {exc})"

    def _tfd_reader(self, reader_class: Any, build: bool = False) -> Any:
        """tfd-utils' reader of its link with its index loaded (built when missing), or with
        ``build`` its index built afresh by its indexing itself: its first access to a
        missing index also takes its lock, which waits 1 s (not counted here)."""
        reader = reader_class(self.paths["tfd-utils"], key_feature_name="key",
                              index_file=self.paths["tfd-utils"] + ".index.pkl",
                              progress_interval=1 << 40, use_multiprocessing=False)
        if build:
            reader._build_index()  # reads every record for its key, then saves the index
        else:
            reader.index  # noqa: B018 (loads the index, or builds it)
        return reader

    def close(self) -> None:
        self.raw.close()
        self.decoded.close()
        if self.tfd is not None:
            self.tfd.close()


def _checks(peers: _Peers, order: list[int]) -> dict[str, bool]:
    """Whether every tool returns the same values as ofindex for a few random records."""
    probe = order[:50]
    ours = [peers.decoded[i] for i in probe]
    checks = {}
    if peers.tfr is not None:
        theirs = [peers.tfr[i] for i in probe]
        checks["tfr-reader ds[i] equals ofindex"] = all(
            all(t[name].value[0] == o[name].item() for name in ("key", "label", "payload"))
            for t, o in zip(theirs, ours, strict=True))
        batch = peers.batch_decoder(peers.raw[probe])
        checks["tfr-reader ds[batch] equals ofindex"] = all(
            t["payload"].value[0] == p for t, p in zip(peers.tfr[probe], batch["payload"],
                                                       strict=True))
    if peers.tfd is not None:
        checks["tfd-utils get_record(key) equals ofindex"] = all(
            peers.tfd.get_record(o["key"].item().decode()).features.feature["payload"]
            .bytes_list.value[0] == o["payload"].item() for o in ours)
    return checks


def _contenders(peers: _Peers, order: list[int]) -> list[Contender]:
    """The read rows' contenders, each reading random record numbers (keys for tfd-utils)."""
    keys = [b"key-%08d" % i for i in order]  # as single_dataset names them
    batches = [order[at:at + BATCH] for at in range(0, len(order) - BATCH + 1, BATCH)]

    def records(get: Callable[[int], Any], items: list[Any]) -> Callable[[int], int]:
        def run(units: int) -> int:
            for item in items[:units]:
                get(item)
            return units
        return run

    def in_batches(get: Callable[[list[int]], Any]) -> Callable[[int], int]:
        def run(units: int) -> int:
            count = max(1, min(len(batches), units // BATCH))
            for batch in batches[:count]:
                get(batch)
            return count * BATCH
        return run

    contenders = [Contender("ofindex open(decode=Decoder(spec))[i]",
                            records(peers.decoded.__getitem__, order)),
                  Contender("ofindex BatchDecoder(spec)(ds[batch])",
                            in_batches(lambda b: peers.batch_decoder(peers.raw[b])))]
    if peers.tfr is not None:
        contenders += [Contender("tfr-reader ds[i]", records(peers.tfr.__getitem__, order)),
                       Contender("tfr-reader ds[batch]", in_batches(peers.tfr.__getitem__))]
    if peers.tfd is not None:
        tfd = peers.tfd
        contenders.append(Contender("tfd-utils get_record(key)",
                                    records(lambda key: tfd.get_record(key.decode()), keys)))
    return contenders


def _cpu() -> float:
    """CPU seconds of this process and of the processes it waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _builds(peers: _Peers) -> dict[str, Callable[[], object]]:
    """Each tool's index build of its link, from no index."""
    import ofindex

    builds: dict[str, Callable[[], object]] = {
        BUILDS[0]: lambda: ofindex.build_index(peers.paths["ofindex"], workers=1, resume=False)}
    if peers.tfr is not None:
        import tfr_reader

        directory = os.path.dirname(peers.paths["tfr-reader"])
        builds[BUILDS[1]] = lambda: _quiet(
            lambda: tfr_reader.TFRecordDatasetReader.build_index_from_dataset_dir(
                directory, filepattern="*.tfrecord", processes=1))
    if peers.tfd is not None:
        from tfd_utils.random_access import TFRecordRandomAccess

        builds[BUILDS[2]] = lambda: _quiet(
            lambda: peers._tfd_reader(TFRecordRandomAccess, build=True).close())
    return builds


def _build_rows(peers: _Peers, n: int, rounds: int) -> list[dict]:
    """The index builds, interleaved round by round: seconds, records/s and ofindex's ratio
    to each peer (wall clock and CPU, counting the processes a build starts)."""
    builds = _builds(peers)
    wall: dict[str, list[float]] = {name: [] for name in builds}
    cpu: dict[str, list[float]] = {name: [] for name in builds}
    for fn in builds.values():
        fn()  # warm-up (and the file in the page cache)
    for _ in range(rounds):
        for name, fn in builds.items():
            c0, t0 = _cpu(), time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu() - c0)
    rows = []
    for name in builds:
        row: dict = {"contender": name, "seconds": spread(wall[name], 4),
                     "records_per_s": spread([n / s for s in wall[name]], 0)}
        if name != BUILDS[0]:
            row["ofindex_vs"] = spread([t / o for t, o in zip(wall[name], wall[BUILDS[0]],
                                                              strict=True)])
            row["ofindex_vs_cpu"] = spread([t / o if o > 0 else float("nan") for t, o in zip(
                cpu[name], cpu[BUILDS[0]], strict=True)])
        rows.append(row)
    return rows


def peers_section(path: str, root: str, n: int, spec: dict, rounds: int, seconds: float,
                  build_rounds: int) -> dict:
    """The rows of the module doc (``path``: the one-record rows' TFRecord file of ``n``
    Examples; ``root``: where the tools' links and indexes go)."""
    peers = _Peers(path, os.path.join(root, f"decode-peers-{n}"), spec)
    try:
        order = np.random.default_rng(11).integers(0, n, 1 << 20).tolist()
        checks = _checks(peers, order)
        contenders = _contenders(peers, order)
        rates, cpu_rates = interleaved_rates(contenders, rounds, seconds)
        rows = []
        for c in contenders:
            row: dict = {"contender": c.name, **{
                f"records_per_s{'' if k == 'median' else '_' + k}": v
                for k, v in spread(rates[c.name], 0).items()}}
            compared = [(peer, same) for ours, peer, same in COMPARED
                        if ours == c.name and peer in rates]
            if compared:
                row["vs"] = {peer: ratios(rates, c.name, peer) for peer, _ in compared}
                row["vs_cpu"] = {peer: ratios(cpu_rates, c.name, peer) for peer, _ in compared}
                row["not_the_same_operation"] = [peer for peer, same in compared if not same]
            rows.append(row)
        builds = _build_rows(peers, n, build_rounds)
    finally:
        peers.close()
    return {"records": n, "batch": BATCH, "rounds": rounds, "build_rounds": build_rounds,
            "checks": checks, "missing": peers.missing, "rows": rows, "builds": builds}


def print_peers(section: dict) -> None:
    """The section on the terminal."""
    print(f"peers that index TFRecords in place: {section['records']} Examples")
    for row in section["rows"]:
        print(f"  {row['contender']:40s} {row['records_per_s']:>12,.0f} records/s "
              f"({row['records_per_s_min']:,.0f}-{row['records_per_s_max']:,.0f})")
        for peer, v in row.get("vs", {}).items():
            c = row["vs_cpu"][peer]
            note = " (not the same operation)" if peer in row["not_the_same_operation"] else ""
            print(f"      {v['median']:.2f}x {peer} ({v['min']:.2f}-{v['max']:.2f}); per CPU "
                  f"second {c['median']:.2f}x ({c['min']:.2f}-{c['max']:.2f}){note}")
    for row in section["builds"]:
        s = row["seconds"]
        line = f"  {row['contender']:40s} {s['median']:.3f} s ({s['min']:.3f}-{s['max']:.3f})"
        if "ofindex_vs" in row:
            v, c = row["ofindex_vs"], row["ofindex_vs_cpu"]
            line += (f"; ofindex {v['median']:.1f}x ({v['min']:.1f}-{v['max']:.1f}), per CPU "
                     f"second {c['median']:.1f}x ({c['min']:.1f}-{c['max']:.1f})")
        print(line)
    for tool, why in section["missing"].items():
        print(f"  {tool}: {why}")
    print(f"  checks: {section['checks']}")
