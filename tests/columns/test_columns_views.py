"""Queries on columns (issue 48, step 2): ``ds.positions(...)``, ``ds.where(...)`` and
``ds.lookup(...)`` give exactly the records a brute-force scan of the generated truth gives,
for random conditions (hypothesis, derandomized) over datasets of several shards (an empty
one too), gzip files and OFRecords, through the key index and without it (the column
sidecars' pages), on the compiled and pure-Python loops; a view reads as a dataset (len,
items, slices, batches, iteration, samplers, resume, mixing)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex.errors import ColumnError, ColumnNotFoundError, StaleIndexError
from ofindex.read.view import DatasetView
from tests.kit.columns_data import NAMES, cut, records, write_dataset
from tests.kit.helpers import IMPLEMENTATIONS, implementation

SIZES = [230, 0, 401, 77, 292]


def brute(truth: dict, conditions: dict, kind: str) -> list[int]:
    """The records meeting every condition, by the documented rules, from the truth."""
    n = len(truth["label"])
    keep = np.ones(n, dtype=bool)
    for column, wanted in conditions.items():
        cast = (lambda v: np.float32(v)) if column == "score" and kind != "ofrecord" else (
            (lambda v: np.float64(v)) if column == "score" else
            (lambda v: v.encode() if isinstance(v, str) else v))
        mask = np.zeros(n, dtype=bool)
        for i, value in enumerate(truth[column]):
            if wanted is None:
                mask[i] = value is None
            elif isinstance(wanted, tuple):
                low, high = wanted
                mask[i] = value is not None and (low is None or cast(value) >= cast(low)) \
                    and (high is None or cast(value) < cast(high))
            else:
                items = wanted if isinstance(wanted, list) else [wanted]
                mask[i] = (value is None and None in items) or (value is not None and any(
                    v is not None and cast(value) == cast(v) for v in items))
        keep &= mask
    return np.flatnonzero(keep).tolist()


@pytest.fixture(scope="module", params=["example", "gzip", "ofrecord"])
def built(request, tmp_path_factory):
    """A dataset of 5 shards (one empty) with the three columns and their key indexes, and a
    copy without key indexes (queries read the column sidecars; its lookups too, as where
    the index directory cannot be written)."""
    kind = "ofrecord" if request.param == "ofrecord" else "example"
    payloads, truth = records(11, sum(SIZES), kind)
    root = tmp_path_factory.mktemp(f"views-{request.param}")
    data = write_dataset(str(root / "data"), cut(payloads, SIZES), kind=kind,
                         compressed=request.param == "gzip")
    ofindex.build_index(data, columns=list(NAMES), keys=True)
    bare = write_dataset(str(root / "bare"), cut(payloads, SIZES), kind=kind,
                         compressed=request.param == "gzip")
    ofindex.build_index(bare, columns=list(NAMES))
    assert not glob.glob(bare + ".ofindex/*.ofkey")  # written by a lookup, if any
    bare_ds = ofindex.open(bare)
    bare_ds._column_queries()._unwritable.update(NAMES)
    return kind, truth, ofindex.open(data), bare_ds


_LABEL = st.one_of(st.integers(-6, 6), st.lists(st.one_of(st.integers(-6, 6), st.none()),
                                                  max_size=4),
                   st.tuples(st.one_of(st.none(), st.integers(-6, 6)),
                             st.one_of(st.none(), st.integers(-6, 6))), st.none())
_SCORE = st.one_of(st.tuples(st.one_of(st.none(), st.floats(0, 1)),
                             st.one_of(st.none(), st.floats(0, 1))), st.none())
_ID = st.one_of(st.builds(lambda i: f"id-11-{i}", st.integers(0, 1100)),
                st.lists(st.builds(lambda i: b"id-11-%d" % i, st.integers(0, 1100)),
                         max_size=3),
                st.tuples(st.sampled_from([None, b"id-11-1", b"id-11-5", "id-11-"]),
                          st.sampled_from([None, b"id-11-2", b"id-11-6", b"id-12"])))


@st.composite
def conditions(draw):
    chosen = {}
    for name, strategy in (("label", _LABEL), ("score", _SCORE), ("image/id", _ID)):
        if draw(st.booleans()):
            chosen[name] = draw(strategy)
    if not chosen:
        chosen["label"] = draw(_LABEL)
    return chosen


@pytest.mark.parametrize("loops", IMPLEMENTATIONS)
@settings(max_examples=60)
@given(given_conditions=conditions())
def test_positions_are_what_a_scan_of_the_records_finds(built, loops, given_conditions):
    kind, truth, ds, bare = built
    want = brute(truth, given_conditions, kind)
    with implementation(loops):
        for dataset in (ds, bare):
            got = dataset.positions(**given_conditions)
            assert got.tolist() == want, given_conditions
            assert got.dtype == np.int64


@settings(max_examples=30)
@given(st.lists(st.integers(0, 1300), min_size=1, max_size=20))
def test_lookup_finds_every_key_and_nothing_else(built, ids):
    _, truth, ds, bare = built
    keys = [b"id-11-%d" % i for i in ids]
    want = [[j for j, v in enumerate(truth["image/id"]) if v == key] for key in keys]
    for dataset in (ds, bare):
        assert [found.tolist() for found in dataset.lookup("image/id", keys)] == want
        assert dataset.lookup("image/id", keys[0].decode()).tolist() == want[0]


def test_the_key_index_is_used_and_reads_few_pages(built):
    _, _, ds, _ = built
    columns = ds._column_queries()
    index = columns.key_index("image/id")
    assert index is not None and columns.key_index("label") is not None
    reads = []
    original = index.read
    index.read = lambda ranges: reads.append(len(ranges)) or original(ranges)
    index.leaves.clear()
    ds.lookup("image/id", [b"id-11-3", b"id-11-900", b"id-11-400"])
    assert len(reads) == 1 and reads[0] <= 3  # one round, a leaf at most per key


def test_a_view_reads_as_a_dataset(built):
    kind, truth, ds, _ = built
    view = ds.where(label=[1, 3])
    want = brute(truth, {"label": [1, 3]}, kind)
    assert isinstance(view, DatasetView) and len(view) == len(want)
    assert view.global_positions().tolist() == want
    records = [ds[i] for i in want]
    assert [view[i] for i in range(len(view))] == records
    assert view[-1] == records[-1] and view[3:9] == records[3:9]
    assert view[[5, 0, 5]] == [records[5], records[0], records[5]]
    assert view.__getitems__(np.array([2, 1])) == [records[2], records[1]]
    assert list(view) == records
    batches = list(view.iter_batches(50))
    assert [len(b) for b in batches] == [50] * (len(want) // 50) + (
        [len(want) % 50] if len(want) % 50 else [])
    assert [r for b in batches for r in b] == records
    buffers = list(view.iter_batches(64, 10, 200, as_buffer=True))
    assert [r for b in buffers for r in b] == records[10:200] and buffers[0].first == 10
    assert view.record_lengths([0, 1]).tolist() == ds.record_lengths(want[:2]).tolist()
    assert view.locate(0) == ds.locate(want[0])
    with pytest.raises(IndexError):
        view[len(view)]
    counts = view.cumulative_counts
    assert counts[-1] == len(view) and len(counts) == len(SIZES)
    narrower = view.where(score=(0.5, None))
    assert narrower.global_positions().tolist() == brute(
        truth, {"label": [1, 3], "score": (0.5, None)}, kind)
    assert view.identity != ds.identity and view.identity != narrower.identity


def test_samplers_resume_and_mixing_take_a_view(built):
    from ofindex.errors import StateError
    from ofindex.shuffle import BlockShuffleSampler, GlobalShuffleSampler, MixtureSampler

    _, _, ds, _ = built
    view = ds.where(label=2)
    sampler = GlobalShuffleSampler(view, seed=3)
    order = list(sampler)
    assert sorted(order) == list(range(len(view)))
    walk = iter(GlobalShuffleSampler(view, seed=3))
    first = [next(walk) for _ in range(10)]
    assert first == order[:10]
    resumed = GlobalShuffleSampler(view, seed=3)
    saved = {**sampler.state_dict(), "position": 10, "consumed": 10}
    assert saved["dataset"] == view.identity
    resumed.load_state_dict(saved)
    assert list(resumed) == order[10:]
    other = ds.where(label=[0, 4])  # more records: the first len(view) of them
    same_size = DatasetView(ds, other.global_positions()[:len(view)])
    with pytest.raises(StateError, match="dataset"):  # another view of as many records
        GlobalShuffleSampler(same_size, seed=3).load_state_dict(saved)
    blocks = BlockShuffleSampler(view, block_size=8, window=2, seed=1)
    assert sorted(blocks) == list(range(len(view)))
    mixture = MixtureSampler([view, other], [1, 1], batch_size=8, seed=0)
    batch = next(iter(mixture))
    assert mixture.source_of(batch).tolist() == [0] * 4 + [1] * 4


def test_conditions_of_no_known_form_are_refused(built):
    _, _, ds, _ = built
    with pytest.raises(ColumnError, match="tuple is a range"):
        ds.where(label=(1, 2, 3))
    with pytest.raises(ColumnError, match="int64"):
        ds.where(label="three")
    with pytest.raises(ColumnError, match="not a whole number"):
        ds.positions(label=2.5)
    with pytest.raises(ColumnError, match="bytes or str"):
        ds.positions(**{"image/id": 3})
    with pytest.raises(ColumnError, match="at least one condition"):
        ds._column_queries().positions({})
    with pytest.raises(ColumnNotFoundError, match=r"columns=\['nope'"):
        ds.positions(nope=1)


def test_a_column_of_an_older_index_is_refused(tmp_path):
    payloads, _ = records(12, 300)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [150, 150]))
    ofindex.build_index(data, columns=["label"])
    other, _ = records(13, 150)
    write_dataset(data + "-new", [other])
    os.replace(os.path.join(data + "-new", "part-000"), os.path.join(data, "part-001"))
    ofindex.build_index(data)  # part-001's sidecar rebuilt, its label column left as it was
    with pytest.raises(StaleIndexError, match="another version"):
        ofindex.open(data, manifest=False).positions(label=1)


def test_touching_local_ranges_are_read_at_once(tmp_path, monkeypatch):
    """A key index's pages that lie one after the other (a query's leaves) are read from a
    local file in one read, each range given exactly; ranges apart, and runs past the cap,
    are read on their own."""
    from ofindex.columns import query
    from ofindex.storage.local import LocalStorage

    data = bytes(range(256)) * 4
    path = str(tmp_path / "pages")
    with open(path, "wb") as f:
        f.write(data)
    storage = LocalStorage()
    reads = []
    real = storage.read
    monkeypatch.setattr(storage, "read", lambda p, a, b: reads.append((a, b)) or real(p, a, b))
    monkeypatch.setattr(query, "_RUN_BYTES", 500)
    ranges = [(0, 10), (10, 300), (300, 301), (301, 301), (400, 420), (420, 900), (900, 1000)]
    got = query._read(storage, path, ranges)
    assert got == [data[a:b] for a, b in ranges]
    assert reads == [(0, 301), (400, 900), (900, 1000)]
    storage.close()
