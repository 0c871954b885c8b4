"""RLDS episodes and steps of ofindex.open_tfds: ``ds.steps`` against the steps TFDS yields
(``as_dataset(...).flat_map(steps)``), step counts stored by the first open and read (not
counted) by the next, history windows, and the samplers over steps: every step exactly once
per epoch over W ranks x K DataLoader workers, resumed with other W and K; a weighted
mixture of two RLDS datasets."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

import ofindex
from ofindex.errors import RecordIndexError, SidecarError
from ofindex.shuffle import GlobalShuffleSampler, MixtureSampler
from ofindex.tfds import episodes as episodes_module
from ofindex.tfds.blend import Blend
from tests.kit.helpers import need

need("tensorflow_datasets", "tensorflow-datasets")
from tests.kit.tfds_compare import assert_same, tfds_examples, tfds_steps  # noqa: E402


@pytest.fixture(scope="module")
def rlds(tfds_dirs):
    return tfds_dirs["rlds_family"]


@pytest.mark.parametrize("split", ["train", "train[10:50]+val", "val[-30%:]"])
def test_steps_are_tfds_steps_in_order(rlds, split):
    expected = tfds_steps(rlds, split)
    with ofindex.open_tfds(rlds, split=split) as ds:
        steps = ds.steps
        assert len(steps) == len(expected)
        for j, theirs in enumerate(expected):
            assert_same(steps[j], theirs, f"{split} step {j}")
        picks = [len(steps) - 1, 0, 5, 5, len(steps) // 2]
        for j, step in zip(picks, steps.__getitems__(picks), strict=True):
            assert_same(step, expected[j], f"{split} item {j}")
        assert_same(steps[-1], expected[-1])


def test_locate_and_step_counts(rlds):
    episodes = tfds_examples(rlds, "val")
    with ofindex.open_tfds(rlds, split="val") as ds:
        lengths = [len(e["steps"]["is_first"]) if isinstance(e["steps"], dict) else
                   len(list(e["steps"])) for e in episodes]
        assert ds.step_counts.tolist() == lengths
        episode, step = ds.steps.locate(np.arange(len(ds.steps)))
        assert episode.tolist() == [e for e, n in enumerate(lengths) for _ in range(n)]
        assert step.tolist() == [t for n in lengths for t in range(n)]


def test_batch_stacks_steps_and_window_stays_in_its_episode(rlds):
    with ofindex.open_tfds(rlds, split="val") as ds:
        steps = ds.steps
        picks = [7, 3, 3, len(steps) - 1]
        batch = steps.batch(picks)
        assert batch["observation"]["image"].shape == (4, 16, 16, 3)
        assert batch["action"].dtype == np.float64 and batch["action"].shape == (4, 3)
        for k, j in enumerate(picks):
            one = steps[j]
            np.testing.assert_array_equal(batch["observation"]["image"][k],
                                          one["observation"]["image"])
            assert batch["contacts"][k].tolist() == one["contacts"].tolist()
            assert batch["language_instruction"][k] == one["language_instruction"]
        first = int(np.flatnonzero(ds.step_counts > 3)[0])
        start = int(ds.step_counts[:first].sum())
        history = steps.window(start + 3, 3)  # steps 1, 2, 3 of the episode
        np.testing.assert_array_equal(history["action"],
                                      steps.batch([start + 1, start + 2, start + 3])["action"])
        head = steps.window(start, 4)  # the episode's first step: no step of another one
        assert head["is_first"].tolist() == [True]
        with pytest.raises(RecordIndexError):
            steps.window(len(steps), 2)


def test_step_counts_are_stored_and_read_not_counted(rlds, tmp_path, monkeypatch):
    index_dir = str(tmp_path / "index")
    with ofindex.open_tfds(rlds, split="train", index_dir=index_dir) as ds:
        expected = ds.step_counts.copy()
    stored = glob.glob(os.path.join(index_dir, "**", "ofindex-tfds-steps-*.npy"),
                       recursive=True)
    assert len(stored) == 1

    def no_scan(*args, **kwargs):
        raise AssertionError("the steps were counted again at open")

    monkeypatch.setattr(episodes_module, "build_step_counts", no_scan)
    monkeypatch.setattr("ofindex.tfds.split_dataset.build_step_counts", no_scan)
    with ofindex.open_tfds(rlds, split="train", index_dir=index_dir,
                           build_missing=False) as ds:
        assert ds.step_counts.tolist() == expected.tolist()
    with open(stored[0], "r+b") as f:
        f.truncate(20)
    with pytest.raises(SidecarError, match="damaged step counts"):
        ofindex.open_tfds(rlds, split="train", index_dir=index_dir)
    os.unlink(stored[0])
    with pytest.raises(SidecarError, match="not counted yet"):
        ofindex.open_tfds(rlds, split="train", index_dir=index_dir, build_missing=False)


def test_examples_without_steps_have_no_steps_view(tfds_dirs):
    with ofindex.open_tfds(tfds_dirs["order_family"], split="val") as ds, \
            pytest.raises(ofindex.StateError, match="no Dataset feature"):
        _ = ds.steps


def _key(step) -> bytes:
    """A step's identity: its state vector (random floats, distinct for every step)."""
    return step["observation"]["state"].tobytes()


