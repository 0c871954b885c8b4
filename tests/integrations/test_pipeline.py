"""The training input pipeline: batches of the sampler fetched with one __getitems__ and decoded
with one BatchDecoder call (torch and Grain), and the batched read paths under it
(iter_batches, big batches checked on threads)."""


import os

import numpy as np
import pytest

from tests.kit.helpers import need

torch = need("torch")
from torch.utils.data import DataLoader  # noqa: E402

import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, FixedLen, VarLen, memory_pool  # noqa: E402
from ofindex.integrations.torch import (  # noqa: E402
    BatchSampler,
    GlobalShuffleSampler,
    TensorBatches,
)
from ofindex.proto import example_pb2  # noqa: E402
from tests.kit.helpers import write_shards  # noqa: E402

SHARDS = [70, 45, 85]
SPEC = {"x": FixedLen((3,), "float32"), "label": FixedLen((), "int64"), "tags": VarLen("int64")}


def example(s, i):
    ex = example_pb2.Example()
    f = ex.features.feature
    f["x"].float_list.value.extend([s, i, s * 1000 + i])
    f["label"].int64_list.value.append(s * 1000 + i)
    f["tags"].int64_list.value.extend(range(i % 4))
    return ex.SerializeToString()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return ofindex.open(write_shards(tmp_path_factory.mktemp("pipeline"), SHARDS, example))


def labels_of(batch):
    return batch["label"].tolist()


def expected_labels(ds, idx):
    return [int(lab) for lab in BatchDecoder(SPEC)(ds.__getitems__(idx))["label"]]


def on_a_worker_block(tensor):
    """Whether ``tensor``'s memory is a block of a worker's ring mapped in this process."""
    from ofindex.integrations._shared_ring import _MAPPINGS

    at = tensor.data_ptr()
    for ident, (memory, _) in list(_MAPPINGS._entries.items()):
        start = np.frombuffer(memory, np.uint8).__array_interface__["data"][0]
        if not ident.startswith(f"{os.getpid()}-") and start <= at < start + len(memory):
            return True
    return False


@pytest.mark.parametrize("workers", [0, 2])
def test_tensor_batches_are_the_samplers_batches_decoded(ds, workers):
    data = TensorBatches(ds, BatchDecoder(SPEC))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=4), 32)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        got = list(loader)
        sampler.set_epoch(epoch)
        index_batches = list(sampler)
        assert len(got) == len(index_batches) == -(-len(ds) // 32)
        for g, idx in zip(got, index_batches, strict=True):
            ref = BatchDecoder(SPEC)(ds.__getitems__(idx))
            assert isinstance(g["x"], torch.Tensor) and g["x"].dtype == torch.float32
            assert np.array_equal(g["x"].numpy(), ref["x"])
            assert np.array_equal(g["label"].numpy(), ref["label"])
            values, lengths = g["tags"]
            assert np.array_equal(values.numpy(), ref["tags"].values)
            assert np.array_equal(lengths.numpy(), ref["tags"].row_lengths)
            # workers: decoded into a block of the worker's shared memory, mapped here
            assert on_a_worker_block(g["x"]) == bool(workers)
        assert sorted(lab for g in got for lab in labels_of(g)) == sorted(
            s * 1000 + i for s, c in enumerate(SHARDS) for i in range(c))


def test_stateful_dataloader_resumes_with_the_remaining_batches(ds):
    sdl = need("torchdata.stateful_dataloader")
    data = TensorBatches(ds, BatchDecoder(SPEC))

    def make():
        sampler = BatchSampler(GlobalShuffleSampler(data, seed=9), 16)
        sampler.set_epoch(3)
        return sdl.StatefulDataLoader(data, sampler=sampler, batch_size=None, num_workers=2,
                                      multiprocessing_context="fork")

    ref = [labels_of(b) for b in make()]
    loader = make()
    it = iter(loader)
    head = [labels_of(next(it)) for _ in range(5)]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    assert head + [labels_of(b) for b in resumed] == ref


def test_ranks_partition_the_epoch(ds):
    data = TensorBatches(ds, BatchDecoder(SPEC))
    seen = []
    for rank in range(3):
        sampler = BatchSampler(GlobalShuffleSampler(data, seed=2, num_replicas=3, rank=rank,
                                                    drop_last=True), 16)
        sampler.set_epoch(1)
        seen.append([lab for b in DataLoader(data, sampler=sampler, batch_size=None)
                     for lab in labels_of(b)])
    assert all(len(s) == len(ds) // 3 for s in seen)
    flat = [lab for s in seen for lab in s]
    assert len(set(flat)) == len(flat) == len(ds) // 3 * 3  # disjoint shares


def test_memory_pool_keeps_the_tensors_torch_holds(tmp_path):
    width = 8192  # 128 records x 8192 floats = 4 MiB: the decoded array comes from the pool
    rng = np.random.default_rng(0)
    with ofindex.Writer(str(tmp_path / "big.tfrecord")) as w:
        for _ in range(512):
            ex = example_pb2.Example()
            ex.features.feature["v"].float_list.value.extend(rng.random(width).tolist())
            w.write(ex.SerializeToString())
    big = ofindex.open(str(tmp_path / "big.tfrecord"))
    data = TensorBatches(big, BatchDecoder({"v": FixedLen((width,), "float32")}))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=1), 128)
    kept, copies = [], []
    for k, batch in enumerate(DataLoader(data, sampler=sampler, batch_size=None)):
        if k % 2 == 0:  # keep every other batch alive; the others are dropped to the pool
            kept.append(batch["v"])
            copies.append(batch["v"].clone())
    for _ in range(2):  # later batches of the same size reuse only the dropped memory
        for batch in DataLoader(data, sampler=sampler, batch_size=None):
            del batch
    if ofindex._accel.native is not None:
        assert memory_pool()[0] > 0  # the pool was in use
    for t, c in zip(kept, copies, strict=True):
        assert torch.equal(t, c)


