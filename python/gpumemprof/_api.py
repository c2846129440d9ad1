"""Scopes and memory figures of the running shim, from Python, through its C API
(include/gpumemprof.h): nothing to configure, no dependency, and nothing done when the shim
is not loaded (the functions are looked up in the process once, at import).

    with gpumemprof.scope("forward"):      # or @gpumemprof.scope("forward") on a function
        out = model(batch)
        print(gpumemprof.peak().scope_tensors)   # the most allocated inside the scope

A scope is a range of NVTX's default domain, as torch.cuda.nvtx.range_push opens one, so
every range report shows it (`gpumemprof summary --by range`, `--max-range-peak NAME=SIZE`).
"""

import contextlib
import ctypes
from typing import NamedTuple, Optional


class _Figures(ctypes.Structure):
    _fields_ = [
        ("allocated_bytes", ctypes.c_uint64),
        ("reserved_bytes", ctypes.c_uint64),
        ("peak_allocated_bytes", ctypes.c_uint64),
        ("peak_reserved_bytes", ctypes.c_uint64),
        ("scope_peak_allocated_bytes", ctypes.c_uint64),
    ]


class _Shim:
    """The shim's functions in this process, or None when it is not loaded."""

    def __init__(self, process):
        self.is_active = process.gpumemprof_is_active
        self.is_active.restype = ctypes.c_int
        self.flush = process.gpumemprof_flush
        self.flush.restype = ctypes.c_int
        self.trace_path = process.gpumemprof_trace_path
        self.trace_path.restype = ctypes.c_char_p
        self.push = process.gpumemprof_range_push
        self.push.argtypes = [ctypes.c_char_p]
        self.push.restype = ctypes.c_int
        self.pop = process.gpumemprof_range_pop
        self.pop.argtypes = []
        self.pop.restype = ctypes.c_int
        self.memory = process.gpumemprof_memory
        self.memory.argtypes = [ctypes.POINTER(_Figures), ctypes.c_size_t]
        self.memory.restype = ctypes.c_int


def _find_shim():
    try:
        return _Shim(ctypes.CDLL(None))
    except (AttributeError, OSError):
        return None


_SHIM = _find_shim()


class Live(NamedTuple):
    """Bytes now: PyTorch's tensors (torch.cuda.memory_allocated()) and the device memory
    its allocator holds (torch.cuda.memory_reserved()), summed over devices."""

    tensors: int
    device: int


class Peak(NamedTuple):
    """The most bytes so far: the process's tensors and device memory, and the tensors
    since this thread's innermost scope opened (the process's when none is open)."""

    tensors: int
    device: int
    scope_tensors: int


def _figures() -> Optional[_Figures]:
    if _SHIM is None:
        return None
    f = _Figures()
    if _SHIM.memory(ctypes.byref(f), ctypes.sizeof(f)) != 0:
        return None
    return f


def recording() -> bool:
    """Whether the shim is loaded and recording this process."""
    return _SHIM is not None and _SHIM.is_active() == 1


def trace_path() -> Optional[str]:
    """The trace file the shim writes, or None when it is not recording."""
    if _SHIM is None:
        return None
    path = _SHIM.trace_path()
    return path.decode("utf-8", "surrogateescape") if path else None


def flush() -> bool:
    """Writes every event recorded so far to the trace file; False when not recording."""
    return _SHIM is not None and _SHIM.flush() == 0


def live() -> Optional[Live]:
    """The bytes live now, as the running shim saw them; None when it is not recording."""
    f = _figures()
    return None if f is None else Live(f.allocated_bytes, f.reserved_bytes)


def peak() -> Optional[Peak]:
    """The most bytes live so far, for the process and the innermost scope; None when the
    shim is not recording."""
    f = _figures()
    if f is None:
        return None
    return Peak(f.peak_allocated_bytes, f.peak_reserved_bytes, f.scope_peak_allocated_bytes)


class scope(contextlib.ContextDecorator):
    """A named range of the program: a context manager, or a decorator of a function."""

    def __init__(self, name: str):
        self.name = name
        self._name = str(name).encode("utf-8", "replace")

    def __enter__(self):
        if _SHIM is not None:
            _SHIM.push(self._name)
        return self

    def __exit__(self, *exc):
        if _SHIM is not None:
            _SHIM.pop()
        return False
