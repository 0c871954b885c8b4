"""Fuzzing framing: the builder and the readers over mutated data files, both formats.

Each example frames a few records (TFRecord or OFRecord, framing written here from the format
description, not by ofindex), mutates the file (bits flipped, a length set to a huge, negative
or off-by-some value — for TFRecord sometimes with its length CRC forged to match —,
truncation, bytes inserted or appended), indexes it (format given or detected, with or without
``verify``, ``allow_partial``, ``checksums``) and reads every record back.

The oracle is a reference parser written here: an index the builder accepts must be exactly
the records the reference finds (a partial one, exactly the valid prefix), an error must be an
OfindexError for a file the reference refuses too, reads must give the reference's payloads
(or CorruptRecordError for a TFRecord payload whose CRC is wrong), and nothing may allocate
more than the file's size warrants.

The target has a default-tier test (a fixed set of inputs, tests/kit/fuzzkit.py) and a fuzz-tier
twin (``test_explore_*``: fresh inputs, ``bash tools/run-fuzz.sh``).
"""

from __future__ import annotations

import os
import struct
import uuid

import crc32c
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import ofindex
from ofindex import CorruptRecordError
from ofindex.deflate.stream import INPUT_CHUNK, OUTPUT_STEP
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.fuzzkit import Tally, budget, explore, guarded
from tests.kit.helpers import ref_masked_crc, ref_ofrecord, ref_tfrecord, sidecar_of

pytestmark = pytest.mark.filterwarnings("ignore:.*PARTIAL index:UserWarning")
TALLY_BUILD = Tally("data file mutations, builder")
TALLY_READ = Tally("data file mutations, reads through the index built")
EDGES = [0, 1, 7, 8, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
#: Bytes that start like a GZIP or ZLIB stream are inflated (the compression is detected)
#: through buffers of a fixed size, whatever the file's: 1 MiB of input, up to 3 MiB of output.
INFLATING = INPUT_CHUNK + 3 * OUTPUT_STEP


def looks_compressed(data: bytes) -> bool:
    """A gzip member's magic (RFC 1952) or a zlib header (RFC 1950: deflate, a window of at
    most 32 KiB, its check bits)."""
    return data[:2] == b"\x1f\x8b" or (len(data) >= 2 and data[0] & 0x0F == 8 and
                                       data[0] >> 4 <= 7 and (data[0] << 8 | data[1]) % 31 == 0)


def reference(data: bytes, tf: bool, verify: bool) -> tuple[list[int], list[bytes], bool]:
    """(offsets, payloads, whole file valid) of the longest valid prefix of ``data``. With
    ``verify``, a TFRecord payload with a bad CRC ends the valid prefix too."""
    offsets, payloads, pos = [], [], 0
    head, foot = (12, 4) if tf else (8, 0)
    while pos < len(data):
        if len(data) - pos < head:
            return offsets, payloads, False
        (length,) = struct.unpack_from("<Q" if tf else "<q", data, pos)
        if tf and struct.unpack_from("<I", data, pos + 8)[0] != ref_masked_crc(data[pos:pos + 8]):
            return offsets, payloads, False
        if length < 0 or pos + head + length + foot > len(data):
            return offsets, payloads, False
        payload = data[pos + head : pos + head + length]
        if tf and verify and struct.unpack_from("<I", data, pos + head + length)[0] != \
                ref_masked_crc(payload):
            return offsets, payloads, False
        offsets.append(pos)
        payloads.append(payload)
        pos += head + length + foot
    return offsets, payloads, True


def data_crc_ok(data: bytes, offset: int, payload: bytes) -> bool:
    return struct.unpack_from("<I", data, offset + 12 + len(payload))[0] == ref_masked_crc(payload)


@st.composite
def mutated(draw):
    tf = draw(st.booleans())
    records = draw(st.lists(st.binary(max_size=40), max_size=8))
    data = bytearray(ref_tfrecord(records) if tf else ref_ofrecord(records))
    starts, pos = [], 0
    for r in records:
        starts.append(pos)
        pos += len(r) + (16 if tf else 8)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "length", "length", "truncate", "insert", "append"]))
        if kind == "flip" and data:
            at = draw(st.integers(0, len(data) * 8 - 1))
            data[at // 8] ^= 1 << (at % 8)
        elif kind == "length" and starts:
            at = draw(st.sampled_from(starts))
            if at + 8 > len(data):
                continue
            value = draw(st.one_of(st.sampled_from(EDGES), st.integers(0, 2**64 - 1),
                                   st.integers(0, 300)))
            if not tf and draw(st.booleans()):
                value = draw(st.integers(-(2**63), -1)) % 2**64  # a negative int64 length
            data[at : at + 8] = struct.pack("<Q", value)
            if tf and at + 12 <= len(data) and draw(st.booleans()):  # forge the length CRC
                data[at + 8 : at + 12] = struct.pack("<I", ref_masked_crc(bytes(data[at:at + 8])))
        elif kind == "truncate" and data:
            del data[draw(st.integers(0, len(data) - 1)) :]
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.binary(min_size=1, max_size=9))
        elif kind == "append":
            data += draw(st.binary(min_size=1, max_size=20))
    return tf, bytes(data)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzz-framing"))
    for tf, frame in ((True, ref_tfrecord), (False, ref_ofrecord)):  # warm-up, not measured
        p = os.path.join(root, f"warm-{tf}")
        with open(p, "wb") as f:
            f.write(frame([b"a", b"bc"]))
        ofindex.build_index(p, verify=True, checksums=True, manifest=False)
        with ofindex.open(p) as ds:
            list(ds), ds[0], ds.__getitems__([1, 0])
    return root


