"""TensorBoard logs written by tf.summary, torch.utils.tensorboard and tensorboardX, read by
``ofindex.events`` and by TensorBoard's own EventAccumulator: the same tags, steps, wall
times, values and image bytes (issue 49, item 4)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ofindex

STEPS = 120
#: PyTorch's and tensorboardX's script: one SummaryWriter API, imported from ``{module}``.
_SUMMARY_WRITER = """
import os, sys, numpy as np
from {module} import SummaryWriter
logdir = sys.argv[1]
for run in ("a", "b/c"):
    for part in range(2):
        w = SummaryWriter(os.path.join(logdir, run), filename_suffix=".p%d" % part)
        for step in range(part * {half}, (part + 1) * {half}):
            w.add_scalar("loss", 1.0 / (step + 1), step)
            w.add_scalar("lr/group0", 0.1 * 0.99 ** step, step)
            if step % 30 == 0:
                rng = np.random.RandomState(step)
                w.add_histogram("weights", rng.randn(200), step)
                w.add_image("samples", rng.rand(3, 9, 7), step)
                w.add_text("notes", "step %d of %s" % (step, run), step)
        w.close()
"""
#: Each writer's script: runs "a" and "b/c" (a nested run), two event files per run (the
#: writer closed and opened again, steps going on), scalars every step, histograms, images
#: and text every 30 steps.
WRITERS = {
    "tf": """
import os, sys, numpy as np
import tensorflow as tf
logdir = sys.argv[1]
for run in ("a", "b/c"):
    for part in range(2):
        w = tf.summary.create_file_writer(os.path.join(logdir, run))
        with w.as_default():
            for step in range(part * {half}, (part + 1) * {half}):
                tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
                tf.summary.scalar("lr/group0", 0.1 * 0.99 ** step, step=step)
                if step % 30 == 0:
                    rng = np.random.RandomState(step)
                    tf.summary.histogram("weights", rng.randn(200), step=step)
                    tf.summary.image("samples", rng.rand(2, 9, 7, 3), step=step, max_outputs=2)
                    tf.summary.text("notes", "step %d of %s" % (step, run), step=step)
        w.close()
