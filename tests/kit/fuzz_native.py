"""Hostile-argument fuzzing of the compiled module ``ofindex._native``, run as a script.

Every entry point is called with arguments drawn from a seeded generator: good framed records and
mutated ones, spans and offsets at the edges of int64/uint64 (negative, 2**40, 2**63, 2**64-1),
indexed ends past the data, hostile framing sizes, memo dicts holding bad values, ranges and
output buffers whose sizes wrap, and arguments of the wrong types. The property: each call
returns exactly what a reference written here in Python says (payloads, or the position and
problem code of the first record that fails), or raises a clean TypeError / ValueError /
IndexError / OverflowError / BufferError — never a crash, never ``SystemError`` (NULL returned
without an exception).

It runs in a subprocess (tests/native/test_fuzz_native.py), so that a crash fails one test
rather than killing the test run, and again under AddressSanitizer and UBSan
(tests/native/test_native_sanitized.py).
A plain seeded generator rather than hypothesis: a call costs microseconds, hypothesis's engine
about 10 ms per example, and volume is what finds wrapping arithmetic (the segfault of issue 16
took ~2,000 hypothesis examples to show, a few hundred milliseconds here). A failure prints the
seed, the example number and the arguments; ``--seed S --start K`` replays it.

    python tests/kit/fuzz_native.py --examples 20000 --seed 1   # prints one JSON line of counts
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import struct
import sys
import tempfile
import zlib

import crc32c
import numpy as np

from ofindex import _accel

native = _accel.native
STATS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
CLEAN = (TypeError, ValueError, IndexError, OverflowError, BufferError)
MASK = 0xA282EAD8
#: Slots of a row of ``locate``'s output (kind, count, start, end, value, list start, end).
SLOTS = 7

# -- reference framing, written from the format description ----------------------------------


def masked(data: bytes) -> int:
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + MASK) & 0xFFFFFFFF


def frame(records: list[bytes], tf: bool) -> bytes:
    out = bytearray()
    for r in records:
        n = struct.pack("<Q", len(r))
        out += (n + struct.pack("<I", masked(n)) + r + struct.pack("<I", masked(r))) if tf \
            else struct.pack("<q", len(r)) + r
    return bytes(out)


def offsets_of(records: list[bytes], overhead: int) -> list[int]:
    out, pos = [], 0
    for r in records:
        out.append(pos)
        pos += len(r) + overhead
    return out


class Cutter:
    """The reference of csrc/records.c's cut_record, with its per-call length-CRC cache."""

    def __init__(self, buf: bytes, header: int, footer: int, verify: bool, memo: dict) -> None:
        self.buf, self.header, self.footer, self.verify, self.memo = buf, header, footer, \
            verify, memo
        self.last_len, self.last_crc = -1, 0

    def cut(self, start: int, end: int) -> bytes | None:
        buf, h, f = self.buf, self.header, self.footer
        if start < 0 or end < start or end > len(buf) or end - start < h + f:
            return None
        size = end - start - h - f
        if struct.unpack_from("<Q", buf, start)[0] != size:
            return None
        payload = buf[start + h : start + h + size]
        if not self.verify:
            return payload
        if size != self.last_len:
            if size in self.memo:
                v = self.memo[size]
                if not isinstance(v, int) or not 0 <= v < 2**32:
                    raise ValueError("bad memo value")
                c = v
            else:
                c = masked(buf[start : start + 8])
                if len(self.memo) < 65536:
                    self.memo[size] = c
            self.last_len, self.last_crc = size, c
        if (struct.unpack_from("<I", buf, start + 8)[0] != self.last_crc
                or struct.unpack_from("<I", buf, start + h + size)[0] != masked(payload)):
            return None
        return payload


def ref_cut(buf, starts, ends, header, footer, verify, memo):
    if len(starts) != len(ends) or not ((header, footer) == (12, 4)
                                        or ((header, footer) == (8, 0) and not verify)):
        raise ValueError("bad arguments")
    c = Cutter(buf, header, footer, verify, memo)
    out = []
    for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
        got = c.cut(int(s), int(e))
        if got is None:
            return k
        out.append(got)
    return out


def ref_span(offsets, iend, i, minimum, length):
    """(problem, start, end) as csrc/records.c's span_of computes it."""
    count = len(offsets)
    if not 0 <= i < count:
        raise IndexError(i)
    s = int(offsets[i])
    e = int(offsets[i + 1]) if i + 1 < count else iend
    if e < s or e - s < minimum or e > iend:
        return 1, 0, 0
    if e > length:
        return 3, 0, 0
    return 0, s, e


def ref_gather(bufs, offs, iends, which, local, header, footer, verify, memo):
    if not ((header, footer) == (12, 4) or ((header, footer) == (8, 0) and not verify)):
        raise ValueError("framing")
    if any(e < 0 for e in iends) or len(which) != len(local):
        raise ValueError("ends")
    cutters = [Cutter(b, header, footer, verify, memo) for b in bufs]
    shared = [-1, 0]  # one length-CRC cache per call, across shards
    out = []
    for k, (j, i) in enumerate(zip(which.tolist(), local.tolist(), strict=True)):
        if not 0 <= j < len(bufs):
            raise IndexError(j)
        problem, s, e = ref_span(offs[j], iends[j], i, header + footer, len(bufs[j]))
        if problem:
            return problem, k
        c = cutters[j]
        c.last_len, c.last_crc = shared
        got = c.cut(s, e)
        shared = [c.last_len, c.last_crc]
        if got is None:
            return 2, k
        out.append(got)
    return out


def ref_spans(bufs, offs, iends, which, local, minimum):
    """bufs[j]: a buffer, or its length as an int."""
    if any(e < 0 for e in iends) or not 0 <= minimum < 2**63:
        raise ValueError("ends")
    if any(isinstance(b, int) and not 0 <= b < 2**63 for b in bufs):
        raise ValueError("lengths")
    lengths = [b if isinstance(b, int) else len(b) for b in bufs]
    out = []
    for k, (j, i) in enumerate(zip(which.tolist(), local.tolist(), strict=True)):
        if not 0 <= j < len(bufs):
            raise IndexError(j)
        problem, s, e = ref_span(offs[j], iends[j], i, minimum, lengths[j])
        if problem:
            return problem, k
        out.append((s, e))
    return out


# -- generators --------------------------------------------------------------------------

EDGES = [0, 1, 7, 8, 11, 12, 15, 16, 17, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40,
         2**62, 2**63 - 1, -1, -8, -(2**31), -(2**40), -(2**63)]
U64_EDGES = [0, 1, 8, 16, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]
BAD_MEMO = [2**64 - 1, 2**32, -1, 2**70, "x", None, 1.5]


def framed(rng: random.Random) -> tuple[bytes, bool, list[bytes], list[int]]:
    """A buffer of framed records (maybe mutated) with its format and true offsets."""
    tf = rng.random() < 0.5
    records = [rng.randbytes(rng.choice([0, 1, 3, 8, 24])) for _ in range(rng.randint(0, 6))]
    buf = bytearray(frame(records, tf))
    for _ in range(rng.choice([0, 0, 1, 2])):
        if not buf:
            break
        at = rng.randrange(len(buf))
        how = rng.randrange(3)
        if how == 0:
            buf[at] ^= 1 << rng.randrange(8)
        elif how == 1:
            del buf[at:]
        else:
            buf[at : at + 8] = struct.pack("<Q", rng.choice(U64_EDGES))
    return bytes(buf), tf, records, offsets_of(records, 16 if tf else 8)


def near(rng: random.Random, true: list[int], length: int, edges: list[int],
         low: int = -(2**63)) -> list[int]:
    """True positions, some (none, a third, or all) replaced by edge values or values near
    the buffer's end."""
    hostility = rng.choice([0, 2, 5])
    out = []
    for v in true:
        pick = rng.randrange(6)
        if pick < hostility:
            v = rng.choice(edges)
        elif pick == 5:
            v = max(low, length + rng.randint(-20, 20))
        out.append(v)
    return out


#: With the CPU's CRC32C instruction on, small records' CRCs are computed in C and the memo
#: of length CRCs is not consulted: the fuzz then passes an empty (always true) memo, and the
#: pass with the instruction off exercises bad memo values.
HW_PASS = False


def memo_of(rng: random.Random) -> dict:
    memo = {rng.randint(0, 30): rng.choice(BAD_MEMO) if rng.random() < 0.15
            else rng.getrandbits(32) for _ in range(rng.choice([0, 0, 1, 3]))}
    return {} if HW_PASS else memo


def framing(rng: random.Random, tf: bool) -> tuple[int, int]:
    if rng.random() < 0.8:
        return (12, 4) if tf else (8, 0)
    return rng.choice(EDGES), rng.choice(EDGES)


def note(target: str, got) -> None:
    if isinstance(got, BaseException):
        STATS[target][type(got).__name__] += 1
    elif isinstance(got, list):
        STATS[target]["payloads"] += 1
    else:
        STATS[target]["refused"] += 1


def call(fn, *args):
    try:
        return fn(*args)
    except CLEAN as exc:
        return exc


