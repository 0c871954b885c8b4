"""A worker process of tests/index/test_concurrency.py: reads one command per line on stdin, answers
one JSON line on stdout.

    build <dir>                      build_index(dir); answers {"ok": true} or the error
    read <dir> <round> <stop file>   opens and reads the dataset again and again until the stop
                                     file exists; answers the count of each outcome
    write <path> <records>           a Writer that writes forever, saying "writing" once
                                     <records> are written (to be killed with SIGKILL)
"""

from __future__ import annotations

import collections
import json
import os
import sys

import ofindex
from ofindex import IndexNotFoundError, SidecarError, StaleIndexError

SHARDS, RECORDS = 3, 40


def expected(round_: int) -> list[bytes]:
    """The records of round ``round_``, shard by shard."""
    return [f"r{round_}-s{k}-i{i}-".encode() * (1 + i % 7)
            for k in range(SHARDS) for i in range(RECORDS)]


def build(directory: str) -> dict:
    try:
        ofindex.build_index(directory)
        return {"ok": True}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def read(directory: str, round_: int, stop: str) -> dict:
    want = expected(round_)
    tally: collections.Counter[str] = collections.Counter()
    while True:
        last = os.path.exists(stop)  # one more pass after the stop file appears
        try:
            with ofindex.open(directory) as ds:
                got = list(ds)
                got_random = ds.__getitems__(list(range(len(ds)))[::-7])
            if got == want and got_random == want[::-7]:
                tally["complete"] += 1
            else:
                tally["wrong"] += 1
        except IndexNotFoundError:
            tally["not indexed yet"] += 1
        except StaleIndexError as exc:
            tally[f"stale: {str(exc)[:120]}"] += 1
        except SidecarError as exc:  # a torn or foreign sidecar or manifest
            tally[f"torn: {str(exc)[:160]}"] += 1
        except Exception as exc:
            tally[f"other: {type(exc).__name__}: {str(exc)[:160]}"] += 1
        if last:
            return dict(tally)


def write_forever(path: str, announce_after: int) -> None:
    with ofindex.Writer(path) as w:
        k = 0
        while True:
            w.write(f"new-{k}-".encode() * 50)
            w._file.flush()
            k += 1
            if k == announce_after:
                print("writing", flush=True)


def main() -> None:
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "build":
            answer = build(args[0])
        elif cmd == "read":
            answer = read(args[0], int(args[1]), args[2])
        elif cmd == "write":
            write_forever(args[0], int(args[1]))
            return
        else:
            answer = {"error": f"unknown command {cmd}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
