"""Fetch bounds: the builder notes how far past the line between two seek points inflating
had to read, and a remote read that fetches up to the interpolation plus that bound has all
the compressed bytes it needs, for any record end, whatever the data (text, incompressible
blobs, long runs of zeros), the level, the members, ISA-L or zlib."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ofindex
from ofindex.deflate import fast_inflate
from ofindex.deflate.inflate import inflate_span
from ofindex.formats.seekpoints import FETCH_SLACK, FETCH_STEP, FETCH_UNIT, fetch_bounds
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.helpers import implementation, ref_tfrecord, sidecar_of, write_raw, zlib_pack


def _records(seed: int) -> list[bytes]:
    """Text, incompressible blobs and runs of zeros, one after the other: the compressed
    bytes per output byte change by a factor of 100 and more between records."""
    rng = np.random.default_rng(seed)
    vocab = [rng.bytes(int(k)) for k in rng.integers(1, 12, size=300)]
    out = []
    for i in range(400):
        if i % 7 == 3:
            out.append(rng.bytes(int(rng.integers(2000, 30000))))
        elif i % 11 == 5:
            out.append(bytes(int(rng.integers(10000, 60000))))
        else:
            out.append(b"".join(vocab[j] for j in rng.integers(0, 300, size=40)))
    return out


@pytest.mark.parametrize(("compression", "level", "members"),
                         [("gzip", 6, 1), ("zlib", 1, 1), ("gzip", 9, 3)])
def test_every_record_end_is_within_the_estimate(tmp_path, compression, level, members):
    records = _records(level + members)
    raw = ref_tfrecord(records)
    packed = zlib_pack(raw, compression, level, members)
    path = write_raw(str(tmp_path / "data.tfrecord.gz"), packed)
    with implementation("compiled"):
        ofindex.build_index(path, seek_spacing=16 << 10)
    sc = open_local_sidecar(sidecar_of(path))
    seeks = sc.seeks
    fetch = sc.seek_points["fetch"].astype(np.int64)
    assert len(seeks) > 20 and (fetch > 0).all()  # every point has its bound
    ends = np.append(np.asarray(sc.offsets, dtype=np.int64)[1:], len(raw))
    ks = seeks.points_before(ends - 1)
    estimates = seeks.estimated_ends(ks, ends)
    saved = fast_inflate.ISAL
    assert saved is not None, "pip install isal (in the test extra)"
    try:
        for isal in (True, False):
            fast_inflate.ISAL = saved if isal else None
            for k, end, est in zip(ks.tolist(), ends.tolist(), estimates.tolist(), strict=True):
                a = seeks.compressed_start(k)
                out = int(seeks.out[k])
                got = inflate_span(packed[a:est], a, int(seeks.kind[k]), int(seeks.bits[k]),
                                   seeks.window(k), sc.compression, end - out)
                assert bytes(got) == raw[out:end]
    finally:
        fast_inflate.ISAL = saved
    # the bounds are tight where the data is uniform: far below the wide margin of old
    text = [k for k in range(len(seeks) - 1)
            if int(seeks.in_[k + 1] - seeks.in_[k]) > 2 * (FETCH_STEP + FETCH_SLACK)]
    assert text and min((fetch[k] - 1) * FETCH_UNIT for k in text) < FETCH_STEP


def test_fetch_bound_arithmetic():
    """A bound is the largest excess of the input noted after a step over the line at the
    output the step began from, the next point counting as the last note."""
    outs, ins = np.array([0, 1000, 2000, 2000]), np.array([0, 500, 1500, 1600])
    marks_out = np.array([250, 500, 750, 1500, 2000, 3000])  # 3000: past the last point
    marks_in = np.array([200, 260, 380, 900, 1490, 9999])
    got = fetch_bounds(outs, ins, marks_out, marks_in)
    # span 0, line in = out / 2: 200 - 0, 260 - 125, 380 - 250, then point 1: 500 - 375
    # span 1, line in = 500 + (out - 1000): 900 - 500, then 1490 - 1000 at out 2000,
    #   then point 2 (1500) from out 2000: 1500 - 1500
    # span 2 (no output, 100 more bytes in): point 3 from out 2000: 1600 - 1500
    assert got.tolist() == [200 + 1, 490 + 1, 100 + 1]
    # marks in any order give the same
    order = np.random.default_rng(0).permutation(len(marks_out))
    assert fetch_bounds(outs, ins, marks_out[order], marks_in[order]).tolist() == got.tolist()
    # no step in between: the whole span; one point: nothing to bound
    assert fetch_bounds(np.array([10, 20]), np.array([100, 300]), np.zeros(0),
                        np.zeros(0)).tolist() == [200 + 1]
    assert fetch_bounds(np.array([10]), np.array([100]), np.zeros(0), np.zeros(0)).size == 0


def test_python_inflater_stores_no_bounds(tmp_path):
    """Without the compiled module (no seek points inside members, no marks), points hold no
    bound and reads keep the wide margin."""
    raw = ref_tfrecord(_records(1))
    path = write_raw(str(tmp_path / "d.tfrecord.gz"), zlib_pack(raw, "gzip", 6, 4))
    with implementation("pure-python"):
        ofindex.build_index(path, seek_spacing=16 << 10)
    sc = open_local_sidecar(sidecar_of(path))
    assert len(sc.seeks) == 4 and not sc.seek_points["fetch"].any()
    ds = ofindex.open(path)
    assert ds[len(ds) - 1] == _records(1)[-1]


def test_inflater_marks_do_not_change_what_it_does():
    """With ``every``, the compiled Inflater stops where it stopped without (block
    boundaries, the end of the output room), produces the same bytes, and notes after each
    ``every`` bytes of output and at the end of each call where it was (the input it had
    used when its output got there)."""
    from ofindex import _accel

    native = _accel.native
    assert native is not None, "the compiled module is built by the test command"
    raw = ref_tfrecord(_records(3))
    packed = zlib_pack(raw, "gzip", 6, 2)

    def run(every: int) -> tuple[list[tuple[int, int, int, int]], bytes, list[np.ndarray]]:
        inf = native.Inflater(31, True, every)
        calls, out, marks, pos = [], bytearray(), [], 0
        room = bytearray(50_000)
        for i in itertools.count():
            block = i % 3 != 0  # stop at block boundaries two calls in three
            used, got, status, data_type = inf.inflate(memoryview(packed)[pos:], room, block)
            calls.append((used, got, status, data_type))
            out += room[:got]
            m = inf.marks()
            assert m is not None
            marks.append(np.frombuffer(m, dtype=np.int64).reshape(-1, 2))
            pos += used
            if status == 1:  # a member ended: the next starts
                if pos >= len(packed):
                    break
                inf.reset(31)
        return calls, bytes(out), marks

    plain_calls, plain_out, plain_marks = run(0)
    calls, out, marks = run(1000)
    assert calls == plain_calls and out == plain_out == raw
    assert all(len(m) == 0 for m in plain_marks)
    for (used, got, _, _), m in zip(calls, marks, strict=True):
        if got:
            assert m[-1, 1] == got and m[-1, 0] <= used  # the call's end
            assert (np.diff(m[:, 1], prepend=0) <= 1000).all()  # a note per 1000 bytes
            assert (np.diff(m, axis=0) >= 0).all()
        else:
            assert len(m) == 0