def same_outcome(got, want) -> bool:
    if isinstance(want, BaseException) or isinstance(got, BaseException):
        return isinstance(got, CLEAN) and isinstance(want, CLEAN)
    return got == want


# -- targets ---------------------------------------------------------------------------------


def fuzz_cut(rng: random.Random) -> None:
    buf, tf, records, true = framed(rng)
    bounds = [*true, len(buf)] if records else [0]
    picks = [rng.randrange(len(bounds)) for _ in range(rng.randint(0, 6))]
    starts = near(rng, [bounds[p] for p in picks], len(buf), EDGES)
    ends = near(rng, [bounds[min(p + 1, len(bounds) - 1)] for p in picks], len(buf), EDGES)
    header, footer = framing(rng, tf)
    verify = tf and rng.random() < 0.5
    memo = memo_of(rng)
    args = (buf, starts, ends, header, footer, verify, memo)
    got = call(native.cut, buf, np.array(starts, np.int64), np.array(ends, np.int64), header,
               footer, verify, crc32c.crc32c, dict(memo))
    want = call(ref_cut, buf, starts, ends, header, footer, verify, dict(memo))
    note("cut", got)
    assert same_outcome(got, want), (got, want, args)


def fuzz_gather_and_record(rng: random.Random) -> None:
    cases = [framed(rng) for _ in range(rng.randint(1, 3))]
    tf = cases[0][1]
    header, footer = framing(rng, tf)
    verify = tf and rng.random() < 0.5
    memo = memo_of(rng)
    bufs = [c[0] for c in cases]
    offs = [np.array(near(rng, c[3], len(c[0]), U64_EDGES, low=0), np.uint64) for c in cases]
    iends = [rng.choice([len(b), len(b), len(b) + 1, 0, 2**40, 2**62, 2**63 - 1, -1])
             for b in bufs]
    n = rng.randint(0, 6)
    hostile = rng.random() < 0.2  # shard and record numbers out of range
    which = np.array([rng.randint(-1, len(bufs)) if hostile else rng.randrange(len(bufs))
                      for _ in range(n)], np.int64)
    local = np.array([rng.randint(-1, 7) if hostile else rng.randrange(max(len(offs[j]), 1))
                      for j in which.tolist()], np.int64)
    args = (bufs, offs, iends, which, local, header, footer, verify, memo)
    got = call(native.gather, bufs, offs, iends, which, local, header, footer, verify,
               crc32c.crc32c, dict(memo))
    want = call(ref_gather, bufs, offs, iends, which, local, header, footer, verify, dict(memo))
    note("gather", got)
    assert same_outcome(got, want), (got, want, args)
    # spans(): the same spans, or the same first problem (1 or 3) as the reference
    starts, ends = np.full(n, -7, np.int64), np.full(n, -7, np.int64)
    got = call(native.spans, bufs, offs, iends, which, local, header + footer, starts, ends)
    want = call(ref_spans, bufs, offs, iends, which, local, header + footer)
    note("spans", got)
    if isinstance(want, list):
        assert got is None, (got, want, args)
        assert [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)] == want, args
    else:
        assert same_outcome(got, want), (got, want, args)
    # the same with some shards given by their length alone (files held as blocks)
    lengths = [rng.choice([len(b), len(b), len(b) - 1, len(b) + 1, -1, 2**63 - 1, 2**63])
               if rng.random() < 0.6 else b for b in bufs]
    starts, ends = np.full(n, -7, np.int64), np.full(n, -7, np.int64)
    got = call(native.spans, lengths, offs, iends, which, local, header + footer, starts, ends)
    want = call(ref_spans, lengths, offs, iends, which, local, header + footer)
    note("spans of lengths", got)
    if isinstance(want, list):
        assert got is None, (got, want, args, lengths)
        assert [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)] == want, args
    else:
        assert same_outcome(got, want), (got, want, args, lengths)
    if n and 0 <= which[0] < len(bufs):  # the one-record entry point on the first pick
        j, i = int(which[0]), int(local[0])
        got = call(native.record, bufs[j], offs[j], iends[j], i, header, footer, verify,
                   crc32c.crc32c, dict(memo))
        want = call(ref_gather, [bufs[j]], [offs[j]], [iends[j]], np.zeros(1, np.int64),
                    np.array([i]), header, footer, verify, dict(memo))
        if isinstance(want, (tuple, list)):
            want = want[0]
        note("record", got)
        assert same_outcome(got, want), (got, want, args)


JUNK = [None, "", "ab", 1.5, float("nan"), -(2**70), 2**70, -1, 0, 2**63, b"xy", [], {},
        np.zeros(2, np.int32), np.zeros((2, 2), np.int64), np.zeros(5, np.int64)[::2],
        np.zeros(2, np.uint64), bytearray(3), memoryview(b"abc"), object()]


def fuzz_wrong_types(rng: random.Random) -> None:
    """One or two arguments of each entry point replaced by junk: a clean error or a result."""
    buf = frame([b"abc", b"de"], True)
    offs = np.array([0, 19], np.uint64)
    good = {
        "cut": [buf, np.array([0]), np.array([19]), 12, 4, True, crc32c.crc32c, {}],
        "record": [buf, offs, len(buf), 1, 12, 4, True, crc32c.crc32c, {}],
        "gather": [[buf], [offs], [len(buf)], np.array([0]), np.array([1]), 12, 4, True,
                   crc32c.crc32c, {}],
        "spans": [[buf], [offs], [len(buf)], np.array([0]), np.array([1]), 16,
                  np.zeros(1, np.int64), np.zeros(1, np.int64)],
        "same_bytes": [[b"abc", b"abd"], np.array([0, 2])],
        "gather_bytes": [[b"abc", b"abd"], np.array([0, 2]), bytearray(4)],
        "walk": [bytearray(buf), len(buf), 12, 16, np.zeros(8, np.int64)],
        "pool": [None],
    }
    for name, args in good.items():
        for _ in range(rng.randint(1, 2)):
            args[rng.randrange(len(args))] = rng.choice(JUNK)
        if rng.random() < 0.1:
            args = args[: rng.randrange(len(args))]  # too few
        try:
            getattr(native, name)(*args)
            STATS["wrong_types"]["accepted"] += 1
        except CLEAN as exc:
            STATS["wrong_types"][type(exc).__name__] += 1
        finally:
            if name == "pool":
                native.pool(1 << 30)


def fuzz_layout(rng: random.Random) -> None:
    records = [rng.randbytes(rng.randint(0, 16)) for _ in range(rng.randint(0, 5))]
    if records and rng.random() < 0.5:  # mostly equal records, as one writer's layout gives
        records = [records[0]] * len(records)
    least = min((len(r) for r in records), default=0)
    hostile = rng.random() < 0.3
    flat = [rng.choice(EDGES) if hostile and rng.random() < 0.3 else rng.randint(0, least + hostile)
            for _ in range(rng.randrange(0, 8, 1 + (not hostile)))]
    if rng.random() < 0.7:
        flat = sorted(v for v in flat if v >= 0)
    ranges = np.array(flat, np.int64)
    pairs = list(zip(flat[::2], flat[1::2], strict=False))
    valid = len(flat) % 2 == 0 and all(0 <= a <= b <= least for a, b in pairs)
    got = call(native.same_bytes, records, ranges)
    STATS["same_bytes"]["ok" if not isinstance(got, BaseException) else type(got).__name__] += 1
    if valid:
        assert got is all(r[a:b] == records[0][a:b] for r in records for a, b in pairs), got
    else:
        assert isinstance(got, ValueError), got
    want = b"".join(r[a:b] for r in records for a, b in pairs) if valid else b""
    size = max(0, len(want) + rng.choice([0, 0, -1, 1, -3]))
    out = bytearray(size)
    got = call(native.gather_bytes, records, ranges, out)
    STATS["gather_bytes"]["ok" if got is None else type(got).__name__] += 1
    if valid and size == len(want):
        assert got is None and bytes(out) == want, got
    else:
        assert isinstance(got, ValueError), got


WALK_SIZES = [(12, 16), (12, 16), (8, 8), (8, 8), (7, 8), (12, 11), (8, 2**21), (2**62, 2**62),
              (-1, 8)]


def fuzz_walk(rng: random.Random) -> None:
    buf = bytearray(framed(rng)[0])
    n = rng.randint(-2, len(buf) + 2)
    header, overhead = rng.choice(WALK_SIZES)
    cap_delta = rng.choice([0, 0, 0, 1, -1, -2])
    valid_sizes = 8 <= header <= overhead <= 1 << 20
    need = n // overhead + 1 if valid_sizes and n >= 0 else 1
    out = np.zeros(max(need + cap_delta, 0), np.int64)
    got = call(native.walk, buf, n, header, overhead, out)
    STATS["walk"]["ok" if isinstance(got, tuple) else type(got).__name__] += 1
    if not (valid_sizes and 0 <= n <= len(buf) and need + cap_delta >= need):
        assert isinstance(got, ValueError), got
        return
    count, end = got
    p, want = 0, []
    while p + header <= n and len(want) < len(out):
        want.append(p)
        length = struct.unpack_from("<Q", buf, p)[0]
        if length > (1 << 62) - p - overhead:
            p = 1 << 62
            break
        p += length + overhead
    assert out[:count].tolist() == want and end == p, (out[:count], want, end, p)


