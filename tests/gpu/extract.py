"""Measured values out of the analyzer's JSON reports (docs/REPORTS.md): who holds the memory
by source line, by allocation size and by library, which APIs a trace saw, and the
out-of-memory failure a framework raised. Each function takes parsed JSON and returns plain
numbers or one blank-free text, so the suite's comparisons never look at report text.
"""

import os


def first_frame_in(frames, file_suffix):
    """The innermost frame whose source file ends with `file_suffix` (None if none does)."""
    for frame in frames or []:
        if (frame.get("file") or "").endswith(file_suffix):
            return frame
    return None


def by_line(entries, file_suffix):
    """'name:LINE=BYTES/COUNT;...' over leak groups, peak sites or oom live sites, keyed by
    the innermost frame in `file_suffix` (entries without one are summed as 'other')."""
    tally = {}
    for entry in entries:
        frame = first_frame_in(entry.get("frames"), file_suffix)
        key = "%s:%d" % (file_suffix, frame["line"]) if frame and frame.get("line") else "other"
        bytes_, count = tally.get(key, (0, 0))
        tally[key] = (bytes_ + entry["bytes"], count + entry["count"])

    def order(key):
        return (1, 0) if key == "other" else (0, int(key.rsplit(":", 1)[1]))

    return ";".join("%s=%d/%d" % (k, tally[k][0], tally[k][1]) for k in sorted(tally, key=order))


def expected_by_line(file_suffix, facts):
    """The same text as by_line for [(line, bytes, count), ...]."""
    facts = sorted(facts)
    return ";".join("%s:%d=%d/%d" % (file_suffix, line, b, c) for line, b, c in facts)


def count_of_size(groups, size):
    """(count, bytes) of the groups made only of allocations of `size` bytes: the leak of a
    known, distinctive size, however the allocations' stacks are grouped."""
    count = 0
    for group in groups:
        if group["count"] and group["bytes"] == group["count"] * size:
            count += group["count"]
    return count, count * size


def line_of(group, file_suffix):
    """The line of the group's innermost frame in `file_suffix` (None if none)."""
    frame = first_frame_in(group.get("frames"), file_suffix)
    return frame.get("line") if frame else None


def of_blocks_of(group, size, slack):
    """Whether a group is made only of allocator blocks for requests of `size` bytes: each
    at least `size` and less than `size + slack` (an allocator that keeps a remainder
    under `slack` in the block it hands out)."""
    count, total = group["count"], group["bytes"]
    return bool(count) and count * size <= total < count * (size + slack)


def split_by_module(entries, needle):
    """(bytes whose stack passes through a module whose path contains `needle`, the rest).
    Needs stacks with every frame (`--frames 0`)."""
    inside = outside = 0
    for entry in entries:
        modules = [os.path.basename(f.get("module") or "") for f in entry.get("frames") or []]
        if any(needle in m for m in modules):
            inside += entry["bytes"]
        else:
            outside += entry["bytes"]
    return inside, outside


def python_site(entries, file_suffix, predicate=None):
    """'file.py:LINE' of the Python frame in `file_suffix` (else the innermost Python frame)
    of the entries that satisfy `predicate`, sorted and joined by ','; None when no entry of
    the report has a Python frame at all (a shim that records native stacks only)."""
    any_python = False
    sites = set()
    for entry in entries:
        frames = entry.get("frames") or []
        py = [f for f in frames if (f.get("file") or "").endswith(".py")]
        any_python = any_python or bool(py)
        if py and (predicate is None or predicate(entry)):
            mine = [f for f in py if f["file"].endswith(file_suffix)]
            frame = (mine or py)[0]
            sites.add("%s:%s" % (os.path.basename(frame["file"]), frame.get("line")))
    if not any_python:
        return None
    return ",".join(sorted(sites)) or "none"


def apis_text(info):
    """'name:ALLOCATIONS/FREES,...' of every API an `info TRACE --json` saw, by name."""
    items = []
    for api in info.get("apis", []):
        if api.get("allocations") or api.get("frees"):
            items.append("%s:%d/%d" % (api["name"], api["allocations"], api["frees"]))
    return ",".join(sorted(items)) or "none"


def device_row(summary, device=0, kind="device"):
    """The summary row of (device, kind), or an all-zero row when the trace has none."""
    for row in summary.get("rows", []):
        if row["device"] == device and row["kind"] == kind:
            return row
    return {"peak_bytes": 0, "live_bytes_at_end": 0, "live_allocations_at_end": 0,
            "allocations": 0, "frees": 0}


def peak_sites(peak, device=0, kind="device"):
    """The call sites live at the peak of (device, kind) in a `peak --json` report."""
    for entry in peak.get("peaks", []):
        if entry["device"] == device and entry["kind"] == kind:
            return entry.get("sites", [])
    return []


def last_failure(tools, trace):
    """The `oom --json` report of the trace's last kept out-of-memory failure: the one a
    framework raised after its retries (PyTorch frees its cache and asks again), which is
    what its exception message describes. None when the trace has no failure."""
    first = tools.report("oom", trace, "--top", "0", "--frames", "0")
    kept = first["failure_counts"]["kept"]
    if not kept:
        return None
    if first["failure"] and first["failure"]["index"] == kept - 1:
        return first
    return tools.report("oom", trace, "--index", str(kept - 1), "--top", "0", "--frames", "0")
