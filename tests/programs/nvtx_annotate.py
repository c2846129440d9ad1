#!/usr/bin/env python3
"""nvtx_annotate.py: a Python training step annotated with the PyPI package `nvtx`, allocating
GPU memory through ctypes inside and outside its ranges.

The real situation: a PyTorch-style script marks its phases with nvtx.annotate (a context
manager and a decorator; messages are NVTX registered strings), nvtx.push_range/pop_range,
nvtx.start_range/end_range and nvtx.mark. Run with NVTX_INJECTION64_PATH naming the profiler,
PYTHONPATH holding the `nvtx` package and the simulators' folder on LD_LIBRARY_PATH.

In order (MiB = 1048576 bytes), each cudaMalloc kept to the end:
  1 MiB in no range;
  with annotate("forward"): 8 MiB; inside it, with annotate("attention", domain="model"): 4 MiB;
  push_range("optimizer_step"): 16 MiB; pop_range();
  load_batch(), decorated with annotate("load_batch"): 2 MiB;
  mark("epoch done");
  start_range("checkpoint"): 6 MiB; end_range.
Live at exit: 37 MiB in 6 blocks.

Prints (key=value): nvtx_enabled, live_device_bytes.
Exits 1 with a message on stderr if a call returns anything but cudaSuccess.
"""
import ctypes
import sys

import nvtx

MIB = 1 << 20


def load_runtime():
    cudart = ctypes.CDLL("libcudart.so.12")
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaMalloc.restype = ctypes.c_int
    return cudart


CUDART = load_runtime()


def alloc(nbytes):
    ptr = ctypes.c_void_p()
    rc = CUDART.cudaMalloc(ctypes.byref(ptr), nbytes)
    if rc != 0:
        sys.stdout.flush()
        sys.stderr.write(f"nvtx_annotate: cudaMalloc returned {rc}, expected 0\n")
        sys.exit(1)
    return ptr.value


@nvtx.annotate("load_batch")
def load_batch():
    return alloc(2 * MIB)


def main():
    kept = [alloc(1 * MIB)]
    with nvtx.annotate("forward"):
        kept.append(alloc(8 * MIB))
        with nvtx.annotate("attention", domain="model"):
            kept.append(alloc(4 * MIB))
    nvtx.push_range("optimizer_step")
    kept.append(alloc(16 * MIB))
    nvtx.pop_range()
    kept.append(load_batch())
    nvtx.mark("epoch done")
    checkpoint = nvtx.start_range("checkpoint")
    kept.append(alloc(6 * MIB))
    nvtx.end_range(checkpoint)
    print(f"nvtx_enabled={int(nvtx.enabled())}")
    print(f"live_device_bytes={37 * MIB}")


if __name__ == "__main__":
    main()
