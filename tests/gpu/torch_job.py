"""Issue #30's training job on a real GPU (group "torchjob"): tests/programs/torch_train.py, the
program the CI runs on the simulated GPU (tests/e2e_torch_train.rs), run under the shim with
PyTorch's own recorder on, and gpumemprof's figures held to PyTorch's own, as the CI holds them:

  torchjob_step<i>_{allocated,tensors,reserved,segments}  our torch-snapshot export cut at the
      time of step i's line, against that line's torch.cuda.memory_stats()
  torchjob_snapshot_layout   our export at the end of the steps against PyTorch's _dump_snapshot
      of the same run: the same segments at the same addresses, blocks of the same sizes and states
  torchjob_{allocated,reserved}_peak   summary's allocator peaks against memory_stats()'s
  torchjob_leak_*            the activations the loop keeps (one per step, 64x128 floats) listed
      by `leaks` at a normal exit, freed only by the interpreter's teardown, at the user's lines
  torchjob_kinds_*           parameters, optimizer state and gradients at the peak against what
      the program measured from its own tensors; workspaces against the sites named as such;
      the kinds' total against the allocated peak
  torchjob_backward_site, torchjob_cublas_workspace   the backward pass's tensors at their
      autograd node, cuBLAS's workspace by name

The torch-internal line numbers of the CI test (torch/nn/modules/linear.py:134, ...) belong to
the pinned torch there; here only the user's own lines are compared, so any torch version does.
"""

import json
import os
import subprocess

from harness import equal, fail, log, marker_line, problem, skip, tail

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROGRAM = os.path.join("tests", "programs", "torch_train.py")
PYTHON = os.environ.get("GPUMEMPROF_GPU_SUITE_PYTHON", "python3")
STEPS = 4
# The model of torch_train.py: a batch of 64 x 256 through Linear layers 256 -> 512 -> 512 -> 128.
BATCH, IN, HIDDEN, OUT = 64, 256, 512, 128


