"""Subgroups, monitored barrier, and failures: a timeout and a killed rank each raise in the
survivors with the rank named."""
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ranks import run_ranks, values


def subgroup_while_rank1_works(rank, world):
    group = dist.new_group([0, 2])
    out = {}
    if rank in (0, 2):
        for i in range(5):
            t = torch.full((1000,), float(rank + i))
            dist.all_reduce(t, group=group)
            out[f"sub{i}"] = t[0].item()
        objs = [None, None]
        dist.all_gather_object(objs, rank, group=group)
        out["objects"] = objs
    else:
        time.sleep(1.0)  # other work while 0 and 2 use their group
        out["worked"] = sum(range(100000))
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    out["world"] = t[0].item()
    dist.destroy_process_group(group) if rank in (0, 2) else None
    return out


def test_new_group_0_2_while_rank_1_works():
    res = values(run_ranks(subgroup_while_rank1_works, 3, "braid"), "braid")
    for rank in (0, 2):
        for i in range(5):
            assert res[rank][f"sub{i}"] == float(0 + i + 2 + i)
        assert res[rank]["objects"] == [0, 2]
    assert res[1]["worked"] == sum(range(100000))
    assert all(r["world"] == 3.0 for r in res)


def monitored(rank, world):
    dist.monitored_barrier(timeout=timedelta(seconds=10))
    out = {"passed_first": True}
    if rank == 2:
        time.sleep(3)  # misses the second one
        return out
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=True)
        out["second"] = "passed"
    except Exception as e:  # noqa: BLE001
        out["second"] = str(e)
    return out


def test_monitored_barrier_names_the_rank_that_did_not_arrive():
    res = values(run_ranks(monitored, 3, "braid"), "braid")
    assert all(r["passed_first"] for r in res)
    assert "Ranks 2 failed to pass monitoredBarrier" in res[0]["second"], res[0]["second"]
    assert "Rank 1 successfully reached monitoredBarrier" in res[1]["second"], res[1]["second"]


def timeout_rank1_absent(rank, world):
    t = torch.ones(10)
    dist.all_reduce(t)  # links made
    if rank == 1:
        time.sleep(8)  # never calls the second all_reduce in time
        return "absent"
    start = time.time()
    try:
        dist.all_reduce(t)
        return {"error": None}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e), "type": type(e).__name__, "after": time.time() - start}


def test_timeout_raises_naming_the_missing_rank():
    res = values(run_ranks(timeout_rank1_absent, 2, "braid", timeout_s=3), "braid")
    err = res[0]
    assert err["error"] is not None, "the all_reduce without rank 1 returned"
    assert err["type"] == "DistBackendError", err
    assert "Timed out" in err["error"] and "rank 1" in err["error"], err["error"]
    assert 2.5 < err["after"] < 8, err["after"]


def killed_rank2(rank, world):
    t = torch.ones(1 << 18)
    dist.all_reduce(t)
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    start = time.time()
    try:
        for _ in range(10):
            dist.all_reduce(t)
        return {"error": None}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e), "type": type(e).__name__, "after": time.time() - start}


def test_killed_rank_raises_in_every_survivor_naming_it():
    res = run_ranks(killed_rank2, 3, "braid", timeout_s=60, expect_missing=(2,))
    assert res[2] is None
    for rank in (0, 1):
        err = res[rank]["ok"]
        assert err["error"] is not None, f"rank {rank}: all_reduce returned with rank 2 dead"
        assert err["type"] == "DistBackendError", err
        assert "rank 2" in err["error"], f"rank {rank}: {err['error']}"
        assert err["after"] < 30, err["after"]
