//! `--by range` of `summary`, `peak` and `leaks`: the same memory grouped by the NVTX range
//! that was innermost on the allocating thread when the allocation was made (`replay/ranges.rs`
//! attributes it during the replay). Each report gets a `by_range` object in JSON and a
//! range table in text. A trace without NVTX records has one group, `<no range>`.

use std::io::{self, Write};

use serde::Serialize;

use crate::replay::ranges::{Group, NvtxCounts, Ranges, RangesResult, NO_RANGE};
use crate::replay::Replayed;
use crate::units;

/// How `summary`, `peak` and `leaks` group memory (`--by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// The innermost NVTX range open on the allocating thread.
    Range,
}

/// `summary`'s `by_range`.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryByRange {
    /// Every range that allocated, and `<no range>`; most bytes allocated first.
    pub ranges: Vec<SummaryRange>,
    pub nvtx: NvtxCounts,
}

#[derive(Debug, Clone, Serialize)]
pub struct SummaryRange {
    /// The range's message; `<no range>`, or `<unnamed>` for a range without one.
    pub range: String,
    /// The range's NVTX domain; null for the default domain.
    pub domain: Option<String>,
    pub allocations: u64,
    pub frees: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    /// Bytes (and allocations) of this range live at the peak of all memory
    /// (`totals.peak_bytes`).
    pub peak_bytes: u64,
    pub peak_allocations: u64,
    /// The most bytes of this range live at once, whenever that was (what
    /// `--max-range-peak` checks).
    pub range_peak_bytes: u64,
    pub live_bytes_at_end: u64,
    pub live_allocations_at_end: u64,
}

/// `peak`'s `by_range`: the peak of all memory (summary's `totals.peak_bytes`), by range.
#[derive(Debug, Clone, Serialize)]
pub struct PeakByRange {
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// Ranges holding memory at the peak, largest first, at most `--top`.
    pub ranges: Vec<RangeBytes>,
}