def block(elements):
    """A float tensor as the allocator holds it: its block, a multiple of 512 bytes."""
    return -(-elements * 4 // 512) * 512


def frames(group):
    """A report's frames as `function at file:line` (as tests/e2e_torch_train.rs reads them)."""
    out = []
    for f in group["frames"]:
        if f.get("function") and f.get("file") and f.get("line"):
            out.append("%s at %s:%d" % (f["function"], f["file"], f["line"]))
        else:
            out.append(f.get("function") or json.dumps(f))
    return out


def layout(snapshot):
    """A snapshot's segments as sorted (address, total size, [(block size, state)])."""
    return sorted((s["address"], s["total_size"], [(b["size"], b["state"]) for b in s["blocks"]])
                  for s in snapshot["segments"])


def read_pickle(path):
    """A snapshot pickle as plain data (read by a separate python3: no torch needed)."""
    code = "import json,pickle,sys;print(json.dumps(pickle.load(open(sys.argv[1],'rb')),default=str))"
    proc = subprocess.run([PYTHON, "-c", code, path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError("reading %s: %s" % (path, tail(proc.stderr)))
    return json.loads(proc.stdout)


def run_job(tools, work):
    """torch_train.py under the shim with PyTorch's recorder on: (lines, trace, pickle)."""
    trace = os.path.join(work, "train.trace")
    theirs = os.path.join(work, "pytorch.pickle")
    proc = tools.run([PYTHON, PROGRAM, str(STEPS), "--snapshot", theirs], trace=trace,
                     cwd=REPO, timeout=300)
    with open(os.path.join(work, "stdout.jsonl"), "w") as f:
        f.write(proc.stdout)
    with open(os.path.join(work, "stderr.txt"), "w") as f:
        f.write(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError("torch_train.py exited %d: %s" % (proc.returncode, tail(proc.stderr)))
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    return lines, trace, theirs


def seconds_into(tools, trace, line):
    """A line's CLOCK_MONOTONIC time as seconds since the trace started (for --to)."""
    start = tools.report("info", trace)["header"]["start_monotonic_ns"]
    since = line["time_ns"] - start
    return "%d.%09d" % (since // 10**9, since % 10**9)


def our_layout_at(tools, trace, seconds, out):
    proc = subprocess.run([tools.analyzer, "export", "--format", "torch-snapshot", "-q", "-f",
                           "--to", seconds, trace, "-o", out], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError("export --to %s exited %d: %s" % (seconds, proc.returncode,
                                                            tail(proc.stderr)))
    return layout(read_pickle(out))


def step_checks(tools, trace, steps, work):
    checks = []
    for i, line in enumerate(steps):
        ours = our_layout_at(tools, trace, seconds_into(tools, trace, line),
                             os.path.join(work, "step%d.pickle" % i))
        blocks = [b for s in ours for b in s[2] if b[1] == "active_allocated"]
        stats = line["stats"]
        name = "torchjob_step%d_" % i
        checks += [
            equal(name + "allocated", stats["allocated_bytes.all.current"],
                  sum(b[0] for b in blocks), "memory_stats() allocated_bytes.all.current"),
            equal(name + "tensors", stats["allocation.all.current"], len(blocks),
                  "memory_stats() allocation.all.current"),
            equal(name + "reserved", stats["reserved_bytes.all.current"],
                  sum(s[1] for s in ours), "memory_stats() reserved_bytes.all.current"),
            equal(name + "segments", stats["segment.all.current"], len(ours),
                  "memory_stats() segment.all.current"),
        ]
    return checks


def snapshot_check(tools, trace, lines, theirs, work):
    at = [l for l in lines if l["event"] == "snapshot"][0]
    ours = our_layout_at(tools, trace, seconds_into(tools, trace, at),
                         os.path.join(work, "ours.pickle"))
    pytorchs = layout(read_pickle(theirs))

    def shape(segments):
        return "%d_segments,%d_blocks" % (len(segments), sum(len(s[2]) for s in segments))
    return equal("torchjob_snapshot_layout", shape(pytorchs) + ",identical",
                 shape(ours) + (",identical" if ours == pytorchs else ",different"),
                 "PyTorch's _dump_snapshot: segments, addresses, block sizes and states")


def leak_checks(tools, trace):
    """The kept activations are the leak; whatever else `leaks` lists must be workspaces
    (a torch version may keep its cuBLAS workspaces to the end: 2.11 does)."""
    leaks = tools.report("leaks", trace)
    kept = STEPS * block(BATCH * OUT)
    teardown = leaks.get("teardown") or {}
    groups = leaks["groups"]
    mine = [g for g in groups if [k["kind"] for k in g.get("kinds", [])] == ["activations"]]
    others = sorted(set(k["kind"] for g in groups if g not in mine for k in g.get("kinds", [])))
    checks = [
        equal("torchjob_leak_activations", "%d_in_%d" % (kept, STEPS), "%d_in_%d" % (
            sum(g["bytes"] for g in mine), sum(g["count"] for g in mine)),
            "the activations the loop kept, live when the program's code finished"),
        equal("torchjob_leak_teardown", "Py_FinalizeEx:%d" % STEPS, "%s:%s" % (
            teardown.get("function"), teardown.get("freed_count")),
            "freed only by the interpreter's teardown"),
        equal("torchjob_leak_others", ",".join(others and ["workspaces"]), ",".join(others),
              "any other tensor live at exit is a library's workspace (%d bytes in all)" % (
                  leaks["total_bytes"] - sum(g["bytes"] for g in mine))),
    ]
    if len(mine) != 1:
        return checks + [fail("torchjob_leak_site", "%d groups of activations, one expected" %
                              len(mine), expected=1, measured=len(mine))]
    program = os.path.join(REPO, PROGRAM)
    want = ["MLP.forward at %s:%d" % (PROGRAM, marker_line(program, "return self.layers(x)")),
            "train_step at %s:%d" % (PROGRAM, marker_line(program, "out = model(batch)")),
            "main at %s:%d" % (PROGRAM, marker_line(program, "        train_step(model, opt, batch)")),
            "<module> at %s:%d" % (PROGRAM, marker_line(program, "    main()"))]
    got = frames(mine[0])
    checks.append(equal("torchjob_leak_site", ",".join(["aten::addmm"] + want),
                        ",".join(got[:1] + got[-4:]),
                        "the op, then the user's four lines (torch's own frames between)"))
    return checks


def peak_checks(tools, trace, lines):
    end = [l for l in lines if l["event"] == "end"][0]["stats"]
    theirs = [l for l in lines if l["event"] == "kinds"][0]
    summary = tools.report("summary", trace)
    allocator = summary["allocators"][0]
    checks = [
        equal("torchjob_allocated_peak", end["allocated_bytes.all.peak"],
              allocator.get("allocated_peak_bytes"), "memory_stats() allocated_bytes.all.peak"),
        equal("torchjob_reserved_peak", end["reserved_bytes.all.peak"],
              allocator.get("reserved_peak_bytes"), "memory_stats() reserved_bytes.all.peak"),
    ]
    peak = tools.report("peak", trace, "--top", "0")["peaks"][0]
    kinds = {k["kind"]: k for k in peak.get("kinds", [])}
    for kind, key in (("parameters", "parameters"), ("optimizer state", "optimizer_state")):
        checks.append(equal("torchjob_kinds_" + key, theirs[key], kinds.get(kind, {}).get("bytes"),
                            "the bytes of the program's own %s tensors" % kind))
    # The CI's peak (torch 2.15) is in the backward pass before layer 1's bias gradient;
    # another version's may be after it.
    grads = kinds.get("gradients", {}).get("bytes")
    whole = theirs["gradients"]
    checks.append(equal("torchjob_kinds_gradients", "%d_or_%d" % (whole - block(HIDDEN), whole),
                        "%d_or_%d" % (whole - block(HIDDEN), whole) if grads in (
                            whole, whole - block(HIDDEN)) else grads,
                        "the program's gradients at the peak (%s bytes), all or all but layer "
                        "1's bias" % grads))
    checks.append(equal("torchjob_kinds_total", end["allocated_bytes.all.peak"],
                        sum(k["bytes"] for k in kinds.values()),
                        "the kinds at the peak add up to the allocated peak"))
    sites = [frames(s) for s in peak["sites"]]
    named = sum(s["bytes"] for s in peak["sites"] if frames(s)[:1] in (
        ["cuBLAS workspace"], ["cuBLASLt workspace"]))
    workspace = kinds.get("workspaces", {})
    checks.append(equal("torchjob_kinds_workspaces", named, workspace.get("bytes"),
                        "workspaces at the peak (%s tensors) against the sites named cuBLAS's "
                        "or cuBLASLt's workspace" % workspace.get("tensors")))
    checks.append(equal("torchjob_backward_site", "aten::mm,AddmmBackward0", ",".join(
        next((s for s in sites if s == ["aten::mm", "AddmmBackward0"]), ["none"])),
        "a tensor of the backward pass at its autograd node"))
    checks.append(equal("torchjob_cublas_workspace", "cuBLAS_workspace", next(
        (s[0] for s in sites if s and s[0] == "cuBLAS workspace"), "none"),
        "cuBLAS's workspace by name, not a thread entry point"))
    return checks


def torch_job_checks(tools, probe):
    """The checks of the group; `probe` is frameworks.probe ((version, why-not) for torch)."""
    version, why = probe(tools, "torch")
    if why:
        return [skip("torchjob", why)]
    work = tools.path("torchjob")
    os.makedirs(work, exist_ok=True)
    log("torchjob: %s %d steps on torch %s, traces in %s" % (PROGRAM, STEPS, version, work))
    lines, trace, theirs = run_job(tools, work)
    checks = []
    for name, part in (
            ("steps", lambda: step_checks(tools, trace, [l for l in lines
                                                          if l["event"] == "step"], work)),
            ("snapshot", lambda: [snapshot_check(tools, trace, lines, theirs, work)]),
            ("peaks", lambda: peak_checks(tools, trace, lines)),
            ("leaks", lambda: leak_checks(tools, trace))):
        try:
            checks += part()
        except Exception as e:  # one part's bug fails that part; the others still run
            checks.append(fail("torchjob_" + name, problem(e)))
    return checks
