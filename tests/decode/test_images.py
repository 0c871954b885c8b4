"""The image stage (``ofindex.decode.images``): JPEGs of a batch decoded to RGB (equal to
Pillow's decoding, the same libjpeg-turbo), resized with an antialiased bilinear filter
(within one level of Pillow's), DCT-domain downscaling where the target is at most half the
image (as Pillow's ``draft``), on threads, into the memory given; damaged input raises
``DecodeError`` naming the image; the integrations decode into the batch's memory, in the
main process and in DataLoader / Grain workers alike."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.kit.helpers import need

need("simplejpeg")
Image = need("PIL.Image")

import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, FixedLen, Ragged  # noqa: E402
from ofindex.decode import images as stage  # noqa: E402
from ofindex.decode.images import dct_scale, decode_images  # noqa: E402
from ofindex.errors import DecodeError  # noqa: E402
from ofindex.proto import example_pb2  # noqa: E402
from tests.kit.helpers import write_shards  # noqa: E402


def jpeg(height, width, seed, quality=90):
    """A noisy photo-like JPEG (blocks plus noise, 4:2:0 as Pillow writes by default)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    pixels = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:height, :width]
    pixels = np.clip(pixels + rng.normal(0, 20, pixels.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def packed(jpegs):
    return Ragged(np.frombuffer(b"".join(jpegs), np.uint8), [len(j) for j in jpegs])


def pillow(data, size=None, draft=False):
    with Image.open(io.BytesIO(data)) as im:
        if draft:
            im.draft("RGB", (size[1], size[0]))
        rgb = im.convert("RGB")
        if size is not None:
            rgb = rgb.resize((size[1], size[0]), Image.BILINEAR)
        return np.asarray(rgb)


def test_decoding_without_resize_equals_pillows_decoding():
    jpegs = [jpeg(37, 53, seed) for seed in range(9)]
    want = np.stack([pillow(j) for j in jpegs])
    assert np.array_equal(decode_images(packed(jpegs)), want)  # packed bytes
    assert np.array_equal(decode_images(jpegs), want)  # a list of bytes
    out = np.zeros_like(want)
    assert decode_images(np.array(jpegs, dtype=object), out=out) is out
    assert np.array_equal(out, want)


def test_fast_dct_gives_tensorflows_decode_jpeg_pixels():
    """``fast_dct=True`` is TensorFlow's ``decode_jpeg`` default (what the TFDS reader needs:
    its pixels exactly); the default exact DCT differs from it."""
    import tensorflow as tf

    jpegs = [jpeg(61, 75, seed) for seed in range(10)]  # 10: the stage's threads decode them
    want = np.stack([tf.io.decode_jpeg(j, channels=3).numpy() for j in jpegs])
    assert np.array_equal(decode_images(jpegs, fast_dct=True), want)
    assert not np.array_equal(decode_images(jpegs), want)


@pytest.mark.parametrize("resampler", ["torch", "pillow"])
@pytest.mark.parametrize(("shape", "size"), [((120, 90), (64, 48)), ((40, 44), (40, 44)),
                                             ((33, 70), (50, 20)), ((20, 24), (31, 37))])
def test_resizing_is_pillows_antialiased_bilinear_within_one_level(monkeypatch, resampler,
                                                                    shape, size):
    if resampler == "torch":
        need("torch")
    else:
        monkeypatch.setattr(stage, "_resize_function",
                            lambda: ("pillow", stage._resize_pillow))
    jpegs = [jpeg(*shape, seed) for seed in range(5)]
    got = decode_images(packed(jpegs), size)
    assert got.shape == (5, *size, 3) and got.dtype == np.uint8
    for k, j in enumerate(jpegs):
        diff = np.abs(got[k].astype(int) - pillow(j, size).astype(int))
        assert diff.max() <= 1, (resampler, shape, size, k)


@pytest.mark.parametrize(("shape", "size", "divisor"), [((256, 320), (64, 64), 4),
                                                         ((256, 320), (32, 40), 8),
                                                         ((256, 320), (100, 150), 2),
                                                         ((256, 320), (129, 100), 1)])
def test_a_small_target_is_decoded_at_a_dct_scale_first_as_pillows_draft(shape, size,
                                                                           divisor):
    assert dct_scale(*shape, size) == divisor
    j = jpeg(*shape, seed=3)
    got = decode_images([j], size)[0]
    # Pillow's draft picks the same 1/2, 1/4 or 1/8 DCT scale, then the same filter resizes
    diff = np.abs(got.astype(int) - pillow(j, size, draft=True).astype(int))
    assert diff.max() <= 1


def test_dct_scale_keeps_the_decoded_image_at_least_the_target():
    assert dct_scale(500, 375, (224, 224)) == 1
    assert dct_scale(500, 375, (187, 187)) == 2
    assert dct_scale(500, 375, (188, 100)) == 2  # 250 x 188
    assert dct_scale(500, 375, (251, 100)) == 1
    assert dct_scale(17, 17, (3, 3)) == 8  # ceil(17 / 8) = 3
    assert dct_scale(17, 17, (4, 3)) == 4 and dct_scale(17, 17, None) == 1


def test_many_images_on_threads_equal_one_at_a_time():
    jpegs = [jpeg(48 + k % 3 * 8, 64, k) for k in range(40)]
    together = decode_images(packed(jpegs), (32, 32))
    alone = np.stack([decode_images([j], (32, 32))[0] for j in jpegs])
    assert np.array_equal(together, alone)


def test_damaged_images_and_bad_arguments_say_what_is_wrong():
    good = jpeg(16, 16, 0)
    with pytest.raises(DecodeError, match="image 1 of the batch"):
        decode_images([good, b"not a jpeg"], (8, 8))
    with pytest.raises(DecodeError, match="image 2 of the batch is 16 x 24"):
        decode_images([good, good, jpeg(16, 24, 1)])
    with pytest.raises(ValueError, match="out must be"):
        decode_images([good], (8, 8), out=np.zeros((1, 8, 9, 3), np.uint8))
    with pytest.raises(ValueError, match="positive"):
        decode_images([good], (0, 8))
    huge = bytearray(good)  # a header claiming 65,500 x 65,500 pixels
    at = huge.index(b"\xff\xc0") + 5
    huge[at:at + 4] = (65500).to_bytes(2, "big") * 2
    with pytest.raises(DecodeError, match="claims 65500 x 65500"):
        decode_images([bytes(huge)], (8, 8))


def png(height, width, seed, mode="RGB"):
    """A noisy PNG of ``mode`` (RGB, RGBA, L, P, I;16 …)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    if mode == "I;16":
        image = Image.frombytes("I;16", (width, height),
                                (pixels[..., 0].astype("<u2") * 257).tobytes())
    elif mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P", "LA", "I;16"])
def test_pngs_decode_as_pillow_decodes_them_mixed_with_jpegs(mode):
    """A PNG was refused as 'not a JPEG': it is decoded as Pillow decodes it (made RGB), in a
    batch mixed with JPEGs, resized within one level of Pillow's, on threads as alone."""
    images = [png(37, 53, seed, mode) if seed % 2 else jpeg(37, 53, seed) for seed in range(9)]
    want = np.stack([pillow(data) for data in images])
    assert np.array_equal(decode_images(images), want)
    assert np.array_equal(decode_images(packed(images)), want)
    resized = decode_images(images, (20, 24))
    pngs = [data for data in images if data.startswith(b"\x89PNG")]
    want_pngs = np.stack([pillow(data, (20, 24)) for data in pngs])
    assert np.abs(resized[1::2].astype(int) - want_pngs.astype(int)).max() <= 1
    assert np.array_equal(resized, np.stack([decode_images([d], (20, 24))[0] for d in images]))
    assert stage.FORMATS == ("JPEG", "PNG")


def test_other_formats_and_damaged_pngs_are_named():
    gif = io.BytesIO()
    Image.new("RGB", (4, 4)).save(gif, format="GIF")
    with pytest.raises(DecodeError, match="image 1 of the batch is a GIF image: the image "
                       "stage decodes JPEG and PNG"):
        decode_images([png(4, 4, 0), gif.getvalue()])
    good = png(16, 16, 1)
    with pytest.raises(DecodeError, match="image 0 of the batch could not be decoded as a PNG"):
        decode_images([good[:60]], (8, 8))
    with pytest.raises(DecodeError, match="PNG cut short"):
        decode_images([good[:20]])
    huge = bytearray(good)
    huge[16:24] = (60000).to_bytes(4, "big") * 2   # IHDR claiming 60,000 x 60,000
    with pytest.raises(DecodeError, match="claims 60000 x 60000"):
        decode_images([bytes(huge)], (8, 8))


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 2000), flips=st.lists(st.tuples(st.integers(0, 4000),
                                                          st.integers(1, 255)), max_size=6))
