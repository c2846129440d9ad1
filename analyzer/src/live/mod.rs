//! Following a trace while the shim writes it, for `monitor` and `track`.
//!
//! The shim writes independent blocks, each with one `write(2)`, so a trace is readable at
//! any moment up to its last complete block. `Follower` keeps the replay between reads and
//! continues each read where the last complete block ended (a block caught half written is
//! read again, whole, next time); nothing is read twice. `LiveState` is the observer that
//! keeps what the live views show: live bytes now and at their peak per (device, kind),
//! live bytes per call site, the device's memory size, and threshold alerts.
//!
//! `--pid PID` finds the trace of a running process (see `find_trace`).

//!
//! Files: this one (`Follower`), `state` (`LiveState` and its alerts), `find` (the trace
//! of a running process).

mod find;
mod state;

pub use crate::process::{process_running, still_writing};
pub use find::find_trace;
pub use state::*;

use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use gpumemprof_format::header::{read_preamble, Preamble};
use gpumemprof_format::{Damage, TraceReader};

use crate::error::Error;
use crate::input::read_error;
use crate::observe::{record_time, Observer};
use crate::replay::{LiveChange, Loaded, Replay, Replayed};
use crate::report::TraceInfo;
use crate::term;

/// Alerts kept with their details; later ones are only counted.
pub const MAX_ALERTS: usize = 1000;
/// A trace read as it grows.
pub struct Follower {
    path: PathBuf,
    /// The file's preamble and header, put in front of each continued read.
    preamble: Vec<u8>,
    /// File offset of the first block not read yet.
    offset: u64,
    replay: Replay,
    changes: Vec<LiveChange>,
    pub header: serde_json::Value,
    pub blocks: u64,
    /// The last read ended inside a block (being written, or cut short).
    pub truncated: bool,
    /// Damaged blocks skipped by every read so far.
    pub damage: Damage,
}

impl Follower {
    /// The `trace` object of a live report, with what `state` has seen so far.
    pub fn trace_info(&self, state: &LiveState) -> TraceInfo {
        let loaded = Loaded {
            header: self.header.clone(),
            replayed: Replayed {
                pipeline: state.pipeline,
                ..Replayed::default()
            },
            truncated: self.truncated,
            blocks: self.blocks,
            damage: self.damage.clone(),
            second_trace_at: None,
        };
        TraceInfo::new(self.path(), &loaded)
    }

    /// Reads the trace's preamble and header.
    pub fn open(path: &Path) -> Result<Follower, Error> {
        let file = File::open(path).map_err(|source| Error::Open {
            path: path.to_owned(),
            source,
        })?;
        // Validates magic, version and header exactly as a full read would.
        let Preamble {
            header,
            bytes: preamble,
            ..
        } = read_preamble(&mut BufReader::new(file)).map_err(|e| read_error(path, e))?;
        let replay = Replay::new().of_header(&header);
        Ok(Follower {
            path: path.to_owned(),
            offset: preamble.len() as u64,
            header,
            preamble,
            replay,
            changes: Vec::new(),
            blocks: 0,
            truncated: false,
            damage: Damage::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the process that writes this trace runs: `Some(false)` when its header
    /// names this host and that process no longer runs with the file open (gone, or its pid
    /// reused), `None` when that cannot be told (another host, no pid).
    pub fn writer_running(&self) -> Option<bool> {
        let pid = self.header.get("pid").and_then(|p| p.as_u64())?;
        let host = self.header.get("host").and_then(|h| h.as_str());
        if host.is_some_and(|h| h != gpumemprof_format::template::hostname()) {
            return None;
        }
        Some(still_writing(pid as u32, host, &self.path))
    }

    /// Reads every complete block added since the last call, showing its records and
    /// changes to `observers`. Returns the number of records read.
    pub fn poll(&mut self, observers: &mut [&mut dyn Observer]) -> Result<u64, Error> {
        let path = self.path.clone();
        let mut file = File::open(&path).map_err(|source| Error::Open {
            path: path.clone(),
            source,
        })?;
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| read_error(&path, e.into()))?;
        let chained = Cursor::new(self.preamble.as_slice()).chain(BufReader::new(file));
        let mut reader = TraceReader::open(chained).map_err(|e| read_error(&path, e))?;
        let mut n = 0u64;
        while let Some(record) = reader.next_salvaged().map_err(|e| read_error(&path, e))? {
            for o in observers.iter_mut() {
                o.record(&record);
            }
            let time = record_time(&record).unwrap_or(0);
            self.changes.clear();
            self.replay.record_changes(record, &mut self.changes);
            if !self.changes.is_empty() {
                for o in observers.iter_mut() {
                    o.changes(time, &self.changes);
                }
            }
            n += 1;
            if n & 0xfff == 0 && term::interrupted() {
                return Err(Error::Interrupted);
            }
        }
        self.offset += reader.bytes_read() - self.preamble.len() as u64;
        self.blocks += reader.blocks_read();
        self.truncated = reader.truncated();
        self.damage.add(reader.damage());
        Ok(n)
    }
}
