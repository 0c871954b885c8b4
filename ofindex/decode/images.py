"""Decode the JPEG and PNG images of a batch on every core, without the GIL, into the batch's
memory.

    decode_images(images, size=(224, 224), out=None) -> uint8 array (batch, 224, 224, 3)

``images`` is a batch's ``bytes`` feature: packed (:class:`~ofindex.decode.Ragged` of
``uint8``, what ``pack_bytes=True`` gives) or a sequence of ``bytes``. The formats taken are
:data:`FORMATS`, told apart by their first bytes (:mod:`ofindex.decode.image_kinds`), so a
batch may mix them: a JPEG is decoded to RGB by libjpeg-turbo through ``simplejpeg``, a PNG by
Pillow (zlib, the GIL released; grayscale, palette and 16-bit images made RGB, an alpha
channel dropped), and any other format is a ``DecodeError`` naming the image and its format.
When ``size`` is given each is resized to exactly ``(height, width)`` with an antialiased
bilinear (triangle) filter, the filter of Pillow's ``Image.resize(..., BILINEAR)`` and of
torch's ``interpolate(..., antialias=True)``; with ``size=None`` every image must have one
size and is decoded as it is.

Choices, with the measurements behind them (ImageNet-like JPEGs of ~330 x 380, 2-core VM):

* Decoder: ``simplejpeg`` (libjpeg-turbo, releases the GIL, decodes into a given buffer)
  decoded 955 images/s per core against Pillow's 749.
* DCT-domain downscaling: when the target is at most half the image (in both directions), the
  JPEG is decoded at 1/2, 1/4 or 1/8 of its size (far less work) and then resized. Scales
  between 1/2 and 1 are not used: libjpeg-turbo's 5/8-7/8 inverse DCTs have no SIMD code,
  and a 6/8 decode took longer (1.18 ms) than a full one (1.05 ms) plus the bigger resize.
* Resize: torch's antialiased uint8 kernel when torch is installed (0.34 ms for 328 x 384 to
  224 x 224), else Pillow's (0.89 ms with the conversion to a Pillow image). The two agree
  within one level (mean absolute difference 0.007); :func:`resampler` names the one used.
* Threads: images are split over a thread pool of one thread per usable core; each thread
  decodes into a scratch buffer of its own and writes the resized image into ``out``
  (decoded straight into ``out`` when no resize is needed).
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import itertools
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import DecodeError, missing_extra
from .image_kinds import JPEG, PNG, image_format
from .spec import Ragged

try:
    import simplejpeg
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.decode.images", "images", _exc) from _exc

from .._threads import ProcessPool

__all__ = ["FORMATS", "dct_scale", "decode_images", "resampler"]

#: The image formats the stage decodes (others are a DecodeError naming the image).
FORMATS = (JPEG, PNG)

#: Threads that decode images (one per usable core).
_POOL = ProcessPool("ofindex-images", max_threads=64)
#: Fewer images than this are decoded by the calling thread (a pool hand-off costs ~50 us).
PARALLEL_IMAGES = 4
#: Images per task on the pool (~15 ms of work each for ImageNet-like JPEGs).
IMAGES_PER_PART = 8
#: The most pixels an image may have (a header is checked before anything is allocated for
#: it: a few bytes can claim 65,535 x 65,535 pixels, 12 GiB decoded); 8K video is 33 M.
MAX_PIXELS = 1 << 27

Jpegs = Ragged | Sequence[bytes | bytearray | memoryview | np.ndarray]
Resize = Callable[[np.ndarray, np.ndarray], None]


def dct_scale(height: int, width: int, size: tuple[int, int] | None) -> int:
    """The DCT-domain reduction to decode a ``height`` x ``width`` JPEG at before resizing it
    to ``size``: 8, 4 or 2 when the reduced image is still at least ``size`` (see the module
    doc), else 1.

    Args:
        height: The JPEG's height.
        width: The JPEG's width.
        size: The target ``(height, width)``, or ``None`` (no resize: 1).

    Returns:
        The divisor: the image is decoded at ``ceil(height / d) x ceil(width / d)``.
    """
    if size is None:
        return 1
    for divisor in (8, 4, 2):
        if -(-height // divisor) >= size[0] and -(-width // divisor) >= size[1]:
            return divisor
    return 1


def resampler() -> str:
    """The library that resizes: ``"torch"`` where torch is installed, else ``"pillow"``.

    Returns:
        The name.

    Raises:
        MissingDependencyError: Neither torch nor Pillow is installed.
    """
    return _resize_function()[0]


def _resize_function() -> tuple[str, Resize]:
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        return "torch", _resize_torch
    try:
        import PIL.Image  # noqa: F401
    except ImportError as exc:
        raise missing_extra("decode_images(size=...)", "images", exc) from exc
    return "pillow", _resize_pillow


def _resize_torch(image: np.ndarray, into: np.ndarray) -> None:
    """``image`` (h, w, 3) resized into ``into`` (H, W, 3) by torch (antialiased bilinear)."""
    import torch
    import torch.nn.functional as F

    source = torch.from_numpy(image).permute(2, 0, 1)[None]  # a channels-last NCHW view
    resized = F.interpolate(source, size=into.shape[:2], mode="bilinear", antialias=True,
                            align_corners=False)
    torch.from_numpy(into).copy_(resized[0].permute(1, 2, 0))


def _resize_pillow(image: np.ndarray, into: np.ndarray) -> None:
    """``image`` (h, w, 3) resized into ``into`` (H, W, 3) by Pillow (antialiased bilinear)."""
    from PIL import Image

    resized = Image.fromarray(image).resize((into.shape[1], into.shape[0]),
                                            Image.Resampling.BILINEAR)
    into[...] = np.asarray(resized)


def _buffers(jpegs: Jpegs) -> list[Any]:
    """Each image's encoded bytes (views of the packed buffer, not copies)."""
    if isinstance(jpegs, Ragged):
        values = np.asarray(jpegs.values)
        if values.dtype != np.uint8 or values.ndim != 1:
            raise DecodeError(f"decode_images needs packed uint8 bytes, got {values.dtype} "
                              f"values of {values.ndim} dimensions: decode the feature as "
                              "FixedLen((), 'bytes') with pack_bytes=True")
        ends = np.cumsum(jpegs.row_lengths).tolist()
        return [values[end - n:end] for end, n in zip(ends, jpegs.row_lengths.tolist(),
                                                      strict=True)]
    return [item if isinstance(item, np.ndarray) else memoryview(item) for item in jpegs]


