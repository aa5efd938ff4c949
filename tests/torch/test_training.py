"""DDP on braid trains to the same parameters as on Gloo: plain, with the fp16 and bf16
compression hooks, and with uneven inputs under Join."""
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

from ranks import run_ranks, values


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 4))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)


def _train(rank, steps, hook=None, join=False):
    model = DDP(_model())
    if hook is not None:
        model.register_comm_hook(dist.group.WORLD, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step(i):
        x, y = _batch(rank, i)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    if join:
        with Join([model]):
            for i in range(steps):
                step(i)
    else:
        for i in range(steps):
            step(i)
    return [p.detach().clone() for p in model.parameters()]


def train_plain(rank, world):
    return _train(rank, 20)


def train_fp16(rank, world):
    return _train(rank, 8, hook=default_hooks.fp16_compress_hook)


def train_bf16(rank, world):
    return _train(rank, 8, hook=default_hooks.bf16_compress_hook)


def train_uneven(rank, world):
    return _train(rank, 3 + 2 * rank, join=True)  # rank 0: 3 steps, rank 1: 5 steps


def _same_as_gloo(fn, world=2):
    braid = values(run_ranks(fn, world, "braid"), "braid")
    gloo = values(run_ranks(fn, world, "gloo"), "gloo")
    for rank in range(world):
        for i, (b, g) in enumerate(zip(braid[rank], gloo[rank])):
            torch.testing.assert_close(b, g, msg=lambda m: f"rank {rank} parameter {i}: {m}")
    # DDP keeps replicas equal: every rank ends with rank 0's parameters.
    for rank in range(1, world):
        for b0, b in zip(braid[0], braid[rank]):
            torch.testing.assert_close(b0, b)
    initial = [p.detach() for p in _model().parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(initial, braid[0])), "training changed nothing"


def test_ddp_20_steps_equals_gloo():
    _same_as_gloo(train_plain)


def test_fp16_compress_hook_equals_gloo():
    _same_as_gloo(train_fp16)


def test_bf16_compress_hook_equals_gloo():
    _same_as_gloo(train_bf16)


def test_join_with_uneven_inputs_equals_gloo():
    _same_as_gloo(train_uneven)
