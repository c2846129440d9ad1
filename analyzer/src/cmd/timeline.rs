//! `gpumemprof timeline TRACE -o FILE.svg|FILE.png`: live bytes over time per device and
//! memory kind, with NVML's measurement and out-of-memory failures drawn on it.

use std::path::PathBuf;

use clap::{Args as ClapArgs, ValueEnum};

use super::{load, Output};
use crate::error::Error;
use crate::report::TraceInfo;
use crate::timeline::{SeriesKey, Timeline, TimelineBuilder};
use crate::units;
use crate::views::chart;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImageFormat {
    Svg,
    Png,
}

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The trace file written by the shim.
    pub trace: PathBuf,
    #[command(flatten)]
    pub output: Output,
    /// Image format (default: from FILE's extension, .svg or .png).
    #[arg(long, value_enum)]
    pub format: Option<ImageFormat>,
    /// Draw from this time on, in seconds since the trace started (zoom in: the buckets
    /// then cover only the window, what was live at its start carried in).
    #[arg(long, value_name = "SECONDS", value_parser = super::parse_seconds)]
    pub from: Option<u64>,
    /// Draw up to this time, in seconds since the trace started.
    #[arg(long, value_name = "SECONDS", value_parser = super::parse_seconds)]
    pub to: Option<u64>,
}

pub fn run(args: &Args) -> Result<(), Error> {
    let format = match args.format {
        Some(f) => f,
        None => format_of(&args.output.output)?,
    };
    if format == ImageFormat::Png {
        args.output.require_file("a PNG image")?;
    }
    if let (Some(from), Some(to)) = (args.from, args.to) {
        if from >= to {
            return Err(Error::Failed(format!(
                "--from {} is not before --to {}: give a window that starts before it ends",
                units::secs(from),
                units::secs(to)
            )));
        }
    }
    args.output.check(&args.trace)?;
    let mut builder = TimelineBuilder::window(args.from, args.to);
    let loaded = load(&args.trace, &mut [&mut builder])?;
    let mut t = builder.finish();
    let mut sym = crate::symbolize::Symbolizer::of(&loaded);
    crate::kinds::timeline::add(&mut t, &args.trace, &loaded, &mut sym);
    let info = TraceInfo::new(&args.trace, &loaded);
    let title = title(&info, &t);
    let bytes = match format {
        ImageFormat::Svg => chart::svg(&t, &title).map(String::into_bytes),
        ImageFormat::Png => chart::png(&t, &title),
    }
    .map_err(Error::Failed)?;
    args.output.write(&bytes)?;
    args.output.done(&format!(
        "timeline {} in {} buckets of {} ns",
        span(&t),
        t.len,
        t.width_ns
    ));
    Ok(())
}

fn format_of(path: &std::path::Path) -> Result<ImageFormat, Error> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(ImageFormat::Svg),
        Some("png") => Ok(ImageFormat::Png),
        _ => Err(Error::Failed(format!(
            "{}: cannot tell the image format from the name: end it in .svg or .png, or pass \
             --format svg|png",
            path.display()
        ))),
    }
}

/// "GPU memory of train 20 (pid 42): highest 114.0 MiB over 1.234 s" (the program by
/// its file name: a build folder's path would push the numbers off the chart).
pub fn title(info: &TraceInfo, t: &Timeline) -> String {
    let pid = info.pid.map_or_else(|| "?".to_string(), |p| p.to_string());
    let peak = t.series(SeriesKey::Total).map_or(0, |s| s.max());
    format!(
        "GPU memory of {} (pid {pid}): highest {} {}",
        super::program(&info.argv),
        units::bytes(peak),
        span(t)
    )
}

/// `over 1.234 s`, or for a window `from 7.200 ms to 7.600 ms`.
fn span(t: &Timeline) -> String {
    if t.origin_ns == 0 {
        format!("over {}", units::secs(t.end_ns))
    } else {
        format!(
            "from {} to {}",
            units::secs(t.origin_ns),
            units::secs(t.end_ns)
        )
    }
}
