"""Subgroups, monitored barrier, and failures: a timeout and a killed rank each raise in the
survivors with the rank named."""
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ranks import run_ranks, skip_where_torch_refuses, values


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


def split_subgroups(rank, world):
    """split_group([[0, 2], [1, 3]]), then new_group([1, 2]) on a default group bound to the CPU
    (torch then passes split_from, and rank 0 and 3 take part in the split without a group)."""
    dist.init_process_group("braid", init_method="env://", rank=rank, world_size=world,
                            device_id=torch.device("cpu", 0))
    out = {}
    pairs = dist.split_group(split_ranks=[[0, 2], [1, 3]])
    out["pair_rank"] = dist.get_rank(pairs)
    out["pair_size"] = dist.get_world_size(pairs)
    t = torch.full((1000,), float(10 ** rank))
    dist.all_reduce(t, group=pairs)
    out["pair_sum"] = t[0].item()
    # The backend really is a split child: the same braid comm type, sized as the subgroup.
    out["split_backend"] = type(pairs._get_backend(torch.device("cpu"))).__name__
    middle = dist.new_group([1, 2])
    if rank in (1, 2):
        t = torch.full((7,), float(rank))
        dist.all_reduce(t, group=middle)
        out["middle_sum"] = t[0].item()
        objs = [None, None]
        dist.all_gather_object(objs, f"r{rank}", group=middle)
        out["middle_objects"] = objs
    t = torch.ones(3)
    dist.all_reduce(t)  # the parent still works after both splits
    out["world"] = t[0].item()
    dist.destroy_process_group()
    return out


def test_split_group_and_new_group_split_from_parent():
    results = run_ranks(split_subgroups, 4, "braid", init=False)
    skip_where_torch_refuses(results, {"device_id parameter must be an accelerator":
                                       "init_process_group(device_id=cpu), which split_from needs"})
    res = values(results, "braid")
    for rank, r in enumerate(res):
        peer = {0: 2, 2: 0, 1: 3, 3: 1}[rank]
        assert r["pair_size"] == 2
        assert r["pair_rank"] == (0 if rank in (0, 1) else 1)
        assert r["pair_sum"] == float(10 ** rank + 10 ** peer)
        assert r["split_backend"] == "BraidBackend"
        assert r["world"] == 4.0
    for rank in (1, 2):
        assert res[rank]["middle_sum"] == 3.0
        assert res[rank]["middle_objects"] == ["r1", "r2"]
    assert "middle_sum" not in res[0] and "middle_sum" not in res[3]


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
    results = run_ranks(monitored, 3, "braid")
    skip_where_torch_refuses(results, {"only implemented for GLOO": "monitored_barrier on backends other than Gloo"})
    res = values(results, "braid")
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
