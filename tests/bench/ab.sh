#!/bin/bash
# Side-by-side comparison of shim builds on bench_loop (cuda, depth 20), interleaved run by
# run so that drift in machine load hits every build alike. For each build (and "none",
# no shim) it prints the median over the runs of the whole process's CPU time per pair
# (perf stat task-clock: the program's thread and the writer's together) and of the
# loop's wall time per pair, each with the runs' figures in order.
#
# usage: tests/bench/ab.sh STACKS RUNS PAIRS SHIM.so [SHIM.so ...]
#   e.g. cp target/release/libgpumemprof.so /tmp/new.so (and an older build to /tmp/old.so);
#        tests/bench/ab.sh off 9 1000000 /tmp/old.so /tmp/new.so
# The floor of the design is one of the builds to compare with: the minimal interposer of
# tests/programs/floor_interposer.c, built beside bench_loop as bin/libfloor_interposer.so
# (it ignores GPUMEMPROF_STACKS), and the same with the shim's stamps (an allocation's
# fenced), bin/libfloor_interposer_fenced.so.
# Needs perf, and a release build of the tests crate (cargo build --release --workspace).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$(dirname "$(dirname "$(ls -t "$root"/target/release/build/gpumemprof-tests-*/out/bin/bench_loop | head -1)")")
export LD_LIBRARY_PATH=$B/sim
stacks=$1; runs=$2; pairs=$3; shift 3
trace=$(mktemp -u /tmp/gpumemprof-ab.XXXXXX.trace)
declare -A res wall
for r in $(seq $runs); do
  for lib in none "$@"; do
    if [ $lib = none ]; then pre=""; else pre="LD_PRELOAD=$lib"; fi
    out=$(env GPUMEMPROF_OUTPUT=$trace GPUMEMPROF_QUIET=1 GPUMEMPROF_STACKS=$stacks $pre perf stat -x, -e task-clock $B/bin/bench_loop cuda 20 $pairs 2>&1); rm -f "$trace"
    ms=$(echo "$out" | grep task-clock | cut -d, -f1)
    res[$lib]+=" $(python3 -c "print(round($ms*1e6/$pairs,1))")"
    wall[$lib]+=" $(echo "$out" | sed -n 's/ns_per_pair=//p')"
  done
done
med(){ echo $@ | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for k in none "$@"; do echo "$k: cpu/pair median $(med ${res[$k]}) [${res[$k]} ]  wall median $(med ${wall[$k]}) [${wall[$k]} ]"; done
