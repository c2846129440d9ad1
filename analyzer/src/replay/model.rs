//! What the replay keeps and hands to the reports: live and failed allocations, sites,
//! counters per (device, kind) row, stacks, NVML samples, capture statistics. (The whole
//! result, `Replayed`, is in `pass.rs`, beside what makes it.)

use gpumemprof_format::{Ending, MemKind, Sample, Tensor};

/// Failed allocations kept with their details for reports; later ones are only counted.
/// A program that retries a failing allocation in a loop must not grow our memory.
pub const MAX_KEPT_FAILURES: usize = 1000;

/// An allocation that is live (allocated, not yet freed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveAlloc {
    pub address: u64,
    pub time_ns: u64,
    pub size: u64,
    pub stack: u64,
    pub device: i32,
    pub kind: MemKind,
}

/// An allocation released, with the stack and time of the free that released it: what the
/// replay keeps of the frees after the last allocation, when asked (`Replay::keeping_exit`;
/// `report::teardown` reads them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub alloc: LiveAlloc,
    pub free_stack: u64,
    pub time_ns: u64,
}

/// A failed allocation call, kept for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedAlloc {
    pub time_ns: u64,
    pub api: u16,
    pub size: u64,
    pub device: i32,
    pub kind: MemKind,
    pub result: u32,
    pub stack: u64,
    /// A failed CUDA call of a framework allocator that refused the block right after, on
    /// the same thread (`attempts`): part of that one out-of-memory, not one of its own.
    pub attempt: bool,
}

/// Bytes and allocation count attributed to one stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Site {
    pub stack: u64,
    pub bytes: u64,
    pub count: u64,
}

/// Counters of one (device, kind) row, or of all rows together (`Replayed::totals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub allocations: u64,
    /// Successful frees that matched a live allocation.
    pub frees: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    pub live_bytes: u64,
    pub live_allocations: u64,
    pub peak_bytes: u64,
    /// First time `peak_bytes` was reached (ns since the trace's start).
    pub peak_time_ns: u64,
    pub failed_allocations: u64,
}

impl Counters {
    /// Adds a live allocation; true when it made a new high-water mark.
    pub(crate) fn add(&mut self, size: u64, time_ns: u64) -> bool {
        self.allocations += 1;
        self.bytes_allocated = self.bytes_allocated.saturating_add(size);
        self.live_bytes = self.live_bytes.saturating_add(size);
        self.live_allocations += 1;
        // Strictly greater: the peak time is the first time the peak was reached.
        if self.live_bytes > self.peak_bytes {
            self.peak_bytes = self.live_bytes;
            self.peak_time_ns = time_ns;
            true
        } else {
            false
        }
    }

    pub(crate) fn remove(&mut self, size: u64) {
        self.frees += 1;
        self.bytes_freed = self.bytes_freed.saturating_add(size);
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.live_allocations = self.live_allocations.saturating_sub(1);
    }
}

/// One (device, kind) row of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub device: i32,
    pub kind: MemKind,
    pub counters: Counters,
    /// Live bytes per stack at this row's peak (unsorted; empty if it never allocated).
    pub peak_sites: Vec<Site>,
}

/// An interned stack: return addresses, innermost first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackInfo {
    pub frames: Vec<u64>,
    /// Time of the first event that used it (selects among modules loaded at one range).
    pub first_use_ns: Option<u64>,
}

/// The shim's capture statistics as the trace tells them (events, queue waits, drops,
/// whether it ended cleanly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaptureStats {
    pub events: u64,
    pub queue_waits: u64,
    pub dropped: u64,
    /// An End record was seen: the process closed the trace cleanly.
    pub complete: bool,
    /// Time of the latest record (ns since the trace's start).
    pub duration_ns: u64,
    /// Records of kinds this analyzer does not know (written by a newer shim).
    pub unknown_records: u64,
    /// How the process ended, when the shim recorded it (an exit status or a fatal
    /// signal); `None` for traces of older shims and processes still running or killed
    /// by SIGKILL.
    pub ending: Option<Ending>,
    /// Recording stopped before the process ended (a write to the trace failed): why, and
    /// when (ns since the trace started).
    pub stopped: Option<(gpumemprof_format::StopReason, u64)>,
}

/// What NVML said about one device over the run, next to what the hooks tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NvmlDevice {
    /// NVML device index (taken to be the CUDA ordinal: true unless
    /// `CUDA_VISIBLE_DEVICES` or `CUDA_DEVICE_ORDER` reorder devices).
    pub device: i32,
    pub samples: u64,
    /// The sample where NVML saw this process use the most memory on the device (of
    /// several at that value, the one where the hooks tracked the most).
    pub peak: Sample,
    /// Device bytes the hooks tracked as live on that device at `peak`'s time.
    pub tracked_at_peak: u64,
    /// The last sample, and the tracked bytes at its time.
    pub last: Sample,
    pub tracked_at_last: u64,
}

impl NvmlDevice {
    /// Memory the hooks did not see at NVML's peak (context, library workspaces).
    pub fn untracked_at_peak(&self) -> u64 {
        self.peak.process_used.saturating_sub(self.tracked_at_peak)
    }
    pub fn untracked_at_last(&self) -> u64 {
        self.last.process_used.saturating_sub(self.tracked_at_last)
    }
}

/// A change to live memory made by one record, as `Replay::record_changes` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveChange {
    /// An allocation became live.
    Added(LiveAlloc),
    /// A live allocation was released.
    Released(LiveAlloc),
}

/// A framework allocator's own figures on one device, as its tensor records carry them
/// (PyTorch's `allocated_bytes` and `reserved_bytes` after each change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocatorFigures {
    pub device: i32,
    /// `Tensor::framework` (1: PyTorch).
    pub framework: u8,
    /// Tensor records seen: allocations and frees.
    pub allocations: u64,
    pub frees: u64,
    /// The figures after the last record.
    pub allocated: u64,
    pub reserved: u64,
    /// The highest of each over the run (each at its own moment, as PyTorch's
    /// `allocated_bytes.all.peak` and `reserved_bytes.all.peak`).
    pub peak_allocated: u64,
    pub peak_reserved: u64,
}

/// A tensor record's framework as reports name it: `pytorch`, `tensorflow`, else `other`.
pub fn framework_name(framework: u8) -> &'static str {
    match framework {
        gpumemprof_format::FRAMEWORK_PYTORCH => "pytorch",
        gpumemprof_format::FRAMEWORK_TENSORFLOW => "tensorflow",
        _ => "other",
    }
}

/// A framework's name (`framework_name`'s, or `jax`) as the text reports write it.
pub fn framework_title(name: &str) -> &'static str {
    match name {
        "pytorch" => "PyTorch",
        "tensorflow" => "TensorFlow",
        "jax" => "JAX",
        _ => "the framework",
    }
}

impl AllocatorFigures {
    pub(crate) fn apply(&mut self, t: &Tensor) {
        if t.delta >= 0 {
            self.allocations += 1;
        } else {
            self.frees += 1;
        }
        self.allocated = t.allocated;
        self.reserved = t.reserved;
        self.peak_allocated = self.peak_allocated.max(t.allocated);
        self.peak_reserved = self.peak_reserved.max(t.reserved);
    }
}