CASES = (mutated(), st.sampled_from(["given", "given", "auto"]), st.booleans(), st.booleans(),
         st.booleans(), st.booleans())


@budget(700)
# found by the fuzz tier: a zlib header (08 99) makes a 17-byte file an inflated one
@example((False, b"\x08\x99" + bytes(15)), "auto", False, False, False, False)
@given(*CASES)
def test_builder_and_reads_over_mutated_data_files(root, case, how, verify, partial, sums,
                                                   mmap):
    check_builder_and_reads(root, case, how, verify, partial, sums, mmap)


@explore(7000)
@given(*CASES)
def test_explore_builder_and_reads_over_mutated_data_files(root, case, how, verify, partial,
                                                           sums, mmap):
    check_builder_and_reads(root, case, how, verify, partial, sums, mmap)


def check_builder_and_reads(root: str, case: tuple[bool, bytes], how: str, verify: bool,
                            partial: bool, sums: bool, mmap: bool) -> None:
    tf, data = case
    TALLY_BUILD.input()
    path = os.path.join(root, uuid.uuid4().hex[:12])
    with open(path, "wb") as f:
        f.write(data)
    fmt = ("tfrecord" if tf else "ofrecord") if how == "given" else "auto"
    limit = 4 * len(data) + (INFLATING if looks_compressed(data) else 0)
    outcome, got = guarded(
        lambda: ofindex.build_index(path, format=fmt, verify=verify, allow_partial=partial,
                                    checksums=sums, manifest=False),
        limit, TALLY_BUILD, "build")
    if outcome != "ok":
        if how == "given":  # never a false alarm on a file the reference accepts
            assert not reference(data, tf, verify)[2], got
        return
    (result,) = got
    if result.format is None:  # an empty file under "auto": nothing to index
        assert not data
        return
    tf = result.format is ofindex.RecordFormat.TFRECORD
    offsets, payloads, whole = reference(data, tf, verify)
    assert result.partial == (not whole), (result, whole)
    if result.partial:  # exactly the valid prefix (the reference may stop at the same place)
        assert result.records == len(offsets)
    indexed = open_local_sidecar(sidecar_of(path))
    assert indexed.offsets.tolist() == offsets
    if sums:
        assert indexed.checksums.tolist() == [crc32c.crc32c(p) for p in payloads]
    read_back(path, data, tf, offsets, payloads, mmap, limit)


def read_back(path, data, tf, offsets, payloads, mmap, limit) -> None:
    TALLY_READ.input()
    with ofindex.open(path, mmap=mmap) as ds:
        n = len(ds)
        assert n == len(payloads)
        for name, fn, wanted in (
            ("ds[i]", lambda: [ds[i] for i in range(n)], range(n)),
            ("batch", lambda: ds.__getitems__(list(range(n))[::-1]), range(n - 1, -1, -1)),
            ("iteration", lambda: list(ds), range(n)),
        ):
            outcome, got = guarded(fn, limit, TALLY_READ, name)
            bad_crcs = [k for k in wanted
                        if tf and not data_crc_ok(data, offsets[k], payloads[k])]
            if outcome == "ok":
                assert not bad_crcs and [bytes(p) for p in got] == [payloads[k] for k in wanted]
            else:  # only a TFRecord payload whose CRC is wrong (verify was off when built)
                assert bad_crcs and isinstance(got, CorruptRecordError), got
                assert got.record in bad_crcs and "data CRC mismatch" in str(got)
