"""The compiled match of a dictionary column page's codes (csrc/codehits.c's ``code_hits``,
through ``shard_reader._code_hits``) gives the records numpy's steps give (its pure-Python
twin): codes of one and two bytes, tables and validity of any pattern, any base; a condition
taking records without a value goes through numpy; bad arguments raise errors, never
crash."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex import _accel
from ofindex.columns.conditions import Condition
from ofindex.columns.shard_reader import _code_hits
from tests.kit.helpers import implementation


@pytest.mark.parametrize("name", ["compiled", "pure-python"])
@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data(), wide=st.booleans(), entries=st.integers(1, 300),
       base=st.sampled_from([0, 7, 16_384, 1 << 40]), nulls=st.booleans())
def test_a_page_s_matching_records_are_its_codes_set_in_the_table(name, data, wide, entries,
                                                                   base, nulls):
    if not wide:
        entries = min(entries, 256)
    count = data.draw(st.integers(0, 60))
    codes = np.array(data.draw(st.lists(st.integers(0, entries - 1), min_size=count,
                                        max_size=count)), dtype=np.uint16 if wide else np.uint8)
    table = np.array(data.draw(st.lists(st.booleans(), min_size=entries, max_size=entries)))
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=count, max_size=count)),
                     dtype=bool)
    condition = Condition("label", values=(1,), nulls=nulls)
    want = [base + i for i in range(count)
            if (valid[i] and table[codes[i]]) or (nulls and not valid[i])]
    scratch = np.full(count + 3, -1, dtype=np.int64)
    with implementation(name):
        got = _code_hits(condition, codes, table, valid, base, scratch)
    assert got.dtype == np.int64 and got.tolist() == want


def test_bad_arguments_raise_errors():
    native = _accel.native
    assert native is not None, "ofindex._native is not built"
    codes, table = np.array([0, 2, 1], np.uint8), np.array([True, False, True])
    valid, out = np.ones(3, bool), np.zeros(3, np.int64)
    assert native.code_hits(codes, 1, table, valid, 5, out) == 2 and out[:2].tolist() == [5, 6]
    with pytest.raises(ValueError, match="past the table"):
        native.code_hits(np.array([3], np.uint8), 1, table, np.ones(1, bool), 0, out)
    with pytest.raises(ValueError, match="past the table"):
        native.code_hits(np.array([300], np.uint16), 2, table, np.ones(1, bool), 0, out)
    with pytest.raises(ValueError, match="width"):
        native.code_hits(codes, 4, table, valid, 0, out)
    with pytest.raises(ValueError, match="disagree"):
        native.code_hits(codes, 1, table, np.ones(2, bool), 0, out)
    with pytest.raises(ValueError, match="disagree"):
        native.code_hits(codes, 1, table, valid, 0, np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="disagree"):
        native.code_hits(codes, 2, table, valid, 0, out)  # 3 bytes are no uint16 codes
    with pytest.raises(ValueError, match="int64"):
        native.code_hits(codes, 1, table, valid, (1 << 63) - 2, out)
    with pytest.raises(ValueError, match="int64"):
        native.code_hits(codes, 1, table, valid, -1, out)
    read_only = np.zeros(3, np.int64)
    read_only.flags.writeable = False
    for bad_out in (read_only, np.zeros(3, np.int32)):
        with pytest.raises((ValueError, TypeError, BufferError)):
            native.code_hits(codes, 1, table, valid, 0, bad_out)
    with pytest.raises(TypeError):
        native.code_hits(codes, 1, table, valid, 0)
    with pytest.raises(TypeError):
        native.code_hits(codes, 1, table, None, 0, out)
    with pytest.raises(OverflowError):
        native.code_hits(codes, 1, table, valid, 1 << 70, out)
