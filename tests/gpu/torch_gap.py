"""Memory PyTorch cannot see, for the real-GPU suite (tests/gpu/README.md). Two parts, each
its own process (argv[1]):

gap   a cuBLAS matmul and a cuDNN convolution (their handles, workspaces and the CUDA
      context), then a steady second in which the shim's NVML sampler (GPUMEMPROF_NVML_MS,
      set short by the suite) sees the final state; then NVML's per-process figure (pynvml,
      this pid) and memory_stats(). The gap between the two is what PyTorch cannot see.
nccl  a one-rank NCCL process group and an all_reduce on this GPU: NCCL's buffers, which
      PyTorch's allocator never sees. Any failure is reported, never raised.

Writes the JSON report to $GPU_SUITE_REPORT, then os._exit(0): no exit handler frees
anything (NCCL's buffers stay live at exit, where the leak report finds them).
"""

import json
import os
import sys
import time


def nvml_process_used():
    """(bytes NVML says this process uses on device 0, None) or (None, why not)."""
    try:
        import pynvml
    except ImportError as e:
        return None, "no pynvml (%s)" % e
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid():
                if proc.usedGpuMemory is None:
                    return None, "NVML hides this process's memory (usedGpuMemory n/a)"
                return int(proc.usedGpuMemory), None
        return None, "NVML lists no process with pid %d (another pid namespace?)" % os.getpid()
    except pynvml.NVMLError as e:
        return None, "NVML error: %s" % e


def gap(torch, report):
    device = torch.device("cuda", 0)
    a = torch.randn(2048, 2048, device=device)
    b = a @ a  # cuBLAS: handle and workspace
    conv = torch.nn.Conv2d(16, 32, 3).to(device)
    y = conv(torch.randn(8, 16, 64, 64, device=device))  # cuDNN: handle and workspace
    torch.cuda.synchronize()
    time.sleep(float(os.environ.get("GPU_SUITE_SETTLE", "1.0")))
    used, why = nvml_process_used()
    stats = torch.cuda.memory_stats(device)
    report.update({
        "nvml_used": used,
        "nvml_error": why,
        "stats": {
            "reserved_current": stats.get("reserved_bytes.all.current", 0),
            "allocated_current": stats.get("allocated_bytes.all.current", 0),
        },
    })
    return [a, b, y]


def nccl(torch, report):
    import torch.distributed as dist

    device = torch.device("cuda", 0)
    try:
        if not dist.is_nccl_available():
            raise RuntimeError("this PyTorch has no NCCL")
        store = os.path.join(os.path.dirname(os.environ["GPU_SUITE_REPORT"]), "nccl.store")
        dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1)
        t = torch.ones(1 << 20, device=device)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        report.update({"nccl_ok": t[0].item() == 1.0, "nccl_error": None,
                       "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))})
        return [t]
    except Exception as e:  # report why: the suite turns it into a SKIP with the reason
        report.update({"nccl_ok": False, "nccl_error": "%s: %s" % (type(e).__name__, e)})
        return []


def main():
    import torch

    part = sys.argv[1]
    report = {"torch": torch.__version__, "part": part}
    keep = gap(torch, report) if part == "gap" else nccl(torch, report)
    with open(os.environ["GPU_SUITE_REPORT"], "w") as f:
        json.dump(report, f)
    assert keep is not None  # everything stays referenced until _exit
    os._exit(0)


if __name__ == "__main__":
    main()
