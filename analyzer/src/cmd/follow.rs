//! The flags of the commands that follow a trace as it is written (`monitor`, `track`):
//! the trace or process to follow, and the alert thresholds.

use std::path::PathBuf;

use crate::error::Error;
use crate::live::{find_trace, Follower, LiveState, Thresholds};

/// `--warning-threshold`, `--critical-threshold` and `--device-memory` of `monitor` and
/// `track`.
#[derive(Debug, clap::Args)]
pub struct ThresholdArgs {
    /// Alert when device memory in use reaches this percentage of the device's memory.
    #[arg(long, value_name = "PERCENT", default_value = "80", value_parser = super::common::percent_arg)]
    pub warning_threshold: f64,
    /// Alert (critical) at this percentage; at least the warning threshold.
    #[arg(long, value_name = "PERCENT", default_value = "95", value_parser = super::common::percent_arg)]
    pub critical_threshold: f64,
    /// The size of each device's memory (e.g. 80GiB), when the trace does not tell it
    /// (no NVML samples) or to check against a smaller budget.
    #[arg(long, value_name = "SIZE", value_parser = super::common::device_size_arg)]
    pub device_memory: Option<u64>,
}

impl ThresholdArgs {
    /// The live state these settings ask for; a critical threshold below the warning
    /// one is a usage error (exit 2).
    pub fn state(&self) -> LiveState {
        if self.critical_threshold < self.warning_threshold {
            clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--critical-threshold {} is below --warning-threshold {}: give a critical \
                     level at or above the warning level\n",
                    self.critical_threshold, self.warning_threshold
                ),
            )
            .exit();
        }
        LiveState::new(
            Thresholds {
                warning_percent: self.warning_threshold,
                critical_percent: self.critical_threshold,
            },
            self.device_memory,
        )
    }
}

/// The trace to follow: a file, or the trace of a running process.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct Source {
    /// The trace file (it may still be being written).
    pub trace: Option<PathBuf>,
    /// Follow the trace of this running process instead (see docs/REPORTS.md for how it
    /// is found); stops when the process exits.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
}

impl Source {
    pub fn open(&self) -> Result<Follower, Error> {
        match (&self.trace, self.pid) {
            (Some(path), _) => Follower::open(path),
            (None, Some(pid)) => Follower::open(&find_trace(pid)?),
            (None, None) => unreachable!("clap requires TRACE or --pid"),
        }
    }
}
