"""Every collective of the c10d API on braid, compared with Gloo's result on the same inputs
(or, where Gloo lacks the operation — AVG, PREMUL_SUM — with the closed form)."""
import pytest
import torch
import torch.distributed as dist

from ranks import all_to_all_list, run_ranks, values

WORLD = 3
REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                 torch.uint8, torch.int32, torch.int64]


def _input(rank, dtype, n=37, salt=0):
    # Small values so that products and sums of 3 ranks stay exact in every dtype.
    base = (torch.arange(n, dtype=torch.int64) * (rank + 2) + salt + rank) % 3 + 1
    return base.to(dtype)


def battery(rank, world):
    """Runs every collective; returns {name: tensor or list} for comparison across backends."""
    out = {}
    for dtype in REDUCE_DTYPES:
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]:
            t = _input(rank, dtype)
            dist.all_reduce(t, op=op)
            out[f"all_reduce/{dtype}/{op}"] = t
        t = _input(rank, dtype)
        dist.reduce(t, dst=1, op=dist.ReduceOp.SUM)
        if rank == 1:
            out[f"reduce/{dtype}"] = t
    # Non-contiguous tensors are staged through contiguous copies.
    t = _input(rank, torch.float32, 36).view(6, 6).t()
    dist.all_reduce(t)
    out["all_reduce/noncontiguous"] = t
    for dtype in [torch.float32, torch.int64]:
        t = _input(rank, torch.float32).to(dtype)
        dist.broadcast(t, src=2)
        out[f"broadcast/{dtype}"] = t
    # Gathers and scatters.
    inp = _input(rank, torch.float32, 11)
    lst = [torch.empty(11) for _ in range(world)]
    dist.all_gather(lst, inp)
    out["all_gather"] = lst
    big = torch.empty(11 * world)
    dist.all_gather_into_tensor(big, inp)
    out["all_gather_into_tensor"] = big
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "text": "r" * (rank + 1)})
    out["all_gather_object"] = objs
    gathered = [torch.empty(11) for _ in range(world)] if rank == 0 else None
    dist.gather(inp, gathered, dst=0)
    if rank == 0:
        out["gather"] = gathered
    scattered = torch.empty(5)
    dist.scatter(scattered, [torch.full((5,), float(i * 10)) for i in range(world)] if rank == 1 else None, src=1)
    out["scatter"] = scattered
    rs = torch.empty(7)
    dist.reduce_scatter(rs, [_input(rank, torch.float32, 7, salt=i) for i in range(world)])
    out["reduce_scatter"] = rs
    rst = torch.empty(7)
    dist.reduce_scatter_tensor(rst, _input(rank, torch.float32, 7 * world))
    out["reduce_scatter_tensor"] = rst
    # All-to-all: equal and uneven splits, and the list form.
    a2a = torch.empty(4 * world)
    dist.all_to_all_single(a2a, _input(rank, torch.float32, 4 * world) + 100 * rank)
    out["all_to_all_single"] = a2a
    in_splits = [(rank + peer) % 3 + 1 for peer in range(world)]
    out_splits = [(peer + rank) % 3 + 1 for peer in range(world)]
    uneven = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(uneven, torch.arange(sum(in_splits) * 2, dtype=torch.float32).view(-1, 2) + 1000 * rank,
                           output_split_sizes=out_splits, input_split_sizes=in_splits)
    out["all_to_all_single/uneven"] = uneven
    outs = [torch.empty(3) for _ in range(world)]
    all_to_all_list(outs, [torch.full((3,), float(rank * 10 + peer)) for peer in range(world)],
                    lambda: [torch.full((3,), float(peer * 10 + rank)) for peer in range(world)])
    out["all_to_all"] = outs
    # Objects.
    objs = [f"from {rank}", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0)
    out["broadcast_object_list"] = objs
    gobjs = [None] * world if rank == 2 else None
    dist.gather_object({"r": rank}, gobjs, dst=2)
    if rank == 2:
        out["gather_object"] = gobjs
    sobj = [None]
    dist.scatter_object_list(sobj, [f"piece {i}" for i in range(world)] if rank == 0 else None, src=0)
    out["scatter_object_list"] = sobj
    # Point to point: a ring with blocking calls, then with isend/irecv, then batched.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(9)
    if rank % 2 == 0:
        dist.send(torch.full((9,), float(rank)), nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(torch.full((9,), float(rank)), nxt)
    out["send_recv"] = got
    got2 = torch.empty(1000)
    reqs = [dist.isend(torch.full((1000,), rank + 0.5), nxt), dist.irecv(got2, prv)]
    for r in reqs:
        r.wait()
    out["isend_irecv"] = got2
    got3 = torch.empty(300_000)  # larger than any transport buffer: both sides send first
    ops = [dist.P2POp(dist.isend, torch.full((300_000,), rank + 0.25), nxt),
           dist.P2POp(dist.irecv, got3, prv)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    out["batch_isend_irecv"] = got3
    dist.barrier()
    # Asynchronous work and futures.
    t = _input(rank, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    fut_value = work.get_future().wait()
    out["future"] = fut_value[0].clone()
    out["is_completed"] = torch.tensor([work.is_completed()])
    return out


def _compare(braid, gloo):
    for rank, (b, g) in enumerate(zip(braid, gloo)):
        assert b.keys() == g.keys(), f"rank {rank}: different results {b.keys() ^ g.keys()}"
        for key in b:
            if key == "is_completed":
                # Gloo completes the future before marking its Work finished, so its
                # is_completed() right after future.wait() is sometimes False (CI saw it on
                # rank 2); braid guarantees True, asserted by the caller instead.
                continue
            bv, gv = b[key], g[key]
            if isinstance(bv, list):
                assert len(bv) == len(gv), key
                for x, y in zip(bv, gv):
                    if isinstance(x, torch.Tensor):
                        torch.testing.assert_close(x, y, msg=f"rank {rank}: {key}")
                    else:
                        assert x == y, f"rank {rank}: {key}: {x} != {y}"
            else:
                torch.testing.assert_close(bv, gv, msg=lambda m: f"rank {rank}: {key}: {m}")


def test_every_collective_matches_gloo():
    braid = values(run_ranks(battery, WORLD, "braid"), "braid")
    gloo = values(run_ranks(battery, WORLD, "gloo"), "gloo")
    _compare(braid, gloo)
    for rank, result in enumerate(braid):
        assert result["is_completed"].item(), f"rank {rank}: is_completed() False after the future"


def braid_only_ops(rank, world):
    out = {}
    for dtype in [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16]:
        t = _input(rank, dtype)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        out[f"avg/{dtype}"] = t
    t = _input(rank, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    out["premul_sum"] = t
    # Broadcast moves bytes: dtypes Gloo refuses (complex, int16, bool) work too.
    for dtype in [torch.complex64, torch.int16, torch.bool]:
        t = _input(rank, torch.float32).to(dtype)
        dist.broadcast(t, src=2)
        out[f"broadcast/{dtype}"] = t
    b = torch.tensor([rank == 1, False, True, rank == 2])
    dist.all_reduce(b)  # logical or
    out["bool_sum"] = b
    b = torch.tensor([rank == 1, False, True, rank != 2])
    dist.all_reduce(b, op=dist.ReduceOp.PRODUCT)  # logical and
    out["bool_prod"] = b
    return out


def test_avg_premul_and_bool_match_closed_form():
    res = values(run_ranks(braid_only_ops, WORLD, "braid"), "braid")
    inputs = {r: r for r in range(WORLD)}
    for rank in range(WORLD):
        got = res[rank]
        for dtype in [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16]:
            total = sum(_input(r, torch.float64) for r in inputs)
            expected = total / WORLD
            if not dtype.is_floating_point:
                expected = torch.trunc(expected)
            torch.testing.assert_close(got[f"avg/{dtype}"].double(), expected.to(dtype).double(),
                                       msg=f"avg {dtype}")
        premul = sum(_input(r, torch.float32) * 0.5 for r in inputs)
        torch.testing.assert_close(got["premul_sum"], premul)
        for dtype in [torch.complex64, torch.int16, torch.bool]:
            assert torch.equal(got[f"broadcast/{dtype}"], _input(2, torch.float32).to(dtype)), dtype
        assert got["bool_sum"].tolist() == [True, False, True, True]
        assert got["bool_prod"].tolist() == [False, False, True, False]


def bad_inputs(rank, world):
    messages = {}
    for name, call in {
        "int16": lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
        "band": lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND),
        "root": lambda: dist.broadcast(torch.ones(3), src=world + 5),
        "sparse": lambda: dist.all_reduce(torch.ones(3).to_sparse()),
        "split": lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4), [1] * world, [2] * world),
    }.items():
        try:
            call()
            messages[name] = None
        except Exception as e:  # noqa: BLE001
            messages[name] = str(e)
    t = torch.ones(4)
    dist.all_reduce(t)  # the group still works after refused calls
    messages["after"] = t.tolist()
    return messages


def test_bad_input_is_refused_with_a_message_and_the_group_survives():
    res = values(run_ranks(bad_inputs, 2, "braid"), "braid")
    for m in res:
        assert "Short" in m["int16"] or "int16" in m["int16"], m["int16"]
        assert "BAND" in m["band"], m["band"]
        assert m["root"] is not None
        assert m["sparse"] is not None and ("sparse" in m["sparse"].lower() or "Sparse" in m["sparse"])
        assert m["split"] is not None and "split" in m["split"], m["split"]
        assert m["after"] == [2.0] * 4


def test_backend_is_registered_for_cpu_and_cuda():
    import braid_torch  # noqa: F401
    assert dist.Backend.backend_capability["braid"] == ["cpu", "cuda"]
    assert dist.Backend("braid") == "braid"


def any_source(rank, world):
    """Rank 0 receives from any source; ranks 1.. send two messages each, 1 ms apart per rank."""
    if rank == 0:
        got = []
        for i in range(2 * (world - 1)):
            t = torch.empty(5)
            if i % 2 == 0:
                sender = dist.recv(t)  # blocking form returns the sender
            else:
                work = dist.irecv(t)
                work.wait()
                sender = work._source_rank()
            got.append((sender, t.tolist()))
        return got
    for k in range(2):
        dist.send(torch.full((5,), float(rank * 10 + k)), 0)
    return None


def test_receive_from_any_source_names_each_sender_in_its_order():
    res = values(run_ranks(any_source, WORLD, "braid"), "braid")
    got = res[0]
    assert sorted(s for s, _ in got) == [1, 1, 2, 2], got
    for sender in (1, 2):
        mine = [v for s, v in got if s == sender]
        assert mine == [[sender * 10.0] * 5, [sender * 10.0 + 1] * 5], (sender, mine)
