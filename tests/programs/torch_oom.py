"""A PyTorch job that dies of torch.OutOfMemoryError from fragmentation, run by the tests on the
unmodified torch package and a simulated GPU of 1 GiB (tests/torch_package.rs).

    torch_oom.py [REQUEST_MIB]

It fills the device with 8 MiB activations, two to each 20 MiB segment of PyTorch's default
allocator, keeps every second one (so no segment is ever free to give back), then asks for a
REQUEST_MIB buffer (256 by default): with the default allocator that is an out-of-memory although a third of what
PyTorch reserved is unallocated; with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the
freed pages are unmapped and the buffer fits. One JSON line gives torch.cuda.memory_stats()
before the request (event "before"), and one after it if it fitted ("fitted"); otherwise the
error propagates and the process exits with 1, as a training job would.
"""

import json
import sys
import time

import torch

MIB = 1 << 20
COUNT = 96


def report(event):
    stats = torch.cuda.memory_stats()
    keys = (
        "allocated_bytes.all.current",
        "reserved_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.peak",
        "allocation.all.current",
        "num_ooms",
        "num_alloc_retries",
    )
    line = {"event": event, "time_ns": time.monotonic_ns()}
    line["stats"] = {k: stats.get(k, 0) for k in keys}
    print(json.dumps(line), flush=True)


def fill():
    activations = [torch.empty(8 * MIB, dtype=torch.uint8, device="cuda") for _ in range(COUNT)]  # FILL
    return activations[::2]


def main():
    request = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    kept = fill()
    report("before")
    buffer = torch.empty(request * MIB, dtype=torch.uint8, device="cuda")  # REQUEST
    report("fitted")
    del buffer, kept


if __name__ == "__main__":
    main()
