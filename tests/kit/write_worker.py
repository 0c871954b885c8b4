"""A process that writes a dataset with ShardedWriter, for the crash tests of test_write.py:
``python write_worker.py DIR RECORDS PER_SHARD [STEP:N [PATTERN]]`` (prints "started" once
writing began). With ``STEP:N`` the process kills itself (SIGKILL) on the N-th call of the
publication step ``STEP`` of :mod:`ofindex.write.sharded` (``claim``, ``rename_data``,
``move_sidecar``, ``release``, ``build_index``), before the call does anything."""

import os
import signal
import sys

import numpy as np

from ofindex.write import ShardedWriter, sharded


def _kill_at(step: str, n: int) -> None:
    real = getattr(sharded, step)
    calls = []

    def killed(*args, **kwargs):
        calls.append(args)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(sharded, step, killed)


def main() -> None:
    directory, records, per_shard = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:
        step, n = sys.argv[4].split(":")
        _kill_at(step, int(n))
    options = {"pattern": sys.argv[5]} if len(sys.argv) > 5 else {}
    with ShardedWriter(directory, shard_records=per_shard, **options) as writer:
        print("started", flush=True)
        for start in range(0, records, 50):
            n = min(50, records - start)
            writer.write_columns({"i": np.arange(start, start + n),
                                  "pad": np.zeros((n, 64), np.float32)})


if __name__ == "__main__":
    main()
