"""A 2-rank DDP training run on backend "braid" (README's third command):

    .venv/bin/torchrun --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:0 \
        --local-addr 127.0.0.1 bindings/torch/examples/ddp_example.py

(`--standalone` with addresses instead of names: it dials `localhost` and gives the workers the
host name, which do not resolve without /etc/hosts; see README.md.)

No import of braid_torch is needed: the installed package registers "braid" with torch.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("braid", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 32, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.1
    for step in range(50):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == 49:
            total = loss.detach().clone()
            dist.all_reduce(total, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step:2d}  mean loss over {world} ranks {total.item():.4f}")
    # Replicas stay identical: every rank's parameters equal rank 0's.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    first = flat.clone()
    dist.broadcast(first, src=0)
    assert torch.equal(flat, first), f"rank {rank}: parameters differ from rank 0's"
    if rank == 0:
        print(f"backend {dist.get_backend()}: {world} ranks trained to identical parameters")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
