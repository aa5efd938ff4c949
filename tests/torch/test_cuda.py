"""CUDA tensors through braid's c10d backend (issue 21), run on the GPU machine.

Several ranks share the one GPU there (rank r uses cuda:r % device_count), which braid supports
and NCCL refuses. References are independent of braid's CUDA path: every collective's result is
compared with the same battery run on CPU tensors through Gloo; DDP's parameters with plain
full-batch gradient descent on one CPU process. Without a GPU every test here is skipped with
"no CUDA device" (skips are never counted as passes; tests/gpu/run_on_device.sh runs them).
"""
import functools

import pytest
import torch
import torch.distributed as dist

from ranks import all_to_all_list, run_ranks, values

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA device: braid's CUDA tensor tests run on the GPU machine "
           "(tests/gpu/run_on_device.sh)")

WORLD = 2
REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                 torch.int64, torch.uint8]
REDUCE_OPS = ["SUM", "PRODUCT", "MIN", "MAX"]


def _device(rank):
    if torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _input(rank, dtype, n=37, salt=0, device="cpu"):
    # Small values: products and sums over the ranks stay exact in every dtype.
    base = (torch.arange(n, dtype=torch.int64) * (rank + 2) + salt + rank) % 3 + 1
    return base.to(dtype).to(device)