/// `leaks`' `by_range`.
#[derive(Debug, Clone, Serialize)]
pub struct LeaksByRange {
    /// Ranges holding memory at the end, largest first, at most `--top`.
    pub ranges: Vec<RangeBytes>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RangeBytes {
    pub range: String,
    pub domain: Option<String>,
    pub bytes: u64,
    pub count: u64,
    /// `leaks` only: earliest and latest allocation time among them, ns since the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_time_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_time_ns: Option<u64>,
}

/// The groups of the replay, or the one `<no range>` group of a trace without NVTX.
fn result(r: &Replayed) -> RangesResult {
    match &r.ranges {
        Some(ranges) => ranges.clone(),
        None => Ranges::new(&r.totals, r.peak_allocations).finish(&r.live),
    }
}

/// Ties in a fixed order: `<no range>` first, then by domain and name.
fn tie(a: &Group, b: &Group) -> std::cmp::Ordering {
    let key = |g: &Group| (g.name != NO_RANGE, g.domain.clone(), g.name.clone());
    key(a).cmp(&key(b))
}

pub fn summary(r: &Replayed) -> SummaryByRange {
    let mut res = result(r);
    res.groups.sort_by(|a, b| {
        b.counts
            .bytes_allocated
            .cmp(&a.counts.bytes_allocated)
            .then_with(|| tie(a, b))
    });
    SummaryByRange {
        ranges: res
            .groups
            .into_iter()
            .map(|g| SummaryRange {
                range: g.name,
                domain: g.domain,
                allocations: g.counts.allocations,
                frees: g.counts.frees,
                bytes_allocated: g.counts.bytes_allocated,
                bytes_freed: g.counts.bytes_freed,
                peak_bytes: g.counts.peak_bytes,
                peak_allocations: g.counts.peak_allocations,
                range_peak_bytes: g.counts.own_peak_bytes,
                live_bytes_at_end: g.counts.live_bytes,
                live_allocations_at_end: g.counts.live_allocations,
            })
            .collect(),
        nvtx: res.nvtx,
    }
}

/// Groups with `count` > 0 by `bytes`, largest first, at most `top` (0: all).
fn largest(
    mut groups: Vec<Group>,
    top: usize,
    of: impl Fn(&Group) -> (u64, u64),
) -> Vec<(Group, u64, u64)> {
    groups.retain(|g| of(g).1 > 0);
    groups.sort_by(|a, b| of(b).cmp(&of(a)).then_with(|| tie(a, b)));
    if top > 0 {
        groups.truncate(top);
    }
    groups
        .into_iter()
        .map(|g| {
            let (bytes, count) = of(&g);
            (g, bytes, count)
        })
        .collect()
}

pub fn peak(r: &Replayed, top: usize) -> PeakByRange {
    let groups = largest(result(r).groups, top, |g| {
        (g.counts.peak_bytes, g.counts.peak_allocations)
    });
    PeakByRange {
        peak_bytes: r.totals.peak_bytes,
        peak_time_ns: r.totals.peak_time_ns,
        ranges: groups
            .into_iter()
            .map(|(g, bytes, count)| RangeBytes {
                range: g.name,
                domain: g.domain,
                bytes,
                count,
                first_time_ns: None,
                last_time_ns: None,
            })
            .collect(),
    }
}

pub fn leaks(r: &Replayed, top: usize) -> LeaksByRange {
    let groups = largest(result(r).groups, top, |g| {
        (g.counts.live_bytes, g.counts.live_allocations)
    });
    LeaksByRange {
        ranges: groups
            .into_iter()
            .map(|(g, bytes, count)| RangeBytes {
                first_time_ns: Some(g.counts.first_live_ns),
                last_time_ns: Some(g.counts.last_live_ns),
                range: g.name,
                domain: g.domain,
                bytes,
                count,
            })
            .collect(),
    }
}

/// `forward`, or `data_load (domain trainer)`.
fn label(range: &str, domain: &Option<String>) -> String {
    match domain {
        Some(d) => format!("{range} (domain {d})"),
        None => range.to_string(),
    }
}

pub fn write_summary(b: &SummaryByRange, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "\nby NVTX range (the innermost range open on the allocating thread):"
    )?;
    writeln!(
        out,
        "{:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}  range",
        "allocs", "allocated", "freed", "at peak", "live@end", "(count)"
    )?;
    for g in &b.ranges {
        writeln!(
            out,
            "{:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}  {}",
            g.allocations,
            units::bytes(g.bytes_allocated),
            units::bytes(g.bytes_freed),
            units::bytes(g.peak_bytes),
            units::bytes(g.live_bytes_at_end),
            g.live_allocations_at_end,
            label(&g.range, &g.domain)
        )?;
    }
    let n = &b.nvtx;
    writeln!(
        out,
        "NVTX: {}, {}, {}, {}, {}; {} closing nothing",
        units::plural(n.pushes, "push", "pushes"),
        units::plural(n.pops, "pop", "pops"),
        units::plural(n.starts, "start", "starts"),
        units::plural(n.ends, "end", "ends"),
        units::plural(n.marks, "mark", "marks"),
        n.unmatched
    )
}

fn write_groups(out: &mut dyn Write, groups: &[RangeBytes]) -> io::Result<()> {
    for (i, g) in groups.iter().enumerate() {
        let when = match (g.first_time_ns, g.last_time_ns) {
            (Some(a), Some(b)) => format!(", allocated {}", units::span(a, b)),
            _ => String::new(),
        };
        writeln!(
            out,
            "  #{} {} in {}: {}{when}",
            i + 1,
            units::bytes_exact(g.bytes),
            units::plural(g.count, "allocation", "allocations"),
            label(&g.range, &g.domain)
        )?;
    }
    Ok(())
}

pub fn write_peak(b: &PeakByRange, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "all memory: peak {} at {}, by NVTX range (innermost on the allocating thread):",
        units::bytes_exact(b.peak_bytes),
        units::secs(b.peak_time_ns)
    )?;
    write_groups(out, &b.ranges)
}

pub fn write_leaks(b: &LeaksByRange, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "by NVTX range (innermost on the allocating thread):")?;
    write_groups(out, &b.ranges)
}
