//! Reading a trace for any command: open it (progress bar on a terminal, Ctrl-C),
//! replay it with or without observers, and the warnings reading leaves (a truncated
//! trace, damaged blocks, symbolization problems), each once, on stderr.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use gpumemprof_format::{ReadError, TraceReader};

use crate::error::Error;
use crate::observe::{replay_observed, Observer};
use crate::replay::{self, Loaded};
use crate::term::{self, Progress};

/// A trace file being read.
pub type TraceFile = TraceReader<BufReader<Progress<File>>>;

/// Opens a trace and reads its header; the reader shows progress on a terminal for a
/// large file and stops at Ctrl-C.
pub fn open(path: &Path) -> Result<TraceFile, Error> {
    let file = File::open(path).map_err(|source| Error::Open {
        path: path.to_owned(),
        source,
    })?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(Error::Failed(format!(
            "{}: a directory, where one trace file is expected (summary, peak and leaks read \
             every trace of a directory; give this command one of them)",
            path.display()
        )));
    }
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

/// Opens and replays the whole trace.
pub fn load(path: &Path) -> Result<Loaded, Error> {
    let reader = open(path)?;
    let loaded = replay::replay(reader).map_err(|e| read_error(path, e))?;
    warn_losses(path, &loaded);
    Ok(loaded)
}

/// `load`, showing every record and live-memory change to `observers` on the way.
pub fn load_observed(path: &Path, observers: &mut [&mut dyn Observer]) -> Result<Loaded, Error> {
    let reader = open(path)?;
    let loaded = replay_observed(reader, observers).map_err(|e| read_error(path, e))?;
    warn_losses(path, &loaded);
    Ok(loaded)
}

/// `load_observed` keeping what was released after the last allocation
/// (`Replayed::exit_tail`: where `report::teardown` finds the interpreter's teardown).
pub fn load_keeping_exit(
    path: &Path,
    observers: &mut [&mut dyn Observer],
) -> Result<Loaded, Error> {
    let reader = open(path)?;
    let replay = replay::Replay::keeping_exit();
    let loaded = if observers.is_empty() {
        replay::replay_with(reader, replay)
    } else {
        crate::observe::replay_observed_with(reader, observers, None, replay)
    }
    .map_err(|e| read_error(path, e))?;
    warn_losses(path, &loaded);
    Ok(loaded)
}

/// Neither a truncated trace nor damaged blocks are an error: the trace is reported from
/// the blocks that could be read, with one warning for each kind of loss.
pub fn warn_losses(path: &Path, loaded: &Loaded) {
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
    if let Some(at) = loaded.second_trace_at {
        term::warn(&format!(
            "{}: another trace starts at byte {at} (two traces concatenated?); only the first \
             is read: split the file there to read the second",
            path.display()
        ));
    }
    let d = &loaded.damage;
    if let Some((offset, why)) = &d.first {
        term::warn(&format!(
            "{}: skipped {} ({}, the first at byte {offset}: {why}); {}",
            path.display(),
            crate::units::plural(d.blocks, "damaged block", "damaged blocks"),
            crate::units::bytes(d.bytes),
            damage_events(d)
        ));
    }
}

/// What lost events do to the numbers, both ways.
pub const LOSS_BOTH_WAYS: &str = "lost allocations make counts low, and lost frees leave \
     freed memory live, so peaks and leaks can be high";

/// What the events of damaged blocks come to, in words.
pub fn damage_events(d: &gpumemprof_format::Damage) -> String {
    let marked = "(`leaks` marks what was allocated before the damage)";
    if d.events_known {
        format!(
            "{} lost: {LOSS_BOTH_WAYS} {marked}",
            crate::units::plural(d.events, "event", "events")
        )
    } else if d.events > 0 {
        format!(
            "at least {} lost (the last damaged block's are not counted): {LOSS_BOTH_WAYS} \
             {marked}",
            crate::units::plural(d.events, "event", "events")
        )
    } else {
        format!("its events are not counted (no counters after it): {LOSS_BOTH_WAYS} {marked}")
    }
}

/// The header's `rank`: written by the shim as a string of digits; a number is accepted
/// too. Absent or not a number: null.
pub fn rank_of(header: &serde_json::Value) -> Option<u64> {
    match header.get("rank")? {
        serde_json::Value::String(s) => s.trim().parse().ok(),
        serde_json::Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// Each message as one warning line (`-q` silences them).
pub fn warn_all(messages: Vec<String>) {
    for m in messages {
        term::warn(&m);
    }
}
