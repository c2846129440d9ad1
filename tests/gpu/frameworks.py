"""The framework checks: PyTorch in its four allocator modes, memory PyTorch cannot see
(NVML gap, NCCL), JAX in two modes, CuPy with and without its pool. Each runs a script of
tests/gpu in its own process (with the shim, and for PyTorch's training also without),
reads the analyzer's JSON on the trace and hands both to compare.py.

A framework that cannot be imported, or sees no GPU, makes its checks SKIP with the reason;
in the simulated mode every framework check SKIPs (the frameworks need a real driver), saying
whether the framework could have been imported.
"""

import json
import os
import subprocess
import sys

import compare
import extract
import native
from harness import fail, log, marker_line, problem, skip, tail

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("GPUMEMPROF_GPU_SUITE_PYTHON") or sys.executable

TORCH_MODES = (
    ("default", {}),
    ("expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("async", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    ("nocache", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
)
# Every PyTorch run: the cuBLAS workspace setting deterministic matmuls need, and none of the
# caller's allocator settings (None removes a variable: PyTorch reads
# PYTORCH_NO_CUDA_MEMORY_CACHING as set whatever its value).
TORCH_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTORCH_CUDA_ALLOC_CONF": None,
             "PYTORCH_ALLOC_CONF": None, "PYTORCH_NO_CUDA_MEMORY_CACHING": None,
             "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
             "GPU_SUITE_STEPS": os.environ.get("GPUMEMPROF_GPU_SUITE_STEPS", "300")}
JAX_MODES = (
    ("platform", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
                  "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    ("prealloc", {"XLA_PYTHON_CLIENT_ALLOCATOR": None, "XLA_PYTHON_CLIENT_PREALLOCATE": None,
                  "XLA_PYTHON_CLIENT_MEM_FRACTION": None}),
)
PROBES = {
    "torch": "import torch; print(torch.__version__, torch.cuda.is_available())",
    "jax": "import jax; print(jax.__version__, any(d.platform == 'gpu' for d in jax.devices()))",
    "cupy": "import cupy; print(cupy.__version__, cupy.cuda.runtime.getDeviceCount() > 0)",
}


_probed = {}


def probe(tools, framework):
    """(version, None) when the framework imports and sees a GPU, else (version or None,
    why not). Asked once per framework and run."""
    if framework not in _probed:
        _probed[framework] = _probe(tools, framework)
    return _probed[framework]


def _probe(tools, framework):
    proc = tools.run([PYTHON, "-c", PROBES[framework]], env={"PYTHONDONTWRITEBYTECODE": "1"},
                     timeout=180)
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) != 2:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, "%s cannot import %s (%s)" % (PYTHON, framework, last)
    if tools.sim_dir:
        return words[0], "simulated mode: %s %s needs a real GPU" % (framework, words[0])
    if words[1] != "True":
        return words[0], "%s %s sees no GPU" % (framework, words[0])
    return words[0], None


def run_script(tools, script, tag, env, profiled=True, args=(), timeout=420,
               needs_trace=True):
    """Runs tests/gpu/<script>; (report dict, trace path or None, None) or (None, None, why).
    The shim writes no trace for a process that allocated nothing: with `needs_trace` False
    that is no failure, and the trace comes back as None."""
    report_path = tools.path(tag + ".json")
    if os.path.exists(report_path):
        os.remove(report_path)
    trace = tools.path(tag + ".trace") if profiled else None
    full = dict(env, GPU_SUITE_REPORT=report_path)
    proc = tools.run([PYTHON, os.path.join(HERE, script)] + list(args), env=full, trace=trace,
                     timeout=timeout)
    if proc.returncode != 0 or not os.path.exists(report_path):
        return None, None, "%s %s exited %d: %s" % (script, tag, proc.returncode,
                                                    tail(proc.stderr))
    with open(report_path) as f:
        report = json.load(f)
    if profiled and not os.path.exists(trace):
        if needs_trace:
            return None, None, "%s %s wrote no trace" % (script, tag)
        trace = None
    return report, trace, None


