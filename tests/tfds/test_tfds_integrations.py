"""PyTorch and Grain over ofindex.open_tfds: batched steps through a DataLoader with worker
processes (equal to ``steps.batch`` of the sampler's indices), episodes padded or ragged,
Grain batches of steps covering an epoch once and resuming from an iterator state."""

from __future__ import annotations

import numpy as np
import pytest

import ofindex
from tests.kit.helpers import need

need("tensorflow_datasets", "tensorflow-datasets")
torch = need("torch", "torch")
from torch.utils.data import DataLoader  # noqa: E402

from ofindex.integrations.tfds_torch import TfdsBatches  # noqa: E402
from ofindex.integrations.torch import (  # noqa: E402
    BatchSampler,
    GlobalShuffleSampler,
    RaggedTensors,
)


@pytest.fixture(scope="module")
def rlds(tfds_dirs):
    with ofindex.open_tfds(tfds_dirs["rlds_family"], split="val") as ds:
        yield ds


def test_step_batches_through_a_dataloader_with_workers(rlds):
    data = TfdsBatches(rlds.steps)
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=5), 16, drop_last=True)
    expected = [list(b) for b in sampler]
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=2)
    got = list(loader)
    assert len(got) == len(expected) == len(rlds.steps) // 16
    for batch, indices in zip(got, expected, strict=True):
        want = rlds.steps.batch(indices)
        assert batch["observation"]["image"].dtype == torch.uint8
        assert tuple(batch["observation"]["image"].shape) == (16, 16, 16, 3)
        np.testing.assert_array_equal(batch["observation"]["image"].numpy(),
                                      want["observation"]["image"])
        np.testing.assert_array_equal(batch["action"].numpy(), want["action"])
        assert batch["is_first"].dtype == torch.bool
        assert list(batch["language_instruction"]) == list(want["language_instruction"])
        assert [c.tolist() for c in batch["contacts"]] == [c.tolist() for c in want["contacts"]]


@pytest.mark.parametrize("layout", ["padded", "ragged"])
def test_episode_batches_padded_or_ragged(rlds, layout):
    data = TfdsBatches(rlds, episodes=layout)
    picks = [4, 0, 9]
    batch = data[picks]
    lengths = rlds.step_counts[picks]
    assert batch["steps_length"].tolist() == lengths.tolist()
    episodes = rlds.__getitems__(picks)
    action = batch["steps"]["action"]
    if layout == "padded":
        assert tuple(action.shape) == (3, int(lengths.max()), 3)
        for k, episode in enumerate(episodes):
            n = int(lengths[k])
            np.testing.assert_array_equal(action[k, :n].numpy(), episode["steps"]["action"])
            assert not action[k, n:].any()
            assert batch["steps"]["is_first"][k, 0] and not batch["steps"]["is_first"][k, n:].any()
    else:
        assert isinstance(action, RaggedTensors)
        np.testing.assert_array_equal(
            action.values.numpy(), np.concatenate([e["steps"]["action"] for e in episodes]))
        assert action.row_lengths.tolist() == lengths.tolist()
    assert batch["episode_metadata"]["episode_id"].tolist() == [
        int(e["episode_metadata"]["episode_id"]) for e in episodes]
    with pytest.raises(ValueError, match="episodes='stacked'"):
        TfdsBatches(rlds, episodes="stacked")


def test_grain_step_batches_cover_the_epoch_and_resume(rlds):
    need("grain", "grain")
    from ofindex.integrations.tfds_grain import step_batches

    states = {s["observation"]["state"].tobytes() for s in rlds.steps}
    batches = step_batches(rlds.steps, 8, seed=3)
    assert len(batches) == len(rlds.steps) // 8
    seen = [s.tobytes() for b in batches for s in b["observation"]["state"]]
    assert len(seen) == len(set(seen)) == len(batches) * 8
    assert set(seen) <= states
    iterator = iter(batches.to_iter_dataset())
    next(iterator)
    state = iterator.get_state()
    after = next(iterator)
    again = iter(batches.to_iter_dataset())
    again.set_state(state)
    np.testing.assert_array_equal(next(again)["action"], after["action"])
