#!/usr/bin/env python3
"""ctypes_alloc.py: GPU memory allocated from Python through ctypes, stdlib only.

The real situation: a Python tool or test calls the CUDA runtime directly with
ctypes.CDLL("libcudart.so.12").cudaMalloc, which is dlopen + dlsym(handle, "cudaMalloc"): a
preloaded export is not in that handle's scope, so a profiler sees these calls only through its
dlsym override, and their stacks are the Python interpreter's C frames.

Run with the simulators' folder on LD_LIBRARY_PATH (and python3 from PATH). allocate_batch()
calls cudaMalloc three times for 4 MiB (on the line with the CTYPES-ALLOC marker) and frees the
first block with cudaFree. Addresses with the default configuration (MiB = 1048576 bytes):
0x700000000000, 0x700000400000, 0x700000800000; the first is freed. Totals: 3 cudaMalloc,
1 cudaFree; live at exit: 8 MiB = 8388608 bytes in 2 blocks.

Prints (key=value): alloc_1, alloc_2, alloc_3, free_1, allocated, freed, live_device_bytes.
Exits 1 with a message on stderr if a call returns anything but cudaSuccess.
"""
import ctypes
import sys

MIB = 1 << 20


def load_runtime():
    cudart = ctypes.CDLL("libcudart.so.12")
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaMalloc.restype = ctypes.c_int
    cudart.cudaFree.argtypes = [ctypes.c_void_p]
    cudart.cudaFree.restype = ctypes.c_int
    return cudart


def check(what, rc):
    if rc != 0:
        sys.stdout.flush()
        sys.stderr.write(f"ctypes_alloc: {what} returned {rc}, expected 0\n")
        sys.exit(1)


def allocate_batch(cudart):
    blocks = []
    for _ in range(3):
        ptr = ctypes.c_void_p()
        rc = cudart.cudaMalloc(ctypes.byref(ptr), 4 * MIB)  # GPUMEMPROF-CTYPES-ALLOC
        check("cudaMalloc 4 MiB", rc)
        blocks.append(ptr.value)
    check("cudaFree", cudart.cudaFree(blocks[0]))
    return blocks


def main():
    blocks = allocate_batch(load_runtime())
    for i, block in enumerate(blocks, start=1):
        print(f"alloc_{i}=0x{block:x}")
    print(f"free_1=0x{blocks[0]:x}")
    print("allocated=3")
    print("freed=1")
    print(f"live_device_bytes={8 * MIB}")


if __name__ == "__main__":
    main()
