#!/bin/bash
# The tensor path's cost (BENCHMARKS.md): allocate+free pairs of a 4 KiB tensor through
# PyTorch's real caching allocator (libc10_cuda.so of the pinned wheel, on the simulated
# runtime), 20 calls deep, without the shim and with it (GPUMEMPROF_STACKS=off and native),
# run after run in turn so that drift hits all alike; prints each one's median wall ns per
# pair and the shim's cost over the allocator alone.
#
# usage: tests/bench/torch.sh [RUNS [PAIRS [DEPTH]]]   (defaults: 7 1000000 20)
# Needs the harness built by the real-allocator test once (cargo test --test e2e_torch,
# or the README's test command) and a release shim (cargo build --release -p gpumemprof-shim).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-7}; pairs=${2:-1000000}; depth=${3:-20}
exe=$(ls -t "$root"/target/*/torch/build.*/caching_allocator | head -1)
lib=$(dirname "$exe")
shim=$root/target/release/libgpumemprof.so
trace=$(mktemp -u /tmp/gpumemprof-torch.XXXXXX.trace)
declare -A res
for r in $(seq "$runs"); do
  for mode in none off native; do
    if [ $mode = none ]; then pre=""; else pre="LD_PRELOAD=$shim"; fi
    out=$(env LD_LIBRARY_PATH="$lib" SIMCUDA_CAPACITY=1073741824 GPUMEMPROF_OUTPUT="$trace" \
      GPUMEMPROF_QUIET=1 GPUMEMPROF_STACKS=$mode $pre "$exe" bench "$pairs" "$depth")
    rm -f "$trace"
    res[$mode]+=" ${out#ns_per_pair=}"
  done
done
med(){ echo "$@" | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
base=$(med ${res[none]})
for k in none off native; do
  m=$(med ${res[$k]})
  echo "$k: median $m ns/pair [${res[$k]} ]  over the allocator alone: $(python3 -c "print(round($m-$base,1))") ns"
done