def fuzz_blocks(rng: random.Random) -> None:
    size = rng.choice([-1, -(2**63), 0, 1, 4095, 1 << 20, 2**62, 2**63 - 1])
    try:
        block = native.Block(size)
        assert len(memoryview(block)) == size
        STATS["blocks"]["ok"] += 1
    except (ValueError, MemoryError, OverflowError) as exc:
        assert size < 0 or size >= 2**62, exc
        STATS["blocks"][type(exc).__name__] += 1


def fuzz_slices_and_fill(rng: random.Random) -> None:
    # slices() (serially, and checked on a second thread for >= 512 records) and fill() (a
    # batch split into parts, copies and CRCs in one pass) against the reference cut
    buf, tf, records, true = framed(rng)
    if rng.random() < 0.3 and records:  # a big batch: the same buffer many times
        reps, m, size = 600 // len(records) + 1, len(records), len(buf)
        buf, records = buf * reps, records * reps
        true = [true[k % m] + (k // m) * size for k in range(len(records))]
    bounds = [*true, len(buf)] if records else [0]
    picks = list(range(len(true))) if rng.random() < 0.5 else [
        rng.randrange(len(bounds)) for _ in range(rng.randint(0, 6))]
    starts = near(rng, [bounds[p] for p in picks], len(buf), EDGES, low=0)
    ends = near(rng, [bounds[min(p + 1, len(bounds) - 1)] for p in picks], len(buf), EDGES,
                low=0)
    header, footer = framing(rng, tf)
    verify = tf and HW_PASS and rng.random() < 0.7
    st, en = np.array(starts, np.int64), np.array(ends, np.int64)
    want = call(ref_cut, buf, starts, ends, header, footer, verify, {})
    for parallel in (False, True):
        got = call(native.slices, buf, st, en, header, footer, verify, parallel)
        note("slices", got)
        assert same_outcome(got, want), (got, want, parallel)
    if verify:  # a Checker on its thread, waited for in random steps: the same first bad
        chunk = rng.choice([1, 2, 3, 256, 256, 0, 257])  # records per chunk (0, 257: refused)
        checker = call(native.Checker, buf, st, en, header, footer, chunk)
        if not 1 <= chunk <= 256:
            assert isinstance(checker, ValueError), checker
            checker = call(native.Checker, buf, st, en, header, footer)
        note("checker", checker)
        if isinstance(checker, BaseException) or isinstance(want, BaseException):
            assert same_outcome(checker, want), (checker, want)
        else:
            upto, bad = 0, -1
            while bad < 0 and upto < len(st):
                upto = min(len(st) + 2, upto + rng.randint(0, 700))
                bad = checker.wait(upto, upto + rng.randint(-5, 900))
            assert bad == (want if isinstance(want, int) else -1), (bad, want)
    if (header, footer) not in ((12, 4), (8, 0)) or not len(st) or int(st.min()) < 0:
        return
    sizes = np.clip(en - st - header - footer, 0, len(buf) + 1)
    outs = native.blank(sizes)
    want = call(ref_cut, buf, starts, (st + sizes + header + footer).tolist(), header,
                footer, verify, {})
    cut = rng.randint(0, len(st))
    which = np.zeros(len(st), np.int64)
    first = call(native.fill, [buf], which, st, outs, 0, cut, header, footer, verify)
    rest = call(native.fill, [buf], which, st, outs, cut, len(st), header, footer, verify)
    got = first if first != -1 else (rest if rest != -1 else outs)
    note("fill", got)
    assert same_outcome(got, want), (got, want)
    # checked in place (sizes instead of outs): the same first bad record, nothing copied
    first = call(native.fill, [buf], which, st, sizes, 0, cut, header, footer, verify)
    rest = call(native.fill, [buf], which, st, sizes, cut, len(st), header, footer, verify)
    checked = first if first != -1 else (rest if rest != -1 else outs)
    note("fill in place", checked)
    assert same_outcome(checked, want), (checked, want)


def _example(rng: random.Random) -> bytes:
    """A serialized Example or OFRecord-like feature map with a few features of each kind."""
    from ofindex.proto import example_pb2

    ex = example_pb2.Example()
    f = ex.features.feature
    for k in range(rng.randint(0, 4)):
        name = rng.choice(["a", "b", "img", "x" * rng.randint(0, 3), f"n{k}"])
        kind = rng.randrange(4)
        if kind == 1:
            f[name].bytes_list.value.extend(rng.randbytes(rng.randint(0, 300))
                                            for _ in range(rng.randint(0, 3)))
        elif kind == 2:
            f[name].float_list.value.extend(rng.random() for _ in range(rng.randint(0, 5)))
        elif kind == 3:
            f[name].int64_list.value.extend(rng.choice([0, 1, -1, 2**63 - 1, -(2**63), 300])
                                            for _ in range(rng.randint(0, 3)))
        else:
            f[name].Clear()
    return ex.SerializeToString(deterministic=True)  # (upb orders maps differently per process)


def _mutated(rng: random.Random, buf: bytes) -> bytes:
    b = bytearray(buf)
    for _ in range(rng.choice([0, 0, 1, 1, 2, 4])):
        op = rng.randrange(4)
        at = rng.randint(0, len(b))
        if op == 0 and b:
            b[min(at, len(b) - 1)] = rng.choice([0x00, 0x0A, 0x12, 0x1A, 0x80, 0xFF,
                                                  rng.randrange(256)])
        elif op == 1:
            del b[at : at + rng.randint(1, 4)]
        elif op == 2:
            b[at:at] = bytes(rng.choice([[0x80] * 9 + [0x02], [0xFF] * 5 + [0x0F], [0x0A],
                                         [0x10, 0x01], [0xC3, 0xA9]]))
        else:
            b = b[:at]
    return bytes(b)


def fuzz_locate(rng: random.Random) -> None:
    """``locate`` against the careful walker (``ofindex.decode._walk``, itself checked against
    protobuf): whatever it says it handled, the walker reads the same way (lists of features
    not asked for are looked into by neither, as in TensorFlow's parser); ``gather_spans``
    copies exactly the spans, or refuses bad ones cleanly."""
    from ofindex.decode._values import list_values
    from ofindex.decode._walk import walk_example

    records = [_mutated(rng, _example(rng)) for _ in range(rng.randint(0, 6))]
    names = tuple(rng.sample([b"a", b"b", b"img", b"", b"n0", b"n1", b"xx"], rng.randint(1, 3)))
    rows = np.zeros(max(0, len(records) * len(names) * SLOTS + rng.choice([0, 0, 0, 1, -1])),
                    np.int64)
    got = call(native.locate, records, names, b".b4v", True, rows)
    if isinstance(got, BaseException):
        note("locate", got)
    if len(rows) != len(records) * len(names) * SLOTS:
        assert isinstance(got, ValueError), got
        return
    table = rows.reshape(len(records), len(names), SLOTS)
    assert got == int((table[:, 0, 0] != -1).sum()), got
    # the same records as spans of one buffer (as in a memory map): the same answer
    big = bytearray(b"".join(records))
    sizes = np.array([len(r) for r in records], np.int64)
    ends = np.cumsum(sizes, dtype=np.int64)
    spans = (np.zeros(len(records), np.int64), ends - sizes, ends.copy())
    changed = bool(records) and rng.random() < 0.2
    if changed:  # a span moved, maybe outside the buffer, or in another buffer
        spans[rng.randrange(3)][rng.randrange(len(records))] = rng.choice(
            [e for e in EDGES if e < 2**63] + [-1, -(2**40)])
    again = np.zeros_like(rows)
    got2 = call(native.locate, [big], names, b".b4v", True, again, spans)
    valid = all(0 <= a <= b <= len(big) for a, b in zip(spans[1], spans[2], strict=True)) and (
        spans[0] == 0).all()
    if not valid:
        assert isinstance(got2, ValueError), got2
    elif not changed:
        assert got2 == got and (again == rows).all(), (got2, got)
    else:  # other bytes: any answer, but a clean one
        assert isinstance(got2, int), got2
    STATS["locate records"]["handled"] += got
    STATS["locate records"]["left to the careful path"] += len(records) - got
    vtypes = {1: "bytes", 2: "float32", 3: "int64"}
    for buf, row in zip(records, table, strict=True):
        if row[0, 0] == -1:
            assert (row[:, 0] == -1).all()
            continue
        walked = walk_example(buf)  # must walk
        for name, (kind, count, start, end, value, list_start, list_end) in zip(
                names, row.tolist(), strict=True):
            found = walked.get(name.decode())
            if kind == 0:
                assert found is None, (buf, name)
                continue
            assert found is not None and found.kind == kind, (buf, name)
            assert found.regions == [(list_start, list_end)], (buf, name)
            values = list_values(buf, found.regions, vtypes[kind], found.level)
            assert len(values) == count, (buf, name)
            if kind == 1 and count:
                assert buf[start:end] == values[0]
            elif kind == 2:
                assert buf[start:end] == values.astype("<f4").tobytes()
            elif kind == 3 and count:
                assert value == int(values[0])
    spans = [(rng.choice([0, 1, -1, 2**62]) if rng.random() < 0.1 else rng.randint(0, len(r)))
             for r in records]
    ends = [(a + rng.randint(-1, 3)) if rng.random() < 0.2 else rng.randint(max(a, 0), len(r))
            if 0 <= a <= len(r) else a for a, r in zip(spans, records, strict=True)]
    valid = all(0 <= a <= e <= len(r) for a, e, r in zip(spans, ends, records, strict=True))
    want = b"".join(r[a:e] for a, e, r in zip(spans, ends, records, strict=True)) if valid else b""
    out = bytearray(max(0, len(want) + rng.choice([0, 0, 0, -1, 1])))
    got = call(native.gather_spans, records, np.array(spans, np.int64), np.array(ends, np.int64),
               out)
    note("gather_spans", got)
    if valid and len(out) == len(want):
        assert got is None and bytes(out) == want, got
    else:
        assert isinstance(got, ValueError), got


def _varints_of_spans(records: list[bytes], starts: np.ndarray, ends: np.ndarray
                      ) -> list[int] | None:
    """The packed varints in bytes [starts[i], ends[i]) of each record, as int64 (protobuf's
    rules: at most 10 bytes, the 10th holding at most the 64th bit), or None when a span lies
    outside its record or holds anything else."""
    values: list[int] = []
    for record, start, end in zip(records, starts.tolist(), ends.tolist(), strict=True):
        if not 0 <= start <= end <= len(record):
            return None
        value = shift = 0
        for at, byte in enumerate(record[start:end]):
            if shift == 63 and byte > 1:
                return None
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                values.append(value - (1 << 64) if value >= 1 << 63 else value)
                value = shift = 0
            elif shift > 63 or at == end - start - 1:
                return None  # more than 10 bytes, or cut short
    return values


def fuzz_values(rng: random.Random) -> None:
    """``values`` against the careful walker: the lists ``locate`` found read out in one call
    (varints as int64 and int32, bytes values) equal what the walker reads, and spans moved
    out of their records, malformed lists, counts and outputs of the wrong size are refused
    cleanly, before anything is allocated from them."""
    from ofindex.decode._values import list_values
    from ofindex.decode._walk import walk_example

    records = [_mutated(rng, _example(rng)) for _ in range(rng.randint(0, 6))]
    names = (rng.choice([b"a", b"b", b"img", b"n0", b"n1"]),)
    rows = np.zeros(len(records) * SLOTS, np.int64)
    native.locate(records, names, b".b4v", True, rows)
    table = rows.reshape(len(records), SLOTS)
    kind = rng.choice([1, 3])
    keep = [i for i in range(len(records)) if table[i, 0] == kind]
    sub = [records[i] for i in keep]
    walked = [walk_example(records[i])[names[0].decode()] for i in keep]
    if kind == 3:
        want = [int(v) for w, i in zip(walked, keep, strict=True)
                for v in list_values(records[i], w.regions, "int64", w.level)]
        starts, ends = table[keep, 2].copy(), table[keep, 3].copy()
        how = rng.choice(["v", "i"])
        if rng.random() < 0.1 and len(starts):  # a span moved, maybe out of its record
            starts[rng.randrange(len(starts))] = rng.choice(EDGES)
            want = _varints_of_spans(sub, starts, ends)  # (None: to be refused)
        size = max(0, len(want or []) + rng.choice([0, 0, 0, 1, -1]))
        out = np.zeros(size, np.int64 if how == "v" else np.int32)
        got = call(native.values, sub, starts, ends, how, out)
        note("values", got if got is not None else [out])  # None: the values are in out
        if got is None:
            assert want is not None, (sub, starts, ends)
            want_typed = np.array(want, np.int64).astype(out.dtype)  # int32: the low 32 bits
            assert size == len(want) and out.tolist() == want_typed.tolist(), (out, want)
        else:
            assert isinstance(got, ValueError), got
        return
    want_bytes = [v for w, i in zip(walked, keep, strict=True)
                  for v in list_values(records[i], w.regions, "bytes", w.level)]
    count = rng.choice([len(want_bytes)] * 3 + [len(want_bytes) + 1, 2**62, -1])
    got = call(native.values, sub, table[keep, 5].copy(), table[keep, 6].copy(), "b", count)
    note("values", got if not isinstance(got, np.ndarray) else list(got))
    if count == len(want_bytes):
        assert isinstance(got, np.ndarray) and got.dtype == object and got.shape == (count,)
        assert list(got) == want_bytes, (got, want_bytes)
    else:
        assert isinstance(got, (ValueError, OverflowError)), got


#: Spec features the plans of fuzz_plan take: (name, what the careful path is told).
_PLAN_FEATURES = [("a", "int64"), ("b", "bytes"), ("img", "float32"), ("n0", "int64"),
                  ("x", "bytes")]


def fuzz_plan(rng: random.Random) -> None:
    """``RecordPlan`` against the careful walker (ofindex.decode's pure-Python path, itself
    checked against protobuf): on good and mutated records, with random specs and without,
    the plan's answer is ``None`` or exactly the careful path's arrays, and a record the
    careful path refuses is never answered with values of an asked-for feature it looked at;
    plans made of hostile arguments are refused cleanly."""
    from ofindex import _accel
    from ofindex.decode import FixedLen, VarLen, decode_example
    from ofindex.decode._plans import record_plan
    from ofindex.decode.spec import normalize_spec
    from ofindex.errors import DecodeError

    raw = _mutated(rng, _example(rng))
    spec: dict | None = None
    if rng.random() < 0.7:
        spec = {}
        for name, dtype in rng.sample(_PLAN_FEATURES, rng.randint(1, 3)):
            shape = rng.choice([(), (1,), (2,), (1, 2)])
            spec[name] = rng.choice([VarLen(dtype), FixedLen(shape, dtype), None, FixedLen(
                shape, dtype, default=b"d" if dtype == "bytes" else 3)])
    nspec = normalize_spec(spec, ("bytes", "float32", "int64"), "Example")
    plan = record_plan(nspec, "example")
    assert plan is not None
    got = call(plan, raw)
    STATS["RecordPlan records"]["decoded" if isinstance(got, dict) else
                                "left to the careful path" if got is None else
                                type(got).__name__] += 1
    saved, _accel.native = _accel.native, None
    try:
        want = decode_example(raw, spec)
    except DecodeError as exc:  # the careful path's refusal
        want = exc
    finally:
        _accel.native = saved
    if got is not None and not isinstance(got, BaseException):
        assert not isinstance(want, BaseException), (raw, spec, got, want)
        assert list(got) == list(want), (raw, spec)
        for name in want:
            a, b = got[name], want[name]
            assert a.dtype == b.dtype and a.shape == b.shape, (raw, name)
            assert (a.tobytes() == b.tobytes() if a.dtype != object else a.tolist() == b.tolist())
    else:
        assert got is None, got
    hostile = rng.randrange(5)
    dtypes = (np.dtype(np.float32), np.dtype(object), np.dtype(np.float32), np.dtype(np.int64))
    features = ((b"a", "a", 3, 2, (2,), None),)
    if hostile == 0:
        dtypes = (dtypes[0], np.dtype(np.int64), dtypes[2], np.dtype(np.int32))  # widths
    elif hostile == 1:
        features = ((b"a", "a", 3, 3, (2,), None),)  # a shape of another count
    elif hostile == 2:
        features = ((b"a", "a", 9, 1, (), None),)  # a kind not known
    elif hostile == 3:
        features = ((b"a", "a", 3, 1, (rng.choice(EDGES),), None),)
    else:
        features = ((b"a", "a", 3, -1, None, np.zeros(1)),)  # a default for a VarLen: fine
    made = call(native.RecordPlan, b".b4v", True, features, dtypes)
    STATS["RecordPlan made"][type(made).__name__] += 1
    if hostile < 3 or (hostile == 3 and features[0][4] != (1,)):
        assert isinstance(made, (ValueError, TypeError, OverflowError)), made
    elif not isinstance(made, BaseException):
        assert made.decode(raw) is None or isinstance(made.decode(raw), dict)


def _inflate_all(data: bytes, wbits: int, every: int, rooms: list[int], blocks: list[bool]
                 ) -> tuple[list[tuple[int, int, int, int]], bytes, list[bytes | None]]:
    inf = native.Inflater(wbits, True, every)
    calls, out, marks, pos = [], bytearray(), [], 0
    for room_size, block in zip(rooms, blocks, strict=True):
        room = bytearray(room_size)
        try:
            got = inf.inflate(memoryview(data)[pos:], room, block)
        except CLEAN as exc:  # a refusal is an outcome here
            calls.append((type(exc).__name__,))  # type: ignore[arg-type]
            break
        calls.append(got)
        out += room[: got[1]]
        marks.append(inf.marks())
        pos += got[0]
        if got[2] != 0:
            break
    return calls, bytes(out), marks


def fuzz_inflater_marks(rng: random.Random) -> None:
    """The Inflater with ``every``: the same calls (what it used, made, its status and stop)
    and bytes as without, on good and mutated streams, with marks that end where each call
    did."""
    raw = rng.randbytes(rng.randrange(0, 3000)) + bytes(rng.randrange(0, 40000)) + \
        b"abc" * rng.randrange(0, 5000)
    wbits = rng.choice([15, 31])
    c = zlib.compressobj(rng.choice([0, 1, 6, 9]), zlib.DEFLATED, wbits)
    data = bytearray(c.compress(raw) + c.flush())
    for _ in range(rng.choice([0, 0, 1, 3])):
        data[rng.randrange(len(data))] = rng.randrange(256)
    rooms = [rng.choice([0, 1, 257, 4096, 65536, 1 << 20]) for _ in range(40)]
    blocks = [rng.random() < 0.5 for _ in range(40)]
    every = rng.choice([1, 2, 100, 4096, 65536, 1 << 30])
    plain_calls, plain_out, _ = _inflate_all(bytes(data), wbits, 0, rooms, blocks)
    calls, out, marks = _inflate_all(bytes(data), wbits, every, rooms, blocks)
    assert calls == plain_calls and out == plain_out
    for call_result, m in zip(calls, marks, strict=False):
        assert m is not None
        pairs = np.frombuffer(m, dtype=np.int64).reshape(-1, 2)
        used, made = call_result[0], call_result[1]
        if made:
            assert pairs[-1, 1] == made and pairs[-1, 0] <= used
            assert (np.diff(pairs[:, 1], prepend=0) <= every).all()
            assert (np.diff(pairs, axis=0) >= 0).all()
        else:
            assert len(pairs) == 0
    STATS["inflater"]["bad data" if any(len(c) > 2 and c[2] == -3 for c in calls)
                      else "ok"] += 1
    try:
        native.Inflater(15, False, -1)
        raise AssertionError("a negative every was taken")
    except ValueError:
        STATS["inflater"]["refused"] += 1


def ref_crcs(buf: bytes, starts: list[int], ends: list[int]) -> list[int]:
    """The CRC32C of each span, refusing (ValueError) a span outside ``buf`` first."""
    for a, b in zip(starts, ends, strict=True):
        if not 0 <= a <= b <= len(buf):
            raise ValueError(f"span [{a}, {b}) is outside the buffer")
    return [crc32c.crc32c(buf[a:b]) for a, b in zip(starts, ends, strict=True)]


def fuzz_crcs(rng: random.Random) -> None:
    """``crcs``: payload CRC32Cs of spans (the builder's OFRecord checksums), spans near the
    records' true bounds and at the edges of int64, outputs of the right and wrong sizes."""
    buf, _, records, true = framed(rng)
    bounds = [*true, len(buf)] if records else [0]
    picks = [rng.randrange(len(bounds)) for _ in range(rng.randint(0, 6))]
    starts = near(rng, [bounds[p] for p in picks], len(buf), EDGES)
    ends = near(rng, [bounds[min(p + 1, len(bounds) - 1)] for p in picks], len(buf), EDGES)
    size = len(starts) if rng.random() < 0.9 else rng.randint(0, 8)
    out = np.zeros(size, np.uint32)
    got = call(native.crcs, buf, np.array(starts, np.int64), np.array(ends, np.int64), out,
               crc32c.crc32c)
    want = (call(ref_crcs, buf, starts, ends) if size == len(starts)
            else ValueError("sizes differ"))
    STATS["crcs"]["refused" if isinstance(got, BaseException) else "ok"] += 1
    if isinstance(got, BaseException) or isinstance(want, BaseException):
        assert same_outcome(got, want), (got, want, starts, ends, size)
    else:
        assert got is None and out.tolist() == want, (out.tolist(), want, starts, ends)


class RefReader:
    """The reference of csrc/reader.c's Reader: which shards are bound, and what get() gives
    (a payload that passed every check, else None)."""

    def __init__(self, cumulative, header, footer, tf_crcs, payload_sums, memo, max_bound):
        if not ((header, footer) == (12, 4) or ((header, footer) == (8, 0) and not tf_crcs)):
            raise ValueError("framing")
        if max_bound < 1 or any(b < a for a, b in zip([0, *cumulative], cumulative,
                                                      strict=False)):
            raise ValueError("counts")
        self.cumulative, self.header, self.footer = cumulative, header, footer
        self.tf_crcs, self.payload_sums, self.memo = tf_crcs, payload_sums, memo
        self.max_bound, self.slots = max_bound, {}

    def bind(self, j, data, file_size, offsets, iend, sums):
        """``file_size``: None for a map, else the size the file was bound with."""
        if not 0 <= j < len(self.cumulative):
            raise IndexError(j)
        if (iend < 0 or (sums is not None and not self.payload_sums)
                or (file_size is not None and file_size < 0)):
            raise ValueError("bind")
        entry = (data, file_size, offsets, iend, sums)
        held = self.slots.get(j)
        if held is not None and all(a is b if not isinstance(a, (int, bool)) else a == b
                                    for a, b in zip(held, entry, strict=True)):
            return False
        self.slots.pop(j, None)
        if len(self.slots) >= self.max_bound:
            self.slots.clear()
        self.slots[j] = entry
        return True

    def get(self, key):
        if type(key) is not int or not self.cumulative:
            return None
        n = self.cumulative[-1]
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            return None
        j = next(j for j, c in enumerate(self.cumulative) if c > i)
        if j not in self.slots:
            return None
        data, file_size, offsets, iend, sums = self.slots[j]
        is_file = file_size is not None
        local = i - (self.cumulative[j - 1] if j else 0)
        try:
            problem, s, e = ref_span(offsets, iend, local, self.header + self.footer,
                                     file_size if is_file else len(data))
        except IndexError:
            return None
        if problem or (sums is not None and local >= len(sums)):
            return None
        if is_file and e > len(data):  # a short read
            return None
        got = Cutter(data, self.header, self.footer, self.tf_crcs, self.memo).cut(s, e)
        if got is not None and sums is not None and crc32c.crc32c(got) != int(sums[local]):
            return None
        return got


def fuzz_reader(rng: random.Random, tmpdir: str) -> None:
    """``Reader``: shards bound from maps (buffers) and files (descriptors) with offsets,
    indexed ends and sums near the truth and at the edges, hostile counts and framing, too few
    slots, record numbers at and past the ends and of other types: get() gives what the
    reference gives, binding evicts as the reference does."""
    cases = [framed(rng) for _ in range(rng.randint(1, 3))]
    tf = cases[0][1]
    header, footer = framing(rng, tf)
    verify = tf and rng.random() < 0.5
    payload_sums = not tf and rng.random() < 0.5
    memo = memo_of(rng)
    counts = [max(0, len(c[3]) + rng.choice([0, 0, 0, 1, -1])) for c in cases]
    cumulative = np.cumsum(counts).tolist()
    if rng.random() < 0.1:
        cumulative = [rng.choice(EDGES) for _ in cases]
    max_bound = rng.choice([1, 2, 3, 256, 256, 256, 0])
    args = (cumulative, header, footer, verify, payload_sums, memo, max_bound)
    reader = call(native.Reader, np.array(cumulative, np.int64), header, footer, verify,
                  payload_sums, crc32c.crc32c, dict(memo), max_bound)
    ref = call(RefReader, cumulative, header, footer, verify, payload_sums, dict(memo),
               max_bound)
    STATS["reader"]["made" if not isinstance(reader, BaseException) else "refused"] += 1
    if isinstance(reader, BaseException) or isinstance(ref, BaseException):
        assert same_outcome(reader, ref), (reader, ref, args)
        return
    files = []
    for _ in range(rng.randint(0, 6)):
        j = rng.randint(-1, len(cases)) if rng.random() < 0.1 else rng.randrange(len(cases))
        buf, _, records, true = cases[min(max(j, 0), len(cases) - 1)]
        offsets = np.array(near(rng, true, len(buf), U64_EDGES, low=0), np.uint64)
        iend = rng.choice([len(buf), len(buf), len(buf) + 1, 0, 2**40, -1])
        sums = None
        if payload_sums and rng.random() < 0.8:
            sums = np.array([crc32c.crc32c(r) for r in records], np.uint32)
            if len(sums) and rng.random() < 0.3:
                sums[rng.randrange(len(sums))] ^= 1
            if rng.random() < 0.1:
                sums = sums[: len(sums) // 2]
        elif rng.random() < 0.05:
            sums = np.zeros(2, np.uint32)  # sums for a reader that checks none
        if native.reads_files and rng.random() < 0.3:  # a file read with preadv
            path = os.path.join(tmpdir, f"shard-{len(files)}")
            with open(path, "wb") as f:
                f.write(buf)
            handle = open(path, "rb")  # noqa: SIM115 (closed below)
            files.append(handle)
            size = rng.choice([len(buf), len(buf), max(0, len(buf) - 3), 2**40, -1])
            got = call(reader.bind_file, j, handle, handle.fileno(), size, offsets, iend, sums)
            want = call(ref.bind, j, buf, size, offsets, iend, sums)
        else:
            got = call(reader.bind_map, j, buf, offsets, iend, sums)
            want = call(ref.bind, j, buf, None, offsets, iend, sums)
        assert same_outcome(got, want), (got, want, args)
        if rng.random() < 0.1:
            reader.close()
            ref.slots.clear()
        if rng.random() < 0.1:  # one let go of (anything else than a shard's number: ignored)
            key = rng.choice([j, j, rng.randint(-2, len(cumulative) + 2), "1", None, 2**70])
            reader.release_held(key)
            if type(key) is int:
                ref.slots.pop(key, None)
        assert reader.bound == len(ref.slots), (reader.bound, ref.slots, args)
    n = cumulative[-1] if cumulative else 0
    keys = [rng.randint(-n - 2, n + 2) for _ in range(rng.randint(0, 8))]
    keys += [rng.choice([2**63, -(2**63) - 1, 2**70, True, 1.0, "1", None, np.int64(0)])
             for _ in range(rng.choice([0, 0, 1]))]
    for key in keys:
        got = call(reader.get, key)
        want = call(ref.get, key)
        STATS["reader"]["payloads" if isinstance(got, bytes) else
                        "deferred" if got is None else type(got).__name__] += 1
        assert same_outcome(got, want), (key, got, want, args)
    for handle in files:
        handle.close()


def ref_preads(files, which, starts, sizes, order, lo, hi, header, footer, verify, max_gap):
    """The reference of csrc/preads.c: (smallest failing k or -1, the payloads read)."""
    if not ((header, footer) == (12, 4) or ((header, footer) == (8, 0) and not verify)):
        raise ValueError("framing")
    if not 0 <= max_gap <= 65536 or not len(which) == len(starts) == len(sizes):
        raise ValueError("arguments")
    if not 0 <= lo <= hi <= len(order):
        raise ValueError("bounds")
    frame = header + footer
    for k in order[lo:hi]:
        if not 0 <= k < len(sizes) or not 0 <= which[k] < len(files) or starts[k] < 0 or (
                starts[k] + frame + sizes[k] >= 2**63):
            raise ValueError("item")
    bad, got = -1, {}
    for k in order[lo:hi]:
        data, s, size = files[which[k]], starts[k], sizes[k]
        ok = s + frame + size <= len(data) and struct.unpack_from("<Q", data, s)[0] == size
        payload = data[s + header : s + header + size]
        if ok and verify:
            ok = (struct.unpack_from("<I", data, s + 8)[0] == masked(data[s : s + 8]) and
                  struct.unpack_from("<I", data, s + header + size)[0] == masked(payload))
        if ok:
            got[k] = payload
        elif bad < 0 or k < bad:
            bad = k
    return bad, got


def fuzz_preads(rng: random.Random, tmpdir: str) -> None:
    """``preads``: records of one to three files read by spans near their true ones (sizes
    off by a few bytes, starts past the end, duplicates, neighbours with and without gaps),
    in file order or not, with hostile framing, gaps and bounds: the same first failing
    record as the reference, and the same payloads when none fails."""
    cases = [framed(rng) for _ in range(rng.randint(1, 3))]
    tf = cases[0][1]
    header, footer = framing(rng, tf)
    verify = tf and HW_PASS and rng.random() < 0.7
    handles, files = [], []
    for j, (buf, *_rest) in enumerate(cases):
        path = os.path.join(tmpdir, f"preads-{j}")
        with open(path, "wb") as f:
            f.write(buf)
        handles.append(open(path, "rb"))  # noqa: SIM115 (closed below)
        files.append(buf)
    n = rng.randint(0, 8)
    which, starts, sizes = [], [], []
    for _ in range(n):
        j = rng.randrange(len(cases))
        buf, _, records, true = cases[j]
        if true and rng.random() < 0.9:
            t = rng.randrange(len(true))
            s, size = true[t], len(records[t]) + rng.choice([0, 0, 0, 0, 1, -1, 5])
        else:
            s, size = rng.choice([0, len(buf), len(buf) + 3, 2**40, -1]), rng.randint(0, 9)
        which.append(j if rng.random() < 0.98 else rng.choice([-1, len(cases)]))
        starts.append(s)
        sizes.append(max(size, 0))
    order = sorted(range(n), key=lambda k: (which[k], starts[k]))
    if rng.random() < 0.2:
        rng.shuffle(order)  # not in file order: correct, only slower
    if rng.random() < 0.05 and n:
        order[rng.randrange(n)] = rng.choice([-1, n])
    lo = rng.choice([0, 0, 0, rng.randint(0, n + 1)])
    hi = rng.choice([n, n, n, rng.randint(0, n + 1)])
    max_gap = rng.choice([0, 16, 4096, 4096, 65536, 0, 16, 65536, 65537, -1])
    outs = native.blank(np.array(sizes, np.int64))
    args = (which, starts, sizes, order, lo, hi, header, footer, verify, max_gap)
    got = call(native.preads, [h.fileno() for h in handles], np.array(which, np.int64),
               np.array(starts, np.int64), outs, np.array(order, np.int64), lo, hi, header,
               footer, verify, max_gap)
    want = call(ref_preads, files, which, starts, sizes, order, lo, hi, header, footer, verify,
                max_gap)
    for h in handles:
        h.close()
    STATS["preads"]["read" if got == -1 else "refused" if isinstance(got, BaseException)
                    else "failed"] += 1
    if isinstance(want, BaseException) or isinstance(got, BaseException):
        assert same_outcome(got, want), (got, want, args)
        return
    assert got == want[0], (got, want, args)
    if got == -1:
        assert all(outs[k] == payload for k, payload in want[1].items()), args


ENCODE_JUNK = [None, 1.5, "ab", b"xy", [], (), {}, np.zeros(3), np.zeros((2, 2), np.float64),
               np.zeros((2, 3), np.int32), np.zeros((3, 2), np.uint8)[:, ::2]]


def _indexed_data(rng: random.Random, mode: int, rows: int) -> tuple:
    """A GATHER (8) column's (index, bounds, entries) or a BYTES_LISTS (9) column's (item
    index, bounds, values); maybe one index or bound hostile (backwards, outside, huge)."""
    items = [rng.randbytes(rng.choice([0, 1, 200]))
             for _ in range(rng.randint(1 if mode == 8 else 0, 4))]
    bounds = [0]
    for item in items:
        bounds.append(bounds[-1] + len(item))
    if mode == 8:
        index = [rng.randrange(len(items)) for _ in range(rows)]
    else:
        index = sorted(rng.randint(0, len(items)) for _ in range(rows + 1))
    for part in (index, bounds):
        if rng.random() < 0.1 and part:
            part[rng.randrange(len(part))] = rng.choice(EDGES)
    return np.array(index, np.int64), np.array(bounds, np.int64), b"".join(items)


def _encode_column(rng: random.Random, rows: int) -> tuple:
    """A (key, field, mode, data) column: good, or with one part hostile."""
    mode = rng.choice([0, 1, 2, 3, 4, 8, 9])
    key = rng.randbytes(rng.choice([0, 1, 5, 130]))
    field = rng.randint(1, 15)
    if mode == 0:
        data = np.frombuffer(rng.randbytes(rows * 3), np.uint8).reshape(rows, 3).copy()
    elif mode == 1:
        data = np.array([rng.choice([0, 1, 127, 128, -1, 2**63 - 1, -(2**63)])
                         for _ in range(rows * 2)], np.int64).reshape(rows, 2)
    elif mode == 4:  # spans of one buffer: bounds maybe hostile (backwards, outside, huge)
        values = [rng.randbytes(rng.choice([0, 1, 200])) for _ in range(rows)]
        bounds = [0]
        for v in values:
            bounds.append(bounds[-1] + len(v))
        if rng.random() < 0.1 and bounds:
            bounds[rng.randrange(len(bounds))] = rng.choice(EDGES)
        data = (np.array(bounds, np.int64), b"".join(values))
    elif mode in (8, 9):
        data = _indexed_data(rng, mode, rows)
    else:
        data = [rng.randbytes(rng.choice([0, 1, 200])) for _ in range(rows)]
    column = [key, field, mode, data]
    if rng.random() < 0.05:
        part = rng.randrange(4)
        column[part] = (rng.choice(ENCODE_JUNK) if part in (0, 3) else
                        rng.choice([-(2**70), -1, 0, 16, 99, 2**63, 2**70, "x"]))
    elif rng.random() < 0.03 and isinstance(data, list) and data:
        data[rng.randrange(len(data))] = rng.choice([None, "s", 3, bytearray(b"ab")])
    elif rng.random() < 0.02:
        column[3] = data[: max(0, rows - 1)]  # a column one row short
    return tuple(column) if rng.random() < 0.97 else column


def _indexed_rows(mode: int, data: object) -> int | None:
    """The rows of a valid GATHER (8) or BYTES_LISTS (9) column's data, else ``None``."""
    if not (isinstance(data, tuple) and len(data) == 3 and isinstance(data[2], bytes) and all(
            isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1
            for a in data[:2])):
        return None
    index, bounds = data[0].tolist(), data[1].tolist()
    if not bounds or any(x < 0 or x > len(data[2]) for x in bounds) or bounds != sorted(bounds):
        return None
    if mode == 8:
        return len(index) if all(0 <= x < len(bounds) - 1 for x in index) else None
    if not index or any(x < 0 or x > len(bounds) - 1 for x in index) or index != sorted(index):
        return None
    return len(index) - 1


def _encode_valid(columns, framing_, start, stop, limit, out, sizes, crcs) -> bool:
    """Whether the compiled ``encode`` must accept these arguments (the twin's domain)."""
    if not isinstance(columns, tuple) or not columns or framing_ not in ((12, 4), (8, 0), (0, 0)):
        return False
    rows = set()
    for column in columns:
        if not isinstance(column, tuple) or len(column) != 4:
            return False
        key, field, mode, data = column
        if not (isinstance(key, bytes) and type(field) is int and 1 <= field <= 15 and
                type(mode) is int and mode in (0, 1, 2, 3, 4, 8, 9)):
            return False
        if mode in (8, 9):
            count = _indexed_rows(mode, data)
            if count is None:
                return False
            rows.add(count)
            continue
        if mode == 4:
            if not (isinstance(data, tuple) and len(data) == 2 and isinstance(data[0], np.ndarray)
                    and data[0].dtype == np.int64 and data[0].ndim == 1 and len(data[0])
                    and isinstance(data[1], bytes)):
                return False
            b = data[0].tolist()
            if any(x < 0 or x > len(data[1]) for x in b) or b != sorted(b):
                return False
            rows.add(len(b) - 1)
            continue
        if mode in (2, 3):  # items that are not bytes: an error at the first row encoded
            if not isinstance(data, list):
                return False
        elif not (isinstance(data, np.ndarray) and data.ndim == 2 and
                  data.flags.c_contiguous and data.dtype == (np.uint8 if mode == 0 else
                                                              np.int64)):
            return False
        rows.add(len(data))
    return (len(rows) == 1 and 0 <= start <= stop <= rows.pop() and 0 <= limit < 2**63 and
            len(sizes) >= stop - start and (crcs is None or len(crcs) >= stop - start))


def fuzz_encode(rng: random.Random) -> None:
    """``encode``: the batch encoder, with columns of every mode (some hostile: wrong types,
    modes, fields, non-bytes items, short columns), rows and limits at the edges of int64,
    outputs too small; what it accepts must equal its pure-Python twin's output."""
    from ofindex.encode.framed import BatchPlan, PlannedColumn, encode_block_py

    rows = rng.randint(0, 5)
    columns: object = tuple(_encode_column(rng, rows)
                            for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 3, 1, 2, 3])))
    if rng.random() < 0.03:
        columns = list(columns)  # type: ignore[arg-type]
    framing_ = rng.choice([(12, 4), (8, 0), (0, 0)]) if rng.random() < 0.9 else (
        rng.choice(EDGES), rng.choice(EDGES))
    start = rng.randint(0, rows) if rng.random() < 0.9 else rng.choice(EDGES)
    stop = rng.randint(start, rows) if 0 <= start <= rows and rng.random() < 0.9 else \
        rng.choice(EDGES)
    limit = rng.choice([0, 10, 300, 5000, 2**40, 2**63 - 1]) if rng.random() < 0.95 else -1
    out = bytearray(rng.choice([0, 50, 400, 5000, 5000]))
    count = max(0, stop - start) if rng.random() < 0.9 else rng.randint(0, 3)
    sizes = np.zeros(min(count, 64), np.int64)
    crcs = None if rng.random() < 0.3 else np.zeros(min(count, 64), np.uint32)
    if rng.random() < 0.03:
        sizes = sizes.astype(np.int32)  # type: ignore[assignment]
    wrap = rng.random() < 0.5
    got = call(native.encode, columns, wrap, framing_[0], framing_[1], start, stop, limit,
               out, sizes, crcs, crc32c.crc32c)
    valid = (_encode_valid(columns, framing_, start, stop, limit, out, sizes, crcs)
             and sizes.dtype == np.int64)
    STATS["encode"]["refused" if isinstance(got, BaseException) else "ok"] += 1
    if not valid:
        assert isinstance(got, CLEAN), (got, columns, framing_, start, stop, limit)
        return
    first = PlannedColumn(*columns[0])
    plan = BatchPlan(tuple(PlannedColumn(*c) for c in columns), first.rows, wrap)
    out2 = bytearray(len(out))
    sizes2 = np.zeros(len(sizes), np.int64)
    crcs2 = None if crcs is None else np.zeros(len(crcs), np.uint32)
    want = call(encode_block_py, plan, start, stop, framing_, limit, out2, sizes2, crcs2)
    if isinstance(want, BaseException) or isinstance(got, BaseException):
        assert type(got) is type(want), (got, want, columns)
        return
    n, used = got
    assert got == want, (got, want)
    if n:
        assert out[:used] == out2[:used] and sizes[:n].tolist() == sizes2[:n].tolist()
        assert crcs is None or crcs2 is None or crcs[:n].tolist() == crcs2[:n].tolist()
        STATS["encode"]["records"] += 1


