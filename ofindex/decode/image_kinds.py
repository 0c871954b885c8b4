"""Which image format encoded bytes are, by their first bytes (the formats' signatures), for
the image stage (:mod:`ofindex.decode.images`, which decodes JPEG and PNG) and for what
``ofindex convert`` reports it wrote. No decoding library is needed to tell.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

JPEG, PNG, GIF, BMP, WEBP, TIFF = "JPEG", "PNG", "GIF", "BMP", "WebP", "TIFF"
#: Bytes that are no image format named here.
OTHER = "other"
#: ``(signature, offset, format)``: the format whose signature stands at that offset.
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\xff\xd8\xff", 0, JPEG),
    (b"\x89PNG\r\n\x1a\n", 0, PNG),
    (b"GIF87a", 0, GIF),
    (b"GIF89a", 0, GIF),
    (b"BM", 0, BMP),
    (b"II*\x00", 0, TIFF),
    (b"MM\x00*", 0, TIFF),
)


def image_format(data: Any) -> str:
    """The format of one encoded image.

    Args:
        data: Its bytes (any bytes-like object; the first 16 bytes are read).

    Returns:
        ``"JPEG"``, ``"PNG"``, ``"GIF"``, ``"BMP"``, ``"WebP"``, ``"TIFF"`` or ``"other"``.
    """
    head = bytes(memoryview(data).cast("B")[:16])
    for signature, at, name in _SIGNATURES:
        if head[at:at + len(signature)] == signature:
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    return OTHER


def count_formats(images: Iterable[Any], into: dict[str, int]) -> dict[str, int]:
    """Add each image's format to a count (``None`` entries, null images, are skipped).

    Args:
        images: Encoded images.
        into: ``{format: count}`` to add to.

    Returns:
        ``into``.
    """
    for data in images:
        if data is not None:
            name = image_format(data)
            into[name] = into.get(name, 0) + 1
    return into


def formats_text(counts: dict[str, int]) -> str:
    """``"95 JPEG, 5 PNG"`` (most first)."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count:,} {name}" for name, count in ordered)
