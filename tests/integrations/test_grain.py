"""An ofindex dataset is a Grain RandomAccessDataSource: Grain's own DataLoader reads it."""

import os
import pickle

import pytest

from tests.kit.helpers import need

grain = need("grain.python")
import ofindex  # noqa: E402


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("grain")
    # 30 records: with an odd count, grain 0.2.18 IndexSampler yields one record fewer on shard 0
    for s, c in enumerate([9, 14, 7]):
        with ofindex.Writer(os.path.join(d, f"g-{s}.tfrecord")) as w:
            for i in range(c):
                w.write(f"{s}/{i}".encode())
    return ofindex.open(os.path.join(d, "g-*.tfrecord"))


def test_protocol(ds):
    assert isinstance(ds, grain.RandomAccessDataSource)
    assert len(ds) == 30 and isinstance(ds[3], bytes)
    assert pickle.loads(pickle.dumps(ds))[29] == ds[29]
    assert len(repr(ds)) < 200


@pytest.mark.parametrize("workers", [0, 2])
def test_grain_dataloader_index_sampler(ds, workers):
    expected = sorted(ds[i] for i in range(len(ds)))
    per_shard = []
    for shard in range(2):
        sampler = grain.IndexSampler(
            num_records=len(ds),
            shard_options=grain.ShardOptions(shard_index=shard, shard_count=2,
                                             drop_remainder=False),
            shuffle=True, num_epochs=1, seed=3)
        loader = grain.DataLoader(data_source=ds, sampler=sampler, worker_count=workers)
        per_shard.append(list(loader))
    assert not set(per_shard[0]) & set(per_shard[1])
    assert sorted(per_shard[0] + per_shard[1]) == expected


def _image_example(s, i):
    from ofindex.proto import example_pb2

    ex = example_pb2.Example()
    f = ex.features.feature
    f["jpeg"].bytes_list.value.append(bytes([s, i % 256]) * (50 + 37 * i))  # sizes differ
    f["label"].int64_list.value.append(s * 1000 + i)
    f["x"].float_list.value.extend([float(i)] * 3)
    return ex.SerializeToString()


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from tests.kit.helpers import write_shards

    d = write_shards(tmp_path_factory.mktemp("grain-img"), [23, 18], _image_example)
    return ofindex.open(os.path.join(d, "part-*.tfrecord"))


def test_grain_workers_deliver_what_the_main_process_decodes(images):
    """Batches made in mp_prefetch worker processes (on their shared-memory ring, sent as
    references) equal those made in the main process, and stay intact when kept."""
    import mmap

    import grain as grain_api
    import numpy as np

    from ofindex.decode import BatchDecoder, FixedLen
    from ofindex.integrations.grain import GrainBatches

    spec = {"jpeg": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
            "x": FixedLen((3,), "float32")}
    batches = GrainBatches(images, 4, BatchDecoder(spec), seed=2, pack_bytes=True)
    want = list(batches.until_epoch(2).to_iter_dataset())
    got = list(batches.until_epoch(2).to_iter_dataset().mp_prefetch(
        grain_api.MultiprocessingOptions(num_workers=2)))
    assert len(got) == len(want) == 2 * len(batches)
    # the packed bytes arrived as views of the workers' blocks, mapped here (not pickled)
    assert all(isinstance(a["jpeg"].values.base.base.obj, mmap.mmap) for a in got)
    for a, b in zip(got, want, strict=True):  # all kept until now: none was overwritten
        assert a["jpeg"] == b["jpeg"]
        assert np.array_equal(a["label"], b["label"]) and np.array_equal(a["x"], b["x"])


def test_grain_batches_read_whole_batches_with_few_threads(images):
    from ofindex.integrations.grain import GrainBatches, batch_read_options

    batches = GrainBatches(images, 4)
    for derived in (batches, batches.repeat(2), batches[1:3], batches.until_epoch(2)):
        assert len(derived) >= 2 and isinstance(derived[0], list)
        options = derived.to_iter_dataset()._read_options
        assert options == batch_read_options()
        assert options.num_threads == 1 and options.prefetch_buffer_size == 2


def test_grain_mixture_workers_deliver_what_the_main_process_decodes(images):
    """GrainMixture batches made in an mp_prefetch worker (numeric outputs on its ring) equal
    those made in the main process."""
    import grain as grain_api
    import numpy as np

    from ofindex.decode import BatchDecoder, FixedLen
    from ofindex.integrations.grain_mixing import GrainMixture
    from ofindex.shuffle import MixtureSampler

    spec = {"label": FixedLen((), "int64"), "x": FixedLen((3,), "float32")}
    sources = [images, images]
    batches = GrainMixture(sources, MixtureSampler(sources, [0.5, 0.5], 6, seed=1),
                           BatchDecoder(spec))
    want = list(batches.until_epoch(1).to_iter_dataset())
    got = list(batches.until_epoch(1).to_iter_dataset().mp_prefetch(
        grain_api.MultiprocessingOptions(num_workers=1)))
    assert len(got) == len(want) > 2
    for a, b in zip(got, want, strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in ("label", "x", "source"))
