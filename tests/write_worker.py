"""A process that writes a dataset with ShardedWriter, for the crash tests of test_write.py:
``python write_worker.py DIR RECORDS PER_SHARD`` (prints "started" once writing began)."""

import sys

import numpy as np

from ofindex.write import ShardedWriter


def main() -> None:
    directory, records, per_shard = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with ShardedWriter(directory, shard_records=per_shard) as writer:
        print("started", flush=True)
        for start in range(0, records, 50):
            n = min(50, records - start)
            writer.write_columns({"i": np.arange(start, start + n),
                                  "pad": np.zeros((n, 64), np.float32)})


if __name__ == "__main__":
    main()
