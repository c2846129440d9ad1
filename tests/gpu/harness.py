"""The real-GPU suite's plumbing: checks and their rules, the CHECK lines, the final table
and validation.json, and running a program under the shim and the analyzer on its trace.

Every check prints one line the moment it is decided:

    CHECK <name> expected=<value> measured=<value> PASS|FAIL|SKIP <reason>

Values never contain blanks (blanks become '_'), so a line splits on whitespace into exactly
six fields before the free-text reason. Measured values come from the analyzer's JSON reports
(`gpumemprof summary|leaks|peak|oom|info --json`, docs/REPORTS.md), never from its text.
"""

import json
import os
import subprocess
import sys

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


class Check:
    """One decided check."""

    def __init__(self, name, expected, measured, status, reason=""):
        self.name = name
        self.expected = value_text(expected)
        self.measured = value_text(measured)
        self.status = status
        self.reason = " ".join(str(reason).split())

    def line(self):
        text = "CHECK %s expected=%s measured=%s %s" % (
            self.name, self.expected, self.measured, self.status)
        return text + (" " + self.reason if self.reason else "")

    def as_json(self):
        return {"name": self.name, "expected": self.expected, "measured": self.measured,
                "status": self.status, "reason": self.reason}


def value_text(value):
    """A value as one blank-free word ('-' for none)."""
    if value is None:
        return "-"
    text = str(value)
    return "_".join(text.split()) if text.strip() else "-"


def equal(name, expected, measured, reason=""):
    """PASS when the two values print the same (integers, names, lists rendered as text)."""
    ok = value_text(expected) == value_text(measured)
    return Check(name, expected, measured, PASS if ok else FAIL, reason)


def at_least(name, expected, measured, reason=""):
    """PASS when the measured integer is at least the expected one."""
    ok = measured is not None and int(measured) >= int(expected)
    return Check(name, ">=%d" % int(expected), measured, PASS if ok else FAIL, reason)


def skip(name, reason, expected=None):
    return Check(name, expected, None, SKIP, reason)


def fail(name, reason, expected=None, measured=None):
    return Check(name, expected, measured, FAIL, reason)


class Suite:
    """Collects checks, prints each as it comes, and the table and JSON at the end."""

    def __init__(self, out_json=None):
        self.checks = []
        self.sections = {}
        self.out_json = out_json

    def add(self, check):
        self.checks.append(check)
        print(check.line(), flush=True)

    def extend(self, checks):
        for check in checks:
            self.add(check)

    def section(self, name, value):
        """Extra facts for validation.json (environment, overhead table)."""
        self.sections[name] = value

    def counts(self):
        counts = {PASS: 0, FAIL: 0, SKIP: 0}
        for check in self.checks:
            counts[check.status] += 1
        return counts

    def table(self):
        headers = ("check", "expected", "measured", "status", "reason")
        rows = [(c.name, c.expected, c.measured, c.status, c.reason) for c in self.checks]
        # The reason is the last column and is never padded; cap the others so one long
        # value cannot push the table off a terminal.
        widths = [min(60, max([len(headers[i])] + [len(r[i]) for r in rows]))
                  for i in range(4)]
        lines = []
        for row in [headers] + rows:
            cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
            lines.append("  ".join(cells).rstrip())
        counts = self.counts()
        lines.append("%d checks: %d passed, %d failed, %d skipped" % (
            len(self.checks), counts[PASS], counts[FAIL], counts[SKIP]))
        overhead = self.sections.get("overhead")
        if overhead:
            lines.append("")
            lines.append("PyTorch step time (median over runs of each run's median step), "
                         "without and with the shim, runs in turn:")
            lines.append("mode        runs  steps  without_ms  with_ms  overhead  "
                         "spread_without  verdict")
            for row in overhead:
                lines.append("%-10s  %4d  %5d  %10.3f  %7.3f  %+7.1f%%  %13.1f%%  %s" % (
                    row["mode"], row.get("runs", 1), row["steps"], row["median_ms_without"],
                    row["median_ms_with"], row["overhead_pct"],
                    row.get("spread_pct_without", 0.0), row.get("status", "")))
        return "\n".join(lines)

    def finish(self):
        """Prints the table, writes the JSON, returns the exit status (1 if any check failed)."""
        print("\n" + self.table(), flush=True)
        if self.out_json:
            doc = {"schema": "gpumemprof-gpu-suite/1", "counts": self.counts(),
                   "checks": [c.as_json() for c in self.checks]}
            doc.update(self.sections)
            with open(self.out_json, "w") as f:
                json.dump(doc, f, indent=2, sort_keys=True)
                f.write("\n")
        return 1 if self.counts()[FAIL] else 0


class Tools:
    """Where the shim and the analyzer are, and the scratch folder for traces."""

    def __init__(self, shim, analyzer, work, sim_dir=None):
        self.shim = shim
        self.analyzer = analyzer
        self.work = work
        self.sim_dir = sim_dir

    def path(self, name):
        return os.path.join(self.work, name)

    def run(self, argv, env=None, trace=None, timeout=300, cwd=None):
        """Runs argv (with the shim preloaded when `trace` is given); a CompletedProcess
        with text output. `env` adds variables; a value of None removes one (PyTorch reads
        PYTORCH_NO_CUDA_MEMORY_CACHING as set even when empty). A timeout comes back as
        returncode 124 and a note in stderr."""
        full = dict(os.environ)
        for key in [k for k in full if k.startswith("GPUMEMPROF_") or k == "LD_PRELOAD"]:
            del full[key]
        if self.sim_dir:
            for key in [k for k in full if k.startswith("SIMCUDA_")]:
                del full[key]
        if trace is not None:
            if os.path.exists(trace):
                os.remove(trace)
            full["LD_PRELOAD"] = self.shim
            full["GPUMEMPROF_OUTPUT"] = trace
            full["GPUMEMPROF_QUIET"] = "1"
        for key, value in (env or {}).items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        try:
            return subprocess.run(argv, env=full, cwd=cwd, timeout=timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return subprocess.CompletedProcess(argv, 124, out, "timed out after %ds" % timeout)

    def report(self, command, trace, *extra):
        """`gpumemprof COMMAND TRACE --json EXTRA...`, parsed. Raises AnalyzerError."""
        argv = [self.analyzer, command, trace, "--json", "-q"] + list(extra)
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=300)
        if proc.returncode != 0:
            raise AnalyzerError("gpumemprof %s exited %d: %s" % (
                command, proc.returncode, proc.stderr.strip()[-300:]))
        return json.loads(proc.stdout)


class AnalyzerError(Exception):
    pass


def keyvals(text):
    """The key=value lines of a program's output."""
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            found[key.strip()] = value.strip()
    return found


def marker_line(path, marker):
    """The 1-based line of `path` holding `marker`; it must be on exactly one line."""
    with open(path) as f:
        hits = [i + 1 for i, line in enumerate(f) if marker in line]
    if len(hits) != 1:
        raise ValueError("%s must be on exactly one line of %s, found %s" % (marker, path, hits))
    return hits[0]


def problem(error):
    """An unexpected exception as a FAIL reason: its type, message and where it was raised."""
    import traceback
    where = traceback.extract_tb(error.__traceback__)[-1:]
    at = " at %s:%d" % (os.path.basename(where[0].filename), where[0].lineno) if where else ""
    return "%s: %s%s" % (type(error).__name__, error, at)


def tail(text, n=400):
    """The end of a program's output, on one line, for a FAIL reason."""
    text = " ".join((text or "").split())
    return text[-n:]


def log(message):
    print("# " + message, file=sys.stdout, flush=True)
