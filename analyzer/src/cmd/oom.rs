//! `gpumemprof oom TRACE`: why an allocation failed with out-of-memory (the report is
//! `report::oom`; this is its command line). It reads the trace twice: once to find and
//! classify the failures, once up to the one it explains; for a PyTorch out-of-memory
//! error twice more, for what would have avoided it (`whatif::remedies`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;
use serde::Serialize;

use super::common;
use crate::error::Error;
use crate::replay::Replayed;
use crate::report::{oom, TraceInfo};
use crate::term;
use crate::units;
use crate::whatif::remedies::{self, Remedies};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The trace file written by the shim.
    pub trace: PathBuf,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// The kept failure to explain, 0-based in trace order (default: the first final
    /// failure, else the last one).
    #[arg(long, value_name = "N")]
    pub index: Option<usize>,
    /// How far back "what grew" looks from the failure, in seconds.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = super::parse_seconds)]
    pub window: u64,
    /// Entries per list: call sites, largest allocations, growing sites (0: all).
    #[arg(long, value_name = "N", default_value_t = oom::DEFAULT_TOP)]
    pub top: usize,
    /// Stack frames shown per stack (0: all).
    #[arg(long, value_name = "N", default_value_t = oom::DEFAULT_FRAMES)]
    pub frames: usize,
}

pub fn run(args: &Args) -> Result<(), Error> {
    let path = &args.trace;
    let opts = oom::Options {
        index: args.index,
        window_ns: args.window,
        top: args.top,
        frames: args.frames,
    };
    let report = oom::analyze(
        || crate::input::open(path),
        |e| crate::input::read_error(path, e),
        |loaded| {
            crate::input::warn_losses(path, loaded);
            TraceInfo::new(path, loaded)
        },
        &opts,
        &mut |w| term::warn(&w),
    )?;
    let out = with_remedies(path, &report);
    common::emit(args.json, &out, |r, out| {
        oom::write_text(r.report, out)?;
        if let Some(remedies) = &r.remedies {
            write_remedies(remedies, out)?;
        }
        Ok(())
    })
}

/// The `oom` report and, for a PyTorch out-of-memory error, what would have avoided it.
#[derive(Serialize)]
pub struct WithRemedies<'a> {
    #[serde(flatten)]
    report: &'a oom::OomReport,
    /// Null when the failure is not PyTorch's or the trace has no PyTorch error.
    remedies: Option<Remedies>,
}

/// `report` of `path` with its remedies (two more passes, for PyTorch's errors only).
pub fn with_remedies<'a>(path: &Path, report: &'a oom::OomReport) -> WithRemedies<'a> {
    let remedies = report.pytorch.as_ref().and_then(|_| remedies_of(path));
    WithRemedies { report, remedies }
}

/// The remedies of `path`'s first PyTorch out-of-memory error; a failure to replay them
/// is a warning, never the report's failure.
pub fn remedies_of(path: &Path) -> Option<Remedies> {
    remedies::propose(path).unwrap_or_else(|e| {
        term::warn(&format!("what would have avoided it: {e}"));
        None
    })
}

fn write_remedies(r: &Remedies, out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "\nWhat would have avoided it (the recorded tensors replayed through PyTorch's \
         allocator policy; try others with gpumemprof whatif):"
    )?;
    let width = r.tried.iter().map(|t| t.set.len()).max().unwrap_or(0) + 3;
    for t in &r.tried {
        let outcome = match (t.avoids, t.fits) {
            (true, true) => "avoids it",
            (true, false) => "avoids it, runs out later",
            (false, _) => "no",
        };
        writeln!(
            out,
            "  {:<width$}{outcome:<27}reserved peak {:<12}{}",
            t.set,
            units::bytes(t.peak_reserved_bytes),
            units::plural(t.device_frees, "device sync", "device syncs")
        )?;
    }
    writeln!(out, "  {}", r.verdict)?;
    if !r.fidelity_matched {
        writeln!(
            out,
            "  (replaying the job's own policy did not reproduce the job exactly: estimates; \
             see gpumemprof whatif)"
        )?;
    }
    Ok(())
}

/// The `oom` report (default options, `frames` per stack) of a trace that `r`, its first
/// read, shows failed for lack of memory; `None` when it did not. For the commands that
/// carry its verdict (`report`, `analyze`, `diagnose`): two more passes, only then. Their
/// first read already warned of a damaged or truncated trace.
pub fn explain(path: &Path, r: &Replayed, frames: usize) -> Result<Option<oom::OomReport>, Error> {
    let oom = gpumemprof_format::OUT_OF_MEMORY;
    if !r.failures.iter().any(|f| f.result == oom) {
        return Ok(None);
    }
    let opts = oom::Options {
        frames,
        ..oom::Options::default()
    };
    let report = oom::analyze(
        || crate::input::open(path),
        |e| crate::input::read_error(path, e),
        |loaded| TraceInfo::new(path, loaded),
        &opts,
        &mut |_| {},
    )?;
    Ok(report.failure.is_some().then_some(report))
}
