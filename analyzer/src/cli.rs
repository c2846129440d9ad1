//! The command line: parses arguments (clap), loads the trace through `replay`, runs one
//! report, writes text or JSON to stdout, and maps every failure to one stderr line and
//! an exit code from `error::Exit`.

use std::io::{self};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::cmd::common::size_arg;
use crate::cmd::totals::{self, Frames, Input};
use crate::error::{Error, Exit};
use crate::report::level::MemoryLevel;

/// Report on a GPU memory trace written by the gpumemprof shim.
#[derive(Debug, Parser)]
#[command(name = "gpumemprof", version)]
struct Cli {
    /// No warnings and no progress bar (errors, gate and findings lines still print).
    #[arg(short, long, global = true)]
    quiet: bool,
    /// Show C++ function names with their parameter lists (by default `ns::Class::fn`,
    /// without `(int, float) const`).
    #[arg(long, global = true)]
    full_names: bool,
    /// Show every native frame of stacks with Python frames (by default the Python frames
    /// come first, under only the library frames they called, without the interpreter's
    /// and ctypes' or pybind11's own frames).
    #[arg(long, global = true)]
    native: bool,
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
        /// Exit 4 if the most memory of NVTX range (or scope) NAME live at once exceeds SIZE
        /// (`forward=2GiB`; repeatable), or if no range has that name (one trace).
        #[arg(long, value_name = "NAME=SIZE", value_parser = crate::cmd::common::range_budget_arg)]
        max_range_peak: Vec<(String, u64)>,
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
        /// Count a framework allocator's tensors (the default when the trace has them) or
        /// the segments allocated from CUDA, HIP or the driver.
        #[arg(long, value_enum, value_name = "LEVEL")]
        level: Option<MemoryLevel>,
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
        /// Count a framework allocator's tensors (the default when the trace has them) or
        /// the segments allocated from CUDA, HIP or the driver.
        #[arg(long, value_enum, value_name = "LEVEL")]
        level: Option<MemoryLevel>,
    },
    /// Why an allocation failed with out-of-memory: what asked, the device's free memory,
    /// what was live and which call sites held it, what grew before it, and a verdict.
    Oom(crate::cmd::oom::Args),
    /// Would the job have fitted with another PyTorch allocator configuration (--set
    /// expandable_segments:True), on another device or with larger tensors: its tensors
    /// replayed through PyTorch's caching-allocator policy, checked against the job.
    Whatif(crate::cmd::whatif::Args),
    /// Flamegraph (SVG) of live memory by call stack: at the peak, the end (--leaks), an
    /// out-of-memory failure (--oom) or a time (--at).
    Flamegraph(crate::cmd::flamegraph::Args),
    /// Live memory over time per device and kind, with NVML samples and out-of-memory
    /// failures, as SVG or PNG.
    Timeline(crate::cmd::timeline::Args),
    /// A full-screen terminal browser (over SSH too): memory over time with a cursor, and
    /// at its moment a call tree of what is live, the top sites, and the leaks at the end.
    Browse(crate::cmd::browse::Args),
    /// One self-contained HTML file: summary, timeline, flamegraph, peak sites, leaks, OOMs.
    Report(crate::cmd::report::Args),
    /// The trace for other tools: --format chrome (Perfetto), folded (speedscope), csv,
    /// telemetry (the older gpumemprof's TelemetryEvent v2 JSON lines), torch-snapshot
    /// (PyTorch's memory snapshot pickle: pytorch.org/memory_viz, ptmem), parquet (tables
    /// for DuckDB, Spark, Polars).
    #[command(mut_arg("output", |a| a
        .value_name("PATH")
        .help("Where to write the output: a file (`-` for stdout, where the format is text), or for parquet a directory")))]
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

/// `--by` reads one trace: with several, a usage error (exit 2).
fn check_by(input: &Input) {
    one_trace_only(input, input.by.is_some(), "--by range");
    one_trace_only(input, input.range.is_some(), "--range");
}

/// `flag` (given when `given`) reads one trace file: a usage error with several.
fn one_trace_only(input: &Input, given: bool, flag: &str) {
    if given && input.several().is_some() {
        use clap::CommandFactory;
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} reads one trace file: give one TRACE"),
            )
            .exit();
    }
}

