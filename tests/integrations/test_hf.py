"""ofindex.integrations.hf against real Hugging Face ``datasets``: typed Features, rows equal
to ``ds[i]`` decoded, ``map``/``filter``, a streaming IterableDataset of a global shuffle split
over DataLoader workers and nodes, and a Trainer-style collate of a small batch."""

from __future__ import annotations

import subprocess
import sys
from itertools import chain

import numpy as np
import pytest

from tests.kit.helpers import need

datasets = need("datasets")
import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, decode_example  # noqa: E402
from ofindex.integrations.hf import hf_features, to_hf_dataset, to_hf_iterable  # noqa: E402
from tests.kit.example_shards import SPEC, write_examples  # noqa: E402

SIZES = [40, 25, 35]
N = sum(SIZES)


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return ofindex.open(write_examples(tmp_path_factory.mktemp("hf"), SIZES))


def _expected(ds, rid: int) -> dict:
    want = decode_example(ds[rid], SPEC)
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in want.items()}


def test_features_follow_the_spec():
    features = hf_features(BatchDecoder(SPEC))
    value, listed = datasets.Value, datasets.List
    assert features == datasets.Features({
        "id": value("int64"), "x": listed(value("float32"), length=2),
        "m": listed(listed(value("float32"), length=3), length=2),
        "tags": listed(value("int64")), "name": value("binary"), "y": value("float32")})
    with pytest.raises(ValueError, match="dtype"):
        hf_features(BatchDecoder({"id": None}))


def test_dataset_rows_equal_the_decoded_records(ds):
    hf = to_hf_dataset(ds, BatchDecoder(SPEC), batch_size=7)
    assert len(hf) == N and hf.features == hf_features(BatchDecoder(SPEC))
    for rid in range(N):
        row = hf[rid]
        assert row == _expected(ds, rid)
        assert row["id"] == rid and row["name"] == b"r%d" % rid
        assert row["tags"] == list(range(rid % 4)) and row["x"] == [rid, rid + 0.5]
    order = [5, 99, 0, 5]
    assert to_hf_dataset(ds, BatchDecoder(SPEC), indices=order)["id"] == order


def test_map_and_filter(ds):
    hf = to_hf_dataset(ds, BatchDecoder(SPEC))
    mapped = hf.map(lambda row: {"tag_count": len(row["tags"]), "x0": row["x"][0] * 2})
    kept = mapped.filter(lambda row: row["id"] % 3 == 0)
    assert kept["id"] == list(range(0, N, 3))
    assert kept["tag_count"] == [rid % 4 for rid in range(0, N, 3)]
    assert kept["x0"] == [2.0 * rid for rid in range(0, N, 3)]
    batched = hf.map(lambda b: {"y2": [v + 1 for v in b["y"]]}, batched=True, batch_size=16)
    assert batched["y2"] == pytest.approx([_expected(ds, r)["y"] + 1 for r in range(N)])


def test_trainer_style_collate_of_a_small_batch(ds):
    import torch
    from torch.utils.data import default_collate

    hf = to_hf_dataset(ds, BatchDecoder(SPEC)).select_columns(["id", "x", "m", "y"])
    batch = default_collate([hf.with_format("torch")[i] for i in range(4)])
    assert batch["x"].shape == (4, 2) and batch["m"].shape == (4, 2, 3)
    assert batch["id"].tolist() == [0, 1, 2, 3] and batch["x"].dtype == torch.float32
    loader = torch.utils.data.DataLoader(hf.with_format("torch"), batch_size=8, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    assert sorted(int(i) for b in loader for i in b["id"]) == list(range(N))


def test_iterable_is_a_global_shuffle_of_every_record(ds):
    first = list(to_hf_iterable(ds, BatchDecoder(SPEC), batch_size=16, seed=1))
    second = list(to_hf_iterable(ds, BatchDecoder(SPEC), batch_size=16, seed=1, epoch=1))
    ids = [r["id"] for r in first]
    assert sorted(ids) == list(range(N)) and ids != list(range(N))
    assert [r["id"] for r in second] != ids and sorted(r["id"] for r in second) == sorted(ids)
    assert all(row == _expected(ds, row["id"]) for row in first)
    in_order = to_hf_iterable(ds, BatchDecoder(SPEC), batch_size=16, shuffle=False)
    assert [r["id"] for r in in_order] == list(range(N))


def test_iterable_splits_over_workers_and_nodes(ds):
    import torch
    from datasets.distributed import split_dataset_by_node

    stream = to_hf_iterable(ds, BatchDecoder(SPEC), batch_size=8, seed=2)
    loader = torch.utils.data.DataLoader(stream.select_columns(["id"]).with_format("torch"),
                                         batch_size=10, num_workers=2)
    assert sorted(int(i) for b in loader for i in b["id"]) == list(range(N))
    nodes = [[r["id"] for r in split_dataset_by_node(stream, rank=r, world_size=3)]
             for r in range(3)]
    assert sorted(chain.from_iterable(nodes)) == list(range(N)) and all(nodes)


def test_a_missing_datasets_names_the_extra():
    code = ("import sys; sys.modules['datasets'] = None\n"
            "try:\n    import ofindex.integrations.hf\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("MissingDependencyError") and "pip install 'ofindex[hf]'" in out


def test_a_feature_of_no_values_becomes_lists_of_length_zero(tmp_path):
    """A FixedLen with a dimension of 0 (what infer_spec says of a feature every sampled
    OFRecord holds empty: the Chicago taxi Examples of TFX converted to OFRecords) raised
    Arrow's 'list_size needs to be a strict positive integer'."""
    from ofindex.decode import FixedLen

    with ofindex.ShardedWriter(tmp_path / "d") as writer:
        writer.write_columns({"x": np.zeros((3, 0), np.float32), "y": np.arange(3)})
    spec = {"x": FixedLen((0,), "float32"), "y": FixedLen((), "int64"),
            "z": FixedLen((2, 0), "float32", default=0.0)}
    with ofindex.open(str(tmp_path / "d")) as ds:
        hf = to_hf_dataset(ds, BatchDecoder(spec))
    assert hf["x"] == [[], [], []] and hf["z"] == [[[], []]] * 3 and hf["y"] == [0, 1, 2]
    assert hf.features["z"] == datasets.List(datasets.List(datasets.Value("float32"),
                                                           length=0), length=2)
