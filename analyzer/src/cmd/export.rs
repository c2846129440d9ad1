//! `gpumemprof export --format F TRACE -o FILE` (`--format parquet TRACE|DIR... -o DIR`):
//! the trace for other tools. One variant of
//! `Format` and one arm of `run` per format: add a format there.
//!
//! * `chrome`: Chrome trace-event JSON (Perfetto's UI, chrome://tracing), see views/chrome.rs
//! * `folded`: collapsed stacks of live bytes at a moment (speedscope, inferno), see
//!   views/flamegraph.rs
//! * `csv`: the timeline's buckets, see views/csv.rs
//! * `telemetry`: JSON lines of the older gpumemprof's TelemetryEvent v2, see
//!   cmd/telemetry.rs
//! * `torch-snapshot`: PyTorch's memory snapshot pickle (pytorch.org/memory_viz, ptmem), see
//!   export/torch_snapshot/
//! * `parquet`: three tables (allocations, frames, processes) of any number of traces, for
//!   DuckDB, Spark or Polars, see export/parquet/

use std::path::{Path, PathBuf};

use clap::{Args as ClapArgs, ValueEnum};

use super::{load, snapshot, MomentArgs, Output};
use crate::error::Error;
use crate::export::window::{Window, TORCH_SNAPSHOT_LAST};
use crate::input::warn_all;
use crate::observe::replay_observed;
use crate::report::TraceInfo;
use crate::symbolize::Symbolizer;
use crate::timeline::TimelineBuilder;
use crate::views;
use gpumemprof_format::header::api_names;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Chrome trace-event JSON: a counter track per device and kind, OOMs as instant events,
    /// NVTX ranges and marks on their threads.
    Chrome,
    /// Collapsed stacks ("frame;frame;frame bytes") of live memory at a moment.
    Folded,
    /// The timeline: one line per time bucket and series.
    Csv,
    /// JSON lines in the older gpumemprof's TelemetryEvent v2 schema, one per device
    /// memory event and NVML sample.
    Telemetry,
    /// PyTorch's memory snapshot (a pickle), for pytorch.org/memory_viz and ptmem: GPU
    /// memory live at the end and every allocation and free.
    TorchSnapshot,
    /// Parquet tables for an engine (DuckDB, Spark, Polars): allocations.parquet,
    /// frames.parquet and processes.parquet in the directory -o names, from every trace
    /// given (a directory stands for the traces in it).
    Parquet,
}

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// What to write.
    #[arg(long, value_enum)]
    pub format: Format,
    /// The trace file written by the shim (for `parquet`: any number of traces and
    /// directories of traces).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    #[command(flatten)]
    pub output: Output,
    /// For `folded`: which moment (default: the peak).
    #[command(flatten)]
    pub moment: MomentArgs,
    /// For `folded`: frames innermost first after the root (see `flamegraph --inverted`).
    #[arg(long)]
    pub inverted: bool,
    /// For `telemetry`, `torch-snapshot` and `csv`: only events from this time on, in
    /// seconds since the trace started (`csv`: its buckets start there, what was live then
    /// carried in).
    #[arg(long, value_name = "SECONDS", value_parser = super::parse_seconds)]
    pub from: Option<u64>,
    /// For `telemetry`, `torch-snapshot` and `csv`: only events up to this time (for
    /// `torch-snapshot`, the snapshot is taken then: its segments are what was live then).
    #[arg(long, value_name = "SECONDS", value_parser = super::parse_seconds)]
    pub to: Option<u64>,
    /// For `telemetry` and `torch-snapshot`: only the last N events (`torch-snapshot`: the
    /// last N trace entries of each device, as PyTorch's max_entries; default 100000, 0 for
    /// all).
    #[arg(long, value_name = "N")]
    pub last: Option<u64>,
}

impl Args {
    /// `--from`, `--to` and `--last`, with `--last` defaulting to `default_last` (`0`:
    /// no limit).
    fn window(&self, default_last: Option<u64>) -> Window {
        Window {
            from_ns: self.from,
            to_ns: self.to,
            last: self.last.or(default_last).filter(|&n| n > 0),
        }
    }
}

pub fn run(args: &Args) -> Result<(), Error> {
    if args.format != Format::Folded && (args.moment.any() || args.inverted) {
        return Err(Error::Failed(
            "--leaks, --oom, --at, --device, --level and --inverted choose the stacks of --format \
             folded; leave them out for other formats"
                .to_string(),
        ));
    }
    let windowed = matches!(args.format, Format::Telemetry | Format::TorchSnapshot);
    let timed = windowed || args.format == Format::Csv;
    if !timed && (args.from.is_some() || args.to.is_some()) || !windowed && args.last.is_some() {
        return Err(Error::Failed(
            "--from and --to choose the events of --format telemetry, torch-snapshot and csv, \
             --last those of telemetry and torch-snapshot; leave them out for other formats"
                .to_string(),
        ));
    }
    if let (Some(from), Some(to)) = (args.from, args.to) {
        if from > to {
            return Err(Error::Failed(format!(
                "--from {} is after --to {}: give a window that starts before it ends",
                crate::units::secs(from),
                crate::units::secs(to)
            )));
        }
    }
    if args.format == Format::Parquet {
        return parquet(args);
    }
    let [trace] = &args.traces[..] else {
        return Err(Error::Failed(format!(
            "{} traces given: this format is written from one trace (only --format parquet \
             reads several)",
            args.traces.len()
        )));
    };
    one_trace(args, trace)
}

