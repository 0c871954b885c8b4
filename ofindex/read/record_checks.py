"""What a read checks in each record it returns, from the dataset's framing and ``verify``.

Every read checks that a record's framing agrees with the span its index gives it (the stored
length). With ``verify``: TFRecord's length and data CRCs, and OFRecord payloads against the
sidecar's checksums where it has them (:mod:`ofindex.read.checksums`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..formats.framing import Buffer, Payload, RecordFormat, unframe_ofrecord, unframe_tfrecord


@dataclasses.dataclass(frozen=True)
class RecordChecks:
    """The checks of one dataset's reads.

    Attributes:
        format: The framing.
        verify: Whether records are verified at all.
        tfrecord_crcs: Check TFRecord length and data CRCs.
        payload_sums: Check OFRecord payloads against their sidecar's checksums (where it
            has them).
        header: Framing bytes before a payload.
        footer: Framing bytes after a payload.
        overhead: ``header + footer``: no record's span is shorter.
        unframe: Strips (and checks) the framing of one record's bytes.
    """

    format: RecordFormat
    verify: bool
    tfrecord_crcs: bool
    payload_sums: bool
    header: int
    footer: int
    overhead: int
    unframe: Callable[[Buffer, bool, str, int, int], Payload]

    @classmethod
    def of(cls, fmt: RecordFormat, verify: bool) -> RecordChecks:
        """The checks of a dataset of framing ``fmt`` read with ``verify``."""
        tf = fmt is RecordFormat.TFRECORD
        return cls(fmt, verify, verify and tf, verify and not tf, fmt.header_size,
                   fmt.footer_size, fmt.overhead, unframe_tfrecord if tf else unframe_ofrecord)
