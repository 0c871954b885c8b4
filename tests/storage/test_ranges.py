"""The pure read planner, tested without I/O."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex.read.payloads import coalesce


@st.composite
def wanted(draw):
    n = draw(st.integers(0, 40))
    files = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    starts = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    lens = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    return (np.array(starts, dtype=np.int64), np.array(starts, dtype=np.int64) + lens,
            np.array(files, dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(wanted(), st.integers(0, 500), st.integers(1, 2000))
def test_plan_covers_every_range_within_limits(w, max_gap, max_bytes):
    starts, ends, files = w
    plan = coalesce(starts, ends, max_gap, max_bytes, files=files)
    fs, fe, ff = plan.fetch_starts, plan.fetch_ends, plan.fetch_files
    for k in range(len(starts)):
        j = plan.item_fetch[k]
        assert ff[j] == files[k]
        assert fs[j] + plan.item_offset[k] == starts[k] and ends[k] <= fe[j]
    for j in range(len(fs)):
        members = np.flatnonzero(plan.item_fetch == j)
        assert len(members) > 0
        # a read grows past max_bytes only by a range overlapping what it already holds
        order = members[np.argsort(starts[members], kind="stable")]
        reach = ends[order[0]]
        for m in order[1:]:
            if max(reach, ends[m]) - fs[j] > max_bytes:
                assert starts[m] < reach
            reach = max(reach, ends[m])
    # reads of one file are disjoint and ordered, separated by more than max_gap
    for f in set(ff.tolist()):
        sel = np.flatnonzero(ff == f)
        assert np.all(fs[sel][1:] >= fe[sel][:-1])
    assert plan.bytes_fetched == int((fe - fs).sum())


def test_examples():
    plan = coalesce([100, 0, 10, 1000], [110, 10, 20, 1010], max_gap=80, max_bytes=10_000)
    assert plan.fetch_starts.tolist() == [0, 1000] and plan.fetch_ends.tolist() == [110, 1010]
    assert plan.item_fetch.tolist() == [0, 0, 0, 1]
    assert plan.item_offset.tolist() == [100, 0, 10, 0]
    # same offsets in different files never merge
    plan = coalesce([0, 0], [10, 10], max_gap=50, files=[1, 0])
    assert plan.fetch_files.tolist() == [0, 1] and plan.item_fetch.tolist() == [1, 0]
    # duplicates share one read
    plan = coalesce([5, 5, 5], [9, 9, 9], max_gap=0)
    assert plan.fetch_starts.tolist() == [5] and plan.item_fetch.tolist() == [0, 0, 0]
    # max_bytes splits a run of adjacent records
    plan = coalesce([0, 10, 20, 30], [10, 20, 30, 40], max_gap=0, max_bytes=20)
    assert plan.fetch_starts.tolist() == [0, 20] and plan.fetch_ends.tolist() == [20, 40]
    assert coalesce([], []).fetches == []
