#!/usr/bin/env python3
"""The lost window at SIGKILL: how much of a steady event stream a trace misses when the job is
killed at a moment nobody chose (BENCHMARKS.md).

    tests/bench/lost_window.py [KILLS] [SHIM]

Runs tests/programs/steady_allocs.c (one 4 KiB cudaMalloc/cudaFree pair a millisecond) under the
shim (SHIM: default target/release/libgpumemprof.so) on the simulated runtime, KILLS times
(default 20), each killed with SIGKILL 20 to 500 ms after it printed "started"; prints, per run,
the delay and the time between the kill and the last event in the file, then the largest.
Build first: cargo build --release --workspace && cargo test -p gpumemprof-tests --no-run.
"""
import glob
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def newest(pattern):
    found = glob.glob(os.path.join(ROOT, pattern))
    if not found:
        sys.exit(f"lost_window: nothing matches {pattern}: build first (see the docstring)")
    return max(found, key=os.path.getmtime)


def last_event_ns(trace, analyzer):
    """The header's start plus the trace's duration: CLOCK_MONOTONIC of its last record."""
    raw = open(trace, "rb").read(1 << 16)
    header, _ = json.JSONDecoder().raw_decode(raw[raw.index(b"{"):].decode("utf-8", "replace"))
    out = subprocess.run([analyzer, "summary", trace, "--json", "-q"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return header["start_monotonic_ns"] + json.loads(out.stdout)["trace"]["duration_ns"]


def main():
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    shim = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target/release/libgpumemprof.so")
    program = newest("target/debug/build/gpumemprof-tests-*/out/bin/steady_allocs")
    sim = os.path.join(os.path.dirname(os.path.dirname(program)), "sim")
    analyzer = os.path.join(ROOT, "target/release/gpumemprof")
    workdir = os.path.join(ROOT, "target/lost-window")
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, LD_PRELOAD=shim, LD_LIBRARY_PATH=sim, GPUMEMPROF_NVML_MS="0")
    worst = 0.0
    for i in range(kills):
        trace = os.path.join(workdir, f"{i}.trace")
        if os.path.exists(trace):
            os.remove(trace)
        env["GPUMEMPROF_OUTPUT"] = trace
        p = subprocess.Popen([program], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        p.stdout.readline()
        delay = random.uniform(0.02, 0.5)
        time.sleep(delay)
        killed = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        p.kill()
        p.wait()
        last = last_event_ns(trace, analyzer)
        lost = (killed - last) / 1e6 if last else float("nan")
        worst = max(worst, lost) if last else worst
        print(f"killed {delay * 1000:5.0f} ms after start: lost {lost:6.1f} ms")
    print(f"largest lost window: {worst:.1f} ms over {kills} kills")


if __name__ == "__main__":
    main()
