"""tools/report.py turns the benchmarks' JSON into docs/benchmarks.md, PNG plots and README's
summary block (from small fixtures: no benchmark runs here)."""

import json
import os
import sys

import pytest

pytest.importorskip("matplotlib")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
import report

PIPELINE = {
    "config": {"batch_size": 256, "workers": 2, "buffer": 10000, "rounds": 3},
    "rows": [
        {"case": "mnist", "contender": "ofindex-torch", "batches_per_s": 412.5,
         "batches_per_s_min": 400.25, "batches_per_s_max": 430.0, "first_batch_s": 0.75,
         "mixing": 1.002, "ratio_vs_best_peer": 1.75, "ratio_vs_best_peer_min": 1.61,
         "ratio_vs_best_peer_max": 1.83},
        {"case": "mnist", "contender": "tfdata", "batches_per_s": 235.7,
         "batches_per_s_min": 220.0, "batches_per_s_max": 250.0, "first_batch_s": 8.5,
         "mixing": 0.0123},
    ],
    "unavailable": {"mnist: dali": "No module named 'nvidia'"},
}
SEQUENTIAL = [
    {"case": "sequential, 1000000 x ~200 B", "contender": "ofindex iter_batches",
     "records_per_s": 15_200_000, "records_per_s_min": 14_100_000,
     "records_per_s_max": 16_000_000, "GB_per_s": 3.3, "ratio_vs_best_peer": 1.09,
     "ratio_vs_best_peer_min": 1.02, "ratio_vs_best_peer_max": 1.2},
    {"case": "sequential, 1000000 x ~200 B", "contender": "Lance", "records_per_s": 2_300_000,
     "records_per_s_min": 2_200_000, "records_per_s_max": 2_400_000, "GB_per_s": 0.5},
]
SHUFFLE = {
    "throughput_indices_per_s": {"count": 10, "ofindex_feistel": 22_500_000,
                                 "torch_randperm": None},
    "memory": {},
    "locality": [
        {"block_size": 64, "window": 16, "batch": 256, "ranges_per_batch": 16.0,
         "shards_per_batch": 7.0, "mixing": 0.017},
        {"block_size": "-", "window": "full shuffle", "batch": 256, "ranges_per_batch": 252.0,
         "shards_per_batch": 8.0, "mixing": 1.0},
    ],
}
REMOTE = {
    "config": {"shards": 16, "rtt_ms": 20.0, "batch": 256},
    "open_manifest": {"wall_s": 0.045, "rtts": 2.25, "requests": 1},
    "batch_warm": {"wall_s": 0.064, "rtts": 3.2, "requests": 43},
    "naive_one_request_per_record": {"wall_s": 5.84, "rtts": 292.0, "requests": 256},
    "summary": {"batch_rtts": 3.2, "speedup_vs_naive": 91.25, "batch_goal_rtts": 5},
}
COMPRESSED = {"datasets": {"small": {"spacings": [
    {"spacing": 65536, "index_fraction": 0.031, "ds_i_per_s": 5400.0,
     "getitems256_per_s": 61000.0},
    {"spacing": 1048576, "index_fraction": 0.004, "ds_i_per_s": 640.0,
     "getitems256_per_s": 9100.0}],
    "build": {"ofindex_build_MBps": 80.0, "tf_read_all_MBps": 64.0, "ratio": 1.25},
    "index": {"index_fraction": 0.0447},
    "random": {"ds_i_per_s": 2300.0, "ds_i_per_s_zlib": 1100.0, "single_ratio": 1600.0,
               "getitems256_per_s": 2500.0, "batch_ratio": 13.2},
    "remote": {"rtt_ms": 20.0, "spacing": 262144, "batch_cold_rtts": 20.7,
               "batch_warm_rtts": 11.0},
    "remote_by_spacing": [{"rtt_ms": 20.0, "spacing": 65536, "batch_cold_rtts": 9.5,
                           "batch_warm_rtts": 4.2}]}},
    "config": {"inflater": "isal", "default_spacing": 262144}}
COMPRESSED["datasets"]["small"]["records"] = 1_000_000

BUILD = [{"name": "build 1 M x ~200 B", "records_per_s": 2_500_000, "ratio": 6.25}]
DECODE = {"batch": 256, "workloads": {"mnist": {
    "floats_per_record": 784, "ofindex": {"median_s": 0.000356, "best_s": 0.000325},
    "vahidk": "skipped (tfrecord not installed)"}}}

