"""A data-parallel training job of several ranks, run by the tests under torchrun on the unmodified
torch package and a simulated GPU per rank (tests/torch_package.rs: SIMCUDA_DEVICES, the stand-in
NCCL).

    python -m torch.distributed.run --nproc-per-node 2 torch_ranks.py STEPS

Each rank trains the same MLP on its own device (its LOCAL_RANK) with Adam, all-reducing its
gradients over the `nccl` backend after each backward (DistributedDataParallel's constructor checks
the ranks' parameters with kernels, which compute nothing on the simulated GPU). Rank r keeps the
output of each of its steps for logging when r is odd: the leak of one rank. After the last step each
rank prints one JSON line with its rank and what PyTorch says (torch.cuda.memory_stats()), in one
write(2) (the ranks share the pipe; print() may write the line and its newline apart, and two ranks'
lines then ran together).
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

# What odd ranks keep for logging: one output per step, freed only at exit.
kept = []


def main():
    steps = int(sys.argv[1])
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 128)).cuda()  # MODEL
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps):
        batch = torch.randn(64 * (rank + 1), 256, device="cuda")  # BATCH
        out = model(batch)
        out.pow(2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank % 2 == 1:
            kept.append(out.detach())  # LEAK: odd ranks keep each step's output
    stats = torch.cuda.memory_stats()
    keys = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocation.all.allocated")
    os.write(1, (json.dumps({"event": "done", "rank": rank, "stats": {k: stats[k] for k in keys}}) + "\n").encode())
    # Autograd's device thread lets go of the last backward pass before the interpreter
    # finalizes (PyTorch issue #190489): a backward after it runs after that.
    x = torch.ones(1, device="cuda", requires_grad=True)
    (x * 2).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
