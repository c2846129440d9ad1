//! The command line: parses arguments (clap), loads the trace through `replay`, runs one
//! report, writes text or JSON to stdout, and maps every failure to one stderr line and
//! an exit code from `error::Exit`.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use gpumemprof_format::TraceReader;
use serde::Serialize;

use crate::error::{Error, Exit};
use crate::replay::{self, Loaded};
use crate::report::{leaks, peak, summary, TraceInfo, DEFAULT_FRAMES};
use crate::symbolize::Symbolizer;

/// Report on a GPU memory trace written by the gpumemprof shim.
#[derive(Debug, Parser)]
#[command(name = "gpumemprof", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Allocations, frees, bytes, peak and live-at-end per device and memory kind.
    Summary {
        #[command(flatten)]
        input: Input,
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
    },
}

#[derive(Debug, Args)]
struct Input {
    /// The trace file written by the shim.
    trace: PathBuf,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct Frames {
    /// Stack frames shown per call site (0: all).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_FRAMES)]
    frames: usize,
}

/// Runs the command line; returns the process exit status.
pub fn run() -> ExitCode {
    // Usage errors print clap's message and exit 2; --help and --version exit 0.
    let cli = Cli::parse();
    match execute(&cli) {
        Ok(()) => ExitCode::from(Exit::Ok.code()),
        // `gpumemprof ... | head` closing the pipe is not a failure.
        Err(Error::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => {
            ExitCode::from(Exit::Ok.code())
        }
        Err(e) => {
            eprintln!("gpumemprof: error: {e}");
            ExitCode::from(e.exit().code())
        }
    }
}

fn execute(cli: &Cli) -> Result<(), Error> {
    match &cli.command {
        Command::Summary { input } => {
            let loaded = load(&input.trace)?;
            let report = summary::build(TraceInfo::new(&input.trace, &loaded), &loaded.replayed);
            emit(input.json, &report, summary::write_text)
        }
        Command::Peak { input, top, frames } => {
            let loaded = load(&input.trace)?;
            let r = &loaded.replayed;
            let mut sym = Symbolizer::new(&r.modules, &r.stacks);
            let trace = TraceInfo::new(&input.trace, &loaded);
            let report = peak::build(trace, r, &mut sym, *top, frames.frames);
            warn_all(sym.take_warnings());
            emit(input.json, &report, peak::write_text)
        }
        Command::Leaks { input, top, frames } => {
            let loaded = load(&input.trace)?;
            let r = &loaded.replayed;
            let mut sym = Symbolizer::new(&r.modules, &r.stacks);
            let trace = TraceInfo::new(&input.trace, &loaded);
            let report = leaks::build(trace, r, &mut sym, *top, frames.frames);
            warn_all(sym.take_warnings());
            emit(input.json, &report, leaks::write_text)
        }
    }
}

/// Opens and replays the whole trace. A truncated trace is not an error: it is reported
/// from its complete blocks, with one warning.
fn load(path: &Path) -> Result<Loaded, Error> {
    let file = File::open(path).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })?;
    let read_error = |source| Error::Read {
        path: path.to_owned(),
        source,
    };
    let reader = TraceReader::open(BufReader::new(file)).map_err(read_error)?;
    let loaded = replay::replay(reader).map_err(read_error)?;
    if loaded.truncated {
        let blocks = if loaded.blocks == 1 {
            "block"
        } else {
            "blocks"
        };
        warn(&format!(
            "{}: the trace ends inside a block (the process was probably killed); \
             reporting the {} complete {blocks}",
            path.display(),
            loaded.blocks
        ));
    }
    Ok(loaded)
}

fn warn(message: &str) {
    eprintln!("gpumemprof: warning: {message}");
}

fn warn_all(messages: Vec<String>) {
    for m in messages {
        warn(&m);
    }
}

/// Writes `report` to stdout as pretty JSON or through its text renderer.
fn emit<T: Serialize>(
    json: bool,
    report: &T,
    text: fn(&T, &mut dyn Write) -> io::Result<()>,
) -> Result<(), Error> {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let written = if json {
        serde_json::to_writer_pretty(&mut out, report)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        text(report, &mut out)
    };
    written.and_then(|()| out.flush()).map_err(Error::Output)
}