def _run(steps, world, workers, epoch, batches_state=None, stop_after=None):
    """One epoch of W ranks over a DataLoader of K workers each; returns the step keys
    trained and, when stopped early, every rank's checkpoint."""
    from torch.utils.data import DataLoader

    from ofindex.shuffle import BatchSampler, ResumableLoader

    trained, states = [], []
    for rank in range(world):
        sampler = BatchSampler(GlobalShuffleSampler(steps, num_replicas=world, rank=rank,
                                                    seed=7, drop_last=False), 8)
        loader = ResumableLoader(DataLoader(steps, batch_sampler=sampler, num_workers=workers,
                                            collate_fn=lambda batch: batch))
        if batches_state is not None:
            loader.load_state_dict(batches_state)
        loader.set_epoch(epoch)
        for n, batch in enumerate(loader):
            trained.extend(_key(s) for s in batch)
            if stop_after is not None and n + 1 == stop_after:
                states.append(loader.state_dict())
                break
    return trained, states


@pytest.mark.filterwarnings("ignore:.*do not split evenly:UserWarning")
def test_every_step_once_per_epoch_over_ranks_and_workers_resumed_otherwise(rlds):
    need("torch", "torch")
    with ofindex.open_tfds(rlds, split="val") as ds:
        steps = ds.steps
        every = sorted(_key(s) for s in steps.__getitems__(np.arange(len(steps))))
        whole, _ = _run(steps, world=2, workers=2, epoch=0)
        assert sorted(set(whole)) == every  # all of them (a few repeated to even the ranks)
        assert len(whole) - len(every) < 2
        # one rank, stopped after 3 batches, resumed on 3 ranks with 1 worker each
        first, states = _run(steps, world=1, workers=2, epoch=1, stop_after=3)
        rest, _ = _run(steps, world=3, workers=1, epoch=1, batches_state=states[0])
        assert sorted(set(first + rest)) == every
        # only the padding that evens the remaining steps over 3 ranks repeats a step
        assert len(first) + len(rest) - len(every) == (-(len(every) - len(first))) % 3


def test_weighted_mixture_of_two_rlds_datasets(rlds):
    with ofindex.open_tfds(rlds, split="val") as small, \
            ofindex.open_tfds(rlds, split="train[:20]") as big:
        views = [small.steps, big.steps]
        sampler = MixtureSampler(views, [1, 3], batch_size=8, seed=3)
        blend = Blend(views)
        sources_seen = np.zeros(2, dtype=np.int64)
        for n, batch in enumerate(sampler):
            source, local = blend.source_of(batch)
            assert np.bincount(source, minlength=2).tolist() == [2, 6]  # exact per batch
            sources_seen += np.bincount(source, minlength=2)
            got = blend.__getitems__(batch)
            for k in range(len(batch)):
                want = views[int(source[k])][int(local[k])]
                assert _key(got[k]) == _key(want)
            if n == 4:
                break
        state = sampler.state_dict()
        whole = MixtureSampler(views, [1, 3], batch_size=8, seed=3)
        batches = [list(b) for _, b in zip(range(8), whole, strict=False)]
        again = MixtureSampler(views, [1, 3], batch_size=8, seed=3)
        again.load_state_dict(state)
        assert [list(b) for _, b in zip(range(3), again, strict=False)] == batches[5:8]


