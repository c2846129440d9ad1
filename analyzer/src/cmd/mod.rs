//! The commands: each module holds one command's clap arguments and its `run` (thin: the
//! engines are in `report/`, `export/`, `views/`, `live/`), wired into `cli` by one enum
//! variant and one match arm. What the commands that write a file share lives here:
//! reading the trace with observers, the moment flags, and the output file (`-o FILE`,
//! `-o -` for stdout where it makes sense, never overwriting without `-f`).

// Commands that write a file.
pub mod export;
pub mod flamegraph;
pub mod report;
pub mod timeline;
// The launcher (`gpumemprof run`): runs a command under the shim.
pub mod run;

// summary/peak/leaks (`totals`), over several traces, one per rank, or a directory
// (`ranks`).
pub mod ranks;
pub mod totals;

// The checking commands and what they share (`common`: printing, gates; `follow`: the
// flags of the commands that follow a trace being written).
pub mod analyze;
pub mod browse;
pub mod browse_job;
pub mod common;
pub mod diagnose;
pub mod diff;
pub mod follow;
pub mod info;
pub mod monitor;
pub mod oom;
pub mod track;
pub mod whatif;

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::Error;
use crate::observe::Observer;
use crate::replay::{Loaded, MemoryLevel};
use crate::snapshot::{Moment, Snapshot, SnapshotBuilder};
use crate::term;

/// `-o FILE` and `-f`.
#[derive(Debug, Args)]
pub struct Output {
    /// Where to write the output (`-` for stdout, where the format is text).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Overwrite FILE if it exists.
    #[arg(short = 'f', long)]
    pub force: bool,
}

impl Output {
    pub fn is_stdout(&self) -> bool {
        self.output.as_os_str() == "-"
    }

    /// Refuses early (before reading the trace) what `write` would refuse.
    pub fn check(&self, trace: &Path) -> Result<(), Error> {
        if self.is_stdout() {
            return Ok(());
        }
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        if same(&self.output, trace) {
            return Err(Error::Failed(format!(
                "{}: that is the trace being read; choose another output path",
                self.output.display()
            )));
        }
        if self.output.is_dir() {
            return Err(Error::Failed(format!(
                "{}: is a directory; give a file name with -o (a file in it, for example)",
                self.output.display()
            )));
        }
        if !self.force && self.output.exists() {
            return Err(exists(&self.output));
        }
        Ok(())
    }

    /// Writes `bytes` to the file (created, or replaced with `-f`) or to stdout.
    pub fn write(&self, bytes: &[u8]) -> Result<(), Error> {
        if self.is_stdout() {
            let stdout = io::stdout();
            let mut out = stdout.lock();
            return out
                .write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(Error::Output);
        }
        let mut file = term::create_output(&self.output, self.force)?;
        file.write_all(bytes)
            .and_then(|()| file.flush())
            .map_err(|source| Error::File {
                what: format!("writing {}", self.output.display()),
                source,
            })
    }

    /// Refuses `-o -` for a binary or document format.
    pub fn require_file(&self, what: &str) -> Result<(), Error> {
        if self.is_stdout() {
            return Err(Error::Failed(format!(
                "{what} is not written to stdout: give a file name with -o"
            )));
        }
        Ok(())
    }

    /// The one line on stderr that says what was written (not with `-q`).
    pub fn done(&self, what: &str) {
        if !self.is_stdout() && !term::quiet() {
            eprintln!("gpumemprof: wrote {}: {what}", self.output.display());
        }
    }
}

fn exists(path: &Path) -> Error {
    Error::Failed(format!(
        "{}: already exists; pass -f to overwrite it, or choose another path",
        path.display()
    ))
}

