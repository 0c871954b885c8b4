"""Key lookups at scale (issue 48): the simulated store (tools/sim_store.py) holds a
1e9-record dataset of 1e4 shards whose column ``id`` (record i's id is i) has a key index
generated on demand; ``lookup`` and a range ``where`` find exactly the records asked for by
reading a few pages of the key index (its header and root, one node and one leaf a key), no
sidecar, no column sidecar and no data."""

from __future__ import annotations

import struct
import sys

import numpy as np

import ofindex
from ofindex.columns.key_file import KeyIndex
from tests.kit import paths

sys.path.insert(0, paths.TOOLS)
import sim_store


def test_lookups_in_a_billion_records_read_a_few_pages():
    url = sim_store.dataset_url(10**9, 10**4, 200)
    ds = ofindex.open(url)
    sim_store.STATS.reset()
    keys = [5, 123_456_789, 10**9 - 1, 10**9, -1, 777_777_777]
    found = ds.lookup("id", keys)
    assert [f.tolist() for f in found] == [[5], [123_456_789], [10**9 - 1], [], [],
                                           [777_777_777]]
    index = ds._column_queries().key_index("id")
    assert index is not None and index.header.levels == 2  # root -> 60 nodes -> 244,141 leaves
    requests, nbytes = sim_store.STATS.requests, sim_store.STATS.bytes
    assert set(requests) == {"keys"}  # no sidecar, no column sidecar, no data read
    assert requests["keys"] <= 1 + 4 + 4  # header and root, then a node and a leaf a key
    assert nbytes["keys"] < 1 << 20
    sim_store.STATS.reset()
    got = ds.positions(id=(500_000_000, 500_000_100))
    assert got.tolist() == list(range(500_000_000, 500_000_100))
    assert sim_store.STATS.requests["keys"] <= 2  # a node and a leaf
    payloads = ds[np.concatenate(found)]
    assert [struct.unpack_from("<Q", p)[0] for p in payloads] == [5, 123_456_789, 10**9 - 1,
                                                                  777_777_777]


def test_the_simulated_key_index_is_a_valid_one():
    """A small one read whole by the format's reader: every key found where it should be,
    every page's CRC, size and pointers checked on the way."""
    sim = sim_store.dataset_named("ds-20000-3-100")
    raw = sim.keys.read(0, sim.keys.size)
    index = KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "sim", len(raw))
    assert index.header.entries == 20000 and index.header.root_children == 5
    found = index.search([(k, k, True) for k in range(0, 20000, 997)] + [(None, None, False)])
    assert [f.tolist() for f in found[:-1]] == [[k] for k in range(0, 20000, 997)]
    assert found[-1].tolist() == list(range(20000))
