#!/bin/bash
# Two shim builds on tests/programs/varied_sites.c (native stacks, cudaMalloc/cudaFree), run in
# turn A B, B A, A B, ... with a plain run after each pair, so that drift hits both alike. Prints
# each build's median ns per pair (the program's own clock around its loop) and the median of
# the pairs' ratios B/A, with how many pairs B was the faster in: on a noisy machine a change of
# a few percent shows in the ratio long before it shows in the medians (BENCHMARKS.md,
# twenty-sixth).
#
# usage: tests/bench/varied_ab.sh PAIRS A.so B.so SITES ROUNDS DEPTH
#   e.g. tests/bench/varied_ab.sh 21 /tmp/old.so /tmp/new.so 100000 10 20
# FREE=0 records no stack for a free (GPUMEMPROF_FREE_STACKS=0). Needs a release build of the
# tests crate (cargo build --release --workspace).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
n=$1; a=$2; b=$3; shift 3
B=$(dirname "$(dirname "$(ls -t "$root"/target/release/build/gpumemprof-tests-*/out/bin/varied_sites | head -1)")")
export LD_LIBRARY_PATH=$B/sim
trace=$(mktemp -u /tmp/gpumemprof-varied-ab.XXXXXX.trace)
run() {
  env LD_PRELOAD="$1" GPUMEMPROF_STACKS=native GPUMEMPROF_FREE_STACKS="${FREE:-1}" \
    GPUMEMPROF_QUIET=1 GPUMEMPROF_OUTPUT="$trace" "$B/bin/varied_sites" "${@:2}" cuda |
    sed -n 's/^ns_per_pair=//p'
  rm -f "$trace"*
}
ra=(); rb=(); rp=()
for i in $(seq "$n"); do
  if (( i % 2 )); then x=$(run "$a" "$@"); y=$(run "$b" "$@"); else y=$(run "$b" "$@"); x=$(run "$a" "$@"); fi
  rp+=("$("$B/bin/varied_sites" "$@" cuda | sed -n 's/^ns_per_pair=//p')")
  ra+=("$x"); rb+=("$y")
done
python3 - "${ra[*]}" "${rb[*]}" "${rp[*]}" "$*" <<'PY'
import statistics as st, sys
a, b, p = ([float(x) for x in s.split()] for s in sys.argv[1:4])
print(f"varied_sites {sys.argv[4]}, {len(a)} pairs, ns per pair (medians): "
      f"A {st.median(a):.1f}, B {st.median(b):.1f}, plain {st.median(p):.1f}")
r = [y / x for x, y in zip(a, b)]
print(f"B/A per pair: median {st.median(r):.3f} (from {min(r):.3f} to {max(r):.3f}); "
      f"B the faster in {sum(v < 1 for v in r)} of {len(r)}")
PY
