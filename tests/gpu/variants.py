"""Times torch_train.py on a real GPU under variants of the shim, in turn, to find where an
overhead comes from (tests/gpu/README.md): without the shim, with it, and with it under extra
settings. Each round runs every variant once, the order rotated each round so a drift of the
machine falls on all; prints each variant's median of per-run median steps, its paired delta
against the plain run of the same round, and the NVML samples its trace holds; writes
$OUT/variants.json when OUT is set.

usage: GPUMEMPROF_SHIM=... GPUMEMPROF_ANALYZER=... python3 tests/gpu/variants.py MODE ROUNDS \
           NAME=VAR=VALUE[,VAR=VALUE...] ...
  MODE    one of frameworks.TORCH_MODES' names (default, expandable, async, nocache)
  ROUNDS  how many times each variant runs
  "plain" (no shim) and "shim" (the shim as the suite runs it) always run; each further
  argument adds a variant with the shim and those variables, e.g. nvml_off=GPUMEMPROF_NVML_MS=0
"""

import json
import os
import shutil
import statistics
import sys
import tempfile

import compare
import frameworks
from harness import Tools


def parse_variant(arg):
    name, _, assignments = arg.partition("=")
    env = {}
    for pair in filter(None, assignments.split(",")):
        key, eq, value = pair.partition("=")
        if not eq:
            raise SystemExit("variants.py: %r is not NAME=VAR=VALUE[,VAR=VALUE...]" % arg)
        env[key] = value
    return name, env


def nvml_samples(tools, trace):
    summary = tools.report("summary", trace)
    return sum(row.get("samples", 0) for row in summary.get("nvml", []))


def main(argv):
    if len(argv) < 3:
        raise SystemExit(__doc__)
    modes = dict(frameworks.TORCH_MODES)
    mode, rounds = argv[1], argv[2]
    if mode not in modes:
        raise SystemExit("variants.py: unknown mode %r (one of %s)" % (mode, ", ".join(modes)))
    if not rounds.isdigit() or int(rounds) < 1:
        raise SystemExit("variants.py: ROUNDS must be a whole number from 1, not %r" % rounds)
    rounds = int(rounds)
    variants = [("plain", None), ("shim", {})] + [parse_variant(a) for a in argv[3:]]
    work = tempfile.mkdtemp(prefix="gpumemprof-variants-")
    tools = Tools(os.environ["GPUMEMPROF_SHIM"], os.environ["GPUMEMPROF_ANALYZER"], work)
    base = dict(frameworks.TORCH_ENV, **modes[mode])
    runs = {name: [] for name, _ in variants}
    samples = {name: [] for name, _ in variants}
    for r in range(rounds):
        shift = r % len(variants)
        for name, extra in variants[shift:] + variants[:shift]:
            profiled = extra is not None
            tag = "%s-%s-%d" % (mode, name, r)
            report, trace, why = frameworks.run_script(tools, "torch_train.py", tag,
                                                       dict(base, **(extra or {})),
                                                       profiled=profiled)
            if why:
                raise SystemExit("variants.py: " + why)
            runs[name].append(compare.median_ms(report["step_seconds"]))
            if profiled:
                samples[name].append(nvml_samples(tools, trace))
                os.remove(trace)
            print("round %d %-10s %.3f ms%s" % (r, name, runs[name][-1],
                  "  nvml samples %d" % samples[name][-1] if profiled else ""), flush=True)
    shutil.rmtree(work)
    plain = statistics.median(runs["plain"])
    rows = []
    print("\nmode %s, %d rounds (median of each run's median step)" % (mode, rounds))
    print("variant     median_ms  vs_plain  paired  slower_rounds  nvml_samples")
    for name, _ in variants:
        med = statistics.median(runs[name])
        paired = statistics.median([(w / p - 1.0) * 100.0
                                    for w, p in zip(runs[name], runs["plain"])])
        slower = sum(1 for w, p in zip(runs[name], runs["plain"]) if w > p)
        row = {"variant": name, "runs_ms": runs[name], "median_ms": med,
               "vs_plain_pct": (med / plain - 1.0) * 100.0, "paired_pct": paired,
               "slower_rounds": slower, "nvml_samples": samples[name]}
        rows.append(row)
        print("%-10s  %9.3f  %+7.1f%%  %+5.1f%%  %6d of %-3d  %s" % (
            name, med, row["vs_plain_pct"], paired, slower, rounds,
            ",".join(map(str, samples[name])) or "-"))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "variants.json"), "w") as f:
            json.dump({"mode": mode, "rounds": rounds, "variants": rows}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
