#!/usr/bin/env python3
"""signals_kept.py: a Python job's own signal handlers stay its own under the profiler.

The real situation: a training script allocates GPU memory (the profiler installs its signal
handlers then), starts helper processes with subprocess (Python forks them with vfork, and the
child resets every handler to the default before exec, in memory it shares with the parent),
installs a SIGTERM handler of its own (checkpoint on preemption), then is interrupted with
Ctrl-C and later told to stop with SIGTERM.

Run with the simulators' folder on LD_LIBRARY_PATH. Prints, one per line:
  interrupted             (SIGINT raised KeyboardInterrupt: Python's own handler ran)
  sigint=python           (signal.getsignal(SIGINT) is still Python's default_int_handler)
  sigterm=own             (signal.getsignal(SIGTERM) is the handler the script installed)
  checkpoint              (SIGTERM ran that handler)
and exits 0. Exits 1 with a message if a CUDA call fails.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time


def main():
    cudart = ctypes.CDLL("libcudart.so.12")
    ptr = ctypes.c_void_p()
    if cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)) != 0:
        sys.exit("signals_kept: cudaMalloc failed")
    for _ in range(3):
        subprocess.run(["true"], check=True)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    print("sigint=" + ("python" if signal.getsignal(signal.SIGINT) is signal.default_int_handler else "other"))

    def checkpoint(sig, frame):
        print("checkpoint", flush=True)

    signal.signal(signal.SIGTERM, checkpoint)
    print("sigterm=" + ("own" if signal.getsignal(signal.SIGTERM) is checkpoint else "other"))
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.1)
    cudart.cudaFree(ptr)


if __name__ == "__main__":
    main()
