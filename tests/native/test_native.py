"""The compiled loops (ofindex._native) agree with the pure-Python ones, on good and bad bytes."""

import itertools
import json
import os
import subprocess
import sys

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex import _accel
from ofindex.encode.framed import (
    BYTES_LISTS,
    ENTRIES,
    GATHER,
    NO_FRAMING,
    OFRECORD_FRAMING,
    ONE_BYTES,
    PACKED,
    SPANS,
    TFRECORD_FRAMING,
    VARINT,
    VARINT_SPANS,
    BatchPlan,
    PlannedColumn,
    encode_block,
    encode_block_py,
)
from ofindex.formats.crc import LENGTH_CRCS
from ofindex.formats.framing import RecordFormat
from ofindex.read.payloads import extract_payloads
from tests.kit import paths
from tests.kit.fuzzkit import SCALE, Tally
from tests.kit.helpers import (
    IMPLEMENTATIONS,
    cpu_paths,
    empty_block_pool,
    hardware_crc,
    implementation,
    ref_offsets,
    ref_ofrecord,
    ref_tfrecord,
)

FORMATS = {RecordFormat.TFRECORD: (ref_tfrecord, 16), RecordFormat.OFRECORD: (ref_ofrecord, 8)}


def test_the_compiled_module_is_built():
    # the test command installs with a C compiler present: a failed build must not pass
    # unnoticed as the (slower) pure-Python fallback
    assert _accel.native is not None, "ofindex._native did not build; see `pip install -e .`"
    assert _accel.implementation() == "compiled"


def test_the_environment_can_turn_the_compiled_loops_off():
    code = "from ofindex import _accel; print(_accel.implementation())"
    for value, want in [("1", "pure-python"), ("0", "compiled")]:
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, env={**os.environ, "OFINDEX_PURE_PYTHON": value})
        assert out.stdout.strip() == want


def _outcome(fn):
    """What ``fn()`` gives: ("ok", value) or (error type, message)."""
    try:
        return "ok", fn()
    except Exception as e:
        return type(e).__name__, str(e)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(st.binary(max_size=40), min_size=1, max_size=12),
    fmt=st.sampled_from(sorted(FORMATS, key=int)),
    verify=st.booleans(),
    data=st.data(),
)
def test_extract_agrees_with_the_pure_loop_on_good_and_corrupt_bytes(records, fmt, verify, data):
    ref, overhead = FORMATS[fmt]
    buf = bytearray(ref(records))
    if data.draw(st.booleans()):  # flip one byte anywhere: header, payload or footer
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] ^= 1 << data.draw(st.integers(0, 7))
    buf = bytes(buf)
    offsets = np.array([*ref_offsets(records, overhead), len(buf)], dtype=np.int64)
    pick = np.array(data.draw(st.lists(st.integers(0, len(records) - 1), max_size=20)),
                    dtype=np.int64)
    starts, ends = offsets[pick], offsets[pick + 1]

    def run():
        return extract_payloads(buf, starts, ends, fmt, verify, lambda k: "mem://x", starts, pick,
                                _accel.native)

    outcomes = {}
    for impl in IMPLEMENTATIONS:
        with implementation(impl):
            outcomes[impl] = _outcome(run)
    assert outcomes["compiled"] == outcomes["pure-python"]
    if outcomes["compiled"][0] == "ok" and buf == ref(records):  # intact bytes: the records
        assert outcomes["compiled"][1] == [records[i] for i in pick]


def _framed(records):
    buf = ref_tfrecord(records)
    offsets = np.array(ref_offsets(records, 16), dtype="<u8")
    return buf, offsets


def test_gather_and_record_give_problem_codes_not_wrong_bytes():
    native = _accel.native
    assert native is not None
    records = [b"a" * 5, b"", b"bc" * 7]
    buf, offsets = _framed(records)
    args = (12, 4, True, crc32c.crc32c, LENGTH_CRCS)
    which = np.zeros(3, dtype=np.int64)
    assert native.gather([buf], [offsets], [len(buf)], which, np.array([2, 0, 1]), *args) == [
        records[2], records[0], records[1]]
    assert [native.record(buf, offsets, len(buf), i, *args) for i in range(3)] == records
    bad = offsets.copy()
    bad[1] = bad[2]  # record 0 now spans two records, record 1 nothing
    assert native.record(buf, bad, len(buf), 1, *args) == 1  # span too short
    assert native.record(buf, bad, len(buf), 0, *args) == 2  # header disagrees
    assert native.gather([buf], [bad], [len(buf)], which[:2], np.array([2, 1]), *args) == (1, 1)
    assert native.record(buf[:-1], offsets, len(buf), 2, *args) == 3  # past the buffer
    flipped = bytearray(buf)
    flipped[offsets[2] + 14] ^= 4  # a payload byte: the data CRC catches it
    assert native.record(bytes(flipped), offsets, len(buf), 2, *args) == 2
    assert native.record(bytes(flipped), offsets, len(buf), 2, 12, 4, False, *args[3:]) \
        != records[2]  # no CRC check asked: the bytes as stored


