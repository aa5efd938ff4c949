"""torch.distributed on braid beside Gloo (and NCCL on the GPU), numbers for docs/PERFORMANCE.md.

  python bench/torch/torch_bench.py allreduce [--ranks 2,4] [--backends braid,gloo]
  python bench/torch/torch_bench.py allreduce --device cuda [--ranks 1,2] [--backends braid,gloo,nccl]
                                              [--json out.json]
  python bench/torch/torch_bench.py ddp [--ranks 2] [--steps 20]
  python bench/torch/torch_bench.py percall [--backends braid,gloo,fake] [--calls 5000]

allreduce: dist.all_reduce (SUM, float32, in place) from 8 B to 64 MiB. For each size every rank
runs warm-up calls, then timed calls inside a window of at least --min-ms; the table shows the
mean time per call (rank 0, the slowest rank's window is the same within a barrier) and the bus
bandwidth as nccl-tests computes it (busbw = bytes / time * 2(n-1)/n).

allreduce --device cuda: the same on CUDA tensors, every rank on cuda:(rank % GPUs) (so on one GPU
all ranks share it), timed with CUDA events on the current stream around the window (as
nccl-tests: the GPU's time, after a synchronize and a barrier); sizes up to 256 MiB. Gloo's CUDA
path (through host memory), torch's NCCL, and braid in one table. A backend that refuses a world
size is listed with its error instead of numbers: NCCL refuses two ranks on one GPU ("Duplicate
GPU detected"). --json writes the table, the refusals and the versions (torch, CUDA, NCCL, GPU).

ddp: a ~10 M parameter MLP (4 x Linear(1600, 1600)) trained with DistributedDataParallel on
random data, batch 64 per rank; prints the median step time and, from the same model without
DDP on each rank (no communication), the share of the step spent on communication:
(t_ddp - t_local) / t_ddp.

percall: the cost of one synchronous 8-byte dist.all_reduce (torch.ones(2)) on 2 ranks, best of 5
windows of --calls calls, per backend; "fake" is torch's own no-op backend (FakeProcessGroup, no
communication), so braid - fake is what braid's plugin and braid itself add to torch's path.

Ranks are spawned processes on this host with env:// on a free loopback port.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8 << (2 * i) for i in range(12)] + [64 << 20]  # 8 B, 32 B, ... 32 MiB, 64 MiB


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CUDA_SIZES = SIZES + [256 << 20]


def _init(rank, world, backend, port, device="cpu"):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    kwargs = {}
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        kwargs["timeout"] = timedelta(seconds=120)  # a refusal must not wait 10 minutes
    if backend == "braid":
        # Spawned workers do not run main(): before torch 2.14 (2.11 on the GPU machine) no entry
        # point makes "braid" known, only this import does. From 2.14 on it changes nothing.
        import braid_torch  # noqa: F401
    dist.init_process_group(backend, rank=rank, world_size=world, **kwargs)


def _allreduce_worker(rank, world, backend, port, min_ms, device, queue):
    _init(rank, world, backend, port, device)
    on_cuda = device == "cuda"
    dev = torch.device("cuda", torch.cuda.current_device()) if on_cuda else torch.device("cpu")
    rows = []
    for size in (CUDA_SIZES if on_cuda else SIZES):
        t = torch.ones(size // 4, dtype=torch.float32, device=dev)
        for _ in range(5):
            dist.all_reduce(t)
        # Calls per window: enough for min_ms, decided by rank 0 and shared so all ranks agree.
        if on_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(t)
        if on_cuda:
            torch.cuda.synchronize()
        once = max(time.perf_counter() - start, 1e-6)
        n = torch.tensor([max(10, min(100000, int(min_ms / 1e3 / once)))], device=dev)
        dist.broadcast(n, 0)
        n = int(n.item())
        if on_cuda:
            # Events on the current stream around the window (nccl-tests' timing).
            torch.cuda.synchronize()
            dist.barrier()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(n):
                dist.all_reduce(t)
            end.record()
            end.synchronize()
            per_call = begin.elapsed_time(end) / 1e3 / n
        else:
            dist.barrier()
            start = time.perf_counter()
            for _ in range(n):
                dist.all_reduce(t)
            per_call = (time.perf_counter() - start) / n
        elapsed = torch.tensor([per_call], device=dev)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        rows.append((size, elapsed.item()))
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def _percall_worker(rank, world, backend, port, calls, queue):
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        torch.set_num_threads(1)
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    else:
        _init(rank, world, backend, port)
    t = torch.ones(2)
    for _ in range(1000):
        dist.all_reduce(t)
    best = float("inf")
    for _ in range(5):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        best = min(best, (time.perf_counter() - start) / calls)
    if rank == 0:
        queue.put(best)
    dist.destroy_process_group()


def _mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(1600, 1600), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _ddp_worker(rank, world, backend, port, steps, queue):
    _init(rank, world, backend, port)
    x = torch.randn(64, 1600)
    y = torch.randn(64, 1600)

    def timed(model):
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        times = []
        for i in range(steps + 3):
            dist.barrier()
            start = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if i >= 3:
                times.append(time.perf_counter() - start)
        return statistics.median(times)

    local = timed(_mlp())
    ddp = timed(torch.nn.parallel.DistributedDataParallel(_mlp()))
    if rank == 0:
        params = sum(p.numel() for p in _mlp().parameters())
        queue.put((params, ddp, local))
    dist.destroy_process_group()


def _spawn(worker, world, backend, *args):
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(worker, args=(world, backend, _free_port(), *args, queue), nprocs=world,
                       start_method="spawn")
    return queue.get()


def _fmt_size(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b // div} {unit}"
    return f"{b} B"


def _refusal(error):
    """The first line of a rank's error that says why (NCCL's "Duplicate GPU detected ...")."""
    text = str(error)
    for key in ("Duplicate GPU", "ncclInvalidUsage", "Error", "error"):
        for line in text.splitlines():
            if key in line:
                return line.strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else type(error).__name__


def _versions():
    v = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        v["nccl"] = f"unknown ({type(e).__name__})"
    if torch.cuda.is_available():
        v["gpu"] = torch.cuda.get_device_name(0)
        v["gpus"] = torch.cuda.device_count()
    return v


def allreduce(args):
    on_cuda = args.device == "cuda"
    sizes = CUDA_SIZES if on_cuda else SIZES
    report = {"device": args.device, "versions": _versions(), "tables": []}
    for world in args.ranks:
        results, refused = {}, {}
        for b in args.backends:
            try:
                results[b] = _spawn(_allreduce_worker, world, b, args.min_ms, args.device)
            except Exception as e:  # noqa: BLE001 - a backend refusing this world size is a result
                if not on_cuda:
                    raise
                refused[b] = _refusal(e)
        ran = [b for b in args.backends if b in results]
        factor = 2 * (world - 1) / world if world > 1 else 0.0
        head = "".join(f"{b + ' us':>12}{b + ' busbw':>13}" for b in ran)
        ratio = f"{'braid/gloo busbw':>18}" if set(ran) >= {"braid", "gloo"} else ""
        where = "CUDA tensors, events on the stream" if on_cuda else "CPU tensors"
        print(f"\ndist.all_reduce, float32 SUM, {world} ranks, {where}\n{'size':>10}{head}{ratio}")
        rows = []
        for i, size in enumerate(sizes):
            line = f"{_fmt_size(size):>10}"
            row = {"bytes": size}
            for b in ran:
                sec = results[b][i][1]
                line += f"{sec * 1e6:12.1f}{size / sec * factor / 1e9:13.3f}"
                row[b] = {"time_us": sec * 1e6, "busbw_gbps": size / sec * factor / 1e9}
            if ratio:
                line += f"{results['gloo'][i][1] / results['braid'][i][1]:18.2f}"
            rows.append(row)
            print(line, flush=True)
        for b, why in refused.items():
            print(f"{b:>10}: refused {world} ranks: {why}", flush=True)
        report["tables"].append({"ranks": world, "rows": rows, "refused": refused})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nwrote {args.json}")


def ddp(args):
    for world in args.ranks:
        print(f"\nDDP step, {world} ranks, 4 x Linear(1600, 1600), batch 64 per rank, median of {args.steps}")
        for b in args.backends:
            params, step, local = _spawn(_ddp_worker, world, b, args.steps)
            share = max(0.0, (step - local) / step)
            print(f"{b:>6}: {params / 1e6:.1f} M parameters, step {step * 1e3:7.1f} ms, "
                  f"local step {local * 1e3:6.1f} ms, communication {share * 100:4.1f}% of the step",
                  flush=True)


def percall(args):
    print(f"\ndist.all_reduce of 8 B (torch.ones(2)), 2 ranks, best of 5 windows of {args.calls} calls")
    seen = {}
    for b in args.backends:
        seen[b] = _spawn(_percall_worker, 2, b, args.calls)
        print(f"{b:>6}: {seen[b] * 1e6:6.2f} us per call", flush=True)
    if "fake" in seen:
        for b in seen:
            if b != "fake":
                print(f"{b:>6} - fake: {(seen[b] - seen['fake']) * 1e6:6.2f} us per call", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["allreduce", "ddp", "percall"])
    parser.add_argument("--ranks", default=None, help="comma-separated world sizes")
    parser.add_argument("--backends", default="braid,gloo")
    parser.add_argument("--min-ms", type=float, default=200.0, help="timed window per size")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--calls", type=int, default=5000, help="calls per window (percall)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="allreduce on CPU or CUDA tensors")
    parser.add_argument("--json", default=None, help="allreduce: also write the results here")
    args = parser.parse_args()
    if args.device == "cuda":
        if args.what != "allreduce":
            parser.error("--device cuda is for allreduce")
        if not torch.cuda.is_available():
            print("SKIPPED: torch_bench --device cuda: no CUDA device (torch.cuda.is_available() "
                  "is False); nothing was measured", flush=True)
            return 77
        if "--backends" not in sys.argv:
            args.backends = "braid,gloo,nccl"
    default_ranks = "1,2" if args.device == "cuda" else "2,4"
    args.ranks = [int(r) for r in (args.ranks or (default_ranks if args.what == "allreduce" else "2")).split(",")]
    if args.what == "percall" and "--backends" not in sys.argv:
        args.backends = "braid,gloo,fake"
    args.backends = args.backends.split(",")
    if "braid" in args.backends:
        import braid_torch  # noqa: F401  (registers "braid"; the entry point would as well)
    {"allreduce": allreduce, "ddp": ddp, "percall": percall}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
