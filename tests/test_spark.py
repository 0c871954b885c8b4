"""Spark reads and writes ofindex datasets through the Python Data Source (issue 50), on a real
local Spark (one session for the module, two executor cores): partitions from the split
planner (one GZIP file gives as many as asked, cut at seek points), Arrow batches of decoded
columns (a given schema, an inferred one, raw payloads); shards and sidecars written by the
executors and the manifest on commit; a failed job publishes nothing and leaves no file."""

from __future__ import annotations

import os
import sys

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import ofindex
from ofindex.decode import FixedLen, VarLen, decode_batch
from ofindex.encode import encode_example
from ofindex.integrations.spark import register, spark_schema, spec_of_schema

SPEC = {"label": FixedLen((), "int64"), "tokens": VarLen("int64"),
        "name": FixedLen((), "bytes"), "weight": FixedLen((), "float32")}


def _features(i: int) -> dict:
    return {"label": i % 3, "tokens": list(range(i % 4)), "name": b"r%d" % i,
            "weight": i / 4}


@pytest.fixture(scope="module")
def spark():
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors' Python: this one
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # Spark on the loopback interface only
    session = (SparkSession.builder.master("local[2]").appName("ofindex-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1")
               .getOrCreate())
    register(session)
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def one_file(tmp_path_factory):
    """One GZIP TFRecord file of 1,200 Examples, seek points every 4 KiB."""
    path = str(tmp_path_factory.mktemp("spark") / "train.tfrecord.gz")
    records = [encode_example(_features(i), SPEC) for i in range(1200)]
    with ofindex.Writer(path, compression="gzip", seek_spacing=4096) as w:
        w.write_many(records)
    return path, records


def test_one_file_gives_the_partitions_asked_and_decoded_columns(spark, one_file):
    path, records = one_file
    df = spark.read.format("ofindex").option("partitions", 6).load(path)
    assert df.rdd.getNumPartitions() == 6  # one file, cut inside at its seek points
    assert spec_of_schema(df.schema) == {"label": FixedLen((), "int64"),
                                         "name": FixedLen((), "bytes"),
                                         "tokens": VarLen("int64"),
                                         "weight": FixedLen((), "float32")}  # inferred
    rows = df.collect()
    expected = decode_batch(records, SPEC)
    assert [r["label"] for r in rows] == expected["label"].tolist()
    assert [bytes(r["name"]) for r in rows] == list(expected["name"])
    assert [r["tokens"] for r in rows] == [expected["tokens"][i].tolist() for i in range(1200)]
    assert [r["weight"] for r in rows] == expected["weight"].tolist()
    counts = df.groupBy("label").count().orderBy("label").collect()
    assert [(r["label"], r["count"]) for r in counts] == [(0, 400), (1, 400), (2, 400)]
    sizes = df.rdd.glom().map(len).collect()
    assert sum(sizes) == 1200 and min(sizes) > 0


def test_given_schema_and_raw_payloads(spark, one_file):
    path, records = one_file
    df = spark.read.format("ofindex").schema("label bigint, name string").load(path)
    assert df.filter(F.col("label") == 2).count() == 400
    assert df.take(2)[1].asDict() == {"label": 1, "name": "r1"}
    raw = spark.read.format("ofindex").option("raw", "true").option("partitions", 3).load(path)
    assert [bytes(r["bytes"]) for r in raw.collect()] == records
    with pytest.raises(Exception, match="no Example feature type"):
        spark.read.format("ofindex").schema("m map<string,int>").load(path).collect()


def test_write_shards_sidecars_and_manifest_then_read_back(spark, one_file, tmp_path):
    path, records = one_file
    df = spark.read.format("ofindex").option("partitions", 4).load(path)
    out = str(tmp_path / "copy")
    (df.write.format("ofindex").mode("append").option("compression", "gzip")
       .option("shardRecords", 250).save(out))
    with ofindex.open(out) as ds:  # published with its manifest: no build step
        assert len(ds) == 1200 and all(s.records <= 250 for s in ds.shards)
        assert {c.name for c in ds.compressions} == {"GZIP"}
        got = decode_batch(list(ds), SPEC)
    expected = decode_batch(records, SPEC)
    assert got["label"].tolist() == expected["label"].tolist()  # tasks published in order
    assert list(got["name"]) == list(expected["name"])
    assert not [n for n in os.listdir(out) if n.startswith(".")]
    raw_out = str(tmp_path / "raw")
    spark.read.format("ofindex").option("raw", "true").load(path) \
        .write.format("ofindex").mode("append").save(raw_out)
    with ofindex.open(raw_out) as ds:
        assert [bytes(r) for r in ds] == records
    with pytest.raises(Exception, match="already holds data files"):
        df.write.format("ofindex").mode("append").save(out)
    with pytest.raises(Exception, match="never writes over"):
        df.write.format("ofindex").mode("overwrite").save(str(tmp_path / "other"))


def test_a_failed_job_publishes_nothing(spark, tmp_path):
    out = str(tmp_path / "failed")

    @F.udf("bigint")
    def explode(x):
        if x == 37:
            raise ValueError("boom")
        return x

    df = spark.range(0, 100, numPartitions=4).select(explode("id").alias("label"))
    with pytest.raises(Exception, match="boom"):
        df.write.format("ofindex").mode("append").option("shardRecords", 5).save(out)
    left = os.listdir(out) if os.path.isdir(out) else []
    assert left == []  # no shard, no sidecar, no manifest: every task's files removed


def test_schema_and_spec_map_both_ways():
    assert spark_schema(SPEC).simpleString() == (
        "struct<label:bigint,tokens:array<bigint>,name:binary,weight:float>")
    assert spec_of_schema(spark_schema(SPEC)) == SPEC
    assert spec_of_schema(spark_schema(None)) is None
    shaped = spark_schema({"x": FixedLen((2, 3), "float64")})
    assert shaped.simpleString() == "struct<x:array<array<double>>>"