def split_reports(tools, trace):
    """Leak groups and peak sites with every frame, and the summary. The rules that split
    memory by library read what the hooks saw the process ask CUDA for (`--level segments`,
    every native frame: `--native`); the leak of known size is counted in tensors where the
    trace has them (PyTorch's caching allocator serves it from a cached segment)."""
    every = ("--top", "0", "--frames", "0")
    leaks = tools.report("leaks", trace, *every)
    segment_leaks = tools.report("leaks", trace, "--level", "segments", "--native", *every)
    peak = tools.report("peak", trace, "--level", "segments", "--native", *every)
    summary = tools.report("summary", trace)
    return leaks, segment_leaks, peak, summary


def torch_measured(tools, trace, leak):
    leaks, segment_leaks, peak, summary = split_reports(tools, trace)
    groups = segment_leaks["groups"]
    live_torch, live_other = extract.split_by_module(groups, compare.TORCH_LIBRARY)
    peak_torch, _ = extract.split_by_module(extract.peak_sites(peak), compare.TORCH_LIBRARY)
    measured = {"live_torch": live_torch, "live_other": live_other, "peak_torch": peak_torch,
                "tensors": leaks.get("level") == "tensors"}
    if leak:
        size = leak["bytes_each"]
        if measured["tensors"]:
            # A tensor is its allocator block: PyTorch does not split off a remainder under
            # 1 MiB (kSmallSize), so a block may be larger than the request by less.
            def leaked(g):
                return extract.of_blocks_of(g, size, compare.MIB)
        else:
            def leaked(g):
                return g["count"] and g["bytes"] == g["count"] * size
        measured["leak_count"] = sum(g["count"] for g in leaks["groups"] if leaked(g))
        measured["leak_site"] = extract.python_site(leaks["groups"], "torch_train.py", leaked)
    nvml = [n for n in summary.get("nvml", []) if n["device"] == 0]
    if nvml:
        measured.update(last_used=nvml[0]["last_used_bytes"],
                        untracked_last=nvml[0]["untracked_at_last_bytes"])
    nccl, _ = extract.split_by_module(groups, "libnccl")
    measured["live_nccl"] = nccl
    return measured


def oom_measured(tools, trace):
    """The failure PyTorch's exception describes. Its caching allocator's refusal (a record
    of its own, kind "tensor") carries the failed driver calls before it (`attempts`: what
    the hooks saw asked of CUDA) and PyTorch's own figures at the refusal (`pytorch`)."""
    report = extract.last_failure(tools, trace)
    if report is None:
        return None
    failure, live = report["failure"], report["live"]
    api, size, live_bytes = failure["api"], failure["size"], live["bytes"]
    attempts = failure.get("attempts") or {}
    if failure.get("kind") == "tensor" and attempts.get("api"):
        api, size = attempts["api"], attempts["size"]
        live_bytes = (report.get("pytorch") or {}).get("reserved_bytes", live_bytes)
    measured = {"api": api, "size": size, "mem_free": failure["mem_free_bytes"] or 0,
                "live_bytes": live_bytes, "live_count": live["count"]}
    message = (report.get("pytorch") or {}).get("message")
    if message is not None:
        measured["message"] = message
    return measured


def asked_torch_modes():
    """The names in GPUMEMPROF_GPU_SUITE_TORCH_MODES (a comma list; suite.py refuses a name
    that is not one of TORCH_MODES')."""
    return [m for m in os.environ.get("GPUMEMPROF_GPU_SUITE_TORCH_MODES", "").split(",") if m]


def torch_modes():
    """The PyTorch allocator modes to run: those asked for, else all of them."""
    only = asked_torch_modes()
    return [(m, env) for m, env in TORCH_MODES if not only or m in only]


