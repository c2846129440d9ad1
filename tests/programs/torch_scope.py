"""gpumemprof's Python scopes and figures on the unmodified torch package and the simulated
GPU, run by tests/e2e_torch_scope.rs (with the checkout's python/ on PYTHONPATH).

    torch_scope.py

Keeps 4 MiB (in a 20 MiB segment), then in a scope "forward" makes 8 MiB (in that segment)
and 12 MiB (a segment of its own) and frees the 8; then calls a function decorated as scope
"step" that makes and frees 2 MiB (from the cache). One JSON line per moment gives
gpumemprof's figures (live() and peak(), null without the shim) beside PyTorch's own:
"inside" (in "forward", after PyTorch's peak was reset at its start), "after" (out of it),
"step" (inside the decorated function).
"""

import json
import time

import torch

import gpumemprof

MIB = 1 << 20


def figures():
    live, peak = gpumemprof.live(), gpumemprof.peak()
    return {
        "live": live._asdict() if live else None,
        "peak": peak._asdict() if peak else None,
    }


def report(event, **torch_figures):
    line = {"event": event, "time_ns": time.monotonic_ns(), "ours": figures(), "torch": torch_figures}
    print(json.dumps(line), flush=True)


def empty(mib):
    return torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")  # ALLOCATES


@gpumemprof.scope("step")
def step():
    t = empty(2)
    report(
        "step",
        allocated=torch.cuda.memory_allocated(),
        max_allocated=torch.cuda.max_memory_allocated(),
    )
    del t


def main():
    kept = empty(4)
    with gpumemprof.scope("forward"):
        before_reset = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        a, b = empty(8), empty(12)
        del a
        report(
            "inside",
            allocated=torch.cuda.memory_allocated(),
            reserved=torch.cuda.memory_reserved(),
            max_allocated_since_scope=torch.cuda.max_memory_allocated(),
            max_allocated_before_scope=before_reset,
        )
        del b
    report("after", allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved())
    torch.cuda.reset_peak_memory_stats()
    step()
    del kept


if __name__ == "__main__":
    main()
