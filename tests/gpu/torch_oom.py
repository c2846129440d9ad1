"""A forced CUDA out-of-memory in PyTorch for the real-GPU suite (tests/gpu/README.md).

Keeps 4 tensors of 64 MiB, then asks for one tensor larger than anything the allocator could
find: the device's free memory, plus what PyTorch has cached, plus 256 MiB, rounded up to
2 MiB (a multiple of 2 MiB is exactly the segment the caching allocator asks cudaMalloc for).
That is still less than the device's total, since the CUDA context and the kept tensors
take more than 256 MiB. The exception is caught; its type and message, memory_stats() and
the free memory right after it go to the JSON report at $GPU_SUITE_REPORT, then
os._exit(0) (nothing is freed after the statistics were read).

The allocator mode comes from the environment the suite sets.
"""

import json
import os

MIB = 1 << 20
KEEP_COUNT, KEEP_BYTES = 4, 64 * MIB


def main():
    import torch

    report_path = os.environ["GPU_SUITE_REPORT"]
    device = torch.device("cuda", 0)
    keep = [torch.empty(KEEP_BYTES // 4, device=device) for _ in range(KEEP_COUNT)]
    torch.cuda.synchronize()

    free, total = torch.cuda.mem_get_info(device)
    stats = torch.cuda.memory_stats(device)
    cached = stats.get("reserved_bytes.all.current", 0) - stats.get(
        "allocated_bytes.all.current", 0)
    request = -(-(free + cached + 256 * MIB) // (2 * MIB)) * (2 * MIB)
    error = None
    try:
        big = torch.empty(request // 4, device=device)  # GPUMEMPROF-TORCH-OOM
        del big
    except RuntimeError as e:  # OutOfMemoryError, or the plain CUDA error without caching
        error = {"type": type(e).__name__, "message": str(e)}
    after = torch.cuda.memory_stats(device)
    free_after, _ = torch.cuda.mem_get_info(device)

    report = {
        "torch": torch.__version__,
        "backend": torch.cuda.get_allocator_backend(),
        "request": request,
        "free_before": free,
        "free_after": free_after,
        "total": total,
        "kept_bytes": KEEP_COUNT * KEEP_BYTES,
        "kept_count": len(keep),
        "error": error,
        "stats_after": {
            "reserved_current": after.get("reserved_bytes.all.current", 0),
            "allocated_current": after.get("allocated_bytes.all.current", 0),
        },
    }
    with open(report_path, "w") as f:
        json.dump(report, f)
    os._exit(0)


if __name__ == "__main__":
    main()
