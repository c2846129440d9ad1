//! `gpumemprof oom TRACE`: why an allocation failed with out-of-memory (the report is
//! `report::oom`; this is its command line). It reads the trace twice: once to find and
//! classify the failures, once up to the one it explains.

use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;

use super::common;
use crate::error::Error;
use crate::replay::Replayed;
use crate::report::{oom, TraceInfo};
use crate::term;

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
    common::emit(args.json, &report, oom::write_text)
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
