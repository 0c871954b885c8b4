import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ofindex import FormatDetectionError, RecordFormat
from ofindex.formats.crc import mask_crc, masked_crc32c, masked_length_crcs
from ofindex.formats.detect import detect_format
from ofindex.formats.framing import encode_record
from tests.kit.helpers import ref_masked_crc, ref_ofrecord, ref_tfrecord


def test_crc32c_check_value_and_mask():
    # CRC32C("123456789") = 0xE3069283 is the algorithm's published check value.
    import crc32c

    assert crc32c.crc32c(b"123456789") == 0xE3069283
    expected = (((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    assert mask_crc(0xE3069283) == expected
    assert masked_crc32c(b"123456789") == expected


@given(st.lists(st.binary(min_size=8, max_size=8), min_size=1, max_size=50))
def test_table_length_crcs_equal_library(heads):
    arr = np.frombuffer(b"".join(heads), dtype=np.uint8).reshape(-1, 8)
    assert masked_length_crcs(arr).tolist() == [ref_masked_crc(h) for h in heads]


@given(st.binary(max_size=300))
def test_encode_record_matches_reference(data):
    assert encode_record(data, RecordFormat.TFRECORD) == ref_tfrecord([data])
    assert encode_record(data, RecordFormat.OFRECORD) == ref_ofrecord([data])


def test_detect_format():
    tf = ref_tfrecord([b"hello", b""])
    of = ref_ofrecord([b"hello", b""])
    assert detect_format(tf[:12], len(tf), path="x") is RecordFormat.TFRECORD
    assert detect_format(of[:12], len(of), path="x") is RecordFormat.OFRECORD
    assert detect_format(b"", 0, path="x") is None
    junk = b"\xff" * 64
    with pytest.raises(FormatDetectionError, match="pass format="):
        detect_format(junk[:12], len(junk), path="junk.bin")
    # a length that runs past the end of the file is not a plausible OFRecord
    with pytest.raises(FormatDetectionError):
        detect_format(struct.pack("<q", 1000) + b"abcd", 12, path="short")


def test_format_parse():
    assert RecordFormat.parse("TFRecord") is RecordFormat.TFRECORD
    assert RecordFormat.parse("of_record") is RecordFormat.OFRECORD
    with pytest.raises(ValueError, match="unknown record format"):
        RecordFormat.parse("parquet")


@given(st.lists(st.integers(0, 2**24 - 1), min_size=1, max_size=50))
def test_table_length_crcs_with_fewer_bytes(lengths):
    heads = [struct.pack("<Q", n) for n in lengths]
    arr = np.frombuffer(b"".join(heads), dtype=np.uint8).reshape(-1, 8)
    assert masked_length_crcs(arr, 3).tolist() == [ref_masked_crc(h) for h in heads]
