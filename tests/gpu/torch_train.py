"""A small PyTorch training loop for the real-GPU suite (tests/gpu/README.md): an MLP trained
with Adam on a fixed synthetic data set, deterministic, so its loss curve must be identical
bit for bit with and without the shim; then a deliberate leak (a list that keeps tensors).

The allocator mode comes from the environment the suite sets (PYTORCH_CUDA_ALLOC_CONF,
PYTORCH_NO_CUDA_MEMORY_CACHING, CUBLAS_WORKSPACE_CONFIG). Writes a JSON report to
$GPU_SUITE_REPORT (losses as float.hex, step times, memory_stats, the bytes of every tensor it
holds, the leak), then leaves with os._exit(0): no exit handler frees anything after the
statistics were read, so the trace's "live at exit" is the state the report describes.

Environment: GPU_SUITE_REPORT (required), GPU_SUITE_STEPS (timed steps, 300),
GPU_SUITE_WARMUP (untimed steps first, 30).
"""

import json
import os
import time

IN, HIDDEN, OUT = 1024, 2048, 128  # multiples of 128 floats: every tensor is 512-byte aligned
BATCH, BATCHES = 512, 8
LEAK_COUNT = 5
LEAK_BYTES = 3 * (1 << 20) + 7 * 512  # a size nothing else in the run allocates


def held_bytes(tensors):
    """Bytes of the distinct CUDA storages behind `tensors`."""
    seen = {}
    for t in tensors:
        if t is not None and t.is_cuda:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def main():
    import torch
    import torch.nn.functional as F

    report_path = os.environ["GPU_SUITE_REPORT"]
    steps = int(os.environ.get("GPU_SUITE_STEPS", "300"))
    warmup = int(os.environ.get("GPU_SUITE_WARMUP", "30"))

    torch.manual_seed(1234)
    # warn_only: an op without a deterministic kernel must not end the run; the loss
    # comparison is what checks determinism.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device("cuda", 0)

    gen = torch.Generator().manual_seed(4321)
    xs = torch.randn(BATCHES, BATCH, IN, generator=gen).to(device)
    ys = torch.randint(0, OUT, (BATCHES, BATCH), generator=gen).to(device)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, OUT),
    ).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    losses, step_seconds = [], []
    for step in range(warmup + steps):
        i = step % BATCHES
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        value = loss.item()  # waits for the step's kernels: the time covers the GPU work
        elapsed = time.perf_counter() - start
        losses.append(value.hex())
        if step >= warmup:
            step_seconds.append(elapsed)
    del loss
    torch.cuda.synchronize()

    leaked = []
    for _ in range(LEAK_COUNT):
        leaked.append(torch.empty(LEAK_BYTES // 4, device=device))  # GPUMEMPROF-TORCH-LEAK
    torch.cuda.synchronize()

    stats = torch.cuda.memory_stats(device)
    tensors = [xs, ys] + leaked + list(model.parameters())
    tensors += [p.grad for p in model.parameters()]
    for state in opt.state.values():
        tensors += [v for v in state.values() if torch.is_tensor(v)]
    report = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device),
        "backend": torch.cuda.get_allocator_backend(),
        "losses": losses,
        "step_seconds": step_seconds,
        "stats": {
            "reserved_peak": stats.get("reserved_bytes.all.peak", 0),
            "reserved_current": stats.get("reserved_bytes.all.current", 0),
            "allocated_peak": stats.get("allocated_bytes.all.peak", 0),
            "allocated_current": stats.get("allocated_bytes.all.current", 0),
        },
        "held_bytes": held_bytes(tensors),
        "leak": {"count": LEAK_COUNT, "bytes_each": LEAK_BYTES},
    }
    with open(report_path, "w") as f:
        json.dump(report, f)
    os._exit(0)


if __name__ == "__main__":
    main()
