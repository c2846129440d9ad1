//! The command line: parses arguments (clap), loads the trace through `replay`, runs one
//! report, writes text or JSON to stdout, and maps every failure to one stderr line and
//! an exit code from `error::Exit`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::cmd::common::{self, gate, size_arg};
use crate::cmd::ranks;
use crate::error::{Error, Exit};
use crate::replay::Loaded;
use crate::report::by_range::{self, By};
use crate::report::{leaks, peak, summary, TraceInfo, DEFAULT_FRAMES};
use crate::symbolize::Symbolizer;

/// Report on a GPU memory trace written by the gpumemprof shim.
#[derive(Debug, Parser)]
#[command(name = "gpumemprof", version)]
struct Cli {
    /// No warnings and no progress bar (errors, gate and findings lines still print).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Allocations, frees, bytes, peak and live-at-end per device and memory kind.
    Summary {
        #[command(flatten)]
        input: Input,
        /// Exit 4 if the peak of all memory (totals.peak_bytes) exceeds SIZE (e.g. 512MiB).
        #[arg(long, value_name = "SIZE", value_parser = size_arg)]
        max_peak: Option<u64>,
    },
    /// The moment of peak memory per device and kind, and the call sites holding it.
    Peak {
        #[command(flatten)]
        input: Input,
        /// Call sites shown per peak (0: all).
        #[arg(long, value_name = "N", default_value_t = 10)]
        top: usize,
        #[command(flatten)]
        frames: Frames,
        /// Exit 4 if the peak of all memory (summary's totals.peak_bytes) exceeds SIZE.
        #[arg(long, value_name = "SIZE", value_parser = size_arg)]
        max_peak: Option<u64>,
    },
    /// Allocations still live when the trace ended, grouped by call site and kind.
    Leaks {
        #[command(flatten)]
        input: Input,
        /// Groups shown, largest first (default: all).
        #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
        top: usize,
        #[command(flatten)]
        frames: Frames,
        /// Exit 4 if the bytes live at the end (total_bytes) exceed SIZE (e.g. 0, 16MiB).
        #[arg(long, value_name = "SIZE", value_parser = size_arg)]
        max_leaked: Option<u64>,
    },
    /// Why an allocation failed with out-of-memory: what asked, the device's free memory,
    /// what was live and which call sites held it, what grew before it, and a verdict.
    Oom(crate::cmd::oom::Args),
    /// Flamegraph (SVG) of live memory by call stack: at the peak, the end (--leaks), an
    /// out-of-memory failure (--oom) or a time (--at).
    Flamegraph(crate::cmd::flamegraph::Args),
    /// Live memory over time per device and kind, with NVML samples and out-of-memory
    /// failures, as SVG or PNG.
    Timeline(crate::cmd::timeline::Args),
    /// One self-contained HTML file: summary, timeline, flamegraph, peak sites, leaks, OOMs.
    Report(crate::cmd::report::Args),
    /// The trace for other tools: --format chrome (Perfetto), folded (speedscope), csv,
    /// telemetry (the older gpumemprof's TelemetryEvent v2 JSON lines), torch-snapshot
    /// (PyTorch's memory snapshot pickle: pytorch.org/memory_viz, ptmem).
    Export(crate::cmd::export::Args),
    /// What changed between two traces, per call site: bytes at the peak and live at the
    /// end; new and gone sites.
    Diff(crate::cmd::diff::Args),
    /// One report: summary, leak heuristics, fragmentation signs and recommendations.
    Analyze(crate::cmd::analyze::Args),
    /// This machine's NVIDIA driver and devices (NVML); with TRACE, the trace's header and
    /// the APIs it saw.
    Info(crate::cmd::info::Args),
    /// Follows a trace being written: device memory now and at its peak, top sites,
    /// alerts; refreshes until the process exits (--once: one look).
    Monitor(crate::cmd::monitor::Args),
    /// Device memory against warning/critical thresholds (percent of the device), with
    /// alerts, on a finished trace or one being written.
    Track(crate::cmd::track::Args),
    /// A bundle folder: the trace, every report as JSON, environment.json, manifest.json.
    Diagnose(crate::cmd::diagnose::Args),
    /// Runs a command with the profiler preloaded (one trace per process), forwards
    /// signals to it, exits with its status, and lists the traces written.
    Run(crate::cmd::run::Args),
}

#[derive(Debug, Args)]
struct Input {
    /// The trace file written by the shim (a directory: the traces in it).
    trace: PathBuf,
    /// More traces of the same job (one per rank): a line per trace, the highest rank,
    /// and sites merged over them. A directory stands for the traces in it.
    #[arg(value_name = "TRACE")]
    more: Vec<PathBuf>,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    json: bool,
    /// Group memory by the innermost NVTX range open on the allocating thread (one trace).
    #[arg(long, value_enum, value_name = "WHAT")]
    by: Option<By>,
}

