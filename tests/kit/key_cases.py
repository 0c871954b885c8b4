"""Hypothesis strategies of key-index searches shared by the key-search tests: keys of every
kind (bytes ending in zero bytes, empty, sharing prefixes; int64 at its extremes; floats with
-0.0 and infinities; NaN searched for) and whole cases of values, queries and index shapes."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ofindex.columns.value_types import ValueType

#: Bytes keys: empty, zero bytes at either end, shared prefixes, 0xff.
BYTE_KEYS = st.sampled_from([b"", b"\0", b"a", b"b", b"a\0", b"\0a", b"ab", b"b\0\0", b"abc",
                             b"\xff", b"a\xff"]) | st.binary(max_size=5)
#: Number keys of each type, extremes included.
NUMBER_KEYS = {
    ValueType.INT64: st.sampled_from([-(1 << 63), -(1 << 63) + 1, -1, 0, 1, 7,
                                      (1 << 63) - 2, (1 << 63) - 1]),
    ValueType.FLOAT32: st.sampled_from([-np.inf, -1.5, -0.0, 0.0, 2.0, 3.4e38, np.inf]),
    ValueType.FLOAT64: st.sampled_from([-np.inf, -1.5, -0.0, 0.0, 2.0, 1e300, np.inf]),
}
#: The NaN of each float type (searched for, never stored).
NANS = {ValueType.FLOAT32: np.float32("nan"), ValueType.FLOAT64: np.float64("nan")}


def cast_of(vtype: ValueType) -> type:
    """The Python/numpy type a key of ``vtype`` is given as."""
    return bytes if vtype is ValueType.BYTES else vtype.dtype.type


@st.composite
def key_cases(draw):
    """``(value type, values, queries, leaf entries, fanout, fence step)``."""
    vtype = draw(st.sampled_from([ValueType.BYTES, ValueType.INT64, ValueType.FLOAT32,
                                  ValueType.FLOAT64]))
    element = BYTE_KEYS if vtype is ValueType.BYTES else NUMBER_KEYS[vtype]
    values = draw(st.lists(element, max_size=60))
    queries = draw(st.lists(element, max_size=20))
    return (vtype, values, queries, draw(st.integers(1, 6)), draw(st.integers(2, 3)),
            draw(st.sampled_from([1, 2, 3, 64])))
