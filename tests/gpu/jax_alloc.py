"""JAX's device memory for the real-GPU suite (tests/gpu/README.md), in the allocator mode the
suite sets: XLA_PYTHON_CLIENT_ALLOCATOR=platform (one allocation per buffer, freed when the
array dies) or the default, which preallocates one large pool.

Keeps 5 arrays of a distinctive size (put on the device from host memory, so nothing is
compiled), makes and drops 4 more, then writes the device's memory_stats() and what it kept
to $GPU_SUITE_REPORT and leaves with os._exit(0), so the kept arrays are live at exit.
"""

import json
import os

KEEP_COUNT = 5
KEEP_BYTES = 3 * (1 << 20) + 3 * 4096  # a size nothing else in the run allocates


def main():
    import jax
    import numpy as np

    report = {"jax": jax.__version__}
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        report["error"] = "JAX sees no GPU (devices: %s)" % jax.devices()
    else:
        device = gpus[0]
        host = np.zeros(KEEP_BYTES // 4, np.float32)
        keep = []
        for _ in range(KEEP_COUNT):
            keep.append(jax.device_put(host, device))  # GPUMEMPROF-JAX-LEAK
        for x in keep:
            x.block_until_ready()
        dropped = [jax.device_put(np.ones(1 << 20, np.float32), device) for _ in range(4)]
        for x in dropped:
            x.block_until_ready()
        del dropped
        stats = device.memory_stats() or {}
        report.update({
            "device": str(device),
            "stats": {k: int(v) for k, v in stats.items() if isinstance(v, int)},
            "count": len(keep),
            "bytes_each": KEEP_BYTES,
        })
    with open(os.environ["GPU_SUITE_REPORT"], "w") as f:
        json.dump(report, f)
    os._exit(0)


if __name__ == "__main__":
    main()
