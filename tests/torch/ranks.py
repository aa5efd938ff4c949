"""Runs a function on N local ranks (spawned processes) over a given backend and returns what
each rank returned, so a test can compare braid's results with Gloo's or with a closed form.

Children load the function by module and name (the spawn start method), initialise with env://
on a free loopback port, and send back their result or their traceback. Only the parent asserts.
"""
import multiprocessing
import os
import pickle
import socket
import tempfile
import traceback
from datetime import timedelta


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world, backend, port, timeout_s, out_dir, init):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    path = os.path.join(out_dir, f"{rank}.pkl")
    try:
        import torch
        import torch.distributed as dist
        if "braid" in backend and tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 14):
            # Before 2.14 torch finds no backend through entry points: there "braid" exists only
            # once braid_torch is imported (the GPU machine's torch is 2.11). From 2.14 on the
            # children rely on the installed entry point, as users' scripts do.
            import braid_torch  # noqa: F401
        if init:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                                    timeout=timedelta(seconds=timeout_s))
        result = fn(rank, world)
        if init:
            dist.destroy_process_group()
        payload = {"ok": result}
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        payload = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    with open(path, "wb") as f:
        pickle.dump(payload, f)


class RankFailure(AssertionError):
    pass


def run_ranks(fn, world, backend="braid", timeout_s=60, join_s=180, init=True,
              expect_missing=()):
    """fn(rank, world) on `world` processes; returns [result of rank 0, ...].

    A rank that raised reaches the caller as {"error": "...", "traceback": "..."} in its slot;
    a rank that died without a word (killed) as None. Ranks in `expect_missing` may die.
    """
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="braid_ranks_") as out_dir:
        procs = [ctx.Process(target=_child, args=(fn, r, world, backend, port, timeout_s, out_dir, init))
                 for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(join_s)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if hung:
            raise RankFailure(f"ranks {hung} did not finish within {join_s} s ({backend})")
        results = []
        for r in range(world):
            path = os.path.join(out_dir, f"{r}.pkl")
            if not os.path.exists(path):
                if r in expect_missing:
                    results.append(None)
                    continue
                raise RankFailure(f"rank {r} exited with code {procs[r].exitcode} and no result ({backend})")
            with open(path, "rb") as f:
                results.append(pickle.load(f))
    return results


def values(results, backend=""):
    """The ok values of every rank; raises naming the first rank that failed."""
    out = []
    for r, res in enumerate(results):
        if res is None or "error" in res:
            detail = "no result" if res is None else res["traceback"]
            raise RankFailure(f"rank {r} failed ({backend}):\n{detail}")
        out.append(res["ok"])
    return out


def skip_where_torch_refuses(results, refusals):
    """Skips the calling test when a rank failed only because this torch refuses the call in its
    Python layer before braid sees it (`refusals`: {message fragment: what is refused}); torch
    2.11, the GPU machine's, refuses some calls 2.15 accepts. Any other failure is left to
    values()."""
    import pytest
    import torch
    for res in results:
        if res is not None and "error" in res:
            for fragment, what in refusals.items():
                if fragment in res["error"]:
                    pytest.skip(f"torch {torch.__version__} refuses {what} ({res['error']})")


def all_to_all_list(outputs, inputs, closed_form):
    """dist.all_to_all (the list form), except on a Gloo that lacks it (torch 2.11's: "Backend
    gloo does not support alltoall"), where the reference's slots get `closed_form()` instead, so
    braid is still checked, against the closed form."""
    import torch.distributed as dist
    try:
        dist.all_to_all(outputs, inputs)
    except RuntimeError as e:
        if dist.get_backend() != "gloo" or "does not support alltoall" not in str(e):
            raise
        outputs[:] = closed_form()
