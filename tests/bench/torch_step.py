"""The cost of profiling a real training step (BENCHMARKS.md, tests/bench/torch_step.sh): a deep,
narrow MLP (12 Linear layers of 256, ReLU between) trained with Adam on the unmodified torch
package and the simulated GPU, so every step makes PyTorch's real stream of tensors (forward
activations, autograd's gradients on its backward thread, the optimizer's work) from real
Python and C++ stacks.

    torch_step.py STEPS [none|python|all]

With `python` or `all`, PyTorch's own recorder runs (torch.cuda.memory._record_memory_history
with that `stacks`), the peer this profiler is measured against. Prints the wall time per step
over STEPS steps after 20 warm-up steps, and the tensors PyTorch allocated per step:
    ns_per_step=<float>
    tensors_per_step=<float>
"""

import sys
import time

import torch
from torch import nn

LAYERS, WIDTH, BATCH = 12, 256, 32


def main():
    steps = int(sys.argv[1])
    recorder = sys.argv[2] if len(sys.argv) > 2 else "none"
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    model = nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batch = torch.randn(BATCH, WIDTH, device="cuda")
    if recorder != "none":
        torch.cuda.memory._record_memory_history(max_entries=100000, stacks=recorder)

    def step():
        loss = model(batch).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
    t1 = time.perf_counter_ns()
    after = torch.cuda.memory_stats()["allocation.all.allocated"]
    print(f"ns_per_step={(t1 - t0) / steps:.1f}")
    print(f"tensors_per_step={(after - before) / steps:.2f}")


if __name__ == "__main__":
    main()
