"""Decode a TFDS ``Image`` (or ``Video`` frame) as ``tf.image.decode_image`` does.

JPEG images are decoded by libjpeg-turbo through ``simplejpeg`` (without the GIL, the images
of one feature of a batch split over a thread pool of one thread per usable core) with
TensorFlow's settings: the fast integer DCT (``JDCT_IFAST``, TensorFlow's default
``dct_method``) and fancy upsampling. The image stage's default exact DCT differs from
TensorFlow's pixels by up to 14 levels on the tests' images; the fast one gives them exactly.
RGB JPEGs into ``uint8`` (camera frames: the usual case) go through the image stage
(:func:`ofindex.decode.images.decode_images` with ``fast_dct=True``); grayscale JPEGs and PNG
images (1 to 4 channels, ``uint8`` and one-channel ``uint16``), which the stage makes RGB, are
decoded here, JPEGs the same way, PNGs through Pillow.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._threads import ProcessPool
from ..errors import DecodeError, missing_extra

if TYPE_CHECKING:
    from .features import Feature

_JPEG_MAGIC = b"\xff\xd8"
#: Pillow's mode for an 8-bit image of 1 to 4 channels (TensorFlow's ``channels=``).
_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
#: Threads that decode images (one per usable core).
_POOL = ProcessPool("ofindex-tfds-images", max_threads=64)
#: Fewer images than this are decoded by the calling thread (a pool hand-off costs ~50 us,
#: a 128 x 128 JPEG ~150 us).
PARALLEL_IMAGES = 8


def decode_frames(blobs: Sequence[Any], feature: Feature) -> np.ndarray:
    """Decode encoded images to one array ``(len(blobs), height, width, channels)``.

    Args:
        blobs: The encoded images (``bytes``).
        feature: The ``Image`` feature they belong to (its channels and dtype).

    Returns:
        The images, of ``feature.dtype``.

    Raises:
        DecodeError: An image cannot be decoded, or the images differ in size (the message
            names the feature and the image).
        MissingDependencyError: ``pip install 'ofindex[images]'`` is needed.
    """
    channels = feature.shape[-1] or 3
    if not blobs:
        height, width = (d or 0 for d in feature.shape[:2])
        return np.empty((0, height, width, channels), dtype=feature.dtype)
    fixed = feature.shape[0] is not None and feature.shape[1] is not None
    out = np.empty((len(blobs), *(d or 0 for d in feature.shape)),
                   dtype=feature.dtype) if fixed else None
    if _for_the_image_stage(blobs, feature, channels):
        return _through_the_image_stage(blobs, feature, out)
    pool = _POOL.get() if len(blobs) >= PARALLEL_IMAGES else None
    if pool is None:
        frames = _some(blobs, feature, channels, 0, len(blobs), out)
    else:
        parts = min(len(blobs), _POOL.workers * 2)
        bounds = np.linspace(0, len(blobs), parts + 1).astype(int).tolist()
        futures = [pool.submit(_some, blobs, feature, channels, lo, hi, out)
                   for lo, hi in itertools.pairwise(bounds)]
        frames = [frame for future in futures for frame in future.result()]
    if out is not None:  # decoded in place (a fixed shape: TFDS checked every image has it)
        return out
    if any(frame.shape != frames[0].shape for frame in frames):
        raise DecodeError(f"image feature {feature.path!r}: the images of one example differ "
                          f"in size ({frames[0].shape[:2]} and others), they cannot be "
                          "stacked")
    return np.stack(frames)


def _for_the_image_stage(blobs: Sequence[Any], feature: Feature, channels: int) -> bool:
    """Whether the images are RGB JPEGs into ``uint8``: what the image stage decodes as
    TensorFlow does (with ``fast_dct``); other channels, PNGs and ``uint16`` are decoded here."""
    return (channels == 3 and feature.dtype == np.dtype(np.uint8)
            and all(bytes(blob[:2]) == _JPEG_MAGIC for blob in blobs))


def _through_the_image_stage(blobs: Sequence[Any], feature: Feature,
                             out: np.ndarray | None) -> np.ndarray:
    """RGB JPEGs decoded by :func:`ofindex.decode.images.decode_images` with TensorFlow's
    fast DCT (its pixels exactly), on the stage's threads, into ``out`` when given."""
    try:
        from ..decode.images import decode_images
    except ImportError as exc:
        raise missing_extra(f"decoding the TFDS image feature {feature.path!r}", "images",
                            exc) from exc
    try:
        return decode_images(blobs, out=out, fast_dct=True)
    except DecodeError as exc:
        raise DecodeError(f"image feature {feature.path!r}: {exc}") from exc


