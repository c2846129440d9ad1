#!/bin/bash
# The cost of profiling a real PyTorch training step, per tensor (BENCHMARKS.md): the step of
# tests/bench/torch_step.py on the unmodified torch package and the simulated GPU, run plain,
# under the shim (GPUMEMPROF_STACKS=off, native, full: native and Python frames) and under
# PyTorch's own recorder (_record_memory_history with stacks='python' and 'all'), the modes
# run after run in turn so that drift hits all alike. Prints each mode's median ns per step and
# its cost per tensor over the plain step: the difference of the medians, and the median of
# each run's difference from the plain run made just before it, divided by the tensors a step
# allocates. Each run's figure goes to stderr as it is made, so a run cut short keeps them.
#
# usage: tests/bench/torch_step.sh [RUNS [STEPS]]   (defaults: 7 200)
#   SHIM=path.so     the shim to measure (default: the newest release build)
#   BEFORE=path.so   adds the mode before_full: that shim with native and Python frames
#                    (an older build, to compare in the same runs)
#   MODES="none full ..."  only these modes, none among them (the baseline): fewer modes,
#                    more runs in the same time
#   REAL_GPU=1       the python3 on PATH with its own torch and a real GPU (the device tool's
#                    machines), not the simulated one
# Needs the torch package the tests install (cargo test --test e2e_torch_train, or the README's
# test command), or REAL_GPU=1, and a release shim (cargo build --release -p gpumemprof-shim).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-7}; steps=${2:-200}
. "$root/tests/bench/torch_sim.sh"
shim=${SHIM:-$(ls -t "$root"/target/release/libgpumemprof.so "$root"/target/release/deps/libgpumemprof.so 2>/dev/null | head -1)}
trace=$(mktemp -u /tmp/gpumemprof-step.XXXXXX.trace)
all="none off native full torch_python torch_all"
[ -n "${BEFORE:-}" ] && all="none off native before_full full torch_python torch_all"
modes=${MODES:-$all}
declare -A res
tensors=
for r in $(seq "$runs"); do
  for mode in $modes; do
    pre=(); rec=none; stacks=off
    case $mode in
      off|native|full) pre=(LD_PRELOAD="$shim"); stacks=$mode ;;
      before_full) pre=(LD_PRELOAD="$BEFORE"); stacks=full ;;
      torch_python) rec=python ;;
      torch_all) rec=all ;;
    esac
    out=$(env "${sim[@]}" \
      GPUMEMPROF_OUTPUT="$trace" GPUMEMPROF_QUIET=1 GPUMEMPROF_NVML_MS=0 GPUMEMPROF_STACKS=$stacks \
      "${pre[@]}" python3 "$root/tests/bench/torch_step.py" "$steps" "$rec" 2>/dev/null)
    rm -f "$trace"
    ns=$(echo "$out" | sed -n 's/^ns_per_step=//p')
    tensors=$(echo "$out" | sed -n 's/^tensors_per_step=//p')
    res[$mode]+=" $ns"
    echo "run $r $mode ns_per_step=$ns tensors_per_step=$tensors" >&2
  done
done
echo "tensors per step: $tensors"
args=()
for mode in $modes; do args+=("$mode=${res[$mode]}"); done
python3 - "$tensors" "${args[@]}" <<'PY'
import statistics as s, sys
tensors = float(sys.argv[1])
runs = {}
for arg in sys.argv[2:]:
    n, v = arg.split("=", 1)
    runs[n] = [float(x) for x in v.split()]
names = list(runs)
base = s.median(runs["none"])
for n in names:
    m = s.median(runs[n])
    paired = s.median(a - b for a, b in zip(runs[n], runs["none"]))
    print(f"{n:13s} median {m/1000:9.1f} us/step  per tensor: +{(m - base)/tensors:7.1f} ns "
          f"(paired +{paired/tensors:7.1f} ns)  runs: {' '.join(f'{x/1000:.1f}' for x in runs[n])}")
PY
