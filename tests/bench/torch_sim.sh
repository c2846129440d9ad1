# Sourced by the benchmarks that run the torch package the tests install (torch_step.sh,
# torch_step_cg.sh, torch.sh, whatif.sh): sets `sim`, the environment that runs it on the
# simulated GPU with SIM_CAPACITY bytes of memory (default 1 GiB), and `site` and `lib`, its
# site-packages and the folder of its stand-in CUDA libraries; `sim` is empty with REAL_GPU=1
# (the python3 on PATH, its own torch and a real GPU). Needs `root`, the repository's root.
if [ "${REAL_GPU:-0}" = 1 ]; then
  sim=()
else
  site=$(ls -d "$root"/target/*/torch-package/site-packages | head -1)
  lib=$(ls -td "$root"/target/*/torch-package/build.* | head -1)
  sim=(PYTHONPATH="$site" LD_LIBRARY_PATH="$lib" SIMCUDA_CAPACITY="${SIM_CAPACITY:-1073741824}")
fi
