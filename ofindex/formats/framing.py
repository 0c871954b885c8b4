"""Record framing of TFRecord and OFRecord files: framing payloads, checking headers and CRCs.

TFRecord: ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``.
OFRecord: ``int64 length | data``. Both little-endian.
"""


import enum
import mmap
import struct
from typing import NoReturn

import crc32c as _crc32c

from ..errors import CorruptRecordError, IndexMismatchError, TruncatedRecordError, hint
from .crc import MASK_DELTA, U32, length_crc, mask_crc, masked_crc32c

_LEN = struct.Struct("<Q")
_LEN_CRC = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_SIGNED_LEN = struct.Struct("<q")

_PARTIAL_HINT = hint("build_index(..., allow_partial=True)", "`ofindex build --allow-partial`")
_OFRECORD_HINT = hint("format='ofrecord'", "--format ofrecord")

#: Largest record payload we accept (1 TiB); anything larger is a corrupt length.
MAX_RECORD_BYTES = 1 << 40


class RecordFormat(enum.IntEnum):
    """Record framings ofindex understands; the value is stored in sidecars.

    Each member has ``header_size``, ``footer_size`` and ``overhead`` (framing bytes around a
    payload) as plain attributes (set below: cheaper than properties on hot paths).
    """

    TFRECORD = 1
    OFRECORD = 2

    header_size: int
    footer_size: int
    overhead: int

    @classmethod
    def parse(cls, value: "str | RecordFormat") -> "RecordFormat":
        """Read a format name (``"tfrecord"``, ``"ofrecord"``, any case) or a member.

        Raises:
            ValueError: Another name (``"auto"`` is resolved by the callers, not here).
        """
        if isinstance(value, RecordFormat):
            return value
        name = str(value).lower().replace("_", "").replace("-", "")
        if name == "tfrecord":
            return cls.TFRECORD
        if name == "ofrecord":
            return cls.OFRECORD
        raise ValueError(f"unknown record format {value!r}: use 'tfrecord', 'ofrecord' or 'auto'")


for _fmt, _head, _foot in ((RecordFormat.TFRECORD, 12, 4), (RecordFormat.OFRECORD, 8, 0)):
    _fmt.header_size, _fmt.footer_size, _fmt.overhead = _head, _foot, _head + _foot

#: Bytes a record can be cut from: what storage reads return, memory maps, views of them.
Buffer = bytes | bytearray | memoryview | mmap.mmap
#: A payload cut out of a :data:`Buffer`.
Payload = bytes | bytearray | memoryview

_TF, _OF = RecordFormat.TFRECORD, RecordFormat.OFRECORD
_crc = _crc32c.crc32c
_LEN_CRC_UNPACK = _LEN_CRC.unpack_from
_CRC_UNPACK = _CRC.unpack_from


def encode_record(data: bytes | bytearray | memoryview, fmt: RecordFormat) -> bytes:
    """Frame one payload."""
    n = len(data)
    if fmt is RecordFormat.TFRECORD:
        head = _LEN.pack(n)
        return b"".join(
            (head, _CRC.pack(masked_crc32c(head)), bytes(data), _CRC.pack(masked_crc32c(data)))
        )
    return _SIGNED_LEN.pack(n) + bytes(data)


def frame_parts(data: bytes | bytearray | memoryview, fmt: RecordFormat) -> tuple[bytes, bytes]:
    """Header and footer bytes that surround ``data`` (for writers that avoid copying)."""
    n = len(data)
    if fmt is RecordFormat.TFRECORD:
        head = _LEN.pack(n)
        return head + _CRC.pack(masked_crc32c(head)), _CRC.pack(masked_crc32c(data))
    return _SIGNED_LEN.pack(n), b""


def parse_header(
    header: bytes | memoryview,
    fmt: RecordFormat,
    *,
    path: str,
    offset: int,
    record: int,
    file_size: int | None = None,
) -> int:
    """Validate one record header and return the payload length.

    Raises :class:`CorruptRecordError` for a bad length CRC or an impossible length and
    :class:`TruncatedRecordError` when the record would run past ``file_size``.
    """
    if len(header) < fmt.header_size:
        raise TruncatedRecordError(
            f"{path}: file ends inside the header of record {record} at byte offset {offset} "
            f"({len(header)} of {fmt.header_size} header bytes present); the file is truncated "
            f"(re-copy it, or index the valid prefix with {_PARTIAL_HINT})",
            path=path, offset=offset, record=record,
        )
    if fmt is RecordFormat.TFRECORD:
        length, stored = _LEN_CRC.unpack_from(header)
        computed = masked_crc32c(header[:8])
        if stored != computed:
            raise CorruptRecordError(
                f"{path}: record {record} at byte offset {offset}: length CRC mismatch "
                f"(stored 0x{stored:08x}, computed 0x{computed:08x}); the file is corrupt or "
                f"not a TFRecord file (pass {_OFRECORD_HINT} if it is OFRecord)",
                path=path, offset=offset, record=record, stored_crc=stored, computed_crc=computed,
            )
    else:
        (length,) = _SIGNED_LEN.unpack_from(header)
    check_record_length(length, fmt, path=path, offset=offset, record=record, file_size=file_size)
    return int(length)


def check_record_length(
    length: int, fmt: RecordFormat, *, path: str, offset: int, record: int, file_size: int | None
) -> None:
    """Refuse a negative, absurd or past-the-end payload length (never allocate from it)."""
    if length < 0 or length > MAX_RECORD_BYTES:
        raise CorruptRecordError(
            f"{path}: record {record} at byte offset {offset} has an impossible length {length}; "
            "the file is corrupt or not in the expected format",
            path=path, offset=offset, record=record,
        )
    if file_size is not None and offset + fmt.overhead + length > file_size:
        raise TruncatedRecordError(
            f"{path}: record {record} at byte offset {offset} claims {length} payload bytes but "
            f"the file ends at byte {file_size}; the file is truncated (re-copy it, or index the "
            f"valid prefix with {_PARTIAL_HINT})",
            path=path, offset=offset, record=record,
        )


