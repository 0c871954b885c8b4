"""Cross-implementation checks with TensorFlow's own TFRecord reader and writer (CI installs
tensorflow-cpu, so these run there)."""

import os

import numpy as np

import ofindex
from tests.kit.helpers import need, sidecar_of

tf = need("tensorflow")


def _records(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return [b"", *(rng.bytes(int(rng.integers(0, 2000))) for _ in range(n))]


def test_files_written_by_tensorflow_index_and_read_identically(tmp_path):
    records = _records()
    paths = []
    for k in range(3):
        p = str(tmp_path / f"tf-{k}.tfrecord")
        with tf.io.TFRecordWriter(p) as w:
            for r in records[k::3]:
                w.write(r)
        paths.append(p)
    ofindex.build_index(paths, verify=True)
    ds = ofindex.open(paths)
    expected = [bytes(t.numpy()) for t in tf.data.TFRecordDataset(paths)]
    assert ds[:] == expected and list(ds) == expected
    assert [ds[i] for i in range(len(ds))] == expected


def test_tensorflow_reads_what_we_wrote(tmp_path):
    records = _records(seed=1)
    p = str(tmp_path / "ours.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(records)
    got = [bytes(t.numpy()) for t in tf.data.TFRecordDataset(p)]
    assert got == records


def test_examples_from_tensorflow_and_our_proto_coexist(tmp_path):
    from ofindex.proto import example_pb2

    ex = tf.train.Example(features=tf.train.Features(feature={
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
        "image": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5, 1.5])),
    }))
    p = str(tmp_path / "ex.tfrecord")
    with tf.io.TFRecordWriter(p) as w:
        w.write(ex.SerializeToString())
    ofindex.build_index(p)
    ours = example_pb2.Example.FromString(ofindex.open(p)[0])
    assert list(ours.features.feature["image"].float_list.value) == [0.5, 1.5]
    assert os.path.exists(sidecar_of(p))
