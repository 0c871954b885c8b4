"""``ofindex plan`` and :mod:`ofindex.planning`: the stores' limits and prices, the request
model of a reader's batches, and the choice of a shuffle under a store's limit."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from ofindex.cli.synthetic import write_dataset
from ofindex.planning import (
    DatasetShape,
    plan_for,
    plan_shuffle,
    store_for_url,
    store_limits,
)
from ofindex.planning.advice import choose, mixing_spread, scopes_of
from ofindex.planning.requests import batch_requests, reader_batches
from ofindex.shuffle import GlobalShuffleOrder, Mixing, SequentialOrder


def test_the_stores_limits_prices_and_overrides():
    s3, gcs = store_limits("s3"), store_limits("gcs")
    assert (s3.reads_per_second, s3.scope, s3.throttle_answer) == (5500, "prefix", "503 SlowDown")
    assert s3.dollars(1_000_000) == pytest.approx(0.4) and "amazon" in s3.source
    assert gcs.rate_after(0) == 5000 and gcs.rate_after(1200) == 10000
    assert gcs.rate_after(2400) == 20000 and s3.rate_after(1e6) == 5500
    assert store_limits("s3", reads_per_second=100, rtt=None).reads_per_second == 100
    assert math.isinf(store_limits("local").reads_per_second)
    for url, kind in (("s3://b/k", "s3"), ("gs://b/k", "gcs"), ("https://h/x", "http"),
                      ("data/", "local"), ("file:///x", "local"), ("abfs://c/x", "http")):
        assert store_for_url(url) == kind
    with pytest.raises(ValueError, match="unknown store 'r2'"):
        store_limits("r2")
    with pytest.raises(ValueError, match="reads_per_second must be positive"):
        store_limits("s3", reads_per_second=0)
    with pytest.raises(ValueError, match="unknown store setting 'speed'"):
        store_limits("s3", speed=1.0)


def test_scopes_are_prefixes_for_s3_and_buckets_for_gcs():
    urls = ["s3://b/a/part-0", "s3://b/a/part-1", "s3://b/c/part-0"]
    assert scopes_of(urls, store_limits("s3")) == 2
    assert scopes_of(urls, store_limits("gcs")) == 1
    assert scopes_of(urls, store_limits("http")) == 1


SHAPE = DatasetShape.of([100_000] * 100, [100_000 * 216] * 100)


def test_a_sequential_batch_is_one_range_and_a_global_one_a_range_per_record():
    s3 = store_limits("s3")
    seq = reader_batches(SequentialOrder(SHAPE.records), SHAPE.records, 1, 256, 4)
    cost = batch_requests(SHAPE, seq, s3)
    assert cost.data_requests == 1 and cost.data_bytes == cost.useful_bytes == 256 * 216
    glob = reader_batches(GlobalShuffleOrder(SHAPE.records, seed=2), SHAPE.records, 1, 256, 4)
    cost = batch_requests(SHAPE, glob, s3)
    # 1e7 records: two of a batch fall within the 256 KiB gap of each other only rarely
    assert 240 <= cost.data_requests <= 256
    # 216-byte records: 32 per page, 312,500 pages; the 256 MB page cache holds 645k of them
    assert cost.index_requests == 0
    huge = DatasetShape.of([10**7] * 1000, [10**7 * 216] * 1000)
    glob = reader_batches(GlobalShuffleOrder(huge.records, seed=2), huge.records, 1, 256, 4)
    cost = batch_requests(huge, glob, s3)
    miss = 1 - (256 << 20) / (8 * 32 + 160) / (1e10 / 32)
    assert cost.index_requests == pytest.approx(256 * miss, rel=0.02)  # every page a miss
    seq = reader_batches(SequentialOrder(huge.records), huge.records, 1, 256, 4)
    cost = batch_requests(huge, seq, s3)  # 8 new consecutive pages a batch: one request
    assert cost.index_requests == pytest.approx(miss) and cost.data_requests == 1


def test_the_strided_split_gives_each_reader_every_readers_th_position():
    order = SequentialOrder(10_000)
    got = reader_batches(order, 10_000, 8, 16, 2, rank=3)
    assert np.array_equal(got[0], np.arange(16) * 8 + 3)
    assert np.array_equal(got[1], (np.arange(16, 32)) * 8 + 3)


BLOCKS = [64, 1024, 16384]


def test_the_plan_picks_the_best_mixed_order_that_reaches_the_target():
    s3 = store_limits("s3")
    one = plan_shuffle(SHAPE, s3, 1, 1000, block_sizes=BLOCKS)
    glob = one.candidates[0]
    assert glob.order == "global" and glob.mixing.value == pytest.approx(1.0, abs=0.02)
    assert not glob.throttled
    seconds = glob.batch_seconds
    assert glob.records_per_s == pytest.approx(256 / seconds)
    assert one.chosen is glob  # one reader is under the limit: the full shuffle
    many = plan_shuffle(SHAPE, s3, 256, 4000, block_sizes=BLOCKS)
    glob = many.candidates[0]
    assert glob.throttled and glob.requests_per_s == 5500
    assert glob.records_per_s == pytest.approx(5500 * 256 / glob.per_batch.requests)
    assert glob.dollars_per_million == pytest.approx(
        glob.per_batch.requests / 256 * 1e6 * 0.0004 / 1000)
    chosen = many.chosen
    assert chosen is not None and chosen.records_per_s >= 4000
    better = [c for c in many.candidates if c.records_per_s >= 4000]
    best = max(better, key=lambda c: c.mixing.value)
    assert best.mixing.value - chosen.mixing.value <= 3 * max(
        mixing_spread(best.mixing), mixing_spread(chosen.mixing))
    assert chosen.records_per_s == max(c.records_per_s for c in better if best.mixing.value -
                                       c.mixing.value <= 3 * max(mixing_spread(best.mixing),
                                                                 mixing_spread(c.mixing)))
    assert "BlockShuffleSampler" in many.advice() or "GlobalShuffleSampler" in many.advice()
    hopeless = plan_shuffle(SHAPE, s3, 256, 1e9, block_sizes=BLOCKS)
    assert hopeless.chosen is None and "no order reaches" in hopeless.advice()
    two_prefixes = DatasetShape.of(SHAPE.shard_records, SHAPE.shard_bytes, scopes=2)
    assert plan_shuffle(two_prefixes, s3, 256, 1, block_sizes=[]).candidates[0].limit == 11000
    with pytest.raises(ValueError, match="readers"):
        plan_shuffle(SHAPE, s3, 0, 1)
    with pytest.raises(ValueError, match="target"):
        plan_shuffle(SHAPE, s3, 1, 0)


def test_a_mixing_higher_by_noise_does_not_win_over_a_faster_order():
    """Found on TFX's files (31,496 records): a block shuffle whose window held the whole
    dataset measured 1.0031 against the full shuffle's 1.0000, and was advised although it
    read 117,333 records/s against 128,000. The measure's spread there: 0.4 %."""
    plan = plan_shuffle(SHAPE, store_limits("s3"), 1, 1, block_sizes=BLOCKS)
    glob, block = plan.candidates[0], plan.candidates[-1]
    pairs = 31_495

    def as_(c, value, records_per_s, dollars=0.02):
        return dataclasses.replace(c, mixing=Mixing(value, 0.0, pairs),
                                   records_per_s=records_per_s, dollars_per_million=dollars)

    assert mixing_spread(Mixing(1.0, 0.0, pairs)) == pytest.approx(0.00398, rel=1e-2)
    full, noisy = as_(glob, 1.0, 128_000), as_(block, 1.0031, 117_333)
    assert choose([full, noisy]) is full and choose([noisy, full]) is full
    better = as_(block, 1.05, 117_333)  # 12 spreads above: really better mixed
    assert choose([full, better]) is better
    worse_but_faster = as_(block, 0.9, 500_000)
    assert choose([full, worse_but_faster]) is full
    same_speed = as_(block, 1.001, 128_000, dollars=0.02)
    assert choose([same_speed, full]) is full  # a tie all through: the simplest order
    cheaper = as_(block, 1.001, 128_000, dollars=0.01)
    assert choose([full, cheaper]) is cheaper
    assert choose([]) is None
    sampled = Mixing(1.0, 0.01, 100)  # a sampled measure adds its standard error
    assert mixing_spread(sampled) == pytest.approx(math.sqrt(0.005) + 0.01)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    write_dataset(str(root / "data"), 4000, 4)
    return str(root / "data")


def test_plan_for_a_dataset_reads_its_shards_and_the_cli_prints_it(dataset):
    plan = plan_for(dataset, 16, 100, store="gcs", limits={"reads_per_second": 50.0},
                    block_sizes=[16, 64])
    assert plan.store.name == "gcs" and plan.store.reads_per_second == 50
    assert [c.name for c in plan.candidates] == ["global", "block 16", "block 64"]
    assert plan_for(dataset, 1, 100).store.name == "local"
    cmd = [sys.executable, "-m", "ofindex", "plan", dataset, "--store", "s3", "--readers",
           "64", "--target", "100", "--block-sizes", "16,64", "--json"]
    got = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert got["store"] == "s3" and len(got["candidates"]) == 3 and got["chosen"] is not None
    text = subprocess.run(cmd[:-1], capture_output=True, text=True, check=True).stdout
    assert "5,500 reads/s per prefix" in text and "use " in text
    bad = subprocess.run([*cmd[:-3], "--block-sizes", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "positive numbers" in bad.stderr