def test_bad_arguments_are_errors_not_crashes():
    native = _accel.native
    assert native is not None
    buf, offsets = _framed([b"xyz"])
    args = (12, 4, True, crc32c.crc32c, LENGTH_CRCS)
    with pytest.raises(IndexError):
        native.record(buf, offsets, len(buf), 1, *args)
    with pytest.raises(IndexError):
        native.gather([buf], [offsets], [len(buf)], np.array([1]), np.array([0]), *args)
    with pytest.raises(TypeError, match="uint64"):
        native.record(buf, offsets.astype(np.int32), len(buf), 0, *args)
    with pytest.raises(TypeError, match="int64"):
        native.cut(buf, np.array([0], np.int32), np.array([len(buf)], np.int32), *args)
    with pytest.raises(ValueError, match="framing"):
        native.cut(buf, np.array([0]), np.array([len(buf)]), 8, 0, True, *args[3:])
    # spans outside the buffer are refused, never read
    assert native.cut(buf, np.array([-4]), np.array([len(buf)]), *args) == 0
    assert native.cut(buf, np.array([0]), np.array([len(buf) + 9]), *args) == 0


@settings(max_examples=150, deadline=None)
@given(length=st.integers(0, 40), count=st.integers(1, 6), data=st.data())
def test_same_bytes_and_gather_bytes_match_slicing(length, count, data):
    native = _accel.native
    assert native is not None
    records = [data.draw(st.binary(min_size=length, max_size=length)) for _ in range(count)]
    if data.draw(st.booleans()):  # mostly-equal records, as one writer's layout gives
        records = [records[0]] * count
        k = data.draw(st.integers(0, count - 1))
        if length:
            pos = data.draw(st.integers(0, length - 1))
            records[k] = records[k][:pos] + bytes([records[k][pos] ^ 1]) + records[k][pos + 1:]
    bounds = sorted(data.draw(st.lists(st.integers(0, length), max_size=6)))
    pairs = list(zip(bounds[::2], bounds[1::2], strict=False))
    ranges = np.array(pairs, dtype=np.int64).reshape(-1)
    same = all(r[a:b] == records[0][a:b] for r in records for a, b in pairs)
    assert native.same_bytes(records, ranges) is same
    want = b"".join(r[a:b] for r in records for a, b in pairs)
    out = np.full(len(want), 7, np.uint8)
    assert native.gather_bytes(records, ranges, out) is None
    assert out.tobytes() == want


def test_gather_bytes_and_same_bytes_refuse_bad_arguments():
    native = _accel.native
    assert native is not None
    with pytest.raises(ValueError, match="outside"):
        native.same_bytes([b"abc", b"ab"], np.array([0, 3]))  # past the shorter record
    with pytest.raises(ValueError, match="pairs"):
        native.same_bytes([b"abc"], np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="bytes"):
        native.same_bytes([b"abc", bytearray(b"abc")], np.array([0, 1]))
    with pytest.raises(ValueError, match="exactly"):
        native.gather_bytes([b"abc"], np.array([0, 2]), np.empty(3, np.uint8))
    with pytest.raises(BufferError):
        native.gather_bytes([b"abc"], np.array([0, 2]), b"xx")  # not writable


def test_blocks_are_writable_memory_and_the_pool_is_bounded():
    with empty_block_pool() as native:
        a = np.frombuffer(native.Block(1 << 20), np.uint8)
        a[:] = 5
        assert a.flags.writeable and int(a.sum()) == 5 << 20
        native.pool(1 << 19)  # smaller than the block: it is freed, not kept
        del a
        assert native.pool()[0] == 0
        with pytest.raises(ValueError):
            native.Block(-1)
        with pytest.raises(ValueError):
            native.pool(-1)


