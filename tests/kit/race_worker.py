"""One of two processes racing to publish a dataset into the same new directories, for
test_write.py: ``python race_worker.py ROOT ROUNDS WHO OTHER``. In round r both write
``ROOT/d<r>`` with a ShardedWriter, meet at a barrier (files ``ROOT/ready-<r>-<who>``) and
close at once; each round prints ``<r> won`` or ``<r> lost``."""

import os
import sys
import time

from ofindex.errors import DatasetExistsError
from ofindex.write import ShardedWriter

RECORDS = 20


def _barrier(root: str, round_: int, who: str, other: str) -> None:
    with open(os.path.join(root, f"ready-{round_}-{who}"), "w"):
        pass
    mine = os.path.join(root, f"ready-{round_}-{other}")
    deadline = time.monotonic() + 60
    while not os.path.exists(mine):
        if time.monotonic() > deadline:
            raise TimeoutError(f"round {round_}: {other} never came")
        time.sleep(0.0005)


def main() -> None:
    root, rounds, who, other = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    for r in range(rounds):
        writer = ShardedWriter(os.path.join(root, f"d{r}"), shard_records=5)
        writer.write_many(f"{who}-{i}".encode() for i in range(RECORDS))
        _barrier(root, r, who, other)
        try:
            writer.close()
        except DatasetExistsError:
            print(r, "lost", flush=True)
        else:
            print(r, "won", flush=True)


if __name__ == "__main__":
    main()
