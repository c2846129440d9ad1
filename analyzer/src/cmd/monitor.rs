//! `gpumemprof monitor TRACE|--pid PID`: follows a trace while the shim writes it and
//! shows, every refresh, the device memory live now and at its peak per device, the call
//! sites holding the most now, and threshold alerts. It stops when the process closes the
//! trace (or, with `--pid`, exits); `--once` shows the trace as it is and stops.

use std::io::{self, IsTerminal, Write};

use serde::Serialize;

use crate::error::Error;
use crate::live::{Alert, DeviceNow, Follower, LiveState, SiteReport, Thresholds};
use crate::report::{write_frames, TraceInfo, SCHEMA_VERSION};
use crate::term::{self, BAD, BOLD, WARN};
use crate::units;
use gpumemprof_format::MemKind;

/// Alerts shown per refresh (the most recent ones).
pub const ALERTS_SHOWN: usize = 10;

#[derive(Debug, Clone, Serialize)]
pub struct MonitorReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    /// Whether the process still runs: with `--pid`, that process; with a trace file, the
    /// process its header names when that is on this host; null when it cannot be told.
    pub process_running: Option<bool>,
    pub thresholds: Thresholds,
    pub devices: Vec<DeviceNow>,
    /// What `sites` count: `tensors` once the trace has a framework's tensors, else
    /// `segments`.
    pub level: crate::replay::MemoryLevel,
    /// The sites holding the most live memory now, at most `--top`.
    pub sites: Vec<SiteReport>,
    /// The most recent alerts (at most 10), oldest first.
    pub alerts: Vec<Alert>,
    pub alerts_total: u64,
}

pub struct Options {
    pub once: bool,
    pub interval_ms: u64,
    pub top: usize,
    pub frames: usize,
    pub json: bool,
    pub pid: Option<u32>,
}

pub fn snapshot(
    state: &LiveState,
    follower: &Follower,
    running: Option<bool>,
    top: usize,
    frames: usize,
) -> MonitorReport {
    let skip = state.alerts.len().saturating_sub(ALERTS_SHOWN);
    MonitorReport {
        schema_version: SCHEMA_VERSION,
        trace: follower.trace_info(state),
        process_running: running,
        thresholds: state.thresholds,
        devices: state.device_reports(),
        level: state.level(),
        sites: state.top_sites(
            top,
            frames,
            crate::symbolize::cwd_of(&follower.header),
            |all| crate::report::level::site(all).cloned(),
        ),
        alerts: state.alerts[skip..].to_vec(),
        alerts_total: state.alerts_total,
    }
}

/// Runs the refresh loop until the trace ends, the process exits, or Ctrl-C.
pub fn run(mut follower: Follower, mut state: LiveState, o: &Options) -> Result<(), Error> {
    let redraw = !o.once && !o.json && io::stdout().is_terminal();
    loop {
        // Whether the process runs is looked at before reading: once it has exited, this
        // read gets everything it wrote.
        let running = match o.pid {
            Some(pid) => Some(crate::live::process_running(pid)),
            // A trace file: its writer, when it is on this host.
            None => follower.writer_running(),
        };
        follower.poll(&mut [&mut state])?;
        let report = snapshot(&state, &follower, running, o.top, o.frames);
        let done = o.once || state.pipeline.complete || running == Some(false);
        if o.json {
            let line = serde_json::to_string(&report).map_err(io::Error::from);
            let mut out = io::stdout().lock();
            line.and_then(|l| writeln!(out, "{l}"))
                .and_then(|()| out.flush())
                .map_err(Error::Output)?;
        } else {
            if redraw {
                // Clear the screen and go home: each refresh replaces the last.
                print!("\x1b[2J\x1b[H");
            }
            super::common::emit(false, &report, write_text)?;
            if !redraw && !done {
                println!();
            }
        }
        if done {
            return Ok(());
        }
        if !term::sleep_unless_interrupted(o.interval_ms) {
            return Err(Error::Interrupted);
        }
    }
}