def _key_table(rng: random.Random) -> tuple[np.ndarray, int, list]:
    """A sorted table of keys of a random kind (ValueType codes: 1 int64, 2 float32,
    3 float64, 4 bytes without trailing zero bytes), its kind, and keys to search for."""
    kind = rng.choice([1, 2, 3, 4])
    count = rng.choice([0, 1, 2, 3, 16, 100])
    if kind == 4:
        alphabet = [b"", b"a", b"ab", b"b", b"\0a", b"a\0b", b"\xff", b"zz"]
        items = sorted(rng.choice(alphabet[1:]) for _ in range(count))
        table = np.array(items, dtype=f"S{max((len(i) for i in items), default=1) or 1}")
        queries = [rng.choice(alphabet) + rng.choice([b"", b"\0", b"\0\0"])
                   for _ in range(rng.randint(0, 6))]
        return table, kind, queries
    dtype = {1: np.int64, 2: np.float32, 3: np.float64}[kind]
    pool = ([-(2**63), -1, 0, 1, 2**63 - 1] if kind == 1
            else [-np.inf, -1.5, -0.0, 0.0, 2.5, np.inf])
    table = np.sort(np.array([rng.choice(pool) for _ in range(count)], dtype=dtype))
    queries = [dtype(rng.choice(pool)) for _ in range(rng.randint(0, 6))]
    if kind != 1 and rng.random() < 0.3:
        queries.append(dtype("nan"))
    return table, kind, queries


