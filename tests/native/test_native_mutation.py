"""Compiled calls given lists that Python code changes while the call runs.

Python code can run inside a call of ``ofindex._native``: an item's ``__index__``, a buffer's
export (a class's ``__buffer__`` from Python 3.12; here ``tests/kit/hooked_buffer.c``, built by
the ``hooked`` fixture, does the same on any version), and up to Python 3.11 a gc callback
or finalizer run by a collection that an allocation starts (from 3.12 a collection waits for
the next bytecode: those two cases cannot crash there, and pass either way). Each call below
used to read a list's length before that code ran and its items after, and crashed or read
freed memory when the code emptied or refilled the list; the calls now read a snapshot of
each list taken before any such code runs (ofindex/csrc/snapshot.c). Each case runs in a
child interpreter, so that a crash fails its test instead of the run; it must end with the
right result or a clean ``ValueError`` naming the list, never a signal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest

from tests.kit import cbuild, paths

#: Every child starts with this: the sanitizer job's build when it runs these tests
#: (tests/kit/native_build.py), the hook-running exporter, and small helpers.
PRELUDE = """
import gc, os, struct, sys
from tests.kit import native_build
import crc32c
import numpy as np
from hooked_buffer import Hooked
from ofindex import _native as native
from ofindex.proto import example_pb2


def outcome(call, *args):
    try:
        return call(*args)
    except (ValueError, TypeError) as exc:
        return exc


def framed(payloads):
    # OFRecord framing (an 8-byte length, no footer): the file and each record's start
    starts, at, data = [], 0, b""
    for payload in payloads:
        starts.append(at)
        data += struct.pack("<q", len(payload)) + payload
        at += 8 + len(payload)
    return data, np.array(starts, np.int64)


def example(name, value):
    ex = example_pb2.Example()
    ex.features.feature[name].int64_list.value.append(value)
    return ex.SerializeToString()
"""


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The directory holding the compiled ``hooked_buffer`` module."""
    where = tmp_path_factory.mktemp("hooked")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    cbuild.build(cbuild.compiler(), [os.path.join(paths.KIT, "hooked_buffer.c")],
                 str(where / f"hooked_buffer{suffix}"), ["-O1", *cbuild.STRICT, "-fPIC", "-shared"])
    return str(where)