def test_history_repeats_the_first_step_before_an_episode_starts(rlds):
    with ofindex.open_tfds(rlds, split="val") as ds:
        steps = ds.steps
        first = int(np.flatnonzero(ds.step_counts > 3)[0])
        start = int(ds.step_counts[:first].sum())  # the episode's first step
        out = steps.history([start + 3, start + 1, start], 3)
        assert out["mask"].tolist() == [[True, True, True], [False, True, True],
                                        [False, False, True]]
        want = [[start + 1, start + 2, start + 3], [start, start, start + 1],
                [start, start, start]]
        for row, positions in enumerate(want):
            np.testing.assert_array_equal(out["action"][row], steps.batch(positions)["action"])
            np.testing.assert_array_equal(out["observation"]["image"][row],
                                          steps.batch(positions)["observation"]["image"])
            assert [c.tolist() for c in out["contacts"][row]] == [
                c.tolist() for c in steps.batch(positions)["contacts"]]
        assert out["observation"]["image"].shape == (3, 3, 16, 16, 3)
        with pytest.raises(ValueError, match="at least one step"):
            steps.history([0], 0)


def test_steps_read_through_the_layout_out_of_the_mapped_records(tfds_dirs, tmp_path,
                                                                  monkeypatch):
    """Steps of flat lists only: read out of the mapped records at the positions the first
    open found (the episodes are never parsed whole), equal to TFDS's steps."""
    path = tfds_dirs["rlds_plain"]
    expected = tfds_steps(path, "train")
    with ofindex.open_tfds(path, split="train", index_dir=str(tmp_path)) as ds:
        assert ds.step_layout is not None
        assert {k for k, _, _ in ds.step_layout.keys} == set(ds.plan.spec)

        def whole_records(*args, **kwargs):
            raise AssertionError("an episode was read whole")

        monkeypatch.setattr(ofindex.Dataset, "__getitems__", whole_records)
        steps = ds.steps
        picks = np.random.default_rng(0).permutation(len(steps))
        batch = steps.batch(picks)
        for k, j in enumerate(picks.tolist()):
            assert_same({name: _at(value, k) for name, value in batch.items()},
                        expected[j], f"step {j}")
        monkeypatch.undo()
    # a damaged layout file is not used: the steps are read from whole records
    stored = glob.glob(os.path.join(str(tmp_path), "**", "ofindex-tfds-layout-*.npz"),
                       recursive=True)
    assert len(stored) == 1
    with open(stored[0], "r+b") as f:
        f.truncate(100)
    with ofindex.open_tfds(path, split="train", index_dir=str(tmp_path)) as ds:
        assert ds.step_layout is None
        assert_same(ds.steps[len(ds.steps) - 1], expected[-1])


def _at(value, k):
    if isinstance(value, dict):
        return {name: _at(v, k) for name, v in value.items()}
    return value[k]


def test_varints_decode_as_protobuf_encodes_them():
    from ofindex.proto import example_pb2
    from ofindex.tfds.step_layout import decode_varints

    values = [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -2**63, -300]
    feature = example_pb2.Feature()
    feature.int64_list.value.extend(values)
    data = feature.int64_list.SerializeToString()
    assert data[0] == 0x0A  # packed: one length-delimited run
    packed = np.frombuffer(data[2:], dtype=np.uint8)
    assert decode_varints(packed).tolist() == values


def test_samplers_over_episodes_split_them_over_ranks(rlds):
    with ofindex.open_tfds(rlds, split="train") as ds:
        seen = []
        for rank in range(3):
            sampler = GlobalShuffleSampler(ds, num_replicas=3, rank=rank, seed=1,
                                           drop_last=True)
            seen += [int(e["episode_metadata"]["episode_id"])
                     for e in ds.__getitems__(list(sampler))]
        assert len(seen) == len(set(seen)) == len(ds) - len(ds) % 3
        assert sampler.dataset == ds.identity  # states name the split they were saved on