def _ref_places(table: np.ndarray, kind: int, query) -> tuple[int, int]:
    if kind == 4 and query.endswith(b"\0"):
        right = int(table.searchsorted(query, "right"))
        return right, right
    return int(table.searchsorted(query, "left")), int(table.searchsorted(query, "right"))


def fuzz_keysearch(rng: random.Random) -> None:
    """``key_span``, ``key_find``, ``key_places``, ``key_gather``, ``key_lookup``: a sorted
    table's places and records as numpy's searchsorted gives them (bytes with trailing zero
    bytes: the stripped form's right place), and clean errors for widths that do not divide
    the table, unknown kinds, members out of range, records and slots of the wrong sizes."""
    table, kind, queries = _key_table(rng)
    width = table.itemsize
    records = np.arange(len(table), dtype=np.int64) * 3
    bad = rng.random() < 0.2
    use_width = rng.choice([0, 1, width + 1, -1, 2**62]) if bad else width
    use_kind = rng.choice([0, 5, -1, 2**40]) if bad and rng.random() < 0.5 else kind
    for query in queries:
        want = _ref_places(table, kind, query)
        got = call(native.key_span, table, use_width, use_kind, query, False)
        if isinstance(got, BaseException) or bad:
            assert isinstance(got, (*CLEAN, tuple)), (got, want, query)  # another reading
            STATS["keysearch"]["refused" if isinstance(got, BaseException) else "ok"] += 1
            continue
        assert got == want, (got, want, query, table)
        equal = want if want[1] - want[0] and not (kind == 4 and query.endswith(b"\0")) \
            else (want[0], want[0])
        assert native.key_span(table, width, kind, query, True) == equal
        assert native.key_find(table, width, kind, query, records).tolist() == \
            records[equal[0]:equal[1]].tolist()
        STATS["keysearch"]["ok"] += 1
    if kind == 4:
        qtable = np.array(queries or [b""], dtype=f"S{max(map(len, queries), default=1) or 1}")
    else:
        qtable = np.array(queries or [0], dtype=table.dtype)
    members = np.array([rng.randrange(-2, len(qtable) + 2) if bad else rng.randrange(len(qtable))
                        for _ in range(rng.randint(0, 8))], dtype=np.int64)
    size = len(members) if not bad or rng.random() < 0.5 else rng.randint(0, 9)
    outs = [np.empty(size, np.int64) for _ in range(3)]
    got = call(native.key_places, table, use_width, use_kind, qtable, qtable.itemsize, members,
               outs[0], outs[1])
    if not isinstance(got, BaseException) and not bad:
        for j, k in enumerate(members.tolist()):
            q = queries[k] if queries else qtable[0]
            left, right = _ref_places(table, kind, q.rstrip(b"\0") if kind == 4 else q)
            assert (outs[0][j], outs[1][j]) == (left, right), (k, q, outs, table)
    cuts = np.array([0, len(members)] if rng.random() < 0.9 or not bad else [0, size + 1],
                    dtype=np.int64)
    got = call(native.key_gather, [table], np.array([use_width], np.int64), [records], use_kind,
               qtable, qtable.itemsize, members, cuts, *outs)
    assert got is None or isinstance(got, CLEAN), got
    step = rng.choice([1, 2, 3, 64])
    fenced = (table, use_width, records, np.ascontiguousarray(table[::step]), step)
    wrong_fences = (table, width, records, table[:1].copy(), rng.choice([0, -1, 2**62, 1]))
    slots = [rng.choice([None, (table, use_width, records), (table, width), 5, (1, 2, 3),
                         fenced, wrong_fences if bad else fenced])
             for _ in range(max(len(table) + (rng.randint(-1, 1) if bad else 0), 0))]
    plain = [(table, width, records)] * len(table)
    for query in queries[:2]:
        got = call(native.key_lookup, table, use_width, use_kind, query, slots)
        assert isinstance(got, (*CLEAN, int, np.ndarray)), got
        want = call(native.key_lookup, table, width, kind, query, plain)
        if isinstance(got, np.ndarray) and not bad:  # a fenced slot finds what a plain one does
            assert got.tolist() == want.tolist(), (got, want, query, table)
    _fuzz_key_finder(rng, table, use_width, use_kind, queries, slots, bad)