def _png_header(buffer: Any, record: int) -> tuple[int, int]:
    """``(height, width)`` of a PNG: its IHDR chunk, which the format puts first."""
    head = bytes(memoryview(buffer).cast("B")[:24])
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise DecodeError(f"image {record} of the batch is a PNG cut short or without its "
                          "IHDR chunk; check the feature holds whole PNG files")
    width, height = struct.unpack(">II", head[16:24])
    return int(height), int(width)


def _header(buffer: Any, record: int) -> tuple[str, int, int]:
    """``(format, height, width)`` of an image, or a :class:`DecodeError` naming the
    record."""
    kind = image_format(buffer)
    if kind == PNG:
        height, width = _png_header(buffer, record)
    elif kind == JPEG:
        try:
            height, width, _, _ = simplejpeg.decode_jpeg_header(buffer)
        except ValueError as exc:
            raise DecodeError(f"image {record} of the batch is not a JPEG that can be decoded "
                              f"({exc}); check the feature holds JPEG or PNG bytes") from exc
    else:
        what = "not an image format known here" if kind == "other" else f"a {kind} image"
        raise DecodeError(f"image {record} of the batch is {what}: the image stage decodes "
                          f"{' and '.join(FORMATS)} (ofindex.decode.images.FORMATS); convert "
                          "such images to one of them when writing the dataset")
    if int(height) * int(width) > MAX_PIXELS:
        raise DecodeError(f"image {record} of the batch claims {height} x {width} pixels, "
                          f"more than decode_images allows ({MAX_PIXELS:,}): a damaged "
                          "image, or raise ofindex.decode.images.MAX_PIXELS")
    return kind, int(height), int(width)


