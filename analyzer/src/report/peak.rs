//! `gpumemprof peak`: for each (device, kind), the moment live memory was highest and the
//! call sites (stacks) that held it then, largest first.

use std::io::{self, Write};

use serde::Serialize;

use super::level::{site, MemoryLevel};
use super::{write_frames, TraceInfo, SCHEMA_VERSION};
use crate::kinds::KindBytes;
use crate::replay::Replayed;
use crate::symbolize::{Frame, Symbolizer};
use crate::units;
use gpumemprof_format::MemKind;

#[derive(Debug, Clone, Serialize)]
pub struct PeakReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    /// What is counted: `tensors` (a framework allocator's, when the trace has them) or
    /// `segments` (what was allocated from CUDA).
    pub level: MemoryLevel,
    /// One per (device, kind) that allocated anything at that level, sorted by device
    /// then kind.
    pub peaks: Vec<Peak>,
    /// The peak of all memory together (every device and kind; `summary`'s
    /// `totals.peak_bytes`, what `--max-peak` checks) and when it was first reached.
    pub total_peak_bytes: u64,
    pub total_peak_time_ns: u64,
    /// With `--by range` only: the peak of all memory by NVTX range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_range: Option<super::by_range::PeakByRange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Peak {
    pub device: i32,
    pub kind: &'static str,
    pub peak_bytes: u64,
    /// First time the peak was reached, ns since the trace started.
    pub peak_time_ns: u64,
    /// Live memory at the peak by stack, largest first, at most `--top`.
    pub sites: Vec<PeakSite>,
    /// Tensors only: the peak by kind of memory (`kinds`), every kind listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<KindBytes>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PeakSite {
    /// The interned stack id (0: no stack captured).
    pub stack_id: u64,
    /// Bytes this stack held live at the peak.
    pub bytes: u64,
    /// Allocations this stack held live at the peak.
    pub count: u64,
    /// The first frame outside the framework and the interpreter: the user's line
    /// (null when every frame is theirs).
    pub site: Option<Frame>,
    pub frames: Vec<Frame>,
}

/// `top`: sites per peak (0: all); `frames`: frames per site (0: all).
pub fn build(
    trace: TraceInfo,
    r: &Replayed,
    sym: &mut Symbolizer,
    top: usize,
    frames: usize,
    level: MemoryLevel,
) -> PeakReport {
    let kinds = crate::kinds::at_peaks(r, sym);
    let peaks = r
        .rows
        .iter()
        .filter(|row| level.counts(row.kind) && row.counters.allocations > 0)
        .map(|row| {
            let mut sites = row.peak_sites.clone();
            // Largest first; ties in a fixed order so reports are reproducible.
            sites.sort_by(|a, b| {
                b.bytes
                    .cmp(&a.bytes)
                    .then(b.count.cmp(&a.count))
                    .then(a.stack.cmp(&b.stack))
            });
            if top > 0 {
                sites.truncate(top);
            }
            Peak {
                device: row.device,
                kind: row.kind.name(),
                peak_bytes: row.counters.peak_bytes,
                peak_time_ns: row.counters.peak_time_ns,
                sites: sites
                    .iter()
                    .map(|s| PeakSite {
                        stack_id: s.stack,
                        bytes: s.bytes,
                        count: s.count,
                        site: site(&sym.stack(s.stack, 0)).cloned(),
                        frames: sym.stack(s.stack, frames),
                    })
                    .collect(),
                kinds: (row.kind == MemKind::Tensor)
                    .then(|| kinds.iter().find(|k| k.device == row.device))
                    .flatten()
                    .map(|k| k.kinds.clone()),
            }
        })
        .collect();
    PeakReport {
        schema_version: SCHEMA_VERSION,
        trace,
        level,
        peaks,
        total_peak_bytes: r.totals.peak_bytes,
        total_peak_time_ns: r.totals.peak_time_ns,
        by_range: None,
    }
}

pub fn write_text(report: &PeakReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    if let Some(b) = &report.by_range {
        // By range instead of by call site.
        return super::by_range::write_peak(b, out);
    }
    if report.peaks.is_empty() {
        return writeln!(out, "no allocations recorded");
    }
    for (i, peak) in report.peaks.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let what = super::level::kind_words(peak.kind);
        writeln!(
            out,
            "device {} {what}: peak {} at {}",
            units::device(peak.device),
            units::bytes_exact(peak.peak_bytes),
            units::secs(peak.peak_time_ns)
        )?;
        if let Some(kinds) = &peak.kinds {
            writeln!(out, "  by kind of memory: {}", kinds_line(kinds))?;
        }
        let (one, many) = super::level::count_words(peak.kind);
        for (n, site) in peak.sites.iter().enumerate() {
            writeln!(
                out,
                "  #{} {} in {}{} (stack {})",
                n + 1,
                units::bytes_exact(site.bytes),
                units::plural(site.count, one, many),
                super::level::from_site(site.site.as_ref(), &site.frames),
                site.stack_id
            )?;
            write_frames(out, &site.frames, "      ")?;
        }
    }
    writeln!(
        out,
        "\nall memory together (what --max-peak checks): peak {} at {}",
        units::bytes_exact(report.total_peak_bytes),
        units::secs(report.total_peak_time_ns)
    )
}

/// `parameters 1.8 MiB, optimizer state 3.5 MiB, ...`: the kinds that hold anything.
pub fn kinds_line(kinds: &[KindBytes]) -> String {
    let held: Vec<String> = (kinds.iter())
        .filter(|k| k.tensors > 0)
        .map(|k| format!("{} {}", k.kind, units::bytes(k.bytes)))
        .collect();
    if held.is_empty() {
        "none".to_string()
    } else {
        held.join(", ")
    }
}