def _fuzz_key_finder(rng: random.Random, table: np.ndarray, width: int, kind: int,
                     queries: list, slots: list, bad: bool) -> None:
    """A KeyFinder over the slots key_lookup was given, with the keys as callers pass them
    (bytes, a str of them, an int, a float) and keys of other types: records key_lookup
    finds, its fallback's answer, or a clean error."""
    finder = call(native.KeyFinder, table, width, kind, slots, lambda key: "fallback")
    if isinstance(finder, BaseException):
        STATS["keysearch"]["refused"] += 1
        return
    for query in queries[:2]:
        given = [query, query.decode("latin-1")] if isinstance(query, bytes) else \
            [query.item(), float(query), np.int64(0), True, "x"]
        for key in given:
            got = call(finder, key)
            assert isinstance(got, (*CLEAN, np.ndarray)) or got == "fallback", got
            plain = call(native.key_lookup, table, width, kind, query, slots)
            if isinstance(got, np.ndarray) and isinstance(plain, np.ndarray) and not bad and \
                    key is given[0]:
                assert got.tolist() == plain.tolist(), (got, plain, key, table)
    STATS["keysearch"]["ok"] += 1


def fuzz_keyrecords(rng: random.Random) -> None:
    """``key_records``: a leaf page's record deltas summed into ``out[at:at + count]`` as
    Python's wrapping int64 sums give them, nothing else of ``out`` written, the bound
    checked; clean errors for counts, places and limits that are negative, wrap or do not
    fit the page or ``out``."""
    count = rng.randint(0, 40)
    pool = [0, 1, 255, 256, 1 << 40, (1 << 63) - 1, -1, -(1 << 63)]
    deltas = [rng.choice(pool) if rng.random() < 0.3 else rng.randrange(1000)
              for _ in range(count)]
    page = bytes(rng.randrange(256) for _ in range(rng.randint(0, 9))) + \
        np.array(deltas, dtype=np.int64).T.view(np.uint8).reshape(-1, 8).T.tobytes()
    at, after = rng.randint(0, 4), rng.randint(0, 3)
    limit = rng.choice([0, 1, 1000, 1 << 62])
    bad = rng.random() < 0.2
    use_count = rng.choice([-1, count + 1, 2**62, 2**63 - 1]) if bad else count
    use_at = rng.choice([-1, at + after + 1, 2**62]) if bad and rng.random() < 0.5 else at
    use_limit = rng.choice([-1, -(2**63)]) if bad and rng.random() < 0.3 else limit
    out = np.full(at + count + after, -7, dtype=np.int64)
    got = call(native.key_records, page, use_count, out, use_at, use_limit)
    if isinstance(got, BaseException):
        assert (out == -7).all(), out
        STATS["keyrecords"]["refused"] += 1
        return
    if (use_count, use_at, use_limit) != (count, at, limit):  # another reading that fits
        STATS["keyrecords"]["other"] += 1
        return
    total, want = 0, []
    for delta in deltas:
        total = (total + delta) % (1 << 64)
        want.append(total - (1 << 64) if total >= 1 << 63 else total)
    assert out[at:at + count].tolist() == want, (deltas, out)
    assert (out[:at] == -7).all() and (out[at + count:] == -7).all(), out
    assert got == all(0 <= r < limit for r in want), (got, want, limit)
    STATS["keyrecords"]["ok"] += 1


