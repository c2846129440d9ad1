//! Reports: one module per command, each turning a replayed trace into a serializable
//! report (its JSON form) plus a text rendering. What every report shares lives here:
//! the schema version, the `trace` object and the text header.
//!
//! JSON field names are a public interface (docs/REPORTS.md): fields are only ever
//! added, never renamed or removed.

pub mod analyze;
pub mod by_range;
pub mod framework;
pub mod leaks;
pub mod level;
pub mod libraries;
pub mod oom;
pub mod peak;
pub mod summary;
pub mod teardown;

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

use crate::replay::Loaded;
use crate::symbolize::Frame;
use crate::units;
use gpumemprof_format::Ending;

/// `schema_version` of every JSON report; raised only for a change old readers would
/// misread (never for an added field).
pub const SCHEMA_VERSION: u32 = 1;

/// Frames shown per site unless `--frames` says otherwise.
pub const DEFAULT_FRAMES: usize = 10;

/// The `trace` object of every JSON report: which trace, and how much to trust it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceInfo {
    /// The trace file as given on the command line.
    pub path: String,
    /// Process id of the profiled process (null if the header lacks it).
    pub pid: Option<u64>,
    /// Its command line.
    pub argv: Vec<String>,
    /// The process closed the trace cleanly (an End record was written).
    pub complete: bool,
    /// How the process ended, when the shim recorded it (null otherwise).
    pub ending: Option<EndingInfo>,
    /// The file ends inside a block (killed mid-write); only complete blocks were read.
    pub truncated: bool,
    /// Damaged blocks skipped (their records could not be read).
    pub damaged_blocks: u64,
    /// Bytes of the file in them.
    pub damaged_bytes: u64,
    /// Events they held (the counters after them say); null when a damaged block had no
    /// counters after it.
    pub damaged_events: Option<u64>,
    /// Why the first damaged block could not be read, and its file offset.
    #[serde(skip)]
    pub damage: gpumemprof_format::Damage,
    /// Not complete, and its process still runs on this host with the file open: the
    /// trace is read as far as it was written (text says "still running").
    #[serde(skip)]
    pub running: bool,
    /// Events the shim encoded, per its last counters record.
    pub events: u64,
    /// Events whose producer had to wait for queue space.
    pub queue_waits: u64,
    /// Events lost: the report's counts are off by up to this many, either way (lost
    /// allocations count low, lost frees leave freed memory live).
    pub dropped: u64,
    /// Time of the last record, ns since the trace started.
    pub duration_ns: u64,
    /// Recording stopped before the process ended (a write to the trace failed): null
    /// otherwise. What came after it is not in the trace.
    pub stopped: Option<StoppedInfo>,
    /// Which level the allocations are (tensors or an allocator's segments), from the
    /// header; shown by `summary` as its own `framework` object, not inside `trace`.
    #[serde(skip)]
    pub framework: framework::Framework,
    /// `--range NAME`: only what was allocated while that range was open (absent
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<crate::window::Window>,
}

impl TraceInfo {
    pub fn new(path: &Path, loaded: &Loaded) -> TraceInfo {
        let header = &loaded.header;
        let argv = header
            .get("argv")
            .and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let p = &loaded.replayed.pipeline;
        let pid = header.get("pid").and_then(|p| p.as_u64());
        let running = !p.complete
            && pid.is_some_and(|pid| {
                let host = header.get("host").and_then(|h| h.as_str());
                crate::process::still_writing(pid as u32, host, path)
            });
        TraceInfo {
            path: path.display().to_string(),
            pid: header.get("pid").and_then(|p| p.as_u64()),
            argv,
            complete: p.complete,
            ending: p.ending.map(EndingInfo::from),
            truncated: loaded.truncated,
            damaged_blocks: loaded.damage.blocks,
            damaged_bytes: loaded.damage.bytes,
            damaged_events: (loaded.damage.events_known || loaded.damage.blocks == 0)
                .then_some(loaded.damage.events),
            damage: loaded.damage.clone(),
            running,
            events: p.events,
            queue_waits: p.queue_waits,
            dropped: p.dropped,
            duration_ns: p.duration_ns,
            stopped: p.stopped.map(|(reason, time_ns)| StoppedInfo {
                time_ns,
                reason: reason.name(),
                words: reason.words(),
            }),
            framework: framework::Framework::from_header(header),
            window: None,
        }
    }

