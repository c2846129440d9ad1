"""The real-GPU validation suite (issue #8), run by tests/gpu/run.sh: every check prints a
CHECK line as it is decided, then a table; validation.json goes to $OUT when OUT is set. Exits
1 if any check failed, 2 on a usage error.

Environment (run.sh sets the first three):
  GPUMEMPROF_SHIM, GPUMEMPROF_ANALYZER   libgpumemprof.so and the gpumemprof analyzer
  GPUMEMPROF_CUDARC_CLIENT               the cudarc client binary (its checks SKIP without)
  GPUMEMPROF_GPU_SUITE_SIM=1             the simulated mode: no GPU; the CUDA C programs are
                                         built by gcc against tests/sim's runtime, found in
                                         GPUMEMPROF_SIM_DIR; frameworks SKIP; the comparison
                                         rules run on tests/gpu/canned/
  GPUMEMPROF_GPU_SUITE_WORK              scratch folder for builds, traces and reports
                                         (default: a new folder under /tmp)
  GPUMEMPROF_GPU_SUITE_ONLY              comma list of groups to run (torchjob, cuda, cudarc, torch,
                                         jax, cupy, canned); default all
  GPUMEMPROF_GPU_SUITE_TORCH_MODES       comma list of the PyTorch allocator modes to run (default,
                                         expandable, async, nocache); default all
  GPUMEMPROF_GPU_SUITE_MAX_OVERHEAD_PCT  the step-time overhead budget per PyTorch mode (10)
  GPUMEMPROF_GPU_SUITE_STEPS             timed PyTorch training steps per run (300)
  GPUMEMPROF_GPU_SUITE_PAIRS             runs without and with the shim, in turn, per
                                         PyTorch mode for the overhead check (3)
  GPUMEMPROF_GPU_SUITE_PYTHON            the Python with the frameworks (default: this one)
"""

import sys

sys.dont_write_bytecode = True  # never leave __pycache__ in the source tree

import os  # noqa: E402
import tempfile  # noqa: E402

import canned  # noqa: E402
import frameworks  # noqa: E402
import native  # noqa: E402
import torch_job  # noqa: E402
from harness import Suite, Tools, fail, log, problem  # noqa: E402

GROUPS = ("torchjob", "cuda", "cudarc", "torch", "jax", "cupy", "canned")


def main():
    sim = os.environ.get("GPUMEMPROF_GPU_SUITE_SIM") == "1"
    shim = os.environ.get("GPUMEMPROF_SHIM")
    analyzer = os.environ.get("GPUMEMPROF_ANALYZER")
    sim_dir = os.environ.get("GPUMEMPROF_SIM_DIR") if sim else None
    missing = [p for p in (shim, analyzer) + ((sim_dir,) if sim else ()) if not p
               or not os.path.exists(p)]
    if missing:
        print("suite.py: set GPUMEMPROF_SHIM, GPUMEMPROF_ANALYZER (and GPUMEMPROF_SIM_DIR in "
              "the simulated mode) to existing paths; run it through tests/gpu/run.sh",
              file=sys.stderr)
        return 2
    only = [g for g in os.environ.get("GPUMEMPROF_GPU_SUITE_ONLY", "").split(",") if g]
    unknown = [g for g in only if g not in GROUPS]
    if unknown:
        print("suite.py: unknown group(s) %s; known: %s" % (unknown, ", ".join(GROUPS)),
              file=sys.stderr)
        return 2
    known = [m for m, _ in frameworks.TORCH_MODES]
    unknown = [m for m in frameworks.asked_torch_modes() if m not in known]
    if unknown:
        print("suite.py: unknown PyTorch mode(s) %s; known: %s" % (unknown, ", ".join(known)),
              file=sys.stderr)
        return 2
    work = os.environ.get("GPUMEMPROF_GPU_SUITE_WORK") or tempfile.mkdtemp(
        prefix="gpumemprof-gpu-suite.")
    os.makedirs(work, exist_ok=True)
    budget = float(os.environ.get("GPUMEMPROF_GPU_SUITE_MAX_OVERHEAD_PCT", "10"))
    out = os.environ.get("OUT")
    tools = Tools(os.path.abspath(shim), os.path.abspath(analyzer), os.path.abspath(work),
                  os.path.abspath(sim_dir) if sim_dir else None)
    suite = Suite(os.path.join(out, "validation.json") if out else None)
    suite.section("mode", "simulated" if sim else "gpu")
    log("mode %s, shim %s, analyzer %s, scratch %s" % (
        "simulated" if sim else "gpu", tools.shim, tools.analyzer, tools.work))

    client = os.environ.get("GPUMEMPROF_CUDARC_CLIENT")
    groups = (
        ("torchjob", "PyTorch training job of issue #30 (tests/programs/torch_train.py)",
         lambda: torch_job.torch_job_checks(tools, frameworks.probe)),
        ("cuda", "CUDA C programs (leak, out-of-memory), static and shared cudart",
         lambda: native.cuda_checks(tools)),
        ("cudarc", "cudarc client", lambda: native.cudarc_checks(tools, client)),
        ("torch", "PyTorch", lambda: frameworks.torch_checks(tools, suite, budget)),
        ("jax", "JAX", lambda: frameworks.jax_checks(tools)),
        ("cupy", "CuPy", lambda: frameworks.cupy_checks(tools)),
        ("canned", "comparison rules on canned inputs (tests/gpu/canned)",
         canned.canned_checks),
    )
    for group, title, checks in groups:
        if (only and group not in only) or (group == "canned" and not sim):
            continue
        log(title)
        try:
            suite.extend(checks())
        except Exception as e:  # a bug of the suite fails its group, the others still run
            suite.add(fail(group + "_suite", problem(e)))
    if not sim:
        env = frameworks.environment()
        env["frameworks"] = frameworks.versions(tools)
        suite.section("environment", env)
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
