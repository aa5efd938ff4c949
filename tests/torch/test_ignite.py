"""PyTorch-Ignite's collective tutorial on braid: idist.spawn and idist.Parallel with
backend="braid" after `import braid_torch.ignite`, each result checked against its closed form
and against the same run on Gloo."""
import json
import os

import ignite.distributed as idist
import pytest
import torch

import braid_torch.ignite  # noqa: F401  - the documented opt-in: ignite accepts "braid"
from ranks import free_port

NPROC = 3


def tutorial(local_rank, out_dir):
    rank = idist.get_rank()
    world = idist.get_world_size()
    result = {"backend": idist.backend(), "world": world}
    result["all_reduce"] = idist.all_reduce(torch.tensor([rank + 1.0])).tolist()
    result["all_gather_tensor"] = idist.all_gather(torch.tensor([rank * 2])).tolist()
    result["all_gather_number"] = idist.all_gather(rank * 10)
    result["all_gather_string"] = idist.all_gather(f"rank{rank}")
    result["broadcast_string"] = idist.broadcast("hello from 0" if rank == 0 else None, src=0,
                                                 safe_mode=True)
    idist.barrier()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(result, f)


def _read(out_dir):
    return [json.load(open(os.path.join(out_dir, f"{r}.json"))) for r in range(NPROC)]


def _check(results, backend):
    for r, res in enumerate(results):
        assert res["backend"] == backend and res["world"] == NPROC
        assert res["all_reduce"] == [6.0]
        assert res["all_gather_tensor"] == [0, 2, 4]
        assert res["all_gather_number"] == [0, 10, 20]
        assert res["all_gather_string"] == ["rank0", "rank1", "rank2"]
        assert res["broadcast_string"] == "hello from 0"


def test_braid_is_an_ignite_backend():
    assert "braid" in idist.available_backends()


@pytest.mark.parametrize("backend", ["braid", "gloo"])
def test_tutorial_with_spawn(tmp_path, backend):
    idist.spawn(backend, tutorial, args=(str(tmp_path),), nproc_per_node=NPROC,
                master_port=free_port())
    _check(_read(tmp_path), backend)


def test_tutorial_with_parallel(tmp_path):
    with idist.Parallel(backend="braid", nproc_per_node=NPROC, master_port=free_port()) as parallel:
        parallel.run(tutorial, str(tmp_path))
    _check(_read(tmp_path), "braid")