def test_a_damaged_step_is_caught_by_its_own_sum(tfds_dirs, tmp_path):
    """Steps read through the layout are checked by the CRC-32C of their own bytes (not the
    episode's record CRC, which would read the whole episode): a flipped byte in one image
    is a CorruptRecordError naming the record, the step and the feature."""
    import shutil

    copy = tmp_path / "rlds_plain" / "1.0.0"
    shutil.copytree(tfds_dirs["rlds_plain"], copy)
    index_dir = str(tmp_path / "index")
    with ofindex.open_tfds(str(copy), split="train", index_dir=index_dir) as ds:
        layout = ds.step_layout
        key = "steps/observation/image"
        record = int(ds.order[0])
        offset = int(layout.steps[key][0][layout.first_step[record]])
        where = ds.records.shards[0]
        shard, local = ds.records.locate(record)
        assert shard == 0
    # the image's bytes inside the first shard's file: find the record's payload
    with open(where.url, "rb") as f:
        data = f.read()
    with ofindex.open(where.url, index_dir=index_dir) as plain:
        payload = plain[local]
    start = data.index(payload) + offset + 100
    damaged = bytearray(data)
    damaged[start] ^= 0xFF
    with open(where.url, "r+b") as f:
        f.write(bytes(damaged))  # same size: the index is not stale by size
    with ofindex.open_tfds(str(copy), split="train", index_dir=index_dir,
                           check_stale=False) as ds:
        with pytest.raises(ofindex.CorruptRecordError, match=r"step 0: the bytes of "
                           r"'steps/observation/image' differ"):
            ds.steps.batch([0])
        first_of_next = int(ds.step_counts[0])
        ds.steps.batch([first_of_next])  # another episode reads fine
    with ofindex.open_tfds(str(copy), split="train", index_dir=index_dir,
                           check_stale=False, verify=False) as ds:
        ds.steps.batch([0])  # verify=False: not checked


def test_the_compiled_and_pure_walks_lay_the_steps_out_alike(tfds_dirs, tmp_path):
    """The step layout found by the compiled walk (ofindex.decode.lists, span_crcs) equals,
    array for array, the one the pure-Python walk finds in the same records."""
    from tests.kit.helpers import implementation

    layouts = {}
    for which in ("compiled", "pure"):
        with implementation(which), ofindex.open_tfds(
                tfds_dirs["rlds_plain"], split="train",
                index_dir=str(tmp_path / which)) as ds:
            assert ds.step_layout is not None
            layouts[which] = ds.step_layout.save()
    assert layouts["compiled"].keys() == layouts["pure"].keys()
    for name, array in layouts["compiled"].items():
        np.testing.assert_array_equal(array, layouts["pure"][name], err_msg=name)


def test_the_first_open_walks_the_episodes_where_they_lie_in_their_maps(tfds_dirs, tmp_path,
                                                                        monkeypatch):
    """The first open counts and lays out the steps in the memory-mapped records, checked
    in place (not copied out batch by batch): the same counts and layout as the copying
    walk the dataset takes without maps (``mmap=False``)."""
    path = tfds_dirs["rlds_plain"]
    with ofindex.open_tfds(path, split="train", index_dir=str(tmp_path / "copied"),
                           mmap=False) as ds:
        assert ds.step_layout is not None
        copied, counts = ds.step_layout.save(), ds.step_counts.copy()

    def copied_out(*args, **kwargs):
        raise AssertionError("the episodes were copied out to be walked")

    monkeypatch.setattr(ofindex.Dataset, "iter_batches", copied_out)
    with ofindex.open_tfds(path, split="train", index_dir=str(tmp_path / "mapped")) as ds:
        assert ds.step_layout is not None
        mapped = ds.step_layout.save()
        assert ds.step_counts.tolist() == counts.tolist()
    assert mapped.keys() == copied.keys()
    for name, array in mapped.items():
        np.testing.assert_array_equal(array, copied[name], err_msg=name)


