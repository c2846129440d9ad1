#!/usr/bin/env python3
"""launch_child.py: the program `gpumemprof run` launches in tests/e2e_launcher.rs, stdlib only.

The real situation: a Python training script started through the launcher, which exits with its
own status, is killed, is interrupted with Ctrl-C, or starts worker processes that allocate too.
GPU memory comes from the simulated runtime through ctypes (the simulators' folder on
LD_LIBRARY_PATH), as in ctypes_alloc.py.

    launch_child.py exit N   cudaMalloc 4 MiB (kept), print "allocated", exit with status N
    launch_child.py sigkill  cudaMalloc 4 MiB, print "allocated", SIGKILL itself (status 137
                             through the launcher)
    launch_child.py wait     cudaMalloc 4 MiB, print "ready", block reading stdin; on SIGINT
                             print "saw SIGINT" and let KeyboardInterrupt end the process
                             (Python then dies of SIGINT: status 130 through the launcher)
    launch_child.py spawn    cudaMalloc 4 MiB, run "launch_child.py exit 0" as a subprocess
                             (which allocates its own 4 MiB), exit with its status
    launch_child.py count    cudaMalloc 4 MiB, print "ready", then count SIGINTs (printing
                             "SIGINT N" for each) until SIGTERM, which prints "SIGTERM after N
                             SIGINT" and exits 0 (used by launch_tty.py)
    launch_child.py env      print the environment as one JSON object, then one line with the
                             signal mask and ignored signals from /proc/self/status (no GPU call)

Exits 1 with a message on stderr if a CUDA call returns anything but cudaSuccess.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys

MIB = 1 << 20


def allocate_4mib():
    cudart = ctypes.CDLL("libcudart.so.12")
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaMalloc.restype = ctypes.c_int
    ptr = ctypes.c_void_p()
    rc = cudart.cudaMalloc(ctypes.byref(ptr), 4 * MIB)
    if rc != 0:
        sys.stderr.write(f"launch_child: cudaMalloc returned {rc}, expected 0\n")
        sys.exit(1)


def say(line):
    print(line, flush=True)


def count_signals():
    count = 0

    def on_sigint(signum, frame):
        nonlocal count
        count += 1
        say(f"SIGINT {count}")

    def on_sigterm(signum, frame):
        say(f"SIGTERM after {count} SIGINT")
        sys.exit(0)

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    allocate_4mib()
    say("ready")
    while True:
        signal.pause()


def main():
    mode = sys.argv[1]
    if mode == "env":
        say(json.dumps(dict(os.environ), sort_keys=True))
        with open("/proc/self/status") as status:
            fields = dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)
        say(f"SigBlk={fields['SigBlk']} SigIgn={fields['SigIgn']}")
        return 0
    if mode == "count":
        return count_signals()
    if mode == "wait":
        # Python's own Ctrl-C handler, also where the process started with SIGINT ignored
        # (a background job of a non-interactive shell); set before the first allocation, so
        # the shim chains to it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    allocate_4mib()
    if mode == "exit":
        say("allocated")
        return int(sys.argv[2])
    if mode == "sigkill":
        say("allocated")
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "wait":
        try:
            # Inside the try: the SIGINT may come as soon as "ready" is out.
            say("ready")
            sys.stdin.readline()
        except KeyboardInterrupt:
            say("saw SIGINT")
            raise
        say("stdin closed without a signal")
        return 0
    if mode == "spawn":
        return subprocess.run([sys.executable, __file__, "exit", "0"]).returncode
    sys.stderr.write(f"launch_child: unknown mode {mode}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