def decode_images(images: Jpegs, size: tuple[int, int] | None = None, *,
                  out: np.ndarray | Callable[[tuple[int, ...]], np.ndarray] | None = None,
                  fast_dct: bool = False) -> np.ndarray:
    """Decode (and resize) every JPEG or PNG of a batch to RGB, on all cores without the GIL.

    Args:
        images: The batch's images (JPEG or PNG, :data:`FORMATS`, mixed as they come): a
            :class:`Ragged` of packed ``uint8`` bytes (a ``bytes`` feature decoded with
            ``pack_bytes=True``) or a sequence of bytes-like objects.
        size: ``(height, width)`` to resize every image to (antialiased bilinear; a JPEG is
            decoded at 1/2, 1/4 or 1/8 scale first where that stays at least this big);
            ``None``: no resize (every image must have the same size).
        out: A writable C-contiguous ``uint8`` array of shape ``(batch, height, width, 3)``
            to decode into (e.g. shared or page-locked memory), or a function that makes one
            given that shape (called once the headers are read); ``None``: a new array.
        fast_dct: Decode JPEGs with libjpeg's fast integer inverse DCT, TensorFlow's
            ``decode_jpeg`` default, whose pixels it then gives exactly (the TFDS reader's
            setting); the default, the exact DCT, differs from it by up to 14 levels.

    Returns:
        ``out`` (or the new array) holding the images.

    Raises:
        DecodeError: An image is not a decodable JPEG or PNG (the message names its position
            in the batch and its format), or with ``size=None`` the images differ in size.
        ValueError: ``size`` is not two positive integers, or ``out`` has the wrong shape,
            dtype or layout.
        MissingDependencyError: A resize is asked and neither torch nor Pillow is installed.
    """
    buffers = _buffers(images)
    found = [_header(b, k) for k, b in enumerate(buffers)]
    kinds = [kind for kind, _, _ in found]
    headers = [(height, width) for _, height, width in found]
    target = _target(size, headers)
    shape = (len(buffers), *target, 3)
    if out is None:
        out = np.empty(shape, dtype=np.uint8)
    elif callable(out):
        out = out(shape)
    if out.shape != shape or out.dtype != np.uint8 or not out.flags.c_contiguous \
            or not out.flags.writeable:
        raise ValueError(f"out must be a writable C-contiguous uint8 array of shape {shape}, "
                         f"got {out.dtype} {out.shape}")
    resize = _resize_function()[1] if size is not None else None
    job = _Job(buffers, kinds, headers, size, out, resize, fast_dct)
    pool = _POOL.get() if len(buffers) >= PARALLEL_IMAGES else None
    if pool is None:
        job.run(0, len(buffers))
    else:
        _run_parallel(pool, job, len(buffers))
    return out


def _target(size: tuple[int, int] | None, headers: list[tuple[int, int]]) -> tuple[int, int]:
    if size is not None:
        height, width = (int(v) for v in size)
        if height < 1 or width < 1 or len(size) != 2:
            raise ValueError(f"size must be (height, width) of positive integers, got {size}")
        return height, width
    if not headers:
        raise DecodeError("decode_images(size=None) of an empty batch has no image size: "
                          "give size=(height, width)")
    for record, dims in enumerate(headers):
        if dims != headers[0]:
            raise DecodeError(f"image {record} of the batch is {dims[0]} x {dims[1]}, image 0 "
                              f"{headers[0][0]} x {headers[0][1]}: give size=(height, width) "
                              "to resize them to one size")
    return headers[0]


