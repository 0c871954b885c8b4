"""Two torch.distributed (gloo, CPU) processes: ranks see disjoint records covering the epoch."""

import json
import os
import subprocess
import sys
import textwrap

from tests.kit.helpers import need

need("torch")
import ofindex  # noqa: E402
from tests.kit import paths  # noqa: E402

ROOT = paths.ROOT

WORKER = textwrap.dedent("""
    import json, sys
    import torch.distributed as dist
    import ofindex
    from ofindex.integrations.torch import GlobalShuffleSampler, BlockShuffleSampler, TorchDataset
    from torch.utils.data import DataLoader

    rank, world = int(sys.argv[1]), int(sys.argv[2])
    rdv, glob, out = sys.argv[3:6]
    dist.init_process_group("gloo", init_method="file://" + rdv, rank=rank, world_size=world)
    ds = ofindex.open(glob)
    result = {}
    for name, sampler in [("global", GlobalShuffleSampler(ds, seed=9)),
                          ("block", BlockShuffleSampler(ds, block_size=4, window=3))]:
        assert (sampler.rank, sampler.num_replicas) == (rank, world)  # read from torch.distributed
        for epoch in range(2):
            sampler.set_epoch(epoch)
            loader = DataLoader(TorchDataset(ds), batch_size=5, sampler=sampler, collate_fn=list)
            mine = [r.decode() for b in loader for r in b]
            gathered = [None] * world
            dist.all_gather_object(gathered, mine)
            result[f"{name}{epoch}"] = gathered
    dist.barrier()
    if rank == 0:
        json.dump(result, open(out, "w"))
    dist.destroy_process_group()
""")


def test_two_rank_gloo_epoch_split(tmp_path):
    counts = [11, 30, 19]  # 60 records: splits evenly over 2 ranks
    for s, c in enumerate(counts):
        with ofindex.Writer(str(tmp_path / f"d-{s}.tfrecord")) as w:
            for i in range(c):
                w.write(f"{s}/{i}".encode())
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "out.json"
    args = [str(tmp_path / "rdv"), str(tmp_path / "d-*.tfrecord"), str(out)]
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2", *args], env=env)
             for r in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    result = json.loads(out.read_text())
    everything = sorted(f"{s}/{i}" for s, c in enumerate(counts) for i in range(c))
    for key, (r0, r1) in result.items():
        assert len(r0) == len(r1) == 30, key
        assert not set(r0) & set(r1), key
        assert sorted(r0 + r1) == everything, key
    assert result["global0"] != result["global1"]