def test_mangled_jpegs_decode_or_raise_decode_error(cut, flips):
    data = bytearray(jpeg(40, 48, 7))
    for at, bits in flips:
        data[at % len(data)] ^= bits
    data = bytes(data[:len(data) - cut % len(data)])
    try:
        got = decode_images([data], (16, 16))
    except DecodeError:
        return
    assert got.shape == (1, 16, 16, 3)


SPEC = {"jpeg": FixedLen((), "bytes"), "label": FixedLen((), "int64")}


def _record(s, i):
    ex = example_pb2.Example()
    f = ex.features.feature
    f["jpeg"].bytes_list.value.append(jpeg(40 + (i % 4) * 8, 56, s * 100 + i))
    f["label"].int64_list.value.append(s * 100 + i)
    return ex.SerializeToString()


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    d = write_shards(tmp_path_factory.mktemp("photos"), [21, 14], _record)
    return ofindex.open(os.path.join(d, "part-*.tfrecord"))


def _expected(ds, indices, size):
    recs = [ds[int(i)] for i in indices]
    batch = BatchDecoder(SPEC)(recs)
    return np.stack([pillow(bytes(b), size, draft=True) for b in batch["jpeg"]]), batch["label"]


@pytest.mark.parametrize("workers", [0, 2])
def test_tensor_batches_decode_images_in_the_loop_or_in_workers(photos, workers):
    torch = need("torch")
    from torch.utils.data import DataLoader

    from ofindex.integrations.torch import BatchSampler, SequentialSampler, TensorBatches

    data = TensorBatches(photos, BatchDecoder(SPEC), pack_bytes=True,
                         images={"jpeg": (24, 32)})
    sampler = BatchSampler(SequentialSampler(data), 8)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    kept = list(zip(loader, list(sampler), strict=True))
    for batch, idx in kept:  # kept until the end: none was overwritten
        want, labels = _expected(photos, idx, (24, 32))
        assert batch["jpeg"].dtype == torch.uint8 and tuple(batch["jpeg"].shape) == want.shape
        assert np.abs(batch["jpeg"].numpy().astype(int) - want.astype(int)).max() <= 1
        assert batch["label"].tolist() == labels.tolist()


