"""Benchmarks' --only (tools/bench_write.py, tools/bench_ray.py): one part measured again
replaces that part's entry in an existing result file and keeps the others' figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.kit import paths

TOOLS = paths.TOOLS
TOOL = os.path.join(TOOLS, "bench_write.py")


def test_only_schema_replaces_the_schema_entry_and_keeps_the_workloads(tmp_path):
    out = tmp_path / "write.json"
    kept = {"config": {"rounds": 3}, "workloads": {"mnist": {"records": 1_000_000}},
            "schema": {"seconds": {"median": 99.0}}}
    out.write_text(json.dumps(kept))
    done = subprocess.run([sys.executable, TOOL, "--only", "schema", "--smoke", "--out",
                           str(out)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["workloads"] == kept["workloads"]  # not measured in this run: kept as they were
    assert got["schema"]["shards"] == 100 and got["schema"]["seconds"]["median"] != 99.0
    assert [r["part"] for r in got["config"]["reruns"]] == ["schema"]
    assert got["config"]["rounds"] == 3


def test_without_an_existing_file_only_writes_its_own_part(tmp_path):
    out = tmp_path / "write.json"
    done = subprocess.run([sys.executable, TOOL, "--only", "schema", "--smoke", "--out",
                           str(out)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(out.read_text())
    assert got["workloads"] == {} and got["schema"]["shards"] == 100


def test_bench_ray_only_big_replaces_that_case_and_keeps_the_small_one(tmp_path):
    sys.path.insert(0, TOOLS)
    import bench_ray

    out = tmp_path / "ray.json"
    small = {"name": "small", "records": 1_000_000, "readers": {"x": {"rows_per_s": 5.0}}}
    old_big = {"name": "big", "records": 10_000, "readers": {"x": {"rows_per_s": 1.0}}}
    out.write_text(json.dumps({"config": {"repeats": 3}, "cases": [small, old_big]}))
    new_big = {"name": "big", "records": 10_000, "readers": {"x": {"rows_per_s": 2.0}}}
    got = bench_ray._merged_into(str(out), {"config": {"repeats": 5}, "cases": [new_big]},
                                 "big")
    assert got["cases"] == [small, new_big]  # in place, the small case as it was
    assert got["config"]["repeats"] == 3 and got["config"]["reruns"] == [
        {"case": "big", "repeats": 5}]
    got = bench_ray._merged_into(str(out), {"config": {}, "cases": [new_big]}, "big")
    assert [c["name"] for c in got["cases"]] == ["small", "big"]
    out.write_text(json.dumps({"config": {}, "cases": [small]}))  # a case not there yet
    got = bench_ray._merged_into(str(out), {"config": {}, "cases": [new_big]}, "big")
    assert got["cases"] == [small, new_big]