""",
    "torch": _SUMMARY_WRITER.replace("{module}", "torch.utils.tensorboard"),
    "tensorboardX": _SUMMARY_WRITER.replace("{module}", "tensorboardX"),
}


@pytest.fixture(scope="module", params=sorted(WRITERS))
def logdir(request, tmp_path_factory):
    """A log directory written by one writer (in a process of its own: TensorFlow and
    PyTorch are not loaded together)."""
    path = str(tmp_path_factory.mktemp(f"logs-{request.param}") / "logs")
    script = WRITERS[request.param].format(half=STEPS // 2)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", script, path], check=True, env=env, timeout=600)
    return request.param, path


def _accumulator(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0,
                                                  "histograms": 0, "images": 0,
                                                  "audio": 0, "compressedHistograms": 0})
    ea.Reload()
    return ea


def _tensor(proto):
    from tensorboard.util import tensor_util

    return tensor_util.make_ndarray(proto)


def test_tags_and_runs_are_tensorboards(logdir):
    _writer, path = logdir
    with ofindex.events(path) as log:
        assert log.runs == ["a", "b/c"]
        tags = log.tags()
        for run in log.runs:
            ea = _accumulator(os.path.join(path, run))
            listed = ea.Tags()
            theirs = {t for kind in ("scalars", "histograms", "images", "tensors", "audio")
                      for t in listed[kind]}
            ours = tags[tags.run == run]
            assert set(ours.tag) == theirs
            kinds = dict(zip(ours.tag, ours.kind, strict=True))
            scalar = "loss"
            assert kinds[scalar] == "scalars" and kinds["weights"] == "histograms"
            assert kinds["samples"] == "images"
            assert set(ours[ours.kind == "text"].tag) <= theirs
            assert ours.set_index("tag").loc[scalar, "count"] == STEPS
            assert ours.set_index("tag").loc[scalar, "last_step"] == STEPS - 1


def test_scalars_are_tensorboards(logdir):
    _, path = logdir
    with ofindex.events(path) as log:
        frame = log.scalars()
        assert list(frame.columns) == ["run", "tag", "step", "wall_time", "value"]
        for run in log.runs:
            ea = _accumulator(os.path.join(path, run))
            for tag in ("loss", "lr/group0"):
                if tag in ea.Tags()["scalars"]:
                    theirs = [(e.step, e.wall_time, e.value) for e in ea.Scalars(tag)]
                else:  # TensorFlow 2: scalar tensors
                    theirs = [(e.step, e.wall_time, float(_tensor(e.tensor_proto)))
                              for e in ea.Tensors(tag)]
                part = frame[(frame.run == run) & (frame.tag == tag)]
                ours = list(zip(part.step.tolist(), part.wall_time.tolist(),
                                part.value.tolist(), strict=True))
                assert ours == theirs and len(ours) == STEPS
        one = log.scalars("loss", runs="a", steps=slice(10, 20))
        assert one.step.tolist() == list(range(10, 20)) and set(one.run) == {"a"}
        assert log.scalars("loss", steps=[3, 5]).step.tolist() == [3, 5, 3, 5]
        assert log.scalars("loss", steps=range(0, 100, 30)).step.tolist() == [0, 30, 60, 90] * 2


def test_histograms_are_tensorboards(logdir):
    _, path = logdir
    with ofindex.events(path) as log:
        frame = log.histograms("weights", runs="b/c")
        ea = _accumulator(os.path.join(path, "b", "c"))
        if "weights" in ea.Tags()["histograms"]:
            theirs = ea.Histograms("weights")
            assert frame.step.tolist() == [e.step for e in theirs]
            for (_, row), e in zip(frame.iterrows(), theirs, strict=True):
                h = e.histogram_value
                assert (row["min"], row["max"], row["num"], row["sum"], row["sum_squares"]) == (
                    h.min, h.max, h.num, h.sum, h.sum_squares)
                assert row["limits"].tolist() == list(h.bucket_limit)
                assert row["counts"].tolist() == list(h.bucket)
        else:  # TensorFlow 2: [k, 3] tensors (left edge, right edge, count)
            theirs = ea.Tensors("weights")
            assert frame.step.tolist() == [e.step for e in theirs]
            for (_, row), e in zip(frame.iterrows(), theirs, strict=True):
                table = _tensor(e.tensor_proto)
                assert np.array_equal(row["limits"], table[:, 1])
                assert np.array_equal(row["counts"], table[:, 2])
                assert row["num"] == table[:, 2].sum()
        assert len(frame) == STEPS // 30


def test_images_are_tensorboards(logdir):
    _, path = logdir
    with ofindex.events(path) as log:
        raw = log.images("samples", runs="a", decode=False)
        ea = _accumulator(os.path.join(path, "a"))
        if "samples" in ea.Tags()["images"]:
            theirs = [(e.step, e.encoded_image_string) for e in ea.Images("samples")]
        else:  # TensorFlow 2: a string tensor (width, height, then the images)
            theirs = [(e.step, image) for e in ea.Tensors("samples")
                      for image in e.tensor_proto.string_val[2:]]
        assert list(zip(raw.step, raw.value, strict=True)) == theirs
        decoded = log.images("samples", runs="a", steps=0)
        import io

        from PIL import Image

        for image, encoded in zip(decoded.value, raw[raw.step == 0].value, strict=True):
            assert image.shape[:2] == (9, 7) and image.dtype == np.uint8
            assert np.array_equal(image.reshape(9, 7, -1),
                                  np.asarray(Image.open(io.BytesIO(encoded))).reshape(9, 7, -1))


def test_text_and_tensors_are_tensorboards(logdir):
    writer, path = logdir
    with ofindex.events(path) as log:
        tags = log.tags("a")
        (tag,) = tags[tags.kind == "text"].tag
        ea = _accumulator(os.path.join(path, "a"))
        theirs = [(e.step, _tensor(e.tensor_proto)) for e in ea.Tensors(tag)]
        text = log.text(tag, runs="a")
        assert text.step.tolist() == [s for s, _ in theirs]
        for value, (step, tensor) in zip(text.value, theirs, strict=True):
            assert value == np.asarray(tensor).reshape(-1)[0].decode() == f"step {step} of a"
        tensors = log.tensors(tag, runs="a")
        for value, (_, tensor) in zip(tensors.value, theirs, strict=True):
            assert np.array_equal(value, tensor)
        if writer == "tf":  # every TensorFlow 2 summary is a tensor: the scalars too
            loss = log.tensors("loss", runs="a")
            assert [float(v) for v in loss.value] == log.scalars("loss", runs="a").value.tolist()
