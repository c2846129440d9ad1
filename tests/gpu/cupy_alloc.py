"""CuPy's device memory for the real-GPU suite (tests/gpu/README.md), with its memory pool
(GPU_SUITE_MODE=pool, the default allocator) or without (nopool:
cupy.cuda.set_allocator(None), one cudaMalloc per array).

Keeps 5 arrays of a distinctive size, makes and drops 4 more (the pool caches them, the
no-pool allocator frees them), launches no kernel, then writes the pool's counters and what
it holds to $GPU_SUITE_REPORT and leaves with os._exit(0), so the kept arrays are live at exit.
"""

import json
import os

KEEP_COUNT = 5
KEEP_BYTES = 3 * (1 << 20) + 5 * 4096  # a size nothing else in the run allocates


def main():
    import cupy

    mode = os.environ.get("GPU_SUITE_MODE", "pool")
    if mode == "nopool":
        cupy.cuda.set_allocator(None)
    keep = []
    for _ in range(KEEP_COUNT):
        keep.append(cupy.empty(KEEP_BYTES // 4, dtype=cupy.float32))  # GPUMEMPROF-CUPY-LEAK
    dropped = [cupy.empty(1 << 20, dtype=cupy.float32) for _ in range(4)]
    del dropped
    cupy.cuda.Device(0).synchronize()
    pool = cupy.get_default_memory_pool()
    report = {
        "cupy": cupy.__version__,
        "mode": mode,
        "pool_total": int(pool.total_bytes()),
        "pool_used": int(pool.used_bytes()),
        "held_bytes": sum(int(a.nbytes) for a in keep),
        "count": len(keep),
        "bytes_each": KEEP_BYTES,
    }
    with open(os.environ["GPU_SUITE_REPORT"], "w") as f:
        json.dump(report, f)
    os._exit(0)


if __name__ == "__main__":
    main()
