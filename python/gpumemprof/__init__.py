"""gpumemprof: a GPU memory profiler for deep-learning jobs.

The package carries the `gpumemprof` command (the analyzer and launcher: `gpumemprof run --
python train.py`) and the preload shim that records every GPU allocation of an unmodified
program. From Python: `scope(name)` marks a range of the program (a context manager or a
decorator), `live()` and `peak()` read the running shim's figures (None without it), and
`shim_path()` is where the installed shim is (for `LD_PRELOAD` in a container or a launcher
of your own).
"""

import glob
import os

from ._api import Live, Peak, flush, live, peak, recording, scope, trace_path

__all__ = [
    "Live",
    "Peak",
    "flush",
    "live",
    "peak",
    "recording",
    "scope",
    "shim_path",
    "trace_path",
]

__version__ = "0.1.0"


def shim_path():
    """The path of the installed `libgpumemprof` shim, or None if it is not there."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libgpumemprof*.so")))
    return found[0] if found else None
