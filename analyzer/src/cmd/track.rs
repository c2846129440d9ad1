//! `gpumemprof track TRACE|--pid PID`: device memory usage against thresholds in percent
//! of the device's memory, over a finished trace or one still being written (`--follow`;
//! implied by `--pid`). An alert is raised when usage on a device rises to or above the
//! warning or critical level, and again for a level only after usage fell below it.
//! Usage is device memory (kind `device`) live in the hooks' view; the device's size comes
//! from `--device-memory`, else the trace's NVML samples, else a failed allocation that
//! read it. Before the size is known, no alert can be raised.

use std::io::{self, Write};

use serde::Serialize;

use super::monitor::{write_alert, write_device};
use crate::error::Error;
use crate::live::{Alert, DeviceNow, Follower, LiveState, Thresholds};
use crate::report::{TraceInfo, SCHEMA_VERSION};
use crate::term::{self, BOLD, WARN};
use crate::units;

#[derive(Debug, Clone, Serialize)]
pub struct TrackReport {
    pub schema_version: u32,
    pub trace: TraceInfo,
    pub thresholds: Thresholds,
    pub devices: Vec<DeviceNow>,
    /// Devices whose memory size stayed unknown (no alerts could be raised for them).
    pub unknown_size_devices: Vec<i32>,
    /// In time order; the first 1000.
    pub alerts: Vec<Alert>,
    /// All alerts, including those past the first 1000.
    pub alerts_total: u64,
}

pub fn report(state: &LiveState, follower: &Follower) -> TrackReport {
    let devices = state.device_reports();
    TrackReport {
        schema_version: SCHEMA_VERSION,
        trace: follower.trace_info(state),
        thresholds: state.thresholds,
        unknown_size_devices: devices
            .iter()
            .filter(|d| d.total_bytes.is_none())
            .map(|d| d.device)
            .collect(),
        devices,
        alerts: state.alerts.clone(),
        alerts_total: state.alerts_total,
    }
}

/// Reads the trace (following it with `follow` until the process closes it or, with
/// `pid`, exits), printing alerts as they come when following in text mode.
pub fn run(
    mut follower: Follower,
    mut state: LiveState,
    follow: bool,
    pid: Option<u32>,
    interval_ms: u64,
    live_text: bool,
) -> Result<TrackReport, Error> {
    let mut printed = 0;
    loop {
        let running = match pid {
            Some(pid) => Some(crate::live::process_running(pid)),
            None => follower.writer_running(),
        };
        follower.poll(&mut [&mut state])?;
        if live_text && follow {
            let mut out = anstream::stdout();
            for a in &state.alerts[printed..] {
                write_alert(&mut out, a).map_err(Error::Output)?;
            }
            printed = state.alerts.len();
        }
        if !follow || state.pipeline.complete || running == Some(false) {
            break;
        }
        if !term::sleep_unless_interrupted(interval_ms) {
            return Err(Error::Interrupted);
        }
    }
    let report = report(&state, &follower);
    for d in &report.unknown_size_devices {
        term::warn(&format!(
            "device {}: its memory size is unknown (the trace has no NVML sample or failed \
             allocation that read it): pass --device-memory SIZE to check thresholds",
            units::device(*d)
        ));
    }
    Ok(report)
}

pub fn write_text(report: &TrackReport, out: &mut dyn Write) -> io::Result<()> {
    report.trace.write_text(out)?;
    writeln!(
        out,
        "thresholds: warning at {}%, critical at {}% of device memory",
        report.thresholds.warning_percent, report.thresholds.critical_percent
    )?;
    if report.devices.is_empty() {
        writeln!(out, "no device memory allocated")?;
    }
    for d in &report.devices {
        write_device(out, d)?;
    }
    writeln!(out)?;
    if report.alerts_total == 0 {
        let note = if report.unknown_size_devices.is_empty() {
            ""
        } else {
            " (not checked where the device's size is unknown)"
        };
        return writeln!(out, "{BOLD}no alerts{BOLD:#}{note}");
    }
    writeln!(
        out,
        "{WARN}{}{WARN:#}:",
        units::plural(report.alerts_total, "alert", "alerts")
    )?;
    for a in &report.alerts {
        write_alert(out, a)?;
    }
    if report.alerts_total > report.alerts.len() as u64 {
        writeln!(
            out,
            "  ... and {} more",
            report.alerts_total - report.alerts.len() as u64
        )?;
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub source: super::follow::Source,
    /// Keep reading while the trace grows, until the process closes it (implied by
    /// --pid); alerts are printed as they happen.
    #[arg(long)]
    pub follow: bool,
    /// Seconds between reads when following.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = super::common::interval_arg)]
    pub interval: u64,
    #[command(flatten)]
    pub thresholds: super::follow::ThresholdArgs,
    /// Exit 3 if any alert was raised.
    #[arg(long)]
    pub fail_on_alerts: bool,
    /// Print the report as JSON (fields in docs/REPORTS.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run_args(args: &Args) -> Result<(), Error> {
    let state = args.thresholds.state();
    let follower = args.source.open()?;
    let follow = args.follow || args.source.pid.is_some();
    let report = run(
        follower,
        state,
        follow,
        args.source.pid,
        args.interval,
        !args.json,
    )?;
    super::common::emit(args.json, &report, write_text)?;
    if args.fail_on_alerts && report.alerts_total > 0 {
        return Err(Error::Findings(format!(
            "{} raised (--fail-on-alerts)",
            units::plural(report.alerts_total, "alert", "alerts")
        )));
    }
    Ok(())
}