def test_pin_memory_without_cuda_warns_and_still_decodes(ds, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only machine
    data = TensorBatches(ds, BatchDecoder(SPEC), pin_memory=True)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        batch = data[[3, 1, 2]]
    assert labels_of(batch) == expected_labels(ds, [3, 1, 2])
    assert TensorBatches(ds)[[5, 6]] == ds.__getitems__([5, 6])  # no decoder: the records


def test_pinned_outputs_are_the_decoded_tensors(ds, monkeypatch):
    import ofindex.integrations.torch as ot

    made = []

    def fake_pinned(layout):  # stands in for page-locked memory on a CPU-only machine
        out = {k: torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype)
               for k, (shape, dtype) in layout.items()}
        made.extend(out.values())
        return out

    monkeypatch.setattr(ot, "_pinned", fake_pinned)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    batch = TensorBatches(ds, BatchDecoder(SPEC), pin_memory=True)[[7, 8, 9, 10]]
    assert {id(batch["x"]), id(batch["label"])} == {id(t) for t in made}
    assert ot._arena({"a": ((2, 3), np.dtype("float32")), "b": ((5,), np.dtype("int64"))},
                     pinned=False)["b"].shape == (5,)
    assert labels_of(batch) == expected_labels(ds, [7, 8, 9, 10])


def test_grain_batches(ds):
    need("grain")
    from ofindex.integrations.grain import GrainBatches

    batches = GrainBatches(ds, 32, BatchDecoder(SPEC), seed=5)
    assert len(batches) == -(-len(ds) // 32)
    epoch0 = [batches.indices(k) for k in range(len(batches))]
    assert sorted(np.concatenate(epoch0).tolist()) == list(range(len(ds)))
    assert not np.array_equal(batches.indices(0), batches.indices(len(batches)))  # next epoch
    for k in (0, len(batches) - 1, len(batches) + 2):
        b = batches[k]
        assert labels_of(b) == expected_labels(ds, batches.indices(k))
    shares = [np.concatenate([r.indices(k) for k in range(len(r))]).tolist()
              for r in (GrainBatches(ds, 16, seed=5, num_replicas=2, rank=i,
                                     drop_remainder=True) for i in range(2))]
    assert not set(shares[0]) & set(shares[1]) and len(shares[0]) == len(shares[1])
    plain = GrainBatches(ds, 50, shuffle=False)
    assert plain[1] == ds[50:100]
    with pytest.raises(ValueError, match="batch_size"):
        GrainBatches(ds, 0)


def test_grain_batches_with_workers(ds):
    grain = need("grain")
    from ofindex.integrations.grain import GrainBatches

    batches = GrainBatches(ds, 32, BatchDecoder(SPEC), seed=5)
    it = batches.repeat(2).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2))
    got = [labels_of(b) for b in it]
    assert got == [labels_of(batches[k]) for k in range(2 * len(batches))]


def _write_images(path, images: list[bytes]) -> None:
    """ImageNet-like Examples: record ``i`` holds ``images[i]`` as "jpeg" and label ``i``."""
    with ofindex.Writer(str(path)) as w:
        for i, img in enumerate(images):
            ex = example_pb2.Example()
            ex.features.feature["jpeg"].bytes_list.value.append(img)
            ex.features.feature["label"].int64_list.value.append(i)
            w.write(ex.SerializeToString())


def test_scalar_bytes_features_batch_to_bytes(tmp_path):
    """ImageNet-like records (a JPEG's bytes of a different length in each record): a batch's
    scalar bytes feature holds the bytes themselves, one per record."""
    images = [bytes([i]) * (1000 + 37 * i) for i in range(5)]
    _write_images(tmp_path / "img.tfrecord", images)
    data = TensorBatches(ofindex.open(str(tmp_path / "img.tfrecord")),
                         BatchDecoder({"jpeg": FixedLen((), "bytes"),
                                       "label": FixedLen((), "int64")}))
    batch = data[[4, 0, 2]]
    assert list(batch["jpeg"]) == [images[4], images[0], images[2]]
    assert batch["label"].tolist() == [4, 0, 2]


@pytest.mark.parametrize("workers", [0, 2])
def test_packed_bytes_features(tmp_path, workers):
    images = [bytes([i]) * (500 + 91 * i) for i in range(12)]
    _write_images(tmp_path / "img.tfrecord", images)
    ds = ofindex.open(str(tmp_path / "img.tfrecord"))
    dec = BatchDecoder({"jpeg": FixedLen((), "bytes"), "label": FixedLen((), "int64")})
    data = TensorBatches(ds, dec, pack_bytes=True)
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=3), 5)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=workers,
                        multiprocessing_context="fork" if workers else None)
    for batch, idx in zip(loader, list(sampler), strict=True):
        values, lengths = batch["jpeg"]
        assert values.dtype == torch.uint8 and on_a_worker_block(values) == bool(workers)
        ends = np.cumsum(lengths.numpy())
        got = [values.numpy()[e - n:e].tobytes()
               for e, n in zip(ends, lengths.numpy(), strict=True)]
        assert got == [images[i] for i in idx]
    need("grain")
    from ofindex.integrations.grain import GrainBatches

    g = GrainBatches(ds, 4, dec, shuffle=False, pack_bytes=True)[1]
    assert g["jpeg"].values.tobytes() == b"".join(images[4:8])
    assert g["jpeg"].row_lengths.tolist() == [len(x) for x in images[4:8]]