impl Input {
    /// `--by` reads one trace: with several, a usage error (exit 2).
    fn check_by(&self) {
        if self.by.is_some() && (!self.more.is_empty() || self.trace.is_dir()) {
            use clap::CommandFactory;
            Cli::command()
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "--by range reads one trace file: give one TRACE",
                )
                .exit();
        }
    }

    /// Several traces (more than one path, or a directory): the multi-trace report of
    /// `cmd::ranks`. One trace file keeps the single-trace report.
    fn several(&self) -> Option<Vec<PathBuf>> {
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
struct Frames {
    /// Native stack frames shown per call site (0: all); Python frames are always shown.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FRAMES)]
    frames: usize,
}

/// Runs the command line; returns the process exit status.
pub fn run() -> ExitCode {
    // Usage errors print clap's message and exit 2; --help and --version exit 0.
    let cli = Cli::parse();
    crate::term::set_quiet(cli.quiet);
    if let Command::Run(args) = &cli.command {
        // Before Ctrl-C is caught: the launcher passes signals on to the program.
        return crate::cmd::run::main(args);
    }
    crate::term::catch_interrupt();
    let mut result = execute(&cli);
    if crate::term::interrupted() && !matches!(result, Err(Error::Gate(_) | Error::Findings(_))) {
        result = Err(Error::Interrupted);
    }
    match result {
        Ok(()) => ExitCode::from(Exit::Ok.code()),
        // `gpumemprof ... | head` closing the pipe is not a failure.
        Err(Error::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::from(Exit::Ok.code())
        }
        Err(e) => {
            crate::term::report_failure(&e);
            ExitCode::from(e.exit().code())
        }
    }
}

fn execute(cli: &Cli) -> Result<(), Error> {
    match &cli.command {
        Command::Summary { input, max_peak } => {
            input.check_by();
            if let Some(traces) = input.several() {
                let opts = ranks::Options {
                    max_peak: *max_peak,
                    ..input.ranks(ranks::Which::Summary)
                };
                return ranks::run(&traces, &opts);
            }
            let loaded = load(&input.trace)?;
            let mut report =
                summary::build(TraceInfo::new(&input.trace, &loaded), &loaded.replayed);
            if input.by == Some(By::Range) {
                report.by_range = Some(by_range::summary(&loaded.replayed));
            }
            emit(input.json, &report, summary::write_text)?;
            gate("peak", report.totals.peak_bytes, "--max-peak", *max_peak)
        }
        Command::Peak {
            input,
            top,
            frames,
            max_peak,
        } => {
            input.check_by();
            if let Some(traces) = input.several() {
                let opts = ranks::Options {
                    top: *top,
                    frames: frames.frames,
                    max_peak: *max_peak,
                    ..input.ranks(ranks::Which::Peak)
                };
                return ranks::run(&traces, &opts);
            }
            let loaded = load(&input.trace)?;
            let r = &loaded.replayed;
            let mut sym = Symbolizer::new(&r.modules, &r.stacks, &r.python);
            let trace = TraceInfo::new(&input.trace, &loaded);
            let mut report = peak::build(trace, r, &mut sym, *top, frames.frames);
            if input.by == Some(By::Range) {
                report.by_range = Some(by_range::peak(r, *top));
            }
            crate::input::warn_all(sym.take_warnings());
            emit(input.json, &report, peak::write_text)?;
            gate("peak", r.totals.peak_bytes, "--max-peak", *max_peak)
        }
        Command::Leaks {
            input,
            top,
            frames,
            max_leaked,
        } => {
            input.check_by();
            if let Some(traces) = input.several() {
                let opts = ranks::Options {
                    top: *top,
                    frames: frames.frames,
                    max_leaked: *max_leaked,
                    ..input.ranks(ranks::Which::Leaks)
                };
                return ranks::run(&traces, &opts);
            }
            let loaded = load(&input.trace)?;
            let r = &loaded.replayed;
            let mut sym = Symbolizer::new(&r.modules, &r.stacks, &r.python);
            let trace = TraceInfo::new(&input.trace, &loaded);
            let mut report = leaks::build(trace, r, &mut sym, *top, frames.frames);
            if input.by == Some(By::Range) {
                report.by_range = Some(by_range::leaks(r, *top));
            }
            crate::input::warn_all(sym.take_warnings());
            emit(input.json, &report, leaks::write_text)?;
            gate("leaked", report.total_bytes, "--max-leaked", *max_leaked)
        }
        Command::Oom(args) => crate::cmd::oom::run(args),
        Command::Flamegraph(args) => crate::cmd::flamegraph::run(args),
        Command::Timeline(args) => crate::cmd::timeline::run(args),
        Command::Report(args) => crate::cmd::report::run(args),
        Command::Export(args) => crate::cmd::export::run(args),
        Command::Diff(args) => crate::cmd::diff::run(args),
        Command::Analyze(args) => crate::cmd::analyze::run(args),
        Command::Info(args) => crate::cmd::info::run(args),
        Command::Monitor(args) => crate::cmd::monitor::run_args(args),
        Command::Track(args) => crate::cmd::track::run_args(args),
        Command::Diagnose(args) => crate::cmd::diagnose::run_args(args),
        // Handled by `run` before this point (it returns the program's exit status).
        Command::Run(_) => Ok(()),
    }
}

/// Opens and replays the whole trace (progress bar, Ctrl-C). A truncated trace is not
/// an error: it is reported from its complete blocks, with one warning.
fn load(path: &Path) -> Result<Loaded, Error> {
    crate::input::load(path)
}

/// Writes `report` to stdout as pretty JSON or through its text renderer.
fn emit<T: Serialize>(
    json: bool,
    report: &T,
    text: fn(&T, &mut dyn Write) -> io::Result<()>,
) -> Result<(), Error> {
    common::emit(json, report, text)
}