def _run(code: str, hooked: str) -> None:
    """Run ``PRELUDE + code`` in a child; it must exit 0 having printed ``ok``."""
    env = {**os.environ, "PYTHONPATH": paths.pythonpath(hooked)}
    done = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (
        f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")


def test_preads_outs_emptied_by_an_fds_index(hooked, tmp_path):
    # outs emptied: its bytes objects were freed, then written through
    path = tmp_path / "shard"
    _run(f"""
payloads = [bytes([k % 251]) * 10 for k in range(1000)]
data, starts = framed(payloads)
with open({str(path)!r}, "wb") as file:
    file.write(data)
fd = os.open({str(path)!r}, os.O_RDONLY)
outs = native.blank(np.full(1000, 10, np.int64))
class Emptying:
    def __index__(self):
        outs.clear()
        return fd
which, order = np.zeros(1000, np.int64), np.arange(1000, dtype=np.int64)
got = outcome(native.preads, [Emptying()], which, starts, outs, order, 0, 1000, 8, 0, False, 0)
assert isinstance(got, ValueError) and "preads: outs changed" in str(got), got
print("ok")
""", hooked)


def test_preads_fds_emptied_by_its_own_index(hooked, tmp_path):
    # fds emptied while its descriptors were read: the next one was read past its end
    path = tmp_path / "shard"
    _run(f"""
payloads = [bytes([k % 251]) * (k % 7) for k in range(300)]
data, starts = framed(payloads)
with open({str(path)!r}, "wb") as file:
    file.write(data)
fd = os.open({str(path)!r}, os.O_RDONLY)
class Emptying:
    def __index__(self):
        fds.clear()
        return fd
fds = [Emptying()] + [fd] * 3
outs = native.blank(np.array([len(p) for p in payloads], np.int64))
which = np.arange(300, dtype=np.int64) % 4
order = np.arange(300, dtype=np.int64)
got = native.preads(fds, which, starts, outs, order, 0, 300, 8, 0, False, 0)
assert got == -1 and outs == payloads, got
print("ok")
""", hooked)


_FILL_SETUP = """
payloads = [bytes([k % 251]) * (1 + k % 9) for k in range(400)]
data, starts = framed(payloads)
outs = native.blank(np.array([len(p) for p in payloads], np.int64))
which = np.zeros(400, np.int64)
"""


def test_fill_outs_emptied_by_a_buffer_export(hooked):
    _run(_FILL_SETUP + """
bufs = [Hooked(data, outs.clear)]
got = outcome(native.fill, bufs, which, starts, outs, 0, 400, 8, 0, False)
assert isinstance(got, ValueError) and "fill: outs changed" in str(got), got
print("ok")
""", hooked)


def test_fill_bufs_emptied_by_a_buffer_export(hooked):
    _run(_FILL_SETUP + """
bufs = [Hooked(data, lambda: bufs.clear()), data, data]
which = np.arange(400, dtype=np.int64) % 3
got = native.fill(bufs, which, starts, outs, 100, 400, 8, 0, False)
assert got == -1 and outs[100:] == payloads[100:], got
print("ok")
""", hooked)


def test_same_bytes_records_shortened_by_the_ranges_export(hooked):
    # a record shortened after the ranges were checked against it: read past its end
    _run("""
size = 1 << 20
records = [bytes(size)] * 3
def shorten():
    records[1] = b"x"
got = outcome(native.same_bytes, records, Hooked(np.array([0, size], np.int64), shorten))
assert isinstance(got, ValueError) and "outside the records" in str(got), got
print("ok")
""", hooked)


def test_gather_bytes_records_replaced_by_the_out_export(hooked):
    # records replaced by None after they were checked to be bytes: None's memory was copied
    _run("""
size = 1 << 20
records = [bytes([k]) * size for k in range(1, 4)]
def replace():
    records[1:] = [None, None]
out = bytearray(3 * (size - 16))
got = outcome(native.gather_bytes, records, np.array([16, size], np.int64), Hooked(out, replace))
assert isinstance(got, TypeError) and "records must be bytes" in str(got), got
print("ok")
""", hooked)


_SPANS_SETUP = """
first, second = example("a", 7), example("a", -3)
bufs = [Hooked(first, lambda: bufs.clear()), second]
spans = (np.array([0, 1], np.int64), np.zeros(2, np.int64),
         np.array([len(first), len(second)], np.int64))
"""


def test_locate_buffers_emptied_by_a_buffer_export(hooked):
    _run(_SPANS_SETUP + """
rows = np.zeros(2 * 1 * 7, np.int64)
assert native.locate(bufs, (b"a",), b".b4v", True, rows, spans) == 2
table = rows.reshape(2, 7)
assert table[:, 0].tolist() == [3, 3] and table[:, 1].tolist() == [1, 1]  # int64, one value
assert table[:, 4].tolist() == [7, -3]
print("ok")
""", hooked)


def test_gather_spans_buffers_emptied_by_a_buffer_export(hooked):
    _run(_SPANS_SETUP + """
out = bytearray(len(first) + len(second) - 6)
native.gather_spans(bufs, np.array([1, 3], np.int64),
                    np.array([len(first), len(second) - 2], np.int64), out, spans)
assert out == first[1:] + second[3:-2]
print("ok")
""", hooked)


def test_span_sums_buffers_emptied_by_a_buffer_export(hooked):
    _run(_SPANS_SETUP + """
import crc32c
out = np.zeros(3, np.uint32)
assert native.span_sums(bufs, np.array([2, 1], np.int64), np.array([1, 0, 3], np.int64),
                        np.array([len(first), 4, len(second) - 2], np.int64), out, spans)
assert out.tolist() == [crc32c.crc32c(first[1:]), crc32c.crc32c(first[:4]),
                        crc32c.crc32c(second[3:-2])]
print("ok")
""", hooked)


def test_encode_lists_changed_by_a_collection_after_the_rows_are_sized(hooked):
    # the rows were sized, then held through new lists whose allocation started a
    # collection: its callback emptied a column, whose rows were read past its end
    _run("""
n = 50
keys = [b"x%d" % k for k in range(n)]
values = [b"v" * (k % 5) for k in range(n)]
want = [(a, b) for a, b in zip(keys, values)]
columns = ((b"key", 1, 2, keys), (b"value", 1, 2, values))
out = bytearray(1 << 16)
sizes = np.full(n, -1, np.int64)

def change(phase, info):
    if phase == "start" and sizes[0] != -1 and values:  # once the rows are sized
        values.clear()
        keys[:] = [None] * n

gc.callbacks.append(change)
free_lists_drained = [[] for _ in range(200)]  # each new list is a collected allocation
gc.set_threshold(1)
got = outcome(native.encode, columns, True, 0, 0, 0, n, len(out), out, sizes, None,
              crc32c.crc32c)
gc.set_threshold(700)
gc.callbacks.remove(change)
assert isinstance(got, tuple) and got[0] == n, got
at = 0
for (key, value), size in zip(want, sizes.tolist()):
    feature = example_pb2.Example.FromString(bytes(out[at:at + size])).features.feature
    assert feature["key"].bytes_list.value == [key] and feature["value"].bytes_list.value == [
        value], (key, value)
    at += size
assert at == got[1]
print("ok")
""", hooked)


@pytest.mark.parametrize("call", ["gather", "spans"])
def test_gather_and_spans_lists_emptied_by_a_collection_while_they_are_held(hooked, call):
    # the lists were copied (PyList_AsTuple) from an array that a collection, started by
    # the copy's own allocation, had freed and its memory reused
    _run(f"""
from tests.kit.helpers import ref_offsets, ref_tfrecord
from ofindex.formats.crc import LENGTH_CRCS

records = [b"a" * 5, b"", b"bc" * 7]
buf, offsets = ref_tfrecord(records), np.array(ref_offsets(records, 16), dtype="<u8")
m = 100
bufs, offs, ends = [buf] * m, [offsets] * m, [len(buf)] * m  # item arrays of 800 bytes
armed, junk = [], []

def empty(phase, info):
    if phase == "start" and armed:
        armed.clear()
        for items in (bufs, offs, ends):
            items.clear()
        junk.extend(b"\\xff" * (800 - 33) for _ in range(8))  # their memory, reused

class Counted:
    pass

gc.callbacks.append(empty)
gc.set_threshold(1000)
counted = []
while gc.get_count()[0] < 1000:  # the next collected allocation starts a collection
    counted.append(Counted())
armed.append(True)
which, local = np.array([1, 0], np.int64), np.array([2, 0], np.int64)
if {call!r} == "gather":
    got = outcome(native.gather, bufs, offs, ends, which, local, 12, 4, True, crc32c.crc32c,
                  LENGTH_CRCS)
else:
    got = outcome(native.spans, bufs, offs, ends, which, local, 16, np.empty(2, np.int64),
                  np.empty(2, np.int64))
gc.set_threshold(700)
gc.callbacks.remove(empty)
assert not armed, "no collection ran"
# a collection starts inside an allocation up to Python 3.11 (the error), at the next
# bytecode from 3.12 (after the call: its result)
right = [records[2], records[0]] if {call!r} == "gather" else None
assert got == right or isinstance(got, ValueError) and {call!r} + ": bufs changed" in str(
    got), got
print("ok")
""", hooked)


_KEYS_SETUP = """
table = np.array([b"ab", b"cd"], dtype="S2")
leaf = np.array([b"ab", b"ac", b"ad"], dtype="S2")
records = np.array([4, 5, 6], np.int64)
fences = leaf[::2].copy()
"""


def test_key_finder_slots_emptied_by_a_buffer_export(hooked):
    _run(_KEYS_SETUP + """
slots = [None, None]
finder = native.KeyFinder(Hooked(table, slots.clear), 2, 4, slots, lambda key: "fallback")
got = outcome(finder, b"ac")
assert isinstance(got, ValueError) and "slots" in str(got), got
slots = [(Hooked(leaf, lambda: slots.clear()), 2, records, fences, 2), None]
finder = native.KeyFinder(table, 2, 4, slots, lambda key: "fallback")
assert finder(b"ac").tolist() == [5]  # the slot is held while its leaf is searched
print("ok")
""", hooked)

