"""TFDS and RLDS datasets read in place, without TensorFlow.

    ds = ofindex.open_tfds("~/tensorflow_datasets/mnist/3.0.1", split="train[:10%]")
    ds[0]              # {"image": uint8 (28, 28, 1), "label": np.int64(4)}
    ds.features["label"].names

    episodes = ofindex.open_tfds("gs://bucket/droid/1.0.0", split="train",
                                 index_dir="/data/droid-index")
    episodes[3]["steps"]["action"]        # (T, 7): an episode's steps stacked
    episodes.steps[123_456]              # one step, by global step number

Modules: :mod:`.layout` (the builder directory's metadata), :mod:`.features` (the feature
tree of ``features.json``), :mod:`.splits` (split strings and TFDS's read order),
:mod:`.plan` (stored features -> decoded examples), :mod:`.media` (images),
:mod:`.episodes` (RLDS step counts and steps), :mod:`.access` (:func:`open_tfds`, the
examples and steps of a split), :mod:`.blend` (several datasets read as one, for a weighted
mixture).
"""

from .access import StepsView, TfdsDataset, open_tfds
from .blend import Blend
from .features import Feature
from .layout import BuilderInfo, SplitInfo, read_builder

__all__ = ["Blend", "BuilderInfo", "Feature", "SplitInfo", "StepsView", "TfdsDataset", "open_tfds",
           "read_builder"]
