"""Decoders take the record kind from the dataset they are given (issue #29), and a record
decoded as the wrong kind says which kind to use."""

from __future__ import annotations

import numpy as np
import pytest

import ofindex
from ofindex.decode import BatchDecoder, Decoder, FixedLen
from ofindex.errors import DecodeError
from ofindex.write import ShardedWriter
from tests.kit.helpers import need, write_shards

SPEC = {"x": FixedLen((), "int64"), "v": FixedLen((3,), "float32")}
N = 60


def _columns():
    return {"x": np.arange(N, dtype=np.int64),
            "v": np.arange(3 * N, dtype=np.float32).reshape(N, 3)}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The same columns written as OFRecords (OFRecord files) and as Examples (TFRecord)."""
    root = tmp_path_factory.mktemp("kinds")
    paths = {}
    for framing in ("ofrecord", "tfrecord"):
        with ShardedWriter(str(root / framing), format=framing, shard_records=25) as writer:
            writer.write_columns(_columns())
        paths[framing] = str(root / framing)
    return paths


def test_open_with_a_decoder_without_kind_decodes_ofrecords(datasets):
    ds = ofindex.open(datasets["ofrecord"], decode=Decoder(SPEC))
    got = ds[17]
    assert got["x"] == 17 and got["v"].tolist() == [51.0, 52.0, 53.0]
    tf = ofindex.open(datasets["tfrecord"], decode=Decoder(SPEC))
    assert tf[17]["x"] == 17


def test_integrations_bind_the_kind_of_their_source(datasets):
    from ofindex.integrations.torch import MixtureBatches, TensorBatches

    of = ofindex.open(datasets["ofrecord"])
    batch = TensorBatches(of, BatchDecoder(SPEC))[[3, 40, 59]]
    assert batch["x"].tolist() == [3, 40, 59]
    assert batch["v"][1].tolist() == [120.0, 121.0, 122.0]
    # a mixture of OFRecord datasets, one decoder for all
    mixed = MixtureBatches([of, ofindex.open(datasets["ofrecord"])], BatchDecoder(SPEC))
    assert mixed[[1, N + 2]]["x"].tolist() == [1, 2]
    # a mixture of both framings: one decoder per source, each bound to its own
    both = MixtureBatches([of, ofindex.open(datasets["tfrecord"])],
                          [BatchDecoder(SPEC), BatchDecoder(SPEC)])
    parts = both[[5, N + 6]]["parts"]
    assert parts[0]["x"].tolist() == [5] and parts[1]["x"].tolist() == [6]


def test_torch_map_style_datasets_bind_the_kind_of_their_source(datasets):
    # TorchDataset(source, Decoder(spec)) decoded an OFRecord dataset's records as Examples
    # ("bytes are not a valid serialized Example"), record by record and in batches
    from tests.kit.helpers import need

    need("torch", "torch")
    from ofindex.integrations.torch import (
        SequentialSampler,
        ShuffledIterableDataset,
        TorchDataset,
    )

    of = ofindex.open(datasets["ofrecord"])
    data = TorchDataset(of, Decoder(SPEC))
    assert data[17]["x"] == 17 and data[17]["v"].tolist() == [51.0, 52.0, 53.0]
    assert [d["x"] for d in data.__getitems__([3, 59])] == [3, 59]
    assert TorchDataset(of, Decoder(SPEC, "ofrecord")).transform.kind == "ofrecord"
    assert TorchDataset(ofindex.open(datasets["tfrecord"]), Decoder(SPEC))[17]["x"] == 17
    stream = ShuffledIterableDataset(of, SequentialSampler(N), Decoder(SPEC), fetch_size=7)
    assert [d["x"] for d in stream] == list(range(N))


def test_ray_datasource_binds_the_kind(datasets):
    need("ray")
    from ofindex.integrations.ray import OfindexDatasource

    source = OfindexDatasource(ofindex.open(datasets["ofrecord"]), SPEC)
    assert source._decoder is not None and source._decoder.kind == "ofrecord"
    source = OfindexDatasource(ofindex.open(datasets["tfrecord"]), SPEC)
    assert source._decoder is not None and source._decoder.kind == "example"


def test_a_kind_given_is_kept(datasets):
    decoder = BatchDecoder(SPEC, "example")
    assert decoder.for_framing("OFRECORD") is decoder
    unbound = BatchDecoder(SPEC)
    assert unbound.for_framing("TFRECORD") is unbound
    assert unbound.for_framing("OFRECORD").kind == "ofrecord"
    ds = ofindex.open(datasets["ofrecord"], decode=Decoder(SPEC, kind="example"))
    with pytest.raises(DecodeError, match="decode with kind='ofrecord'"):
        ds[0]


def test_standalone_decoders_still_decode_examples(datasets):
    records = ofindex.open(datasets["tfrecord"])[0:2]
    assert Decoder(SPEC)(records[1])["x"] == 1
    assert BatchDecoder(SPEC)(records)["x"].tolist() == [0, 1]


@pytest.mark.parametrize("call", ["one", "batch"])
def test_ofrecords_decoded_as_examples_name_the_kind_to_use(datasets, call):
    records = ofindex.open(datasets["ofrecord"])[0:4]
    with pytest.raises(DecodeError) as caught:
        if call == "one":
            Decoder(SPEC, "example")(records[0])
        else:
            BatchDecoder(SPEC, "example")(records)
    assert "not a valid serialized Example" in str(caught.value)
    assert "kind='ofrecord'" in str(caught.value)


@pytest.mark.parametrize("call", ["one", "batch"])
def test_examples_decoded_as_ofrecords_name_the_kind_to_use(datasets, call):
    records = ofindex.open(datasets["tfrecord"])[0:4]
    with pytest.raises(DecodeError) as caught:
        if call == "one":
            Decoder(SPEC, "ofrecord")(records[0])
        else:
            BatchDecoder(SPEC, "ofrecord")(records)
    message = str(caught.value)
    assert "none of the spec's features" in message and "kind='example'" in message


def test_a_wrong_spec_names_the_features_the_record_has(tmp_path):
    from ofindex.encode import encode_example

    write_shards(tmp_path / "d", [2], lambda s, i: encode_example({"a": [i], "b": [1.5]}))
    record = ofindex.open(str(tmp_path / "d"), build_missing=True)[0]
    with pytest.raises(DecodeError, match=r"none of the spec's features \(only 2 other\(s\): "
                                          r"'a', 'b'\)"):
        Decoder({"nope": FixedLen((), "int64")})(record)
    # a record that has one of the spec's features gets no kind hint
    with pytest.raises(DecodeError) as caught:
        Decoder({"a": FixedLen((), "int64"), "nope": FixedLen((), "int64")})(record)
    assert "kind=" not in str(caught.value)


@pytest.mark.parametrize("make", [BatchDecoder, Decoder])
def test_a_sequence_example_spec_must_be_a_pair(make):
    """A mapping of two features given as the spec of kind='sequence_example' was unpacked
    into its two *names*, taken as the context and sequence specs: the shapes and dtypes asked
    for were silently ignored (found decoding pytorch-data's SequenceExamples)."""
    from ofindex.encode import encode_sequence_example

    record = encode_sequence_example({"x": np.arange(3)}, {"s": [[1.5, 2.5]] * 2})
    two = {"x": FixedLen((3,), "int64"), "s": FixedLen((2,), "float32")}
    with pytest.raises(ValueError, match=r"a \(context_spec, sequence_spec\) pair.* not a "
                                         "mapping of 2 features"):
        make(two, "sequence_example")
    with pytest.raises(ValueError, match="pair"):
        make(["x", "s"], "sequence_example")
    pair = make(({"x": FixedLen((3,), "int64")}, {"s": FixedLen((2,), "float32")}),
                "sequence_example")
    context, lists = (pair([record]) if make is BatchDecoder else pair(record))
    assert np.asarray(context["x"]).tolist() in ([0, 1, 2], [[0, 1, 2]])
    assert np.asarray(lists["s"]).reshape(-1, 2).tolist() == [[1.5, 2.5], [1.5, 2.5]]