def data_crc_error(
    stored: int, computed: int, *, path: str, offset: int, record: int
) -> CorruptRecordError:
    """The error for a payload whose masked CRC32C does not match the stored one."""
    return CorruptRecordError(
        f"{path}: record {record} at byte offset {offset}: data CRC mismatch "
        f"(stored 0x{stored:08x}, computed 0x{computed:08x}); the record is corrupt — "
        f"re-copy the file, or read with {hint('verify=False', '--no-verify')} to skip the check",
        path=path, offset=offset, record=record, stored_crc=stored, computed_crc=computed,
    )


def check_data_crc(
    payload: bytes | memoryview, stored: int, *, path: str, offset: int, record: int
) -> None:
    """Raise :class:`CorruptRecordError` when the payload's masked CRC32C is not ``stored``."""
    computed = masked_crc32c(payload)
    if computed != stored:
        raise data_crc_error(stored, computed, path=path, offset=offset, record=record)


def unframe(
    raw: Buffer,
    fmt: RecordFormat,
    *,
    verify: bool,
    path: str,
    offset: int,
    record: int,
) -> Payload:
    """Strip the framing of one whole record read from storage (header + payload + footer).

    The sidecar guarantees the length; the header is re-checked against it so a data file that
    changed under an unchanged size is not silently misread.
    """
    if fmt is _TF:
        return unframe_tfrecord(raw, verify, path, offset, record)
    return unframe_ofrecord(raw, verify, path, offset, record)


def unframe_tfrecord(raw: Buffer, verify: bool, path: str, offset: int,
                     record: int) -> Payload:
    """:func:`unframe` for TFRecord (positional arguments: this is the hot path)."""
    length = len(raw) - 16
    if length < 0:  # a span shorter than the framing: the index is corrupt
        _header_mismatch(raw, _TF, length, path=path, offset=offset, record=record)
    stored_len, len_crc = _LEN_CRC_UNPACK(raw)
    if stored_len != length:
        _header_mismatch(raw, _TF, length, path=path, offset=offset, record=record)
    payload = raw[12 : 12 + length]
    if verify:
        if len_crc != length_crc(length):
            _header_mismatch(raw, _TF, length, path=path, offset=offset, record=record)
        crc = _crc(payload)
        stored = _CRC_UNPACK(raw, 12 + length)[0]
        if stored != ((((crc >> 15) | (crc << 17)) & U32) + MASK_DELTA) & U32:
            raise data_crc_error(stored, mask_crc(crc), path=path, offset=offset, record=record)
    return payload


def payload_matches(head: bytes, payload: bytes, foot: bytes, fmt: RecordFormat,
                    verify: bool) -> bool:
    """Whether a record read as header, payload and footer is consistent (length, and with
    ``verify`` the TFRecord CRCs). On ``False`` call :func:`unframe` for the precise error."""
    if fmt is _OF:
        return bool(_SIGNED_LEN.unpack_from(head)[0] == len(payload))
    length, len_crc = _LEN_CRC_UNPACK(head)
    if length != len(payload):
        return False
    if not verify:
        return True
    return bool(len_crc == length_crc(length)
                and _CRC_UNPACK(foot)[0] == masked_crc32c(payload))


def unframe_ofrecord(raw: Buffer, verify: bool, path: str, offset: int,
                     record: int) -> Payload:
    """:func:`unframe` for OFRecord (there is no CRC to verify)."""
    length = len(raw) - 8
    if length < 0 or _SIGNED_LEN.unpack_from(raw)[0] != length:
        _header_mismatch(raw, _OF, length, path=path, offset=offset, record=record)
    return raw[8:]


def _header_mismatch(raw: Buffer, fmt: RecordFormat, expected: int, *, path: str, offset: int,
                     record: int) -> NoReturn:
    """Raise the error for a record whose framing disagrees with its index: a
    :class:`CorruptRecordError` when a TFRecord length CRC shows the data is damaged, else an
    :class:`IndexMismatchError` (the record is whole but not the one the index describes)."""
    what = f"{path}: record {record} at byte offset {offset}"
    if expected < 0 or len(raw) < fmt.header_size:
        raise IndexMismatchError(
            f"{what}: the index gives it {len(raw)} bytes, too few for a "
            f"{fmt.name.lower()} record; the sidecar is corrupt or of another file — rebuild "
            f"it with `ofindex build {path}`", path=path, offset=offset, record=record)
    if fmt is RecordFormat.TFRECORD:
        stored_len, stored_crc = _LEN_CRC.unpack_from(raw)
        computed = masked_crc32c(bytes(raw[:8]))
        if stored_crc != computed:
            raise CorruptRecordError(
                f"{what}: length CRC mismatch (stored 0x{stored_crc:08x}, computed "
                f"0x{computed:08x}); the data file is corrupt or changed after indexing — "
                f"re-copy it, or rebuild the index with `ofindex build {path}`",
                path=path, offset=offset, record=record, stored_crc=stored_crc,
                computed_crc=computed)
    else:
        (stored_len,) = _SIGNED_LEN.unpack_from(raw)
    raise IndexMismatchError(
        f"{what}: its header says {stored_len} payload bytes but the index says {expected}; "
        f"the index does not describe this file (a corrupt sidecar, or a data file that "
        f"changed after indexing) — rebuild it with `ofindex build {path}`",
        path=path, offset=offset, record=record,
    )