def fuzz_codehits(rng: random.Random) -> None:
    """``code_hits``: a page's records whose code's table entry and validity are set, as
    ``base + i``, exactly the reference's; clean errors for widths other than 1 and 2, codes
    past the table, sizes that disagree and bases whose records pass int64."""
    width = rng.choice([1, 2])
    entries = rng.randint(0, 300 if width == 2 else 256)
    count = rng.randint(0, 40)
    top = 255 if width == 1 else 65535
    codes = [min(rng.randrange(entries + (2 if rng.random() < 0.1 else 0)), top) if entries
             else 0 for _ in range(count)]
    table = bytes(rng.randrange(2) for _ in range(entries))
    valid = bytes(rng.randrange(2) for _ in range(count))
    base = rng.choice([0, 5, 1 << 40, (1 << 63) - 10, -1])
    bad = rng.random() < 0.2
    use_width = rng.choice([0, 3, -1, 2**62]) if bad else width
    use_valid = valid[:-1] if bad and count and rng.random() < 0.5 else valid
    out = np.full(count + rng.randint(-1 if bad and count else 0, 2), -7, dtype=np.int64)
    page = np.array(codes, dtype=np.uint8 if width == 1 else np.uint16).tobytes()
    got = call(native.code_hits, page, use_width, table, use_valid, base, out)
    want_ok = (not bad and all(c < entries for c in codes) and
               (not count or 0 <= base <= (1 << 63) - 1 - count) and len(out) >= count)
    if isinstance(got, BaseException):
        assert not want_ok, (got, codes, base)
        STATS["codehits"]["refused"] += 1
        return
    assert want_ok or (use_width, use_valid) != (width, valid), (got, codes, base)
    want = [base + i for i in range(count) if table[codes[i]] and valid[i]]
    if want_ok:
        assert got == len(want) and out[:got].tolist() == want, (got, want)
    STATS["codehits"]["ok"] += 1


