"""The scanner across block boundaries, headers-only reads and streamed verification."""

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex import CorruptRecordError, TruncatedRecordError
from ofindex.formats.framing import RecordFormat
from ofindex.index.scan import scan_file
from ofindex.storage import LocalStorage
from tests.kit.helpers import ref_offsets, ref_ofrecord, ref_tfrecord, write_raw


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), max_size=25),
    block=st.sampled_from([12, 16, 40, 100, 1024, 1 << 20]),
    fmt=st.sampled_from([RecordFormat.TFRECORD, RecordFormat.OFRECORD]),
    verify=st.booleans(),
)
def test_scan_any_block_size(sizes, block, fmt, verify):
    records = [bytes([i % 251]) * s for i, s in enumerate(sizes)]
    data = (ref_tfrecord if fmt is RecordFormat.TFRECORD else ref_ofrecord)(records)
    with tempfile.TemporaryDirectory() as d:
        p = write_raw(os.path.join(d, "f"), data)
        res = scan_file(LocalStorage(), p, fmt, len(data), verify=verify, block_size=block)
    assert res.offsets.tolist() == ref_offsets(records, fmt.overhead)
    assert res.indexed_end == len(data) and not res.partial


def test_headers_only_reads_skip_large_payloads(tmp_path):
    records = [np.random.default_rng(k).bytes(200_000) for k in range(20)]
    data = ref_tfrecord(records)
    p = write_raw(str(tmp_path / "big"), data)

    class Counting(LocalStorage):
        read_bytes = 0

        def read_into(self, path, start, buffer):
            n = super().read_into(path, start, buffer)
            Counting.read_bytes += n
            return n

    res = scan_file(Counting(), p, RecordFormat.TFRECORD, len(data))
    assert res.offsets.tolist() == ref_offsets(records, 16)
    assert Counting.read_bytes < len(data) // 10  # most payload bytes were never read
    # verification checks every payload, in a second pass over the records found
    res = scan_file(Counting(), p, RecordFormat.TFRECORD, len(data), verify=True,
                    block_size=65536)
    assert res.offsets.tolist() == ref_offsets(records, 16)
    damaged = bytearray(data)
    at = ref_offsets(records, 16)[13] + 12 + 150_000
    damaged[at] ^= 0x40
    write_raw(p, bytes(damaged))
    for threads in (1, 2):
        with pytest.raises(CorruptRecordError) as err:
            scan_file(LocalStorage(), p, RecordFormat.TFRECORD, len(data), verify=True,
                      threads=threads)
        assert err.value.record == 13 and err.value.offset == ref_offsets(records, 16)[13]
    with pytest.warns(UserWarning, match="indexing only the first 13 records"):
        res = scan_file(LocalStorage(), p, RecordFormat.TFRECORD, len(data), verify=True,
                        allow_partial=True)
    assert res.partial and len(res.offsets) == 13


def test_verification_of_remote_style_storage_in_one_pass(tmp_path):
    """Storage without cheap seeks checks CRCs in the same pass that reads the data."""
    records = [np.random.default_rng(n).bytes(n) for n in (10, 70_000, 3, 300_000, 0, 5000)]
    data = bytearray(ref_tfrecord(records))
    p = write_raw(str(tmp_path / "r"), bytes(data))

    class Remote(LocalStorage):
        is_local = False

    res = scan_file(Remote(), p, RecordFormat.TFRECORD, len(data), verify=True, block_size=4096)
    assert res.offsets.tolist() == ref_offsets(records, 16)
    data[ref_offsets(records, 16)[3] + 12 + 200_000] ^= 1
    write_raw(p, bytes(data))
    with pytest.raises(CorruptRecordError) as err:
        scan_file(Remote(), p, RecordFormat.TFRECORD, len(data), verify=True, block_size=4096)
    assert err.value.record == 3


def test_verification_of_a_file_that_shrank_is_an_error(tmp_path):
    from ofindex.index.verify import verify_crcs

    records = [np.random.default_rng(k).bytes(50_000) for k in range(4)]
    p = write_raw(str(tmp_path / "s"), ref_tfrecord(records))
    offsets = np.array(ref_offsets(records, 16), dtype=np.uint64)
    end = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(end - 10)
    with pytest.raises(TruncatedRecordError, match="shrank"):
        verify_crcs(LocalStorage(), p, offsets, end)
