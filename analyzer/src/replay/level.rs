//! The two levels memory is counted at (docs/REPORTS.md, "Tensors and segments"): the
//! segments allocated from CUDA, HIP or the driver, or a framework allocator's tensors
//! inside them. Views and reports pick one; `report/level.rs` also finds the user's frame.

use clap::ValueEnum;
use gpumemprof_format::MemKind;
use serde::Serialize;

use super::Replayed;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryLevel {
    /// The memory the process allocated from CUDA, HIP or the driver (PyTorch's
    /// "reserved").
    Segments,
    /// The tensors of a framework's caching allocator (PyTorch's "allocated").
    Tensors,
}

impl MemoryLevel {
    /// What one counted thing is called, one and many: a tensor, or an allocation.
    pub fn count_words(self) -> (&'static str, &'static str) {
        match self {
            MemoryLevel::Tensors => ("tensor", "tensors"),
            MemoryLevel::Segments => ("allocation", "allocations"),
        }
    }

    /// The level asked for, else tensors if the trace has any, else segments.
    pub fn of(r: &Replayed, asked: Option<MemoryLevel>) -> MemoryLevel {
        asked.unwrap_or(if has_tensors(r) {
            MemoryLevel::Tensors
        } else {
            MemoryLevel::Segments
        })
    }

    /// Whether memory of `kind` is counted at this level.
    pub fn counts(self, kind: MemKind) -> bool {
        match self {
            MemoryLevel::Segments => kind.is_memory(),
            MemoryLevel::Tensors => kind == MemKind::Tensor,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemoryLevel::Segments => "segments",
            MemoryLevel::Tensors => "tensors",
        }
    }
}

/// The trace recorded a framework allocator's tensors.
pub fn has_tensors(r: &Replayed) -> bool {
    r.rows
        .iter()
        .any(|row| row.kind == MemKind::Tensor && row.counters.allocations > 0)
}
