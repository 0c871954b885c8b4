"""Processes racing over one dataset: builders and readers at once, and a Writer killed with
SIGKILL midway. Workers are separate processes (tests/kit/concurrency_worker.py), kept alive
across rounds and driven through their standard input.

Each of 20 rounds replaces the dataset's data files, then 4 processes build its index at the
same moment while 2 others open and read it in a loop. Readers may find it not indexed yet,
never a torn sidecar or manifest, a stale one or a wrong record; once the builders are done
no temporary file is left and the dataset reads back complete.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import ofindex
from tests.kit import paths
from tests.kit.concurrency_worker import RECORDS, SHARDS, expected
from tests.kit.helpers import index_dir_of

ROUNDS = 20


class Worker:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": paths.pythonpath()}
        worker = os.path.join(paths.KIT, "concurrency_worker.py")
        self.proc = subprocess.Popen([sys.executable, worker],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)

    def send(self, *words: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker {self.proc.pid} died (exit {self.proc.poll()})"
        return json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def workers():
    pool = [Worker() for _ in range(6)]
    yield pool[:4], pool[4:]
    for w in pool:
        w.stop()


def _write_round(directory: str, round_: int) -> None:
    """Replace the dataset by round ``round_``'s (no index: that is the builders' job)."""
    index = index_dir_of(directory)  # the default place of its index files
    for name in os.listdir(index) if os.path.isdir(index) else []:
        if name.endswith((".ofidx", ".json")):
            os.unlink(os.path.join(index, name))
    records = expected(round_)
    for k in range(SHARDS):
        with ofindex.Writer(os.path.join(directory, f"part-{k}"), index=False) as w:
            w.write_many(records[k * RECORDS : (k + 1) * RECORDS])


def test_four_builders_and_two_readers_race_for_twenty_rounds(tmp_path, workers):
    builders, readers = workers
    d = str(tmp_path / "data")
    os.makedirs(d)
    totals: dict[str, int] = {}
    for r in range(ROUNDS):
        _write_round(d, r)
        stop = str(tmp_path / f"stop-{r}")
        for w in readers:
            w.send("read", d, r, stop)
        for w in builders:
            w.send("build", d)
        built = [w.answer() for w in builders]
        open(stop, "w").close()
        seen = [w.answer() for w in readers]
        assert all(b == {"ok": True} for b in built), built
        for tally in seen:
            for outcome, n in tally.items():
                totals[outcome] = totals.get(outcome, 0) + n
        bad = {k: v for t in seen for k, v in t.items()
               if k not in ("complete", "not indexed yet")}
        assert not bad, f"round {r}: {bad}"
        assert not [n for n in os.listdir(d) if n.endswith(".tmp")], os.listdir(d)
        with ofindex.open(d) as ds:
            assert list(ds) == expected(r)
    print(f"\n{ROUNDS} rounds, reader outcomes: {totals}")
    assert totals.get("complete", 0) >= ROUNDS  # readers did see finished indexes


@pytest.mark.parametrize("existed", [True, False])
def test_a_writer_killed_midway_leaves_nothing_read_as_complete(tmp_path, existed):
    d = tmp_path / "k"
    p = str(d / "part-0")
    old = [b"old-%d" % i for i in range(10)]
    if existed:
        with ofindex.Writer(p) as w:
            w.write_many(old)
    writer = Worker()
    try:
        writer.send("write", p, 2000)
        assert writer.proc.stdout is not None
        assert writer.proc.stdout.readline().strip() == "writing"
        os.kill(writer.proc.pid, signal.SIGKILL)
        writer.proc.wait(10)
    finally:
        writer.stop()
    # the half-written file, left aside under a hidden name
    assert [n for n in os.listdir(d) if n.startswith(f".ofindex-{writer.proc.pid}-")]
    if existed:  # the old file and its index, intact, whatever way it is opened
        assert list(ofindex.open(p)) == old and list(ofindex.open(str(d))) == old
        ofindex.build_index(str(d))  # rebuilding ignores the temporary file too
        assert list(ofindex.open(str(d))) == old
    else:
        with pytest.raises((ofindex.DataFileNotFoundError, ofindex.IndexNotFoundError)):
            ofindex.open(p)
        with pytest.raises(ofindex.DataFileNotFoundError, match="no data files"):
            ofindex.open(str(d))