pub fn write_text(report: &MonitorReport, out: &mut dyn Write) -> io::Result<()> {
    let t = &report.trace;
    let pid = t.pid.map_or_else(|| "?".to_string(), |p| p.to_string());
    let state = match (t.complete, report.process_running) {
        (true, _) => t.ending_words(),
        (false, Some(false)) => format!("{BAD}gone: stopped without closing the trace{BAD:#}"),
        (false, Some(true)) => "running".to_string(),
        (false, None) => "running, or stopped without closing the trace".to_string(),
    };
    writeln!(
        out,
        "{BOLD}trace {}{BOLD:#}  (pid {pid}: {})",
        t.path,
        t.argv.join(" ")
    )?;
    writeln!(
        out,
        "at {}, {} events, process {state}",
        units::secs(t.duration_ns),
        t.events
    )?;
    if t.dropped > 0 {
        writeln!(
            out,
            "{WARN}WARNING:{WARN:#} {} events were dropped by the shim: {}",
            t.dropped,
            crate::input::LOSS_BOTH_WAYS
        )?;
    }
    writeln!(out)?;
    if report.devices.is_empty() {
        writeln!(out, "no device memory allocated yet")?;
    }
    for d in &report.devices {
        write_device(out, d)?;
    }
    if !report.sites.is_empty() {
        writeln!(out, "\n{BOLD}largest live sites now:{BOLD:#}")?;
    }
    for (n, s) in report.sites.iter().enumerate() {
        let (one, many) = crate::report::level::count_words(s.kind);
        let what = if s.kind == MemKind::Tensor.name() {
            String::new()
        } else {
            format!("{} memory, ", s.kind)
        };
        writeln!(
            out,
            "  #{} {} in {}{} ({what}stack {})",
            n + 1,
            units::bytes_exact(s.bytes),
            units::plural(s.count, one, many),
            crate::report::level::from_site(s.site.as_ref(), &s.frames),
            s.stack_id
        )?;
        write_frames(out, &s.frames, "      ")?;
    }
    if report.alerts_total > 0 {
        writeln!(
            out,
            "\n{BOLD}alerts:{BOLD:#} {} in all, the latest:",
            report.alerts_total
        )?;
        for a in &report.alerts {
            write_alert(out, a)?;
        }
    }
    Ok(())
}

/// One device's line: current and peak, against its size when known.
pub fn write_device(out: &mut dyn Write, d: &DeviceNow) -> io::Result<()> {
    write!(
        out,
        "device {}: {} live now in {}, peak {} at {}",
        units::device(d.device),
        units::bytes_exact(d.current_bytes),
        units::plural(d.current_allocations, "allocation", "allocations"),
        units::bytes_exact(d.peak_bytes),
        units::secs(d.peak_time_ns)
    )?;
    match (d.total_bytes, d.current_percent, d.peak_percent) {
        (Some(total), Some(now), Some(peak)) => {
            let style = match d.level {
                "critical" => BAD,
                "warning" => WARN,
                _ => Default::default(),
            };
            writeln!(
                out,
                "; of {} ({}): {style}{now:.2}%{style:#} now, {peak:.2}% at the peak",
                units::bytes(total),
                d.total_source.unwrap_or("?"),
                now = now,
                peak = peak
            )
        }
        _ => writeln!(
            out,
            "; device memory size unknown (pass --device-memory SIZE for percentages)"
        ),
    }?;
    if let Some(a) = &d.allocator {
        let name = crate::replay::framework_title(a.framework);
        write!(
            out,
            "  {name}: {} allocated now (peak {})",
            units::bytes(a.allocated_bytes),
            units::bytes(a.allocated_peak_bytes)
        )?;
        if a.framework == "pytorch" {
            write!(out, ", {} reserved", units::bytes(a.reserved_bytes))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

pub fn write_alert(out: &mut dyn Write, a: &Alert) -> io::Result<()> {
    let (style, label) = if a.level == "critical" {
        (BAD, "CRITICAL")
    } else {
        (WARN, "WARNING ")
    };
    if a.cause == "out_of_memory" {
        return writeln!(
            out,
            "  {} {style}{label}{style:#} device {}: out of memory: {} asked for with {} in use; \
             see why with: gpumemprof oom",
            units::secs(a.time_ns),
            units::device(a.device),
            units::bytes_exact(a.requested_bytes),
            units::bytes_exact(a.used_bytes)
        );
    }
    writeln!(
        out,
        "  {} {style}{label}{style:#} device {} at {:.2}% ({} of {})",
        units::secs(a.time_ns),
        units::device(a.device),
        a.percent,
        units::bytes_exact(a.used_bytes),
        units::bytes(a.total_bytes)
    )
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: super::follow::Source,
    /// Read the trace once, print, and stop.
    #[arg(long)]
    pub once: bool,
    /// Seconds between refreshes.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = super::common::interval_arg)]
    pub interval: u64,
    /// Call sites shown, largest first (0: all).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub top: usize,
    /// Stack frames shown per site (0: all).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub frames: usize,
    #[command(flatten)]
    pub thresholds: super::follow::ThresholdArgs,
    /// Print each refresh as one line of JSON (JSON Lines) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run_args(args: &Args) -> Result<(), Error> {
    let state = args.thresholds.state();
    let follower = args.source.open()?;
    run(
        follower,
        state,
        &Options {
            once: args.once,
            interval_ms: args.interval,
            top: args.top,
            frames: args.frames,
            json: args.json,
            pid: args.source.pid,
        },
    )
}
