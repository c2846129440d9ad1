//! The writer layer: the per-thread rings' consumer side and everything that ends in the
//! trace file. `pipeline` (push and back-pressure), `run` (the writer thread), `core`
//! (reorder, define, encode, write), `pending`, the flight recorder, NVML sampling and when
//! to sample early (`live_high`), the trace file and its header (`output`), and the
//! writer's benchmark entry point. Imports `capture` and `sys`.

pub mod bench;
mod core;
#[cfg(test)]
mod emit_tests;
mod live_high;
mod membarrier;
pub mod nvml;
mod oom_count;
pub mod output;
mod pending;
pub mod pipeline;
mod recorder;
mod run;

pub use self::core::WriterCore;
pub use pipeline::{Pipeline, Written};
