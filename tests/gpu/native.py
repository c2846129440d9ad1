"""The native checks: the CUDA C programs of tests/gpu/cuda (a known leak and a forced
out-of-memory), each built twice, and the cudarc client (tests/gpu/cudarc_client).

On a GPU, nvcc builds each program once with its default static cudart, which exports no
cuda* function (only the driver path can see it), and once with `-cudart shared`. In the
simulated mode gcc builds the same sources as C against the simulated runtime: "shared" links
tests/sim's libcudart.so.12, "static" compiles tests/sim/cudart_sim.c into the program, so its
runtime calls bind inside the executable and reach the simulated driver through dlopen and
the resolver exactly as the static cudart does.

Expected values come from what each program prints about itself and from the marker lines of
its source; measured values from `gpumemprof leaks|oom|summary|info --json`.
"""

import os
import shutil

import extract
from harness import equal, fail, keyvals, marker_line, problem, skip, tail

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILDS = ("static", "shared")
# The allocation API the trace names for each build's cudaMalloc: the static cudart's own
# cudaMalloc is invisible, its driver call is what the shim records.
MALLOC_API = {"static": "cuMemAlloc_v2", "shared": "cudaMalloc"}


def find_nvcc():
    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def build(tools, source, build_kind):
    """Builds tests/gpu/cuda/<source>.cu; (path, None) or (None, why not)."""
    src = os.path.join(HERE, "cuda", source + ".cu")
    out = tools.path("%s-%s" % (source, build_kind))
    if tools.sim_dir:
        cc = os.environ.get("CC", "cc")
        argv = [cc, "-g", "-O0", "-fno-omit-frame-pointer", "-pthread", "-Wall", "-Wextra",
                "-I", os.path.join(REPO, "tests/sim/include"), "-x", "c", src]
        if build_kind == "static":
            argv += [os.path.join(REPO, "tests/sim/cudart_sim.c"), "-ldl"]
        else:
            argv += ["-L" + tools.sim_dir, "-lcudart"]
        argv += ["-Wl,-rpath," + tools.sim_dir, "-o", out]
    else:
        nvcc = find_nvcc()
        if not nvcc:
            return None, "no nvcc on PATH or in /usr/local/cuda/bin"
        # nvcc sets no run path: the shared build finds the toolkit's libcudart through one.
        lib = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "lib64")
        argv = [nvcc, "-g", "-O0", "-Xcompiler", "-fno-omit-frame-pointer",
                "-cudart", build_kind, "-Xlinker", "-rpath=" + lib, "-o", out, src]
    proc = tools.run(argv, timeout=300)
    if proc.returncode != 0:
        return None, "build failed (%s): %s" % (" ".join(argv[:2]), tail(proc.stderr))
    return out, None


def sites(program_out, source):
    """[(line, bytes, count)] from the program's `site:MARKER=BYTES/COUNT` lines."""
    facts = []
    path = os.path.join(HERE, "cuda", source + ".cu")
    for key, value in sorted(program_out.items()):
        if key.startswith("site:"):
            bytes_, count = value.split("/")
            facts.append((marker_line(path, key[5:]), int(bytes_), int(count)))
    return facts


def leak_checks(tools, binary, build_kind):
    name = "cuda_%s_leak_" % build_kind
    trace = tools.path("leak-%s.trace" % build_kind)
    plain = tools.run([binary])
    run = tools.run([binary], trace=trace)
    rows = [equal(name + "unchanged", "rc=%d,%s" % (plain.returncode, digest(plain.stdout)),
                  "rc=%d,%s" % (run.returncode, digest(run.stdout)),
                  "exit status and output without and with the shim")]
    if run.returncode != 0 or not os.path.exists(trace):
        return rows + [fail(name + "run", "rc=%d: %s" % (run.returncode, tail(run.stderr)))]
    out = keyvals(run.stdout)
    leaks = tools.report("leaks", trace, "--top", "0", "--frames", "0")
    summary = tools.report("summary", trace)
    info = tools.report("info", trace)
    calls = out["driver_calls" if build_kind == "static" else "runtime_calls"]
    rows.append(equal(name + "apis", calls, extract.apis_text(info),
                      "allocations/frees per API (info --json)"))
    rows.append(equal(name + "total", "%s/%s" % (out["leaked_bytes"], out["leaked_count"]),
                      "%d/%d" % (leaks["total_bytes"], leaks["total_count"]),
                      "bytes/allocations live at exit"))
    rows.append(equal(name + "sites", extract.expected_by_line("leak.cu", sites(out, "leak")),
                      extract.by_line(leaks["groups"], "leak.cu"),
                      "leaked bytes/allocations per marked line"))
    size, count = (int(v) for v in out["size_probe"].split("/"))
    found, _ = extract.count_of_size(leaks["groups"], size)
    rows.append(equal(name + "by_size", "%dx%d" % (count, size), "%dx%d" % (found, size),
                      "leak groups made only of allocations of one size"))
    rows.append(equal(name + "peak", out["peak_bytes"],
                      extract.device_row(summary)["peak_bytes"], "device 0 peak"))
    return rows