SCALE = {"settings": {"batches": 8, "rtt": 0.02, "bandwidth": 1e9, "concurrency": 256},
         "scales": [{"records": 1e10, "shards": 100000, "mode": "paged", "manifest_bytes": 7190000,
                     "open_s": 0.64, "peak_rss_mb": 155.0,
                     "cold": {"max_rounds": 2, "moved_per_useful": 3.1, "modelled_s": 0.0452},
                     "warm": {"max_rounds": 1, "moved_per_useful": 1.2, "modelled_s": 0.0213},
                     "whole_shards": {"moved_per_useful": 108175.0}}]}


SCALE_MANIFEST = {"settings": {"rounds": 3, "per_shard": 100000, "concurrency": 256,
                              "batch": 256, "load": 7.6},
                  "rows": [{"records": 1e11, "shards": 1000000, "kind": kind,
                            "manifest_bytes": mb, "open_s": s, "open_s_min": s * 0.9,
                            "open_s_max": s * 1.1, "peak_rss_mb": rss, "peak_rss_mb_min": rss,
                            "peak_rss_mb_max": rss, "open_requests": 6, "open_rounds": 4,
                            "open_bytes": 4040000,
                            "first_batch": {"rounds": 2, "requests": 1274,
                                            "bytes": {"data": 60000, "compact": 170000}}}
                           for kind, mb, s, rss in (("json", 75790000, 17.3, 997.0),
                                                    ("bin", 9360000, 0.25, 138.0))]}


def write(results, name, data):
    with open(os.path.join(results, f"{name}.json"), "w") as f:
        json.dump(data, f)


MIXING = {
    "config": {"records": 120000, "weights": [0.5, 0.3, 0.2], "batch_size": 256,
               "batches_per_run": 600, "rounds": 5, "workers": 0, "cpus": 2},
    "batches_per_s": {"ofindex-one": {"median": 900.0, "min": 850.0, "max": 950.0},
                      "ofindex-mix": {"median": 860.0, "min": 800.0, "max": 900.0},
                      "tfdata": {"median": 100.0, "min": 90.0, "max": 110.0}},
    "mix_vs_one_source": {"median": 0.955, "min": 0.9, "max": 0.99},
    "mix_vs_faster_peer": {"median": 4.3, "min": 4.0, "max": 4.6},
    "best": {"mix_vs_one_source": 0.97, "mix_vs_faster_peer": 4.5},
}


