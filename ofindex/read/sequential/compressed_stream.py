"""Sequential reading of a gzip/zlib shard: one inflate pass from the seek point before the
first record asked for, records cut out of the stream block by block.

A pass over a whole shard starts at the file's start and goes on to the end of the file, so
zlib checks every gzip member's CRC32 and length (zlib: Adler-32) on the way, whatever
``verify`` says (it costs nothing: the bytes are inflated anyway). OFRecord payloads are also
checked against the sidecar's checksums when it has them (the default) and ``verify`` is on.
Remote files are read in large sequential requests with one in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import numpy as np

from ...deflate.inflate import InflateFailure, can_prime, check_inflatable, in_stream_error
from ...deflate.stream import InflatedStream, StartPoint
from ...errors import CorruptRecordError
from ...formats.sidecar import Sidecar
from ...storage import Storage
from ...storage.ranges import plan_blocks
from ...storage.readahead import STREAM_CHUNK, ReadAhead
from ..payloads import extract_payloads
from ..sum_checks import check_many, record_namer, sidecar_sums


def stream_compressed(
    storage: Storage, path: str, sidecar: Sidecar, lo: int, hi: int, verify: bool,
    block_bytes: int = 8 << 20, *, native: ModuleType | None,
) -> Iterator[bytes]:
    """Payloads of records ``lo..hi-1`` of one compressed shard, in order (cut out of the
    inflated stream by the compiled module ``native``, or by the pure-Python loops).

    Raises:
        CorruptRecordError, TruncatedRecordError: A bad record, bad compressed data, or (on a
            pass over the whole shard) a gzip/zlib check value that does not match.
    """
    blocks = plan_blocks(sidecar.offsets, lo, hi, block_bytes)
    if not blocks:
        return
    seeks = sidecar.seeks
    url = storage.url(path)
    k = seeks.point_before(int(sidecar.offsets[lo]))
    if not can_prime():  # Python's zlib starts on a byte, with no window
        k = seeks.aligned_before(k)
    size = sidecar.header.stamp.size
    start = StartPoint(int(seeks.kind[k]), int(seeks.in_[k]), int(seeks.bits[k]),
                       seeks.window(k), int(seeks.out[k]))
    source = storage if storage.is_local else ReadAhead(storage, path, size, STREAM_CHUNK)
    stream = InflatedStream(source, path, size, sidecar.compression, 0, start=start)
    # (a stream still being written ends early: its check values are not there yet)
    whole = (k == 0 and lo == 0 and hi == len(sidecar) and not sidecar.header.partial
             and not sidecar.header.open_tail)
    sums = sidecar_sums(sidecar, verify)
    buf = bytearray(0)
    try:
        for a, b in blocks:
            starts, ends = sidecar.spans(np.arange(a, b, dtype=np.int64))
            s0, n = int(starts[0]), int(ends[-1] - starts[0])
            check_inflatable(url, b - 1, int(ends[-1]) - start.out, size - start.in_)
            if len(buf) < n:
                buf = bytearray(max(n, block_bytes))
            view = memoryview(buf)[:n]
            try:
                got = stream.read_into(path, s0, view)
                if got < n:
                    stream.raise_failure()
                    raise InflateFailure(size, s0 + got, "the stream ends early", True)
            except InflateFailure as failure:
                past = ends > failure.produced  # the first record it cut short, or (a
                cut = int(np.argmax(past)) if past.any() else len(ends) - 1  # bad check value)
                raise failure.error(url, a + cut, sidecar.compression) from None
            try:
                payloads = extract_payloads(view, starts - s0, ends - s0, sidecar.format, verify,
                                            url, starts, np.arange(a, b), native)
            except CorruptRecordError as exc:
                raise in_stream_error(exc, sidecar.compression, start.in_) from None
            if sums is not None:
                check_many(payloads, sums[a:b], record_namer(url, starts, a))
            yield from payloads
        if whole:  # the gzip CRC32 / zlib Adler-32 of the whole stream, whatever ``verify``
            try:
                stream.finish()
            except InflateFailure as failure:
                raise failure.error(url, hi - 1, sidecar.compression) from None
    finally:
        if isinstance(source, ReadAhead):
            source.close()
