//! What every command shares besides reading the trace (`input.rs`): printing a report
//! (text with colour only where it is read, or JSON), gates and argument parsers.

use std::io::{self, BufWriter, Write};

use serde::Serialize;

use crate::error::Error;
use crate::units;

/// Writes `report` to stdout as pretty JSON or through its text renderer. Styles in the
/// text reach the terminal only (see `term`).
pub fn emit<T: Serialize>(
    json: bool,
    report: &T,
    text: fn(&T, &mut dyn Write) -> io::Result<()>,
) -> Result<(), Error> {
    let stdout = io::stdout();
    let choice = anstream::AutoStream::choice(&stdout);
    let out = BufWriter::new(anstream::AutoStream::new(stdout.lock(), choice));
    // Text on a terminal fits its width (`fit`); JSON, files and pipes as written.
    let mut out: Box<dyn Write> = match crate::fit::terminal_width().filter(|_| !json) {
        Some(width) => Box::new(crate::fit::Fit::new(out, width)),
        None => Box::new(out),
    };
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

/// clap's parser for a range's budget, `NAME=SIZE` (the name may hold `=`: the last one
/// separates).
pub fn range_budget_arg(text: &str) -> Result<(String, u64), String> {
    let (name, size) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("{text:?}: give NAME=SIZE (e.g. forward=2GiB)"))?;
    if name.is_empty() {
        return Err(format!("{text:?}: the range's name is empty"));
    }
    Ok((name.to_string(), units::parse_size(size)?))
}

/// clap's parser for a device's memory size: a SIZE above 0 (a device of no memory would
/// pass every threshold check as 0% or fail them all).
pub fn device_size_arg(text: &str) -> Result<u64, String> {
    match units::parse_size(text)? {
        0 => Err(format!("{text:?}: a device's memory size must be above 0")),
        n => Ok(n),
    }
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
