//! What if the job had run with another allocator configuration, on another device, or
//! with larger tensors? A model of PyTorch's caching-allocator policy (`allocator`,
//! `expandable`) replays a trace's tensor stream (`replay`), checked first against the
//! job's own figures; `report` turns the runs into the `whatif` report, `remedies` into
//! what would have avoided an out-of-memory error (for `oom`).

mod allocator;
mod expandable;
pub mod remedies;
pub mod replay;
pub mod report;

pub use allocator::{Counters, Device};
pub use replay::{Scenario, WhatIf};

#[cfg(test)]
mod tests;