TARGETS = {"cut": fuzz_cut, "gather": fuzz_gather_and_record, "types": fuzz_wrong_types,
           "layout": fuzz_layout, "walk": fuzz_walk, "blocks": fuzz_blocks,
           "slices": fuzz_slices_and_fill, "locate": fuzz_locate, "values": fuzz_values,
           "plan": fuzz_plan, "inflater": fuzz_inflater_marks,
           "crcs": fuzz_crcs, "reader": fuzz_reader, "preads": fuzz_preads,
           "encode": fuzz_encode, "keysearch": fuzz_keysearch,
           "keyrecords": fuzz_keyrecords, "codehits": fuzz_codehits}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=2000, help="inputs per target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first example number (to replay one)")
    p.add_argument("--only", choices=sorted(TARGETS), help="run only this target")
    args = p.parse_args(argv)
    assert native is not None, "ofindex._native is not built"
    global HW_PASS
    tried: dict[str, int] = {}
    hw_was = native.hw_crc()
    scratch = tempfile.TemporaryDirectory(prefix="fuzz-native-")
    tmpdir = scratch.name
    try:
        for hw in ([False, True] if native.hw_crc32c(b"") is not None else [False]):
            native.hw_crc(hw)
            HW_PASS = hw
            for name, target in TARGETS.items():
                if args.only and name != args.only:
                    continue
                examples = (min(args.examples, 50) if name == "blocks" else
                            min(args.examples, 300) if name == "inflater" else args.examples)
                for k in range(args.start, args.start + examples):
                    rng = random.Random(f"{args.seed}:{name}:{k}")  # each replays on its own
                    try:
                        if name in ("reader", "preads"):
                            target(rng, tmpdir)
                        else:
                            target(rng)
                    except BaseException:
                        print(f"FAILED: target {name}, seed {args.seed}, example {k}, CRC "
                              f"instruction {'on' if hw else 'off'}; replay with --seed "
                              f"{args.seed} --start {k} --examples 1 --only {name}",
                              file=sys.stderr, flush=True)
                        raise
                tried[name] = tried.get(name, 0) + examples
    finally:
        native.hw_crc(hw_was)
        scratch.cleanup()
    print(json.dumps({"module": native.__file__, "seed": args.seed, "inputs": tried,
                      "outcomes": {k: dict(v) for k, v in STATS.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
