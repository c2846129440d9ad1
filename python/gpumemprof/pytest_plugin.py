"""pytest plugin: GPU memory budgets per test, measured by the gpumemprof shim.

    pytest --gpumemprof [--gpumemprof-trace DIR]

    @pytest.mark.limit_gpu_memory("2 GiB")   # the most the test's allocations hold at once
    @pytest.mark.limit_gpu_leaks("0 B")      # what the test allocated and left live

With --gpumemprof the session runs under the shim (the plugin starts pytest again with it
preloaded when it is not). Each marked test is a scope (an NVTX range named after the test,
`pytest:<node id>`); at its end the trace is flushed and read by `gpumemprof peak|leaks
--range`, which count only what was allocated while the test ran, on any thread: PyTorch's
tensors where the trace has them, else device memory from CUDA. A test over its budget fails
with the size and the lines that allocated it. Tests without a marker are not measured.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from . import _api as _scope
from . import shim_path

_CHILD = "GPUMEMPROF_PYTEST_CHILD"
_UNITS = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_size(text):
    """`2 GiB`, `512MB`, `0 B` or a number of bytes, as the gpumemprof command reads sizes."""
    if isinstance(text, int):
        return text
    t = str(text).strip()
    i = 0
    while i < len(t) and (t[i].isdigit() or t[i] == "."):
        i += 1
    number, unit = t[:i], t[i:].strip().lower() or "b"
    if not number or unit not in _UNITS:
        raise ValueError(f"{text!r}: give a size such as 2GiB, 512MB or 0B")
    return int(float(number) * _UNITS[unit])


def _words(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def pytest_addoption(parser):
    group = parser.getgroup("gpumemprof", "GPU memory budgets (gpumemprof)")
    group.addoption(
        "--gpumemprof",
        action="store_true",
        help="measure GPU memory under the gpumemprof shim and enforce limit_gpu_memory / "
        "limit_gpu_leaks markers",
    )
    group.addoption(
        "--gpumemprof-trace",
        metavar="DIR",
        help="keep a copy of the trace for each test that broke its budget in DIR",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "limit_gpu_memory(size): fail if the test's GPU allocations hold more than size at once",
    )
    config.addinivalue_line(
        "markers",
        "limit_gpu_leaks(size): fail if the test leaves more than size of GPU memory it allocated",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Starts the session again under the shim when --gpumemprof asks for it and it is not
    loaded, before any conftest can touch the GPU."""
    # `--gpumemprof` typed, or in the ini file's addopts.
    asked = "--gpumemprof" in args or getattr(early_config.known_args_namespace, "gpumemprof", False)
    if not asked or _scope.recording() or os.environ.get(_CHILD):
        return
    shim = shim_path()
    if shim is None:
        raise pytest.UsageError("--gpumemprof: the gpumemprof shim is not installed beside this package")
    env = dict(os.environ)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = shim + (":" + preload if preload else "")
    env.setdefault("GPUMEMPROF_OUTPUT", os.path.join(os.getcwd(), "gpumemprof-pytest.%p.trace"))
    env.setdefault("GPUMEMPROF_QUIET", "1")
    env[_CHILD] = "1"
    # pytest captures the terminal by now: give it back, or the new session writes into
    # the capture's files.
    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "pytest"] + list(args), env)


def _analyzer():
    """The gpumemprof command: $GPUMEMPROF_ANALYZER, this environment's, else PATH's."""
    given = os.environ.get("GPUMEMPROF_ANALYZER")
    if given:
        return given
    beside = os.path.join(sysconfig.get_path("scripts"), "gpumemprof")
    return beside if os.path.isfile(beside) else shutil.which("gpumemprof")


def _report(command, trace, name):
    exe = _analyzer()
    if exe is None:
        raise RuntimeError("--gpumemprof: the gpumemprof command is not installed")
    # The analyzer is not a job to profile: the shim is not preloaded into it.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run(
        [exe, command, trace, "--range", name, "--json", "-q", "--top", "5"],
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"gpumemprof {command}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def _line(site):
    if not site:
        return "(no line of the program's in its stack)"
    where = site.get("file") or site.get("module") or "?"
    if site.get("line"):
        where += f":{site['line']}"
    return f"{site.get('function') or '?'} at {where}"


def _sites(sites, bytes_key, count_key, one, many):
    lines = []
    for s in sites:
        n = s[count_key]
        lines.append(f"  - {_words(s[bytes_key])} in {n} {one if n == 1 else many} from {_line(s.get('site'))}")
    return lines


def _peak_failure(report, limit):
    peaks = [p for p in report["peaks"] if p["kind"] in ("tensor", "device")]
    peaks.sort(key=lambda p: (p["kind"] != "tensor", -p["peak_bytes"]))
    if not peaks:
        return None
    p = peaks[0]
    if p["peak_bytes"] <= limit:
        return None
    what = "tensors" if p["kind"] == "tensor" else "device memory"
    one, many = ("tensor", "tensors") if p["kind"] == "tensor" else ("allocation", "allocations")
    head = (
        f"Test was limited to {_words(limit)} of GPU memory but its {what} peaked at "
        f"{_words(p['peak_bytes'])}; at the peak:"
    )
    return "\n".join([head] + _sites(p["sites"], "bytes", "count", one, many))


def _leak_failure(report, limit):
    total = report["total_bytes"]
    if total <= limit:
        return None
    one, many = ("tensor", "tensors") if report.get("level") == "tensors" else ("allocation", "allocations")
    head = (
        f"Test was limited to {_words(limit)} of GPU memory left live but left {_words(total)} "
        f"in {report['total_count']} {one if report['total_count'] == 1 else many}:"
    )
    return "\n".join([head] + _sites(report["groups"], "bytes", "count", one, many))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    memory = item.get_closest_marker("limit_gpu_memory")
    leaks = item.get_closest_marker("limit_gpu_leaks")
    if not item.config.getoption("--gpumemprof") or (memory is None and leaks is None):
        yield
        return
    if not _scope.recording():
        # GPUMEMPROF_DISABLE=1, or no trace file: the test runs, unmeasured, and says so.
        item.warn(
            pytest.PytestWarning(
                "--gpumemprof: the gpumemprof shim is not recording this process "
                "(GPUMEMPROF_DISABLE?): the test's GPU memory budget was not checked"
            )
        )
        yield
        return
    name = f"pytest:{item.nodeid}"
    with _scope.scope(name):
        outcome = yield
    if outcome.excinfo is not None:
        return
    _scope.flush()
    trace = _scope.trace_path()
    failures = []
    if memory is not None:
        failures.append(_peak_failure(_report("peak", trace, name), parse_size(memory.args[0])))
    if leaks is not None:
        failures.append(_leak_failure(_report("leaks", trace, name), parse_size(leaks.args[0])))
    failures = [f for f in failures if f]
    if failures:
        keep = item.config.getoption("--gpumemprof-trace")
        if keep:
            os.makedirs(keep, exist_ok=True)
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in item.nodeid)
            shutil.copyfile(trace, os.path.join(keep, safe + ".trace"))
        outcome.force_exception(pytest.fail.Exception("\n".join(failures), pytrace=False))
