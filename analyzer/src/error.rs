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
    /// A command asked to report findings as failure found some (`analyze
    /// --fail-on-findings`, `track --fail-on-alerts`).
    Findings = 3,
    /// A CI gate (budget) failed: `--max-peak`, `--max-leaked`.
    GateFailed = 4,
    /// The file is not a valid trace: not a trace, header cut short, a newer format
    /// version, or a corrupt block.
    InvalidInput = 5,
    /// Interrupted by SIGINT (Ctrl-C).
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
    /// Reading or writing a file other than the trace failed (`what` names the file and
    /// the action, e.g. "writing bundle/manifest.json").
    File { what: String, source: io::Error },
    /// The command cannot go on; the message says why and what to do (an output that
    /// would be overwritten, a process without a trace, ...).
    Failed(String),
    /// A gate was exceeded; the message names the value and the limit.
    Gate(String),
    /// Findings reported as failure, as asked; the message counts them.
    Findings(String),
    /// Input that is not what a trace command reads, beyond one file's content (a
    /// directory holding no trace); the message says what was looked for. Exit 5.
    Invalid(String),
    /// Ctrl-C.
    Interrupted,
}

impl Error {
    pub fn exit(&self) -> Exit {
        match self {
            Error::Open { .. } | Error::Output(_) | Error::File { .. } | Error::Failed(_) => {
                Exit::Error
            }
            Error::Gate(_) => Exit::GateFailed,
            Error::Findings(_) => Exit::Findings,
            Error::Invalid(_) => Exit::InvalidInput,
            Error::Interrupted => Exit::Interrupted,
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
            Error::File { what, source } => write!(f, "{what}: {source}"),
            Error::Failed(m) | Error::Gate(m) | Error::Findings(m) => f.write_str(m),
            Error::Invalid(m) => f.write_str(m),
            Error::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl Error {
    /// The word after `gpumemprof:` on the one stderr line this failure prints.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Gate(_) => "gate failed",
            Error::Findings(_) => "findings",
            Error::Interrupted => "interrupted",
            _ => "error",
        }
    }
}

impl std::error::Error for Error {}
