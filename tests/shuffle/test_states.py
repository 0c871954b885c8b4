"""Saved states are read, never cast: every field of every state kind (record samplers, the
batch sampler, the mixture, Grain's datasets, ResumableLoader over each) has its exact type
and range, a missing or unknown field is refused, and each refusal is a StateError (an
OfindexError and a ValueError) naming the field and the value. Valid states load through
JSON; random corruptions of them never load and never raise another exception."""

from __future__ import annotations

import copy
import json
import math
import os

import pytest

from tests.kit.helpers import need

grain = need("grain")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ofindex  # noqa: E402
from ofindex.errors import OfindexError, StateError  # noqa: E402
from ofindex.integrations.grain import GrainBatches  # noqa: E402
from ofindex.integrations.grain_mixing import GrainMixture  # noqa: E402
from ofindex.shuffle import (  # noqa: E402
    BatchSampler,
    BlockShuffleSampler,
    GlobalShuffleSampler,
    MixtureSampler,
    RecordBatches,
    ResumableLoader,
    SequentialSampler,
)
from tests.kit.fuzzkit import budget, explore  # noqa: E402
from tests.kit.helpers import write_shards  # noqa: E402

N = 1000
MAX_EPOCH = 2**32 - 1  # the largest epoch a state may hold (docs/training.md)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = write_shards(tmp_path_factory.mktemp("states"), [60, 40], lambda s, i: b"%d-%d" % (s, i),
                     "g-{}.tfrecord")
    return ofindex.open(os.path.join(d, "g-*.tfrecord"))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("statesmix")
    return [ofindex.open(os.path.join(write_shards(root / f"s{s}", [n],
                                                   lambda _, i, s=s: b"s%d-%d" % (s, i),
                                                   "m-{}.tfrecord"), "m-*.tfrecord"))
            for s, n in enumerate([30, 20])]


def _advanced(sampler, items):
    it = iter(sampler)
    for _ in range(items):
        next(it)
    return sampler


def _mixture(sampled=False, sizes=(300, 700)):
    return MixtureSampler(list(sizes), [0.7, 0.3], 10, seed=3, sampled=sampled)


def _grain_mixture(mixed):
    return GrainMixture(mixed, MixtureSampler(mixed, [0.6, 0.4], 5, seed=2))


def targets(ds, mixed):
    """``name: (make a fresh loader of states, a valid state for it)``, every state kind and
    every object that loads one."""
    global_state = _advanced(GlobalShuffleSampler(N, seed=4), 100).state_dict()
    block = BlockShuffleSampler(shard_sizes=[400, 600], block_size=8, window=4, seed=4)
    mixture_state = _advanced(_mixture(), 7).state_dict()
    sampled_state = _advanced(_mixture(True), 3).state_dict()
    grain_state = GrainBatches(ds, 4, seed=1).state_after(
        GrainBatches(ds, 4, seed=1).pass_mark(), 30, False)
    grain_mixture = _grain_mixture(mixed)
    grain_mixture_state = grain_mixture.state_after(grain_mixture.pass_mark(), 13, False)

    def loader(tracker):
        return ResumableLoader([], tracker=tracker)

    return {
        "global": (lambda: GlobalShuffleSampler(N, seed=4), global_state),
        "sequential": (lambda: SequentialSampler(N, seed=4),
                       _advanced(SequentialSampler(N, seed=4), 10).state_dict()),
        "block": (lambda: BlockShuffleSampler(shard_sizes=[400, 600], block_size=8, window=4,
                                              seed=4), _advanced(block, 55).state_dict()),
        "batch-sampler": (lambda: BatchSampler(GlobalShuffleSampler(N, seed=4), 10),
                          global_state),
        "record-batches": (lambda: RecordBatches(GlobalShuffleSampler(N, seed=4), 10),
                           global_state),
        "loader": (lambda: loader(BatchSampler(GlobalShuffleSampler(N, seed=4), 10)),
                   global_state),
        "mixture": (_mixture, mixture_state),
        "mixture-sampled": (lambda: _mixture(True), sampled_state),
        "mixture-loader": (lambda: loader(_mixture()), mixture_state),
        "grain": (lambda: GrainBatches(ds, 4, seed=1), grain_state),
        "grain-loader": (lambda: loader(GrainBatches(ds, 4, seed=1)), grain_state),
        "grain-mixture": (lambda: _grain_mixture(mixed), grain_mixture_state),
    }


