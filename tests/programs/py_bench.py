#!/usr/bin/env python3
"""py_bench.py: the Python-frame benchmark loop (tests/bench/overhead.rs).

Usage: py_bench.py DEPTH PAIRS. Recurses DEPTH Python calls deep, then calls cudaMalloc and
cudaFree of 4096 bytes PAIRS times through ctypes (the simulated runtime, from
LD_LIBRARY_PATH) and prints ns_per_pair=<wall ns per pair of the loop>.
"""
import ctypes
import sys
import time

cudart = ctypes.CDLL("libcudart.so.12")
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaMalloc.restype = ctypes.c_int
cudart.cudaFree.argtypes = [ctypes.c_void_p]
cudart.cudaFree.restype = ctypes.c_int


def loop(pairs):
    ptr = ctypes.c_void_p()
    ref = ctypes.byref(ptr)
    malloc, free = cudart.cudaMalloc, cudart.cudaFree
    start = time.perf_counter_ns()
    for _ in range(pairs):
        if malloc(ref, 4096) != 0 or free(ptr) != 0:
            sys.exit("py_bench: a call failed")
    return (time.perf_counter_ns() - start) / pairs


def nest(depth, pairs):
    if depth > 1:
        return nest(depth - 1, pairs)
    return loop(pairs)


if __name__ == "__main__":
    print(f"ns_per_pair={nest(int(sys.argv[1]), int(sys.argv[2])):.1f}")
