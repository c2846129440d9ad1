//! What every command shares: opening a trace (progress bar, Ctrl-C), replaying it with
//! or without observers, the one warning for a truncated trace, printing a report (text
//! with colour only where it is read, or JSON), and size gates.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::Path;

use gpumemprof_format::{ReadError, TraceReader};
use serde::Serialize;

use crate::error::Error;
use crate::observe::{replay_observed, Observer};
use crate::replay::{self, Loaded};
use crate::term::{self, Progress};
use crate::units;

/// A trace file being read.
pub type TraceFile = TraceReader<BufReader<Progress<File>>>;

/// Opens a trace and reads its header; the reader shows progress on a terminal for a
/// large file and stops at Ctrl-C.
pub fn open(path: &Path) -> Result<TraceFile, Error> {
    let file = File::open(path).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = Progress::new(file, len, &path.display().to_string());
    TraceReader::open(BufReader::with_capacity(1 << 16, reader)).map_err(|e| read_error(path, e))
}

/// A read failure, or Ctrl-C if that is why reading stopped.
pub fn read_error(path: &Path, source: ReadError) -> Error {
    if term::interrupted() {
        Error::Interrupted
    } else {
        Error::Read {
            path: path.to_owned(),
            source,
        }
    }
}

/// Opens and replays the whole trace (see `cli`'s summary/peak/leaks).
pub fn load(path: &Path) -> Result<Loaded, Error> {
    let reader = open(path)?;
    let loaded = replay::replay(reader).map_err(|e| read_error(path, e))?;
    warn_truncated(path, &loaded);
    Ok(loaded)
}

/// `load`, showing every record and live-memory change to `observers` on the way.
pub fn load_observed(path: &Path, observers: &mut [&mut dyn Observer]) -> Result<Loaded, Error> {
    let reader = open(path)?;
    let loaded = replay_observed(reader, observers).map_err(|e| read_error(path, e))?;
    warn_truncated(path, &loaded);
    Ok(loaded)
}

/// A truncated trace is not an error: it is reported from its complete blocks, with one
/// warning.
pub fn warn_truncated(path: &Path, loaded: &Loaded) {
    if loaded.truncated {
        let blocks = if loaded.blocks == 1 {
            "block"
        } else {
            "blocks"
        };
        term::warn(&format!(
            "{}: the trace ends inside a block (the process was probably killed); \
             reporting the {} complete {blocks}",
            path.display(),
            loaded.blocks
        ));
    }
}

/// Writes `report` to stdout as pretty JSON or through its text renderer. Styles in the
/// text reach the terminal only (see `term`).
pub fn emit<T: Serialize>(
    json: bool,
    report: &T,
    text: fn(&T, &mut dyn Write) -> io::Result<()>,
) -> Result<(), Error> {
    let stdout = io::stdout();
    let choice = anstream::AutoStream::choice(&stdout);
    let mut out = BufWriter::new(anstream::AutoStream::new(stdout.lock(), choice));
    let written = if json {
        serde_json::to_writer_pretty(&mut out, report)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        text(report, &mut out)
    };
    written.and_then(|()| out.flush()).map_err(Error::Output)
}

/// The gate of `--max-peak`/`--max-leaked`: fails when `value` exceeds `limit` (a value
/// equal to the limit passes). `what` names the value ("peak"), `flag` the option.
pub fn gate(what: &str, value: u64, flag: &str, limit: Option<u64>) -> Result<(), Error> {
    match limit {
        Some(limit) if value > limit => Err(Error::Gate(format!(
            "{what} {} exceeds {flag} {}: reduce it, or raise the limit if the growth is expected",
            units::bytes_exact(value),
            units::bytes_exact(limit)
        ))),
        _ => Ok(()),
    }
}

/// clap's parser for SIZE arguments (`512MiB`, `2GB`, `1048576`).
pub fn size_arg(text: &str) -> Result<u64, String> {
    units::parse_size(text)
}

/// clap's parser for percentages (thresholds): a number above 0, at most 1000.
pub fn percent_arg(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{text:?} is not a percentage (example: 80)"))?;
    if v > 0.0 && v <= 1000.0 {
        Ok(v)
    } else {
        Err(format!(
            "{text:?}: a percentage must be above 0 and at most 1000"
        ))
    }
}

/// clap's parser for refresh intervals: seconds (a fraction allowed), 0.05 to 3600, in ms.
pub fn interval_arg(text: &str) -> Result<u64, String> {
    let s: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds (example: 0.5)"))?;
    if (0.05..=3600.0).contains(&s) {
        Ok((s * 1000.0).round() as u64)
    } else {
        Err(format!(
            "{text:?}: the interval must be 0.05 to 3600 seconds"
        ))
    }
}

/// The header's string field `key`, if present.
pub fn header_str<'a>(header: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    header.get(key).and_then(|v| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_fail_only_above_the_limit() {
        assert!(gate("peak", 10, "--max-peak", None).is_ok());
        assert!(gate("peak", 10, "--max-peak", Some(10)).is_ok());
        let e = gate("peak", 2048, "--max-peak", Some(1024)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "peak 2.0 KiB (2048 B) exceeds --max-peak 1.0 KiB (1024 B): reduce it, or raise \
             the limit if the growth is expected"
        );
        assert_eq!(e.exit().code(), 4);
    }

    #[test]
    fn percentages() {
        assert_eq!(percent_arg("80"), Ok(80.0));
        assert_eq!(percent_arg("92.5%"), Ok(92.5));
        assert!(percent_arg("0").is_err());
        assert!(percent_arg("x").is_err());
    }
}