/// A format written from one trace.
fn one_trace(args: &Args, trace: &Path) -> Result<(), Error> {
    args.output.check(trace)?;
    match args.format {
        Format::Chrome => {
            // Streamed: NVTX events are written during the pass (views/chrome.rs).
            let reader = crate::input::open(trace)?;
            let pid = reader.header().get("pid").and_then(|p| p.as_u64());
            let (t, nvtx) = with_writer(&args.output, |out| {
                out.write_all(crate::export::chrome::PREFIX)
                    .map_err(Error::Output)?;
                let mut builder = TimelineBuilder::new();
                let mut nvtx = crate::export::chrome::NvtxEvents::new(&mut *out, pid.unwrap_or(0));
                let loaded = replay_observed(reader, &mut [&mut builder, &mut nvtx])
                    .map_err(|e| crate::input::read_error(trace, e))?;
                crate::input::warn_losses(trace, &loaded);
                let (out, nvtx) = nvtx.finish().map_err(Error::Output)?;
                let t = builder.finish();
                let info = TraceInfo::new(trace, &loaded);
                crate::export::chrome::write_end(out, &t, &info, &api_names(&loaded.header))
                    .map_err(Error::Output)?;
                Ok((t, nvtx))
            })?;
            args.output.done(&format!(
                "Chrome trace-event JSON ({} counter tracks, {} out-of-memory events, {} NVTX \
                 ranges, {} NVTX marks); open it in Perfetto's UI",
                t.series.len(),
                t.ooms.len(),
                nvtx.ranges + nvtx.async_ranges,
                nvtx.marks
            ));
        }
        Format::Folded => {
            let mut builder = args.moment.builder();
            let loaded = load(trace, &mut [&mut builder])?;
            let r = &loaded.replayed;
            args.moment.check_device(r)?;
            let snap = snapshot(builder)?;
            let mut sym = Symbolizer::of(&loaded);
            let lines = views::flamegraph::folded(&snap, &mut sym, args.inverted);
            warn_all(sym.take_warnings());
            let mut text = lines.join("\n");
            if !text.is_empty() {
                text.push('\n');
            }
            args.output.write(text.as_bytes())?;
            args.output.done(&format!(
                "{} folded stacks, {}",
                lines.len(),
                snap.describe()
            ));
        }
        Format::Csv => {
            let mut builder = TimelineBuilder::window(args.from, args.to);
            let loaded = load(trace, &mut [&mut builder])?;
            let mut t = builder.finish();
            let mut sym = Symbolizer::of(&loaded);
            crate::kinds::timeline::add(&mut t, trace, &loaded, &mut sym);
            warn_all(sym.take_warnings());
            args.output.write(crate::export::csv::csv(&t).as_bytes())?;
            args.output.done(&format!(
                "{} buckets of {} ns for {} series",
                t.len,
                t.width_ns,
                t.series.len()
            ));
        }
        Format::Telemetry => {
            // Streamed: one line per event, never the whole export in memory.
            let lines = if args.output.is_stdout() {
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                let n =
                    crate::export::telemetry::write_telemetry(trace, &mut out, args.window(None))?;
                std::io::Write::flush(&mut out).map_err(Error::Output)?;
                n
            } else {
                let file = crate::term::create_output(&args.output.output, args.output.force)?;
                let mut out = std::io::BufWriter::new(file);
                let n =
                    crate::export::telemetry::write_telemetry(trace, &mut out, args.window(None))?;
                std::io::Write::flush(&mut out).map_err(|source| Error::File {
                    what: format!("writing {}", args.output.output.display()),
                    source,
                })?;
                n
            };
            args.output
                .done(&format!("{lines} TelemetryEvent v2 lines (JSON lines)"));
        }
        Format::TorchSnapshot => {
            // Binary: a file only. Streamed, one pass per device (see export/torch_snapshot/).
            args.output
                .require_file("a PyTorch memory snapshot (a binary pickle)")?;
            let written = crate::export::torch_snapshot::export(
                trace,
                &args.output.output,
                args.output.force,
                args.window(Some(TORCH_SNAPSHOT_LAST)),
            )?;
            args.output.done(&written.describe());
        }
        Format::Parquet => unreachable!("written by `parquet` above"),
    }
    Ok(())
}

/// `--format parquet`: every trace given, into the directory -o names.
fn parquet(args: &Args) -> Result<(), Error> {
    if args.output.is_stdout() {
        return Err(Error::Failed(
            "the Parquet export is three files, not written to stdout: give a directory \
             with -o"
                .to_string(),
        ));
    }
    let traces = super::ranks::collect(&args.traces)?;
    let dir = &args.output.output;
    crate::export::parquet::prepare(dir, args.output.force)?;
    let written = crate::export::parquet::export(
        &traces,
        dir,
        args.output.force,
        crate::export::parquet::ROW_GROUP_BYTES,
    )?;
    args.output.done(&written.describe());
    Ok(())
}

/// Runs `write` on stdout or on the created output file, buffered and flushed; a write error
/// names the file, and the file is removed if `write` fails.
fn with_writer<T>(
    output: &Output,
    write: impl FnOnce(&mut dyn std::io::Write) -> Result<T, Error>,
) -> Result<T, Error> {
    use std::io::{BufWriter, Write};
    if output.is_stdout() {
        let stdout = std::io::stdout();
        let mut out = BufWriter::new(stdout.lock());
        let value = write(&mut out)?;
        out.flush().map_err(Error::Output)?;
        return Ok(value);
    }
    let file = crate::term::create_output(&output.output, output.force)?;
    let mut out = BufWriter::new(file);
    let named = |source| Error::File {
        what: format!("writing {}", output.output.display()),
        source,
    };
    let written = match write(&mut out) {
        Err(Error::Output(source)) => Err(named(source)),
        other => other,
    }
    .and_then(|value| out.flush().map_err(named).map(|()| value));
    if written.is_err() {
        // A trace damaged midway leaves no half-written file behind.
        drop(out);
        let _ = std::fs::remove_file(&output.output);
    }
    written
}