def test_grain_batches_decode_images(photos):
    need("grain")
    from ofindex.integrations.grain import GrainBatches

    batches = GrainBatches(photos, 5, BatchDecoder(SPEC), shuffle=False, pack_bytes=False,
                           images={"jpeg": (16, 16)})
    batch = batches[2]
    want, labels = _expected(photos, range(10, 15), (16, 16))
    assert np.abs(batch["jpeg"].astype(int) - want.astype(int)).max() <= 1
    assert batch["label"].tolist() == labels.tolist()


def test_tensor_batches_decode_png_records(tmp_path):
    """The image stage of TensorBatches on a dataset of PNGs (what convert writes from an
    image folder of PNG files)."""
    need("torch")
    from ofindex.integrations.torch import TensorBatches

    images = [png(20 + k % 3, 30, k, "RGBA" if k % 2 else "RGB") for k in range(6)]
    with ofindex.ShardedWriter(tmp_path / "pngs") as writer:
        writer.write_columns({"jpeg": images, "label": np.arange(6)})
    with ofindex.open(str(tmp_path / "pngs")) as ds:
        data = TensorBatches(ds, BatchDecoder(SPEC), images={"jpeg": (12, 16)})
        batch = data[list(range(6))]
    want = np.stack([pillow(data, (12, 16)) for data in images])
    assert np.abs(batch["jpeg"].numpy().astype(int) - want.astype(int)).max() <= 1


def test_images_must_name_a_bytes_feature(photos):
    from ofindex.integrations._fetch import BatchFetch

    with pytest.raises(ValueError, match=r"images=\{'label': \.\.\.\}"):
        BatchFetch(photos, BatchDecoder(SPEC), images={"label": (8, 8)})
    with pytest.raises(ValueError, match="'nope'"):
        BatchFetch(photos, BatchDecoder(SPEC), images={"nope": (8, 8)})