def _run_parallel(pool: cf.ThreadPoolExecutor, job: _Job, count: int) -> None:
    # many small parts rather than one per thread: a thread the OS sets aside (a busy
    # machine) then holds up only its part, the others take the rest
    parts = min(count, max(_POOL.workers, count // IMAGES_PER_PART))
    bounds = np.linspace(0, count, parts + 1).astype(int).tolist()
    futures = [pool.submit(job.run, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    errors = [f.exception() for f in futures]  # wait for every part before raising
    for error in errors:
        if error is not None:
            raise error


class _Job:
    """Decoding one batch: each call of :meth:`run` decodes a contiguous range of images."""

    def __init__(self, buffers: list[Any], kinds: list[str], headers: list[tuple[int, int]],
                 size: tuple[int, int] | None, out: np.ndarray, resize: Resize | None,
                 fast_dct: bool = False) -> None:
        self.buffers, self.kinds, self.headers, self.size = buffers, kinds, headers, size
        self.out, self.resize, self.fast_dct = out, resize, fast_dct

    def run(self, lo: int, hi: int) -> None:
        scratch = _scratch()
        for k in range(lo, hi):
            self._one(k, scratch)

    def _one(self, k: int, scratch: _Scratch) -> None:
        if self.kinds[k] == PNG:
            self._png(k)
            return
        height, width = self.headers[k]
        into = self.out[k]
        divisor = dct_scale(height, width, self.size)
        decoded = (-(-height // divisor), -(-width // divisor))
        direct = self.resize is None or decoded == into.shape[:2]
        buffer = into if direct else scratch.take(decoded[0] * decoded[1] * 3)
        try:
            image = simplejpeg.decode_jpeg(self.buffers[k], colorspace="RGB",
                                           fastdct=self.fast_dct, min_height=decoded[0],
                                           min_width=decoded[1], buffer=buffer)
        except ValueError as exc:
            raise DecodeError(f"image {k} of the batch could not be decoded ({exc}); check "
                              "the feature holds JPEG bytes") from exc
        if image.shape[:2] != decoded:  # the header said otherwise: a damaged image
            raise DecodeError(f"image {k} of the batch decoded to {image.shape[:2]}, its "
                              f"header says {height} x {width}")
        if not direct and self.resize is not None:
            self.resize(image, into)


    def _png(self, k: int) -> None:
        """A PNG decoded by Pillow (made RGB), then resized into its place or copied."""
        image = _png_pixels(self.buffers[k], k)
        if image.shape[:2] != self.headers[k]:
            raise DecodeError(f"image {k} of the batch decoded to {image.shape[:2]}, its "
                              f"header says {self.headers[k][0]} x {self.headers[k][1]}")
        into = self.out[k]
        if self.resize is None or image.shape[:2] == into.shape[:2]:
            into[...] = image
        else:
            self.resize(image, into)


def _png_pixels(buffer: Any, record: int) -> np.ndarray:
    """A PNG's pixels as RGB (Pillow: grayscale, palette and 16-bit made RGB, an alpha
    channel dropped).

    Raises:
        DecodeError: Naming the record, when Pillow cannot decode it.
        MissingDependencyError: Pillow is not installed.
    """
    try:
        from PIL import Image
    except ImportError as exc:
        raise missing_extra("decode_images of PNG images", "images", exc) from exc
    try:
        with Image.open(io.BytesIO(bytes(memoryview(buffer).cast("B")))) as opened:
            if opened.format != "PNG":
                raise OSError(f"read as {opened.format}")
            return np.array(opened.convert("RGB"))  # writable: torch resizes from it
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise DecodeError(f"image {record} of the batch could not be decoded as a PNG "
                          f"({exc}); check the feature holds whole PNG files") from exc


class _Scratch(threading.local):
    """A decode buffer per thread, grown as needed (decoded images before their resize)."""

    def __init__(self) -> None:
        self.memory = np.empty(0, dtype=np.uint8)

    def take(self, size: int) -> np.ndarray:
        if self.memory.size < size:
            self.memory = np.empty(size + size // 4, dtype=np.uint8)
        return self.memory[:size]


_SCRATCH = _Scratch()


def _scratch() -> _Scratch:
    return _SCRATCH
