//! The bottom layer: what every other layer uses and nothing of the shim below it
//! (diagnostics, the real `dlsym` and symbol lookups, the hook list, the clock, the
//! configuration, the event as it travels to the writer, each thread's alternate signal
//! stack, cache prefetches, the writer's scheduling policy, the signal mask its threads
//! start with, zeroed pages of its own, the faults tests ask for).

pub mod altstack;
pub mod clock;
pub mod config;
pub mod diag;
pub mod dl;
pub mod event;
pub mod faults;
pub mod hooklist;
pub mod pages;
pub mod prefetch;
pub mod sched;
pub mod sigmask;
