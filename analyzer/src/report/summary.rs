//! `gpumemprof summary`: allocation counts, bytes, peaks and what was live at the end,
//! per (device, memory kind) and in total.

use std::io::{self, Write};

use serde::Serialize;

use super::framework::Framework;
use super::{TraceInfo, SCHEMA_VERSION};
use crate::kinds::{DeviceKinds, KindBytes};
use crate::replay::{AllocatorFigures, Counters, NvmlDevice, Replayed};
use crate::units;
use gpumemprof_format::MemKind;

#[derive(Debug, Clone, Serialize)]
pub struct SummaryReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    /// One per (device, kind), sorted by device then kind.
    pub rows: Vec<SummaryRow>,
    pub totals: Counts,
    /// Successful frees of addresses that were not live (allocated before the shim
    /// loaded, by an unhooked API, or lost events).
    pub unknown_frees: u64,
    /// Free calls that returned an error.
    pub failed_frees: u64,
    /// Allocation calls that returned an error, all rows.
    pub failed_allocations: u64,
    /// Out-of-memory errors: failed allocations with out-of-memory, where a framework
    /// allocator's refusal and the failed CUDA calls it made just before it count once.
    pub out_of_memory_errors: u64,
    /// What NVML saw this process use per device, against what the hooks tracked;
    /// empty when the trace has no NVML samples.
    pub nvml: Vec<NvmlRow>,
    /// Whether the allocations are tensors or a framework allocator's segments.
    pub framework: Framework,
    /// A framework allocator's own figures per device, from its tensor records (empty
    /// when the trace has none): PyTorch's allocated and reserved bytes.
    pub allocators: Vec<AllocatorRow>,
    /// Each device's device memory at its peak by the library that asked for it
    /// (`libraries`): PyTorch's caching allocator, a library's own, the program's.
    pub libraries_at_peak: Vec<super::libraries::LibraryBytes>,
    /// With `--by range` only: the same memory by NVTX range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_range: Option<super::by_range::SummaryByRange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NvmlRow {
    /// NVML device index.
    pub device: i32,
    pub samples: u64,
    /// The most NVML saw this process use on the device, and when.
    pub peak_used_bytes: u64,
    pub peak_time_ns: u64,
    /// Device bytes live in the hooks' view at that time.
    pub tracked_at_peak_bytes: u64,
    /// `peak_used_bytes - tracked_at_peak_bytes`: the CUDA context, library workspaces,
    /// allocations by paths the hooks do not see.
    pub untracked_at_peak_bytes: u64,
    pub last_used_bytes: u64,
    pub last_time_ns: u64,
    pub tracked_at_last_bytes: u64,
    pub untracked_at_last_bytes: u64,
    pub device_total_bytes: u64,
    /// The hooks' peak of device memory on this device and when: when it is above
    /// `peak_used_bytes`, NVML's samples missed the peak (none was taken near it), and
    /// `peak_used_bytes` is not the most the process used.
    pub tracked_peak_bytes: u64,
    pub tracked_peak_time_ns: u64,
}

impl NvmlRow {
    /// NVML's samples missed the hooks' peak (see `tracked_peak_bytes`).
    pub fn missed_peak(&self) -> bool {
        self.tracked_peak_bytes > self.peak_used_bytes
    }
}

impl From<&NvmlDevice> for NvmlRow {
    fn from(d: &NvmlDevice) -> NvmlRow {
        NvmlRow {
            device: d.device,
            samples: d.samples,
            peak_used_bytes: d.peak.process_used,
            peak_time_ns: d.peak.time_ns,
            tracked_at_peak_bytes: d.tracked_at_peak,
            untracked_at_peak_bytes: d.untracked_at_peak(),
            last_used_bytes: d.last.process_used,
            last_time_ns: d.last.time_ns,
            tracked_at_last_bytes: d.tracked_at_last,
            untracked_at_last_bytes: d.untracked_at_last(),
            device_total_bytes: d.last.device_total,
            tracked_peak_bytes: 0,
            tracked_peak_time_ns: 0,
        }
    }
}

/// `allocators[]`: what the framework's caching allocator said of itself on one device,
/// in PyTorch's words (`torch.cuda.memory_stats()`).
#[derive(Debug, Clone, Serialize)]
pub struct AllocatorRow {
    pub device: i32,
    /// `pytorch` or `tensorflow` (whose `reserved_bytes` and `reserved_peak_bytes` are 0:
    /// its BFC allocator reports no reserved figure per change).
    pub framework: &'static str,
    /// Tensors handed out and taken back (`allocation.all.allocated` and `.freed`).
    pub tensor_allocations: u64,
    pub tensor_frees: u64,
    /// After the allocator's last tensor event (`allocated_bytes.all.current` and
    /// `reserved_bytes.all.current` then: a cache release after it, as `emptyCache` or an
    /// out-of-memory retry, shows in the segment rows only) and at their highest over the
    /// run (`.peak`).
    pub allocated_bytes: u64,
    pub allocated_peak_bytes: u64,
    pub reserved_bytes: u64,
    pub reserved_peak_bytes: u64,
    /// `reserved_bytes - allocated_bytes`: cached in segments, in no tensor (0 for
    /// TensorFlow).
    pub cached_bytes: u64,
    /// PyTorch only: the tensors at `allocated_peak_bytes` by kind of memory (`kinds`),
    /// every kind listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds_at_peak: Option<Vec<KindBytes>>,
}

