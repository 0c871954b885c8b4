"""tools/report.py's section of tools/bench_columns.py (issue 48): its tables and README line
from a small fixture (no benchmark runs here)."""

import json
import sys

from tests.kit import paths

sys.path.insert(0, paths.TOOLS)
import report


def _spread(median, low, high):
    return {"median": median, "min": low, "max": high}


COLUMNS = {
    "config": {"records": 1000, "where_records": 5000, "rounds": 3},
    "load_before": {"load_average": [4.5, 4, 3], "cores": 2},
    "load_after": {"load_average": [5.5, 5, 4], "cores": 2},
    "build": {"records": 1000, "seconds": {"offsets only": _spread(0.1, 0.09, 0.2),
                                           "with label, id": _spread(0.3, 0.25, 0.4)},
              "ratio": _spread(3, 2.5, 4), "bytes_per_record": {"label column": 0.5}},
    "lookup": {"keys": 50, "records": 1000,
               "keys_per_s": {"tfd-utils get_record": _spread(100, 90, 110),
                              "ofindex, a key a call": _spread(50, 45, 55),
                              "ofindex, batches of all keys": _spread(80, 70, 90)},
               "ratio_one": _spread(0.5, 0.4, 0.6), "ratio_batch": _spread(0.8, 0.7, 0.9),
               "index_bytes": {"tfd-utils": 1000, "ofindex": 50}, "memory_ratio": 0.05},
    "remote": {"records": 10**9, "keys": 64, "rtt_ms": 20.0, "levels": 2,
               "batches": [{"rounds": 2, "rtts": 4.5}, {"rounds": 2, "rtts": 5}]},
    "where": {"records": 5000, "matching": 400,
              "seconds": {"ofindex where": _spread(0.01, 0.01, 0.02),
                          "datasets filter": _spread(1, 1, 1.1)},
              "ratio_vs_hf": _spread(100, 90, 110), "ratio_vs_tfr": _spread(12, 10, 13)},
    "balanced": {"batch_size": 256, "batches": 20, "class_shares": [0.7, 0.3],
                 "batches_per_s": {"BalancedSampler, read and decoded": _spread(95, 90, 99)},
                 "ratio": _spread(0.95, 0.9, 1), "ratio_numbers_only": _spread(0.4, 0.3, 0.5),
                 "quality": {"BalancedSampler": {"classes_per_batch": 2, "top2_share": 1,
                                                 "smallest_class_share": 0.5}}},
}


def test_the_columns_section(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    with open(results / "columns.json", "w") as f:
        json.dump(COLUMNS, f)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "## Columns: building them, key lookups, filters and balanced sampling" in md
    assert "| with label, id | 0.3 (0.25–0.4) |" in md
    assert "a key a call 0.5 (0.4–0.6), in batches 0.8 (0.7–0.9)" in md
    assert "Request rounds of the key index per batch (header and root read before): [2, 2]" \
        in md
    assert "| datasets filter | 1 (1–1.1) |" in md
    assert "| BalancedSampler | 2 | 1 | 0.5 |" in md
    assert "keys per CPU second" not in md  # a run without CPU figures: none shown
    assert "random keys of 1,000, each read as a parsed Example\n" in md  # rounds: the run's
    assert ("Columns (tools/bench_columns.py): build with 2 columns 3× the time without; key "
            "lookups 0.8× tfd-utils' get_record in batches (0.5× a key a call) with 0.05× its "
            "index memory; where(label=3) on 5,000 records 100× datasets.filter, 12× "
            "tfr-reader; remote lookup batch in 2 request round(s); BalancedSampler 0.95× the "
            "global shuffle's batches/s.") in readme.read_text()


def test_the_columns_section_with_cpu_figures(tmp_path):
    """Runs that measured CPU seconds too show them beside the wall times."""
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    data = json.loads(json.dumps(COLUMNS))
    data["build"].update({"cpu_seconds": {"offsets only": _spread(0.08, 0.07, 0.09),
                                          "with label, id": _spread(1.1, 1, 1.2)},
                          "cpu_ratio": _spread(13, 12, 14)})
    data["lookup"].update({"keys_per_cpu_s": {"tfd-utils get_record": _spread(100, 90, 110),
                                              "ofindex, a key a call": _spread(150, 140, 160)},
                           "cpu_ratio_one": _spread(1.5, 1.4, 1.6),
                           "cpu_ratio_batch": _spread(2.1, 2, 2.2), "rounds": 9})
    data["where"].update({"cpu_seconds": {"ofindex where": _spread(0.04, 0.03, 0.05)},
                          "cpu_ratio_vs_hf": _spread(150, 140, 160),
                          "cpu_ratio_vs_tfr": _spread(30, 20, 40)})
    with open(results / "columns.json", "w") as f:
        json.dump(data, f)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "with label, id 1.1 (1–1.2); ratio 13 (12–14)." in md
    assert "| ofindex, a key a call | 150 (140–160) |" in md
    assert "a key a call 1.5 (1.4–1.6), in batches 2.1 (2–2.2)." in md
    assert ("### Key lookups, local: 50 random keys of 1,000, each read as a parsed Example "
            "(9 interleaved rounds)") in md  # the lookup rows' own rounds, when the run says
    assert ("ofindex where 0.04 (0.03–0.05); ofindex uses 150 (140–160)× less than datasets' "
            "filter, 30 (20–40)× less than tfr-reader.") in md
    assert ("in batches (0.5× a key a call) (2.1× and 1.5× per CPU second) with"
            in readme.read_text())

