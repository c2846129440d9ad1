//! Replay: THE one streaming pass over a trace's records. Every report is computed from
//! what this pass keeps; nothing re-reads the file and no event is stored.
//!
//! Memory grows with live allocations, distinct stacks, loaded modules and (device, kind)
//! rows — never with the trace's length (failures are capped at `MAX_KEPT_FAILURES`).
//!
//! Peak attribution (after heaptrack's peak tracker): each (device, kind) row keeps its
//! live bytes per stack incrementally, and copies that map only at a local maximum that
//! is also a new high-water mark:
//!
//! ```text
//!  live bytes
//!      │          ▲ new max: flag set     (another max: flag stays set)
//!      │        ┌─┘ ┌───────┐ ◄── first decrease after the flag: snapshot the
//!      │    ┌───┘   │       └──┐   per-stack map *before* applying this free,
//!      │ ┌──┘       │          └───┐ then clear the flag
//!      └─┴──────────┴──────────────┴──► time   (flag still set at the end: snapshot)
//! ```
//!
//! Allocations only ever raise live bytes, so the state at the first decrease after a new
//! maximum is exactly the state at that maximum. The copy costs O(live stacks) once per
//! new high-water mark, not per event.

//!
//! Files: `model` (what the pass keeps and the reports read), `tally` (per-address and
//! per-stack bookkeeping), `pass` (the `Replay` state machine), `ranges` (memory by NVTX
//! range), `fates` (what became of the tensors live at a peak), `nvml` (NVML's samples
//! against what the hooks tracked), and `replay()` below,
//! which streams a trace through it.

pub mod attempts;
pub mod fates;
mod level;
mod model;
mod nvml;
mod pass;
pub mod ranges;
mod tally;

pub use level::{has_tensors, MemoryLevel};
pub use model::*;
pub use nvml::window_end;
pub use pass::{Replay, Replayed};

use std::io::Read;

use crate::decoding::{Flow, Item};
use gpumemprof_format::{Damage, ReadError, Record, TraceReader};

/// What reading a whole trace gives: the header, the replay, and how reading ended.
#[derive(Debug)]
pub struct Loaded {
    pub header: serde_json::Value,
    pub replayed: Replayed,
    /// The file ended inside a block (the process was killed mid-write).
    pub truncated: bool,
    /// Complete blocks read.
    pub blocks: u64,
    /// Damaged blocks skipped, and what they held.
    pub damage: Damage,
    /// Where a second trace starts in the same file (two traces concatenated): only the
    /// first was read.
    pub second_trace_at: Option<u64>,
}

impl Loaded {
    /// What reading `reader` to its end gave, or the first damage's error when every
    /// block was damaged (nothing could be read).
    pub fn read<R: Read>(reader: &TraceReader<R>, replayed: Replayed) -> Result<Loaded, ReadError> {
        let damage = reader.damage().clone();
        if reader.blocks_read() == 0 {
            if let Some((offset, what)) = damage.first {
                return Err(ReadError::Corrupt { offset, what });
            }
        }
        Ok(Loaded {
            header: reader.header().clone(),
            replayed,
            truncated: reader.truncated(),
            blocks: reader.blocks_read(),
            damage,
            second_trace_at: reader.second_trace_at(),
        })
    }
}

/// Streams every record of `reader` through a `Replay` (decoded on a second thread where
/// there is a second core: `decoding`).
pub fn replay<R: Read + Send>(reader: TraceReader<R>) -> Result<Loaded, ReadError> {
    replay_with(reader, Replay::new())
}

/// `replay` with a replay set up by the caller (`Replay::keeping_exit`).
pub fn replay_with<R: Read + Send>(
    mut reader: TraceReader<R>,
    replay: Replay,
) -> Result<Loaded, ReadError> {
    let mut replay = replay.of_header(reader.header());
    crate::decoding::each_batch(&mut reader, |batch| {
        for item in batch.iter_mut() {
            // Allocs and frees are applied where the decoder put them: moving the record
            // out first copied it, and the copy stalled on store forwarding (BENCHMARKS.md).
            match item {
                Item::Record(Record::Alloc(a)) => replay.alloc(a),
                Item::Record(Record::Free(f)) => replay.free(f),
                Item::Damaged => replay.damaged(),
                _ => {
                    if let Item::Record(record) = item.take() {
                        replay.record(record);
                    }
                }
            }
        }
        Flow::More
    })?;
    Loaded::read(&reader, replay.finish())
}

#[cfg(test)]
pub(crate) mod tests;
