"""The command line of columns (issue 48, step 4): ``ofindex build --columns``, ``ofindex
find --where`` (numbers, ``--count``, ``--head``) and ``ofindex get --key`` print what the
Python API and a scan of the truth give; a bad condition is one line and exit 2, a key found
nowhere exit 1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ofindex.columns.column_file import column_file_name
from ofindex.columns.key_file import key_file_name
from tests.kit.columns_data import cut, records, write_dataset

EXE = os.path.join(os.path.dirname(sys.executable), "ofindex")


def run(*args, text=True):
    return subprocess.run([EXE, *args], capture_output=True, text=text, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    payloads, truth = records(31, 600)
    data = write_dataset(str(tmp_path_factory.mktemp("cli-columns") / "data"),
                         cut(payloads, [250, 350]))
    done = run("build", data, "--columns", "label,image/id,score", "--no-progress")
    assert done.returncode == 0, done.stderr
    return data, truth


def test_build_writes_the_key_indexes_of_keys(tmp_path):
    payloads, _ = records(32, 300)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [100, 200]))
    done = run("build", data, "--columns", "label,image/id", "--keys", "image/id",
               "--no-progress")
    assert done.returncode == 0, done.stderr
    assert sorted(name for name in os.listdir(data + ".ofindex")
                  if name.endswith((".ofkey", ".ofcol"))) == sorted(
        [key_file_name("image/id")] + [column_file_name(f"part-00{k}", name) for k in range(2)
                                       for name in ("label", "image/id")])


def _numbers(text):
    return [int(line) for line in text.split()]


def test_find_prints_the_records_a_scan_finds(built):
    data, truth = built
    labels = truth["label"]
    done = run("find", data, "--where", "label=2")
    assert done.returncode == 0 and _numbers(done.stdout) == [
        i for i, v in enumerate(labels) if v == 2]
    done = run("find", data, "--where", "label=1,3", "--count")
    assert done.stdout.strip() == str(sum(v in (1, 3) for v in labels))
    done = run("find", data, "--where", "label=3:", "--where", "score=:0.5", "--head", "4")
    want = [i for i, (v, s) in enumerate(zip(labels, truth["score"], strict=True))
            if v is not None and v >= 3 and s is not None and s < 0.5][:4]
    assert _numbers(done.stdout) == want
    done = run("find", data, "--where", "label=", "--count")  # records without a label
    assert done.stdout.strip() == str(sum(v is None for v in labels))


def test_get_by_key_prints_the_records(built):
    data, truth = built
    ident = truth["image/id"][123]
    done = run("get", data, "--key", f"image/id={ident.decode()}", "--raw", text=False)
    raw = run("get", data, "123", "--raw", text=False)
    assert done.returncode == 0 and done.stdout == raw.stdout
    done = run("get", data, "--key", "image/id=nope", "--key", f"image/id={ident.decode()}")
    assert done.returncode == 1 and "# record 123 " in done.stdout
    assert done.stderr.strip() == "ofindex: error: no record holds image/id=nope"


@pytest.mark.parametrize(("args", "needle", "code"), [
    (["find", "{data}", "--where", "label=three"], "holds int64 values, not 'three'", 2),
    (["find", "{data}", "--where", "label"], "--where takes COLUMN=VALUE", 2),
    (["find", "{data}", "--where", "label=1", "--where", "label=2"], "twice", 2),
    (["find", "{data}", "--where", "nope=1"], "has no column 'nope'", 1),
    (["get", "{data}", "0", "--key", "label=1"], "not both", 2),
    (["get", "{data}"], "give record numbers", 2),
    (["build", "{data}", "--columns", "label,,score"], "--columns takes", 2),
    (["build", "{data}", "--columns", "label", "--keys", "label,label"], "--keys takes", 2),
    (["build", "{data}", "--columns", "label", "--keys", "score"], "--columns", 2),
])
def test_bad_conditions_are_one_line(built, args, needle, code):
    data, _ = built
    done = run(*[a.format(data=data) for a in args])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1 and needle in lines[0], done.stderr
    assert "Traceback" not in done.stderr
