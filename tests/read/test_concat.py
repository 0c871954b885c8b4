"""Datasets opened apart, read as one (ofindex.read.concat): what a mixture's batches go through.

The concatenation must read exactly the records of its sources (checked against the bytes
written, not against another ofindex read), refuse to join datasets that read differently,
and keep every trust check of its sources: a data file replaced since its dataset was opened
is refused through the concatenation too. Joining joins shard lists: each shard is read
through the storage of its own data file (its source's) by the access its source binds it
to, so sources on storages of other settings join too.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import ofindex
from ofindex.errors import StaleIndexError
from ofindex.integrations._mixed_source import MixedSource
from ofindex.read.concat import concatenated
from tests.kit.helpers import need, write_shards

SIZES = [[40, 25], [7], [60, 3, 12]]


def _record(source: int):
    return lambda shard, i: f"source {source} shard {shard} record {i}".encode() * (1 + i % 5)


@pytest.fixture
def sources(tmp_path):
    """Three datasets on disk and the records each holds, in order."""
    dirs, expected = [], []
    for s, sizes in enumerate(SIZES):
        d = write_shards(tmp_path / f"src{s}", sizes, _record(s))
        ofindex.build_index(d)
        dirs.append(d)
        expected.append([_record(s)(shard, i) for shard, n in enumerate(sizes)
                         for i in range(n)])
    return dirs, expected


def test_the_concatenation_reads_the_records_of_its_sources_in_order(sources):
    dirs, expected = sources
    flat = [rec for part in expected for rec in part]
    joined = concatenated([ofindex.open(d) for d in dirs])
    assert joined is not None and len(joined) == len(flat)
    indices = np.random.default_rng(3).integers(0, len(flat), 500)
    assert joined.__getitems__(indices) == [flat[i] for i in indices]
    assert [joined[i] for i in range(len(flat))] == flat
    assert list(joined) == flat


@pytest.mark.parametrize("differs", ["verify", "decode", "format", "max_read_bytes"])
def test_datasets_that_read_differently_are_not_joined(sources, tmp_path, differs):
    dirs, _ = sources
    first = ofindex.open(dirs[0])
    if differs == "format":
        path = str(tmp_path / "ofrecords" / "part-0")
        os.makedirs(os.path.dirname(path))
        with ofindex.Writer(path, format="ofrecord") as writer:
            writer.write(b"an ofrecord")
        other = ofindex.open(path)
    else:
        options = {"verify": {"verify": False}, "decode": {"decode": bytes.upper},
                   "max_read_bytes": {}}[differs]
        other = ofindex.open(dirs[1], **options)
        if differs == "max_read_bytes":
            other.max_read_bytes = 1 << 20
    assert concatenated([first, other]) is None
    # a mixture over them still reads each source on its own
    mixed = MixedSource([first, other])
    assert mixed.joined is None
    assert mixed.__getitems__([len(first), 0]) == [other[0], first[0]]


def test_one_dataset_is_its_own_concatenation_and_none_is_an_error(sources):
    ds = ofindex.open(sources[0][0])
    assert concatenated([ds]) is ds
    with pytest.raises(ValueError):
        concatenated([])


def test_sources_on_storages_of_other_settings_join_and_each_shard_keeps_its_own(sources,
                                                                                impl):
    """``mmap=False`` beside memory maps: one concatenation, each shard read through its own
    source's storage by its source's access (maps, descriptors), every read path."""
    from ofindex.read.access import DescriptorAccess, MappedAccess

    dirs, expected = sources
    flat = [rec for part in expected for rec in part]
    datasets = [ofindex.open(dirs[0]), ofindex.open(dirs[1], mmap=False), ofindex.open(dirs[2])]
    joined = concatenated(datasets)
    assert joined is not None
    shards = joined._table.shards
    owners = [ds for ds in datasets for _ in ds._table.shards]
    assert [shard.storage for shard in shards] == [ds._table.storage for ds in owners]
    assert all(a is b for a, b in zip(shards, [s for ds in datasets for s in ds._table.shards],
                                      strict=True))
    kinds = {type(joined._accesses.of(k)) for k in range(len(shards))}
    assert kinds == ({MappedAccess, DescriptorAccess} if impl == "compiled"
                     else {DescriptorAccess})
    indices = np.random.default_rng(8).integers(0, len(flat), 300)
    assert joined.__getitems__(indices) == [flat[i] for i in indices]
    assert [joined[i] for i in range(len(flat))] == flat
    assert joined[5:70] == flat[5:70]
    assert list(joined) == flat
    assert [r for batch in joined.iter_batches(16) for r in batch] == flat


def test_a_data_file_replaced_after_open_is_refused_through_the_concatenation(sources):
    dirs, expected = sources
    datasets = [ofindex.open(d) for d in dirs]
    mixed = MixedSource(datasets)
    assert mixed.joined is not None
    # source 2 reads first through its own dataset: its sidecar is loaded (shared with the
    # concatenation) and its storage (the one its shards carry into the concatenation)
    # learns the data file's stamp
    assert datasets[2][0] == expected[2][0]
    # replace source 2's first shard by rename with a file of the same size: other bytes
    victim = os.path.join(dirs[2], sorted(n for n in os.listdir(dirs[2]))[0])
    with open(victim, "rb") as handle:
        data = handle.read()
    with open(victim + ".new", "wb") as handle:
        handle.write(data.replace(b"source 2", b"SOURCE 2"))
    os.replace(victim + ".new", victim)
    # the source's storage lets go of its handles (closed, or beyond its bound of open
    # files): the file is opened again, and only the stamps it learnt can catch the
    # replacement (the sidecar is still loaded)
    datasets[2]._table.storage.close()
    first_of_source_2 = int(mixed.offsets[2])
    with pytest.raises(StaleIndexError, match="replaced"):
        mixed.__getitems__([0, first_of_source_2])
    with pytest.raises(StaleIndexError):
        mixed[first_of_source_2]
    assert mixed[0] == expected[0][0]  # the files not replaced still read


def test_the_concatenation_reads_through_the_storages_of_its_sources(sources):
    """No storage is rebuilt: what a source's storage learns later (the stamps of the files
    it opens) is what the concatenation's reads are checked against."""
    dirs, _ = sources
    datasets = [ofindex.open(d) for d in dirs]
    joined = concatenated(datasets)
    assert joined is not None
    storages = {id(shard.storage) for shard in joined._table.shards}
    assert storages == {id(ds._table.storage) for ds in datasets}


