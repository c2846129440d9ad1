# Sourced by the benchmarks of the real PyTorch step (torch_step.sh, torch_step_cg.sh): sets
# `sim`, the environment that runs the torch package the tests install on the simulated GPU
# with 1 GiB of memory; empty with REAL_GPU=1 (the python3 on PATH, its own torch and a real
# GPU). Needs `root`, the repository's root.
if [ "${REAL_GPU:-0}" = 1 ]; then
  sim=()
else
  site=$(ls -d "$root"/target/*/torch-package/site-packages | head -1)
  lib=$(ls -td "$root"/target/*/torch-package/build.* | head -1)
  sim=(PYTHONPATH="$site" LD_LIBRARY_PATH="$lib" SIMCUDA_CAPACITY=1073741824)
fi
