//! `gpumemprof export --format F TRACE -o FILE`: the trace for other tools. One variant of
//! `Format` and one arm of `run` per format: add a format there.
//!
//! * `chrome`: Chrome trace-event JSON (Perfetto's UI, chrome://tracing), see views/chrome.rs
//! * `folded`: collapsed stacks of live bytes at a moment (speedscope, inferno), see
//!   views/flamegraph.rs
//! * `csv`: the timeline's buckets, see views/csv.rs
//! * `telemetry`: JSON lines of the older gpumemprof's TelemetryEvent v2, see
//!   cmd/telemetry.rs
//! * `torch-snapshot`: PyTorch's memory snapshot pickle (pytorch.org/memory_viz, ptmem), see
//!   torch_snapshot.rs

use std::path::PathBuf;

use clap::{Args as ClapArgs, ValueEnum};

use super::{load, snapshot, warn_all, MomentArgs, Output};
use crate::error::Error;
use crate::report::TraceInfo;
use crate::symbolize::Symbolizer;
use crate::timeline::TimelineBuilder;
use crate::views::{self, api_names};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Chrome trace-event JSON: a counter track per device and kind, OOMs as instant events.
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
}

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// What to write.
    #[arg(long, value_enum)]
    pub format: Format,
    /// The trace file written by the shim.
    pub trace: PathBuf,
    #[command(flatten)]
    pub output: Output,
    /// For `folded`: which moment (default: the peak).
    #[command(flatten)]
    pub moment: MomentArgs,
    /// For `folded`: frames innermost first after the root (see `flamegraph --inverted`).
    #[arg(long)]
    pub inverted: bool,
}

pub fn run(args: &Args) -> Result<(), Error> {
    if args.format != Format::Folded && (args.moment.any() || args.inverted) {
        return Err(Error::Failed(
            "--leaks, --oom, --at, --device and --inverted choose the stacks of --format \
             folded; leave them out for other formats"
                .to_string(),
        ));
    }
    args.output.check(&args.trace)?;
    match args.format {
        Format::Chrome => {
            let mut builder = TimelineBuilder::new();
            let loaded = load(&args.trace, &mut [&mut builder])?;
            let t = builder.finish();
            let info = TraceInfo::new(&args.trace, &loaded);
            let json = views::chrome::chrome(&t, &info, &api_names(&loaded.header));
            let mut bytes = serde_json::to_vec(&json).map_err(|e| Error::Output(e.into()))?;
            bytes.push(b'\n');
            args.output.write(&bytes)?;
            args.output.done(&format!(
                "Chrome trace-event JSON ({} counter tracks, {} out-of-memory events); open it \
                 in Perfetto's UI",
                t.series.len(),
                t.ooms.len()
            ));
        }
        Format::Folded => {
            let mut builder = args.moment.builder();
            let loaded = load(&args.trace, &mut [&mut builder])?;
            let snap = snapshot(builder)?;
            let r = &loaded.replayed;
            let mut sym = Symbolizer::new(&r.modules, &r.stacks, &r.python);
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
            let mut builder = TimelineBuilder::new();
            load(&args.trace, &mut [&mut builder])?;
            let t = builder.finish();
            args.output.write(views::csv::csv(&t).as_bytes())?;
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
                let n = super::telemetry::write_telemetry(&args.trace, &mut out)?;
                std::io::Write::flush(&mut out).map_err(Error::Output)?;
                n
            } else {
                let file = crate::term::create_output(&args.output.output, args.output.force)?;
                let mut out = std::io::BufWriter::new(file);
                let n = super::telemetry::write_telemetry(&args.trace, &mut out)?;
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
            // Binary: a file only. Streamed, one pass per device (see torch_snapshot.rs).
            args.output
                .require_file("a PyTorch memory snapshot (a binary pickle)")?;
            let written =
                crate::torch_snapshot::export(&args.trace, &args.output.output, args.output.force)?;
            args.output.done(&written.describe());
        }
    }
    Ok(())
}