KINDS = ["global", "sequential", "block", "batch-sampler", "record-batches", "loader",
         "mixture", "mixture-sampled", "mixture-loader", "grain", "grain-loader",
         "grain-mixture"]


@pytest.fixture(scope="module")
def table(ds, mixed):
    return targets(ds, mixed)


@pytest.mark.parametrize("kind", KINDS)
def test_valid_states_load_through_json(table, kind):
    make, state = table[kind]
    assert set(state) >= {"version", "epoch", "position"}
    make().load_state_dict(json.loads(json.dumps(state)))


# -- the values the issue found accepted -----------------------------------------------------

@pytest.mark.parametrize(("field", "value"), [
    ("position", 100.9), ("position", 100.0), ("position", "100"), ("position", True),
    ("position", None), ("position", -1), ("position", N + 1), ("epoch", -1),
    ("epoch", 1.5), ("epoch", "0"), ("epoch", False), ("epoch", MAX_EPOCH + 1),
    ("version", True), ("n", float(N)), ("seed", 4.0), ("seed", True),
    ("num_replicas", 0), ("consumed", -3)])
def test_sampler_fields_are_read_exactly(table, field, value):
    make, state = table["global"]
    sampler = make()
    with pytest.raises(StateError, match=field) as err:
        sampler.load_state_dict({**state, field: value})
    assert repr(value) in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, OfindexError)
    assert sampler.state_dict()["position"] == 0  # nothing half-loaded


@pytest.mark.parametrize(("field", "value"), [
    ("offsets", [-1, 50]), ("offsets", [20.5, 50]), ("offsets", [True, 50]),
    ("offsets", [20]), ("offsets", [2**70, 50]), ("offsets", "20,50"),
    ("position", 1.5), ("position", -1), ("epoch", -1), ("sampled", 0), ("batch_size", 10.0),
    ("weights", [0.7, -0.3]), ("weights", [0.7, math.inf]), ("weights", [0.7]),
    ("weights", [True, 0.3]), ("sizes", [300.0, 700.0])])
def test_mixture_fields_are_read_exactly(table, field, value):
    make, state = table["mixture"]
    with pytest.raises(StateError, match=field):
        make().load_state_dict({**state, field: value})


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_field_is_a_state_error_naming_it(table, kind):
    make, state = table[kind]
    for field in state:
        if field in DATA_FIELDS:  # states of ofindex 0.2 have none: nothing to compare
            continue
        broken = {k: v for k, v in state.items() if k != field}
        with pytest.raises(StateError, match=f"'{field}'"):
            make().load_state_dict(broken)


@pytest.mark.parametrize("kind", KINDS)
def test_another_run_is_refused_naming_the_difference(table, kind):
    make, state = table[kind]
    with pytest.raises(StateError, match=r"does not match this sampler: 'seed' saved 5"):
        make().load_state_dict({**state, "seed": 5})
    with pytest.raises(StateError, match="unknown field"):
        make().load_state_dict({**state, "extra": 1})
    with pytest.raises(StateError, match="a saved state is a dict"):
        make().load_state_dict([state])


def test_a_mixture_epoch_past_the_streams_is_refused():
    def huge():  # 2**21 batches of 2**20 records per epoch: 2**21 epochs reach 2**62
        return MixtureSampler([2**40, 2**40], [1, 1], 2**20)

    state = huge().state_dict()
    huge().load_state_dict({**state, "epoch": 2**21 - 1})
    with pytest.raises(StateError, match="streams past"):
        huge().load_state_dict({**state, "epoch": 2**21})
    with pytest.raises(StateError, match="streams past"):
        huge().set_epoch(2**21)


# -- random corruptions ----------------------------------------------------------------------

#: What each field holds, as the state format promises (docs/training.md).
FIELDS = {
    "version": "version", "sampler": "text", "n": "count", "seed": "int",
    "params": "params", "epoch": "epoch", "position": "position",
    "num_replicas": "positive", "consumed": "position", "sizes": "ints",
    "batch_size": "count", "sampled": "bool", "rounds": "count", "weights": "weights",
    "offsets": "offsets", "dataset": "identity", "datasets": "identities",
}
#: The fields naming the data a state was saved on: absent in states of ofindex 0.2, so
#: deleting one is no corruption (test_identity checks that another dataset is refused).
DATA_FIELDS = ("dataset", "datasets")
WRONG_TYPES = [lambda v: v + 0.5, float, lambda v: True, lambda v: False, str,
               lambda v: None, lambda v: [v], lambda v: {"v": v}]