def test_a_pickled_mixture_reads_the_same_and_keeps_its_storages_shared(sources):
    dirs, expected = sources
    flat = [rec for part in expected for rec in part]
    mixed = pickle.loads(pickle.dumps(MixedSource([ofindex.open(d) for d in dirs])))
    assert mixed.joined is not None
    assert mixed.__getitems__(list(range(len(flat)))[::-1]) == flat[::-1]
    shards = mixed.joined._table.shards
    owners = [src for src in mixed.sources for _ in src._table.shards]
    assert all(shard.storage is src._table.storage
               for shard, src in zip(shards, owners, strict=True))


def test_mixture_batches_read_through_the_concatenation(sources):
    torch = need("torch", "torch")
    from ofindex.integrations.torch import MixtureBatches, MixtureSampler

    dirs, expected = sources
    datasets = [ofindex.open(d) for d in dirs]
    data = MixtureBatches(datasets)
    assert data._fetch.source is data.mixed.joined
    sampler = MixtureSampler(datasets, [0.5, 0.3, 0.2], 16, seed=4)
    offsets = np.cumsum([0] + [len(part) for part in expected])
    for indices in sampler:
        batch = data[indices]
        which = batch["source"].tolist()
        assert batch["records"] == [expected[s][i - offsets[s]]
                                    for s, i in zip(which, indices, strict=True)]
    with pytest.raises(IndexError, match="outside the mixture"):
        data[[int(offsets[-1])]]
    assert isinstance(data[[0, 1]]["source"], torch.Tensor)


def test_remote_datasets_of_one_store_are_joined(sources, remote_backend):
    dirs, expected = sources
    urls = []
    for d in dirs:
        url = remote_backend.prefix()
        remote_backend.upload(d, url)
        urls.append(url)
    options = remote_backend.storage_options
    datasets = [ofindex.open(url, storage_options=options) for url in urls]
    mixed = MixedSource(datasets)
    assert mixed.joined is not None
    flat = [rec for part in expected for rec in part]
    indices = np.random.default_rng(5).permutation(len(flat))[:80]
    assert mixed.__getitems__(indices) == [flat[i] for i in indices]
    # other retry settings: another storage, still joined (each shard reads through its own)
    other = ofindex.open(urls[1], storage_options=options, retries=1)
    both = MixedSource([datasets[0], other])
    assert both.joined is not None
    indices = np.random.default_rng(6).permutation(len(both))[:60]
    first_two = [rec for part in expected[:2] for rec in part]
    assert both.__getitems__(indices) == [first_two[i] for i in indices]


def test_closing_a_source_closes_the_handles_read_through_the_mixture(sources):
    dirs, expected = sources
    datasets = [ofindex.open(d) for d in dirs]
    mixed = MixedSource(datasets)
    assert mixed.__getitems__([0, int(mixed.offsets[2])]) == [expected[0][0], expected[2][0]]
    def maps() -> list[int]:  # the sources' storages: the joined dataset's shards read
        return [len(ds._table.storage._maps) for ds in datasets]  # through them

    assert maps() == [1, 0, 1]
    datasets[2].close()
    assert maps() == [1, 0, 0]
    assert mixed[int(mixed.offsets[2])] == expected[2][0]  # reopened on the next read
    mixed.joined.close()  # closing the concatenation lets go of every source's handles
    assert maps() == [0, 0, 0]
    assert mixed[0] == expected[0][0]
    # pickled, each storage is on its own: closing a source closes nothing else
    copy = pickle.loads(pickle.dumps(mixed))
    copy[0]
    copy.sources[2].close()
    assert len(copy.sources[0]._table.storage._maps) == 1
