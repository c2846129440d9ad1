"""A small PyTorch training loop with the commonest leak, run by the tests on the unmodified torch
package and the simulated GPU (tests/torch_package.rs).

    torch_train.py STEPS [--snapshot PATH] [--nvtx] [--pause SECONDS] [--step-time SECONDS]

An MLP (nn.Module) trained with Adam for STEPS steps on random batches; each step keeps its output
in a module-level list "for logging", so one activation per step stays live until the interpreter
exits. After each step one JSON line gives what PyTorch itself says (torch.cuda.memory_stats())
and the CLOCK_MONOTONIC time it was read at; after the last, one line "kinds" gives the bytes
PyTorch holds as parameters, optimizer state and gradients (each tensor rounded up to the
allocator's 512 bytes, as its blocks are); with --snapshot, PyTorch's own recorder runs from the
start and its snapshot is dumped to PATH after the last step (the line "snapshot" says when);
with --nvtx each step is one NVTX range ("step", torch.cuda.nvtx), and with --pause the
loop sleeps SECONDS before each step (a slower run of the same steps); with --step-time each
step sleeps at its end, inside its range, until it has lasted SECONDS (as a real step waits for
its GPU work: a step of a millisecond is shorter than a time bucket of `browse`).
Last, one small backward pass lets autograd's thread finish with the training's (see
drain_autograd), and the line "end" gives the stats at the program's end.
"""

import json
import sys
import time

import torch
from torch import nn

BATCH, IN, HIDDEN, OUT = 64, 256, 512, 128

# What the loop keeps for logging: grows by one activation per step, freed only at exit.
history = []

STATS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "allocation.all.allocated",
    "allocation.all.freed",
    "allocation.all.current",
    "segment.all.current",
    "num_alloc_retries",
    "num_ooms",
)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(IN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, OUT),
        )

    def forward(self, x):
        return self.layers(x)


def report(event, **fields):
    stats = torch.cuda.memory_stats()
    line = {"event": event, "time_ns": time.monotonic_ns(), **fields}
    line["stats"] = {k: stats.get(k, 0) for k in STATS}
    print(json.dumps(line), flush=True)


def block_bytes(tensors):
    """The bytes of the allocator's blocks holding `tensors` (each rounded up to 512)."""
    return sum(-(-t.untyped_storage().nbytes() // 512) * 512 for t in tensors if t.is_cuda)


def kinds(model, opt):
    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    grads = [p.grad for p in params if p.grad is not None]
    return {
        "parameters": block_bytes(params),
        "optimizer_state": block_bytes(state),
        "gradients": block_bytes(grads),
    }


def drain_autograd():
    """Returns once autograd's device thread has let go of the last backward pass: a graph
    it still destroys while the interpreter finalizes can abort the process ("terminate
    called without an active exception", PyTorch issue #190489, open). A backward on the
    same device runs after that, on the same thread."""
    x = torch.ones(1, device="cuda", requires_grad=True)
    (x * 2).sum().backward()


def train_step(model, opt, batch):
    out = model(batch)
    loss = out.pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    history.append(out.detach())  # LEAK: one activation per step, kept for logging
    return loss


def main():
    steps = int(sys.argv[1])
    snapshot, nvtx, pause, step_time = None, False, 0.0, 0.0
    rest = iter(sys.argv[2:])
    for arg in rest:
        if arg == "--snapshot":
            snapshot = next(rest)
        elif arg == "--nvtx":
            nvtx = True
        elif arg == "--pause":
            pause = float(next(rest))
        elif arg == "--step-time":
            step_time = float(next(rest))
        else:
            sys.exit(f"torch_train.py: unknown argument {arg}")
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=100000)
    torch.manual_seed(0)
    model = MLP().cuda()  # PARAMETERS
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(steps):
        time.sleep(pause)
        if nvtx:
            torch.cuda.nvtx.range_push("step")
        began = time.monotonic()
        batch = torch.randn(BATCH, IN, device="cuda")  # BATCH
        train_step(model, opt, batch)
        time.sleep(max(0.0, step_time - (time.monotonic() - began)))
        if nvtx:
            torch.cuda.nvtx.range_pop()
        report("step", step=step)
    report("kinds", **kinds(model, opt))
    if snapshot:
        report("snapshot")
        torch.cuda.memory._dump_snapshot(snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    drain_autograd()
    report("end")


if __name__ == "__main__":
    main()