def _some(blobs: Sequence[Any], feature: Feature, channels: int, lo: int, hi: int,
          out: np.ndarray | None = None) -> list[np.ndarray]:
    """Images ``lo..hi-1`` decoded (into ``out[k]`` when given)."""
    frames = []
    for k in range(lo, hi):
        into = None if out is None else out[k]
        frame = _one(blobs[k], feature, channels, k, into)
        if into is not None and frame is not into:
            if frame.shape != into.shape:
                raise DecodeError(f"image feature {feature.path!r}: image {k} of the example "
                                  f"is {frame.shape}, the feature says {into.shape}")
            into[...] = frame
        frames.append(frame)
    return frames


def _one(blob: Any, feature: Feature, channels: int, number: int,
         into: np.ndarray | None = None) -> np.ndarray:
    if bytes(blob[:2]) == _JPEG_MAGIC and feature.dtype == np.dtype(np.uint8):
        return _jpeg(blob, feature, channels, number, into)
    return _pillow(blob, feature, channels, number)


def _jpeg(blob: Any, feature: Feature, channels: int, number: int,
          into: np.ndarray | None = None) -> np.ndarray:
    """One JPEG as TensorFlow's ``decode_jpeg`` gives it (fast DCT, fancy upsampling)."""
    try:
        import simplejpeg
    except ImportError as exc:
        raise missing_extra(f"decoding the TFDS image feature {feature.path!r}", "images",
                            exc) from exc
    if channels not in (1, 3):
        raise DecodeError(f"image feature {feature.path!r} has {channels} channels: a JPEG "
                          "decodes to 1 or 3")
    colorspace = "GRAY" if channels == 1 else "RGB"
    try:
        if into is not None and channels == 3:
            height, width, _, _ = simplejpeg.decode_jpeg_header(blob)
            if (height, width) == into.shape[:2]:  # straight into the batch's memory
                decoded: np.ndarray = simplejpeg.decode_jpeg(
                    blob, colorspace=colorspace, fastdct=True, fastupsample=False, buffer=into)
                return decoded
        image = simplejpeg.decode_jpeg(bytes(blob), colorspace=colorspace, fastdct=True,
                                       fastupsample=False)
    except ValueError as exc:
        raise DecodeError(f"image feature {feature.path!r}: image {number} of the example "
                          f"could not be decoded ({exc})") from exc
    pixels: np.ndarray = image if image.ndim == 3 else image[:, :, None]
    return pixels


def _pillow(blob: Any, feature: Feature, channels: int, number: int) -> np.ndarray:
    """One image through Pillow, as TensorFlow decodes it."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise missing_extra(f"decoding the TFDS image feature {feature.path!r}", "images",
                            exc) from exc
    try:
        with Image.open(io.BytesIO(bytes(blob))) as image:
            image.load()
            array = _pixels(image, feature, channels)
    except (OSError, ValueError, SyntaxError) as exc:
        raise DecodeError(f"image feature {feature.path!r}: image {number} of the example "
                          f"could not be decoded ({exc})") from exc
    if array.ndim == 2:
        array = array[:, :, None]
    return array


def _pixels(image: Any, feature: Feature, channels: int) -> np.ndarray:
    if feature.dtype == np.dtype(np.uint16):
        if channels != 1 or not image.mode.startswith("I"):
            raise DecodeError(f"image feature {feature.path!r}: a {channels}-channel uint16 "
                              f"image (mode {image.mode}) is not decoded by ofindex yet "
                              "(one-channel uint16 images are)")
        return np.asarray(image, dtype=np.uint16)
    if image.mode.startswith("I") or image.mode == "F":
        raise DecodeError(f"image feature {feature.path!r} is uint8 but holds a "
                          f"{image.mode} image")
    mode = _MODES[channels]
    return np.asarray(image if image.mode == mode else image.convert(mode), dtype=np.uint8)
