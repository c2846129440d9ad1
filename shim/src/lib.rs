//! libgpumemprof.so: preloaded into an unmodified program (`LD_PRELOAD`), it records
//! every GPU allocation and free it can see, with the native call stack, into a
//! compressed trace file that `gpumemprof` (the analyzer) turns into reports.
//!
//! Layers, each importing only from the layers below it (docs/ARCHITECTURE.md draws them):
//! - `hooks`: the exported functions the program's calls bind to (expanded from the hook
//!   list), the `dlsym`/`dlvsym` overrides, the NVTX callbacks and the public C API;
//! - `session`: the process-global state, the start on the first event, exit, fork and
//!   fatal signals;
//! - `writer`: the consumer side of the rings, the writer thread, the flight recorder,
//!   NVML sampling and the trace file;
//! - `capture`: what a hooked call captures on its own thread: the guard and thread
//!   state, the ring, native and Python stacks, interning, modules, NVTX names;
//! - `sys`: diagnostics, the real `dlsym`, the hook list, the clock, the configuration
//!   and the event.
//!
//! Nothing here may panic into C, take a lock or allocate on the hot path beyond
//! what is stated where it happens, or call CUDA from the writer thread.

pub mod capture;
pub mod hooks;
mod session;
pub mod sys;
mod writer;

/// Entry points for the benchmark binary (not part of the C API).
pub mod bench {
    pub use crate::writer::bench::writer_benchmark;
}
