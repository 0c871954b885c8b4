"""ofindex.open_tfds over HTTP (nginx) and the GCS emulator: the builder directories written
by TFDS uploaded as they are (no index), opened by URL with the index in ``index_dir=`` (or
the node cache) on local disk, nothing written to the bucket, every example and step equal
to the local read (itself equal to tfds.as_numpy: tests/tfds/test_tfds.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ofindex
from tests.kit.backends import make_backend
from tests.kit.helpers import need

need("tensorflow_datasets", "tensorflow-datasets")
from tests.kit.tfds_compare import assert_same, tfds_examples  # noqa: E402


def _upload(backend, local_dir: str, family: str = "rlds_family") -> str:
    """Copy a builder directory's files (its JSON metadata too) under a fresh prefix."""
    url = backend.prefix() + f"/{family}/1.0.0"
    if backend.root is not None:
        os.makedirs(backend._local(url), exist_ok=True)
    for name in sorted(os.listdir(local_dir)):
        with open(os.path.join(local_dir, name), "rb") as f:
            backend.put_bytes(f"{url}/{name}", f.read())
    return url


def _listing(backend, url: str) -> list[str]:
    if backend.root is not None:
        return sorted(os.listdir(backend._local(url)))
    return sorted(p.rsplit("/", 1)[-1] for p in backend.fs.ls(backend.path(url), refresh=True))


@pytest.mark.parametrize("family", ["rlds_family", "media_family"])
@pytest.mark.parametrize("name", ["http", "gcs"])
def test_remote_builder_with_index_dir_elsewhere(tfds_dirs, family, name, request,
                                                 tmp_path_factory):
    backend = make_backend(name, request, tmp_path_factory)
    local = tfds_dirs[family]
    url = _upload(backend, local, family)
    before = _listing(backend, url)
    index_dir = str(tmp_path_factory.mktemp("tfds-index"))
    split = "val[3:]" if family == "rlds_family" else "train"
    expected = tfds_examples(local, split)
    with ofindex.open_tfds(url, split=split, index_dir=index_dir,
                           storage_options=backend.storage_options) as ds:
        assert len(ds) == len(expected)
        for k, example in enumerate(ds):
            assert_same(example, expected[k], f"{name} {family} {split}[{k}]")
        if family == "rlds_family":
            with ofindex.open_tfds(local, split=split) as near:
                picks = np.arange(len(near.steps))[::-1]
                assert_same(ds.steps.batch(picks), near.steps.batch(picks))
    assert _listing(backend, url) == before  # nothing written beside the data
    assert any(n.endswith(".ofidx") for _, _, files in os.walk(index_dir) for n in files)
    # opened again: the index and step counts are read from index_dir, nothing is built
    with ofindex.open_tfds(url, split=split, index_dir=index_dir, build_missing=False,
                           storage_options=backend.storage_options) as ds:
        assert_same(ds[len(ds) - 1], expected[-1])


def test_remote_builder_indexed_in_the_node_cache(tfds_dirs, gcs_server, request,
                                                  tmp_path_factory):
    backend = make_backend("gcs", request, tmp_path_factory)
    url = _upload(backend, tfds_dirs["rlds_family"])
    before = _listing(backend, url)
    cache = str(tmp_path_factory.mktemp("node-cache"))
    with ofindex.open_tfds(url, split="val", cache_dir=cache,
                           storage_options=backend.storage_options) as ds:
        steps = len(ds.steps)
    assert _listing(backend, url) == before
    assert os.path.isdir(os.path.join(cache, "tfds-index"))
    with ofindex.open_tfds(url, split="val", cache_dir=cache, build_missing=False,
                           storage_options=backend.storage_options) as ds:
        assert len(ds.steps) == steps


def test_http_without_an_index_place_says_where_to_put_it(tfds_dirs, nginx_server, request,
                                                          tmp_path_factory):
    backend = make_backend("http", request, tmp_path_factory)
    url = _upload(backend, tfds_dirs["rlds_family"])
    with pytest.raises(ofindex.OfindexError, match=r"cannot write here.*index_dir="):
        ofindex.open_tfds(url, split="val")
