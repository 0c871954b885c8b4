"""``ds.lookup(column, key)`` of one key (issue 45, goal 4): one compiled call once the key's
leaf is held (csrc/keysearch.c's ``KeyFinder``), giving what the pure-Python path gives
(records, or the same error and warnings) for keys of every type a caller passes; a dataset
refreshed, pickled or a view looks keys up in what it holds now."""

from __future__ import annotations

import os
import pickle
import sys
import warnings

import numpy as np
import pytest

import ofindex
from ofindex.errors import StaleIndexError
from tests.kit.columns_data import NAMES, cut, records, write_dataset
from tests.kit.helpers import IMPLEMENTATIONS, implementation

SIZES = [180, 0, 260, 120]


@pytest.fixture(scope="module", params=["example", "ofrecord"])
def built(request, tmp_path_factory):
    """A dataset with the three columns' key indexes (leaves of the default size), and its
    truth."""
    payloads, truth = records(31, sum(SIZES), request.param)
    data = write_dataset(str(tmp_path_factory.mktemp(f"one-{request.param}") / "data"),
                         cut(payloads, SIZES), kind=request.param)
    ofindex.build_index(data, columns=list(NAMES))
    return truth, data


def _keys(truth):
    """Keys of every type a caller may pass, per column: held ones, missing ones, and ones
    of another type than the column's (converted, or refused)."""
    labels = [value for value in truth["label"] if value is not None]
    scores = [value for value in truth["score"] if value is not None]
    return {
        "image/id": [b"id-31-7", "id-31-300", b"id-31-9999", "id-31-", b"", "\u00e9",
                     bytearray(b"id-31-8"), np.bytes_(b"id-31-9"), 5, True, "\ud800"],
        "label": [labels[0], -1, 99, np.int64(labels[1]), float(labels[2]), 2.5, True,
                  "3", 1 << 70, -(1 << 63), None],
        "score": [scores[0], scores[5], 0.123, float("nan"), np.float32(scores[3]), 1,
                  1e300, -float("inf"), True, b"x"],
    }


def _answer(ds, column, key):
    """What ``ds.lookup(column, key)`` gives: the records, or the error's type and words; and
    the warnings' types."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            found = ds.lookup(column, key)
        except Exception as error:  # the error itself is compared
            return type(error).__name__, str(error)
    assert isinstance(found, np.ndarray) and found.dtype == np.int64
    return found.tolist(), [w.category.__name__ for w in caught]


def test_one_key_lookups_give_what_the_pure_path_gives(built):
    truth, data = built
    keys = _keys(truth)
    answers = {}
    for loops in ("pure-python", "compiled"):
        with implementation(loops):
            ds = ofindex.open(data)  # (a dataset's lookups keep the loops they began with)
            for _ in range(2):  # the leaves read, then held
                got = {column: [_answer(ds, column, key) for key in column_keys]
                       for column, column_keys in keys.items()}
                assert got == answers.setdefault(loops, got)
    assert answers["compiled"] == answers["pure-python"]
    found = {column: [answer[0] for answer in column_answers]
             for column, column_answers in answers["compiled"].items()}
    ids = truth["image/id"]
    assert found["image/id"][:4] == [[ids.index(b"id-31-7")], [ids.index(b"id-31-300")], [],
                                     []]
    assert found["label"][0] == [i for i, v in enumerate(truth["label"]) if v == keys["label"][0]]
    assert found["label"][6] == "ColumnError"  # True is a bool, not a number
    float32 = ds.column_type("score") == "float32"  # (Examples': OFRecords' are float64)
    assert answers["compiled"]["score"][6] == ([], ["RuntimeWarning"] if float32 else [])


@pytest.mark.parametrize("loops", IMPLEMENTATIONS)
def test_a_held_leaf_is_looked_up_without_a_python_call_below_lookup(built, loops):
    """The key's leaf held, ``ds.lookup`` of one key runs no Python function but itself
    (its column queries' and the key index's Python steps cost ~0.5 us of a ~1.5 us
    lookup); the pure-Python loops run theirs."""
    truth, data = built
    key = truth["image/id"][250]
    with implementation(loops):
        ds = ofindex.open(data)
        assert ds.lookup("image/id", key).tolist() == [250]  # the leaf read and held
        calls = []

        def profile(frame, event, arg):
            if event == "call":
                calls.append(frame.f_code.co_name)

        sys.setprofile(profile)
        try:
            found = ds.lookup("image/id", key)
            by_str = ds.lookup("image/id", key.decode())
        finally:
            sys.setprofile(None)
    assert found.tolist() == by_str.tolist() == [250]
    if loops == "compiled":
        assert calls == ["lookup", "lookup"]
    else:
        assert "find_one" in calls


def test_a_refreshed_dataset_does_not_look_keys_up_in_its_old_key_index(tmp_path):
    """Records appended and taken up by ``refresh``: the key index and column sidecars
    describe the old content, and a lookup says so (StaleIndexError) instead of answering
    from the key index read before."""
    payloads, truth = records(37, 500)
    data = write_dataset(str(tmp_path / "data"), cut(payloads[:300], [300]))
    ofindex.build_index(data, columns=["image/id"])
    ds = ofindex.open(data)
    old, new = truth["image/id"][10], truth["image/id"][450]
    assert ds.lookup("image/id", old).tolist() == [10]
    assert ds.lookup("image/id", new).tolist() == []
    with ofindex.Writer(str(tmp_path / "more"), index=False) as writer:
        for payload in payloads[300:]:
            writer.write(payload)
    with open(tmp_path / "more", "rb") as more, open(os.path.join(data, "part-000"), "ab") as f:
        f.write(more.read())
    assert ds.refresh() == 200
    for key in (old, new, old.decode()):
        with pytest.raises(StaleIndexError, match="build_index"):
            ds.lookup("image/id", key)


def test_a_pickled_dataset_and_a_view_look_keys_up(built):
    truth, data = built
    ds = ofindex.open(data)
    key = truth["image/id"][400]
    assert ds.lookup("image/id", key).tolist() == [400]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.lookup("image/id", key).tolist() == [400]
    assert copy.lookup("image/id", key.decode()).tolist() == [400]
    view = ds.where(label=truth["label"][400])
    assert view.lookup("image/id", key).tolist() == [400]


@pytest.mark.parametrize("keys", [True, False])  # written by the build, or by a lookup
def test_a_dataset_refreshed_after_a_rebuild_looks_keys_up_in_the_new_key_index(tmp_path, keys):
    """Records appended, the columns built again (a new key index renamed over the old one)
    and the open dataset refreshed: lookups find old and new records (they were refused with
    RangeReadError, read through the descriptor of the replaced key index)."""
    payloads, truth = records(37, 500)
    data = write_dataset(str(tmp_path / "data"), cut(payloads[:300], [300]))
    ofindex.build_index(data, columns=["image/id"], keys=keys)
    ds = ofindex.open(data)
    old, new = truth["image/id"][10], truth["image/id"][450]
    assert ds.lookup("image/id", old).tolist() == [10]
    with ofindex.Writer(str(tmp_path / "more"), index=False) as writer:
        for payload in payloads[300:]:
            writer.write(payload)
    with open(tmp_path / "more", "rb") as more, open(os.path.join(data, "part-000"), "ab") as f:
        f.write(more.read())
    ofindex.build_index(data, columns=["image/id"], keys=True)
    assert ds.refresh() == 200
    assert ds.lookup("image/id", new).tolist() == [450]
    assert ds.lookup("image/id", old).tolist() == [10]
    assert ds.lookup("image/id", old.decode()).tolist() == [10]
    ds.close()