def test_report_from_fixtures(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    for name, data in (("pipeline", PIPELINE), ("sequential", SEQUENTIAL),
                       ("shuffle", SHUFFLE), ("remote", REMOTE), ("compressed", COMPRESSED),
                       ("build", BUILD), ("decode", DECODE), ("scale", SCALE),
                       ("scale_manifest", SCALE_MANIFEST), ("mixing", MIXING)):
        write(results, name, data)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Benchmarks\n\nintro\n\n<!-- bench:begin -->\nold figures\n"
                      "<!-- bench:end -->\n\nafter\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "| ofindex-torch | 412 (400–430) | 0.75 | 1 | 1.75 (1.61–1.83)× |" in md
    assert "| tfdata | 236 (220–250) | 8.5 | 0.0123 |  |" in md
    assert "not measured: mnist: dali: No module named 'nvidia'" in md
    assert "| ofindex iter_batches | 15,200,000 (14,100,000–16,000,000) | 3.3 |" in md
    assert "| block 64, window 16 | 16 | 7 | 0.017 |" in md
    assert "| full shuffle | 252 | 8 | 1 |" in md
    assert "| naive_one_request_per_record | 5,840 | 292 | 256 |" in md
    assert "| 64 | 3.1 | 5,400 | 61,000 |" in md
    assert "At the default spacing (256 KiB):" in md
    assert "| index build vs tf.data reading all (uncompressed MB/s) | 80 vs 64: 1.25x |" in md
    assert "| random ds[i]/s (isal; zlib alone) | 2,300 (1,100) |" in md
    assert ("| 256 random records at +20 ms RTT, spacing 64 KiB (cold: first batch / warm: "
            "after 8 batches) | 9.5 / 4.2 RTT |" in md)
    assert "Not measured yet: run `python tools/bench_read.py" in md  # read.json is missing
    assert "| ofindex-mix | 860 (800–900) |" in md
    assert ("Mixture / one source: 0.955 (0.9–0.99); mixture / the faster peer: 4.3 (4–4.6)×; "
            "best runs: 0.97 and 4.5×.") in md
    assert "| build 1 M x ~200 B | 2,500,000 | 6.25 |" in md
    assert "| ofindex | 719,101 (787,692) |" in md
    assert "| vahidk | skipped (tfrecord not installed) |" in md
    assert ("| 1e+10 | 100,000 | paged | 7.19 | 0.64 | 155 | 2 | 3.1 | 45.2 | 1 | 21.3 "
            "| 108,175 |") in md
    for png in ("pipeline-mnist", "shuffle-tradeoff", "remote-rtts", "compressed-spacing"):
        assert f"(img/{png}.png)" in md
        assert (docs / "img" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = readme.read_text()
    assert ("- Compressed TFRecords (small: 1,000,000 records, GZIP by TensorFlow): random ds[i] "
            "2,300/s with an index of 4.47% of the file, 1,600× tf.data reading up to the "
            "record; index build 1.25× tf.data's read-through. 256 random records over HTTP "
            "at +20 ms RTT: 11.0 RTT warm, 20.7 cold.") in text
    assert text.startswith("# x\n\n## Benchmarks\n\nintro\n\n<!-- bench:begin -->\n")
    assert text.endswith("<!-- bench:end -->\n\nafter\n") and "old figures" not in text
    assert ("- Training pipeline, mnist: ofindex-torch 412 batches/s, 1.75× the best other "
            "contender (tfdata, 236 batches/s).") in text
    assert "ofindex iter_batches 15,200,000 records/s, 1.09× the best peer." in text
    assert "a batch of 256 in 3.2 RTTs, 91.2× faster than one request per record" in text
    assert "[docs/benchmarks.md](docs/benchmarks.md)" in text
    assert ("- Weighted mixing of 3 sources: 0.955 of one source's batches/s, 4.3× the faster "
            "of tf.data sample_from_datasets and Grain's MapDataset.mix.") in text
    assert ("- Scale (1e+10 records, 100,000 shards, simulated store): open 0.64 s, peak RSS "
            "155 MB, 2 request rounds per cold batch of 256, 3.1× the useful bytes moved.") in text
    assert ("| 1,000,000 | bin | 9.36 | 0.25 (0.225–0.275) | 138 (138–138) | 6 / 4 | 4.04 | "
            "2 / 1274 | 0.23 | 0.17 |") in md
    assert ("- Manifest of 1,000,000 shards (simulated store): the compact one opens in 0.25 s "
            "with a peak RSS of 138 MB (JSON: 17.3 s, 997 MB, 69.2× slower); first batch of "
            "256 in 2 request rounds.") in text


def test_report_refuses_a_readme_without_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="bench:begin"):
        report.main(["--results", str(tmp_path), "--docs", str(tmp_path / "docs"),
                     "--readme", str(readme)])
    assert readme.read_text() == "# no markers\n"


def test_keep_missing_refreshes_one_section(tmp_path):
    """--keep-missing: a section whose JSON is gone keeps what benchmarks.md and the README
    said; the sections with JSON are written afresh."""
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    for name, data in (("shuffle", SHUFFLE), ("scale", SCALE), ("compressed", COMPRESSED)):
        write(results, name, data)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    before = (docs / "benchmarks.md").read_text()
    scale_line = next(x for x in readme.read_text().splitlines() if x.startswith("- Scale"))
    os.remove(results / "scale.json")
    os.remove(results / "shuffle.json")
    fresh = json.loads(json.dumps(COMPRESSED))
    fresh["datasets"]["small"]["random"]["ds_i_per_s"] = 2500.0
    write(results, "compressed", fresh)
    assert report.main(["--results", str(results), "--docs", str(docs), "--readme",
                        str(readme), "--keep-missing"]) == 0
    md = (docs / "benchmarks.md").read_text()
    for title in ("## Scale", "## Shuffling"):
        old = before[before.index(title):].split("\n## ", 1)[0]
        assert old in md and "Not measured yet: run" not in old
    assert "| random ds[i]/s (isal; zlib alone) | 2,500 (1,100) |" in md
    text = readme.read_text()
    assert scale_line in text and "random ds[i] 2,500/s" in text and "2,300/s" not in text
    assert text.count("- Compressed TFRecords") == 1


def _epochs(*walls):
    return [{"wall_s": w, "wall_s_min": w * 0.9, "wall_s_max": w * 1.1, "first_batch_s": 0.5,
             "data_requests": 16 if k == 0 else 0, "data_bytes": 66_500_000 if k == 0 else 0}
            for k, w in enumerate(walls)]


DATA_CACHE = {
    "config": {"rtt_ms": 20.0, "shards": 8, "records": 65536, "record_size": 1000,
               "dataset_bytes": 66_500_000, "batch": 256, "rounds": 3,
               "default_block": "1 MiB"},
    "configs": {"none": {"shuffled": _epochs(11.0, 11.5, 11.2),
                         "sequential": _epochs(1.2, 0.9, 0.5)},
                "1 MiB": {"shuffled": _epochs(2.2, 0.84, 1.4),
                          "sequential": _epochs(1.9, 0.46, 0.69)}},
    "summary": {"uncached_epoch_s": 11.0, "epoch1_s": 2.2, "epoch2_s": 0.84,
                "epoch2_data_requests": 0, "epoch3_new_open_data_requests": 0,
                "epoch1_over_epoch2": 2.6, "epoch1_over_epoch2_min": 1.4,
                "epoch1_over_epoch2_max": 3.0, "uncached_over_epoch2": 13.1,
                "uncached_over_epoch2_min": 9.5, "uncached_over_epoch2_max": 20.0, "goal": 10},
}


def _capped():
    """The same benchmark through a capped link, with the peers of the same rounds."""
    capped = json.loads(json.dumps(DATA_CACHE))
    capped["config"]["rate"] = 100e6
    capped["configs"]["local"] = {"shuffled": _epochs(0.2, 0.2, 0.2),
                                  "sequential": _epochs(0.1, 0.1, 0.1)}
    capped["configs"]["download"] = {"shuffled": _epochs(0.7)}
    capped["summary"].update({"epoch1_over_epoch2": 4.4, "local_epoch_s": 0.2,
                              "epoch2_over_local": 1.2, "epoch2_over_local_min": 1.1,
                              "epoch2_over_local_max": 1.3, "download_s": 0.7,
                              "epoch1_beyond_download_s": 0.3,
                              "epoch1_beyond_download_s_min": 0.2,
                              "epoch1_beyond_download_s_max": 0.4,
                              "epoch2_median_batch_ms": 0.5, "local_median_batch_ms": 0.4,
                              "median_batch_over_local": 1.25,
                              "median_batch_over_local_min": 1.1,
                              "median_batch_over_local_max": 1.4})
    for epochs in capped["configs"]["1 MiB"].values():
        for epoch in epochs:
            epoch["median_batch_ms"] = 2.5
    capped["configs"]["download"]["shuffled"][0]["median_batch_ms"] = 2.5
    return capped


def test_data_cache_section(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    assert "Not measured yet: run `python tools/bench_scale.py --data-cache`" in (
        docs / "benchmarks.md").read_text()
    write(results, "data_cache", DATA_CACHE)
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "| 1 MiB | shuffled | 2 | 0.84 [0.756–0.924] | 500 | – | 0 | 0 |" in md
    assert "| none | shuffled | 1 | 11 [9.9–12.1] | 500 | – | 16 | 66.5 |" in md
    assert ("epoch 2 of the shuffled pass 2.6× [1.4–3] faster than epoch 1 with the cache, "
            "13.1× [9.5–20] faster than an epoch without it (goal 10×), 0 data requests in "
            "epoch 2 and 0 in epoch 3.") in md
    assert ("- Data cache (`data_cache_bytes=`), +20 ms RTT: a second globally shuffled epoch "
            "makes 0 data requests and runs 13.1× faster than an uncached epoch (2.6× the "
            "first epoch, which the cache makes 5× faster too).") in readme.read_text()
    assert "Over loopback (no bandwidth cap" in md and "Through a link" not in md
    write(results, "data_cache_capped", _capped())  # the capped link's run joins the section
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "Through a link of 100 MB/s (the proxy's responses" in md
    assert "| download | shuffled | 1 | 0.7 [0.63–0.77] | 500 | 2.5 | 16 | 66.5 |" in md
    assert ("Epoch 2 takes 1.2× [1.1–1.3] the time of the same epoch over local files "
            "(0.2 s); epoch 1 takes 0.3 s [0.2–0.4] more than the download of the data files "
            "alone (0.7 s). Its median batch takes 1.25× [1.1–1.4] the local one (0.5 ms "
            "against 0.4 ms") in md
    assert ("(2.6× the first epoch, which the cache makes 5× faster too; 4.4× the first "
            "epoch through a 100 MB/s link).") in readme.read_text()
