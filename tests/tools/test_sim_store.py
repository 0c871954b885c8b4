"""The scale simulation's synthetic store (``tools/sim_store.py``) serves what ofindex itself
would write: its generated sidecars equal the ones ``build_index`` makes from its generated
data, and records read through pages carry their own record numbers."""

from __future__ import annotations

import struct
import sys

import numpy as np

import ofindex
from tests.kit import paths

sys.path.insert(0, paths.TOOLS)
import sim_store


def test_generated_sidecars_equal_built_ones(tmp_path):
    url = sim_store.dataset_url(6000, 3, 120)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    ofindex.build_index(url + "/", index_dir=str(tmp_path), manifest=False)
    for k in range(3):
        with open(tmp_path / f"part-{k:05d}.ofidx", "rb") as f:
            built = f.read()
        assert built == sim.sidecar(k, 0, sim.sidecar_size(k))
        assert sim.sidecar(k, 1000, 1333) == built[1000:1333]  # any range, generated alone


def test_paged_reads_of_a_billion_records():
    url = sim_store.dataset_url(10**9, 10**4, 200)
    ds = ofindex.open(url)
    assert len(ds) == 10**9 and len(ds.shards) == 10**4
    idx = np.random.default_rng(0).integers(0, len(ds), 256)
    sim_store.STATS.reset()
    got = ds[idx]
    for i, payload in zip(idx.tolist(), got, strict=True):
        assert payload[:8] == struct.pack("<Q", i)
    sidecar_bytes = sim_store.STATS.bytes["sidecar"]
    assert sidecar_bytes < 256 * 1024  # pages and headers, not 256 sidecars of 800 kB
