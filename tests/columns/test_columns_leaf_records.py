"""The compiled decode of a key index leaf's records (csrc/keyrecords.c's ``key_records``)
and its pure-Python twin (``page_codec._deltas_into``, numpy) give the sums a plain Python
reference gives: deltas of every size (planes of zeros skipped, int64 wrapping as numpy's
sums wrap), written at any place of the caller's array and nowhere else, checked against
the dataset's records; bad arguments raise errors, never crash."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex import _accel
from ofindex.columns import page_codec
from tests.kit.helpers import implementation

_DELTAS = st.lists(st.sampled_from([0, 1, 2, 255, 256, 70_000, 1 << 40, (1 << 63) - 1,
                                    -1, -300, -(1 << 63)]) | st.integers(0, 5000),
                   max_size=40)


def _reference(deltas: list[int]) -> list[int]:
    """Running sums from 0, as int64 (wrapping)."""
    out, total = [], 0
    for delta in deltas:
        total = (total + delta) % (1 << 64)
        out.append(total - (1 << 64) if total >= 1 << 63 else total)
    return out


@pytest.mark.parametrize("name", ["compiled", "pure-python"])
@settings(max_examples=200, deadline=None, derandomize=True)
@given(deltas=_DELTAS, at=st.integers(0, 5), after=st.integers(0, 3),
       head=st.binary(max_size=9), limit=st.sampled_from([0, 1, 100, 5001, 1 << 62]))
def test_leaf_records_are_the_running_sums_of_their_deltas(name, deltas, at, after, head,
                                                           limit):
    want = _reference(deltas)
    page = head + page_codec.to_planes(np.array(deltas, dtype=np.int64))
    out = np.full(at + len(deltas) + after, -7, dtype=np.int64)
    with implementation(name):
        inside = page_codec.deltas_into(page, len(deltas), out, at, limit)
    assert out[at:at + len(deltas)].tolist() == want
    assert (out[:at] == -7).all() and (out[at + len(deltas):] == -7).all()
    assert inside == all(0 <= record < limit for record in want)


def test_bad_arguments_raise_errors():
    native = _accel.native
    assert native is not None, "ofindex._native is not built"
    page = page_codec.to_planes(np.arange(4, dtype=np.int64))
    out = np.zeros(4, dtype=np.int64)
    assert native.key_records(page, 4, out, 0, 10) is True
    for count, at, limit in ((-1, 0, 10), (4, -1, 10), (4, 0, -1)):
        with pytest.raises(ValueError, match=">= 0"):
            native.key_records(page, count, out, at, limit)
    with pytest.raises(ValueError, match="do not fit"):
        native.key_records(page, 5, np.zeros(9, np.int64), 0, 10)  # the page holds 4
    with pytest.raises(ValueError, match="do not fit"):
        native.key_records(page, 4, out, 1, 10)  # out[1:] holds 3
    with pytest.raises(ValueError, match="do not fit"):
        native.key_records(page, 0, out, 5, 10)
    read_only = np.zeros(4, dtype=np.int64)
    read_only.flags.writeable = False
    for bad_out in (read_only, np.zeros(4, dtype=np.int32), np.zeros(8, np.int64)[::2]):
        with pytest.raises((ValueError, TypeError, BufferError)):
            native.key_records(page, 4, bad_out, 0, 10)
    with pytest.raises(TypeError):
        native.key_records(page, 4, out, 0)
    with pytest.raises(TypeError):
        native.key_records("page", 4, out, 0, 10)
    with pytest.raises(TypeError):
        native.key_records(page, "4", out, 0, 10)
    with pytest.raises(OverflowError):
        native.key_records(page, 1 << 70, out, 0, 10)
