#!/bin/bash
# The tensor path's cost (BENCHMARKS.md): allocate+free pairs of a 4 KiB tensor through
# PyTorch's real caching allocator (libc10_cuda.so of the pinned wheel, on the simulated
# runtime), 20 calls deep, without the shim and with it (GPUMEMPROF_STACKS=off and native),
# run after run in turn so that drift hits all alike; prints each one's median wall ns per
# pair and the shim's cost over the allocator alone: the difference of the medians, and the
# median of each run's difference from the run without the shim made just before it.
#
# With PY=1 the loop is driven from Python instead (ctypes, DEPTH Python frames deep; the
# harness built as a shared library), and the shim runs with GPUMEMPROF_STACKS=full (native
# and Python frames) as well.
#
# usage: [PY=1] tests/bench/torch.sh [RUNS [PAIRS [DEPTH]]]   (defaults: 7 1000000 20)
# Needs the harness built by the real-allocator test once (cargo test --test e2e_torch,
# or the README's test command) and a release shim (cargo build --release -p gpumemprof-shim).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-7}; pairs=${2:-1000000}; depth=${3:-20}
exe=$(ls -t "$root"/target/*/torch/build.*/caching_allocator | head -1)
# The torch package (`site`), its stand-in libcudart.so.13 and the simulated driver (`lib`).
REAL_GPU=0 . "$root/tests/bench/torch_sim.sh"
shim=$(ls -t "$root"/target/release/libgpumemprof.so "$root"/target/release/deps/libgpumemprof.so 2>/dev/null | head -1)
trace=$(mktemp -u /tmp/gpumemprof-torch.XXXXXX.trace)
modes="none off native"
cmd=("$exe" bench "$pairs" "$depth")
if [ "${PY:-0}" = 1 ]; then
  modes="none off native full"
  cu13=$(ls -d "$root"/target/*/cuda-headers/extracted/nvidia/cu13/include | head -1)
  so="$(dirname "$exe")/libpairs.so"
  g++ -std=c++20 -O1 -g -fno-omit-frame-pointer -shared -fPIC -I"$site/torch/include" \
    -I"$cu13" -o "$so" "$root/tests/torch/caching_allocator.cpp" \
    -L"$site/torch/lib" -lc10_cuda -lc10 -Wl,-rpath,"$site/torch/lib" -Wl,-rpath-link,"$lib"
  cmd=(python3 -c "
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1]); lib.gpumemprof_bench_pairs.argtypes = [ctypes.c_long]
lib.gpumemprof_bench_init()
def nest(d, n):
    return lib.gpumemprof_bench_pairs(n) if d == 0 else nest(d - 1, n)
n, depth = int(sys.argv[2]), int(sys.argv[3])
nest(depth, n // 10 + 1)
t0 = time.perf_counter_ns(); nest(depth, n); t1 = time.perf_counter_ns()
print(f'ns_per_pair={(t1 - t0) / n:.1f}')" "$so" "$pairs" "$depth")
fi
declare -A res
for r in $(seq "$runs"); do
  for mode in $modes; do
    if [ $mode = none ]; then pre=""; else pre="LD_PRELOAD=$shim"; fi
    out=$(env "${sim[@]}" GPUMEMPROF_OUTPUT="$trace" \
      GPUMEMPROF_QUIET=1 GPUMEMPROF_STACKS=$mode $pre "${cmd[@]}")
    rm -f "$trace"
    res[$mode]+=" ${out#ns_per_pair=}"
  done
done
med(){ echo "$@" | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
base=$(med ${res[none]})
for k in $modes; do
  m=$(med ${res[$k]})
  # Paired: each run's difference from the run without the shim just before it, then the
  # median of those (drift during the call moves both of a pair alike).
  paired=$(python3 -c "import statistics as s, sys; a, b = sys.argv[1].split(), sys.argv[2].split(); print(round(s.median(float(x) - float(y) for x, y in zip(a, b)), 1))" "${res[$k]}" "${res[none]}")
  echo "$k: median $m ns/pair [${res[$k]} ]  over the allocator alone: $(python3 -c "print(round($m-$base,1))") ns (paired: $paired ns)"
done