impl From<&AllocatorFigures> for AllocatorRow {
    fn from(f: &AllocatorFigures) -> AllocatorRow {
        AllocatorRow {
            device: f.device,
            framework: crate::replay::framework_name(f.framework),
            tensor_allocations: f.allocations,
            tensor_frees: f.frees,
            allocated_bytes: f.allocated,
            allocated_peak_bytes: f.peak_allocated,
            reserved_bytes: f.reserved,
            reserved_peak_bytes: f.peak_reserved,
            cached_bytes: f.reserved.saturating_sub(f.allocated),
            kinds_at_peak: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    /// CUDA device ordinal; -1 when the shim could not tell.
    pub device: i32,
    /// "device", "managed", "pinned_host", "address_reservation", "vmm_handle", "tensor"
    /// or "other". Reservations, VMM handles and tensors are not in `totals`.
    pub kind: &'static str,
    #[serde(flatten)]
    pub counts: Counts,
}

/// The integer fields of a row (and of the totals). Bytes are bytes; times are ns since
/// the trace started.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Counts {
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    pub live_bytes_at_end: u64,
    pub live_allocations_at_end: u64,
    pub failed_allocations: u64,
}

impl From<&Counters> for Counts {
    fn from(c: &Counters) -> Counts {
        Counts {
            allocations: c.allocations,
            frees: c.frees,
            bytes_allocated: c.bytes_allocated,
            bytes_freed: c.bytes_freed,
            peak_bytes: c.peak_bytes,
            peak_time_ns: c.peak_time_ns,
            live_bytes_at_end: c.live_bytes,
            live_allocations_at_end: c.live_allocations,
            failed_allocations: c.failed_allocations,
        }
    }
}

pub fn build(trace: TraceInfo, r: &Replayed) -> SummaryReport {
    let framework = trace.framework.clone().with_libraries(&r.modules);
    SummaryReport {
        schema_version: SCHEMA_VERSION,
        trace,
        rows: r
            .rows
            .iter()
            .map(|row| SummaryRow {
                device: row.device,
                kind: row.kind.name(),
                counts: Counts::from(&row.counters),
            })
            .collect(),
        totals: Counts::from(&r.totals),
        unknown_frees: r.unknown_frees,
        failed_frees: r.failed_frees,
        failed_allocations: r.totals.failed_allocations,
        out_of_memory_errors: r.out_of_memory_errors,
        nvml: r
            .nvml
            .iter()
            .map(|d| {
                let peak = r
                    .rows
                    .iter()
                    .find(|row| row.device == d.device && row.kind == MemKind::Device);
                NvmlRow {
                    tracked_peak_bytes: peak.map_or(0, |row| row.counters.peak_bytes),
                    tracked_peak_time_ns: peak.map_or(0, |row| row.counters.peak_time_ns),
                    ..NvmlRow::from(d)
                }
            })
            .collect(),
        framework,
        allocators: r.allocators.iter().map(AllocatorRow::from).collect(),
        libraries_at_peak: super::libraries::at_peaks(r),
        by_range: None,
    }
}

/// Adds each PyTorch device's kinds of memory at its peak (`kinds::at_peaks`).
pub fn add_kinds(report: &mut SummaryReport, kinds: &[DeviceKinds]) {
    for a in &mut report.allocators {
        a.kinds_at_peak = (kinds.iter())
            .find(|k| k.device == a.device && a.framework == "pytorch")
            .map(|k| k.kinds.clone());
    }
}

pub fn write_text(report: &SummaryReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    if report.allocators.is_empty() {
        report.framework.write_text(out)?;
    } else {
        for a in &report.allocators {
            writeln!(out, "{}", allocator_line(a))?;
            if let Some(kinds) = &a.kinds_at_peak {
                let line = super::peak::kinds_line(kinds);
                writeln!(out, "  at the allocated peak, by kind: {line}")?;
            }
        }
        writeln!(
            out,
            "(rows: `tensor` is what the allocator handed out, its allocated bytes; the \
             other kinds are the segments it reserved from CUDA)\n"
        )?;
    }
    if report.rows.is_empty() {
        writeln!(out, "no allocations recorded")?;
    } else {
        if narrow() {
            writeln!(
                out,
                "{:>6}  {:<19}  {:>9}  {:>10}  {:>10}  {:>6}",
                "device", "kind", "allocs", "peak", "live@end", "failed"
            )?;
        } else {
            writeln!(
                out,
                "{:>6}  {:<19}  {:>9}  {:>9}  {:>10}  {:>10}  {:>10}  {:>9}  {:>10}  {:>7}  {:>6}",
                "device",
                "kind",
                "allocs",
                "frees",
                "allocated",
                "freed",
                "peak",
                "peak at",
                "live@end",
                "(count)",
                "failed"
            )?;
        }
        for row in &report.rows {
            line(out, &units::device(row.device), row.kind, &row.counts)?;
        }
        if report.rows.len() > 1 {
            line(out, "all", "", &report.totals)?;
        }
    }
    writeln!(out)?;
    // With tensors, these totals are the segments (reserved), not what the tensors hold.
    let what = if report.allocators.is_empty() {
        ""
    } else {
        "memory from CUDA (segments and other allocations): "
    };
    writeln!(
        out,
        "{what}peak {} at {}; live at end {}",
        units::bytes_exact(report.totals.peak_bytes),
        units::secs(report.totals.peak_time_ns),
        units::bytes_exact(report.totals.live_bytes_at_end)
    )?;
    super::libraries::write_text(&report.libraries_at_peak, out)?;
    write!(
        out,
        "unknown frees {}, failed frees {}, failed allocations {}",
        report.unknown_frees, report.failed_frees, report.failed_allocations
    )?;
    if report.out_of_memory_errors > 0 {
        write!(
            out,
            " ({}; a framework's refusal and the failed CUDA calls before it count once)",
            units::plural(
                report.out_of_memory_errors,
                "out-of-memory error",
                "out-of-memory errors"
            )
        )?;
    }
    writeln!(out)?;
    for n in &report.nvml {
        if n.missed_peak() {
            // Comparing with a sample from before the rise would blame the hooks.
            writeln!(
                out,
                "NVML device {}: the highest of its {} was {} at {}, below the hooks' peak of {} at {}: no sample came near the peak, so NVML's view of it is unknown",
                n.device,
                units::plural(n.samples, "sample", "samples"),
                units::bytes_exact(n.peak_used_bytes),
                units::secs(n.peak_time_ns),
                units::bytes_exact(n.tracked_peak_bytes),
                units::secs(n.tracked_peak_time_ns)
            )?;
            continue;
        }
        writeln!(
            out,
            "NVML device {}: this process used at most {} (at {}), hooks tracked {} then: {} not seen by the hooks (context, library workspaces)",
            n.device,
            units::bytes_exact(n.peak_used_bytes),
            units::secs(n.peak_time_ns),
            units::bytes_exact(n.tracked_at_peak_bytes),
            units::bytes_exact(n.untracked_at_peak_bytes)
        )?;
    }
    if let Some(b) = &report.by_range {
        super::by_range::write_summary(b, out)?;
    }
    Ok(())
}

/// One allocator's figures in text. TensorFlow's BFC allocator reports no reserved
/// figure: its regions are the device rows.
pub fn allocator_line(a: &AllocatorRow) -> String {
    let b = units::bytes;
    let tf = a.framework == "tensorflow";
    let name = if tf {
        "TensorFlow BFC allocator"
    } else {
        "PyTorch caching allocator"
    };
    // The peaks first: what PyTorch's max_memory_allocated() and max_memory_reserved() say.
    let mut s = format!(
        "{name}, device {}: peak allocated {}",
        units::device(a.device),
        units::bytes_exact(a.allocated_peak_bytes)
    );
    if !tf {
        s += &format!(", peak reserved {}", b(a.reserved_peak_bytes));
    }
    s += &format!(
        "; {} allocated, {} freed",
        units::plural(a.tensor_allocations, "tensor", "tensors"),
        a.tensor_frees
    );
    if tf {
        s += &format!(
            "; at its last tensor event {} allocated (its regions are the device rows)",
            b(a.allocated_bytes)
        );
    } else {
        s += &format!(
            "; at its last tensor event {} allocated, {} reserved ({} cached in no tensor)",
            b(a.allocated_bytes),
            b(a.reserved_bytes),
            b(a.cached_bytes)
        );
    }
    s
}

/// The full table is 125 columns: on a narrower terminal, the columns that matter most
/// (the JSON has them all).
fn narrow() -> bool {
    crate::fit::width().is_some_and(|w| w < 125)
}

fn line(out: &mut dyn Write, device: &str, kind: &str, c: &Counts) -> io::Result<()> {
    if narrow() {
        return writeln!(
            out,
            "{:>6}  {:<19}  {:>9}  {:>10}  {:>10}  {:>6}",
            device,
            kind,
            c.allocations,
            units::bytes(c.peak_bytes),
            units::bytes(c.live_bytes_at_end),
            c.failed_allocations
        );
    }
    writeln!(
        out,
        "{:>6}  {:<19}  {:>9}  {:>9}  {:>10}  {:>10}  {:>10}  {:>9}  {:>10}  {:>7}  {:>6}",
        device,
        kind,
        c.allocations,
        c.frees,
        units::bytes(c.bytes_allocated),
        units::bytes(c.bytes_freed),
        units::bytes(c.peak_bytes),
        units::secs(c.peak_time_ns),
        units::bytes(c.live_bytes_at_end),
        c.live_allocations_at_end,
        c.failed_allocations
    )
}
