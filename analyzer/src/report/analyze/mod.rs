//! `gpumemprof analyze`: one report of the whole trace: its summary, leak heuristics,
//! signs of fragmentation, and plain recommendations. Every heuristic is deterministic:
//! it depends on the order of events, never on their timing, so a program run twice gives
//! the same findings.
//!
//! The heuristics read each (device, kind)'s live bytes as a series of **cycles**: a
//! training step, a request, any loop that allocates then frees. A *low* is the live level
//! where frees give way to allocations again; a *crest* the level where allocations give
//! way to frees. The cycle an allocation belongs to is the number of lows of its row
//! before it.
//!
//! ```text
//!  live      crest   crest   crest         (weights freed at shutdown: no low after)
//!   │        /\      /\      /\
//!   │   /\  /  \    /  \    /  \
//!   │  /  \/    \  /    \  /    \
//!   │ /   low    \/  low \/      \
//!   └────────────────────────────────► events
//!      cycle 0 │ cycle 1 │ cycle 2 │ ...
//! ```
//!
//! Definitions and thresholds are the constants below, documented in docs/REPORTS.md.

//!
//! Files: `model` (the report, thresholds, recommendations), `heuristics` (the observer
//! and its findings), `causes` (one finding per cause); `build` and `write_text` below. `cmd/analyze.rs` holds the flags.

mod causes;
mod heuristics;
mod model;

pub use heuristics::Analysis;
pub use model::*;

use std::io::{self, Write};

use crate::replay::Replayed;
use crate::report::level::MemoryLevel;
use crate::report::oom::OomReport;
use crate::report::teardown::Teardown;
use crate::report::{write_frames, TraceInfo, SCHEMA_VERSION};
use crate::symbolize::Symbolizer;
use crate::term::{BOLD, DIM, WARN};
use crate::units;

/// The report at `level`; `oom`: the `oom` report of its out-of-memory failure, if it had
/// one (its verdict is the first finding); `teardown`: the interpreter's, if the trace
/// shows one.
#[allow(clippy::too_many_arguments)]
pub fn build(
    trace: TraceInfo,
    r: &Replayed,
    analysis: Analysis,
    sym: &mut Symbolizer,
    frames: usize,
    oom: Option<&OomReport>,
    level: MemoryLevel,
    teardown: Option<&Teardown>,
) -> AnalyzeReport {
    let mut findings: Vec<Finding> = oom.and_then(oom_finding).into_iter().collect();
    findings.extend(analysis.findings(&trace, r, sym, frames, level, teardown));
    let findings = causes::fold_growth(findings);
    let mut recommendations: Vec<Recommendation> = Vec::new();
    for f in &findings {
        if !recommendations.iter().any(|x| x.heuristic == f.heuristic) {
            recommendations.push(Recommendation {
                heuristic: f.heuristic,
                text: recommendation(f.heuristic),
            });
        }
    }
    let summary = crate::report::summary::build(trace.clone(), r);
    AnalyzeReport {
        schema_version: SCHEMA_VERSION,
        trace,
        level,
        summary: Summary {
            totals: summary.totals,
            rows: summary.rows,
            unknown_frees: summary.unknown_frees,
            failed_frees: summary.failed_frees,
            allocators: summary.allocators,
        },
        findings,
        recommendations,
    }
}

/// The out-of-memory failure `oom` explains, as a finding: its verdict, the failing call's
/// stack, and the numbers of its report.
fn oom_finding(oom: &OomReport) -> Option<Finding> {
    let f = oom.failure.as_ref()?;
    let counts = &oom.failure_counts;
    let mut evidence = vec![
        ("requested_bytes", f.size),
        ("failures", counts.out_of_memory),
        ("final_failures", counts.r#final),
        ("transient_failures", counts.transient),
        ("live_bytes", oom.live.as_ref().map_or(0, |l| l.bytes)),
    ];
    evidence.extend(f.mem_free_bytes.map(|b| ("free_bytes", b)));
    evidence.extend(f.mem_total_bytes.map(|b| ("total_bytes", b)));
    Some(Finding {
        heuristic: "out_of_memory",
        severity: "warning",
        device: Some(f.device),
        kind: Some(f.kind),
        bytes: f.size,
        count: counts.out_of_memory,
        stack_id: Some(f.stack_id),
        frames: f.frames.clone(),
        message: oom.verdict.clone(),
        evidence: evidence.into_iter().collect(),
    })
}

pub fn write_text(report: &AnalyzeReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    // A framework's job leads with its tensors (allocated), then the segments (reserved).
    for a in &report.summary.allocators {
        writeln!(out, "{}", crate::report::summary::allocator_line(a))?;
    }
    let t = &report.summary.totals;
    let what = if report.summary.allocators.is_empty() {
        ""
    } else {
        "memory from CUDA (segments and other allocations): "
    };
    writeln!(
        out,
        "{what}peak {} at {}; live at end {} in {}",
        units::bytes_exact(t.peak_bytes),
        units::secs(t.peak_time_ns),
        units::bytes_exact(t.live_bytes_at_end),
        units::plural(t.live_allocations_at_end, "allocation", "allocations")
    )?;
    writeln!(
        out,
        "{}, {}, {} failed, {} unknown frees",
        units::plural(t.allocations, "allocation", "allocations"),
        units::plural(t.frees, "free", "frees"),
        t.failed_allocations,
        report.summary.unknown_frees
    )?;
    writeln!(out)?;
    if report.findings.is_empty() {
        return writeln!(out, "{BOLD}no findings{BOLD:#} ({})", report.level.name());
    }
    let warnings = report.warnings() as u64;
    let infos = report.findings.len() as u64 - warnings;
    writeln!(
        out,
        "{BOLD}findings:{BOLD:#} {}, {} ({})",
        units::plural(warnings, "warning", "warnings"),
        units::plural(infos, "note", "notes"),
        report.level.name()
    )?;
    for f in &report.findings {
        let (style, label) = if f.severity == "warning" {
            (WARN, "WARNING")
        } else {
            (DIM, "note   ")
        };
        writeln!(
            out,
            "{style}{label}{style:#} {}: {}",
            f.heuristic.replace('_', " "),
            f.message
        )?;
        if f.stack_id.is_some() {
            write_frames(out, &f.frames, "    ")?;
        }
    }
    writeln!(out)?;
    writeln!(out, "{BOLD}recommendations:{BOLD:#}")?;
    for r in &report.recommendations {
        writeln!(out, "  - {}", r.text)?;
    }
    Ok(())
}
