#!/usr/bin/env bash
# Builds what the real-GPU suite carries to a machine without a Rust toolchain (the device
# tool's GPU machines have none, and no network): target/gpu-suite/ with
#   libgpumemprof.so, gpumemprof   the release shim and analyzer, debug info stripped
#                                  (with it they are over 60 MiB, the tool carries 64 MiB
#                                  in all; neither needs its own debug info to do its job)
#   gpumemprof-cudarc-client       the cudarc client, with its line tables
# Run it in the repository where cargo works (it needs crates.io once for cudarc), then call
# the device tool as tests/gpu/README.md shows.
set -eu
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out="$repo/target/gpu-suite"
cd "$repo"
cargo build --release -p gpumemprof-shim -p gpumemprof-analyzer
CARGO_TARGET_DIR="$repo/target/gpu-suite-cudarc" cargo build --release --locked \
    --manifest-path "$here/cudarc_client/Cargo.toml"
mkdir -p "$out"
objcopy --strip-debug target/release/libgpumemprof.so "$out/libgpumemprof.so"
objcopy --strip-debug target/release/gpumemprof "$out/gpumemprof"
cp target/gpu-suite-cudarc/release/gpumemprof-cudarc-client "$out/"
du -ab "$out" | sort -n
total=$(du -sb "$out" | cut -f1)
if [ "$total" -gt $((48 << 20)) ]; then
    echo "prepare.sh: $out holds $total bytes; with the source tree it must stay under 64 MiB" >&2
    exit 1
fi
