"""tools/report.py turns the benchmarks' JSON into docs/benchmarks.md, PNG plots and README's
summary block (from small fixtures: no benchmark runs here)."""

import json
import os
import sys

import pytest

from tests.kit.helpers import need

need("matplotlib")
from tests.kit import paths  # noqa: E402

sys.path.insert(0, paths.TOOLS)
import report  # noqa: E402

PIPELINE = {
    "config": {"batch_size": 256, "workers": 2, "buffer": 10000, "rounds": 3},
    "rows": [
        {"case": "mnist", "contender": "ofindex-torch", "batches_per_s": 412.5,
         "batches_per_s_min": 400.25, "batches_per_s_max": 430.0, "first_batch_s": 0.75,
         "mixing": 1.002, "ratio_vs_best_peer": 1.75, "ratio_vs_best_peer_min": 1.61,
         "ratio_vs_best_peer_max": 1.83, "ratio_vs_dali": 2.1, "ratio_vs_dali_min": 1.9,
         "cpu_ms_per_batch": 1.25,
         "ratio_vs_dali_max": 2.4},
        {"case": "mnist", "contender": "tfdata", "batches_per_s": 235.7,
         "batches_per_s_min": 220.0, "batches_per_s_max": 250.0, "first_batch_s": 8.5,
         "mixing": 0.0123},
    ],
    "unavailable": {"mnist: dali": "No module named 'nvidia'"},
}
IMAGES = {
    "config": {"images": 256, "rounds": 5, "cores": 2, "load": 3.5, "jpeg_bytes": 79500.0},
    "rows": [
        {"case": "224", "contender": "ofindex", "psnr_db": 55.8, "per_core": 690.0,
         "per_core_min": 650.0, "per_core_max": 720.0, "all_cores": 1200.0,
         "all_cores_min": 1100.0, "all_cores_max": 1300.0, "per_core_vs_dali": 2.2,
         "per_core_vs_dali_min": 2.0, "per_core_vs_dali_max": 2.5, "per_core_vs_pillow": 1.6,
         "per_core_vs_pillow_min": 1.5, "per_core_vs_pillow_max": 1.7},
        {"case": "224", "contender": "dali", "psnr_db": 67.5, "per_core": 310.0,
         "per_core_min": 300.0, "per_core_max": 320.0},
        {"case": "decode", "contender": "pillow", "psnr_db": None, "per_core": 750.0,
         "per_core_min": 740.0, "per_core_max": 760.0},
    ],
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
REMOTE["config"].update(load_average=[6.5, 6.0, 5.5], cpus=2)


def _row(rtts, requests, rounds):
    return {"rtts": {"median": rtts[0], "min": rtts[1], "max": rtts[2]},
            "requests": {"median": requests, "min": requests, "max": requests},
            "rounds": {"median": rounds[0], "min": rounds[1], "max": rounds[2]},
            "client_rounds": {"median": rounds[1], "min": rounds[1], "max": rounds[1]}}


REMOTE["rounds"] = {"repeats": 7, "cold": _row((2.6, 2.2, 3.4), 32, (2, 2, 3)),
                    "warm": _row((1.3, 1.1, 1.9), 16, (1, 1, 1)),
                    "floor_round": _row((1.2, 1.05, 1.5), 16, (1, 1, 1)),
                    "floor_request": _row((1.05, 1.02, 1.2), 1, (1, 1, 1)),
                    "cold_floor": _row((2.3, 2.1, 2.9), 32, (2, 2, 2)),
                    "raw_cold_floor": _row((2.25, 2.2, 2.5), 32, (2, 2, 2)),
                    "raw_floor_round": _row((1.12, 1.1, 1.2), 16, (1, 1, 1)),
                    "warm_over_floor_round": {"median": 1.1, "min": 0.95, "max": 1.3},
                    "cold_over_floor": {"median": 1.15, "min": 1.0, "max": 1.4}}
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
DECODE = {"batch": 256, "machine_load": {"load_average": [2.5, 2.0, 1.0], "cores": 2},
          "workloads": {
              "mnist": {"floats_per_record": 784,
                        "ofindex": {"median_s": 0.000356, "best_s": 0.000325},
                        "vahidk": "skipped (tfrecord not installed)"},
              "varlen": {"records": 10000, "batch": 10000, "bytes_per_record": 487.4,
                         "ofindex": {"median_s": 0.0125, "best_s": 0.0118},
                         "tf": {"median_s": 0.0171, "best_s": 0.0160},
                         "tf_sparse": {"median_s": 0.0150, "best_s": 0.0140},
                         "ofindex_vs_tf": {"median": 1.37, "min": 1.1, "max": 1.52},
                         "ofindex_vs_tf_cpu": {"median": 1.5, "min": 1.4, "max": 1.6},
                         "ofindex_vs_tf_sparse": {"median": 1.2, "min": 0.98, "max": 1.3},
                         "ofindex_vs_tf_sparse_cpu": {"median": 1.3, "min": 1.2, "max": 1.4}}},
          "single": {"records": 200000, "rounds": 7, "rows": [
              {"contender": "Example.FromString(ds[i])", "records_per_s": 810000,
               "records_per_s_min": 610000, "records_per_s_max": 867000},
              {"contender": "Decoder(spec)(ds[i])", "records_per_s": 777000,
               "records_per_s_min": 541000, "records_per_s_max": 869000,
               "vs": {"Example.FromString(ds[i])": {"median": 0.95, "min": 0.79, "max": 1.07},
                      "Hugging Face ds[i]": {"median": 16.2, "min": 10.7, "max": 27.5}},
               "vs_cpu": {"Example.FromString(ds[i])": {"median": 1.1, "min": 1.0, "max": 1.2},
                          "Hugging Face ds[i]": {"median": 15.0, "min": 14.0, "max": 16.0}}}]},
          "peers": {"records": 200000, "batch": 256, "rounds": 7, "build_rounds": 5,
                    "missing": {"tfd-utils": "skipped (tfd-utils not installed)"}, "rows": [
                        {"contender": "ofindex BatchDecoder(spec)(ds[batch])",
                         "records_per_s": 500000, "records_per_s_min": 400000,
                         "records_per_s_max": 600000,
                         "vs": {"tfr-reader ds[batch]": {"median": 25.0, "min": 20.0,
                                                         "max": 30.0},
                                "tfd-utils get_record(key)": {"median": 4.0, "min": 3.0,
                                                              "max": 5.0}},
                         "vs_cpu": {"tfr-reader ds[batch]": {"median": 24.0, "min": 22.0,
                                                             "max": 26.0},
                                    "tfd-utils get_record(key)": {"median": 4.5, "min": 4.0,
                                                                  "max": 5.0}},
                         "not_the_same_operation": ["tfd-utils get_record(key)"]},
                        {"contender": "tfr-reader ds[batch]", "records_per_s": 20000,
                         "records_per_s_min": 19000, "records_per_s_max": 21000}],
                    "builds": [
                        {"contender": "ofindex build_index",
                         "seconds": {"median": 0.06, "min": 0.05, "max": 0.07},
                         "records_per_s": {"median": 3.3e6, "min": 2.9e6, "max": 4e6}},
                        {"contender": "tfr-reader build_index_from_dataset_dir",
                         "seconds": {"median": 0.43, "min": 0.4, "max": 0.5},
                         "records_per_s": {"median": 465000, "min": 400000, "max": 500000},
                         "ofindex_vs": {"median": 7.2, "min": 6.0, "max": 8.0},
                         "ofindex_vs_cpu": {"median": 9.0, "min": 8.0, "max": 10.0}}]}}

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
WRITE = {"config": {"shards": 8, "rounds": 3, "directory": "/dev/shm/x", "load_before": 2.0,
                    "load_after": 3.0},
         "workloads": {"mnist": {
             "records": 1_000_000,
             "contenders": {"ofindex": {"records_per_s": {"median": 1e5, "min": 9e4,
                                                          "max": 1.1e5}},
                            "tf_tutorial": {"records_per_s": {"median": 2e3, "min": 1.9e3,
                                                              "max": 2.1e3}},
                            "mds": {"unavailable": "not installed (no module 'streaming')"}},
             "ratios": {"tf_tutorial": {"median": 50.0, "min": 45.0, "max": 55.0}},
             "parquet": {"parquet_bytes": 3.2e9,
                         "convert_records_per_s": {"median": 4e4, "min": 3e4, "max": 5e4},
                         "convert_mb_per_s": {"median": 128.0, "min": 100.0, "max": 150.0},
                         "pyarrow_mb_per_s": {"median": 200.0, "min": 180.0, "max": 220.0},
                         "ratio_of_bound": {"median": 0.64, "min": 0.6, "max": 0.7}}}},
         "schema": {"records": 1e10, "shards": 100_000, "requests": 1023,
                    "seconds": {"median": 1.5, "min": 1.2, "max": 2.5}}}


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

RAY = {
    "config": {"cpus": 2, "repeats": 3, "batch_size": 1024, "ray": "2.60.0",
               "machine_cores": 2, "load_average": {"before": 7.5, "after": 9.25}},
    "cases": [{"name": "big", "records": 10000, "shards": 8, "payload_bytes": 100000,
               "object_store_put_get_mb_per_s": 2500.0, "object_store_rows_per_s": 25000.0,
               "readers": {
                   "read_tfrecords": {"rows_per_s": 2000.0, "min": 1800.0, "max": 2100.0,
                                      "vs_read_tfrecords": 1.0, "rows_per_cpu_s": 2150.0},
                   "read_ofindex_raw": {"rows_per_s": 9000.0, "min": 8000.0, "max": 9500.0,
                                        "vs_read_tfrecords": 4.5, "rows_per_cpu_s": 12500.0},
                   "in_memory_blocks": {"rows_per_s": 11000.0, "min": 10000.0,
                                        "max": 12000.0, "vs_read_tfrecords": 5.5,
                                        "rows_per_cpu_s": 16000.0}}}],
}


def test_report_from_fixtures(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    for name, data in (("pipeline", PIPELINE), ("images", IMAGES), ("sequential", SEQUENTIAL),
                       ("shuffle", SHUFFLE), ("remote", REMOTE), ("compressed", COMPRESSED),
                       ("build", BUILD), ("decode", DECODE), ("scale", SCALE),
                       ("scale_manifest", SCALE_MANIFEST), ("mixing", MIXING), ("ray", RAY),
                       ("write", WRITE)):
        write(results, name, data)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Benchmarks\n\nintro\n\n<!-- bench:begin -->\nold figures\n"
                      "<!-- bench:end -->\n\nafter\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert ("| ofindex-torch | 412 (400–430) | 1.25 | 0.75 | 1 | 1.75 (1.61–1.83)× | "
            "2.1 (1.9–2.4)× |  |") in md
    assert "| tfdata | 236 (220–250) | – | 8.5 | 0.0123 |  |  |  |" in md
    assert ("| 224 | ofindex | 690 (650–720) | 2.2 (2–2.5)× | 1.6 (1.5–1.7)× | "
            "1,200 (1,100–1,300) | 55.8 |") in md
    assert "| decode | pillow | 750 (740–760) |  |  |  | exact |" in md
    assert ("| tf.io.parse_example, RaggedFeature | 584,795 (625,000) | 1.37 (1.1–1.52)× | "
            "1.5 (1.4–1.6)× |" in md)
    assert ("| Decoder(spec)(ds[i]) | 777,000 (541,000–869,000) | 0.95 (0.79–1.07)× "
            "Example.FromString(ds[i]); 16.2 (10.7–27.5)× Hugging Face ds[i] | 1.1 (1–1.2)× "
            "Example.FromString(ds[i]); 15 (14–16)× Hugging Face ds[i] |") in md
    assert ("ofindex 1.4× tf.io.parse_example, RaggedFeature (1.1–1.5×), 1.2× "
            "tf.io.parse_example, VarLenFeature (0.98–1.3×) (records/s)") in readme.read_text()
    assert ("| ofindex BatchDecoder(spec)(ds[batch]) | 500,000 (400,000–600,000) | 25 (20–30)× "
            "tfr-reader ds[batch]; 4 (3–5)× tfd-utils get_record(key) (another operation) | "
            "24 (22–26)× tfr-reader ds[batch]; 4.5 (4–5)× tfd-utils get_record(key) |") in md
    assert ("| tfr-reader build_index_from_dataset_dir (the whole file) | 465,000 "
            "(400,000–500,000) (0.43 s) | 7.2 (6–8)× | 9 (8–10)× |") in md
    assert "| tfd-utils | skipped (tfd-utils not installed) |  |  |" in md
    # the rounds lost are said, wall clock and per CPU second apart
    assert ("Where ofindex loses: the rounds in which it was slower than a peer (ratio below "
            "1×): varlen against tf_sparse (wall clock): 0.98× in its worst round, 1.2× the "
            "median; Decoder(spec)(ds[i]) against Example.FromString(ds[i]) (wall clock): 0.79× "
            "in its worst round, 0.95× the median.") in md
    # the summary compares only the same operations
    assert ("Against the peers that index TFRecords in place (goal ≥ 2×): `ofindex "
            "BatchDecoder(spec)(ds[batch])` 25× tfr-reader ds[batch] (20–30×), `ofindex "
            "build_index` 7.2× tfr-reader build_index_from_dataset_dir (6–8×).") in (
        readme.read_text())
    assert "not measured: mnist: dali: No module named 'nvidia'" in md
    assert "| ofindex iter_batches | 15,200,000 (14,100,000–16,000,000) | 3.3 |" in md
    assert "| block 64, window 16 | 16 | 7 | 0.017 |" in md
    assert "| full shuffle | 252 | 8 | 1 |" in md
    assert "| naive_one_request_per_record | 5,840 | 292 | 256 |" in md
    assert "7 interleaved rounds (load average 6.5 on 2 CPUs)" in md
    assert ("| first batch after open (a new process) | 2.6 (2.2–3.4) | 32 | 2 | 2 (2–3) | ≤ 3 |"
            in md)
    assert "| warm batch (index cached) | 1.3 (1.1–1.9) | 16 | 1 | 1 (1–1) | ≤ 1.2 |" in md
    assert ("Warm batch / one round of bare requests: 1.1 (0.95–1.3)×; first batch / its "
            "floor: 1.15 (1–1.4)×.") in md
    assert ("| floor: the same on raw sockets, no HTTP client | 1.12 (1.1–1.2) | 16 | 1 | "
            "1 (1–1) |  |") in md
    assert ("| floor: the same on raw sockets, no HTTP client (new connections) | "
            "2.25 (2.2–2.5) | 32 | 2 | 2 (2–2) |  |") in md
    assert ("above the raw-socket floors: warm batch 1.2 − 1.12 = 0.08 RTT; first batch "
            "3 − 2.25 = 0.75 RTT.") in md
    assert ("| floor: 2 rounds of 16 bare 1 KB GETs (a new process) | 2.3 (2.1–2.9) | 32 | 2 "
            "| 2 (2–2) |  |") in md
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
    assert "| tf_tutorial | 2,000 (1,900–2,100) | 50 (45–55)× |" in md
    assert "| mds | not installed (no module 'streaming') |  |" in md
    assert "conversion / bound: 0.64 (0.6–0.7)." in md
    assert "1e+10 records in 100,000 shards: 1.5 (1.2–2.5) s, at most 1,023 requests" in md
    assert "| build 1 M x ~200 B | 2,500,000 | 6.25 |" in md
    assert "| 10,000 × 100,000 B | read_ofindex_raw | 9,000 [8,000–9,500] | 4.5× | 12,500 |" in md
    assert ("| 10,000 × 100,000 B | object store: ray.put + ray.get | 25,000 (2,500 MB/s) "
            "|  |  |") in md
    assert "load average 7.5 before, 9.25 after (2 cores)" in md
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
    assert ("the first batch of 256 after open in 2.6 RTTs (32 requests), a warm one in 1.3 "
            "(1.1× one round of bare requests), 91.2× faster than one request per record"
            in text)
    assert ("- JPEG decode + resize to 224×224: 690 images/s per core, 2.2× DALI's CPU decoder "
            "and resize, 1.6× Pillow.") in text
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


READ = {
    "config": {"rounds": 7, "round_seconds": 0.5,
               "machine": {"before": {"load_average": [1.5, 1.2, 1.0], "cores": 2},
                           "after": {"load_average": [2.25, 1.5, 1.1], "cores": 2}}},
    "rows": [
        {"name": "small: ofindex ds[i] random", "case": "small: 1000000 x ~200 B",
         "contender": "ofindex ds[i] random", "records_per_s": 1_500_000,
         "records_per_s_min": 1_200_000, "records_per_s_max": 1_600_000, "GB_per_s": 0.32,
         "records_per_cpu_s": 1_700_000,
         "vs": {"bare Python loop of memory-map slices": {"median": 1.1, "min": 0.9,
                                                          "max": 1.3}}},
        {"name": "small: bare", "case": "small: 1000000 x ~200 B",
         "contender": "bare Python loop of memory-map slices", "records_per_s": 1_400_000,
         "records_per_s_min": 1_300_000, "records_per_s_max": 1_500_000, "GB_per_s": 0.3},
    ],
}


def test_read_section_shows_ratios_per_round_and_the_load(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    write(results, "read", READ)
    write(results, "sequential", {"machine": {"load_average": [3.0, 2.0, 1.0], "cores": 2},
                                  "rows": SEQUENTIAL})
    rep = report.Report(str(results), str(docs))
    rep.read()
    rep.sequential()
    read_md, sequential_md = rep.sections
    assert "### small: 1000000 x ~200 B" in read_md
    assert ("| ofindex ds[i] random | 1,500,000 (1,200,000–1,600,000) | 0.32 | 1.1 (0.9–1.3)× "
            "bare Python loop of memory-map slices | 1,700,000 |") in read_md
    assert "Load average 1.5, then 2.25 on 2 cores" in read_md
    assert "Load average 3 on 2 cores" in sequential_md
    assert "| ofindex iter_batches | 15,200,000 (14,100,000–16,000,000) | 3.3 |" in sequential_md
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
    assert ("Not measured yet: run `python tools/bench_scale.py --data-cache --out "
            "bench-results/data_cache.json`") in (
        docs / "benchmarks.md").read_text()
    write(results, "data_cache", DATA_CACHE)
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "| 1 MiB | shuffled | 2 | 0.84 [0.756–0.924] | 500 | – | 0 | 0 |" in md
    assert "| none | shuffled | 1 | 11 [9.9–12.1] | 500 | – | 16 | 66.5 |" in md
    assert ("epoch 2 of the shuffled pass 2.6× [1.4–3] faster than epoch 1 with the cache "
            "(goal ≥ 10×: not met), 13.1× [9.5–20] faster than an epoch without it, 0 data "
            "requests in epoch 2 and 0 in epoch 3.") in md
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
    assert ("faster than epoch 1 with the cache (goal ≥ 10×: not met; an epoch 2 as fast as "
            "the same epoch over local files would show epoch 1 / the local epoch = 11×)") in md
    assert ("Epoch 2 takes 1.2× [1.1–1.3] the time of the same epoch over local files "
            "(0.2 s); epoch 1 takes 0.3 s [0.2–0.4] more than the download of the data files "
            "alone (0.7 s). Its median batch takes 1.25× [1.1–1.4] the local one (0.5 ms "
            "against 0.4 ms") in md
    assert ("(2.6× the first epoch, which the cache makes 5× faster too; 4.4× the first "
            "epoch through a 100 MB/s link).") in readme.read_text()
    large = json.loads(json.dumps(DATA_CACHE))  # a run over records of ~100 KB joins it too
    large["config"].update(records=2048, record_size=100_000, dataset_bytes=205_000_000)
    large["summary"]["epoch1_over_epoch2"] = 26.8
    write(results, "data_cache_large", large)
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert ("Over loopback (no bandwidth cap: the download runs as fast as the machine's cores "
            "push it through nginx, the proxy and the client), 8 shards of 256 records of "
            "~100 KB (205 MB), medians of 3 rounds:") in md
    assert md.count("Over loopback") == 2  # the first run names no shape: the section's
    assert ("4.4× the first epoch through a 100 MB/s link; with records of ~100 KB, 26.8× the "
            "first epoch).") in readme.read_text()
    assert ("faster than epoch 1 with the cache (goal ≥ 10×: met), 13.1× [9.5–20] faster than "
            "an epoch without it") in md  # the run of ~100 KB records


# -- request-rate limits (tools/bench_ratelimit.py) ------------------------------------------
def _rate_row(readers, block, requests, paced, unpaced):
    return {"readers": readers, "order": "global" if block is None else f"block {block}",
            "block_size": block,
            "measured": {"requests_per_batch": requests, "requests_min": requests - 2,
                         "requests_max": requests + 3, "moved_per_useful": 2.4},
            "model_requests_per_batch": {"same_batches": requests * 0.9, "plan": requests / 2},
            "paced": {"records_per_s": paced, "requests_per_s": 5480.0,
                      "throttled_fraction": 0.05},
            "unpaced": {"records_per_s": unpaced, "requests_per_s": 5200.0,
                        "throttled_fraction": 0.47},
            "dollars_per_million_records": requests / 256 * 0.4}


RATELIMIT = {
    "records": 1e9, "shards": 10000, "mean_record_bytes": 200, "batch": 256, "window": 16,
    "store": {"name": "s3", "reads_per_second": 5500.0, "dollars_per_1000": 0.0004},
    "settings": {"batches": 6, "warm": 4, "concurrency": 64, "sim_seconds": 60.0,
                 "sim_warmup": 20.0},
    "rtt": 0.02, "bandwidth": 1e9,
    "rows": [_rate_row(1, None, 512.0, 1598.0, 1598.0), _rate_row(1024, None, 512.0, 2740.0,
                                                                  2600.0),
             _rate_row(1024, 4096, 300.0, 4600.0, 4300.0)],
}


def test_the_rate_limit_table(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    write(results, "ratelimit", RATELIMIT)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "## Request-rate limits: 1 to 1,024 readers of one S3 prefix" in md
    assert ("| 1,024 | global | 512 (510–515) | 461 | 256 | 2.4 | 2,740 | 5,480 | 0.05 | 2,600 "
            "| 0.47 | 0.8 |") in md
    assert ("Request-rate limits (1,024 readers, one S3 prefix, modelled): the global shuffle "
            "reads 2,740 records/s at 5,480 requests/s (0.05 throttled; 0.47 without pacing), "
            "block 4096 4,600 records/s.") in readme.read_text()


def test_parts_measured_again_on_their_own_are_said(tmp_path):
    # a benchmark's --only keeps the other parts' figures: the report says which part ran
    # again, with the machine's load then
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    ray = json.loads(json.dumps(RAY))
    ray["config"]["reruns"] = [{"case": "big", "repeats": 5, "cpus": 2,
                                "load_average": {"before": 0.8, "after": 1.25}}]
    write(results, "ray", ray)
    rep = report.Report(str(results), str(docs))
    rep.ray()
    assert ("The big part was measured again on its own (5 rounds; load 0.8 before, "
            "1.2 after).") in rep.sections[0]
    rep = report.Report(str(results), str(docs))
    write(results, "ray", RAY)
    rep.ray()
    assert "measured again" not in rep.sections[0]


# -- the machine's cache stores (tools/bench_cache.py) -------------------------------------------
def _epoch(wall, requests=0):
    return {"wall_s": wall, "wall_s_min": wall * 0.9, "wall_s_max": wall * 1.1,
            "median_batch_ms": wall * 10, "data_requests": requests,
            "data_bytes": requests * 1e6}


CACHE_STORES = {
    "config": {"rtt_ms": 20.0, "shards": 8, "records": 32768, "record_size": 1000,
               "dataset_bytes": 33_000_000, "cache_bytes": 66_000_000, "block_bytes": 1 << 20,
               "batch": 256, "rounds": 3},
    "contenders": {"ours": {"single": [_epoch(1.5, 9), _epoch(0.75), _epoch(0.8, 1)],
                            "shared": [_epoch(2.4, 18), _epoch(1.4)]},
                   "fsspec": {"single": [_epoch(2.6, 32), _epoch(2.5), _epoch(2.3)],
                              "shared": [_epoch(5.0, 64), _epoch(1.9)]}},
    "pages": {"pages": 16384, "page_bytes": 1032, "batch": 256,
              "contenders": {"ours": {"single": [_epoch(9.4), _epoch(2.6)],
                                      "shared": [_epoch(11.8), _epoch(4.8)]}}},
}


def test_the_cache_stores_section(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    assert ("Not measured yet: run `python tools/bench_cache.py --out bench-results/cache.json`"
            in (docs / "benchmarks.md").read_text())
    write(results, "cache", CACHE_STORES)
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert "## Machine cache stores: ours, diskcache, fsspec's block cache" in md
    assert "| fsspec | shared | 1 | 5 (4.5–5.5) | 50 | 64 | 64 |" in md
    assert "| ours | single | 2 | 0.75 (0.675–0.825) | 7.5 | 0 | 0 |" in md
    assert "over a shuffled epoch of 16,384 pages of 1,032 B" in md
    assert "| ours | shared | 2 | 4.8 (4.32–5.28) | 48 |" in md


def _ar_row(pattern, library, codec, api, median, low, high):
    return {"name": " | ".join((pattern, library, codec, api)), "pattern": pattern,
            "library": library, "codec": codec, "api": api,
            "records_per_s": {"median": median, "min": low, "max": high},
            "records_per_cpu_s": median, "runs": [median]}


def _ar_ratio(pattern, codec, against, median, low, high):
    return {"pattern": pattern, "ours": f"{pattern} | ofindex | {codec} | x", "codec": codec,
            "against": against, "ratio": {"median": median, "min": low, "max": high},
            "arrayrecord_fastest": {}}


ARRAYRECORD = {
    "config": {
        "records": 65536, "words": 200, "mean_record_bytes": 1381.2, "loader_batch": 256,
        "rounds": 5, "round_seconds": 0.2,
        "arrayrecord_codecs": {"uncompressed": "uncompressed", "zstd": "zstd:3"},
        "group_sizes": [1, 256], "our_codecs": ["uncompressed", "GZIP"],
        "patterns": {"single": "single, random (one record a call)",
                     "batch_loader": "batched, random ({loader} a call, a loader's batch)",
                     "seq_all": "sequential, whole file"},
        "cold_resident_share_after_drop": {"ofindex GZIP": 0.0,
                                           "ArrayRecord zstd group_size 1": 0.01},
        "inflater": "isal", "load_before": {"load_average": [3.5, 3.0, 2.0], "cores": 2},
        "load_after": {"load_average": [4.5, 3.0, 2.0], "cores": 2}},
    "sizes": {"ours:GZIP": {"bytes": 23025655, "share": 0.2544},
              "ar:zstd:1": {"bytes": 41811968, "share": 0.4619}},
    "rows": [
        _ar_row("single", "ofindex", "uncompressed", "ds[i]", 1_500_000, 1_400_000, 1_600_000),
        _ar_row("single", "ofindex", "GZIP", "ds[i]", 2000, 1900, 2100),
        _ar_row("single", "ArrayRecord", "uncompressed", "ArrayRecordDataSource[i]", 5000, 4800,
                5200),
        _ar_row("single", "ArrayRecord", "uncompressed", "ArrayRecordReader.read([i])", 5500,
                5000, 6000),
        _ar_row("single", "ArrayRecord", "zstd", "ArrayRecordDataSource[i]", 4000, 3900, 4100),
        _ar_row("batch_loader", "ofindex", "uncompressed", "ds.__getitems__", 2_000_000,
                1_900_000, 2_100_000),
        _ar_row("batch_loader", "ofindex", "GZIP", "ds.__getitems__", 9000, 8000, 10000),
        _ar_row("batch_loader", "ArrayRecord", "uncompressed", "ArrayRecordReader.read(indices)",
                250_000, 240_000, 260_000),
        _ar_row("batch_loader", "ArrayRecord", "zstd", "ArrayRecordDataSource.__getitems__",
                180_000, 170_000, 190_000),
    ],
    "comparisons": [
        _ar_ratio("single", "uncompressed", "uncompressed", 272.7, 250, 300),
        _ar_ratio("single", "uncompressed", "compressed", 375, 350, 400),
        _ar_ratio("single", "GZIP", "uncompressed", 0.36, 0.3, 0.4),
        _ar_ratio("single", "GZIP", "compressed", 0.5, 0.45, 0.55),
        _ar_ratio("batch_loader", "uncompressed", "uncompressed", 8, 7.5, 8.5),
        _ar_ratio("batch_loader", "uncompressed", "compressed", 11, 10, 12),
        _ar_ratio("batch_loader", "GZIP", "uncompressed", 0.036, 0.03, 0.04),
        _ar_ratio("batch_loader", "GZIP", "compressed", 0.05, 0.04, 0.06),
    ],
}


def test_the_arrayrecord_section(tmp_path):
    """ArrayRecord's layout: access patterns by compression, ours and its fastest API, the
    ratios within rounds (uncompressed against uncompressed, compressed against its fastest
    codec), the file sizes, where we lose and a README line."""
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    assert ("Not measured yet: run `python tools/bench_arrayrecord.py --out "
            "bench-results/arrayrecord.json`" in (docs / "benchmarks.md").read_text())
    write(results, "arrayrecord", ARRAYRECORD)
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    section = md[md.index("## ArrayRecord's access patterns, per compression "
                          "(tools/bench_arrayrecord.py)"):].split("\n## ", 1)[0]
    assert "65,536 records of 200 lorem-ipsum words (~1,381 B of text)" in section
    assert "at most 1 % of them resident" in section
    assert "Load average 3.5 before, 4.5 after, on 2 cores" in section
    assert "| access pattern | uncompressed | GZIP |" in section
    assert ("| single, random (one record a call) | 1,500,000 (1,400,000–1,600,000) | "
            "2,000 (1,900–2,100) |") in section
    assert "| access pattern | uncompressed | zstd:3 |" in section
    assert ("| single, random (one record a call) | 5,500 (5,000–6,000), Reader | "
            "4,000 (3,900–4,100), DataSource |") in section
    assert ("| access pattern | uncompressed vs uncompressed | GZIP vs its fastest codec |"
            in section)
    assert "| single, random (one record a call) | 273 (250–300)× | 0.5 (0.45–0.55)× |" in section
    assert ("| batched, random (256 a call, a loader's batch) | 8 (7.5–8.5)× | "
            "0.05 (0.04–0.06)× |") in section
    assert "sequential, whole file" not in section  # a pattern without rows is left out
    assert "| ofindex GZIP (with its index) | 25.4 |" in section
    assert "| ArrayRecord zstd:3, group_size 1 | 46.2 |" in section
    assert ("**Where we lose** (ofindex / ArrayRecord below 1 in the median):\n\n"
            "- single, random (one record a call), GZIP: 0.5×\n"
            "- batched, random (256 a call, a loader's batch), GZIP: 0.05×\n") in section
    assert "Random records from GZIP and ZLIB: a TFRecord file compressed whole" in section
    assert "Passes over GZIP" not in section and "A cold random batch" not in section
    assert ("- ArrayRecord's access patterns: ofindex / ArrayRecord's fastest API on 65,536 "
            "text records of ~1,381 B from the page cache, uncompressed single 273×, batches "
            "of 256 8×; GZIP against its fastest codec: single 0.5×, batches of 256 0.05×."
            ) in readme.read_text()


# -- the request policy's parts (tools/bench_transport.py) -----------------------------------
def _s(median, lo, hi):
    return {"median": median, "min": lo, "max": hi, "n": 5}


TRANSPORT = {
    "load_average": {"before": 4.5, "after": 5.25}, "cpus": 2,
    "config": {"reruns": [{"part": "hedging", "rounds": 15,
                           "load_average": {"before": 3.0, "after": 3.5}}]},
    "hedging": {"stall_s": 3.0, "batch": 64, "rounds": 9, "cases": {
        "hedged (default), 2 stalled": {"batch_s": _s(1.01, 1.0, 1.1),
                                        "cpu_ms": _s(20, 18, 25),
                                        "hedged_per_batch": _s(2, 2, 2)},
        "not hedged, 2 stalled": {"batch_s": _s(3.04, 3.0, 3.1),
                                  "hedged_per_batch": _s(0, 0, 0)}}},
    "retry": {
        "behaviour": {"3 resets then ok": {"ours": {"attempts": 4, "seconds": 0.06,
                                                    "result": "ok"},
                                           "tenacity": {"attempts": 4, "seconds": 0.09,
                                                        "result": "ok"}}},
        "us_per_request": {"ours": _s(10.5, 9.0, 20.3), "tenacity": _s(39.5, 29.6, 59.6)},
        "lines": {"ours": 93, "tenacity adapter": 60},
        "faults": {"faults": {"drop": 0.1, "slowdown": 0.05}, "reads": 400, "cases": {
            who: {"right": _s(400, 400, 400), "given_up": _s(0, 0, 0), "wrong": _s(0, 0, 0),
                  "attempts_per_read": _s(1.14, 1.1, 1.2), "seconds": _s(0.6, 0.5, 0.8)}
            for who in ("ours", "tenacity")}}},
    "pacing": {"limit_per_s": 400.0, "seconds": 90.0, "cases": {
        "16 readers, steady, ours (AdaptiveRate)": {"records_per_s": 184.0,
                                                    "requests_per_s": 400.0,
                                                    "throttled_fraction": 0.027,
                                                    "worst_second": 360}},
        "live": {"limit_per_s": 100.0, "readers": 32, "seconds": 20.0, "rounds": 5, "cases": {
            name: {"ok_per_s": _s(ok, ok - 5, ok + 5), "onset_ok_per_s": _s(ok, ok, ok),
                   "steady_ok_per_s": _s(ok, ok, ok), "throttled_fraction": _s(0.1, 0.1, 0.1),
                   "onset_throttled_fraction": _s(0.2, 0.1, 0.3),
                   "steady_throttled_fraction": _s(0.05, 0.04, 0.06),
                   "worst_second": _s(50, 40, 60), "failed": _s(0, 0, 0),
                   "stuck_when_cancelled": _s(0, 0, stuck)}
            for name, ok, stuck in (("ours (AdaptiveRate)", 90.0, 0),
                                    ("botocore adaptive", 60.0, 9))}}},
    "multipart": {"file_mb": 64, "rounds": 9, "cases": {
        "64 spans of 2-4 KiB": {"ours": {"cpu_ms": _s(1.0, 0.9, 1.2)},
                                "MultipartReader": {"cpu_ms": _s(3.0, 2.8, 3.5)}}}},
}


def test_the_transport_section(tmp_path):
    results, docs = tmp_path / "bench-results", tmp_path / "docs"
    results.mkdir()
    write(results, "transport", TRANSPORT)
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- bench:begin -->\nold\n<!-- bench:end -->\n")
    assert report.main(["--results", str(results), "--docs", str(docs),
                        "--readme", str(readme)]) == 0
    md = (docs / "benchmarks.md").read_text()
    assert ("## The request policy's parts against the libraries that would replace them "
            "(tools/bench_transport.py)") in md
    assert "Load average 4.5, then 5.2 on 2 cores" in md
    assert ("The hedging part was measured again on its own (15 rounds; load 3 before, 3.5 "
            "after).") in md
    assert "| hedged (default), 2 stalled | 1.01 (1–1.1) | 20 (18–25) | 2 (2–2) |" in md
    assert "| not hedged, 2 stalled | 3.04 (3–3.1) | – | 0 (0–0) |" in md
    assert "| µs per request answered at once | 10.5 (9–20.3) | 39.5 (29.6–59.6) |" in md
    assert "| faults: reads given up | 0 (0–0) | 0 (0–0) |" in md
    assert "Faults injected per request: drop 10 %, slowdown 5 %." in md
    assert "| 3 resets then ok | 4: ok | 4: ok |" in md
    assert ("| botocore adaptive | 60 (55–65) | 60 (60–60) | 60 (60–60) | 20 (10–30) "
            "| 5 (4–6) | 50 | 0 | 9 |") in md
    assert "| 16 readers, steady, ours (AdaptiveRate) | 184 | 400 | 2.7 % | 360 |" in md
    assert "| 64 spans of 2-4 KiB | 1 (0.9–1.2) | 3 (2.8–3.5) |" in md
    assert ("Request policy (tools/bench_transport.py): hedging: a batch with 2 stalled "
            "requests 1.01 s (3.04 s unhedged); the retry loop 10 µs per request (tenacity "
            "40 µs); pacing 90 reads/s from a store admitting 100 (botocore's adaptive mode "
            "60); multipart answers parsed with 3–3× less CPU than aiohttp's "
            "MultipartReader.") in readme.read_text()


def test_the_engines_section_shows_medians_with_their_ranges(tmp_path):
    """tools/bench_engines.py's rows/s are medians with the slowest and fastest run, its
    ratios taken within each run (median, min, max)."""
    results = tmp_path / "results"
    results.mkdir()
    engines = {
        "config": {"size": 2_000_000_000, "payload": 1000, "records": 1923076, "repeats": 3},
        "load_before": {"load_average": [12.5]}, "load_after": {"load_average": [10.25]},
        "beam": {"read_rows_per_s": {"ofindex_read": 40000.0, "ReadFromTFRecord": 20000.0},
                 "read_rows_per_s_range": {"ofindex_read": [30000.0, 50000.0],
                                           "ReadFromTFRecord": [15000.0, 25000.0]},
                 "write_rows_per_s": {},
                 "ratios": {"read_vs_ReadFromTFRecord": {"median": 2.5, "min": 1.25,
                                                         "max": 2.75}}},
    }
    (results / "engines.json").write_text(json.dumps(engines))
    r = report.Report(str(results), str(tmp_path / "docs"))
    r.engines()
    (text,) = r.sections
    assert "the median of 3 alternated runs" in text and "load average 12.5 before" in text
    assert "| beam | ofindex_read | 40,000 [30,000–50,000] |" in text
    assert "| beam | ratios | read_vs_ReadFromTFRecord 2.5× (1.25–2.75×) |" in text