    /// Two or three lines: what was traced, for how long, and any reason for doubt.
    pub fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        let pid = self.pid.map_or_else(|| "?".to_string(), |p| p.to_string());
        writeln!(
            out,
            "trace {}  (pid {pid}: {})",
            self.path,
            self.argv.join(" ")
        )?;
        let ending = self.ending_words();
        writeln!(
            out,
            "duration {}, {} events, process {ending}",
            units::secs(self.duration_ns),
            self.events
        )?;
        if let Some(s) = &self.stopped {
            writeln!(
                out,
                "WARNING: recording stopped at {}: {}; what the process did after that is not \
                 in the trace",
                units::secs(s.time_ns),
                s.words
            )?;
        } else if self.dropped > 0 {
            writeln!(
                out,
                "WARNING: {} events were dropped by the shim: {}",
                self.dropped,
                crate::input::LOSS_BOTH_WAYS
            )?;
        }
        if self.truncated {
            writeln!(
                out,
                "WARNING: the trace file is cut short; only its complete blocks were read"
            )?;
        }
        if let Some(words) = self.damage_words() {
            writeln!(out, "WARNING: {words}")?;
        }
        if let Some(w) = &self.window {
            let to = w.to_ns.map_or("the end".to_string(), units::secs);
            writeln!(
                out,
                "only what was allocated in range {:?}, open from {} to {to}, on any thread",
                w.range,
                units::secs(w.from_ns)
            )?;
        }
        writeln!(out)
    }
}

impl TraceInfo {
    /// What damaged blocks cost, in a sentence the text and HTML reports print; `None`
    /// for a sound trace.
    pub fn damage_words(&self) -> Option<String> {
        (self.damaged_blocks > 0).then(|| {
            format!(
                "{} of the trace file ({}) could not be read and {} skipped; {}",
                units::plural(self.damaged_blocks, "block", "blocks"),
                units::bytes(self.damaged_bytes),
                if self.damaged_blocks == 1 {
                    "was"
                } else {
                    "were"
                },
                crate::input::damage_events(&self.damage)
            )
        })
    }
}

/// `trace.stopped` of the JSON reports: `{"time_ns": 1208000000, "reason": "file_size_limit"}`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StoppedInfo {
    pub time_ns: u64,
    /// `file_size_limit`, `no_space` or `write_error`.
    pub reason: &'static str,
    #[serde(skip)]
    pub words: &'static str,
}

/// `trace.ending` of the JSON reports: `{"how": "signal", "signal": 11, "name": "SIGSEGV"}`
/// or `{"how": "exit", "status": 0}`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "how", rename_all = "lowercase")]
pub enum EndingInfo {
    Signal { signal: u32, name: String },
    Exit { status: i32 },
}

impl From<Ending> for EndingInfo {
    fn from(e: Ending) -> EndingInfo {
        match e {
            Ending::Signal(signal) => EndingInfo::Signal {
                signal,
                name: Ending::signal_name(signal)
                    .map_or_else(|| format!("signal {signal}"), str::to_owned),
            },
            Ending::Exit(status) => EndingInfo::Exit { status },
        }
    }
}

impl TraceInfo {
    /// The signal that ended the process, as `SIGSEGV (signal 11)`, if one did.
    pub fn died_of(&self) -> Option<String> {
        match &self.ending {
            Some(EndingInfo::Signal { signal, .. }) => Some(Ending::describe_signal(*signal)),
            _ => None,
        }
    }

    /// The process ran to an exit (not a fatal signal) and closed its trace: what is live
    /// at the end was never freed by a program that had the chance to.
    pub fn exited(&self) -> bool {
        self.complete && self.died_of().is_none()
    }

    /// How the process ended, in words: `exited cleanly`, `exited with status 3`,
    /// `ended by SIGSEGV (signal 11)` or `did NOT exit cleanly`.
    pub fn ending_words(&self) -> String {
        if let Some(sig) = self.died_of() {
            return format!("ended by {sig}");
        }
        if self.stopped.is_some() && self.ending.is_none() {
            return "not recorded to its end (recording stopped)".to_string();
        }
        match (&self.ending, self.complete) {
            (Some(EndingInfo::Exit { status }), true) if *status != 0 => {
                format!("exited with status {status}")
            }
            (_, true) => "exited cleanly".to_string(),
            (_, false) if self.running => {
                "still running (the trace is read as far as it is written)".to_string()
            }
            (_, false) => "did NOT exit cleanly".to_string(),
        }
    }

    /// When "live at the end" was taken, for the leak lines: `at exit`, `when the process
    /// died` or `when the trace stopped`.
    pub fn live_when(&self) -> &'static str {
        if self.window.is_some() {
            "when the range closed"
        } else if self.died_of().is_some() {
            "when the process died"
        } else if self.stopped.is_some() {
            "when recording stopped"
        } else if self.complete {
            "at exit"
        } else if self.running {
            "so far"
        } else {
            "when the trace stopped"
        }
    }
}

/// Writes a site's frames, one per line, indented.
pub fn write_frames(out: &mut dyn Write, frames: &[Frame], indent: &str) -> io::Result<()> {
    if frames.is_empty() {
        return writeln!(out, "{indent}(no stack captured)");
    }
    for f in frames {
        writeln!(out, "{indent}{}", f.describe())?;
    }
    Ok(())
}