def invalid_values(kind, value, high):
    """Values that a field of ``kind`` holding ``value`` must refuse (``high``: the largest
    position)."""
    if kind == "version":
        return [0, 2, "1", True, 1.0, None]
    if kind == "text":
        return ["Other", "", value.lower(), 1, None, [value]]
    if kind == "bool":
        return [not value, int(value), str(value), None]
    if kind == "identity":  # the samplers here sample counts: any identity is as good
        return [1, True, "xyz", "0123456789ABCDEF", "0123456789abcdef0", {"v": 1}, [value]]
    if kind == "identities":
        return ["0123456789abcdef", 1, [*value, None], [7] * len(value), {"0": None}]
    if kind in ("params", "ints", "weights", "offsets"):
        return container_corruptions(kind, value)
    wrong = [f(value) for f in WRONG_TYPES]
    if kind in ("count", "int"):  # compared with the sampler's own: any other value differs
        return [*wrong, value + 1, value - 1, -value - 1]
    if kind == "epoch":
        return [*wrong, -1, -value - 1, MAX_EPOCH + 1, 2**70]
    if kind == "position":
        return [*wrong, -1, high + 1, 2**70]
    return [*wrong, 0, -1]  # positive


def container_corruptions(kind, value):
    if kind == "params" and not value:
        return [[], None, "params", {"extra": 1}, {"rounds": 4}]
    if kind == "params":
        first = sorted(value)[0]
        return [[], None, "params", {**value, "extra": 1}, {k: v for k, v in value.items()
                                                           if k != first},
                {**value, first: value[first] + 1}, {**value, first: float(value[first])},
                {**value, first: True}]
    bad_items = {"ints": [value[0] + 1, float(value[0]), True, None, "1"],
                 "weights": [0, -1.0, math.nan, math.inf, True, "1", None],
                 "offsets": [-1, -value[0] - 1, value[0] + 0.5, True, "1", None, 2**63]}[kind]
    return ([value[:-1], [*value, value[0]], None, "x", {"0": value[0]}]
            + [[item, *value[1:]] for item in bad_items])


def corrupt(state, field, choice, high):
    """``state`` with ``field`` corrupted by the ``choice``-th corruption (deleting it is one)."""
    options = invalid_values(FIELDS[field], state[field], high)
    broken = copy.deepcopy(state)
    pick = choice % (len(options) + (field not in DATA_FIELDS))
    if pick == len(options):
        del broken[field]
    else:
        broken[field] = options[pick]
    return broken


def _high(kind, state):
    """The largest position of a state: its records, or its mixture's batches per epoch
    (1,000 records in batches of 10; Grain's mixture: 50 in batches of 5)."""
    if "n" in state:
        return state["n"]
    return 10 if kind == "grain-mixture" else 100


@budget(300)
@given(data=st.data())
def test_random_corruptions_are_refused(table, data):
    corrupted_states(table, data)


@explore(3000)
@given(data=st.data())
def test_random_corruptions_are_refused_fuzz(table, data):
    corrupted_states(table, data)


def corrupted_states(table, data):
    kind = data.draw(st.sampled_from(KINDS))
    make, state = table[kind]
    state = json.loads(json.dumps(state))
    how = data.draw(st.integers(0, 9))
    if how == 0:  # not a state at all
        broken = data.draw(st.sampled_from([None, [], "state", 0, [state], json.dumps(state)]))
    elif how == 1:  # an unknown field
        broken = {**state, data.draw(st.sampled_from(["extra", "Position", "identity"])): 0}
    else:  # one to three fields corrupted
        fields = data.draw(st.lists(st.sampled_from(sorted(state)), min_size=1, max_size=3,
                                    unique=True))
        broken = state
        for field in fields:
            broken = corrupt(broken, field, data.draw(st.integers(0, 40)), _high(kind, state))
    target = make()
    try:
        target.load_state_dict(broken)
    except StateError as err:
        if how > 1 and len(fields) == 1:
            assert fields[0] in str(err)
    else:
        raise AssertionError(f"{kind}: a corrupted state loaded: {broken!r}")
