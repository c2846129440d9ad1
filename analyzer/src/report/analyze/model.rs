//! The `analyze` report's types (its JSON form), the heuristics' thresholds and their
//! plain recommendations.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::level::MemoryLevel;
use crate::report::summary::{AllocatorRow, Counts, SummaryRow};
use crate::report::TraceInfo;
use crate::symbolize::Frame;

/// Monotonic growth: at least this many lows...
pub const GROWTH_MIN_LOWS: u64 = 3;
/// ...at least this percentage of them at or above the low before...
pub const GROWTH_MIN_NON_DECREASING_PERCENT: u64 = 90;
/// ...and the last low at least this much above the first.
pub const GROWTH_MIN_BYTES: u64 = 1 << 20;
/// A site still growing: its allocations live at the end were made in at least this many
/// different cycles.
pub const GROWING_SITE_MIN_CYCLES: u64 = 3;
/// A spike: the highest crest is at least this many times the mean of the other crests...
pub const SPIKE_RATIO: u64 = 2;
/// ...and at least this much above it, with at least `SPIKE_MIN_CRESTS` crests in all.
pub const SPIKE_MIN_BYTES: u64 = 1 << 20;
pub const SPIKE_MIN_CRESTS: u64 = 3;
/// Freed only at shutdown: allocated in cycle 0 of a row that had at least this many lows,
/// and freed after the trace's last allocation.
pub const SHUTDOWN_MIN_LOWS: u64 = 2;
/// Varied sizes: a row with at least this many allocations of at least
/// `CHURN_MIN_SIZES` distinct sizes.
pub const CHURN_MIN_ALLOCATIONS: u64 = 1000;
pub const CHURN_MIN_SIZES: u64 = 64;
/// Cached but unallocated: a framework allocator's reserved peak exceeds its allocated peak
/// by at least this much, and by at least this share of the reserved peak.
pub const CACHED_MIN_BYTES: u64 = 1 << 20;
pub const CACHED_MIN_PERCENT: u64 = 25;
/// Distinct sizes are counted up to this many per row (memory stays bounded).
pub(super) const MAX_SIZES_COUNTED: usize = 4096;

/// Heuristic ids, in the order findings of equal severity are listed.
pub const HEURISTICS: [&str; 9] = [
    "out_of_memory",
    "monotonic_growth",
    "site_still_growing",
    "insufficient_cleanup",
    "spike",
    "fragmentation_failed_with_free_memory",
    "fragmentation_varied_sizes",
    "fragmentation_cached_unallocated",
    "freed_only_at_shutdown",
];

#[derive(Debug, Clone, Serialize)]
pub struct AnalyzeReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    /// What the heuristics read: a framework's tensors, or the segments.
    pub level: MemoryLevel,
    pub summary: Summary,
    /// Warnings first, then by heuristic, device, kind and bytes (largest first).
    pub findings: Vec<Finding>,
    /// One per heuristic that found something, in the order of `findings`.
    pub recommendations: Vec<Recommendation>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// As `summary`'s `totals` (all memory kinds).
    pub totals: Counts,
    /// As `summary`'s `rows`.
    pub rows: Vec<SummaryRow>,
    pub unknown_frees: u64,
    pub failed_frees: u64,
    /// As `summary`'s `allocators` (a framework allocator's figures per device).
    pub allocators: Vec<AllocatorRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// One of `HEURISTICS`.
    pub heuristic: &'static str,
    /// "warning" or "info".
    pub severity: &'static str,
    /// Device ordinal and memory kind concerned; null when the finding is about the
    /// whole trace.
    pub device: Option<i32>,
    pub kind: Option<&'static str>,
    /// The bytes the finding is about (growth, leaked, spike height, ...; see docs).
    pub bytes: u64,
    /// Allocations concerned (0 where it does not apply).
    pub count: u64,
    /// The call site concerned, if the finding is about one.
    pub stack_id: Option<u64>,
    pub frames: Vec<Frame>,
    /// One sentence, the same as the text report's.
    pub message: String,
    /// The numbers behind the finding, named per heuristic (docs/REPORTS.md).
    pub evidence: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    pub heuristic: &'static str,
    pub text: &'static str,
}

/// The plain advice for each heuristic.
pub fn recommendation(heuristic: &str) -> &'static str {
    match heuristic {
        "out_of_memory" => {
            "An allocation failed for lack of memory: `gpumemprof oom TRACE` shows what held the \
             device then, what grew in the seconds before and whether a retry succeeded."
        }
        "monotonic_growth" => {
            "Memory that is never freed grows every cycle: see `gpumemprof leaks` for the sites, \
             and drop references kept across iterations (tensors kept in a list for logging, a \
             cache without a bound)."
        }
        "site_still_growing" => {
            "Free what these sites allocate in each cycle, or reuse one buffer instead of \
             allocating a new one every iteration."
        }
        "insufficient_cleanup" => {
            "Memory was still allocated when the process exited: free it before exit (or confirm \
             that a framework owns it and releases it with the process)."
        }
        "spike" => {
            "A burst far above the usual level sets the peak: split the largest allocation at the \
             peak (smaller batches, chunked work, activation checkpointing) to lower the memory \
             the job needs."
        }
        "fragmentation_failed_with_free_memory" => {
            "An allocation failed although the device had that much memory free in total: the \
             free memory is fragmented. Allocate large long-lived buffers first, reuse buffers \
             of one size, or use a pool allocator (cudaMallocAsync with a memory pool; PyTorch: \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)."
        }
        "fragmentation_varied_sizes" => {
            "Many allocations of many different sizes fragment free memory: round sizes up to a \
             few size classes, or allocate from a pool."
        }
        "fragmentation_cached_unallocated" => {
            "PyTorch's caching allocator kept segments its tensors did not fill: memory other \
             allocations (and other processes) could not use. Try \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or a max_split_size_mb, and \
             torch.cuda.empty_cache() between phases of different shapes."
        }
        "freed_only_at_shutdown" => {
            "Memory allocated before the first cycle is held until the end: expected for model \
             weights and optimizer state; anything else can be freed as soon as it is no longer \
             needed."
        }
        _ => "",
    }
}

impl AnalyzeReport {
    /// Findings of severity "warning" (what `--fail-on-findings` counts).
    pub fn warnings(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == "warning")
            .count()
    }
}

/// "device 0 device memory": how findings name a (device, kind) row.
pub fn row_place(device: i32, kind: &str) -> String {
    format!("device {} {kind} memory", crate::units::device(device))
}

/// How a row's low points rose: the `monotonic_growth` finding's sentence after its row,
/// from the numbers of its evidence.
pub fn growth_sentence(first_low: u64, last_low: u64, lows: u64, per_cycle: u64) -> String {
    use crate::units::bytes_exact;
    format!(
        "its low points rose from {} to {} over {lows} cycles ({} per cycle)",
        bytes_exact(first_low),
        bytes_exact(last_low),
        bytes_exact(per_cycle)
    )
}
