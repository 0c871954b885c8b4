"""Reads through a faulty network: 2,000 random records, 1,000 from nginx and 1,000 from moto
(S3), half TFRecord and half OFRecord, through tests/kit/faultproxy.py, which drops 10 % of the
connections and delays, truncates, flips a bit in or answers ``200`` with the whole object to
some of the others.

What must hold: zero wrong records (a flipped payload bit is caught by TFRecord's CRC or the
OFRecord checksum in the sidecar, a flipped header bit by the length checks, a flipped sidecar
bit by its CRC, a whole object instead of a range by the length check); dropped and truncated
answers retried (storage/retry.py) so that they rarely surface; whatever does surface is an
OfindexError naming the URL. A read failing with SidecarError (a bit flipped in the manifest
or a sidecar) reopens the dataset, as an application would.
"""

from __future__ import annotations

import collections
import os
import zlib

import numpy as np
import pytest

import ofindex
from ofindex import CorruptRecordError, OfindexError, SidecarError
from ofindex.errors import RangeReadError, StorageError
from ofindex.transport.policy import RequestPolicy, retry_settings
from tests.kit import servers
from tests.kit.faultproxy import FaultProxyProcess
from tests.kit.helpers import index_dir_of

PER_FORMAT = 500  # records read per format and server: 2,000 in all
RATES = {"drop": 0.10, "delay": 0.05, "truncate": 0.05, "full_body": 0.03, "flip": 0.03}
#: The default policy with waits 25x shorter (the suite stays fast; tools/bench_hardening.py
#: --faults measures the default one).
SHORT_WAITS = RequestPolicy(base_delay=0.01, throttle_delay=0.04)


def _dataset(root: str, fmt: str, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    records = []
    for k in range(2):
        recs = [rng.bytes(int(rng.integers(200, 3000))) for _ in range(150)]
        with ofindex.Writer(os.path.join(root, f"part-{k}"), format=fmt, index=False) as w:
            w.write_many(recs)
        records += recs
    # sidecars and manifest; OFRecord sidecars carry payload checksums (it has no CRC)
    ofindex.build_index(root, checksums=fmt == "ofrecord")
    return records


def _upload(backend: str, srv, local: str, prefix: str) -> None:
    """Copy the data directory ``local`` and its index directory (``<local>.ofindex/``) to
    ``prefix`` and ``<prefix>.ofindex/`` on the server."""
    places = [(local, prefix), (index_dir_of(local), prefix + ".ofindex")]
    if backend == "nginx":
        for source, target in places:
            dest = os.path.join(srv.root, target)
            os.makedirs(dest, exist_ok=True)
            for name in os.listdir(source):
                with open(os.path.join(source, name), "rb") as src, \
                        open(os.path.join(dest, name), "wb") as out:
                    out.write(src.read())
        return
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_options(srv.url))
    for source, target in places:
        for name in os.listdir(source):
            with open(os.path.join(source, name), "rb") as f:
                fs.pipe_file(f"ofindex-test/{target}/{name}", f.read())


def _open(url: str, options: dict | None, tally: collections.Counter) -> ofindex.Dataset:
    for _ in range(20):
        try:
            ds = ofindex.open(url, storage_options=options)
            ds.max_gap = 0  # one request per record: as many chances for a fault as records
            return ds
        except OfindexError as exc:  # the manifest or a sidecar hit by a fault
            tally[f"open: {type(exc).__name__}"] += 1
    raise AssertionError(f"could not open {url} in 20 attempts: {tally}")


@pytest.mark.parametrize("backend", ["nginx", "moto"])
@pytest.mark.slow
def test_two_thousand_random_reads_through_a_faulty_network(backend, request, tmp_path):
    srv = request.getfixturevalue("nginx_server" if backend == "nginx" else "moto_server")
    tally: collections.Counter[str] = collections.Counter()
    with FaultProxyProcess(srv.url, seed=zlib.crc32(backend.encode()), **RATES) as proxy, \
            retry_settings(policy=SHORT_WAITS):
        for fmt in ("tfrecord", "ofrecord"):
            local = str(tmp_path / fmt)
            records = _dataset(local, fmt, seed=len(fmt))
            prefix = f"faulty-{os.urandom(4).hex()}/{fmt}"
            _upload(backend, srv, local, prefix)
            if backend == "nginx":
                url, options = f"{proxy.url}/{prefix}/", None
            else:
                url = f"s3://ofindex-test/{prefix}"
                options = servers.s3_options(proxy.url)
            _read_randomly(url, options, records, tally)
    counts = dict(proxy.counts)
    total = 2 * PER_FORMAT  # for this server
    print(f"\n{backend}: {proxy.requests} requests, faults {counts}, outcomes {dict(tally)}")
    assert tally["wrong"] == 0
    assert sum(tally.values()) - sum(v for k, v in tally.items() if k.startswith("open")) \
        == total
    for fault in ("drop", "truncate", "full_body", "flip"):
        assert counts.get(fault, 0) > 0, f"the proxy injected no {fault}: {counts}"
    # drops and truncations are retried: they reach the caller only when a request loses all
    # its attempts (p = 0.15**11 per request); wrong bytes are refused at once (not retried:
    # a server ignoring Range would answer the same again), each by its own check
    assert tally["retries exhausted"] <= 0.02 * total, tally
    assert set(tally) <= {"correct", "retries exhausted", "wrong bytes (200, not 206)",
                          "corrupt record", "corrupt sidecar or manifest", "wrong"} | {
        k for k in tally if k.startswith("open")}, tally
    # batches of 25 requests often meet a fault: a good share still reads correctly (the
    # draws follow the order requests reach the proxy, which varies from run to run)
    assert tally["correct"] >= 0.15 * total, tally


def _cause(exc: OfindexError) -> str:
    """Which fault an error reports."""
    text = str(exc)
    if isinstance(exc, (RangeReadError, StorageError)) and "attempt" in text:
        return "retries exhausted"
    if isinstance(exc, RangeReadError):  # 200 instead of 206, or a body of another length
        return "wrong bytes (200, not 206)"
    if isinstance(exc, CorruptRecordError):  # a CRC, a checksum or a length check
        return "corrupt record"
    if isinstance(exc, SidecarError):
        return "corrupt sidecar or manifest"
    return type(exc).__name__


def _read_randomly(url: str, options: dict | None, records: list[bytes],
                   tally: collections.Counter) -> None:
    ds = _open(url, options, tally)
    rng = np.random.default_rng(7)
    done = 0
    while done < PER_FORMAT:
        size = 1 if done < PER_FORMAT // 5 else 25  # single reads, then batches
        idx = rng.integers(0, len(records), size).tolist()
        try:
            got = ds.__getitems__(idx) if size > 1 else [ds[idx[0]]]
        except OfindexError as exc:
            assert "127.0.0.1" in str(exc) or "s3://" in str(exc), exc  # names the URL
            tally[_cause(exc)] += len(idx)
            if isinstance(exc, SidecarError):
                ds = _open(url, options, tally)  # a corrupt manifest or sidecar: reopen
        else:
            for i, payload in zip(idx, got, strict=True):
                tally["correct" if payload == records[i] else "wrong"] += 1
        done += len(idx)
