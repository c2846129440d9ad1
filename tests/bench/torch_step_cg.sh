#!/bin/bash
# The shim's own work per tensor on a real PyTorch training step, counted (BENCHMARKS.md,
# eighteenth): tests/bench/torch_step.py under valgrind's callgrind with a cache simulation
# of this machine's first levels (32 KiB instruction, 48 KiB data) and a 2 MiB last level
# (one core's L2), counting only inside the tensor hook (c10::reportMemoryUsageToProfiler:
# the shim's own definition; the c10 function it calls is not counted). Deterministic where
# wall time on a shared VM is not: the step's spread is larger than what a change to the
# capture moves. Runs STEPS_A and STEPS_B steps (after the script's 20 warm-up steps) and
# prints, per tensor of the steps in between (both recording threads: the main thread and
# autograd's), instructions and misses: Ir I1mr D1mr D1mw DLmr.
#
# usage: tests/bench/torch_step_cg.sh SHIM.so [STEPS_A [STEPS_B]]   (defaults: 20 60)
#   STACKS=full|native|off  (default full: native and Python frames)
#   KEEP=1                  keeps the callgrind files (printed: the folder) for callgrind_annotate
# Needs valgrind, the torch package the tests install (cargo test --test e2e_torch_train) and
# a release shim. About 7 minutes on 2 cores (the two runs side by side).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
so=$(realpath "$1"); a=${2:-20}; b=${3:-60}
REAL_GPU=0 . "$root/tests/bench/torch_sim.sh"
out=$(mktemp -d /tmp/gpumemprof-cg.XXXXXX)
run() {
  # python3 may be a launcher script: every process gets its own output file (%p).
  env "${sim[@]}" \
    GPUMEMPROF_OUTPUT="$out/t$1.trace" GPUMEMPROF_QUIET=1 GPUMEMPROF_NVML_MS=0 \
    GPUMEMPROF_STACKS="${STACKS:-full}" \
    valgrind --tool=callgrind --trace-children=yes --separate-threads=yes \
    --collect-atstart=no --toggle-collect='c10::reportMemoryUsageToProfiler*' \
    --cache-sim=yes --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 \
    --callgrind-out-file="$out/cg$1.%p" env LD_PRELOAD="$so" \
    python3 "$root/tests/bench/torch_step.py" "$1" none > "$out/log$1" 2>&1
}
run "$a" & run "$b"; wait
python3 - "$out" "$a" "$b" <<'PY'
import glob, os, re, subprocess, sys
out, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def totals(steps):
    # The largest file of each thread is the Python process's (a launcher writes small ones).
    best = {}
    for f in glob.glob(f"{out}/cg{steps}.*-*"):
        t = f.rsplit("-", 1)[1]
        if t not in best or os.path.getsize(f) > os.path.getsize(best[t]):
            best[t] = f
    sums = {}
    for f in best.values():
        text = subprocess.run(["callgrind_annotate", f], capture_output=True, text=True).stdout
        ev = re.search(r"^Events shown:\s+(.*)$", text, re.M).group(1).split()
        tot = re.search(r"^(.*)PROGRAM TOTALS", text, re.M).group(1)
        vals = re.sub(r"\([ \d.]+%\)", " ", tot).split()
        for e, v in zip(ev, vals):
            sums[e] = sums.get(e, 0) + (0 if v == "." else int(v.replace(",", "")))
    return sums
ta, tb = totals(a), totals(b)
log = open(f"{out}/log{b}").read()
tensors = float(re.search(r"tensors_per_step=([\d.]+)", log).group(1))
n = (b - a) * tensors
print(f"per tensor ({b - a} steps of {tensors:.0f} tensors):",
      " ".join(f"{e}={(tb[e] - ta[e]) / n:.1f}" for e in ["Ir", "I1mr", "D1mr", "D1mw", "DLmr"]))
PY
if [ -z "$KEEP" ]; then rm -rf "$out"; else echo "callgrind files: $out"; fi