/// The command line as clap should see it, before any `--` and for every command but
/// `run` (whose program's arguments are its own): `--oom N` reads as `--oom=N` (the flag's
/// value is optional, so clap would take N for a trace), and `--flag -5` as `--flag=-5`, so
/// that a negative number is refused as a value of its flag rather than taken for a flag.
fn normalized(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let text = |a: &std::ffi::OsString| a.to_str().map(str::to_owned);
    let is_run = args
        .iter()
        .skip(1)
        .find(|a| !a.to_string_lossy().starts_with('-'))
        .is_some_and(|a| a == "run");
    if is_run {
        return args;
    }
    let number = |t: &str, negative: bool| {
        let digits = if negative {
            t.strip_prefix('-')
        } else {
            Some(t)
        };
        digits.is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let (this, next) = (text(&args[i]), args.get(i + 1).and_then(text));
        match (this.as_deref(), next.as_deref()) {
            (Some("--"), _) => {
                out.extend(args[i..].iter().cloned());
                break;
            }
            (Some(flag), Some(value))
                if flag.starts_with("--")
                    && !flag.contains('=')
                    && ((flag == "--oom" && number(value, false)) || number(value, true)) =>
            {
                out.push(format!("{flag}={value}").into());
                i += 2;
            }
            _ => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// clap's error, exit 2; a negative number given for a count reads as what it is.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() == ErrorKind::ValueValidation {
        let value = match e.get(ContextKind::InvalidValue) {
            Some(ContextValue::String(v)) => Some(v.clone()),
            _ => None,
        };
        let flag = match e.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(f)) => Some(f.clone()),
            _ => None,
        };
        if let (Some(value), Some(flag)) = (value, flag) {
            if value.starts_with('-') && e.to_string().contains("invalid digit") {
                eprintln!("error: invalid value '{value}' for '{flag}': give 0 or more");
                std::process::exit(2);
            }
        }
    }
    e.exit()
}

/// Commands that show no stack: the global flags about how stacks read are left out of
/// their help (accepted, and meaningless, there).
const NO_STACKS: [&str; 5] = ["run", "timeline", "info", "summary", "track"];

/// The command line's definition, with the stack flags out of the help of `NO_STACKS`:
/// each of those gets hidden flags of the same names, which the global ones do not
/// replace (they are still accepted there, and still mean nothing).
fn command() -> clap::Command {
    use clap::{Arg, ArgAction, CommandFactory};
    let hidden = |id: &'static str, long: &'static str| {
        Arg::new(id)
            .long(long)
            .action(ArgAction::SetTrue)
            .hide(true)
    };
    let mut cmd = Cli::command();
    for name in NO_STACKS {
        cmd = cmd.mut_subcommand(name, |sub| {
            sub.arg(hidden("native", "native"))
                .arg(hidden("full_names", "full-names"))
        });
    }
    cmd
}

/// Runs the command line; returns the process exit status.
pub fn run() -> ExitCode {
    use clap::FromArgMatches;
    // Usage errors print clap's message and exit 2; --help and --version exit 0.
    let parsed = command()
        .try_get_matches_from(normalized(std::env::args_os().collect()))
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => usage_error(e),
    };
    crate::term::set_quiet(cli.quiet);
    crate::cxx_names::set_full(cli.full_names);
    crate::glue::set_native(cli.native);
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
        Command::Summary {
            input,
            max_peak,
            max_range_peak,
        } => {
            check_by(input);
            one_trace_only(input, !max_range_peak.is_empty(), "--max-range-peak");
            totals::summary(input, *max_peak, max_range_peak)
        }
        Command::Peak {
            input,
            top,
            frames,
            max_peak,
            level,
        } => {
            check_by(input);
            one_trace_only(input, level.is_some(), "--level");
            totals::peak(input, *top, frames.frames, *max_peak, *level)
        }
        Command::Leaks {
            input,
            top,
            frames,
            max_leaked,
            level,
        } => {
            check_by(input);
            one_trace_only(input, level.is_some(), "--level");
            totals::leaks(input, *top, frames.frames, *max_leaked, *level)
        }
        Command::Oom(args) => crate::cmd::oom::run(args),
        Command::Whatif(args) => crate::cmd::whatif::run(args),
        Command::Flamegraph(args) => crate::cmd::flamegraph::run(args),
        Command::Timeline(args) => crate::cmd::timeline::run(args),
        Command::Report(args) => crate::cmd::report::run(args),
        Command::Browse(args) => crate::cmd::browse::run(args),
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
