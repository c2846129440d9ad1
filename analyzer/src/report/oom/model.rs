//! The `oom` report's types: its JSON form (docs/REPORTS.md, "oom").

use serde::Serialize;

use crate::report::TraceInfo;
use crate::symbolize::Frame;

#[derive(Debug, Clone, Serialize)]
pub struct OomReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    pub failure_counts: FailureCounts,
    /// The failure explained; `null` when the trace has no out-of-memory failure (then
    /// every field below is `null` too, except `verdict`).
    pub failure: Option<FailureInfo>,
    pub live: Option<LiveAtFailure>,
    pub growth: Option<Growth>,
    /// The NVML sample of the failing device taken at the failure (the shim samples while
    /// the failing thread waits), else the latest one before it; `null` without one (or for
    /// pinned host memory).
    pub nvml: Option<NvmlAtFailure>,
    /// The failure in PyTorch's terms, when the trace has its caching allocator's tensors
    /// on the failing device; `null` otherwise.
    pub pytorch: Option<TorchAtFailure>,
    /// `exceeds_total`, `fragmentation`, `live_data`, `untracked`, `host_memory` or
    /// `unknown` (docs/REPORTS.md says how each is decided).
    pub cause: Option<&'static str>,
    pub hint: Option<String>,
    /// One line that says it all.
    pub verdict: String,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct FailureCounts {
    /// Out-of-memory errors (allocation calls that failed with error 2), kept or not; a
    /// framework's refusal and the failed CUDA calls it made just before it count once.
    pub out_of_memory: u64,
    /// Of those, kept with their details (at most 1000): what `--index` counts.
    pub kept: u64,
    /// Kept failures that a later allocation of their size made good.
    pub transient: u64,
    /// Kept failures that nothing made good.
    pub r#final: u64,
    /// Allocation calls that failed with another error (bad arguments...).
    pub other_failed_allocations: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailureInfo {
    /// Position among the kept failures (what `--index` takes).
    pub index: usize,
    /// Position among all out-of-memory failures of the trace.
    pub ordinal: u64,
    pub time_ns: u64,
    /// The API's name from the trace header (`api#N` if the header lacks it).
    pub api: String,
    pub kind: &'static str,
    pub device: i32,
    /// Bytes requested.
    pub size: u64,
    pub tid: u32,
    /// The stream and memory pool the call named (0 when the API has none); `null` for a
    /// framework's refusal, which names neither.
    pub stream: Option<u64>,
    pub pool: Option<u64>,
    /// The API's error code (2).
    pub result: u32,
    pub stack_id: u64,
    pub frames: Vec<Frame>,
    /// The first frame outside the framework and the interpreter (the user's line).
    pub site: Option<Frame>,
    /// The device's free and total memory read right after the failure; `null` when the
    /// shim could not read them.
    pub mem_free_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    /// `transient` or `final`.
    pub outcome: &'static str,
    /// The allocation that made it transient.
    pub retry: Option<RetryInfo>,
    /// For a framework's refusal, the failed CUDA calls it made just before it on its
    /// thread (part of this one error); `null` when there were none.
    pub attempts: Option<AttemptsInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttemptsInfo {
    pub count: u64,
    /// The last attempt's API and size.
    pub api: String,
    pub size: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RetryInfo {
    pub time_ns: u64,
    pub api: String,
    pub kind: &'static str,
    pub device: i32,
    pub size: u64,
    pub tid: u32,
    pub stack_id: u64,
    /// Made by the failing thread (else: another thread, from the same stack).
    pub same_thread: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LiveAtFailure {
    /// What was counted: `device` and `managed` memory of the failing device, or all
    /// `pinned_host` memory for a pinned host request (see `scan::competes`).
    pub kinds: Vec<&'static str>,
    pub device: Option<i32>,
    pub bytes: u64,
    pub count: u64,
    pub by_kind: Vec<KindBytes>,
    /// Distinct call stacks holding live memory.
    pub sites_total: u64,
    /// Live bytes by call stack, largest first, at most `--top`.
    pub sites: Vec<SiteInfo>,
    /// The largest live allocations, at most `--top`.
    pub largest: Vec<AllocInfo>,
}

#[derive(Debug, Clone, Serialize)]
pub struct KindBytes {
    pub kind: &'static str,
    pub bytes: u64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SiteInfo {
    pub stack_id: u64,
    pub bytes: u64,
    pub count: u64,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AllocInfo {
    /// Hex string, as frame addresses.
    pub address: String,
    pub size: u64,
    pub kind: &'static str,
    pub time_ns: u64,
    pub stack_id: u64,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Growth {
    pub window_ns: u64,
    /// Failure time minus the window (0 at the earliest).
    pub start_ns: u64,
    pub bytes_at_start: u64,
    pub bytes_at_failure: u64,
    /// `bytes_at_failure - bytes_at_start` (negative when memory shrank).
    pub growth_bytes: i64,
    /// Stacks whose live bytes grew, most first, at most `--top`.
    pub sites: Vec<GrowthSite>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GrowthSite {
    pub stack_id: u64,
    pub bytes_at_start: u64,
    pub bytes_at_failure: u64,
    pub growth_bytes: i64,
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct NvmlAtFailure {
    pub device: i32,
    pub time_ns: u64,
    /// Taken at the failure (else: the latest sample before it).
    pub at_failure: bool,
    /// What NVML said this process used on the device.
    pub process_used_bytes: u64,
    /// Used by all processes.
    pub device_used_bytes: u64,
    pub device_total_bytes: u64,
    /// `device` bytes the hooks tracked live at the sample's time.
    pub tracked_bytes: u64,
    /// `process_used_bytes - tracked_bytes`: context, library workspaces, unhooked paths.
    pub untracked_bytes: u64,
    /// `device_used_bytes - process_used_bytes`: other processes on the device.
    pub other_processes_bytes: u64,
}

/// `pytorch` (see `torch.rs`).
#[derive(Debug, Clone, Serialize)]
pub struct TorchAtFailure {
    pub device: i32,
    /// The failed request (the segment the allocator asked CUDA for).
    pub tried_to_allocate_bytes: u64,
    /// Tensors live on the device at the failure, and their bytes (PyTorch's allocated).
    pub allocated_bytes: u64,
    pub tensors: u64,
    /// Device memory live on the device at the failure (PyTorch's reserved: its segments,
    /// and any other allocation of the process there).
    pub reserved_bytes: u64,
    /// `reserved_bytes - allocated_bytes`: reserved but unallocated.
    pub cached_bytes: u64,
    pub device_total_bytes: Option<u64>,
    pub device_free_bytes: Option<u64>,
    /// The message of PyTorch's `OutOfMemoryError` after "CUDA out of memory. ", as PyTorch
    /// composed it: for its refusal only (`null` for a failed CUDA call, after which PyTorch
    /// may still have recovered).
    pub message: Option<String>,
    /// The torch version whose wording `message` follows (`2.11.0+cu130`), read from its
    /// package beside the `libc10` the trace loaded; null when that package is not on this
    /// machine (2.15's wording) or for a failed CUDA call.
    pub torch_version: Option<String>,
    /// The tensors live at the failure by call stack, largest first, at most `--top`.
    pub sites: Vec<TensorSite>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TensorSite {
    pub stack_id: u64,
    pub bytes: u64,
    pub count: u64,
    /// The first frame outside the framework and the interpreter (null if none).
    pub site: Option<Frame>,
    pub frames: Vec<Frame>,
}
