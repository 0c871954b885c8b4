#!/usr/bin/env python3
"""Write docs/benchmarks.md (tables and PNG plots) and README.md's benchmark summary from the
benchmarks' JSON in bench-results/, so that no figure is edited by hand.

    python tools/report.py                 # report what bench-results/ holds
    python tools/report.py --run pipeline,sequential,shuffle,remote   # run those first

Reads, when present: pipeline.json (tools/bench_pipeline.py), images.json
(tools/bench_images.py), sequential.json
(tools/bench_sequential.py), shuffle.json (tools/bench_shuffle.py), shuffle_quality.json
(tools/bench_shuffle_quality.py), remote.json
(tools/bench_remote.py), compressed.json (tools/bench_compressed.py), read.json
(tools/bench_read.py), build.json (tools/bench_build.py), decode.json
(tools/bench_decode.py), scale.json and scale_manifest.json (tools/bench_scale.py), mixing.json
(tools/bench_mixing.py), write.json (tools/bench_write.py), ratelimit.json
(tools/bench_ratelimit.py), cache.json (tools/bench_cache.py), arrayrecord.json
(tools/bench_arrayrecord.py), transport.json (tools/bench_transport.py), columns.json
(tools/bench_columns.py), obstore.json (tools/bench_obstore.py), events.json
(tools/bench_events.py). A missing file gives a line
saying how to make it, or with ``--keep-missing`` the section and README lines already
written from it earlier (so that one benchmark can be re-run and its figures refreshed
alone). README.md's text between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` is
replaced by the summary.

    python tools/report.py --keep-missing  # refresh what bench-results/ holds, keep the rest
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
#: Marks a section to carry over from the current benchmarks.md (``--keep-missing``).
MISSING = "\0missing:"
#: The benchmarks ``--run`` can start: tool, and its arguments besides ``--out``.
TOOLS = {"pipeline": ("bench_pipeline.py", []), "images": ("bench_images.py", []),
         "sequential": ("bench_sequential.py", []),
         "shuffle": ("bench_shuffle.py", []), "remote": ("bench_remote.py", []),
         "shuffle_quality": ("bench_shuffle_quality.py", []),
         "compressed": ("bench_compressed.py", []), "read": ("bench_read.py", []),
         "build": ("bench_build.py", []), "decode": ("bench_decode.py", []),
         "scale": ("bench_scale.py", []), "scale_manifest": ("bench_scale.py", ["--manifests"]),
         "mixing": ("bench_mixing.py", []), "data_cache": ("bench_scale.py", ["--data-cache"]),
         "data_cache_capped": ("bench_scale.py", ["--data-cache", "--dc-rate", "100e6"]),
         "data_cache_large": ("bench_scale.py", ["--data-cache", "--dc-records", "256",
                                                 "--dc-record-size", "100000"]),
         "ray": ("bench_ray.py", []), "write": ("bench_write.py", []),
         "convert": ("bench_convert.py", []),
         "ratelimit": ("bench_ratelimit.py", []), "engines": ("bench_engines.py", []),
         "cache": ("bench_cache.py", []), "arrayrecord": ("bench_arrayrecord.py", []),
         "transport": ("bench_transport.py", []), "columns": ("bench_columns.py", []),
         "obstore": ("bench_obstore.py", []), "events": ("bench_events.py", [])}


def fmt(x: float | None, digits: int = 3) -> str:
    """A figure with ``digits`` significant digits (thousands separated), or a dash."""
    if x is None:
        return "–"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _epoch_goal(summary: dict[str, Any]) -> str:
    """Issue 32's goal for epoch 1 / epoch 2 of the data cache, met or not; when not, the
    most any epoch 2 could show on the link measured: one as fast as the same epoch over
    local files (epoch 1 / the local epoch, medians)."""
    goal = summary["goal"]
    if summary["epoch1_over_epoch2"] >= goal:
        return f"goal ≥ {goal}×: met"
    local = summary.get("local_epoch_s")
    if not local:
        return f"goal ≥ {goal}×: not met"
    return (f"goal ≥ {goal}×: not met; an epoch 2 as fast as the same epoch over local "
            f"files would show epoch 1 / the local epoch = "
            f"{fmt(summary['epoch1_s'] / local, 2)}×")


def span(median: float, lo: float, hi: float, digits: int = 3) -> str:
    """``median (lo–hi)``."""
    return f"{fmt(median, digits)} ({fmt(lo, digits)}–{fmt(hi, digits)})"


def table(head: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _decode_losses(data: dict[str, Any]) -> list[str]:
    """Each ratio of tools/bench_decode.py whose worst round is below 1× (ofindex slower), as
    ``what vs peer: min (median)``, wall clock and per CPU second."""
    found: list[tuple[str, str, dict[str, float]]] = []
    for name, entry in data.get("workloads", {}).items():
        for peer in ("tf", "tf_sparse"):
            for suffix, clock in (("", "wall clock"), ("_cpu", "per CPU second")):
                ratio = entry.get(f"ofindex_vs_{peer}{suffix}")
                if ratio:
                    found.append((f"{name} against {peer}", clock, ratio))
    for section in ("single", "peers"):
        for row in (data.get(section) or {}).get("rows", []):
            for key, clock in (("vs", "wall clock"), ("vs_cpu", "per CPU second")):
                for peer, ratio in row.get(key, {}).items():
                    found.append((f"{row['contender']} against {peer}", clock, ratio))
    return [f"{what} ({clock}): {fmt(r['min'], 2)}× in its worst round, {fmt(r['median'], 2)}× "
            "the median" for what, clock, r in found if r["min"] < 1]


def _engine_ratio(value: float | dict[str, float]) -> str:
    """An engines ratio: one figure, or the median with its range over the runs."""
    if isinstance(value, dict):
        return f"{fmt(value['median'])}× ({fmt(value['min'])}–{fmt(value['max'])}×)"
    return f"{fmt(value)}×"


def _pushdown_note(pushdown: dict[str, Any] | None) -> str:
    """The engines section's words for Spark's filter-pushdown row (empty if not run)."""
    if not pushdown:
        return ""
    text = (f" Filter pushdown: `{pushdown['filter']}` ({fmt(pushdown['kept'])} records) with "
            "the column `label` built, the filter pushed down to the source (only the matching "
            "records read) against the same source with `option(\"pushdown\", \"false\")` "
            "(Spark filters every record itself); rows/s are the dataset's rows over the "
            "query's time")
    if "repeats" in pushdown:
        load = pushdown.get("load_before", {}).get("load_average", [0])[0]
        how = "median" if "rows_per_s_range" in pushdown else "best"
        text += (f", measured on its own ({how} of {pushdown['repeats']} alternated runs, load "
                 f"average {fmt(load)} before)")
    return text + "."


class Report:
    """Collects the sections of docs/benchmarks.md and the README summary lines."""

    def __init__(self, results: str, docs: str, keep_missing: bool = False) -> None:
        self.results, self.docs = results, docs
        self.img = os.path.join(docs, "img")
        self.sections: list[str] = []
        self.summary: list[str] = []
        self.keep_missing = keep_missing
        #: Per section (its first line): the README lines it wrote.
        self.lines_of: dict[str, list[str]] = {}

    def load(self, name: str) -> Any:
        path = os.path.join(self.results, f"{name}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    def plot(self, name: str, draw: Callable[[Any], None], size: tuple[float, float]) -> str:
        """Draw a figure with ``draw(ax)`` into docs/img/NAME.png; returns its markdown."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        os.makedirs(self.img, exist_ok=True)
        fig, ax = plt.subplots(figsize=size)
        draw(ax)
        fig.tight_layout()
        fig.savefig(os.path.join(self.img, f"{name}.png"), dpi=100)
        plt.close(fig)
        return f"![{name}](img/{name}.png)"

    def missing(self, title: str, tool: str, name: str | None = None, flags: str = "") -> None:
        """The section of a result file not there: kept from the current page
        (``--keep-missing``), or a line saying how to make it.

        Args:
            title: The section's title.
            tool: The benchmark that writes the file (``bench_read.py``).
            name: The file's name without ``.json`` (default: the tool's, without ``bench_``).
            flags: What the tool is run with for this file (``--data-cache``).
        """
        if self.keep_missing:
            self.sections.append(f"{MISSING}{title}\n")  # replaced in write()
            return
        name = name or tool.removeprefix("bench_").removesuffix(".py")
        command = " ".join(part for part in (f"python tools/{tool}", flags) if part)
        self.sections.append(f"## {title}\n\nNot measured yet: run `{command} "
                             f"--out bench-results/{name}.json` (or `python tools/report.py "
                             f"--run {name}`).\n")

    # -- sections ------------------------------------------------------------------------
    def pipeline(self) -> None:
        data = self.load("pipeline")
        title = "Training input pipeline (tools/bench_pipeline.py)"
        if data is None:
            self.missing(title, "bench_pipeline.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"Batches of {c['batch_size']}, {c['workers']} workers, shuffle buffers of "
                f"{c['buffer']:,} records (tf.data, vahidk, DALI's `initial_fill`), "
                f"{c['rounds']} cold runs per contender (median and range). *CPU ms/batch*: "
                "CPU time of the pipeline's processes per batch (median). *mixing*: how far "
                "apart records that are neighbours in the files end up (1.0 = a full shuffle; "
                "see tools/bench_shuffle.py)."
                + (f" The machine was shared (load {fmt(data['load'][0])} at the start)."
                   if data.get("load") else "") + "\n"]
        for case in dict.fromkeys(r["case"] for r in data["rows"]):
            rows = [r for r in data["rows"] if r["case"] == case]
            text.append(f"### {case}\n")
            text.append(table(
                ["contender", "batches/s", "CPU ms/batch", "first batch (s)", "mixing",
                 "vs best other", "vs DALI CPU", "vs ofindex-torch"],
                [[r["contender"], span(r["batches_per_s"], r["batches_per_s_min"],
                                       r["batches_per_s_max"]),
                  fmt(r.get("cpu_ms_per_batch")), fmt(r["first_batch_s"]), fmt(r.get("mixing")),
                  *(_ratio_cell(r, key) for key in ("ratio_vs_best_peer", "ratio_vs_dali",
                                                    "ratio_vs_ofindex_torch"))]
                 for r in rows]))

            def draw(ax: Any, rows: list[dict] = rows, case: str = case) -> None:
                names = [r["contender"] for r in rows]
                med = [r["batches_per_s"] for r in rows]
                err = [[m - r["batches_per_s_min"] for m, r in zip(med, rows, strict=True)],
                       [r["batches_per_s_max"] - m for m, r in zip(med, rows, strict=True)]]
                ax.barh(names, med, xerr=err, color=["C0" if n.startswith("ofindex") else "C7"
                                                     for n in names])
                ax.set_xlabel("batches/s (median, range over runs)")
                ax.set_title(case)

            text.append("\n" + self.plot(f"pipeline-{case.replace('+', '-')}", draw,
                                         (7, 0.4 * len(rows) + 1.2)) + "\n")
            best = max((r for r in rows if "ratio_vs_best_peer" in r),
                       key=lambda r: r["ratio_vs_best_peer"], default=None)
            others = [r for r in rows if not r["contender"].startswith("ofindex")]
            if best is not None and others:
                top = max(others, key=lambda r: r["batches_per_s"])
                self.summary.append(
                    f"Training pipeline, {case}: {best['contender']} "
                    f"{fmt(best['batches_per_s'])} batches/s, "
                    f"{fmt(best['ratio_vs_best_peer'])}× the best other contender "
                    f"({top['contender']}, {fmt(top['batches_per_s'])} batches/s).")
        self._keras_fit(data.get("fit", []), text)
        for name, why in data.get("unavailable", {}).items():
            text.append(f"- not measured: {name}: {why[:200]}")
        self.sections.append("\n".join(text) + "\n")

    def images(self) -> None:
        data = self.load("images")
        title = "JPEG decoding and resizing (tools/bench_images.py)"
        if data is None:
            self.missing(title, "bench_images.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"A batch of {c['images']} ImageNet-like JPEGs ({fmt(c['jpeg_bytes'] / 1000)} KB "
                f"on average) decoded to RGB (and resized with an antialiased bilinear filter), "
                f"{c['rounds']} interleaved rounds (median and range). *per core*: images per "
                "CPU-second with one thread; *all cores*: images per second on "
                f"{c['cores']} cores (the machine was shared: load {fmt(c['load'])}). *PSNR*: "
                "against a floating-point resize of the fully decoded image.\n"]
        rows = [[r["case"], r["contender"],
                 span(r["per_core"], r["per_core_min"], r["per_core_max"])
                 if "per_core" in r else "",
                 _ratio_cell(r, "per_core_vs_dali"), _ratio_cell(r, "per_core_vs_pillow"),
                 span(r["all_cores"], r["all_cores_min"], r["all_cores_max"])
                 if "all_cores" in r else "",
                 fmt(r["psnr_db"]) if r["psnr_db"] is not None else "exact"]
                for r in data["rows"]]
        text.append(table(["case", "contender", "per core (images/CPU-s)", "vs DALI",
                           "vs Pillow", "all cores (images/s)", "PSNR (dB)"], rows))
        mine = {r["case"]: r for r in data["rows"] if r["contender"] == "ofindex"}
        if "224" in mine and "per_core_vs_dali" in mine["224"]:
            r = mine["224"]
            self.summary.append(
                f"JPEG decode + resize to 224×224: {fmt(r['per_core'])} images/s per core, "
                f"{fmt(r['per_core_vs_dali'])}× DALI's CPU decoder and resize, "
                f"{fmt(r.get('per_core_vs_pillow'))}× Pillow.")
        self.sections.append("\n".join(text) + "\n")

    def _keras_fit(self, rows: list[dict], text: list[str]) -> None:
        """The Keras ``model.fit`` rows of pipeline.json: steps/s by input."""
        if not rows:
            return
        text.append("### Keras model.fit, MNIST-like (a small MLP; steps/s of the second "
                    "epoch)\n")
        text.append(table(
            ["input", "steps/s", "first epoch (s)", "vs tf.data"],
            [[r["contender"], span(r["steps_per_s"], r["steps_per_s_min"],
                                   r["steps_per_s_max"]),
              span(r["first_epoch_s"], r["first_epoch_s_min"], r["first_epoch_s_max"]),
              span(r["ratio_vs_tfdata"], r["ratio_vs_tfdata_min"],
                   r["ratio_vs_tfdata_max"]) + "×" if "ratio_vs_tfdata" in r else ""]
             for r in rows]) + "\n")

    def sequential(self) -> None:
        data = self.load("sequential")
        title = "Batched reading against columnar formats (tools/bench_sequential.py)"
        if data is None:
            self.missing(title, "bench_sequential.py")
            return
        rows = data["rows"] if isinstance(data, dict) else data
        text = [f"## {title}\n", "Records/s (median and range over interleaved rounds); "
                "ofindex checks every CRC, the peers check nothing." + _load_note(data) + "\n"]
        for case in dict.fromkeys(r["case"] for r in rows):
            mine = [r for r in rows if r["case"] == case]
            text.append(f"### {case}\n")
            text.append(table(
                ["contender", "records/s", "GB/s", "vs best peer", "records per CPU second"],
                [[r["contender"], span(r["records_per_s"], r["records_per_s_min"],
                                       r["records_per_s_max"]), fmt(r["GB_per_s"]),
                  span(r["ratio_vs_best_peer"], r["ratio_vs_best_peer_min"],
                       r["ratio_vs_best_peer_max"]) + "×" if "ratio_vs_best_peer" in r else "",
                  fmt(r.get("records_per_cpu_s"))]
                 for r in mine]))
            text.append("")
            best = max((r for r in mine if "ratio_vs_best_peer" in r),
                       key=lambda r: r["ratio_vs_best_peer"], default=None)
            if best is not None:
                self.summary.append(f"{case}: {best['contender']} "
                                    f"{fmt(best['records_per_s'])} records/s, "
                                    f"{fmt(best['ratio_vs_best_peer'])}× the best peer.")
        self.sections.append("\n".join(text) + "\n")

    def shuffle(self) -> None:
        data = self.load("shuffle")
        title = "Shuffling: requests against mixing (tools/bench_shuffle.py)"
        if data is None:
            self.missing(title, "bench_shuffle.py")
            return
        loc = data["locality"]
        text = [f"## {title}\n", "Range requests per batch (reads after coalescing) against "
                "mixing (1.0 = a full shuffle).\n",
                table(["order", "requests / batch", "shards / batch", "mixing"],
                      [[("full shuffle" if r["window"] == "full shuffle" else
                         f"block {r['block_size']}, window {r['window']}"),
                        fmt(r["ranges_per_batch"]), fmt(r["shards_per_batch"], 2),
                        fmt(r["mixing"], 2)] for r in loc])]

        def draw(ax: Any) -> None:
            for r in loc:
                full = r["window"] == "full shuffle"
                ax.scatter(r["ranges_per_batch"], r["mixing"], color="C3" if full else "C0")
                ax.annotate("full" if full else f"{r['block_size']}/{r['window']}",
                            (r["ranges_per_batch"], r["mixing"]), fontsize=7)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("range requests per batch")
            ax.set_ylabel("mixing (1.0 = full shuffle)")
            ax.set_title("block shuffle: block size / window")

        text.append("\n" + self.plot("shuffle-tradeoff", draw, (6, 4)) + "\n")
        t = data.get("throughput_indices_per_s", {})
        if t:
            text.append(table(["generator", "M indices/s"],
                              [[k, fmt(v / 1e6)] for k, v in t.items()
                               if k != "count" and v is not None]))
            if t.get("ofindex_feistel"):
                self.summary.append(f"Global shuffle: {fmt(t['ofindex_feistel'] / 1e6)} M "
                                    "shuffled positions/s in O(1) memory.")
        self.sections.append("\n".join(text) + "\n")

    def shuffle_quality(self) -> None:
        data = self.load("shuffle_quality")
        title = "Shuffle quality beside speed (tools/bench_shuffle_quality.py)"
        if data is None:
            self.missing(title, "bench_shuffle_quality.py")
            return
        c, rows = data["config"], data["rows"]
        text = [f"## {title}\n", f"{c['records']:,} MNIST-like records stored class by class "
                f"({c['classes']} classes, sorted by label), batches of {c['batch_size']}, "
                f"shuffle buffers (tf.data, vahidk) and DALI's `initial_fill` of {c['buffer']}, "
                f"block shuffle of blocks of {c['block_size']} in windows of {c['window']}. "
                "Classes per batch (mean; in the first batch), the share of a batch its two "
                "largest classes take, how far records moved from their place in the files "
                "and how far file neighbours end up apart (1.0 = a uniform shuffle), and one "
                "epoch's batches/s in a fresh process (median and range over interleaved "
                f"rounds; load average {data['load']['load_average']} on "
                f"{data['load']['cores']} cores: a shared machine).\n",
                table(["pipeline", "classes / batch", "first batch", "top-2 share", "moved",
                       "mixing", "batches/s"],
                      [[r["contender"], fmt(r["classes_per_batch"]),
                        str(r["first_batch_classes"]), fmt(r["top2_share"], 2),
                        fmt(r["moved"], 2), fmt(r["mixing"], 2),
                        f"{fmt(r['batches_per_s'])} ({fmt(r['batches_per_s_min'])}–"
                        f"{fmt(r['batches_per_s_max'])})"] for r in rows])]
        if data.get("unavailable"):
            text.append("\nNot measured: " + "; ".join(
                f"{k} ({v[:80]})" for k, v in data["unavailable"].items()) + "\n")

        def draw(ax: Any) -> None:
            for r in rows:
                ours = r["contender"].startswith("ofindex")
                ax.scatter(r["batches_per_s"], r["classes_per_batch"],
                           color="C0" if ours else "C7")
                ax.annotate(r["contender"], (r["batches_per_s"], r["classes_per_batch"]),
                            fontsize=7)
            ax.axhline(c["classes"], color="C2", linestyle=":", linewidth=1)
            ax.set_xscale("log")
            ax.set_ylim(0, c["classes"] * 1.1)
            ax.set_xlabel("batches/s (one epoch)")
            ax.set_ylabel(f"classes per batch (of {c['classes']})")
            ax.set_title("shuffle quality and speed, data sorted by label")

        text.append("\n" + self.plot("shuffle-quality", draw, (6, 4)) + "\n")
        best = {r["contender"]: r for r in rows}
        if "ofindex-torch-main" in best and "dali" in best:
            ours, dali = best["ofindex-torch-main"], best["dali"]
            self.summary.append(
                f"On data sorted by label ({c['classes']} classes): a batch of the global "
                f"shuffle holds {fmt(ours['classes_per_batch'])} classes, DALI's buffered "
                f"reader's {fmt(dali['classes_per_batch'])}.")
        self.sections.append("\n".join(text) + "\n")

    def mixing(self) -> None:
        data = self.load("mixing")
        title = "Weighted mixing (tools/bench_mixing.py)"
        if data is None:
            self.missing(title, "bench_mixing.py")
            return
        c, rates = data["config"], data["batches_per_s"]
        one, peer = data["mix_vs_one_source"], data["mix_vs_faster_peer"]
        weights = " / ".join(fmt(w, 2) for w in c["weights"])
        text = [f"## {title}\n",
                f"{len(c['weights'])} MNIST-like sources (weights {weights}), batches of "
                f"{c['batch_size']} decoded to arrays, {c['workers']} workers, "
                f"{c['rounds']} rounds of {c['batches_per_run']} batches (a fresh process "
                "per run). batches/s: median (range).\n",
                table(["pipeline", "batches/s"],
                      [[name, span(r["median"], r["min"], r["max"])]
                       for name, r in rates.items()]),
                "",
                f"Mixture / one source: {span(one['median'], one['min'], one['max'])}; "
                f"mixture / the faster peer: {span(peer['median'], peer['min'], peer['max'])}×"
                + (f"; best runs: {fmt(data['best']['mix_vs_one_source'])} and "
                   f"{fmt(data['best']['mix_vs_faster_peer'])}×." if "best" in data else ".")]
        self.summary.append(
            f"Weighted mixing of {len(c['weights'])} sources: {fmt(one['median'])} of one "
            f"source's batches/s, {fmt(peer['median'])}× the faster of tf.data "
            "sample_from_datasets and Grain's MapDataset.mix.")
        self.sections.append("\n".join(text) + "\n")

    def writing(self) -> None:
        data = self.load("write")
        title = "Writing and converting (tools/bench_write.py)"
        if data is None:
            self.missing(title, "bench_write.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"From numpy columns into {c['shards']} shards (ofindex: sidecars and a manifest "
                f"too), each contender in a process of its own, {c['rounds']} interleaved rounds; "
                f"records/s and ratios (taken within each round): median (range). Written to "
                f"`{c.get('directory', '?')}`; machine load {fmt(c.get('load_before'), 2)} "
                f"before, {fmt(c.get('load_after'), 2)} after." + _reruns_note(c) + "\n"]
        for kind, w in data["workloads"].items():
            text.append(f"### {kind}-like, {w['records']:,} records\n")
            rows = []
            for name, r in w["contenders"].items():
                if "unavailable" in r:
                    rows.append([name, r["unavailable"], ""])
                    continue
                ratio = w["ratios"].get(name)
                part = (f" (first {r['records']:,})" if r.get("records", w["records"])
                        != w["records"] else "")
                rows.append([name + part, span(*(r["records_per_s"][k] for k in (
                    "median", "min", "max"))),
                             span(ratio["median"], ratio["min"], ratio["max"]) + "×"
                             if ratio else ""])
            text.append(table(["writer", "records/s", "ofindex is … faster"], rows))
            p = w.get("parquet")
            if p:
                ratio = p["ratio_of_bound"]
                text.append(
                    f"\nParquet conversion ({fmt(p['parquet_bytes'] / 1e6)} MB file): "
                    f"{fmt(p['convert_records_per_s']['median'])} records/s, "
                    f"{fmt(p['convert_mb_per_s']['median'])} MB/s; pyarrow reading it alone "
                    f"{fmt(p['pyarrow_mb_per_s']['median'])} MB/s; conversion / bound: "
                    f"{span(ratio['median'], ratio['min'], ratio['max'])}.")
                self.summary.append(
                    f"Parquet conversion, {kind}-like: {fmt(ratio['median'])}× the speed of "
                    "pyarrow reading the file alone.")
            text.append("")
            peers = ", ".join(f"{fmt(w['ratios'][n]['median'])}× {n}"
                              for n in ("tf_tutorial", "vahidk", "mds") if n in w["ratios"])
            if peers:
                self.summary.append(f"Writing {w['records']:,} {kind}-like records from numpy "
                                    f"columns (ShardedWriter): {peers}.")
        schema = data.get("schema")
        if schema and "seconds" in schema:
            sec = schema["seconds"]
            text.append(f"`ofindex schema` on a simulated remote dataset of "
                        f"{schema['records']:.0e} records in {schema['shards']:,} shards: "
                        f"{span(sec['median'], sec['min'], sec['max'])} s, at most "
                        f"{schema['requests']:,} requests.\n")
            self.summary.append(f"`ofindex schema` on {schema['shards']:,} remote shards: "
                                f"{fmt(sec['median'])} s, {schema['requests']:,} requests.")
        self.sections.append("\n".join(text) + "\n")

    def converting(self) -> None:
        data = self.load("convert")
        title = "Converting HF vision datasets and Parquet lists (tools/bench_convert.py)"
        if data is None:
            self.missing(title, "bench_convert.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"`ofindex convert` against the dataset's own `save_to_disk` and pyarrow reading "
                f"the same data alone, {c['rounds']} interleaved rounds, batches of "
                f"{c['batch']}; records/s and ratios (taken within each round): median "
                f"(range){'; ' + c['timed'] if c.get('timed') else ''}. Machine load "
                f"{fmt(c['load_before']['load_average'][0], 2)} before, "
                f"{fmt(c['load_after']['load_average'][0], 2)} after.\n"]
        for name, what in (("vision", "HF vision dataset: Image() of ~{kb} KB JPEGs and a "
                                      "ClassLabel"),
                           ("tabular", "Parquet: a categorical string, list<int64> token ids, "
                                       "list<string> tags, int64, float64"),
                           ("nulls", "Parquet: int64, float64, float32 and string columns, "
                                     "with 5 % nulls in each and with none")):
            part = data.get(name)
            if part is None:
                continue
            kb = round(part.get("mean_image_bytes", 0) / 1000)
            text.append(f"### {what.format(kb=kb)}, {part['records']:,} records\n")
            text.append(table(["contender", "records/s"], [
                [who, span(r["median"], r["min"], r["max"])]
                for who, r in part["records_per_s"].items()]))
            text.append("")
            text.append(table(["ratio", "×"], [
                [what_, span(r["median"], r["min"], r["max"])]
                for what_, r in part["ratios"].items()]))
            text.append("")
            bound = part["ratios"].get("convert_parquet_vs_pyarrow_read")
            if bound:
                self.summary.append(f"convert from Parquet ({name}): {fmt(bound['median'])}× "
                                    "the speed of pyarrow reading the file alone.")
            with_nulls = part["ratios"].get("convert_nulls_vs_no_nulls")
            if with_nulls:
                self.summary.append(f"convert of Parquet with 5 % nulls: "
                                    f"{fmt(with_nulls['median'])}× the speed without nulls.")
        self.sections.append("\n".join(text) + "\n")

    def remote(self) -> None:
        r = self.load("remote")
        title = "Remote storage at a fixed RTT (tools/bench_remote.py)"
        if r is None:
            self.missing(title, "bench_remote.py")
            return
        c = r["config"]
        names = [n for n in ("open_manifest", "batch_cold", "batch_warm", "batch_warm_gap64k",
                             "slice", "naive_one_request_per_record") if n in r]
        text = [f"## {title}\n",
                f"{c['shards']} shards over HTTP behind a {c['rtt_ms']} ms RTT proxy; batches "
                f"of {c['batch']}.\n",
                table(["what", "wall (ms)", "RTTs", "requests"],
                      [[n, fmt(r[n]["wall_s"] * 1e3), fmt(r[n]["rtts"]),
                        fmt(r[n]["requests"])] for n in names])]

        def draw(ax: Any) -> None:
            ax.barh(names, [r[n]["rtts"] for n in names])
            ax.set_xscale("log")
            ax.set_xlabel(f"wall time in RTTs (RTT = {c['rtt_ms']} ms)")

        text.append("\n" + self.plot("remote-rtts", draw, (7, 3)) + "\n")
        rounds = r.get("rounds")
        if rounds:
            text.append(self._remote_rounds(c, rounds, r.get("summary", {}).get(
                "speedup_vs_naive")))
        one = r.get("single_file")
        if one:
            text.append(
                f"One file of {fmt(one['records'])} records opened without a manifest, "
                f"{one['read']} random records read (open included; medians of "
                f"{one['repeats']} alternated runs, range in brackets):\n")
            text.append(table(
                ["sidecar", "requests", "index bytes", "bytes moved", "wall (ms)"],
                [[mode, fmt(one[mode]["requests"]), fmt(one[mode]["index_bytes"]),
                  f"{fmt(one[mode]['bytes'])} [{fmt(one[mode]['bytes_min'])}–"
                  f"{fmt(one[mode]['bytes_max'])}]",
                  f"{fmt(one[mode]['wall_s'] * 1e3)} [{fmt(one[mode]['wall_s_min'] * 1e3)}–"
                  f"{fmt(one[mode]['wall_s_max'] * 1e3)}]"] for mode in ("paged", "whole")]))
            self.summary.append(
                f"One remote file of {fmt(one['records'])} records without a manifest: "
                f"{one['read']} random records move {fmt(one['paged']['bytes'] / 1e3)} kB "
                f"(paged sidecar) instead of {fmt(one['whole']['bytes'] / 1e3)} kB.")
        s = r.get("summary")
        if s and not rounds:
            self.summary.append(f"Remote, {c['rtt_ms']} ms RTT: a batch of {c['batch']} in "
                                f"{fmt(s['batch_rtts'])} RTTs, {fmt(s['speedup_vs_naive'])}× "
                                "faster than one request per record.")
        self.sections.append("\n".join(text) + "\n")

    def _remote_rounds(self, c: dict[str, Any], rounds: dict[str, Any],
                       speedup: float | None) -> str:
        """The interleaved rounds of bench_remote: first batch after open, warm batch, and
        the floors of one request and one round of requests measured alongside."""
        load = c.get("load_average")
        rows = []
        for name, what, goal in (
                ("cold", "first batch after open (a new process)", "≤ 3"),
                ("cold_floor", f"floor: 2 rounds of {c['shards']} bare 1 KB GETs (a new "
                 "process)", ""),
                ("raw_cold_floor", "floor: the same on raw sockets, no HTTP client (new "
                 "connections)", ""),
                ("warm", "warm batch (index cached)", "≤ 1.2"),
                ("floor_round", f"floor: {c['shards']} bare 1 KB GETs at once", ""),
                ("raw_floor_round", "floor: the same on raw sockets, no HTTP client", ""),
                ("floor_request", "floor: one bare 1 KB GET", "")):
            x = rounds.get(name)
            if x is None:
                continue
            sent = x.get("client_rounds")
            rows.append([what, span(x["rtts"]["median"], x["rtts"]["min"], x["rtts"]["max"]),
                         fmt(x["requests"]["median"]),
                         fmt(sent["max"]) if sent else "–",
                         span(x["rounds"]["median"], x["rounds"]["min"], x["rounds"]["max"]),
                         goal])
        ratio = rounds["warm_over_floor_round"]
        cold = rounds.get("cold_over_floor")
        self.summary.append(
            f"Remote, {c['rtt_ms']} ms RTT: the first batch of {c['batch']} after open in "
            f"{fmt(rounds['cold']['rtts']['median'])} RTTs "
            f"({fmt(rounds['cold']['requests']['median'])} requests), a warm one in "
            f"{fmt(rounds['warm']['rtts']['median'])} "
            f"({fmt(ratio['median'])}× one round of bare requests)"
            + (f", {fmt(speedup)}× faster than one request per record." if speedup else "."))
        return "\n".join([
            f"Batches of {c['batch']} random records, {rounds['repeats']} interleaved rounds"
            + (f" (load average {fmt(load[0], 2)} on {c.get('cpus')} CPUs)" if load else "")
            + ": wall time in RTTs, median (range); rounds of requests the client sent (at "
            "most), and as nginx saw them (a request that arrived 0.9 RTT or more after "
            "another was answered taken to have waited for it: on a busy machine the requests "
            "of one round can go out that far apart).\n",
            table(["batch", "RTTs", "requests", "rounds sent", "rounds seen", "goal (RTTs)"],
                  rows), "",
            f"Warm batch / one round of bare requests: "
            f"{span(ratio['median'], ratio['min'], ratio['max'])}×"
            + (f"; first batch / its floor: {span(cold['median'], cold['min'], cold['max'])}×"
               if cold else "") + ".\n" + self._remote_room(rounds)])

    @staticmethod
    def _remote_room(rounds: dict[str, Any]) -> str:
        """What the goals leave for a client's own work above the raw-socket floors (the
        proxy and the server alone), in RTTs at the median."""
        raw_warm, raw_cold = rounds.get("raw_floor_round"), rounds.get("raw_cold_floor")
        if raw_warm is None or raw_cold is None:
            return ""
        warm, cold = raw_warm["rtts"]["median"], raw_cold["rtts"]["median"]
        return (f"\nWhat the goals leave for all of a client's work (its HTTP library "
                f"included) above the raw-socket floors: warm batch 1.2 − {fmt(warm)} = "
                f"{fmt(1.2 - warm, 2)} RTT; first batch 3 − {fmt(cold)} = "
                f"{fmt(3 - cold, 2)} RTT.\n")

    def compressed(self) -> None:
        data = self.load("compressed")
        title = "Compressed files: seek spacing (tools/bench_compressed.py)"
        if data is None:
            self.missing(title, "bench_compressed.py")
            return
        sets = {k: v for k, v in data.get("datasets", {}).items() if v.get("spacings")}
        text = [f"## {title}\n"]
        for name, case in sets.items():
            text.append(f"### {name}\n")
            text.append(table(["seek spacing (KiB)", "index, % of file", "ds[i]/s",
                               "records/s in batches of 256"],
                              [[fmt(s["spacing"] / 1024), fmt(100 * s["index_fraction"]),
                                fmt(s["ds_i_per_s"]), fmt(s["getitems256_per_s"])]
                               for s in case["spacings"]]))
            text.append("")
            text.extend(_compressed_summary(case, data.get("config", {})))
            rnd, build, index = case.get("random"), case.get("build"), case.get("index")
            if rnd and build and index:
                self.summary.append(
                    f"Compressed TFRecords ({name}: {case.get('records', 0):,} records, GZIP by "
                    f"TensorFlow): random ds[i] {fmt(rnd['ds_i_per_s'])}/s with an index of "
                    f"{fmt(100 * index['index_fraction'])}% of the file, "
                    f"{fmt(rnd['single_ratio'])}× tf.data reading up to the record; index "
                    f"build {build['ratio']:.2f}× tf.data's read-through." + _remote_phrase(
                        case.get("remote")))

        def draw(ax: Any) -> None:
            for name, case in sets.items():
                rows = case["spacings"]
                x = [100 * s["index_fraction"] for s in rows]
                ax.plot(x, [s["ds_i_per_s"] for s in rows], "o-", label=f"{name}: ds[i]")
                ax.plot(x, [s["getitems256_per_s"] for s in rows], "s--",
                        label=f"{name}: batches of 256")
            ax.set_xlabel("index size, % of the compressed file")
            ax.set_ylabel("random records/s")
            ax.set_yscale("log")
            ax.legend(fontsize=8)

        if sets:
            text.append(self.plot("compressed-spacing", draw, (7, 4)) + "\n")
        self.sections.append("\n".join(text) + "\n")

    def scale(self) -> None:
        data = self.load("scale")
        title = "Scale: 1e7 to 1e10 records in a simulated object store (tools/bench_scale.py)"
        if data is None:
            self.missing(title, "bench_scale.py")
            return
        st = data["settings"]
        text = [f"## {title}\n",
                f"Batches of 256 globally shuffled records, {st['batches']} per measure, "
                f"{st['rtt'] * 1e3:.0f} ms per round trip, {st['bandwidth'] / 1e9:.0f} GB/s; "
                "*moved / useful*: bytes fetched per payload byte (request overhead "
                "excluded). *paged*: sidecar pages by range request; *whole*: whole "
                "sidecars (ofindex before paging); *whole shards*: downloading every touched "
                "shard (MosaicML Streaming's unit).\n"]
        rows = []
        for r in data["scales"]:
            c, w = r["cold"], r["whole_shards"]
            warm = r.get("warm")
            rows.append([f"{r['records']:.0e}", f"{r['shards']:,}", r["mode"],
                         fmt(r["manifest_bytes"] / 1e6), fmt(r["open_s"]),
                         fmt(r["peak_rss_mb"]), str(c["max_rounds"]),
                         fmt(c["moved_per_useful"]), fmt(c["modelled_s"] * 1e3),
                         str(warm["max_rounds"]) if warm else "–",
                         fmt(warm["modelled_s"] * 1e3) if warm else "–",
                         fmt(w["moved_per_useful"])])
        text.append(table(["records", "shards", "sidecars", "manifest MB", "open s",
                           "peak RSS MB", "cold rounds", "cold moved/useful",
                           "cold ms (model)", "warm rounds", "warm ms (model)",
                           "whole shards moved/useful"], rows))
        self.sections.append("\n".join(text) + "\n")
        paged = [r for r in data["scales"] if r["mode"] == "paged"]
        if paged:
            top = paged[-1]
            self.summary.append(
                f"Scale ({top['records']:.0e} records, {top['shards']:,} shards, simulated "
                f"store): open {fmt(top['open_s'])} s, peak RSS {fmt(top['peak_rss_mb'])} MB, "
                f"{top['cold']['max_rounds']} request rounds per cold batch of 256, "
                f"{fmt(top['cold']['moved_per_useful'])}× the useful bytes moved.")

    def data_cache(self) -> None:
        data = self.load("data_cache")
        title = "Later epochs from local disk: the data cache (tools/bench_scale.py --data-cache)"
        if data is None:
            self.missing(title, "bench_scale.py", "data_cache", "--data-cache")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"{c['shards']} shards, {fmt(c['records'])} records of ~{c['record_size']} B "
                f"({fmt(c['dataset_bytes'] / 1e6)} MB) served by nginx behind a "
                f"{fmt(c['rtt_ms'])} ms RTT proxy; `data_cache_bytes` twice the dataset. "
                f"*Shuffled*: globally shuffled epochs in batches of {c['batch']}; "
                "*sequential*: `iter_batches`. Epochs 1 and 2 run in one dataset, epoch 3 in "
                "a new `open` on the same `cache_dir` (a next run, another process). Peers in "
                "the same rounds: *local*, the same epochs over the local files, and "
                "*download*, the data files fetched whole in one concurrent round through the "
                "same proxy (the floor of an epoch that moves every byte). Data "
                "requests and bytes from nginx's log (sidecars and staleness checks apart); "
                f"medians of {c['rounds']} interleaved rounds, [min–max] of wall time.\n"]
        capped = self.load("data_cache_capped")
        large = self.load("data_cache_large")
        for run in [data] + [r for r in (capped, large) if r is not None]:
            text += self._data_cache_run(run, c)
        self.sections.append("\n".join(text) + "\n")
        s = data["summary"]
        line = (f"Data cache (`data_cache_bytes=`), +{fmt(c['rtt_ms'])} ms RTT: a second "
                f"globally shuffled epoch makes {fmt(s['epoch2_data_requests'])} data requests "
                f"and runs {fmt(s['uncached_over_epoch2'])}× faster than an uncached epoch "
                f"({fmt(s['epoch1_over_epoch2'])}× the first epoch, which the cache makes "
                f"{fmt(s['uncached_epoch_s'] / s['epoch1_s'])}× faster too")
        if "epoch2_over_local" in s:
            line += f"; {fmt(s['epoch2_over_local'])}× the time of an epoch over local files"
        if capped is not None:
            line += (f"; {fmt(capped['summary']['epoch1_over_epoch2'])}× the first epoch "
                     f"through a {fmt(capped['config']['rate'] / 1e6)} MB/s link")
        if large is not None:
            line += (f"; with records of ~{fmt(large['config']['record_size'] / 1e3)} KB, "
                     f"{fmt(large['summary']['epoch1_over_epoch2'])}× the first epoch")
        self.summary.append(line + ").")

    @staticmethod
    def _data_cache_run(data: dict, first: dict) -> list[str]:
        """The table and summary of one run of the data cache benchmark (one link, one shape
        of dataset); ``first``: the configuration of the section's first run."""
        c, s = data["config"], data["summary"]
        rate = c.get("rate") or 0
        link = (f"Through a link of {fmt(rate / 1e6)} MB/s (the proxy's responses, all "
                "connections together: about one S3/GCS connection stream)" if rate else
                "Over loopback (no bandwidth cap: the download runs as fast as the machine's "
                "cores push it through nginx, the proxy and the client)")
        if (c["records"], c["record_size"]) != (first["records"], first["record_size"]):
            link += (f", {c['shards']} shards of {fmt(c['records'] / c['shards'])} records of "
                     f"~{fmt(c['record_size'] / 1e3)} KB ({fmt(c['dataset_bytes'] / 1e6)} MB), "
                     f"medians of {c['rounds']} rounds")
        rows = []
        for name, config in data["configs"].items():
            for pattern in ("shuffled", "sequential"):
                for epoch, e in enumerate(config.get(pattern, []), 1):
                    rows.append([name, pattern, str(epoch),
                                 f"{fmt(e['wall_s'])} [{fmt(e['wall_s_min'])}–"
                                 f"{fmt(e['wall_s_max'])}]",
                                 fmt(e["first_batch_s"] * 1e3),
                                 # iteration yields batches made ahead: no batch time
                                 fmt(e.get("median_batch_ms") if pattern == "shuffled"
                                     else None), fmt(e["data_requests"]),
                                 fmt(e["data_bytes"] / 1e6)])
        text = [f"\n{link}:\n",
                table(["block", "pattern", "epoch", "wall s", "first batch ms",
                       "median batch ms", "data requests", "data MB"], rows)]
        summary = (
            f"\nWith the default block ({c['default_block']}): epoch 2 of the shuffled pass "
            f"{fmt(s['epoch1_over_epoch2'])}× [{fmt(s['epoch1_over_epoch2_min'])}–"
            f"{fmt(s['epoch1_over_epoch2_max'])}] faster than epoch 1 with the cache "
            f"({_epoch_goal(s)}), "
            f"{fmt(s['uncached_over_epoch2'])}× [{fmt(s['uncached_over_epoch2_min'])}–"
            f"{fmt(s['uncached_over_epoch2_max'])}] faster than an epoch without it, "
            f"{fmt(s['epoch2_data_requests'])} data requests in epoch 2 and "
            f"{fmt(s['epoch3_new_open_data_requests'])} in epoch 3.")
        if "epoch2_over_local" in s:
            summary += (
                f" Epoch 2 takes {fmt(s['epoch2_over_local'])}× [{fmt(s['epoch2_over_local_min'])}"
                f"–{fmt(s['epoch2_over_local_max'])}] the time of the same epoch over local "
                f"files ({fmt(s['local_epoch_s'])} s); epoch 1 takes "
                f"{fmt(s['epoch1_beyond_download_s'])} s [{fmt(s['epoch1_beyond_download_s_min'])}"
                f"–{fmt(s['epoch1_beyond_download_s_max'])}] more than the download of the data "
                f"files alone ({fmt(s['download_s'])} s). Its median batch takes "
                f"{fmt(s['median_batch_over_local'])}× [{fmt(s['median_batch_over_local_min'])}"
                f"–{fmt(s['median_batch_over_local_max'])}] the local one "
                f"({fmt(s['epoch2_median_batch_ms'])} ms against "
                f"{fmt(s['local_median_batch_ms'])} ms: the difference between the two wall "
                "times is mostly batches that waited for a core on the shared machine).")
        text.append(summary + "\n")
        return text

    def manifests(self) -> None:
        """Opening 1e5 and 1e6 shards through each kind of manifest (issue 32)."""
        data = self.load("scale_manifest")
        title = ("Scale: manifests of 1e5 and 1e6 shards, JSON, compact and Parquet "
                 "(tools/bench_scale.py --manifests)")
        if data is None:
            self.missing(title, "bench_scale.py", "scale_manifest", "--manifests")
            return
        st = data["settings"]
        text = [f"## {title}\n",
                f"A fresh process per run opens a simulated dataset of {st['per_shard']:,} "
                f"records per shard and reads one batch of {st['batch']} globally shuffled "
                f"records; {st['rounds']} interleaved runs per row (median, min–max; load "
                f"average {st['load']:.1f} on 2 cores). *json*: ofindex-manifest.json; *bin*: "
                "the compact ofindex-manifest.bin; *parquet-64k* / *parquet-128*: the same "
                "columns in Parquet (pyarrow, zstd) with row groups of 65,536 / 128 rows, read "
                "through fsspec without read-ahead (first batch: the stamps of its shards "
                "only). Requests include misses (404s); RSS is the opening process's.\n"]
        rows = []
        for r in data["rows"]:
            b = r["first_batch"]
            manifest_mb = sum(v for k, v in b["bytes"].items() if k not in ("data", "sidecar"))
            rows.append([f"{r['shards']:,}", r["kind"], fmt(r["manifest_bytes"] / 1e6),
                         span(r["open_s"], r["open_s_min"], r["open_s_max"]),
                         span(r["peak_rss_mb"], r["peak_rss_mb_min"], r["peak_rss_mb_max"]),
                         f"{r['open_requests']} / {r['open_rounds']}",
                         fmt(r["open_bytes"] / 1e6),
                         f"{b['rounds']} / {b['requests']}" + (" (stamps only)"
                                                               if b.get("stamps_only") else ""),
                         fmt(sum(b["bytes"].values()) / 1e6), fmt(manifest_mb / 1e6)])
        text.append(table(["shards", "manifest", "manifest MB", "open s", "peak RSS MB",
                           "open requests / rounds", "MB read at open",
                           "first batch rounds / requests", "first batch MB",
                           "of it manifest MB"], rows))
        self.sections.append("\n".join(text) + "\n")
        by = {(r["shards"], r["kind"]): r for r in data["rows"]}
        top = max(r["shards"] for r in data["rows"])
        compact, json_ = by.get((top, "bin")), by.get((top, "json"))
        if compact and json_:
            self.summary.append(
                f"Manifest of {top:,} shards (simulated store): the compact one opens in "
                f"{fmt(compact['open_s'])} s with a peak RSS of {fmt(compact['peak_rss_mb'])} MB "
                f"(JSON: {fmt(json_['open_s'])} s, {fmt(json_['peak_rss_mb'])} MB, "
                f"{fmt(json_['open_s'] / compact['open_s'])}× slower); first batch of 256 in "
                f"{compact['first_batch']['rounds']} request rounds.")

    def rate_limits(self) -> None:
        """1, 64 and 1,024 readers against S3's request-rate limit (tools/bench_ratelimit.py)."""
        data = self.load("ratelimit")
        title = ("Request-rate limits: 1 to 1,024 readers of one S3 prefix "
                 "(tools/bench_ratelimit.py)")
        if data is None:
            self.missing(title, "bench_ratelimit.py")
            return
        store, st = data["store"], data["settings"]
        text = [f"## {title}\n",
                f"{data['records']:.0e} records of ~{data['mean_record_bytes']} B in "
                f"{data['shards']:,} shards, batches of {data['batch']} (block shuffles: window "
                f"{data['window']}). *Measured* on the real reader (simulated store, rank 0 of "
                f"N, {st['batches']} batches after {st['warm']}): requests per batch (min–max; "
                "*model*: `ofindex.planning`'s model of the same batches; *plan*: what "
                "`ofindex plan` predicts, averaged over two windows of a block shuffle) and "
                "bytes moved per useful byte. "
                f"*Modelled*: N readers against {store['reads_per_second']:,.0f} GET/s per "
                f"prefix in a discrete-event simulation ({st['sim_seconds']:g} s of virtual "
                f"time, the first {st['sim_warmup']:g} s left out; {data['rtt'] * 1e3:g} ms "
                f"RTT, {st['concurrency']} requests in flight per reader), with the pacers "
                "(`ofindex.transport.policy`) and without (backoff only): records/s, requests/s "
                "answered, share of answers throttled. Cost: "
                f"${store['dollars_per_1000']:g} per 1,000 GETs.\n"]
        rows = []
        for r in data["rows"]:
            m, paced, unpaced = r["measured"], r["paced"], r["unpaced"]
            rows.append([f"{r['readers']:,}", r["order"],
                         f"{fmt(m['requests_per_batch'])} ({fmt(m['requests_min'])}–"
                         f"{fmt(m['requests_max'])})",
                         fmt(r["model_requests_per_batch"]["same_batches"]),
                         fmt(r["model_requests_per_batch"]["plan"]),
                         fmt(m["moved_per_useful"]), fmt(paced["records_per_s"]),
                         fmt(paced["requests_per_s"]), fmt(paced["throttled_fraction"], 2),
                         fmt(unpaced["records_per_s"]), fmt(unpaced["throttled_fraction"], 2),
                         fmt(r["dollars_per_million_records"])])
        text.append(table(["readers", "order", "requests / batch", "model", "plan",
                           "moved / useful",
                           "records/s", "requests/s", "throttled", "records/s (no pacing)",
                           "throttled (no pacing)", "$ / M records"], rows))
        self.sections.append("\n".join(text) + "\n")
        top = max(r["readers"] for r in data["rows"])
        glob = next((r for r in data["rows"] if r["readers"] == top and r["block_size"] is None),
                    None)
        if glob is not None:
            best = max((r for r in data["rows"] if r["readers"] == top),
                       key=lambda r: r["paced"]["records_per_s"])
            self.summary.append(
                f"Request-rate limits ({top:,} readers, one S3 prefix, modelled): the global "
                f"shuffle reads {fmt(glob['paced']['records_per_s'])} records/s at "
                f"{fmt(glob['paced']['requests_per_s'])} requests/s "
                f"({fmt(glob['paced']['throttled_fraction'], 2)} throttled; "
                f"{fmt(glob['unpaced']['throttled_fraction'], 2)} without pacing), "
                f"{best['order']} {fmt(best['paced']['records_per_s'])} records/s.")

    def cache_stores(self) -> None:
        """The data cache's store against diskcache and fsspec's block cache
        (tools/bench_cache.py)."""
        data = self.load("cache")
        title = "Machine cache stores: ours, diskcache, fsspec's block cache (tools/bench_cache.py)"
        if data is None:
            self.missing(title, "bench_cache.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"{c['shards']} shards of {c['records'] // c['shards']:,} records of "
                f"~{c['record_size']:,} B ({c['dataset_bytes'] / 1e6:.0f} MB) served by nginx "
                f"behind a +{c['rtt_ms']:g} ms proxy, globally shuffled batches of "
                f"{c['batch']}, blocks of {c['block_bytes'] >> 20} MiB, medians of "
                f"{c['rounds']} interleaved rounds [min–max]. *single*: epochs 1 and 2 in one "
                "process, 3 in a new one; *shared*: two processes at once, each half of every "
                "batch. Requests and MB: data GETs nginx answered (epoch 1 counts those of "
                "epoch 2 too).\n"]
        rows = []
        for name, workloads in data["contenders"].items():
            for workload, epochs in workloads.items():
                for number, e in enumerate(epochs, 1):
                    rows.append([name, workload, str(number),
                                 span(e["wall_s"], e["wall_s_min"], e["wall_s_max"]),
                                 fmt(e["median_batch_ms"]), fmt(e["data_requests"]),
                                 fmt(e["data_bytes"] / 1e6)])
        text.append(table(["store", "workload", "epoch", "wall s", "median batch ms",
                           "requests", "MB"], rows))
        pages = data.get("pages")
        if pages is not None:
            text.append(f"\nThe machine's page store (`cache_dir`'s pages): per batch, one "
                        f"look-up of {pages['batch']} page keys and the missing pages stored, "
                        f"over a shuffled epoch of {pages['pages']:,} pages of "
                        f"{pages['page_bytes']:,} B (epoch 1: all missing; 2: all held).\n")
            text.append(table(["store", "workload", "epoch", "wall s", "median batch ms"], [
                [name, workload, str(number),
                 span(e["wall_s"], e["wall_s_min"], e["wall_s_max"]), fmt(e["median_batch_ms"])]
                for name, workloads in pages["contenders"].items()
                for workload, epochs in workloads.items()
                for number, e in enumerate(epochs, 1)]))
        self.sections.append("\n".join(text) + "\n")

    def transport(self) -> None:
        """Each part of the request policy against the library that would replace it
        (tools/bench_transport.py)."""
        data = self.load("transport")
        title = ("The request policy's parts against the libraries that would replace them "
                 "(tools/bench_transport.py)")
        if data is None:
            self.missing(title, "bench_transport.py")
            return
        load = data.get("load_average", {})
        text = [f"## {title}\n",
                "Interleaved rounds in one run; median (min–max). Load average "
                f"{fmt(load.get('before'), 2)}, then {fmt(load.get('after'), 2)} on "
                f"{data.get('cpus')} cores (a machine shared with other work)."
                + _reruns_note(data.get("config", {})) + " Decisions: docs/design.md.\n"]
        summary = []
        if "hedging" in data:
            h = data["hedging"]
            text.append(f"### Hedging: batches of {h['batch']} one-range requests, 2 of them "
                        f"stalled {fmt(h['stall_s'])} s (nginx behind a fault proxy)\n")
            text.append(table(["policy, case", "batch (s)", "CPU ms / batch",
                               "sent again / batch"],
                              [[k, _spread_cell(c["batch_s"]),
                                _spread_cell(c["cpu_ms"]) if "cpu_ms" in c else "–",
                                _spread_cell(c["hedged_per_batch"])]
                               for k, c in h["cases"].items()]) + "\n")
            on, off = (h["cases"].get(f"{k}, 2 stalled") for k in ("hedged (default)",
                                                                   "not hedged"))
            if on and off:
                summary.append(f"hedging: a batch with 2 stalled requests "
                               f"{fmt(on['batch_s']['median'])} s "
                               f"({fmt(off['batch_s']['median'])} s unhedged)")
        if "retry" in data and "us_per_request" in data["retry"]:
            self._transport_retry(data["retry"], text, summary)
        if "pacing" in data:
            self._transport_pacing(data["pacing"], text, summary)
        if "multipart" in data:
            m = data["multipart"]
            text.append("### Multi-range answers of nginx: our parser and aiohttp's "
                        "`MultipartReader` (CPU ms per answer)\n")
            text.append(table(["answer", "ours", "MultipartReader"],
                              [[case, _spread_cell(c["ours"]["cpu_ms"]),
                                _spread_cell(c["MultipartReader"]["cpu_ms"])]
                               for case, c in m["cases"].items()]) + "\n")
            ratios = [c["MultipartReader"]["cpu_ms"]["median"] / c["ours"]["cpu_ms"]["median"]
                      for c in m["cases"].values()]
            if ratios:
                summary.append(f"multipart answers parsed with {fmt(min(ratios), 2)}–"
                               f"{fmt(max(ratios), 2)}× less CPU than aiohttp's MultipartReader")
        self.sections.append("\n".join(text) + "\n")
        if summary:
            self.summary.append("Request policy (tools/bench_transport.py): " + "; ".join(summary)
                                + ".")

    def columns(self) -> None:
        """Columns, key lookups, filters and balanced sampling (tools/bench_columns.py)."""
        data = self.load("columns")
        title = ("Columns: building them, key lookups, filters and balanced sampling "
                 "(tools/bench_columns.py)")
        if data is None:
            self.missing(title, "bench_columns.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"{c['rounds']} interleaved rounds in one run; median (min–max). Load average "
                f"{fmt(data['load_before']['load_average'][0], 2)} before, "
                f"{fmt(data['load_after']['load_average'][0], 2)} after, on "
                f"{data['load_before']['cores']} cores (a machine shared with other work).\n"]
        summary = []
        b = data["build"]
        text.append(f"### Build of {b['records']:,} small Examples, with and without two "
                    "columns\n")
        text.append(table(["build", "seconds"], [[k, _spread_cell(v)]
                                                 for k, v in b["seconds"].items()]) + "\n")
        text.append("Ratio with/without (per round): " + _spread_cell(b["ratio"]) + "; bytes "
                    "per record: " + ", ".join(f"{k} {fmt(v)}"
                                               for k, v in b["bytes_per_record"].items())
                    + ".\n")
        if "cpu_ratio" in b:
            text.append("CPU seconds of the process (its threads too), which the machine's "
                        "load does not stretch: " + ", ".join(
                            f"{k} {_spread_cell(v)}" for k, v in b["cpu_seconds"].items())
                        + f"; ratio {_spread_cell(b['cpu_ratio'])}.\n")
        if "ratio_with_key_indexes" in b:
            text.append("With the columns' key indexes written by the build too (`keys=True`; "
                        "otherwise a local dataset's first lookup writes them): ratio "
                        f"{_spread_cell(b['ratio_with_key_indexes'])}, in CPU seconds "
                        f"{_spread_cell(b['cpu_ratio_with_key_indexes'])}.\n")
        lk = data["lookup"]
        rounds_note = (f" ({lk['rounds']} interleaved rounds)" if "rounds" in lk else "")
        text.append(f"### Key lookups, local: {lk['keys']:,} random keys of {lk['records']:,}, "
                    f"each read as a parsed Example{rounds_note}\n")
        text.append(table(["reader", "keys/s"], [[k, _spread_cell(v)]
                                                 for k, v in lk["keys_per_s"].items()]) + "\n")
        text.append(f"ofindex / tfd-utils: a key a call {_spread_cell(lk['ratio_one'])}, in "
                    f"batches {_spread_cell(lk['ratio_batch'])}; index memory held: tfd-utils "
                    f"{lk['index_bytes']['tfd-utils']:,} B, ofindex "
                    f"{lk['index_bytes']['ofindex']:,} B ({fmt(lk['memory_ratio'])}×).\n")
        if "keys_per_cpu_s" in lk:
            text.append(table(["reader", "keys per CPU second"], [
                [k, _spread_cell(v)] for k, v in lk["keys_per_cpu_s"].items()]) + "\n")
            text.append(f"Per CPU second (the load does not stretch it): a key a call "
                        f"{_spread_cell(lk['cpu_ratio_one'])}, in batches "
                        f"{_spread_cell(lk['cpu_ratio_batch'])}.\n")
        r = data["remote"]
        rounds = [x["rounds"] for x in r["batches"]]
        rtts = [x["rtts"] for x in r["batches"]]
        text.append(f"### Key lookups, remote: batches of {r['keys']} random keys in a "
                    f"{r['records']:,}-record key index ({r['levels']} level(s) of nodes; "
                    f"simulated store, {fmt(r['rtt_ms'])} ms a request)\n")
        text.append(f"Request rounds of the key index per batch (header and root read "
                    f"before): {rounds}; wall time in RTTs: {rtts}.\n")
        w = data["where"]
        text.append(f"### where(label=3) on {w['records']:,} records ({w['matching']:,} "
                    "match), each from what it loads first\n")
        text.append(table(["query", "seconds"], [[k, _spread_cell(v)]
                                                 for k, v in w["seconds"].items()]) + "\n")
        text.append(f"ofindex: {_spread_cell(w['ratio_vs_hf'])}× faster than datasets' "
                    f"filter, {_spread_cell(w['ratio_vs_tfr'])}× faster than tfr-reader.\n")
        if "cpu_seconds" in w:
            text.append("CPU seconds of the process (its threads too): " + ", ".join(
                f"{k} {_spread_cell(v)}" for k, v in w["cpu_seconds"].items())
                + f"; ofindex uses {_spread_cell(w['cpu_ratio_vs_hf'])}× less than datasets' "
                f"filter, {_spread_cell(w['cpu_ratio_vs_tfr'])}× less than tfr-reader.\n")
        bal = data["balanced"]
        text.append(f"### BalancedSampler against the global shuffle, batches of "
                    f"{bal['batch_size']} (class shares {bal['class_shares']})\n")
        text.append(table(["pipeline", "batches/s"], [[k, _spread_cell(v)] for k, v in
                                                      bal["batches_per_s"].items()]) + "\n")
        text.append(table(["sampler", "classes per batch", "top-2 share", "smallest class"],
                          [[k, fmt(q["classes_per_batch"]), fmt(q["top2_share"]),
                            fmt(q["smallest_class_share"])]
                           for k, q in bal["quality"].items()]) + "\n")
        text.append(f"BalancedSampler / global shuffle, read and decoded: "
                    f"{_spread_cell(bal['ratio'])}; record numbers alone: "
                    f"{_spread_cell(bal['ratio_numbers_only'])}.\n")
        cpu = (f" ({fmt(lk['cpu_ratio_batch']['median'])}× and "
               f"{fmt(lk['cpu_ratio_one']['median'])}× per CPU second)"
               if "cpu_ratio_batch" in lk else "")
        summary.append(
            f"Columns (tools/bench_columns.py): build with 2 columns "
            f"{fmt(b['ratio']['median'])}× the time without; key lookups "
            f"{fmt(lk['ratio_batch']['median'])}× tfd-utils' get_record in batches "
            f"({fmt(lk['ratio_one']['median'])}× a key a call){cpu} with "
            f"{fmt(lk['memory_ratio'])}× its index memory; where(label=3) on "
            f"{w['records']:,} records {fmt(w['ratio_vs_hf']['median'])}× datasets.filter, "
            f"{fmt(w['ratio_vs_tfr']['median'])}× tfr-reader; remote lookup batch in "
            f"{max(rounds)} request round(s); BalancedSampler "
            f"{fmt(bal['ratio']['median'])}× the global shuffle's batches/s.")
        self.sections.append("\n".join(text) + "\n")
        self.summary += summary
    def obstore(self) -> None:
        """obstore against the fsspec path, row by row (tools/bench_obstore.py)."""
        data = self.load("obstore")
        title = "obstore against the fsspec path (tools/bench_obstore.py)"
        if data is None:
            self.missing(title, "bench_obstore.py")
            return
        c = data["config"]
        text = [f"## {title}\n",
                f"{c['rounds']} interleaved rounds in one run (the order of the two swapped "
                f"every round), obstore {c['obstore']}; median (min–max). Load average "
                f"{fmt(c['load_before']['load_average'][0], 2)} before, "
                f"{fmt(c['load_after']['load_average'][0], 2)} after, on "
                f"{c['load_before']['cores']} cores. Servers on 127.0.0.1: moto and "
                f"fake-gcs-server ({c['shards']} objects of {c['shard_mb']} MiB); \"far\" is "
                f"moto behind a +{fmt(c['rtt_ms'], 0)} ms RTT proxy ({c['shards']} objects of "
                f"{c['far_shard_mb']} MiB; \"open\" is a fresh process's, imports included); "
                f"batches of {c['batch']} random records of {c['record_size']} bytes. "
                "obstore's speedup and CPU saving are fsspec's time over obstore's, round by "
                "round (above 1: obstore wins). Web servers: docs/design.md (obstore lost "
                "there and is not offered for them). Decision: docs/design.md.\n"]
        rows = []
        for row, e in data["rows"].items():
            cells = []
            for backend in ("fsspec", "obstore"):
                got = e[backend]
                if "gb_per_s" in got:
                    cells.append(f"{_spread_cell(got['gb_per_s'])} GB/s, "
                                 f"{_spread_cell(got['cpu_s_per_gb'])} CPU s/GB")
                else:
                    cells.append(f"{_spread_cell(got['wall_s'], 1000)} ms")
            saving = e.get("cpu_saving")
            rows.append([row.replace("_", " "), *cells, _spread_cell(e["speedup"]),
                         _spread_cell(saving) if saving else "–"])
        text.append(table(["row", "fsspec", "obstore", "obstore speedup", "CPU saving"], rows)
                    + "\n")
        won = [row.replace("_", " ") for row, e in data["rows"].items()
               if e["speedup"]["min"] > 1]
        lost = [row.replace("_", " ") for row, e in data["rows"].items()
                if e["speedup"]["max"] < 1]
        if won or lost:
            text.append("obstore faster in every round: " + (", ".join(won) or "none")
                        + "; slower in every round: " + (", ".join(lost) or "none") + ".\n")
        self.summary.append(
            "obstore backend, opt-in for S3/GCS (tools/bench_obstore.py), its speed over "
            "s3fs/gcsfs: " + ", ".join(f"{row.replace('_', ' ')} {_spread_cell(e['speedup'])}×"
                                       for row, e in data["rows"].items()) + ".")
        self.sections.append("\n".join(text) + "\n")

    def _transport_retry(self, r: dict[str, Any], text: list[str], summary: list[str]) -> None:
        us = r["us_per_request"]
        text.append("### Retries: our loop and tenacity's `AsyncRetrying` with the same "
                    "decisions\n")
        rows = [["µs per request answered at once", _spread_cell(us["ours"]),
                 _spread_cell(us["tenacity"])]]
        faults = r.get("faults")
        if faults:
            n = faults["reads"]
            for key, what in (("right", f"reads answered right (of {n})"),
                              ("given_up", "reads given up"), ("wrong", "reads with wrong bytes"),
                              ("attempts_per_read", "attempts per read"),
                              ("seconds", "seconds per round")):
                rows.append([f"faults: {what}", _spread_cell(faults["cases"]["ours"][key]),
                             _spread_cell(faults["cases"]["tenacity"][key])])
        text.append(table(["", "ours", "tenacity"], rows) + "\n")
        if faults:
            text.append("Faults injected per request: " + ", ".join(
                f"{k} {fmt(100 * v)} %" for k, v in faults["faults"].items()) + ".\n")
        same = [case for case, c in r.get("behaviour", {}).items()
                if c["ours"]["attempts"] == c["tenacity"]["attempts"]]
        text.append(f"Scripted failures: the same attempts in {len(same)} of "
                    f"{len(r.get('behaviour', {}))} cases; the errors raised:\n")
        text.append(table(["script", "ours", "tenacity"],
                          [[case, f"{c['ours']['attempts']}: {c['ours']['result']}",
                            f"{c['tenacity']['attempts']}: {c['tenacity']['result']}"]
                           for case, c in r.get("behaviour", {}).items()]) + "\n")
        summary.append(f"the retry loop {fmt(us['ours']['median'], 2)} µs per request "
                       f"(tenacity {fmt(us['tenacity']['median'], 2)} µs)")

    def _transport_pacing(self, p: dict[str, Any], text: list[str], summary: list[str]) -> None:
        live = p.get("live")
        if live:
            text.append(f"### Pacing, live: {live['readers']} readers of one S3-like store "
                        f"admitting {fmt(live['limit_per_s'])} GET/s (`503 SlowDown` over it), "
                        f"through s3fs, {fmt(live['seconds'])} s rounds\n")
            half = fmt(live["seconds"] / 2)
            rows = []
            for name, c in live["cases"].items():
                rows.append([name, _spread_cell(c["ok_per_s"]), _spread_cell(c["onset_ok_per_s"]),
                             _spread_cell(c["steady_ok_per_s"]),
                             _spread_cell(c["onset_throttled_fraction"], 100),
                             _spread_cell(c["steady_throttled_fraction"], 100),
                             fmt(c["worst_second"]["median"]), fmt(c["failed"]["max"]),
                             fmt(c["stuck_when_cancelled"]["max"])])
            text.append(table(["pacer", "reads/s", f"first {half} s", f"last {half} s",
                               "throttled % (first)", "throttled % (last)", "worst second",
                               "given up", "stuck when cancelled"], rows) + "\n")
            ours, boto = (live["cases"].get(k) for k in ("ours (AdaptiveRate)",
                                                         "botocore adaptive"))
            if ours and boto:
                summary.append(f"pacing {fmt(ours['ok_per_s']['median'])} reads/s from a store "
                               f"admitting {fmt(live['limit_per_s'])} "
                               f"(botocore's adaptive mode {fmt(boto['ok_per_s']['median'])})")
        if p.get("cases"):
            text.append(f"### Pacing, simulated: readers of a store admitting "
                        f"{fmt(p['limit_per_s'])} GET/s (tools/rate_sim.py, virtual time)\n")
            text.append(table(["readers, phase, pacer", "records/s", "requests/s answered",
                               "throttled", "worst second (requests)"],
                              [[k, fmt(c["records_per_s"]), fmt(c["requests_per_s"]),
                                f"{fmt(100 * c['throttled_fraction'])} %",
                                fmt(c["worst_second"])] for k, c in p["cases"].items()]) + "\n")


    def rows_table(self, name: str, title: str, tool: str) -> None:
        """A benchmark that writes a list of rows named by ``"name"`` (tools/benchlib.py)."""
        rows = self.load(name)
        if rows is None:
            self.missing(title, tool)
            return
        keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k != "name"]
        self.sections.append(f"## {title}\n\n" + table(
            ["what", *keys], [[r["name"], *(fmt(r.get(k)) if isinstance(r.get(k), (int, float))
                                            else str(r.get(k, "")) for k in keys)]
                              for r in rows]) + "\n")

    def read(self) -> None:
        data = self.load("read")
        title = "Random access and iteration (tools/bench_read.py)"
        if data is None:
            self.missing(title, "bench_read.py")
            return
        if isinstance(data, list):  # written before the rounds were interleaved
            self.rows_table("read", title, "bench_read.py")
            return
        text = [f"## {title}\n", "Records/s (median and range over "
                f"{data['config']['rounds']} interleaved rounds, every contender in one "
                "process); each ratio is taken round by round; records per CPU second count "
                "every thread (what a contender costs a busy machine). ofindex checks every "
                "CRC and each record's length against its index; the peers check nothing."
                + _load_note(data["config"]) + "\n"]
        rows = data["rows"]
        for case in dict.fromkeys(r["case"] for r in rows):
            mine = [r for r in rows if r["case"] == case]
            text.append(f"### {case}\n")
            text.append(table(
                ["contender", "records/s", "GB/s", "against", "records per CPU second"],
                [[r["contender"], span(r["records_per_s"], r["records_per_s_min"],
                                       r["records_per_s_max"]), fmt(r["GB_per_s"]),
                  "; ".join(f"{span(v['median'], v['min'], v['max'])}× {peer}"
                            for peer, v in r.get("vs", {}).items()),
                  fmt(r.get("records_per_cpu_s"))]
                 for r in mine]))
            text.append("")
        self.sections.append("\n".join(text) + "\n")

    def arrayrecord(self) -> None:
        data = self.load("arrayrecord")
        title = "ArrayRecord's access patterns, per compression (tools/bench_arrayrecord.py)"
        if data is None:
            self.missing(title, "bench_arrayrecord.py")
            return
        c = data["config"]
        names = {key: words.format(loader=c["loader_batch"])
                 for key, words in c["patterns"].items()}
        rows = data["rows"]
        patterns = [key for key in names if any(r["pattern"] == key for r in rows)]
        ours, theirs = c["our_codecs"], list(c["arrayrecord_codecs"])
        ratios = {(x["pattern"], x["codec"]): x["ratio"] for x in _ar_compared(data)}
        text = [f"## {title}\n", _arrayrecord_intro(data)]
        text += ["### ofindex, records/s\n", table(
            ["access pattern", *ours],
            [[names[p], *(_ar_cell(rows, p, "ofindex", codec, api=False) for codec in ours)]
             for p in patterns]), ""]
        text += ["### ArrayRecord, records/s (its fastest API and group size)\n", table(
            ["access pattern", *(c["arrayrecord_codecs"][k] for k in theirs)],
            [[names[p], *(_ar_cell(rows, p, "ArrayRecord", codec) for codec in theirs)]
             for p in patterns]), ""]
        text += ["### ofindex / ArrayRecord, within each round\n", table(
            ["access pattern", *(f"{codec} vs {_ar_against(codec)}" for codec in ours)],
            [[names[p], *(_ratio_span(ratios.get((p, codec))) for codec in ours)]
             for p in patterns]), ""]
        text += ["### File size, % of the records' bytes\n", table(
            ["file", "size"], [[_ar_file_name(key, c), fmt(100 * v["share"])]
                               for key, v in data["sizes"].items()]), ""]
        text.append(_arrayrecord_losses(data, names))
        self.sections.append("\n".join(text) + "\n")
        self.summary.append(_arrayrecord_summary(data))

    def build(self) -> None:
        self.rows_table("build", "Building indexes (tools/bench_build.py)", "bench_build.py")

    def decode(self) -> None:
        data = self.load("decode")
        title = "Decoding (tools/bench_decode.py)"
        if data is None:
            self.missing(title, "bench_decode.py")
            return
        load = data.get("machine_load")
        text = [f"## {title}\n", f"Batches of {data.get('batch')} records unless said; records/s "
                "from the median over interleaved rounds (best round in brackets); ratios are "
                "those of the rounds (median, min–max): the machine drifts, the ratios less"
                + (f"; load average {fmt(load['load_average'][0])} on {load['cores']} cores "
                   "at the start" if load else "") + ".\n"]
        for name, entry in data.get("workloads", {}).items():
            if "ofindex_vs_tf" in entry or entry.get("tf_sparse"):
                text.append(self._decode_varlen(name, entry))
                continue
            text.append(f"### {name} ({entry.get('floats_per_record')} floats per record)\n")
            rows = []
            for who in ("ofindex", "ofindex_out", "tf", "vahidk", "fresh_output_floor"):
                t = entry.get(who)
                if isinstance(t, dict) and "median_s" in t:
                    n = data.get("batch") or 1
                    rows.append([who, f"{fmt(n / t['median_s'])} ({fmt(n / t['best_s'])})"
                                 if "best_s" in t else fmt(n / t["median_s"])])
                elif isinstance(t, str):
                    rows.append([who, t])
            text.append(table(["decoder", "records/s"], rows) + "\n")
        if data.get("single"):
            text.append(self._decode_single(data["single"]))
        if data.get("peers"):
            text.append(self._decode_peers(data["peers"]))
        losses = _decode_losses(data)
        if losses:
            text.append("Where ofindex loses: the rounds in which it was slower than a peer "
                        "(ratio below 1×): " + "; ".join(losses) + ".\n")
        self.sections.append("\n".join(text) + "\n")

    def _decode_varlen(self, name: str, entry: dict[str, Any]) -> str:
        """A VarLen workload of tools/bench_decode.py against tf.io.parse_example."""
        what = {"varlen": "8 features, 2 of them VarLen (token ids, optional floats)",
                "tokens": "1–512 token ids per record"}.get(name, name)
        text = [f"### {name}: {fmt(entry['records'])} records of {what}, batches of "
                f"{fmt(entry['batch'])} ({fmt(entry['bytes_per_record'])} B a record)\n"]
        labels = {"ofindex": "ofindex BatchDecoder", "tf": "tf.io.parse_example, RaggedFeature",
                  "tf_sparse": "tf.io.parse_example, VarLenFeature"}
        rows = []
        for who, label in labels.items():
            t = entry.get(who)
            vs, cpu = entry.get(f"ofindex_vs_{who}"), entry.get(f"ofindex_vs_{who}_cpu")
            ratio = span(vs["median"], vs["min"], vs["max"]) + "×" if vs else ""
            per_cpu = span(cpu["median"], cpu["min"], cpu["max"]) + "×" if cpu else ""
            if isinstance(t, dict):
                n = entry["records"]
                rows.append([label, f"{fmt(n / t['median_s'])} ({fmt(n / t['best_s'])})", ratio,
                             per_cpu])
            elif isinstance(t, str):
                rows.append([label, t, "", ""])
        text.append(table(["decoder", "records/s", "ofindex against it",
                           "the same per CPU second"], rows) + "\n")
        against = [(label, entry[f"ofindex_vs_{who}"]) for who, label in labels.items()
                   if who != "ofindex" and entry.get(f"ofindex_vs_{who}")]
        if against:
            self.summary.append(
                f"Batched decoding with VarLen features ({name}: {what}): ofindex "
                + ", ".join(f"{fmt(v['median'], 2)}× {label} ({fmt(v['min'], 2)}–"
                            f"{fmt(v['max'], 2)}×)" for label, v in against)
                + " (records/s).")
        return "\n".join(text)

    def _decode_single(self, single: dict[str, Any]) -> str:
        """The one-record rows of tools/bench_decode.py."""
        text = [f"### One record at a time: `ds[i]` decoded, {fmt(single['records'])} Examples "
                "of 3 features (key bytes, label int64, ~200 B payload), random record numbers, "
                f"{single['rounds']} interleaved rounds\n"]
        rows = []
        for row in single["rows"]:
            against = "; ".join(f"{span(v['median'], v['min'], v['max'])}× {peer}"
                                for peer, v in row.get("vs", {}).items())
            per_cpu = "; ".join(f"{span(v['median'], v['min'], v['max'])}× {peer}"
                                for peer, v in row.get("vs_cpu", {}).items())
            rows.append([row["contender"], span(row["records_per_s"], row["records_per_s_min"],
                                                row["records_per_s_max"]), against, per_cpu])
        text.append(table(["contender", "records/s", "against", "the same per CPU second"],
                          rows) + "\n")
        for row in single["rows"]:
            fs = row.get("vs", {}).get("Example.FromString(ds[i])")
            hf = row.get("vs", {}).get("Hugging Face ds[i]")
            if fs and hf:
                self.summary.append(
                    f"One decoded record, `{row['contender']}`: {fmt(fs['median'], 2)}× "
                    f"protobuf's `Example.FromString(ds[i])` ({fmt(fs['min'], 2)}–"
                    f"{fmt(fs['max'], 2)}×), {fmt(hf['median'], 2)}× Hugging Face `ds[i]` "
                    f"({fmt(hf['min'], 2)}–{fmt(hf['max'], 2)}×).")
        return "\n".join(text)

    def _decode_peers(self, peers: dict[str, Any]) -> str:
        """The rows of tools/decode_peers.py: tfr-reader and tfd-utils on the same file."""
        text = ["### Peers that index TFRecord files in place: tfr-reader, tfd-utils\n",
                f"The one-record rows' file ({fmt(peers['records'])} Examples): random records "
                f"decoded, random batches of {peers['batch']}, {peers['rounds']} interleaved "
                "rounds; the index build of the file from scratch, "
                f"{peers['build_rounds']} interleaved rounds. tfd-utils reads a record by its "
                "key only (no access by position, no batch read): its row is another "
                "operation, shown for scale.\n"]
        rows = []
        for row in peers["rows"]:
            odd = row.get("not_the_same_operation", [])
            against = "; ".join(f"{span(v['median'], v['min'], v['max'])}× {peer}"
                                + (" (another operation)" if peer in odd else "")
                                for peer, v in row.get("vs", {}).items())
            per_cpu = "; ".join(f"{span(v['median'], v['min'], v['max'])}× {peer}"
                                for peer, v in row.get("vs_cpu", {}).items())
            rows.append([row["contender"], span(row["records_per_s"], row["records_per_s_min"],
                                                row["records_per_s_max"]), against, per_cpu])
        for row in peers["builds"]:
            rate, vs, cpu = row["records_per_s"], row.get("ofindex_vs"), row.get("ofindex_vs_cpu")
            rows.append([f"{row['contender']} (the whole file)",
                         f"{span(rate['median'], rate['min'], rate['max'])} "
                         f"({fmt(row['seconds']['median'])} s)",
                         f"{span(vs['median'], vs['min'], vs['max'])}×" if vs else "",
                         f"{span(cpu['median'], cpu['min'], cpu['max'])}×" if cpu else ""])
        rows += [[tool, why, "", ""] for tool, why in peers.get("missing", {}).items()]
        text.append(table(["contender", "records/s", "ofindex against it",
                           "the same per CPU second"], rows) + "\n")
        same = [(row["contender"], peer, v) for row in peers["rows"]
                for peer, v in row.get("vs", {}).items()
                if peer not in row.get("not_the_same_operation", [])]
        same += [("ofindex build_index", row["contender"], row["ofindex_vs"])
                 for row in peers["builds"] if row.get("ofindex_vs")]
        if same:
            self.summary.append(
                "Against the peers that index TFRecords in place (goal ≥ 2×): "
                + ", ".join(f"`{ours}` {fmt(v['median'], 2)}× {peer} ({fmt(v['min'], 2)}–"
                            f"{fmt(v['max'], 2)}×)" for ours, peer, v in same) + ".")
        return "\n".join(text)

    def ray(self) -> None:
        data = self.load("ray")
        title = "Ray Data: read_ofindex against read_tfrecords (tools/bench_ray.py)"
        if data is None:
            self.missing(title, "bench_ray.py")
            return
        c = data["config"]
        load = c.get("load_average")
        text = [f"## {title}\n", f"Ray {c['ray']}, {c['cpus']} CPUs; every record through "
                f"`iter_batches` (pyarrow batches of {fmt(c['batch_size'])} rows); rows/s: "
                f"median of {c['repeats']} alternated rounds [min–max], after a warm-up pass "
                "of each reader; rows per CPU-second of all of Ray's processes (less "
                "disturbed by the machine's other load than wall time)"
                + (f"; load average {fmt(load['before'])} before, {fmt(load['after'])} after "
                   f"({fmt(c.get('machine_cores', 0))} cores)" if load else "") + ". "
                "`in_memory_blocks` is the bound Ray sets: blocks of the same rows and bytes "
                "already in memory. `read_tfrecords` checks no CRC; `read_ofindex` checks "
                "every record's unless `verify=False` (`read_ofindex_raw_unchecked`)."
                + _reruns_note(c) + "\n"]
        rows = []
        for case in data["cases"]:
            what = f"{fmt(case['records'])} × {fmt(case['payload_bytes'])} B"
            for reader, r in case["readers"].items():
                rows.append([what, reader, f"{fmt(r['rows_per_s'])} [{fmt(r['min'])}–"
                             f"{fmt(r['max'])}]", f"{fmt(r['vs_read_tfrecords'])}×",
                             fmt(r["rows_per_cpu_s"]) if "rows_per_cpu_s" in r else ""])
            if "object_store_put_get_mb_per_s" in case:
                rows.append([what, "object store: ray.put + ray.get",
                             f"{fmt(case['object_store_rows_per_s'])} "
                             f"({fmt(case['object_store_put_get_mb_per_s'])} MB/s)", "", ""])
            raw = case["readers"].get("read_ofindex_raw")
            if raw:
                self.summary.append(
                    f"Ray Data, {fmt(case['records'])} records of {fmt(case['payload_bytes'])} "
                    f"B: read_ofindex {fmt(raw['vs_read_tfrecords'])}× read_tfrecords' rows/s.")
        text.append(table(["data", "reader", "rows/s", "vs read_tfrecords", "rows/CPU-s"],
                          rows))
        self.sections.append("\n".join(text) + "\n")

    def engines(self) -> None:
        data = self.load("engines")
        title = "Spark, Beam and Dask: split reads and indexed writes (tools/bench_engines.py)"
        if data is None:
            self.missing(title, "bench_engines.py")
            return
        c = data["config"]
        before, after = data.get("load_before", {}), data.get("load_after", {})
        ranged = any("read_rows_per_s_range" in (data.get(e) or {}) for e in ("spark", "beam"))
        timing = (f"rows/s: the median of {c['repeats']} alternated runs after a warm-up run "
                  "of each, the slowest and fastest run in brackets; ratios taken within each "
                  "run: median (range)" if ranged else
                  f"rows/s: best of {c['repeats']} alternated runs after a warm-up run of each")
        text = [f"## {title}\n",
                f"One file of {fmt(c['records'])} Examples with a {fmt(c['payload'])}-byte "
                f"payload ({c['size'] / 1e9:.2f} GB of TFRecord), the same rows in one Parquet "
                f"file and in one GZIP TFRecord file; every engine on 2 cores; {timing}; load "
                f"average {fmt(before.get('load_average', [0])[0])} before, "
                f"{fmt(after.get('load_average', [0])[0])} after (2 cores). Goals (issue 50): "
                "Spark split read ≥ 0.5× Parquet and ≥ 1.8× one partition; Beam split read "
                "≥ 1.8× `ReadFromTFRecord`; Beam indexed write ≥ 1.0× `WriteToTFRecord` "
                "alone." + (f" {c['note'][0].upper()}{c['note'][1:]}." if c.get("note") else "")
                + _pushdown_note(data.get("spark", {}).get("pushdown")) + "\n"]
        rows = []
        for engine, keys in (("spark", ("read_rows_per_s", "write_rows_per_s")),
                             ("beam", ("read_rows_per_s", "write_rows_per_s")),
                             ("dask", ("rows_per_s",))):
            part = data.get(engine)
            if not part:
                continue
            for key in keys:
                spans = part.get(f"{key}_range", {})
                for name, rate in part[key].items():
                    span = spans.get(name)
                    rows.append([engine, name, fmt(rate) + (
                        f" [{fmt(span[0])}–{fmt(span[1])}]" if span else "")])
            ratios = ", ".join(f"{name} {_engine_ratio(value)}"
                               for name, value in part["ratios"].items())
            rows.append([engine, "ratios", ratios])
            self.summary.append(f"{engine.capitalize()} on ofindex: {ratios}.")
        text.append(table(["engine", "contender", "rows/s"], rows))
        self.sections.append("\n".join(text) + "\n")

    def events(self) -> None:
        """TensorBoard logs: ofindex.events against tbparse and EventAccumulator
        (tools/bench_events.py)."""
        data = self.load("events")
        title = "TensorBoard logs against tbparse and EventAccumulator (tools/bench_events.py)"
        if data is None:
            self.missing(title, "bench_events.py")
            return
        local, scale = data["local"], data["scale"]
        before, after = data.get("load_before", {}), data.get("load_after", {})
        text = [f"## {title}\n",
                f"A log directory of {data['runs']} runs ({local['bytes'] / 1e6:,.0f} MB: "
                f"{data['scalar_tags']} scalar tags every {scale['scalars']} of "
                f"{fmt(scale['steps'])} steps, two image tags every {fmt(scale['images'])} "
                f"steps, two histogram tags every {fmt(scale['histograms'])}); each "
                "measurement in a fresh process, time and peak memory above that process's "
                f"after its imports, median (min–max) of {data['rounds']} interleaved "
                f"round{'s' if data['rounds'] != 1 else ''}; "
                f"load average {fmt(before.get('load_average', [0])[0])} before, "
                f"{fmt(after.get('load_average', [0])[0])} after, on "
                f"{before.get('cores', '?')} cores. Goals (issue 49): one scalar tag of every "
                "run ≥ 100× tbparse and EventAccumulator(size_guidance=0); the first build ≥ 2× "
                "EventAccumulator's full load; a refresh after 1 % growth ≤ 2 % of a build.\n"]
        labels = {"load-ofindex": "one tag, all runs: ofindex (indexed)",
                  "load-tbparse": "one tag, all runs: tbparse", "load-accumulator":
                  "one tag, all runs: EventAccumulator", "build-ofindex":
                  "first build: ofindex.events", "build-accumulator":
                  "full load: EventAccumulator", "refresh-ofindex":
                  "refresh after 1 % growth: ofindex"}
        text.append(table(["task, contender", "seconds", "peak MB"], [
            [labels.get(name, name), span(st["median_s"], st["min_s"], st["max_s"]),
             fmt(st["peak_mb"])] for name, st in local["stats"].items()]))
        r = local["ratios"]
        text.append("")
        text.append(table(["ratio", "value", "goal"], [
            ["one tag: tbparse / ofindex", f"{fmt(r['load_vs_tbparse'])}×", "≥ 100×"],
            ["one tag: EventAccumulator / ofindex", f"{fmt(r['load_vs_accumulator'])}×",
             "≥ 100×"],
            ["first build: EventAccumulator / ofindex", f"{fmt(r['build_vs_accumulator'])}×",
             "≥ 2×"],
            ["refresh after 1 % growth / first build",
             f"{fmt(100 * r['refresh_fraction_of_build'])} %", "≤ 2 %"],
            ["peak memory of one tag: tbparse / ofindex",
             f"{fmt(r['load_memory_vs_tbparse'])}×", ""]]))
        s3 = data.get("s3")
        if s3:
            text.append("\nThe same log in the S3 emulator (moto), ofindex: " + ", ".join(
                f"{labels.get(name, name).split(': ')[0]} {fmt(st['median_s'])} s"
                for name, st in s3.items() if "median_s" in st)
                + f"; the refresh {fmt(100 * s3['refresh_fraction_of_build']['value'])} % of "
                "the build (an object cannot grow: a refresh writes each index it grows again "
                "whole, its old bytes first).")
        self.summary.append(
            f"TensorBoard logs ({local['bytes'] / 1e6:,.0f} MB, {data['runs']} runs): one "
            f"scalar tag of every run {fmt(r['load_vs_tbparse'])}× tbparse and "
            f"{fmt(r['load_vs_accumulator'])}× EventAccumulator; the first build "
            f"{fmt(r['build_vs_accumulator'])}× EventAccumulator's full load; a refresh "
            f"after 1 % growth {fmt(100 * r['refresh_fraction_of_build'])} % of a build.")
        self.sections.append("\n".join(text) + "\n")

    def write(self, readme: str | None) -> str:
        """Write docs/benchmarks.md (and README's marked block); returns the markdown."""
        for section in (self.pipeline, self.images, self.sequential, self.read,
                        self.arrayrecord, self.build,
                        self.decode,
                        self.compressed, self.shuffle, self.shuffle_quality, self.mixing,
                        self.remote, self.scale,
                        self.data_cache, self.cache_stores, self.manifests, self.rate_limits,
                        self.transport, self.columns, self.obstore, self.ray,
                        self.engines, self.writing, self.converting, self.events):
            before = len(self.summary)
            section()
            self.lines_of[self.sections[-1].split("\n", 1)[0]] = self.summary[before:]
        if self.keep_missing:
            self._carry_over(readme)
        md = ("# Benchmarks\n\nGenerated by `tools/report.py` from the JSON the benchmarks "
              "write to `bench-results/`; do not edit by hand. Every peer is measured in the "
              "same run as ofindex.\n\n" + "\n".join(self.sections))
        os.makedirs(self.docs, exist_ok=True)
        with open(os.path.join(self.docs, "benchmarks.md"), "w") as f:
            f.write(md)
        if readme is not None:
            update_readme(readme, self.summary)
        return md


    def _carry_over(self, readme: str | None) -> None:
        """Put back the sections whose JSON is missing from the current benchmarks.md, and
        their README lines (the summary lines that no fresh section wrote, in their order)."""
        old_md = ""
        path = os.path.join(self.docs, "benchmarks.md")
        if os.path.exists(path):
            with open(path) as f:
                old_md = f.read()
        blocks = {b.split("\n", 1)[0]: b for b in ("## " + x for x in old_md.split("\n## ")[1:])}
        fresh = [line for lines in self.lines_of.values() for line in lines]
        kept = [line for line in _readme_lines(readme) if line not in fresh]
        for k, sec in enumerate(self.sections):
            if sec.startswith(MISSING):
                head = "## " + sec[len(MISSING) :].strip()
                self.sections[k] = blocks.get(head, head + "\n\nNot measured yet.\n").rstrip(
                    "\n") + "\n"
        self.summary = [*(line for line in kept if not _same_topic(line, fresh)), *fresh]


def _ratio_span(ratio: dict[str, float] | None) -> str:
    """``median (min–max)×``, or a dash."""
    return span(ratio["median"], ratio["min"], ratio["max"]) + "×" if ratio else "–"


def _ar_against(codec: str) -> str:
    """What one of our codecs is compared with in the ArrayRecord section."""
    return "uncompressed" if codec == "uncompressed" else "its fastest codec"


def _ar_compared(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparisons the ArrayRecord section shows: our uncompressed file against its
    uncompressed one, our compressed files against its fastest compressed codec."""
    return [x for x in data["comparisons"]
            if (x["against"] == "uncompressed") == (x["codec"] == "uncompressed")]


def _ar_api(api: str) -> str:
    """ArrayRecord's API, briefly (``DataSource``, ``Reader``, ``Reader read_all, group_size
    256``)."""
    short = "DataSource" if "ArrayRecordDataSource" in api else "Reader"
    if "read_all" in api:
        short += " read_all"
    return short + (", group_size 256" if "group_size 256" in api else "")


def _ar_cell(rows: list[dict[str, Any]], pattern: str, library: str, codec: str,
             api: bool = True) -> str:
    """The fastest of a library's contenders for one pattern and codec: ``median (range)``
    (and, with ``api``, which API it was)."""
    mine = [r for r in rows if (r["pattern"], r["library"], r["codec"]) ==
            (pattern, library, codec)]
    if not mine:
        return "–"
    best = max(mine, key=lambda r: r["records_per_s"]["median"])
    rate = best["records_per_s"]
    cell = span(rate["median"], rate["min"], rate["max"])
    return f"{cell}, {_ar_api(best['api'])}" if api else cell


def _ar_file_name(key: str, config: dict[str, Any]) -> str:
    """``ours:GZIP`` -> ``ofindex GZIP (with its index)``; ``ar:zstd:1`` -> ``ArrayRecord
    zstd:3, group_size 1``."""
    parts = key.split(":")
    if parts[0] == "ours":
        return f"ofindex {parts[1]} (with its index)"
    return f"ArrayRecord {config['arrayrecord_codecs'][parts[1]]}, group_size {parts[2]}"


def _arrayrecord_intro(data: dict[str, Any]) -> str:
    """The conditions of the ArrayRecord section (one paragraph)."""
    c = data["config"]
    resident = max(c["cold_resident_share_after_drop"].values(), default=0.0)
    return (
        f"ArrayRecord's own workload (its docs/performance.md): {c['records']:,} records of "
        f"{c['words']} lorem-ipsum words (~{fmt(c['mean_record_bytes'])} B of text) read in "
        "the order of a permutation of all records (seed 42). ArrayRecord is written with "
        "`group_size:1` (the only size its `ArrayRecordDataSource` reads) and, for its "
        "sequential reads, `group_size:256`, in each codec its doc measures; ofindex as "
        "TFRecord: uncompressed, GZIP and ZLIB with `ofindex.Writer`'s seek point every 256 "
        "KiB, and GZIP with one every 4 KiB (the random-access setting, as `group_size:1` is "
        "ArrayRecord's). Records/s: median (range) over "
        f"{c['rounds']} interleaved rounds; each ratio is taken within its round against the "
        "fastest of ArrayRecord's APIs and group sizes for the pattern (our uncompressed file "
        "against its uncompressed one, our compressed files against its fastest compressed "
        "codec). *Warm* rows read from the page cache; *cold* rows read copies of the files "
        "whose pages are dropped (`posix_fadvise(DONTNEED)`; `mincore` then finds at most "
        f"{fmt(100 * resident)} % of them resident) before each run, and open the reader "
        "anew (opening counted). ofindex checks every CRC, ArrayRecord its chunks' hashes; "
        f"GZIP and ZLIB inflate with {c['inflater']}. Load average "
        f"{fmt(c['load_before']['load_average'][0], 2)} before, "
        f"{fmt(c['load_after']['load_average'][0], 2)} after, on "
        f"{c['load_before']['cores']} cores (a machine shared with other work).\n")


#: Why ArrayRecord wins a kind of row, said under the rows it wins: (compressed files or
#: not, the patterns, the reason).
_AR_WHY = (
    (True, ("single", "batch_all", "batch_loader", "cold_batch"),
     "Random records from GZIP and ZLIB: a TFRecord file compressed whole is one deflate "
     "stream, so a record is inflated from the seek point before it, half the spacing on "
     "average (128 KiB with the Writer's default seek point every 256 KiB, ~2 KB with one "
     "every 4 KiB), where ArrayRecord at `group_size:1` compresses each record alone (its "
     "files are then larger: see the sizes above)."),
    (True, ("seq_records", "seq_all", "cold_seq"),
     "Passes over GZIP and ZLIB: the streaming inflater of `for record in ds` and "
     "`iter_batches` is zlib's, on one core (ISA-L serves random reads only), where "
     "ArrayRecord's fastest codec decompresses chunks of 256 records (`group_size:256`) on "
     "its own threads."),
    (False, ("cold_batch",),
     "A cold random batch, uncompressed: through the memory map each record's page fault "
     "reads the kernel's read-ahead around it (the same batch with `mmap=False` does not), "
     "where ArrayRecord's data source reads each record through a 32 KiB buffer without "
     "read-ahead (`readahead_buffer_size:0`)."),
)


def _arrayrecord_losses(data: dict[str, Any], names: dict[str, str]) -> str:
    """Where ArrayRecord is faster (a median ratio below 1) and why, or that it is
    nowhere."""
    lost = [x for x in _ar_compared(data) if x["ratio"]["median"] < 1]
    if not lost:
        return "**Where we lose:** nowhere in this run.\n"
    items = "\n".join(f"- {names[x['pattern']]}, {x['codec']}: {fmt(x['ratio']['median'])}×"
                      for x in lost)
    why = [reason for compressed, patterns, reason in _AR_WHY
           if any((x["codec"] != "uncompressed") == compressed and x["pattern"] in patterns
                  for x in lost)]
    return (f"**Where we lose** (ofindex / ArrayRecord below 1 in the median):\n\n{items}\n"
            + "".join(f"\n{reason}\n" for reason in why))


def _arrayrecord_summary(data: dict[str, Any]) -> str:
    """The README line: our uncompressed file and our last compressed one against
    ArrayRecord."""
    c = data["config"]
    ratios = {(x["pattern"], x["codec"]): x["ratio"]["median"] for x in _ar_compared(data)}
    words = {"single": "single", "batch_loader": f"batches of {c['loader_batch']}",
             "seq_all": "sequential"}

    def figures(codec: str) -> str:
        return ", ".join(f"{what} {fmt(ratios[(key, codec)])}×" for key, what in words.items()
                         if (key, codec) in ratios)

    compressed = next((k for k in reversed(c["our_codecs"]) if k != "uncompressed"), None)
    line = (f"ArrayRecord's access patterns: ofindex / ArrayRecord's fastest API on "
            f"{c['records']:,} text records of ~{fmt(c['mean_record_bytes'])} B from the page "
            f"cache, uncompressed {figures('uncompressed')}")
    if compressed:
        line += f"; {compressed} against its fastest codec: {figures(compressed)}"
    return line + "."


def _reruns_note(config: dict[str, Any]) -> str:
    """A sentence per part measured again on its own (a benchmark's ``--only``), with the
    machine's load then; empty when there is none."""
    notes = []
    for rerun in config.get("reruns", []):
        part = rerun.get("part") or rerun.get("case")
        load = rerun.get("load_average")
        before, after = ((load["before"], load["after"]) if isinstance(load, dict) else
                         (rerun.get("load_before"), rerun.get("load_after")))
        rounds = rerun.get("repeats", rerun.get("rounds"))
        notes.append(f" The {part} part was measured again on its own ({fmt(rounds)} rounds; "
                     f"load {fmt(before, 2)} before, {fmt(after, 2)} after).")
    return "".join(notes)


def _load_note(data: Any) -> str:
    """The machine's load when a benchmark ran (a sentence), from its ``machine`` entry."""
    machine = data.get("machine") if isinstance(data, dict) else None
    if not machine:
        return ""
    seen = (machine.get("before"), machine.get("after"), machine)
    loads = [m["load_average"][0] for m in seen if isinstance(m, dict) and m.get("load_average")]
    cores = next((m.get("cores") for m in (machine, machine.get("before"))
                  if isinstance(m, dict) and m.get("cores")), None)
    return (f" Load average {', then '.join(fmt(x) for x in loads)} on {cores} cores "
            "(a machine shared with other work)." if loads else "")


def _spread_cell(value: dict[str, float], scale: float = 1.0) -> str:
    """``median (min–max)`` of a benchmark's spread (``scale`` times each)."""
    return span(scale * value["median"], scale * value["min"], scale * value["max"])


def _ratio_cell(row: dict[str, Any], key: str) -> str:
    """``median (min–max)×`` of a ratio over the rounds, or nothing."""
    if key not in row:
        return ""
    return span(row[key], row[key + "_min"], row[key + "_max"]) + "×"


def _readme_lines(readme: str | None) -> list[str]:
    """The summary lines between the README's bench markers (without their ``- ``)."""
    if readme is None or not os.path.exists(readme):
        return []
    with open(readme) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        return []
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line[2:] for line in block.splitlines() if line.startswith("- ")]


def _same_topic(line: str, fresh: list[str]) -> bool:
    """Whether a fresh line replaces ``line`` (the same words up to the first colon)."""
    return any(f.split(":", 1)[0] == line.split(":", 1)[0] for f in fresh)


def update_readme(path: str, summary: list[str]) -> None:
    """Replace the text between the README's bench markers with the summary."""
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to fill")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "\n".join(f"- {line}" for line in summary) if summary else "- (no results yet)"
    body += "\n\nAll tables, plots and conditions: [docs/benchmarks.md](docs/benchmarks.md)."
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{body}\n{END}{tail}")


def run_tools(names: list[str], results: str) -> None:
    """Run the named benchmarks, each writing its JSON into ``results``."""
    for name in names:
        tool, extra = TOOLS[name]
        out = os.path.join(results, f"{name}.json")
        print(f"running {tool} -> {out}", flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, tool), *extra, "--out", out],
                       check=True, cwd=ROOT)


