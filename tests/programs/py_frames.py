#!/usr/bin/env python3
"""py_frames.py: allocations from Python code at known lines, for Python frames in stacks.

Run under the shim with the simulators' folder on LD_LIBRARY_PATH, with any CPython 3.9 to
3.13. First argument: the path of libpy_native_thread.so (built from py_native_thread.c).
Every block is leaked (never freed), each from its own site (1 MiB = 1048576 bytes):
- Trainer.build_weights, called from Trainer.step, called from main: two cudaMalloc of
  4 MiB on the PY-FRAMES-WEIGHTS line, 8 MiB in all;
- worker(), run by a threading.Thread: one cudaMalloc of 2 MiB on the PY-FRAMES-THREAD
  line (a thread with its own Python frames);
- alloc_on_native_thread(): 1 MiB from a pthread that never ran Python, its stack native only;
- twins(): a loop that calls malloc() from two lines in turn, 3 x 512 KiB on PY-FRAMES-TWIN-A
  and 3 x 256 KiB on PY-FRAMES-TWIN-B. Both calls reach cudaMalloc through the very same
  native frames, so only the Python frames tell the two sites apart.
Total leaked: 13.25 MiB in 10 blocks. Prints "ok" and exits 0, or exits 1 with a message.
"""
import ctypes
import sys
import threading

MIB = 1 << 20

cudart = ctypes.CDLL("libcudart.so.12")
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaMalloc.restype = ctypes.c_int


def malloc(size):
    ptr = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(ptr), size)  # PY-FRAMES-MALLOC
    if rc != 0:
        sys.exit(f"py_frames: cudaMalloc({size}) returned {rc}")
    return ptr.value


class Trainer:
    def __init__(self):
        self.weights = []

    def build_weights(self):
        for _ in range(2):
            self.weights.append(malloc(4 * MIB))  # PY-FRAMES-WEIGHTS

    def step(self):
        self.build_weights()  # PY-FRAMES-STEP


def worker(out):
    out.append(malloc(2 * MIB))  # PY-FRAMES-THREAD


def twins(out):
    for _ in range(3):
        out.append(malloc(512 << 10))  # PY-FRAMES-TWIN-A
        out.append(malloc(256 << 10))  # PY-FRAMES-TWIN-B


def main():
    Trainer().step()  # PY-FRAMES-MAIN
    out = []
    t = threading.Thread(target=worker, args=(out,))
    t.start()
    t.join()
    native = ctypes.CDLL(sys.argv[1])
    native.alloc_on_native_thread.argtypes = [ctypes.c_size_t]
    rc = native.alloc_on_native_thread(1 * MIB)
    if rc != 0:
        sys.exit(f"py_frames: alloc_on_native_thread returned {rc}")
    twins(out)
    print("ok")


if __name__ == "__main__":
    main()
