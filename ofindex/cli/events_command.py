"""``ofindex events LOGDIR``: the runs and tags of a TensorBoard log directory, with their
counts and last steps (:mod:`ofindex.events`), and ``--plot TAG -o FILE.png`` to plot a scalar
tag of every run."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import missing_extra
from ..events import EventLog
from .exitcodes import EXIT_OK, UsageError


def cmd_events(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """``ofindex events``: index the log directory (only what is new), list or plot."""
    if args.plot is None and args.output is not None:
        raise UsageError("-o/--output goes with --plot TAG")
    if args.plot is not None and args.output is None:
        raise UsageError("--plot needs -o FILE.png, the file to write the plot to")
    with EventLog(args.logdir, index_dir=args.index_dir, storage_options=options) as log:
        tags = log.tags(args.run)
        if args.plot is not None:
            return _plot(log, args.plot, args.run, args.output)
        if args.json:
            print(json.dumps({"logdir": log.logdir, "runs": log.runs,
                              "tags": tags.to_dict(orient="records")}, indent=2))
            return EXIT_OK
        print(f"{log.logdir}: {len(log.runs)} runs, {len(tags)} tags")
        width = max([len("run tag"), *(len(f"{r} {t}") for r, t in zip(tags.run, tags.tag,
                                                                         strict=True))])
        print(f"{'run tag':<{width}}  {'kind':<10} {'values':>9} {'steps':>19}")
        for row in tags.itertuples(index=False):
            steps = f"{row.first_step}..{row.last_step}"
            print(f"{row.run + ' ' + row.tag:<{width}}  {row.kind:<10} {row.count:>9,} "
                  f"{steps:>19}")
    return EXIT_OK


def _plot(log: EventLog, tag: str, runs: list[str] | None, output: str) -> int:
    """Plot scalar tag ``tag`` of the runs against its steps, into ``output``."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: a file
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_extra("ofindex events --plot", "events", exc) from exc
    frame = log.scalars(tag, runs=runs)
    if not len(frame):
        known = sorted(set(log.tags(runs).query("kind == 'scalars'").tag))
        raise UsageError(f"--plot {tag}: no scalar tag of that name in {log.logdir} (its "
                         f"scalar tags: {', '.join(known[:10]) or 'none'})")
    figure, axes = plt.subplots(figsize=(8, 4.5))
    try:
        for run, part in frame.groupby("run", observed=True, sort=False):
            axes.plot(part["step"].to_numpy(), part["value"].to_numpy(), label=str(run))
        axes.set_xlabel("step")
        axes.set_ylabel(tag)
        axes.set_title(f"{tag} ({log.logdir})")
        axes.legend(loc="best", fontsize="small")
        axes.grid(alpha=0.3)
        figure.tight_layout()
        figure.savefig(output, dpi=100)
    finally:
        plt.close(figure)
    print(f"{output}: {tag} of {frame['run'].nunique()} runs, {len(frame):,} values")
    return EXIT_OK
