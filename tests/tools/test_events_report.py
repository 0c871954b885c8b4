"""tools/report.py's section of tools/bench_events.py (TensorBoard logs), from a fixture, and
the benchmark itself at its smallest (--smoke)."""

import json
import os
import subprocess
import sys

import pytest

from tests.kit import paths

ROOT = paths.ROOT
sys.path.insert(0, paths.TOOLS)
import report  # noqa: E402


def _stats(median, peak):
    return {"median_s": median, "min_s": median * 0.9, "max_s": median * 1.2, "peak_mb": peak,
            "result": 1}


EVENTS = {
    "size": "small", "scale": {"steps": 100000, "scalars": 100, "images": 5000,
                               "histograms": 1000, "side": 64},
    "runs": 10, "scalar_tags": 100, "rounds": 3,
    "load_before": {"load_average": [2.5, 2.0, 1.5], "cores": 2},
    "load_after": {"load_average": [3.5, 2.0, 1.5], "cores": 2},
    "local": {"bytes": 55_000_000,
              "stats": {"build-ofindex": _stats(2.0, 40.0),
                        "build-accumulator": _stats(60.0, 900.0),
                        "load-ofindex": _stats(0.02, 8.0),
                        "load-tbparse": _stats(70.0, 1200.0),
                        "load-accumulator": _stats(60.0, 900.0),
                        "refresh-ofindex": _stats(0.03, 2.0)},
              "ratios": {"load_vs_tbparse": 3500.0, "load_vs_accumulator": 3000.0,
                         "build_vs_accumulator": 30.0, "refresh_fraction_of_build": 0.015,
                         "load_memory_vs_tbparse": 150.0}},
    "s3": {"build-ofindex": _stats(5.0, 60.0), "load-ofindex": _stats(1.0, 40.0),
           "refresh-ofindex": _stats(0.5, 50.0), "refresh_fraction_of_build": {"value": 0.1}},
}


def test_the_events_section(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    assert ("Not measured yet: run `python tools/bench_events.py --out "
            "bench-results/events.json`" in (docs / "benchmarks.md").read_text())
    with open(results / "events.json", "w") as f:
        json.dump(EVENTS, f)
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    section = md[md.index("## TensorBoard logs against tbparse and EventAccumulator"):]
    assert "A log directory of 10 runs (55 MB: 100 scalar tags every 100 of 100,000" in section
    assert "| one tag, all runs: ofindex (indexed) | 0.02 (0.018–0.024) | 8 |" in section
    assert "| one tag: tbparse / ofindex | 3,500× | ≥ 100× |" in section
    assert "| refresh after 1 % growth / first build | 1.5 % | ≤ 2 % |" in section
    assert ("S3 emulator (moto), ofindex: first build 5 s, one tag, all runs 1 s, refresh "
            "after 1 % growth 0.5 s; the refresh 10 % of the build (an object cannot "
            "grow") in section
    assert "median (min–max) of 3 interleaved rounds;" in section
    assert ("TensorBoard logs (55 MB, 10 runs): one scalar tag of every run 3,500× tbparse "
            "and 3,000× EventAccumulator") in readme.read_text()


@pytest.mark.slow
def test_the_benchmark_runs(tmp_path):
    """--smoke: a tiny log, one round, every contender (tbparse, EventAccumulator, S3)."""
    out = tmp_path / "events.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench_events.py"),
                          "--smoke", "--out", str(out)], capture_output=True, text=True,
                         timeout=1200, env=dict(os.environ, PYTHONPATH=ROOT))
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["size"] == "smoke" and set(data["local"]["stats"]) == {
        "build-ofindex", "build-accumulator", "load-ofindex", "load-tbparse",
        "load-accumulator", "refresh-ofindex"}
    assert data["local"]["stats"]["load-ofindex"]["result"] == data["local"]["stats"][
        "load-tbparse"]["result"] > 0
    assert data["s3"]["refresh-ofindex"]["result"] > 0
