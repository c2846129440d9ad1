#!/bin/bash
# Allocations from many call stacks (issue 28, BENCHMARKS.md): tests/programs/varied_sites.c
# run plain and under the shim (native stacks) with cudaMalloc/cudaFree, and plain and under
# heaptrack with malloc/free, the same call paths, the modes run after run in turn so that
# drift hits all alike. Prints each mode's median ns per pair (the program's own clock around
# its loop: start-up and the profilers' teardown are not in it) and the cost over its plain
# run, then the shim's cost as a share of heaptrack's: of the medians, and paired (the median
# of each run's share, each cost over the plain run made in the same round).
#
# usage: tests/bench/varied.sh [RUNS [SITES [ROUNDS [DEPTH]]]]   (defaults: 5 100000 10 20)
#   e.g. tests/bench/varied.sh 5 100000 10 20   (100,000 distinct stacks, 20 and 21 frames deep)
#        tests/bench/varied.sh 5 256 2000 20    (the mixed workload of 256 sites)
# SHIM=path picks the shim (default: the newest release build); BEFORE=path adds another build
# (mode before_native), run in the same rounds; NOFREE=1 adds the shim with
# GPUMEMPROF_FREE_STACKS=0 (mode shim_nofree: a stack for each allocation and none for a free, as
# heaptrack records), also set against heaptrack. Needs heaptrack on PATH and a release build of
# the workspace (cargo build --release --workspace).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-5}; sites=${2:-100000}; rounds=${3:-10}; depth=${4:-20}
B=$(dirname "$(dirname "$(ls -t "$root"/target/release/build/gpumemprof-tests-*/out/bin/varied_sites | head -1)")")
shim=${SHIM:-$(ls -t "$root"/target/release/libgpumemprof.so "$root"/target/release/deps/libgpumemprof.so 2>/dev/null | head -1)}
export LD_LIBRARY_PATH=$B/sim
out=$(mktemp -d /tmp/gpumemprof-varied.XXXXXX)
modes="cuda shim_native malloc heaptrack"
[ -n "$BEFORE" ] && modes="cuda before_native shim_native malloc heaptrack"
[ -n "$NOFREE" ] && modes="$modes shim_nofree"
declare -A res
for r in $(seq "$runs"); do
  for mode in $modes; do
    api=cuda; pre=(env); cmd=()
    case $mode in
      shim_native|before_native|shim_nofree)
        so=$shim; [ $mode = before_native ] && so=$BEFORE
        free=1; [ $mode = shim_nofree ] && free=0
        pre=(env LD_PRELOAD="$so" GPUMEMPROF_STACKS=native GPUMEMPROF_FREE_STACKS=$free
             GPUMEMPROF_QUIET=1 GPUMEMPROF_OUTPUT="$out/t.trace") ;;
      malloc) api=malloc ;;
      heaptrack) api=malloc; cmd=(heaptrack -o "$out/ht") ;;
    esac
    ns=$("${pre[@]}" "${cmd[@]}" "$B/bin/varied_sites" "$sites" "$rounds" "$depth" "$api" 2>/dev/null |
      sed -n 's/^ns_per_pair=//p')
    rm -f "$out"/*
    res[$mode]+=" $ns"
  done
done
rmdir "$out"
med(){ echo "$@" | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo "varied_sites $sites $rounds $depth, $runs runs, ns per pair (median [runs])"
for m in $modes; do echo "  $m: $(med ${res[$m]}) [${res[$m]} ]"; done
[ -n "$BEFORE" ] && echo "before: +$(python3 -c "print(round($(med ${res[before_native]}) - $(med ${res[cuda]}), 1))") ns per pair"
shim_cost=$(python3 -c "print(round($(med ${res[shim_native]}) - $(med ${res[cuda]}), 1))")
ht_cost=$(python3 -c "print(round($(med ${res[heaptrack]}) - $(med ${res[malloc]}), 1))")
echo "shim (native stacks): +$shim_cost ns per pair; heaptrack: +$ht_cost ns per pair;" \
  "the shim's cost is $(python3 -c "print(round(100 * $shim_cost / $ht_cost))")% of heaptrack's"
# Paired: each run's shim cost over its own plain run, as a share of the same run's heaptrack
# cost over its own malloc run; the median over the runs (steadier where the machine's speed
# drifts between rounds).
paired() {
python3 - "$1" "${res[cuda]}" "${res[$2]}" "${res[malloc]}" "${res[heaptrack]}" <<'PY'
import statistics, sys
what = sys.argv[1]
cuda, shim, malloc, ht = ([float(x) for x in a.split()] for a in sys.argv[2:])
shares = [(s - c) / (h - m) for c, s, m, h in zip(cuda, shim, malloc, ht) if h > m]
print(f"paired: {what} is {round(100 * statistics.median(shares))}% of heaptrack's "
      f"(median of {len(shares)} runs: {' '.join(f'{100 * x:.0f}' for x in shares)})")
PY
}
paired "the shim's cost" shim_native
if [ -n "$NOFREE" ]; then
  nofree_cost=$(python3 -c "print(round($(med ${res[shim_nofree]}) - $(med ${res[cuda]}), 1))")
  echo "shim, GPUMEMPROF_FREE_STACKS=0: +$nofree_cost ns per pair," \
    "$(python3 -c "print(round(100 * $nofree_cost / $ht_cost))")% of heaptrack's"
  paired "the shim's cost with GPUMEMPROF_FREE_STACKS=0" shim_nofree
fi
