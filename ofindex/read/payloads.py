"""Cutting many framed records out of one buffer, with their checks done in bulk."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn

import crc32c as _crc32c
import numpy as np

from ..errors import IndexMismatchError
from ..formats.crc import LENGTH_CRCS, length_crc, mask_crc, masked_length_crcs, unmask_crcs
from ..formats.framing import Buffer, RecordFormat, data_crc_error, payload_matches, unframe
from ..storage import Storage

_A4 = np.arange(4)
_A8 = np.arange(8)
_A12 = np.arange(12)
#: Up to this many records, expected length CRCs come from a memo, not numpy table lookups.
_FEW = 512


def extract_payloads(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    starts: np.ndarray,
    ends: np.ndarray,
    fmt: RecordFormat,
    verify: bool,
    url: str | Callable[[int], str],
    file_offsets: np.ndarray,
    records: np.ndarray,
    native: ModuleType | None,
) -> list[bytes]:
    """Payloads of the framed records at ``buf[starts[k]:ends[k]]``.

    Every header must agree with the index (length, and for TFRecord with ``verify`` the
    length CRC); with ``verify`` each TFRecord payload's CRC is checked. Header and footer
    checks run in the compiled loop of ``native`` (the compiled module the caller's access
    reads with), or without it in bulk with numpy and one copy and one CRC call per record
    (the pure-Python fallback, and the compiled loop's test oracle). ``url`` (or
    ``url(k)``), ``file_offsets[k]`` and ``records[k]`` name record ``k`` in error messages.
    """
    if len(starts) == 0:
        return []
    tf_verify = fmt is RecordFormat.TFRECORD and verify
    if native is not None:
        got = native.cut(buf, starts, ends, fmt.header_size, fmt.footer_size, tf_verify,
                         _crc32c.crc32c, LENGTH_CRCS)
        if type(got) is list:
            return got
        _raise_bad(buf, got, starts, ends, fmt, verify, url, file_offsets, records, native)
    raw = np.frombuffer(buf, dtype=np.uint8)
    sizes = ends - starts - fmt.overhead
    if not tf_verify:
        bad = raw[starts[:, None] + _A8].view("<u8").ravel() != sizes.astype(np.uint64)
    else:
        heads = raw[starts[:, None] + _A12]  # length and its masked CRC
        lengths = heads[:, :8].copy()
        bad = lengths.view("<u8").ravel() != sizes.astype(np.uint64)
        if len(sizes) <= _FEW:  # memoised per length: cheaper than the table lookups
            known = LENGTH_CRCS.get
            expected = np.array([known(n) or length_crc(n) for n in sizes.tolist()], np.uint32)
        else:  # lengths below 2**24 (most datasets) need 3 table lookups, not 8
            expected = masked_length_crcs(lengths, 3 if int(sizes.max()) < (1 << 24) else 8)
        bad |= heads[:, 8:].copy().view("<u4").ravel() != expected
    if bad.any():
        _raise_bad(buf, int(np.argmax(bad)), starts, ends, fmt, verify, url, file_offsets,
                   records, None)
    p0 = (starts + fmt.header_size).tolist()
    p1 = (ends - fmt.footer_size).tolist()
    if isinstance(buf, (bytes, mmap.mmap)):  # slicing these gives bytes: one copy
        out = [buf[a:b] for a, b in zip(p0, p1, strict=True)]
    else:
        view = memoryview(buf)
        out = [bytes(view[a:b]) for a, b in zip(p0, p1, strict=True)]
    if tf_verify:
        stored = unmask_crcs(raw[(ends - 4)[:, None] + _A4].view("<u4").ravel()).tolist()
        crc = _crc32c.crc32c
        computed = [crc(p) for p in out]
        if computed != stored:
            k = next(k for k, (c, t) in enumerate(zip(computed, stored, strict=True)) if c != t)
            raise data_crc_error(mask_crc(stored[k]), mask_crc(computed[k]),
                                 path=url if isinstance(url, str) else url(k),
                                 offset=int(file_offsets[k]), record=int(records[k]))
    return out


def _raise_bad(buf: Buffer, k: int, starts: np.ndarray, ends: np.ndarray, fmt: RecordFormat,
               verify: bool, url: str | Callable[[int], str], file_offsets: np.ndarray,
               records: np.ndarray, native: ModuleType | None) -> NoReturn:
    """Raise the precise error for record ``k``, which failed a check (its bytes copied in a
    guarded call by the compiled module ``native``, when it read them: ``buf`` may be a
    memory map)."""
    s, e = int(starts[k]), int(ends[k])
    path = url if isinstance(url, str) else url(k)
    raw = native.copy_out(buf, s, e) if native is not None else bytes(buf[s:e])
    raise_record_error(raw, fmt, verify, path=path, offset=int(file_offsets[k]),
                       record=int(records[k]))


def raise_record_error(raw: Buffer, fmt: RecordFormat, verify: bool, *, path: str, offset: int,
                       record: int) -> NoReturn:
    """Raise the precise error for a record (its framed bytes ``raw``) that failed a check."""
    unframe(raw, fmt, verify=verify, path=path, offset=offset, record=record)
    raise IndexMismatchError(f"{path}: record {record} at byte offset {offset} does not match "
                             f"its index; rebuild the index with `ofindex build {path}`",
                             path=path, offset=offset, record=record)


#: Records at least this large (on average) are read one by one, each payload straight into
#: its own bytes object: cheaper than copying it out of a staging buffer.
DIRECT_RECORD_BYTES = 64 << 10


def read_record_direct(storage: Storage, path: str, start: int, end: int, fmt: RecordFormat,
                       verify: bool, record: int) -> bytes:
    """The payload of the framed record at ``[start, end)`` of ``path``, read without staging
    (header, payload and footer as three reads), checked like :func:`unframe`."""
    hs, fs = fmt.header_size, fmt.footer_size
    payload = storage.read(path, start + hs, end - fs)
    head = storage.read(path, start, start + hs)
    foot = storage.read(path, end - fs, end) if fs else b""
    if not payload_matches(head, payload, foot, fmt, verify):
        raise_record_error(head + payload + foot, fmt, verify, path=storage.url(path),
                           offset=start, record=record)
    return payload
