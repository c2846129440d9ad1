#!/usr/bin/env python3
"""train.py: a training loop in Python that leaks device memory, for `gpumemprof run`.

Stdlib only: it reaches the CUDA runtime through ctypes (libcudart.so.12: the real one on a
machine with a GPU, the simulated one from this repository otherwise; the demo puts the
simulators' folder on LD_LIBRARY_PATH). Per step it allocates activations and frees them, and
keeps one 1 MiB "logging" buffer that it never frees, from `Model.keep_for_logging`: after
STEPS (default 8) steps, STEPS MiB are leaked from that one Python line, and the peak is the
weights plus one step's activations plus the leak so far.

    gpumemprof run -- python3 examples/train.py
    gpumemprof leaks gpumemprof.<pid>.trace     # names Model.keep_for_logging and its line
"""
import ctypes
import os
import sys

MIB = 1 << 20
STEPS = int(os.environ.get("STEPS", "8"))

cudart = ctypes.CDLL("libcudart.so.12")
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaMalloc.restype = ctypes.c_int
cudart.cudaFree.argtypes = [ctypes.c_void_p]
cudart.cudaFree.restype = ctypes.c_int


def device_alloc(size):
    ptr = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(ptr), size)
    if rc != 0:
        sys.exit(f"train.py: cudaMalloc({size}) failed with error {rc}")
    return ptr.value


class Model:
    def __init__(self):
        self.weights = device_alloc(16 * MIB)  # weights
        self.log = []

    def forward(self):
        return [device_alloc(4 * MIB) for _ in range(2)]  # activations

    def keep_for_logging(self):
        self.log.append(device_alloc(1 * MIB))  # the leak: never freed

    def step(self):
        activations = self.forward()
        self.keep_for_logging()
        for a in activations:
            cudart.cudaFree(a)


def main():
    model = Model()
    for _ in range(STEPS):
        model.step()
    cudart.cudaFree(model.weights)
    print(f"train.py: {STEPS} steps done")


if __name__ == "__main__":
    main()