/// Which moment a flamegraph or folded export shows (default: the peak).
#[derive(Debug, Args, Default)]
pub struct MomentArgs {
    /// Live memory when the trace ended (what leaked) instead of at the peak.
    #[arg(long, conflicts_with_all = ["oom", "at"])]
    pub leaks: bool,
    /// Live memory when the Nth out-of-memory failure happened (`--oom` alone: the
    /// first; `--oom=3`: the third).
    #[arg(
        long,
        value_name = "N",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1",
        value_parser = clap::value_parser!(u64).range(1..),
        conflicts_with = "at"
    )]
    pub oom: Option<u64>,
    /// Live memory at this time, in seconds since the trace started (e.g. 12.5).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub at: Option<u64>,
    /// Only this device's memory (CUDA ordinal); default: every device, side by side.
    #[arg(long, value_name = "N")]
    pub device: Option<i32>,
    /// Count a framework allocator's tensors (the default once the trace has them) or the
    /// segments allocated from CUDA, HIP or the driver.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub level: Option<MemoryLevel>,
}

impl MomentArgs {
    pub fn moment(&self) -> Moment {
        match (self.leaks, self.oom, self.at) {
            (true, _, _) => Moment::End,
            (_, Some(n), _) => Moment::Oom(n),
            (_, _, Some(ns)) => Moment::At(ns),
            _ => Moment::Peak,
        }
    }

    /// Whether any flag differs from the default (the peak of every device).
    pub fn any(&self) -> bool {
        self.leaks
            || self.oom.is_some()
            || self.at.is_some()
            || self.device.is_some()
            || self.level.is_some()
    }

    pub fn builder(&self) -> SnapshotBuilder {
        SnapshotBuilder::new(self.moment(), self.device).with_level(self.level)
    }

    /// `--device N` of a device the trace never allocated on is a mistake, not an empty
    /// graph: the command's failure, naming the devices it has.
    pub fn check_device(&self, r: &crate::replay::Replayed) -> Result<(), Error> {
        let Some(device) = self.device else {
            return Ok(());
        };
        let mut devices: Vec<i32> = r.rows.iter().map(|row| row.device).collect();
        devices.dedup();
        if devices.contains(&device) {
            return Ok(());
        }
        let have: Vec<String> = devices.iter().map(|&d| crate::units::device(d)).collect();
        Err(Error::Failed(format!(
            "the trace has no memory on device {device} (it has {}): give one of those to \
             --device",
            if have.is_empty() {
                "none".to_string()
            } else {
                format!(
                    "{} {}",
                    if have.len() == 1 { "device" } else { "devices" },
                    have.join(", ")
                )
            }
        )))
    }
}

/// Seconds (a decimal number, not negative) to nanoseconds.
fn parse_seconds(text: &str) -> Result<u64, String> {
    let s: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (e.g. 12.5)"))?;
    if s.is_nan() || s < 0.0 {
        return Err(format!("{text:?}: give a time of 0 seconds or more"));
    }
    // u64 nanoseconds reach 584 years.
    if s * 1e9 >= u64::MAX as f64 {
        return Err(format!(
            "{text:?}: too large (at most {} seconds)",
            u64::MAX / 1_000_000_000
        ));
    }
    Ok((s * 1e9).round() as u64)
}

/// Opens and replays the whole trace, showing it to `observers` (progress, Ctrl-C and the
/// truncated-trace warning as for every command: see `input.rs`).
pub fn load(path: &Path, observers: &mut [&mut dyn Observer]) -> Result<Loaded, Error> {
    crate::input::load_observed(path, observers)
}

/// A snapshot the trace cannot give (no such OOM) is the command's failure.
pub fn snapshot(builder: SnapshotBuilder) -> Result<Snapshot, Error> {
    builder.finish().map_err(Error::Failed)
}

/// The profiled command line with the program by its file name (`train 20`): a build
/// folder's path would crowd out the numbers in titles.
pub fn program(argv: &[String]) -> String {
    let mut words: Vec<String> = argv.to_vec();
    if let Some(first) = words.first_mut() {
        if let Some(name) = Path::new(first.as_str()).file_name() {
            *first = name.to_string_lossy().into_owned();
        }
    }
    if words.is_empty() {
        "(unknown program)".to_string()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::parse_seconds;

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("12.5"), Ok(12_500_000_000));
        assert_eq!(parse_seconds("0"), Ok(0));
        assert_eq!(parse_seconds("0.000000001"), Ok(1));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("soon").is_err());
        assert!(parse_seconds("inf").is_err());
    }
}