def battery(rank, world, on_cuda):
    """Every collective on tensors of one device; returns CPU copies of the results."""
    dev = _device(rank) if on_cuda else torch.device("cpu")
    out = {}

    def keep(name, value):
        out[name] = [v.cpu() for v in value] if isinstance(value, list) else value.cpu()

    for dtype in REDUCE_DTYPES:
        for op in REDUCE_OPS:
            t = _input(rank, dtype, device=dev)
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            keep(f"all_reduce/{dtype}/{op}", t)
        t = _input(rank, dtype, device=dev)
        dist.reduce(t, dst=1)
        if rank == 1:
            keep(f"reduce/{dtype}", t)
    # Non-contiguous: staged through a contiguous copy on the group's stream.
    t = _input(rank, torch.float32, 36, device=dev).view(6, 6).t()
    dist.all_reduce(t)
    keep("all_reduce/noncontiguous", t)
    t = _input(rank, torch.float32, 1 << 20, device=dev)  # 4 MiB: more than one chunk
    dist.all_reduce(t)
    keep("all_reduce/4MiB", t)
    t = _input(rank, torch.int64, device=dev)
    dist.broadcast(t, src=world - 1)
    keep("broadcast", t)
    inp = _input(rank, torch.float32, 11, device=dev)
    lst = [torch.empty(11, device=dev) for _ in range(world)]
    dist.all_gather(lst, inp)
    keep("all_gather", lst)
    big = torch.empty(11 * world, device=dev)
    dist.all_gather_into_tensor(big, inp)
    keep("all_gather_into_tensor", big)
    gathered = [torch.empty(11, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(inp, gathered, dst=0)
    if rank == 0:
        keep("gather", gathered)
    scattered = torch.empty(5, device=dev)
    dist.scatter(scattered, [torch.full((5,), float(i * 10), device=dev) for i in range(world)]
                 if rank == 1 else None, src=1)
    keep("scatter", scattered)
    rs = torch.empty(7, device=dev)
    dist.reduce_scatter(rs, [_input(rank, torch.float32, 7, salt=i, device=dev) for i in range(world)])
    keep("reduce_scatter", rs)
    rst = torch.empty(7, device=dev)
    dist.reduce_scatter_tensor(rst, _input(rank, torch.float32, 7 * world, device=dev))
    keep("reduce_scatter_tensor", rst)
    a2a = torch.empty(4 * world, device=dev)
    dist.all_to_all_single(a2a, _input(rank, torch.float32, 4 * world, device=dev) + 100 * rank)
    keep("all_to_all_single", a2a)
    in_splits = [(rank + peer) % 3 + 1 for peer in range(world)]
    out_splits = [(peer + rank) % 3 + 1 for peer in range(world)]
    uneven = torch.empty(sum(out_splits), 2, device=dev)
    dist.all_to_all_single(uneven, torch.arange(sum(in_splits) * 2, dtype=torch.float32,
                                                device=dev).view(-1, 2) + 1000 * rank,
                           output_split_sizes=out_splits, input_split_sizes=in_splits)
    keep("all_to_all_single/uneven", uneven)
    outs = [torch.empty(3, device=dev) for _ in range(world)]
    all_to_all_list(outs, [torch.full((3,), float(rank * 10 + p), device=dev) for p in range(world)],
                    lambda: [torch.full((3,), float(p * 10 + rank), device=dev) for p in range(world)])
    keep("all_to_all", outs)
    # Point to point: a ring, and the same ring through batch_isend_irecv.
    got = torch.empty(9, device=dev)
    reqs = [dist.isend(torch.full((9,), float(rank), device=dev), (rank + 1) % world),
            dist.irecv(got, (rank - 1) % world)]
    for r in reqs:
        r.wait()
    keep("isend_irecv", got)
    got2 = torch.empty(9, device=dev)
    ops = [dist.P2POp(dist.isend, torch.full((9,), float(rank + 50), device=dev), (rank + 1) % world),
           dist.P2POp(dist.irecv, got2, (rank - 1) % world)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    keep("batch_isend_irecv", got2)
    torch.cuda.synchronize() if on_cuda else None
    return out


def test_every_collective_on_cuda_tensors_matches_gloo_on_cpu():
    cuda = values(run_ranks(functools.partial(battery, on_cuda=True), WORLD, "braid"), "braid cuda")
    cpu = values(run_ranks(functools.partial(battery, on_cuda=False), WORLD, "gloo"), "gloo cpu")
    for rank in range(WORLD):
        assert cuda[rank].keys() == cpu[rank].keys(), rank
        for name, want in cpu[rank].items():
            got = cuda[rank][name]
            pairs = zip(got, want) if isinstance(want, list) else [(got, want)]
            for g, w in pairs:
                assert g.dtype == w.dtype and torch.equal(g, w), (rank, name, g, w)


def stream_semantics(rank, world):
    """Work.wait() orders the caller's stream after the work without blocking the host; the
    collective sees what the caller's stream did before it; the future holds the CUDA tensors."""
    dev = _device(rank)
    out = {}
    x = torch.zeros(1 << 16, device=dev)
    # The caller's stream is busy for about a second, then writes x: the collective must wait
    # for that write (the group's stream joins the caller's), and wait() must return before it.
    torch.cuda._sleep(2_000_000_000)
    x.fill_(rank + 1)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    out["host_not_blocked"] = not torch.cuda.current_stream().query()
    y = x * 2  # queued on the caller's stream right after wait(): must see the sum
    out["after_wait"] = y[:4].cpu().tolist()
    # Futures complete with the output tensors, on the tensors' device.
    z = torch.full((8,), float(rank + 1), device=dev)
    fut = dist.all_reduce(z, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 10)
    result = fut.wait()
    out["future_device"] = str(result[0].device)
    out["future_value"] = result[0].cpu().tolist()
    out["chained"] = chained.wait().cpu().tolist()
    # A work's is_completed turns true once the GPU has run it.
    w = dist.all_reduce(torch.ones(4, device=dev), async_op=True)
    w.wait()
    torch.cuda.synchronize()
    out["completed"] = w.is_completed()
    return out


def test_work_wait_is_a_stream_wait_and_futures_carry_cuda_tensors():
    res = values(run_ranks(stream_semantics, WORLD, "braid"), "braid")
    total = float(sum(r + 1 for r in range(WORLD)))
    for rank, r in enumerate(res):
        assert r["host_not_blocked"], (rank, "Work.wait() blocked the host until the GPU finished")
        assert r["after_wait"] == [2 * total] * 4, (rank, r)
        assert r["future_device"].startswith("cuda"), (rank, r)
        assert r["future_value"] == [total] * 8, (rank, r)
        assert r["chained"] == [10 * total] * 8, (rank, r)
        assert r["completed"], (rank, r)


def mixed_devices(rank, world):
    dev = _device(rank)
    messages = {}
    try:
        dist.all_gather_into_tensor(torch.empty(4 * world, device=dev), torch.ones(4))
    except Exception as e:  # noqa: BLE001
        messages["all_gather_into_tensor"] = str(e)
    try:
        dist.all_to_all([torch.empty(2, device=dev) for _ in range(world)],
                        [torch.ones(2) for _ in range(world)])
    except Exception as e:  # noqa: BLE001
        messages["all_to_all"] = str(e)
    # The group still works afterwards (nothing was queued).
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    messages["after"] = t.cpu().tolist()
    return messages


def test_mixed_cpu_and_cuda_tensors_are_refused_by_name():
    res = values(run_ranks(mixed_devices, WORLD, "braid"), "braid")
    for rank, m in enumerate(res):
        for op in ("all_gather_into_tensor", "all_to_all"):
            assert op in m, (rank, op, "no error")
            assert "on one device" in m[op] and "cpu" in m[op] and "cuda" in m[op], (rank, m[op])
        assert m["after"] == [float(WORLD)] * 3, (rank, m)


def objects(rank, world):
    dev = _device(rank)
    objs = [{"from": 0, "text": "x" * 1000}, 7] if rank == 0 else [None, None]
    dist.broadcast_object_list(objs, src=0, device=dev)
    gathered = [None] * world
    dist.all_gather_object(gathered, {"rank": rank, "text": "r" * (rank + 1)})
    got = [None]
    dist.scatter_object_list(got, [f"to {r}" for r in range(world)] if rank == 0 else None, src=0)
    return {"broadcast": objs, "all_gather": gathered, "scatter": got[0]}


def test_object_collectives_with_cuda_devices():
    res = values(run_ranks(objects, WORLD, "braid"), "braid")
    for rank, r in enumerate(res):
        assert r["broadcast"] == [{"from": 0, "text": "x" * 1000}, 7], (rank, r)
        assert r["all_gather"] == [{"rank": q, "text": "r" * (q + 1)} for q in range(WORLD)], (rank, r)
        assert r["scatter"] == f"to {rank}", (rank, r)


def _data(rank, steps=4, batch=8):
    g = torch.Generator().manual_seed(1234 + rank)
    return [(torch.randn(batch, 6, generator=g, dtype=torch.float64),
             torch.randn(batch, 2, generator=g, dtype=torch.float64)) for _ in range(steps)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 2)).double()


def ddp_train(rank, world):
    dev = _device(rank)
    model = torch.nn.parallel.DistributedDataParallel(_model().to(dev), device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _data(rank):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def test_ddp_on_cuda_with_two_ranks_sharing_the_gpu_matches_full_batch_descent():
    res = values(run_ranks(ddp_train, WORLD, "braid"), "braid")
    # Reference: one CPU process, the same model, each step's gradient averaged over the ranks'
    # batches (what DDP's allreduce-average computes), no distributed code at all.
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [_data(r) for r in range(WORLD)]
    for step in range(len(data[0])):
        opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(model(data[r][step][0]), data[r][step][1])
                   for r in range(WORLD)) / WORLD
        loss.backward()
        opt.step()
    want = [p.detach() for p in model.parameters()]
    for rank in range(WORLD):
        for got, ref in zip(res[rank], want):
            assert torch.allclose(got, ref, rtol=1e-9, atol=1e-12), (rank, got, ref)
