"""Batches read with compiled ``preadv`` calls (``mmap=False``: the ``COMPILED_PREADS``
strategy, csrc/preads.c) give exactly what the uncompiled reads give — the same payloads in
the order asked for, the same errors — on intact and corrupt files, files truncated after
they were opened, batches with duplicates and neighbours, on threads and not.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex import _accel
from ofindex.read import mapped_gather
from ofindex.read.access import DescriptorAccess, descriptors
from tests.kit.corruption import corrupt, spelled_anywhere, write_parts
from tests.kit.helpers import implementation


@settings(max_examples=60, deadline=None)
@given(
    shards=st.lists(st.lists(st.binary(max_size=300), max_size=6), min_size=1, max_size=3),
    fmt=st.sampled_from(["tfrecord", "ofrecord"]),
    checksums=st.booleans(),
    verify=st.booleans(),
    how=st.sampled_from(["none", "data byte", "shifted offset", "checksum", "truncated"]),
    after_open=st.booleans(),
    threads=st.booleans(),
    where=st.integers(0, 10_000),
    data=st.data(),
)
def test_compiled_preads_give_what_the_uncompiled_reads_give(
        tmp_path_factory, shards, fmt, checksums, verify, how, after_open, threads, where,
        data):
    n = sum(map(len, shards))
    batches = [data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=12))
               for _ in range(3)] if n else []
    batches += [list(range(n)), list(range(n))[::-1]] if n else []

    def reads():
        paths = write_parts(str(tmp_path_factory.mktemp("preads")), shards, fmt, checksums)
        if not after_open:
            corrupt(paths, shards, how, where)
        out = []
        try:
            ds = ofindex.open(paths, mmap=False, verify=verify)
            if after_open:
                out.append(_outcome(lambda: ds.__getitems__(list(range(n)))))
                corrupt(paths, shards, how, where)
            out += [_outcome(lambda b=b: ds.__getitems__(b)) for b in batches]
        except Exception as exc:  # a truncated file is refused at open
            out.append((type(exc).__name__, str(exc)))
        here = os.path.dirname(paths[0])
        return [(kind, re.sub(r"\d{7,}", "N", spelled_anywhere(str(v), here))) for kind, v in out]

    limit = mapped_gather.PARALLEL_BYTES
    mapped_gather.PARALLEL_BYTES = 64 if threads else 1 << 62  # big batches: on threads
    try:
        with implementation("compiled"):
            compiled = reads()
        with implementation("pure-python"):
            uncompiled = reads()
    finally:
        mapped_gather.PARALLEL_BYTES = limit
    assert compiled == uncompiled


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)


def test_the_compiled_reads_serve_local_batches_without_maps(tmp_path, monkeypatch):
    native = _accel.native
    assert native is not None
    records = [bytes([i % 251]) * (i * 37 % 5000) for i in range(300)]
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p, mmap=False)
    assert ds._accesses.uniform == DescriptorAccess(native)
    served = []
    preads = descriptors.compiled_preads
    monkeypatch.setattr(descriptors, "compiled_preads",
                        lambda *args, **kwargs: served.append(1) or preads(*args, **kwargs))
    idx = np.array([5, 6, 7, 299, 0, 5, 150, 151, 3])  # neighbours, a duplicate, the ends
    assert ds.__getitems__(idx) == [records[i] for i in idx]
    assert ds[10:20] == records[10:20]
    assert served == [1, 1]


@pytest.mark.parametrize("gap", [0, 100, 4096])
def test_neighbours_are_read_together_whatever_the_gap(tmp_path, gap):
    """Records read in runs of neighbours (gaps read through into scratch) or one by one:
    the same payloads."""
    native = _accel.native
    assert native is not None
    records = [os.urandom(n) for n in (0, 1, 500, 3000, 7, 64, 4097, 12)]
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p, mmap=False)
    ds.max_gap = gap
    picks = [0, 2, 3, 5, 7, 1, 6, 4]
    assert ds.__getitems__(picks) == [records[i] for i in picks]
