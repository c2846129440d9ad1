//! `summary`, `peak` and `leaks`: the report of one trace (`report/`), or of several, one
//! per rank (`ranks`), with `--by range` and the gates.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::cmd::common::{emit, gate};
use crate::cmd::ranks;
use crate::error::Error;
use crate::input::{load, load_keeping_exit, warn_all};
use crate::replay::{Loaded, Replayed};
use crate::report::by_range::{self, By};
use crate::report::level::MemoryLevel;
use crate::report::teardown::Teardown;
use crate::report::{leaks, peak, summary, TraceInfo, DEFAULT_FRAMES};
use crate::symbolize::Symbolizer;
use crate::window::{self, Window};

#[derive(Debug, Args)]
pub struct Input {
    /// The trace file written by the shim (a directory: the traces in it).
    pub trace: PathBuf,
    /// More traces of the same job (one per rank): a line per trace, the highest rank,
    /// and sites merged over them. A directory stands for the traces in it.
    #[arg(value_name = "TRACE")]
    pub more: Vec<PathBuf>,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Group memory by the innermost NVTX range open on the allocating thread (one trace).
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<By>,
    /// Only what was allocated while NVTX range (or scope) NAME was open, on any thread,
    /// up to its end (its first occurrence; one trace).
    #[arg(long, value_name = "NAME")]
    pub range: Option<String>,
}

impl Input {
    /// The trace replayed: whole, or through `--range`'s window (then `keeping_exit` does
    /// not apply: the window ends before any teardown).
    fn load(&self, keeping_exit: bool) -> Result<(Loaded, Option<Window>), Error> {
        match &self.range {
            Some(name) => {
                let w = window::find(&self.trace, name)?;
                Ok((window::load(&self.trace, &w)?, Some(w)))
            }
            None if keeping_exit => Ok((load_keeping_exit(&self.trace, &mut [])?, None)),
            None => Ok((load(&self.trace)?, None)),
        }
    }
}

impl Input {
    /// Several traces (more than one path, or a directory): the multi-trace report of
    /// `cmd::ranks`. One trace file keeps the single-trace report.
    pub fn several(&self) -> Option<Vec<PathBuf>> {
        (!self.more.is_empty() || self.trace.is_dir()).then(|| {
            std::iter::once(&self.trace)
                .chain(&self.more)
                .cloned()
                .collect()
        })
    }

    fn ranks(&self, which: ranks::Which) -> ranks::Options {
        ranks::Options {
            which,
            json: self.json,
            top: 0,
            frames: DEFAULT_FRAMES,
            max_peak: None,
            max_leaked: None,
        }
    }
}

#[derive(Debug, Args)]
pub struct Frames {
    /// Native stack frames shown per call site (0: all); Python frames are always shown.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FRAMES)]
    pub frames: usize,
}

pub fn summary(
    input: &Input,
    max_peak: Option<u64>,
    range_budgets: &[(String, u64)],
) -> Result<(), Error> {
    if let Some(traces) = input.several() {
        let opts = ranks::Options {
            max_peak,
            ..input.ranks(ranks::Which::Summary)
        };
        return ranks::run(&traces, &opts);
    }
    let (loaded, window) = input.load(false)?;
    let mut info = TraceInfo::new(&input.trace, &loaded);
    info.window = window;
    let mut report = summary::build(info, &loaded.replayed);
    let kinds = crate::kinds::at_peaks(&loaded.replayed, &mut Symbolizer::of(&loaded));
    summary::add_kinds(&mut report, &kinds);
    if input.by == Some(By::Range) {
        report.by_range = Some(by_range::summary(&loaded.replayed));
    }
    emit(input.json, &report, summary::write_text)?;
    gate("peak", report.totals.peak_bytes, "--max-peak", max_peak)?;
    range_gates(&loaded.replayed, range_budgets)
}