@pytest.mark.parametrize("mmap", [True, False])
def test_a_damaged_episode_fails_the_first_open_naming_its_record(tfds_dirs, tmp_path, mmap):
    """A flipped byte inside an episode's image, found by the record's CRC while the first
    open walks the episodes (in their maps, or copied out): CorruptRecordError naming the
    file and the record, and nothing stored as the steps' counts or layout."""
    import shutil

    copy = tmp_path / "rlds_plain" / "1.0.0"
    shutil.copytree(tfds_dirs["rlds_plain"], copy)
    shard = sorted(glob.glob(str(copy / "*train.tfrecord*")))[0]
    with open(shard, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0xFF  # inside a payload: the records are images, mostly
    with open(shard, "wb") as f:
        f.write(bytes(data))
    index_dir = str(tmp_path / "index")
    with pytest.raises(ofindex.CorruptRecordError, match=r"record \d+"):
        ofindex.open_tfds(str(copy), split="train", index_dir=index_dir, mmap=mmap)
    assert not glob.glob(os.path.join(index_dir, "**", "ofindex-tfds-*"), recursive=True)


def _damaged_copy(tfds_dirs, tmp_path, where: str) -> tuple[str, int, str]:
    """A copy of ``rlds_family`` one of whose train records has one byte flipped: inside a
    step's image (``"span"``: a byte the step sums read) or inside the episode's metadata
    (``"gap"``: between the steps' spans, read only for the record's own CRC), found from
    the layout of an intact open, or in the CRC stored for its length or its data; the
    copy's path, the record's number in its file, and the intact open's index directory
    (its record index kept, its steps' files deleted)."""
    import shutil

    copy = tmp_path / "rlds_family" / "1.0.0"
    shutil.copytree(tfds_dirs["rlds_family"], copy)
    intact = str(tmp_path / "intact-index")
    with ofindex.open_tfds(str(copy), split="train", index_dir=intact) as ds:
        layout = ds.step_layout
        assert layout is not None
        # not a file's first record: the format is told from that one's length CRC
        record = next(int(r) for r in ds.order if ds.records.locate(int(r))[1] > 0)
        image = int(layout.steps["steps/observation/image"][0][layout.first_step[record]])
        shard, local = ds.records.locate(record)
        url = ds.records.shards[shard].url
    with ofindex.open(url, index_dir=intact) as plain:
        payload = plain[local]
    with open(url, "rb") as f:
        data = bytearray(f.read())
    inside = {"span": image + 100, "gap": payload.index(b"/data/train/") + 1,
              "length CRC": -2, "data CRC": len(payload) + 1}[where]
    data[data.index(payload) + inside] ^= 0xFF
    with open(url, "r+b") as f:
        f.write(bytes(data))  # same size: the index is not stale by size
    for name in glob.glob(os.path.join(intact, "**", "ofindex-tfds-*"), recursive=True):
        os.remove(name)
    return str(copy), local, intact


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("where", ["span", "gap", "length CRC", "data CRC"])
def test_a_byte_damaged_in_a_step_or_between_steps_fails_the_first_open(
        tfds_dirs, tmp_path, impl, mmap, where):
    """The first open checks each episode's own CRC from the pass that sums its steps (the
    gaps between the steps' spans summed, the spans' sums joined in): a byte flipped inside
    a step's image, in the episode's metadata between the spans, or in a stored CRC is a
    CorruptRecordError naming the file and the record, as the record's CRC check reports
    it, and nothing is stored as the steps' counts or layout (compiled and pure-Python
    walks, mapped or not; the records' index built before the damage, so that only the
    steps' first pass reads the records)."""
    path, local, index_dir = _damaged_copy(tfds_dirs, tmp_path, where)
    with pytest.raises(ofindex.CorruptRecordError, match=rf"record {local}\b.*CRC") as caught:
        ofindex.open_tfds(path, split="train", index_dir=index_dir, mmap=mmap,
                          check_stale=False)
    assert caught.value.record == local and "train.tfrecord" in str(caught.value)
    assert not glob.glob(os.path.join(index_dir, "**", "ofindex-tfds-*"), recursive=True)
