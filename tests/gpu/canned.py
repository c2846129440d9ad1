"""The framework comparisons on canned inputs (tests/gpu/canned/*.json): what a framework
script would have written and what extract.py would have measured, so the simulated mode
(and `cargo test`, tests/gpu_suite.rs) runs compare.py's rules without a GPU. The files under
canned/mismatch/ hold wrong measurements on purpose: every rule must be able to fail.

A file holds {"kind": "torch"|"gap"|"nccl"|"jax"|"cupy", ...}: for "torch" a "mode" and a
"train" ({"plain", "profiled", "measured"}) and/or "oom" ({"report", "measured"}) part, for
the others "mode" (jax, cupy), "report" and "measured". "@TORCH-LEAK-LINE" in a measured
value stands for the line of torch_train.py that leaks (it moves when the script is edited).

    python3 tests/gpu/canned.py FILE...   prints the CHECK lines of those files
"""

import glob
import json
import os
import sys

sys.dont_write_bytecode = True

import compare  # noqa: E402 (after the bytecode switch)
from harness import marker_line  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "canned_"
BUDGET_PCT = 10.0  # the suite's default overhead budget


def leak_line():
    return "torch_train.py:%d" % marker_line(os.path.join(HERE, "torch_train.py"),
                                             "GPUMEMPROF-TORCH-LEAK")


def substitute(value):
    if isinstance(value, dict):
        return {k: substitute(v) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v) for v in value]
    return leak_line() if value == "@TORCH-LEAK-LINE" else value


def rows_of(path):
    with open(path) as f:
        case = substitute(json.load(f))
    kind = case["kind"]
    if kind == "torch":
        rows = []
        if "train" in case:
            train = case["train"]
            checks, _ = compare.torch_train(PREFIX + "torch_", case["mode"], train["plain"],
                                            train["profiled"], train["measured"], leak_line(),
                                            BUDGET_PCT)
            rows.extend(checks)
        if "oom" in case:
            rows.extend(compare.torch_oom(PREFIX + "torch_", case["mode"],
                                          case["oom"]["report"], case["oom"]["measured"]))
        return rows
    if kind == "gap":
        return compare.torch_gap(PREFIX + "torch_", case["report"], case["measured"])
    if kind == "nccl":
        return compare.torch_nccl(PREFIX + "torch_", case["report"], case["measured"])
    if kind == "jax":
        return compare.jax_rows(PREFIX + "jax_", case["mode"], case["report"], case["measured"])
    if kind == "cupy":
        return compare.cupy_rows(PREFIX + "cupy_", case["mode"], case["report"],
                                 case["measured"])
    raise ValueError("%s: unknown kind %r" % (path, kind))


def canned_checks():
    """The rows of every canned/*.json (not the mismatch cases), in file order."""
    rows = []
    for path in sorted(glob.glob(os.path.join(HERE, "canned", "*.json"))):
        rows.extend(rows_of(path))
    return rows


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        for check in rows_of(arg):
            print(check.line())
