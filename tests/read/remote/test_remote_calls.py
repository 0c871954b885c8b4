"""How much of the library a remote read passes through: the ofindex modules and functions a
call tracer (``sys.setprofile``) sees entered while a 4-shard dataset served by nginx is
opened and its first batch of 256 records read (cold), and while a second batch is read
from the open dataset (warm). The counts are ceilings that may only fall: the design's
targets (issue 44) are at most 15 modules cold and 10 warm.

The trace runs in a fresh process (no state of other tests: caches, pools, imports), with
its own empty index cache, fixed data and fixed record numbers, and its imports made by a
first read of another copy of the data before the tracer is on. Every thread that runs
our code in the traced calls is traced: this one, fsspec's event loop and the threads started
while it runs (no other thread is left by the warm-up: checked).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ofindex import build_index
from ofindex.cli.synthetic import write_dataset
from tests.kit.helpers import copy_dataset

#: Today's counts (modules, functions by qualified name: two classes' ``__init__`` are two):
#: cold open + first batch, and a warm batch; the same in every run. Lower them when a change
#: makes them fall; they may not rise. (By bare function name, as in the issue: 33/272 and
#: 10/81.)
COLD_MODULES, COLD_FUNCTIONS = 33, 303
WARM_MODULES, WARM_FUNCTIONS = 10, 93

RECORDS, SHARDS, BATCH = 4000, 4, 256

_TRACE = r"""
import collections, json, sys, threading

import fsspec.asyn
import numpy as np

import ofindex

warm_up_url, url = sys.argv[1], sys.argv[2]
entered = collections.defaultdict(set)


def profile(frame, event, arg):
    if event == "call":
        module = frame.f_globals.get("__name__", "")
        if module == "ofindex" or module.startswith("ofindex."):
            entered[module].add(frame.f_code.co_qualname)


loop = fsspec.asyn.get_loop()


def tracing(hook):
    done = threading.Event()
    loop.call_soon_threadsafe(lambda: (sys.setprofile(hook), done.set()))
    done.wait()
    threading.setprofile(hook)
    sys.setprofile(hook)


def traced(read):
    entered.clear()
    tracing(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
        tracing(None)
    return {module: sorted(names) for module, names in entered.items()}


first = np.random.default_rng(1).choice(%(records)d, %(batch)d, replace=False)
second = np.random.default_rng(2).choice(%(records)d, %(batch)d, replace=False)
with ofindex.open(warm_up_url) as warm_up:  # the imports, outside the trace
    warm_up[first]
    warm_up[second]
    expected = warm_up[first], warm_up[second]
# threads made before the trace would run our code untraced: there are none but the loop's
untraced = {thread.name for thread in threading.enumerate()} - {"MainThread", "fsspecIO"}
assert not untraced, f"threads the tracer does not see: {untraced}"
opened, got = [], []
cold = traced(lambda: (opened.append(ofindex.open(url)), got.append(opened[0][first])))
warm = traced(lambda: got.append(opened[0][second]))
opened[0].close()
# the traced calls read the records (the same copy's as the warm-up read)
assert [list(batch) for batch in got] == [list(batch) for batch in expected]
print(json.dumps({"cold": cold, "warm": warm}))
"""


def _counts(entered: dict[str, list[str]]) -> tuple[int, int]:
    return len(entered), sum(len(names) for names in entered.values())


@pytest.fixture(scope="module")
def traced(tmp_path_factory, nginx_server):
    """The trace of a cold and a warm remote read: module -> the functions entered in it."""
    source = tmp_path_factory.mktemp("calls") / "ds"
    write_dataset(str(source), RECORDS, SHARDS, kind="random", record_size=2000, index=False,
                  seed=5)
    build_index(str(source))
    served = os.path.join(nginx_server.root, "calls")
    copy_dataset(source, os.path.join(served, "warm-up"))
    copy_dataset(source, os.path.join(served, "ds"))
    env = dict(os.environ, OFINDEX_INDEX_CACHE=str(tmp_path_factory.mktemp("index-cache")),
               OFINDEX_PURE_PYTHON="0")  # the compiled loops, as users run them
    done = subprocess.run(
        [sys.executable, "-c", _TRACE % {"records": RECORDS, "batch": BATCH},
         f"{nginx_server.url}/calls/warm-up", f"{nginx_server.url}/calls/ds"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    trace: dict[str, dict[str, list[str]]] = json.loads(done.stdout)
    return trace


def test_the_tracer_sees_the_read_path(traced):
    """A trace that missed the read (a hook not set) would pass any ceiling: the cold one
    enters the opening, the dataset and the remote index round; the warm one the dataset."""
    assert {"ofindex.opening", "ofindex.read.dataset",
            "ofindex.read.remote.index_round"} <= set(traced["cold"])
    assert "ofindex.read.dataset" in traced["warm"]


def test_a_cold_remote_open_and_first_batch_enter_no_more_than_today(traced):
    modules, functions = _counts(traced["cold"])
    print(f"cold open + first batch of {BATCH}: {modules} modules, {functions} functions")
    assert modules <= COLD_MODULES and functions <= COLD_FUNCTIONS, traced["cold"]


def test_a_warm_remote_batch_enters_no_more_than_today(traced):
    modules, functions = _counts(traced["warm"])
    print(f"warm batch of {BATCH}: {modules} modules, {functions} functions")
    assert modules <= WARM_MODULES and functions <= WARM_FUNCTIONS, traced["warm"]
