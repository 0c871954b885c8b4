"""A key index query takes a node's children whose keys all lie within its bounds (their
records without their keys searched) as one run found in two searches of the node's first
keys (``key_file._children_within``): exactly the children the rule asked child by child
picks, for every key type, bounds ``None`` or NaN, bytes bounds ending in zero bytes,
compiled and pure."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex.columns import key_file
from ofindex.columns.packed import PackedBytes
from ofindex.columns.sorted_keys import SortedKeys
from ofindex.columns.value_types import ValueType
from tests.kit.helpers import implementation
from tests.kit.key_cases import BYTE_KEYS, NANS, NUMBER_KEYS, cast_of, key_cases


def _within_by_child(firsts: list, child: int, low, high, included: bool) -> bool:
    """Whether every key under a node's child lies within the bounds, asked of that child
    alone: its first key at least ``low`` (NaN: no key is) and the next child's first key at
    most ``high`` (below it when excluded); the last child's keys only without ``high``."""
    if low is not None and not firsts[child] >= low:
        return False
    if high is None:
        return True
    if child + 1 >= len(firsts):
        return False
    after = firsts[child + 1]
    return bool(after <= high if included else after < high)


@pytest.mark.parametrize("name", ["compiled", "pure-python"])
@settings(max_examples=300, deadline=None, derandomize=True)
@given(key_cases(), st.data())
def test_the_children_within_bounds_are_those_each_child_says(name, case, data):
    """A node's children whose keys all lie within a query (their records taken without
    their keys searched) are one run found in two searches: exactly the children the rule
    asked child by child picks, for every key type, bounds None or NaN, bytes bounds ending
    in zero bytes, compiled and pure."""
    vtype, values = case[0], case[1]  # (the rest is for the key search tests)
    cast = cast_of(vtype)
    items = sorted({cast(v) for v in values})  # a node's first keys: ascending, no NaN
    if vtype is ValueType.BYTES:
        items = sorted({item for item in items if not item.endswith(b"\0")})
        firsts = SortedKeys(PackedBytes.from_list(items))
    else:
        firsts = SortedKeys(np.array(items, dtype=vtype.dtype))
    element = BYTE_KEYS if vtype is ValueType.BYTES else NUMBER_KEYS[vtype]
    bound = st.none() | element.map(cast)
    if vtype in NANS:
        bound = bound | st.just(NANS[vtype])
    low, high, included = data.draw(bound), data.draw(bound), data.draw(st.booleans())
    want = [child for child in range(len(items))
            if _within_by_child(items, child, low, high, included)]
    with implementation(name):
        first, end = key_file._children_within(firsts, (low, high, included))
    assert list(range(first, end)) == want
