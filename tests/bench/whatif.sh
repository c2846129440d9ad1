#!/bin/bash
# The speed of `gpumemprof whatif` (BENCHMARKS.md): a real trace of the unmodified torch
# package training an MLP with Adam for STEPS steps on the simulated GPU (about 74 tensor
# events a step: 13,600 steps make 1,000,000), recorded once under the release shim, then
# replayed under five configurations, one `whatif` each (each also replays the job's own
# policy beside it and checks it against the job, so ten replays and ten reads of the
# trace in all). Prints each run's wall time, the total, and the events replayed.
#
# usage: tests/bench/whatif.sh [STEPS]   (default: 13600)
# Needs the torch package the tests install (the README's test command) and a release
# build (cargo build --release --workspace).
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-13600}
SIM_CAPACITY=$((4 << 30)) REAL_GPU=0 . "$root/tests/bench/torch_sim.sh"
shim="$root/target/release/libgpumemprof.so"
cli="$root/target/release/gpumemprof"
trace=$(mktemp -u /tmp/gpumemprof-whatif.XXXXXX.trace)
env "${sim[@]}" GPUMEMPROF_OUTPUT="$trace" GPUMEMPROF_QUIET=1 GPUMEMPROF_NVML_MS=0 LD_PRELOAD="$shim" \
  python3 "$root/tests/programs/torch_train.py" "$steps" > /dev/null
echo "trace: $(stat -c %s "$trace") bytes"
total=0
for set in expandable_segments:True max_split_size_mb:64 roundup_power2_divisions:4 \
  garbage_collection_threshold:0.6,per_process_memory_fraction:0.5 large_segment_size_mb:40; do
  start=$(date +%s%N)
  out=$("$cli" whatif "$trace" --set "$set" --device-memory 4GiB --json -q)
  ns=$(( $(date +%s%N) - start ))
  total=$(( total + ns ))
  events=$(echo "$out" | python3 -c 'import json,sys; r=json.load(sys.stdin); f=r["fidelity"]; print(f["tensor_events"], "events, fidelity matched:", f["matched"])')
  printf '%-64s %6.2f s  (%s)\n' "$set" "$(echo "$ns / 1000000000" | bc -l)" "$events"
done
printf 'five configurations: %.2f s\n' "$(echo "$total / 1000000000" | bc -l)"
rm -f "$trace"
