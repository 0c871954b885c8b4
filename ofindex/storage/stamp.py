"""What identifies one version of a file: its size and a cheap fingerprint."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any


@dataclasses.dataclass(frozen=True)
class FileStamp:
    """Size and fingerprint of one version of a file.

    Attributes:
        size: File size in bytes.
        fingerprint: ``"<kind>:<value>"`` (``mtime_ns``, ``etag``, ``generation`` …) as the
            storage reports it, or ``""`` when it reports none.
    """

    size: int
    fingerprint: str = ""

    def mismatch(self, current: FileStamp) -> str | None:
        """Say why ``current`` is not the file version this stamp describes.

        Fingerprints are compared only when both have the same kind: a sidecar built locally
        (``mtime_ns``) stays valid for a copy uploaded to a bucket (``etag``).

        Args:
            current: The stamp the file has now.

        Returns:
            A phrase such as ``"its size changed from 10 to 12 bytes"``, or ``None`` when
            ``current`` is the same version.
        """
        if self.size != current.size:
            return f"its size changed from {self.size} to {current.size} bytes"
        kind, _, value = self.fingerprint.partition(":")
        ckind, _, cvalue = current.fingerprint.partition(":")
        if kind and kind == ckind and value != cvalue:
            return f"its {kind} changed from {value} to {cvalue}"
        return None


#: Longer version identifiers are stored as their SHA-256 (sidecar headers have a fixed size).
MAX_FINGERPRINT_VALUE = 256


def fingerprint_from_info(info: dict[str, Any]) -> str:
    """The cheapest version identifier a backend reports: generation, ETag, or mtime."""
    for key, kind in (("generation", "generation"), ("ETag", "etag"), ("etag", "etag"),
                      ("mtime", "mtime"), ("LastModified", "mtime"), ("updated", "mtime"),
                      ("Last-Modified", "mtime"), ("created", "created")):
        value = info.get(key)
        if value not in (None, ""):
            text = str(value).strip(chr(34))
            if len(text.encode("utf-8")) > MAX_FINGERPRINT_VALUE:  # fits a sidecar header
                text = "sha256=" + hashlib.sha256(text.encode("utf-8")).hexdigest()
            return f"{kind}:{text}"
    return ""