/// `--max-range-peak NAME=SIZE`: each range's most bytes live at once against its budget
/// (of ranges of that name in several NVTX domains, the largest); a name no range has fails too,
/// as a renamed range must not pass a CI gate unseen.
fn range_gates(r: &Replayed, budgets: &[(String, u64)]) -> Result<(), Error> {
    if budgets.is_empty() {
        return Ok(());
    }
    let ranges = by_range::summary(r).ranges;
    for (name, limit) in budgets {
        let mut found = ranges.iter().filter(|g| &g.range == name).peekable();
        if found.peek().is_none() {
            return Err(Error::Gate(format!(
                "--max-range-peak {name}={}: no NVTX range or scope named {name:?} allocated in \
                 the trace",
                crate::units::bytes_exact(*limit)
            )));
        }
        let peak = found.map(|g| g.range_peak_bytes).max().unwrap_or(0);
        if peak > *limit {
            return Err(Error::Gate(format!(
                "range {name:?} peak {} exceeds --max-range-peak {name}={}: reduce it, or \
                 raise the limit if the growth is expected",
                crate::units::bytes_exact(peak),
                crate::units::bytes_exact(*limit)
            )));
        }
    }
    Ok(())
}

pub fn peak(
    input: &Input,
    top: usize,
    frames: usize,
    max_peak: Option<u64>,
    level: Option<MemoryLevel>,
) -> Result<(), Error> {
    let opts = ranks::Options {
        top,
        frames,
        max_peak,
        ..input.ranks(ranks::Which::Peak)
    };
    sites(input, opts, false, |trace, r, sym, by, _| {
        let level = MemoryLevel::of(r, level);
        let mut report = peak::build(trace, r, sym, top, frames, level);
        if by {
            report.by_range = Some(by_range::peak(r, top));
        }
        let total = r.totals.peak_bytes;
        (
            report,
            peak::write_text,
            ("peak", total, "--max-peak", max_peak),
        )
    })
}

pub fn leaks(
    input: &Input,
    top: usize,
    frames: usize,
    max_leaked: Option<u64>,
    level: Option<MemoryLevel>,
) -> Result<(), Error> {
    let opts = ranks::Options {
        top,
        frames,
        max_leaked,
        ..input.ranks(ranks::Which::Leaks)
    };
    sites(input, opts, true, |trace, r, sym, by, teardown| {
        let level = MemoryLevel::of(r, level);
        let mut report = leaks::build(trace, r, sym, top, frames, level, teardown);
        if by {
            report.by_range = Some(by_range::leaks(r, top));
        }
        // The program's own leak: not the workspaces the framework keeps to the end.
        let total = report.total_bytes.saturating_sub(report.workspaces_bytes);
        (
            report,
            leaks::write_text,
            ("leaked", total, "--max-leaked", max_leaked),
        )
    })
}

/// What a site report's gate checks: its name, the value, the flag and its limit.
type Gate = (&'static str, u64, &'static str, Option<u64>);
/// A report's text renderer.
type Text<T> = fn(&T, &mut dyn std::io::Write) -> std::io::Result<()>;

/// `peak` and `leaks`: several traces go to `ranks`; one is replayed (watching for the
/// interpreter's teardown when `teardown`), symbolized, reported by `build` (with
/// `--by range` when asked), printed, then gated.
fn sites<T: Serialize>(
    input: &Input,
    several: ranks::Options,
    teardown: bool,
    build: impl FnOnce(
        TraceInfo,
        &Replayed,
        &mut Symbolizer,
        bool,
        Option<&Teardown>,
    ) -> (T, Text<T>, Gate),
) -> Result<(), Error> {
    if let Some(traces) = input.several() {
        return ranks::run(&traces, &several);
    }
    let (loaded, window) = input.load(teardown)?;
    let r = &loaded.replayed;
    let mut sym = Symbolizer::of(&loaded);
    let teardown = Teardown::find(&r.exit_tail, &mut sym);
    let mut trace = TraceInfo::new(&input.trace, &loaded);
    trace.window = window;
    let (report, text, (what, value, flag, limit)) = build(
        trace,
        r,
        &mut sym,
        input.by == Some(By::Range),
        teardown.as_ref(),
    );
    warn_all(sym.take_warnings());
    emit(input.json, &report, text)?;
    gate(what, value, flag, limit)
}