def oom_checks(tools, binary, build_kind):
    name = "cuda_%s_oom_" % build_kind
    trace = tools.path("oom-%s.trace" % build_kind)
    plain = keyvals(tools.run([binary]).stdout)
    run = tools.run([binary], trace=trace)
    out = keyvals(run.stdout)
    rows = [equal(name + "unchanged", "rc=1,oom_rc=%s" % plain.get("oom_rc"),
                  "rc=%d,oom_rc=%s" % (run.returncode, out.get("oom_rc")),
                  "the program sees the same failure with the shim")]
    if "request_bytes" not in out or not os.path.exists(trace):
        return rows + [fail(name + "run", "rc=%d: %s" % (run.returncode, tail(run.stderr)))]
    report = extract.last_failure(tools, trace)
    if report is None:
        return rows + [fail(name + "request", "no out-of-memory failure in the trace")]
    failure, live = report["failure"], report["live"]
    rows.append(equal(name + "request", "%s:%s" % (MALLOC_API[build_kind], out["request_bytes"]),
                      "%s:%d" % (failure["api"], failure["size"]), "API and bytes asked"))
    src = os.path.join(HERE, "cuda", "oom.cu")
    frame = extract.first_frame_in(failure["frames"], "oom.cu")
    rows.append(equal(name + "request_site",
                      "oom.cu:%d" % marker_line(src, "GPUMEMPROF-GPU-OOM-REQUEST"),
                      "oom.cu:%s" % (frame["line"] if frame else None),
                      "the request's innermost frame in the program"))
    rows.append(equal(name + "live", "%s/%s" % (out["live_bytes"], out["live_count"]),
                      "%d/%d" % (live["bytes"], live["count"]),
                      "bytes/allocations live at the failure"))
    rows.append(equal(name + "sites", extract.expected_by_line("oom.cu", sites(out, "oom")),
                      extract.by_line(live["sites"], "oom.cu"),
                      "live bytes/allocations per marked line"))
    rows.append(equal(name + "free", out["free_after"], failure["mem_free_bytes"],
                      "free memory the program read right after the failure"))
    return rows


def cuda_checks(tools):
    rows = []
    for build_kind in BUILDS:
        for source, checks in (("leak", leak_checks), ("oom", oom_checks)):
            binary, why = build(tools, source, build_kind)
            if not binary:
                rows.append(skip("cuda_%s_%s" % (build_kind, source), why))
                continue
            try:
                rows.extend(checks(tools, binary, build_kind))
            except Exception as e:  # one program's surprise must not stop the others
                rows.append(fail("cuda_%s_%s" % (build_kind, source), problem(e)))
    return rows


def cudarc_checks(tools, client):
    """The Rust client: cudarc with dynamic loading reaches every driver function through
    dlsym on its own libcuda handle."""
    if not client or not os.access(client, os.X_OK):
        return [skip("cudarc", "no cudarc client binary (%s): build it with "
                     "tests/gpu/prepare.sh and carry target/gpu-suite" % client)]
    trace = tools.path("cudarc.trace")
    env = {"RUST_BACKTRACE": "0"}  # a panic's message, not a backtrace, ends its stderr
    if tools.sim_dir:
        env["LD_LIBRARY_PATH"] = tools.sim_dir
    run = tools.run([client], env=env, trace=trace)
    out = keyvals(run.stdout)
    if "request_bytes" not in out or not os.path.exists(trace):
        return [fail("cudarc_run", "rc=%d: %s" % (run.returncode, tail(run.stderr)))]
    src = os.path.join(HERE, "cudarc_client", "src", "main.rs")
    try:
        info = tools.report("info", trace)
        leaks = tools.report("leaks", trace, "--top", "0", "--frames", "0")
        report = extract.last_failure(tools, trace)
    except Exception as e:
        return [fail("cudarc_run", problem(e))]
    facts = []
    for key, value in sorted(out.items()):
        if key.startswith("site:"):
            bytes_, count = value.split("/")
            facts.append((marker_line(src, key[5:]), int(bytes_), int(count)))
    rows = [
        equal("cudarc_apis", out["driver_calls"], extract.apis_text(info),
              "allocations/frees per API (info --json)"),
        equal("cudarc_leak_total", "%s/%s" % (out["leaked_bytes"], out["leaked_count"]),
              "%d/%d" % (leaks["total_bytes"], leaks["total_count"]),
              "bytes/allocations live at exit"),
        equal("cudarc_leak_sites", extract.expected_by_line("main.rs", facts),
              extract.by_line(leaks["groups"], "main.rs"),
              "leaked bytes/allocations per marked line of the client"),
    ]
    if report is None:
        return rows + [fail("cudarc_oom", "no out-of-memory failure in the trace")]
    failure = report["failure"]
    rows.append(equal("cudarc_oom", "cuMemAlloc_v2:%s" % out["request_bytes"],
                      "%s:%d" % (failure["api"], failure["size"]), "API and bytes asked"))
    rows.append(equal("cudarc_oom_free", out["free_after"], failure["mem_free_bytes"],
                      "free memory the client read right after the failure"))
    return rows


def digest(text):
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()[:12]