def time_pairs(tools, mode, env, plain, prof):
    """More runs without and with the shim, in turn (the order swapped each pair, so a
    drift of the machine falls on both), for the step-time overhead: the median step of one
    run moved by 30% from one process to the next on an H100 (2026-11-26), more than the
    shim's cost. Adds each side's per-run medians (ms) to `plain` and `prof` as
    `run_medians_ms`; returns (why the plain run failed, why the profiled one failed)."""
    pairs = int(os.environ.get("GPUMEMPROF_GPU_SUITE_PAIRS", "3"))
    plain["run_medians_ms"] = [compare.median_ms(plain["step_seconds"])]
    prof["run_medians_ms"] = [compare.median_ms(prof["step_seconds"])]
    for i in range(1, pairs):
        order = ((True, prof), (False, plain)) if i % 2 else ((False, plain), (True, prof))
        for profiled, into in order:
            tag = "torch-%s-%s%d" % (mode, "timed" if profiled else "plain", i)
            report, _, why = run_script(tools, "torch_train.py", tag, env, profiled=profiled)
            if why:
                return (None, why) if profiled else (why, None)
            into["run_medians_ms"].append(compare.median_ms(report["step_seconds"]))
    return None, None


def torch_checks(tools, suite, budget_pct):
    """The PyTorch checks, yielded as each is decided (a run cut short by its time limit
    still prints those); the overhead table's rows go to `suite` mode by mode."""
    version, why = probe(tools, "torch")
    modes = torch_modes()
    names = ["torch_%s_%s" % (m, c) for m, _ in modes
             for c in ("train", "oom")] + ["torch_nvml", "torch_nccl_buffers"]
    if why:
        yield from [skip(n, why) for n in names]
        return
    leak_line = "torch_train.py:%d" % marker_line(os.path.join(HERE, "torch_train.py"),
                                                 "GPUMEMPROF-TORCH-LEAK")
    overhead = []
    for mode, mode_env in modes:
        env = dict(TORCH_ENV, **mode_env)
        log("PyTorch %s, mode %s: training without and with the shim" % (version, mode))
        plain, _, why_plain = run_script(tools, "torch_train.py", "torch-%s-plain" % mode, env,
                                         profiled=False)
        prof, trace, why_prof = run_script(tools, "torch_train.py", "torch-%s" % mode, env)
        if not (why_plain or why_prof):
            why_plain, why_prof = time_pairs(tools, mode, env, plain, prof)
        if why_plain or why_prof:
            yield fail("torch_%s_train" % mode, why_plain or why_prof)
        else:
            try:
                measured = torch_measured(tools, trace, prof["leak"])
                checks, row = compare.torch_train("torch_", mode, plain, prof, measured,
                                                  leak_line, budget_pct)
                yield from checks
                overhead.append(row)
            except Exception as e:  # one mode's surprise must not stop the others
                yield fail("torch_%s_train" % mode, problem(e))
        log("PyTorch mode %s: forced out-of-memory" % mode)
        report, trace, why_oom = run_script(tools, "torch_oom.py", "torch-%s-oom" % mode, env)
        if why_oom:
            yield fail("torch_%s_oom" % mode, why_oom)
        else:
            try:
                yield from (compare.torch_oom("torch_", mode, report,
                                              oom_measured(tools, trace)))
            except Exception as e:
                yield fail("torch_%s_oom" % mode, problem(e))
        suite.section("overhead", overhead)
    # NVML sampled every 50 ms, so the last sample is of the steady state; NCCL's bootstrap
    # on the loopback interface (the machine may have no other).
    gap_env = dict(TORCH_ENV, GPUMEMPROF_NVML_MS="50",
                   NCCL_SOCKET_IFNAME=os.environ.get("NCCL_SOCKET_IFNAME", "lo"))
    for part, check in (("gap", compare.torch_gap), ("nccl", compare.torch_nccl)):
        log("PyTorch: %s" % part)
        # Without NCCL the nccl part allocates nothing, so it may leave no trace.
        report, trace, why_part = run_script(tools, "torch_gap.py", "torch-" + part, gap_env,
                                             args=[part], timeout=300,
                                             needs_trace=part == "gap")
        if why_part:
            yield fail("torch_" + part, why_part)
            continue
        try:
            measured = torch_measured(tools, trace, None) if trace else {"live_nccl": 0}
            yield from check("torch_", report, measured)
        except Exception as e:
            yield fail("torch_" + part, problem(e))


# The driver's VMM allocation granularity on NVIDIA GPUs (cuMemGetAllocationGranularity).
VMM_GRANULARITY = 2 << 20


