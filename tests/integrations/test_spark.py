"""Spark reads and writes ofindex datasets through the Python Data Source (issue 50), on a real
local Spark (one session for the module, two executor cores): partitions from the split
planner (one GZIP file gives as many as asked, cut at seek points), Arrow batches of decoded
columns (a given schema, an inferred one, raw payloads); shards and sidecars written by the
executors and the manifest on commit; a failed job publishes nothing and leaves no file."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import ofindex
from ofindex.decode import FixedLen, VarLen, decode_batch
from ofindex.encode import encode_example
from ofindex.integrations.spark import register, spark_schema, spec_of_schema

#: a local Spark session takes 16 s to start and its reads 12-24 s each: the slow tier
pytestmark = pytest.mark.slow

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


# -- filter pushdown (Spark 4.1 pushFilters) ----------------------------------------------------
@pytest.fixture(scope="module")
def with_columns(tmp_path_factory):
    """The 1,200 records in two GZIP shards, indexed with columns label, name and weight; and
    the same records indexed without columns."""
    paths = []
    for columns in (["label", "name", "weight"], None):
        d = str(tmp_path_factory.mktemp("columns" if columns else "bare"))
        with ofindex.ShardedWriter(d, shard_records=600, compression="gzip") as w:
            for i in range(1200):
                w.write(encode_example(_features(i), SPEC))
        if columns:  # (the writer indexed the shards and wrote the manifest)
            ofindex.build_index(d, columns=columns, progress=False)
        paths.append(d)
    return paths


def _scan_rows(df) -> tuple[list, int]:
    """The rows of ``df`` (sorted), and how many records our source's scan handed Spark
    (its ``numOutputRows``)."""
    rows = sorted(tuple(r) for r in df.collect())
    plan = df._jdf.queryExecution().executedPlan()
    found = []

    def walk(node) -> None:
        if node.nodeName().startswith("BatchScan ofindex"):
            found.append(node.metrics().get("numOutputRows").get().value())
        children = node.children()
        for k in range(children.size()):
            walk(children.apply(k))

    walk(plan)
    (scanned,) = found
    return rows, scanned


_SCHEMA = "label bigint, name string, weight float"
#: Filters, whether the columns answer them (else Spark applies them to every record read), and
#: the same filter on one record's features in Python.
_FILTERS = [
    ("label = 2", True, lambda f: f["label"] == 2),
    ("label in (0, 2)", True, lambda f: f["label"] in (0, 2)),
    ("label >= 1 and label < 2", True, lambda f: f["label"] == 1),
    ("label > 1 and name < 'r2'", True, lambda f: f["label"] > 1 and f["name"] < b"r2"),
    ("name = 'r5'", True, lambda f: f["name"] == b"r5"),
    ("weight <= 10.0", True, lambda f: f["weight"] <= 10.0),
    ("label is null", True, lambda f: False),
    ("weight > 10.0", False, lambda f: f["weight"] > 10.0),  # NaN: Spark's to order
    ("label != 1", False, lambda f: f["label"] != 1),
    ("label = 2 or name = 'r1'", False, lambda f: f["label"] == 2 or f["name"] == b"r1"),
]


@pytest.mark.parametrize("number", range(len(_FILTERS)))
def test_filters_on_built_columns_are_pushed_down_with_spark_s_results(spark, with_columns,
                                                                       number):
    condition, pushed, by_hand = _FILTERS[number]
    indexed, bare = with_columns
    expected = sorted((f["label"], f["name"].decode(), f["weight"])
                      for f in map(_features, range(1200)) if by_hand(f))
    ours, scanned = _scan_rows(spark.read.format("ofindex").schema(_SCHEMA).load(indexed)
                               .filter(condition))
    spark_s, all_read = _scan_rows(spark.read.format("ofindex").schema(_SCHEMA).load(bare)
                                   .filter(condition))  # no column: Spark filters itself
    assert ours == spark_s == expected
    assert all_read == 1200
    if pushed:  # only the matching records were read
        assert scanned == len(expected) < 1200
    else:
        assert scanned == 1200


def test_pushdown_can_be_turned_off_and_a_pruned_plan_has_only_matching_partitions(
        spark, with_columns):
    indexed, _ = with_columns
    off = (spark.read.format("ofindex").schema(_SCHEMA).option("pushdown", "false")
           .load(indexed).filter("label = 0"))
    rows, scanned = _scan_rows(off)
    assert len(rows) == 400 and scanned == 1200
    one = (spark.read.format("ofindex").schema(_SCHEMA).option("partitions", 4).load(indexed)
           .filter("name = 'r1000'"))
    rows, scanned = _scan_rows(one)
    assert rows == [(1, "r1000", 250.0)] and scanned == 1
    assert one.rdd.getNumPartitions() == 1  # the partitions without a match were dropped
    none = (spark.read.format("ofindex").schema(_SCHEMA).load(indexed)
            .filter("label = 9"))
    assert _scan_rows(none) == ([], 0)


def test_which_filters_the_columns_answer_exactly():
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThanOrEqual,
        Not,
        StringStartsWith,
    )
    from pyspark.sql.types import DoubleType, FloatType, LongType, StringType

    from ofindex.integrations._spark_filters import condition_of

    fields = {"n": LongType(), "f": FloatType(), "d": DoubleType(), "s": StringType(),
              "w": LongType()}
    built = {"n": "int64", "f": "float32", "d": "float64", "s": "bytes", "w": "float32"}
    cases = [
        (EqualTo(("n",), 3), ("n", 3)),
        (GreaterThan(("n",), 3), ("n", (4, None))),
        (GreaterThan(("n",), (1 << 63) - 1), None),  # nothing above: Spark's to say
        (LessThanOrEqual(("n",), -2), ("n", (None, -1))),
        (In(("n",), (1, None, 2)), ("n", [1, 2])),  # a null in the list matches nothing
        (EqualNullSafe(("n",), None), ("n", None)),
        (Not(IsNull(("n",))), ("n", (None, None))),
        (IsNotNull(("f",)), None),  # NaN is a value to Spark, in no range of a column
        (Not(EqualTo(("n",), 1)), None),
        (EqualTo(("n",), 2.5), None),
        (EqualTo(("n",), True), None),
        (GreaterThanOrEqual(("f",), 0.5), None),  # Spark orders NaN above every number
        (LessThanOrEqual(("f",), 0.5), ("f", (None, float(np.nextafter(np.float32(0.5),
                                                                       np.float32(1)))))),
        (LessThanOrEqual(("d",), 0.1), ("d", (None, float(np.nextafter(0.1, 1.0))))),
        (EqualTo(("f",), 0.1), None),  # not a float32: Spark compares in double
        (EqualTo(("f",), float("nan")), None),
        (EqualTo(("s",), "é"), ("s", "é".encode())),
        (GreaterThan(("s",), "ab"), ("s", (b"ab\0", None))),
        (StringStartsWith(("s",), "a"), None),
        (EqualTo(("w",), 1), None),  # built as float32, read by Spark as bigint
        (EqualTo(("x",), 1), None),  # no such column in the schema
        (EqualTo(("n", "m"), 1), None),  # a nested field
    ]
    for spark_filter, expected in cases:
        assert condition_of(spark_filter, fields, built.get) == expected, spark_filter