def _remote_phrase(row: dict[str, Any] | None) -> str:
    """The README's words for the remote batch at the default spacing (empty if not run)."""
    if not row:
        return ""
    return (f" 256 random records over HTTP at +{fmt(row['rtt_ms'])} ms RTT: "
            f"{row['batch_warm_rtts']:.1f} RTT warm, {row['batch_cold_rtts']:.1f} cold.")


def _compressed_summary(case: dict, config: dict) -> list[str]:
    """The default-spacing figures of one compressed data set (build, reads, index, remote),
    as table lines; none for results written before these fields existed."""
    rnd, build, index = case.get("random"), case.get("build"), case.get("index")
    if not (rnd and build and index) or "ds_i_per_s_zlib" not in rnd:
        return []
    rows = [
        ["index build vs tf.data reading all (uncompressed MB/s)",
         f"{fmt(build['ofindex_build_MBps'])} vs {fmt(build['tf_read_all_MBps'])}: "
         f"{build['ratio']:.2f}x"],
        ["index size, % of the compressed file", fmt(100 * index["index_fraction"])],
        [f"random ds[i]/s ({config.get('inflater', '?')}; zlib alone)",
         f"{fmt(rnd['ds_i_per_s'])} ({fmt(rnd['ds_i_per_s_zlib'])})"],
        ["vs tf.data reading up to the record", f"{rnd['single_ratio']:.0f}x"],
        ["random records/s in batches of 256 (vs tf.data)",
         f"{fmt(rnd['getitems256_per_s'])} ({rnd['batch_ratio']:.1f}x)"],
    ]
    remotes = ([case["remote"]] * ("remote" in case) + case.get("remote_by_spacing", [])
               + case.get("remote_single_range", []))
    rows.extend([f"256 random records at +{fmt(r['rtt_ms'])} ms RTT, spacing "
                 f"{r.get('spacing', 0) // 1024} KiB"
                 + (f" (index {100 * r['index_fraction']:.2g}%)" if "index_fraction" in r else "")
                 + ("" if r.get("multi_range", True) else ", one range per request")
                 + " (cold: first batch / warm: after 8 batches)",
                 f"{r['batch_cold_rtts']:.1f} / {r['batch_warm_rtts']:.1f} RTT"
                 + (" ({:.1f}-{:.1f})".format(*r["batch_warm_rtts_range"])
                    if "batch_warm_rtts_range" in r else "")] for r in remotes)
    spacing = config.get("default_spacing", 0) // 1024
    return [f"At the default spacing ({spacing} KiB):\n", table(["", ""], rows), ""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=os.path.join(ROOT, "bench-results"))
    p.add_argument("--docs", default=os.path.join(ROOT, "docs"))
    p.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    p.add_argument("--no-readme", action="store_true", help="leave README.md alone")
    p.add_argument("--run", default="", help=f"comma-separated, of {', '.join(TOOLS)}")
    p.add_argument("--keep-missing", action="store_true",
                   help="sections whose JSON is missing keep what benchmarks.md and the "
                        "README already say")
    p.add_argument("--smoke", action="store_true",
                   help="report into a temporary directory, README untouched (a check)")
    a = p.parse_args(argv)
    if a.smoke:
        a.docs, a.no_readme = tempfile.mkdtemp(prefix="ofindex-report-"), True
    if a.run:
        run_tools([n for n in a.run.split(",") if n], a.results)
    Report(a.results, a.docs, a.keep_missing).write(None if a.no_readme else a.readme)
    print(f"wrote {os.path.join(a.docs, 'benchmarks.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
