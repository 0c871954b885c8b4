"""The plain-text ``offset length`` index of vahidk's ``tfrecord2idx`` and NVIDIA DALI.

One line per record: the byte offset of its framing and the framed length (header, payload
and footer), separated by a space.
"""

from __future__ import annotations

import io

import numpy as np

from ..errors import SidecarError
from ..storage import FileStamp
from .framing import RecordFormat
from .sidecar import Sidecar, encode_sidecar


def export_text(sidecar: Sidecar) -> bytes:
    """The text index for an opened sidecar."""
    starts = sidecar.offsets.astype(np.int64)
    ends = np.empty_like(starts)
    if len(starts):
        ends[:-1] = starts[1:]
        ends[-1] = sidecar.header.indexed_end
    table = np.stack([starts, ends - starts], axis=1)
    out = io.BytesIO()
    np.savetxt(out, table, fmt="%d", delimiter=" ")
    return out.getvalue()


def parse_text(text: bytes, *, path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, lengths)`` from a text index, refusing malformed lines."""
    rows = text.split(b"\n")
    if rows and rows[-1].strip() == b"":
        rows.pop()
    offsets = np.empty(len(rows), dtype=np.int64)
    lengths = np.empty(len(rows), dtype=np.int64)
    for i, line in enumerate(rows):
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            raise SidecarError(
                f"{path}: line {i + 1} is not 'offset length': {line[:80]!r}"
            )
        offsets[i] = int(parts[0])
        lengths[i] = int(parts[1])
    return offsets, lengths


def import_text(
    text: bytes, fmt: RecordFormat, stamp: FileStamp, *, path: str, data_url: str
) -> tuple[bytes, bytes]:
    """Sidecar parts from a text index, after checking it tiles the data file exactly."""
    offsets, lengths = parse_text(text, path=path)
    if len(offsets):
        if offsets[0] != 0 or np.any(offsets[1:] != offsets[:-1] + lengths[:-1]):
            gaps = offsets[1:] != offsets[:-1] + lengths[:-1]
            bad = 0 if offsets[0] != 0 else int(np.argmax(gaps)) + 1
            raise SidecarError(
                f"{path}: record {bad} starts at byte {offsets[bad]}, not where the previous "
                f"record ends; the text index does not describe {data_url} — rebuild it with "
                f"`ofindex build {data_url}`"
            )
        if np.any(lengths < fmt.overhead):
            raise SidecarError(f"{path}: a record length is shorter than the {fmt.name} framing")
    end = int(offsets[-1] + lengths[-1]) if len(offsets) else 0
    if end != stamp.size:
        raise SidecarError(
            f"{path}: the text index covers {end} bytes but {data_url} has {stamp.size}; it is "
            f"stale or for another file — rebuild it with `ofindex build {data_url}`"
        )
    return encode_sidecar(fmt, offsets.astype(np.uint64), stamp, end)
