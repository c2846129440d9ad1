//! The analyzer's errors and the one table of its exit codes (documented in docs/REPORTS.md).

use std::fmt;
use std::io;
use std::path::PathBuf;

use gpumemprof_format::ReadError;

/// Every exit status the `gpumemprof` CLI can return. Scripts and CI gates depend on
/// these numbers: never renumber one, only add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The report was written.
    Ok = 0,
    /// The trace could not be opened or read, or the report could not be written.
    Error = 1,
    /// Bad command line (clap's own exit status).
    Usage = 2,
    /// Reserved: a check command found problems (e.g. leaks above a threshold).
    Findings = 3,
    /// Reserved: a CI gate (budget) failed.
    GateFailed = 4,
    /// The file is not a valid trace: not a trace, header cut short, a newer format
    /// version, or a corrupt block.
    InvalidInput = 5,
    /// Reserved: interrupted by SIGINT.
    Interrupted = 130,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Why a command failed.
#[derive(Debug)]
pub enum Error {
    /// The trace file could not be opened.
    Open { path: PathBuf, source: io::Error },
    /// The trace could not be decoded (or reading it failed part way).
    Read { path: PathBuf, source: ReadError },
    /// Writing the report failed (other than a closed pipe, which is not an error).
    Output(io::Error),
}

impl Error {
    pub fn exit(&self) -> Exit {
        match self {
            Error::Open { .. } | Error::Output(_) => Exit::Error,
            // An I/O failure while reading is the file's situation, not its content.
            Error::Read {
                source: ReadError::Io(_),
                ..
            } => Exit::Error,
            Error::Read { .. } => Exit::InvalidInput,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Open { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Read { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Output(e) => write!(f, "writing the report: {e}"),
        }
    }
}

impl std::error::Error for Error {}