def test_a_full_pool_keeps_the_newest_block_in_place_of_the_oldest():
    with empty_block_pool() as native:
        sizes = [(300 + k) << 10 for k in range(8)]  # fills the pool's 8 slots
        for size in sizes:
            native.Block(size)  # released at once: into the pool
        assert native.pool()[0] == sum(sizes)
        native.Block(1 << 20)  # a ninth: kept, the first one (waited longest) dropped
        assert native.pool()[0] == sum(sizes) - sizes[0] + (1 << 20)
        block = native.Block(1 << 20)  # taken out of the pool
        assert native.pool()[0] == sum(sizes) - sizes[0]
        native.pool(sum(sizes[2:]))  # a lower bound drops the oldest first
        assert native.pool()[0] == sum(sizes[2:])
        del block
        native.pool(0)  # empties the pool and turns it off
        native.Block(1 << 10)
        assert native.pool()[0] == 0


@pytest.mark.parametrize("start, end", [(3, 70_003), (0, 65_536), (17, 131_090)])
def test_big_rows_are_gathered_exactly(start, end):
    # rows >= 64 KiB take the streaming-store copy without the GIL: odd starts and lengths
    # exercise its unaligned head and tail
    native = _accel.native
    assert native is not None
    rng = np.random.default_rng(start)
    records = [rng.integers(0, 256, end + 5, np.uint8).tobytes() for _ in range(3)]
    out = np.zeros(3 * (end - start) + 1, np.uint8)[1:]  # an unaligned destination too
    native.gather_bytes(records, np.array([start, end]), out)
    assert out.tobytes() == b"".join(r[start:end] for r in records)


#: Inputs per target of the hostile-argument fuzzer: 5,000 in the default tier (a fixed seed,
#: every outcome reached), 10,000 x OFINDEX_FUZZ_SCALE under tools/run-fuzz.sh (20 to soak).
FUZZ_EXAMPLES = int(os.environ.get("OFINDEX_FUZZ_EXAMPLES", 10_000 * SCALE if
                                   "OFINDEX_FUZZ_SCALE" in os.environ else 5_000))


