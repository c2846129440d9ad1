//! Why a trace could not be read (`ReadError`), for the preamble and the blocks alike.

use std::fmt;
use std::io;

/// Why a trace could not be read. Each variant displays as one actionable line.
#[derive(Debug)]
pub enum ReadError {
    /// The file does not start with the gpumemprof magic bytes.
    NotATrace,
    /// The file ends inside the preamble or the header JSON.
    HeaderTruncated,
    /// Version 0 (invalid) or newer than this crate reads.
    UnsupportedVersion {
        found: u32,
        supported: u32,
    },
    /// Header too long, not JSON, or not a JSON object.
    BadHeader(String),
    /// Damaged bytes inside a complete block. `offset` is the file offset of the block.
    Corrupt {
        offset: u64,
        what: String,
    },
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotATrace => f.write_str("not a gpumemprof trace (bad magic bytes)"),
            ReadError::HeaderTruncated => f.write_str(
                "trace header is cut short: the file ends inside its preamble or header \
                 (the profiled process probably died right after starting)",
            ),
            ReadError::UnsupportedVersion { found, supported } if found > supported => write!(
                f,
                "trace format version {found} is newer than this analyzer supports ({supported}): upgrade gpumemprof"
            ),
            ReadError::UnsupportedVersion { found, supported } => write!(
                f,
                "trace format version {found} is not valid (this analyzer reads version {supported}): the file is damaged"
            ),
            ReadError::BadHeader(why) => write!(f, "bad trace header: {why}"),
            ReadError::Corrupt { offset, what } => write!(f, "corrupt trace at byte {offset}: {what}"),
            ReadError::Io(e) => write!(f, "I/O error while reading the trace: {e}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}
