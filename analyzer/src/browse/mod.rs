//! `gpumemprof browse`: a full-screen terminal browser of a trace, for the remote node a
//! training run is on (SSH, 80x24 and up). A timeline of live memory with a cursor; at the
//! cursor's moment, a call tree of what is live (the reports' frames: the user's line
//! first), the top sites, and the leaks at the end; search, focus and details.
//!
//! Files: `story` (what the replay pass keeps: memory per stack on a time grid, any
//! moment rebuilt from a checkpoint) and `deltas` (its changes per bucket); `names` (stacks
//! resolved once and interned), `tree` (the call tree of a moment, what is open, the
//! search), `sites` (the flat views), `moment` (the moments shown, and a second trace's),
//! `steps` (the training steps NVTX ranges mark, to follow a second trace step for step),
//! `app` (state and keys, no terminal), `chart`, `draw` and `details` (the screen),
//! `terminal` (a frame at a time). `cmd/browse.rs` runs the loop.

pub mod app;
pub mod chart;
pub mod deltas;
pub mod details;
pub mod draw;
pub mod moment;
pub mod names;
pub mod sites;
pub mod steps;
pub mod story;
pub mod terminal;
pub mod tree;

#[cfg(test)]
mod tests;