def _in_subprocess(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (a crash there fails the test, not the run)."""
    env = {**os.environ, "PYTHONPATH": paths.pythonpath()}
    # the sanitizer job's build, when it runs this
    code = "from tests.kit import native_build\n" + code
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_the_reproducers_of_issue_16_raise_clean_errors():
    # each used to crash the interpreter or return NULL without an exception (SystemError)
    code = """
import crc32c, numpy as np, struct
from ofindex import _native as n
n.hw_crc(False)  # small records' CRCs in C would not consult the memo these calls corrupt
# end - start wrapped around: this read 2**40 bytes past the buffer
assert n.cut(bytes(64), np.array([1 << 40]), np.array([-(1 << 63)]), 12, 4, True,
             crc32c.crc32c, {}) == 0
# a bad memo value read as "failed" with no exception set
buf = struct.pack("<Q", 1) + bytes(4) + b"x" + bytes(4)
try:
    n.cut(buf, np.array([0]), np.array([17]), 12, 4, True, crc32c.crc32c, {1: 2**64 - 1})
    raise SystemExit("no error")
except ValueError as e:
    assert "32-bit CRC" in str(e)
# rows * width wrapped to 0 and matched an empty output
try:
    n.gather_bytes([bytes(1 << 24)] * (1 << 20), np.tile(np.array([0, 1 << 24]), 1 << 20),
                   bytearray(0))
    raise SystemExit("no error")
except ValueError as e:
    assert "fit" in str(e)
# offsets past the indexed end (2**63 read as int64 became negative before)
offs = np.array([0, 1 << 40, 1 << 63], dtype=np.uint64)
assert n.record(bytes(64), offs, 64, 1, 12, 4, True, crc32c.crc32c, {}) == 1
assert n.record(bytes(64), offs, 64, 0, 12, 4, True, crc32c.crc32c, {}) == 1
print("ok")
"""
    done = _in_subprocess(code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.slow
def test_hostile_arguments_fuzz():
    seed = 0  # the same inputs on every run; tests/native/test_fuzz_native.py tries fresh seeds
    done = _in_subprocess("import sys; from tests.kit import fuzz_native; "
                          "sys.exit(fuzz_native.main(sys.argv[1:]))",
                          "--examples", str(FUZZ_EXAMPLES), "--seed", str(seed), timeout=240)
    assert done.returncode == 0, f"exit {done.returncode}, seed {seed}:\n{done.stderr[-4000:]}"
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    sanitized = " (ASan/UBSan build)" if os.environ.get("OFINDEX_TEST_NATIVE_BUILD") else ""
    tally = Tally("compiled module, hostile arguments" + sanitized)  # for the fuzz log
    tally.inputs = sum(stats["inputs"].values())
    for name, outcomes in stats["outcomes"].items():
        tally.outcomes.update({f"{name}: {k}": v for k, v in outcomes.items()})
    assert stats["module"] == os.environ.get("OFINDEX_TEST_NATIVE_BUILD", stats["module"])
    assert all(stats["inputs"][t] >= min(FUZZ_EXAMPLES, 50) for t in
               ("cut", "gather", "types", "layout", "walk", "blocks", "reader", "preads",
                "encode")), stats
    # the generator must reach every outcome, not only the argument checks
    assert stats["outcomes"]["cut"]["payloads"] and stats["outcomes"]["cut"]["refused"]
    assert stats["outcomes"]["gather"]["payloads"] and stats["outcomes"]["walk"]["ok"]
    assert stats["outcomes"]["values"]["payloads"] and stats["outcomes"]["values"]["ValueError"]
    assert stats["outcomes"]["reader"]["payloads"] and stats["outcomes"]["reader"]["deferred"]
    assert stats["outcomes"]["preads"]["read"] and stats["outcomes"]["preads"]["failed"]
    assert stats["outcomes"]["encode"]["records"] and stats["outcomes"]["encode"]["refused"]


_MUTATING_INDEX = r"""
import gc, sys
import crc32c, numpy as np
sys.path.insert(0, {root!r})
from tests.kit.helpers import ref_offsets, ref_tfrecord
from ofindex import _native as native
from ofindex.formats.crc import LENGTH_CRCS

records = [b"a" * 5, b"", b"bc" * 7]
buf, offsets = ref_tfrecord(records), np.array(ref_offsets(records, 16), dtype="<u8")

class Mutating:
    # an indexed end whose __index__ empties every list the call was given
    def __init__(self, lists):
        self.lists = lists
    def __index__(self):
        for items in self.lists:
            items.clear()
        gc.collect()
        return len(buf)

def lists():
    bufs, offs, ends = [bytes(buf), bytes(buf)], [offsets.copy(), offsets.copy()], []
    ends += [Mutating([bufs, offs, ends]), len(buf)]
    return bufs, offs, ends

which, local = np.array([1, 0], np.int64), np.array([2, 0], np.int64)
got = native.gather(*lists(), which, local, 12, 4, True, crc32c.crc32c, LENGTH_CRCS)
assert got == [records[2], records[0]], got
st, en = np.empty(2, np.int64), np.empty(2, np.int64)
assert native.spans(*lists(), which, local, 16, st, en) is None
print("ok")
"""


def test_lists_changed_by_python_code_during_a_call_are_not_read(tmp_path):
    """Issue 26, item 12: ``gather``/``spans`` read list items after running Python code
    (an ``__index__``); they now hold the items first. Run in a child: a crash is a
    segfault, not an exception."""
    script = tmp_path / "mutate.py"
    script.write_text(_MUTATING_INDEX.format(root=paths.ROOT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode,
                                                                   done.stderr[-2000:])


def test_pooled_bytes_reuse_released_memory_of_a_similar_size(empty_pool):
    size = _accel.POOLED_BYTES + (3 << 20)
    first = _accel.pooled_bytes(size)
    first[:] = 7
    assert len(first) == size and first.flags.writeable
    address = first.ctypes.data
    del first  # nothing refers to it: its memory waits in the pool ...
    again = _accel.pooled_bytes(size + 1000)  # ... for a buffer of the same size class
    assert again.ctypes.data == address and len(again) == size + 1000
    other = _accel.pooled_bytes(size)  # while `again` lives, its memory is not handed out
    assert not np.shares_memory(again, other)
    view = other[10:20]
    del other
    assert not np.shares_memory(_accel.pooled_bytes(size), view)  # a view keeps it too
    small = _accel.pooled_bytes(1000)  # small buffers: plain numpy memory
    assert len(small) == 1000 and small.base is None


@pytest.mark.parametrize("fmt", sorted(FORMATS, key=int))
def test_pack_copies_the_payloads_and_names_the_first_bad_record(fmt):
    hardware_crc()  # pack checks CRCs with the CPU's instruction
    # three records at a time and one by one: every position of a corrupt byte, of a wrong
    # length, and an output that is too small
    native = _accel.native
    ref, overhead = FORMATS[fmt]
    header, footer = (12, 4) if fmt is RecordFormat.TFRECORD else (8, 0)
    verify = fmt is RecordFormat.TFRECORD
    rng = np.random.default_rng(8)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 300, 11)]
    buf = ref(records)
    starts = np.array(ref_offsets(records, overhead), np.int64)
    ends = np.append(starts[1:], len(buf)).astype(np.int64)

    def pack(data, room=None, base=0):
        room = len(buf) if room is None else room
        out, offsets = np.zeros(base + room, np.uint8), np.zeros(len(records) + 1, np.int64)
        return native.pack(data, starts, ends, header, footer, verify, out, offsets, base), \
            out, offsets

    for base in (0, 5):
        bad, out, offsets = pack(buf, base=base)
        assert bad == -1 and offsets[-1] == base + sum(map(len, records))
        assert [out[a:b].tobytes() for a, b in itertools.pairwise(offsets)] == records
    for k in range(len(records)):
        if verify and records[k]:  # a payload byte: its CRC fails
            broken = bytearray(buf)
            broken[starts[k] + header] ^= 1
            assert pack(bytes(broken))[0] == k
        broken = bytearray(buf)  # a stored length: the framing fails
        broken[starts[k]] ^= 1
        assert pack(bytes(broken))[0] == k
    with pytest.raises(ValueError, match="too small"):
        pack(buf, room=sum(map(len, records)) - 1)


# --- the batch encoder (csrc/encode.c) against its pure-Python twin ---------------------------

#: int64 values at every varint length's edges (the compiled encoder's 8-byte stores hold up
#: to 2^56 - 1, its 3-group shortcut up to 2^21 - 1), and any int64.
_EDGES = sorted({s * ((1 << (7 * k)) + d) for k in range(10) for d in (-1, 0) for s in (1, -1)}
                | {-(2**63), 2**63 - 1})
_INT64S = st.one_of(st.sampled_from([v for v in _EDGES if -(2**63) <= v < 2**63]),
                    st.integers(-(2**63), 2**63 - 1))


def _indexed_data(draw, mode: int, rows: int):
    """A GATHER column's (index, bounds, entries) or a BYTES_LISTS column's (item index,
    bounds, values), after some leading bytes."""

    items = draw(st.lists(st.binary(max_size=300), min_size=1 if mode == GATHER else 0,
                          max_size=8))
    lead = draw(st.integers(0, 5))
    bounds = np.cumsum([lead, *map(len, items)]).astype(np.int64)
    values = b"x" * lead + b"".join(items) + b"tail"
    if mode == GATHER:
        index = draw(st.lists(st.integers(0, len(items) - 1), min_size=rows, max_size=rows))
    else:
        index = sorted(draw(st.lists(st.integers(0, len(items)), min_size=rows + 1,
                                     max_size=rows + 1)))
    return np.array(index, np.int64), bounds, values


def _planned_column(draw, rows: int):

    mode = draw(st.sampled_from([PACKED, VARINT, ONE_BYTES, ENTRIES, SPANS, VARINT_SPANS,
                                 GATHER, BYTES_LISTS]))
    key = draw(st.binary(min_size=0, max_size=200))  # long names: two-byte length varints
    field = draw(st.integers(1, 15))
    if mode == PACKED:
        width = draw(st.sampled_from([0, 1, 4, 8, 130, 3136]))
        data = np.frombuffer(draw(st.binary(min_size=rows * width, max_size=rows * width)),
                             np.uint8).reshape(rows, width).copy()
    elif mode == VARINT:
        count = draw(st.integers(0, 5))
        values = draw(st.lists(_INT64S, min_size=rows * count, max_size=rows * count))
        data = np.array(values, np.int64).reshape(rows, count)
    elif mode == VARINT_SPANS:  # rows of 0 to 12 values, after some leading values
        lengths = draw(st.lists(st.integers(0, 12), min_size=rows, max_size=rows))
        lead = draw(st.integers(0, 3))
        values = draw(st.lists(_INT64S, min_size=lead + sum(lengths),
                               max_size=lead + sum(lengths)))
        data = (np.cumsum([lead, *lengths]).astype(np.int64), np.array(values, np.int64))
    elif mode in (GATHER, BYTES_LISTS):
        data = _indexed_data(draw, mode, rows)
    elif mode == SPANS:  # an Arrow binary column's offsets and data, after some leading bytes
        values = draw(st.lists(st.binary(max_size=300), min_size=rows, max_size=rows))
        lead = draw(st.integers(0, 5))
        bounds = np.cumsum([lead, *map(len, values)]).astype(np.int64)
        data = (bounds, b"x" * lead + b"".join(values) + b"tail")
    else:
        data = draw(st.lists(st.binary(max_size=300), min_size=rows, max_size=rows))
    present = draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 2]), min_size=rows,
                                                 max_size=rows)))  # null cells: 0
    return PlannedColumn(key, field, mode, data,
                         None if present is None else np.array(present, np.uint8))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_batch_encoder_equals_its_pure_python_twin(data):
    """``_native.encode`` writes the bytes, sizes and CRCs ``encode_block_py`` writes, for
    every column mode, framing and room, with the CPU's CRC instruction and wide varints
    (AVX-512) and without."""

    native = _accel.native
    assert native is not None
    rows = data.draw(st.integers(0, 6))
    columns = tuple(_planned_column(data.draw, rows) for _ in range(data.draw(st.integers(1, 4))))
    plan = BatchPlan(columns, rows, wrap=data.draw(st.booleans()))
    framing = data.draw(st.sampled_from([TFRECORD_FRAMING, OFRECORD_FRAMING, NO_FRAMING]))
    start = data.draw(st.integers(0, rows))
    stop = data.draw(st.integers(start, rows))
    room = data.draw(st.sampled_from([0, 16, 100, 1000, 1 << 16]))
    limit = data.draw(st.sampled_from([room, room // 2, 1 << 40]))
    want_crcs = data.draw(st.booleans())
    outs = []
    for hw in (True, False):
        with cpu_paths(hw_crc=hw, wide_varints=hw):
            for encode in (encode_block_py, None):
                out = bytearray(room)
                sizes = np.full(rows, -1, np.int64)
                crcs = np.zeros(rows, np.uint32) if want_crcs else None
                if encode is None:
                    got = native.encode(plan.as_tuples(), plan.wrap, *framing, start, stop,
                                        limit, out, sizes, crcs, crc32c.crc32c)
                else:
                    got = encode(plan, start, stop, framing, limit, out, sizes, crcs)
                n, used = got
                outs.append((got, bytes(out[:used]) if n else b"", sizes[:n].tolist(),
                             None if crcs is None else crcs[:n].tolist()))
    assert all(o == outs[0] for o in outs), outs


def _long_plan(rows: int):
    """A batch of ``rows`` rows of every column kind the compiled encoder takes, with
    varint lists of 0 to 70 values (list lengths of one and two bytes) and null cells."""

    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 71, rows)
    count = int(lengths.sum())
    # every varint length: values of 0 to 62 bits, the edges 2**(7k) - 1 and 2**(7k), and
    # one in a hundred of nine or ten bytes (2**56 and up, negatives)
    values = rng.integers(0, 2**62, count, dtype=np.int64) >> rng.integers(0, 63, count)
    edges = np.array([(1 << (7 * k)) + d for k in range(1, 9) for d in (-1, 0)], np.int64)
    at_edges = rng.random(count) < 0.05
    values[at_edges] = rng.choice(edges, int(at_edges.sum()))
    wide = rng.random(count) < 0.01
    values[wide] = rng.choice(np.array([1 << 56, (1 << 63) - 1, -1, -(1 << 40)], np.int64),
                              int(wide.sum()))
    tokens = (np.concatenate([[2], 2 + np.cumsum(lengths)]).astype(np.int64),
              np.concatenate([[5, 6], values]).astype(np.int64))
    blobs = [bytes(rng.integers(0, 256, int(n), np.uint8)) for n in rng.integers(0, 40, rows)]
    words = [b"w%d" % k for k in range(9)]
    items = rng.integers(0, 3, rows)
    at = np.concatenate([[0], np.cumsum(items)]).astype(np.int64)
    picks = rng.integers(0, 9, int(at[-1]))
    spans = (np.concatenate([[0], np.cumsum([len(words[k]) for k in picks])]).astype(np.int64),
             b"".join(words[k] for k in picks))
    entries = [b"\x0a\x03abc", b"\x0a\x01z"]
    gather_bounds = np.array([0, 5, 8], np.int64)
    columns = (
        PlannedColumn(b"tokens", 3, VARINT_SPANS, tokens,
                      (rng.random(rows) > 0.1).astype(np.uint8)),
        PlannedColumn(b"id", 3, VARINT, rng.integers(-5, 1 << 50, (rows, 1)).astype(np.int64)),
        PlannedColumn(b"score", 2, PACKED, rng.integers(0, 256, (rows, 8), np.uint8)),
        PlannedColumn(b"blob", 1, ONE_BYTES, blobs),
        PlannedColumn(b"words", 1, BYTES_LISTS, (at, spans[0], spans[1])),
        PlannedColumn(b"city", 1, GATHER, (rng.integers(0, 2, rows).astype(np.int64),
                                          gather_bounds, b"".join(entries))),
        PlannedColumn(b"span", 1, SPANS, (np.concatenate([[0], np.cumsum(
            [len(b) for b in blobs])]).astype(np.int64), b"".join(blobs))),
    )
    return BatchPlan(columns, rows, wrap=True)


@pytest.mark.parametrize("limit", ["all", "first_row_too_big", "inside_second_chunk",
                                   "end_of_first_chunk", "one_past_first_chunk"])
def test_batch_encoder_equals_its_twin_over_many_chunks(limit):
    """The compiled encoder sizes, writes and checksums a call's rows a chunk (256 rows) at a
    time: over 1,000 rows, and with rooms that end inside a chunk, at a chunk's end, one
    record past it and before the first record, it writes what ``encode_block_py`` writes."""

    native = _accel.native
    assert native is not None
    rows = 1000
    plan = _long_plan(rows)
    full = bytearray(1 << 22)
    sizes = np.empty(rows, np.int64)
    encode_block_py(plan, 0, rows, TFRECORD_FRAMING, len(full), full, sizes, None)
    ends = np.cumsum(sizes)
    room = {"all": 1 << 22, "first_row_too_big": int(sizes[0]) - 1,
            "inside_second_chunk": int(ends[400]) - 3, "end_of_first_chunk": int(ends[255]),
            "one_past_first_chunk": int(ends[256])}[limit]
    outs = []
    for encode in (encode_block_py, True, False):  # the compiled encoder, varints both ways
        out = bytearray(room)
        got_sizes = np.full(rows, -1, np.int64)
        crcs = np.zeros(rows, np.uint32)
        if isinstance(encode, bool):
            with cpu_paths(wide_varints=encode):
                got = native.encode(plan.as_tuples(), plan.wrap, *TFRECORD_FRAMING, 0, rows,
                                    room, out, got_sizes, crcs, crc32c.crc32c)
        else:
            got = encode(plan, 0, rows, TFRECORD_FRAMING, room, out, got_sizes, crcs)
        n, used = got
        outs.append((got, bytes(out[:used]) if n else b"", got_sizes[:n].tolist(),
                     crcs[:n].tolist()))
    assert outs[0] == outs[1] == outs[2]
    expected_rows = {"all": rows, "first_row_too_big": 0, "inside_second_chunk": 400,
                     "end_of_first_chunk": 256, "one_past_first_chunk": 257}[limit]
    assert outs[1][0][0] == expected_rows


@pytest.mark.parametrize("case", ["gather_past", "gather_negative", "lists_backwards",
                                  "lists_past", "bounds_past", "not_three"])
def test_indexed_columns_out_of_their_buffers_are_refused(impl, case):
    """A GATHER index naming no entry, a BYTES_LISTS index going backwards or past its items,
    bounds past the values, or data not (index, bounds, values): refused before a byte is
    read, by both encoders."""

    bounds, values = np.array([0, 2, 5], np.int64), b"abcde"
    mode, data, error = {
        "gather_past": (GATHER, (np.array([0, 2], np.int64), bounds, values), ValueError),
        "gather_negative": (GATHER, (np.array([-1, 0], np.int64), bounds, values), ValueError),
        "lists_backwards": (BYTES_LISTS, (np.array([0, 2, 1], np.int64), bounds, values),
                            ValueError),
        "lists_past": (BYTES_LISTS, (np.array([0, 1, 3], np.int64), bounds, values),
                       ValueError),
        "bounds_past": (GATHER, (np.array([0, 1], np.int64), np.array([0, 2, 6], np.int64),
                                 values), ValueError),
        "not_three": (GATHER, (bounds, values), (TypeError, ValueError)),
    }[case]
    plan = BatchPlan((PlannedColumn(b"f", 1, mode, data),), 2, wrap=True)
    with pytest.raises(error):
        encode_block(plan, 0, 2, NO_FRAMING, 1 << 10, bytearray(1 << 10),
                     np.empty(2, np.int64))


def test_encoded_examples_parse_with_protobuf():
    """What the compiled encoder frames as TFRecords unframes, and protobuf parses each
    payload into the columns' values."""
    from ofindex.encode.columns import plan_columns
    from ofindex.proto import example_pb2

    rng = np.random.default_rng(3)
    columns = {"image": rng.random((9, 5), dtype=np.float32), "label": rng.integers(-3, 3, 9),
               "jpeg": [bytes(rng.integers(0, 255, k * 40, dtype=np.uint8)) for k in range(9)],
               "text": [f"é{k}" if k % 2 else None for k in range(9)]}
    plan = plan_columns(columns)
    out, sizes, crcs = bytearray(1 << 16), np.empty(9, np.int64), np.empty(9, np.uint32)
    n, used = encode_block(plan, 0, 9, TFRECORD_FRAMING, len(out), out, sizes, crcs)
    assert n == 9 and used == int(sizes.sum())
    block, at, payloads = bytes(out[:used]), 0, []

    def masked(crc):
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    for size in sizes.tolist():  # the framing as TFRecord's description gives it
        length = int.from_bytes(block[at:at + 8], "little")
        assert length == size - 16
        assert int.from_bytes(block[at + 8:at + 12], "little") == masked(
            crc32c.crc32c(block[at:at + 8]))
        payload = block[at + 12:at + 12 + length]
        assert int.from_bytes(block[at + 12 + length:at + size], "little") == masked(
            crc32c.crc32c(payload))
        payloads.append(payload)
        at += size
    for k, payload in enumerate(payloads):
        assert crc32c.crc32c(payload) == int(crcs[k])
        example = example_pb2.Example.FromString(bytes(payload))
        feature = example.features.feature
        assert list(feature["image"].float_list.value) == columns["image"][k].tolist()
        assert list(feature["label"].int64_list.value) == [columns["label"][k]]
        assert feature["jpeg"].bytes_list.value == [columns["jpeg"][k]]
        assert ("text" in feature) == bool(k % 2)


@pytest.mark.parametrize("mode", ["varint", "varint_spans"])
def test_varints_of_every_length_in_a_long_block_equal_protobufs(mode):
    """Every int64 at each varint length's edges (1 to 10 bytes, negative ones too), in rows
    far from the block's end (where the compiled encoder stores each varint as one 8-byte
    word, its shortcut taking those below 2^21): the compiled encoder writes the bytes its
    pure-Python twin writes, and protobuf parses each record into its row's values."""
    from ofindex.proto import example_pb2

    values = np.array(_EDGES[1:-1] * 3, np.int64)  # each edge before and after others
    rows = [values[k:k + 5] for k in range(0, len(values), 5)]
    rows = [row for row in rows if len(row) == 5]
    if mode == "varint":
        column = PlannedColumn(b"ids", 3, VARINT, np.ascontiguousarray(np.stack(rows)))
    else:
        lengths = [k % 7 for k in range(len(rows))]  # rows of 0 to 6 values
        bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.resize(values, int(bounds[-1]))
        rows = [flat[bounds[k]:bounds[k + 1]] for k in range(len(rows))]
        column = PlannedColumn(b"ids", 3, VARINT_SPANS, (bounds, flat))
    plan = BatchPlan((column,), len(rows), wrap=True)
    blocks = []
    for name in IMPLEMENTATIONS:
        with implementation(name):
            out, sizes = bytearray(1 << 16), np.empty(len(rows), np.int64)
            n, used = encode_block(plan, 0, len(rows), TFRECORD_FRAMING, len(out), out, sizes)
            assert n == len(rows)
            blocks.append((bytes(out[:used]), sizes.tolist()))
    assert blocks[0] == blocks[1]
    block, at = blocks[0][0], 0
    for row, size in zip(rows, blocks[0][1], strict=True):
        example = example_pb2.Example.FromString(block[at + 12:at + size - 4])
        assert list(example.features.feature["ids"].int64_list.value) == row.tolist()
        at += size
