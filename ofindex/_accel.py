"""Which implementation of the per-record loops runs: the compiled ``ofindex._native`` when it
was built at install time, else the pure-Python loops (same results, same errors, slower).

``OFINDEX_PURE_PYTHON=1`` in the environment turns the compiled loops off; tests switch
:data:`native` to ``None`` to run both implementations.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the compiled types, for annotations in the layers that use them
    from ._native import Reader as Reader

try:
    from . import _native
except ImportError:  # built without a C compiler: the pure-Python loops run
    _native = None  # type: ignore[assignment]

#: The compiled module, or ``None`` when the pure-Python loops run.
native = _native if os.environ.get("OFINDEX_PURE_PYTHON", "") in ("", "0") else None


#: What the compiled ``record``/``gather`` report instead of a payload (see csrc/records.c).
SPAN_TOO_SHORT = 1  # the sidecar's offsets give a span shorter than a record's framing
RECORD_FAILS_CHECK = 2  # the header or a CRC disagrees: the precise error comes from unframe
PAST_MAPPED_END = 3  # the span lies past the mapped bytes (the file grew): read it otherwise


def implementation() -> str:
    """``"compiled"`` or ``"pure-python"``: what the hot loops currently run on."""
    return "compiled" if native is not None else "pure-python"
