#!/usr/bin/env bash
# The real-GPU validation suite in one call (issue #8; tests/gpu/README.md says how to run it
# with the device tool). Finds or builds the shim, the analyzer and the cudarc client, then
# runs tests/gpu/suite.py, which prints a CHECK line per check and a table at the end and
# writes $OUT/validation.json when OUT is set. Exit status: the suite's (1 if a check failed).
#
# Where the binaries come from, first match wins:
#   1. GPUMEMPROF_SHIM / GPUMEMPROF_ANALYZER / GPUMEMPROF_CUDARC_CLIENT already set (the
#      simulated mode: tests/gpu_suite.rs sets them);
#   2. cargo on PATH: `cargo build --release` of the workspace and of the cudarc client
#      (offline, from what cargo has cached; a failure falls through to 3);
#   3. the carried build outputs in target/gpu-suite/ (tests/gpu/prepare.sh makes them).
# With GPUMEMPROF_GPU_SUITE_SIM=1 it runs the simulated mode (no GPU; see suite.py).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
carried="$repo/target/gpu-suite"
export PYTHONDONTWRITEBYTECODE=1

if [ "${GPUMEMPROF_GPU_SUITE_SIM:-0}" != 1 ] && [ -z "${GPUMEMPROF_SHIM:-}" ]; then
    if command -v cargo >/dev/null 2>&1 \
        && (cd "$repo" && cargo build --release --offline --workspace) >&2; then
        export GPUMEMPROF_SHIM="$repo/target/release/libgpumemprof.so"
        export GPUMEMPROF_ANALYZER="$repo/target/release/gpumemprof"
        client_target="$repo/target/gpu-suite-cudarc"
        if CARGO_TARGET_DIR="$client_target" cargo build --release --offline --locked \
            --manifest-path "$here/cudarc_client/Cargo.toml" >&2; then
            export GPUMEMPROF_CUDARC_CLIENT="$client_target/release/gpumemprof-cudarc-client"
        fi
        echo "# binaries: built here with cargo" >&2
    elif [ -f "$carried/libgpumemprof.so" ] && [ -x "$carried/gpumemprof" ]; then
        export GPUMEMPROF_SHIM="$carried/libgpumemprof.so"
        export GPUMEMPROF_ANALYZER="$carried/gpumemprof"
        echo "# binaries: carried in target/gpu-suite (no cargo, or its build failed)" >&2
    else
        echo "run.sh: no cargo here and no carried binaries in $carried:" \
            "run tests/gpu/prepare.sh where cargo works and carry target/gpu-suite" >&2
        exit 2
    fi
    if [ -z "${GPUMEMPROF_CUDARC_CLIENT:-}" ] && [ -x "$carried/gpumemprof-cudarc-client" ]; then
        export GPUMEMPROF_CUDARC_CLIENT="$carried/gpumemprof-cudarc-client"
    fi
fi

python=${GPUMEMPROF_GPU_SUITE_PYTHON:-python3}
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    set -o pipefail
    "$python" "$here/suite.py" 2>&1 | tee "$OUT/suite.log"
else
    exec "$python" "$here/suite.py"
fi