def jax_checks(tools):
    version, why = probe(tools, "jax")
    if why:
        return [skip("jax_%s" % m, why) for m, _ in JAX_MODES]
    rows = []
    leak_line = marker_line(os.path.join(HERE, "jax_alloc.py"), "GPUMEMPROF-JAX-LEAK")
    for mode, env in JAX_MODES:
        log("JAX %s, mode %s" % (version, mode))
        report, trace, why_run = run_script(tools, "jax_alloc.py", "jax-" + mode,
                                            dict(env, PYTHONDONTWRITEBYTECODE="1"))
        if why_run or report.get("error"):
            rows.append(fail("jax_" + mode, why_run or report["error"]))
            continue
        try:
            leaks = tools.report("leaks", trace, "--top", "0", "--frames", "0")
            # JAX 0.11's platform allocator maps each buffer with the driver's VMM calls,
            # rounded up to their 2 MiB granularity (seen on an H100: 4 MiB for 3 MiB + 12 KiB).
            # The marked line only: JAX may free an array it dropped after the program's
            # last line (seen: one of the 4 MiB arrays the script drops, live at exit).
            count = sum(g["count"] for g in leaks["groups"] if g["kind"] == "device"
                        and extract.line_of(g, "jax_alloc.py") == leak_line
                        and extract.of_blocks_of(g, report["bytes_each"], VMM_GRANULARITY))
            largest = max([g["bytes"] for g in leaks["groups"] if g["count"] == 1] or [0])
            measured = {"leak_count": count, "largest_live": largest}
            rows.extend(compare.jax_rows("jax_", mode, report, measured))
        except Exception as e:
            rows.append(fail("jax_" + mode, problem(e)))
    return rows


# CuPy's memory pool rounds each request up to a multiple of 512 bytes.
CUPY_ROUNDING = 512


def cupy_checks(tools):
    version, why = probe(tools, "cupy")
    if why:
        return [skip("cupy_%s" % m, why) for m in ("pool", "nopool")]
    rows = []
    leak_line = marker_line(os.path.join(HERE, "cupy_alloc.py"), "GPUMEMPROF-CUPY-LEAK")
    for mode in ("pool", "nopool"):
        log("CuPy %s, mode %s" % (version, mode))
        report, trace, why_run = run_script(tools, "cupy_alloc.py", "cupy-" + mode,
                                            {"GPU_SUITE_MODE": mode,
                                             "PYTHONDONTWRITEBYTECODE": "1"})
        if why_run:
            rows.append(fail("cupy_" + mode, why_run))
            continue
        try:
            leaks = tools.report("leaks", trace, "--top", "0", "--frames", "0")
            summary = tools.report("summary", trace)
            # The arrays made at the marked line, in blocks of their size: CuPy rounds a
            # request up to 512 bytes, and the kept size is a multiple of 512.
            count = sum(g["count"] for g in leaks["groups"] if g["kind"] == "device"
                        and extract.line_of(g, "cupy_alloc.py") == leak_line
                        and extract.of_blocks_of(g, report["bytes_each"], CUPY_ROUNDING))
            measured = {"leak_count": count,
                        "live": extract.device_row(summary)["live_bytes_at_end"]}
            rows.extend(compare.cupy_rows("cupy_", mode, report, measured))
        except Exception as e:
            rows.append(fail("cupy_" + mode, problem(e)))
    return rows


def versions(tools):
    """Framework versions for validation.json (None where it does not import)."""
    found = {}
    for framework in PROBES:
        version, _ = probe(tools, framework) if not tools.sim_dir else (None, None)
        found[framework] = version
    return found


def environment():
    """Device, driver and CUDA versions as nvidia-smi and nvcc report them."""
    env = {"python": sys.version.split()[0]}
    for key, argv in (
        ("gpu", ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                 "--format=csv,noheader"]),
        ("nvcc", [native.find_nvcc() or "nvcc", "--version"]),
    ):
        try:
            out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True, timeout=60).stdout.strip()
            env[key] = out.splitlines()[-1] if key == "nvcc" and out else out
        except OSError as e:
            env[key] = "not available (%s)" % e
    return env
