//! libgpumemprof.so: preloaded into an unmodified program (`LD_PRELOAD`), it records
//! every GPU allocation and free it can see, with the native call stack, into a
//! compressed trace file that `gpumemprof` (the analyzer) turns into reports.
//!
//! Modules, one per concern:
//! - `api`: the small public C API of include/gpumemprof.h;
//! - `hooks`: the one table of hooked functions and the per-library semantics;
//! - `guard`: the thread-local re-entrancy guard and thread ids;
//! - `stack`, `unwind`, `intern`: return-address capture (the fast cached-CFI unwinder
//!   and libgcc's) and per-thread stack interning on the hot path;
//! - `python`: the allocating thread's Python frames, merged into its native stack;
//! - `event`, `ring`, `pipeline`: per-thread event rings, the shared queue and the
//!   writer thread;
//! - `recorder`: the flight recorder (`GPUMEMPROF_MODE=oom`);
//! - `modules`: the module map written into the trace for later symbolization;
//! - `nvml`: device memory per process from NVML, sampled by the writer thread;
//! - `nvtx`: the NVTX injection library (`NVTX_INJECTION64_PATH`): ranges and marks;
//! - `output`, `config`: the trace file and its header, and the environment;
//! - `lifecycle`: lazy init, the exit flush, fork.
//!
//! Nothing here may panic into C, take a lock or allocate on the hot path beyond
//! what is stated where it happens, or call CUDA from the writer thread.

mod api;
pub mod clock;
pub mod config;
mod event;
pub mod guard;
pub mod hooks;
mod intern;
mod lifecycle;
pub mod modules;
mod nvml;
mod nvtx;
pub mod output;
mod pipeline;
pub mod python;
mod recorder;
mod ring;
mod stack;
mod unwind;

/// Entry points for the benchmark binary (not part of the C API).
pub mod bench {
    pub use crate::pipeline::writer_benchmark;
}
