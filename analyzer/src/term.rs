//! Terminal manners shared by every command (documented in docs/REPORTS.md, "Output"):
//!
//! * colour only where it is read: styles go through `anstream`, which drops them unless
//!   the stream is a terminal, and always when `NO_COLOR` is set (`CLICOLOR_FORCE=1`
//!   forces them, for pagers that understand them);
//! * `-q`: no warnings and no progress bar (errors, gate and findings lines still print);
//! * a progress bar on stderr while a large trace is read, only on a terminal;
//! * Ctrl-C: the first one makes reading and following stop and the command exit 130;
//!   a second one exits at once;
//! * output files are never overwritten unless `-f` says so.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anstyle::{AnsiColor, Style};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::Error;

/// Traces smaller than this read in about a second: a bar would only flicker.
pub const PROGRESS_MIN_BYTES: u64 = 64 << 20;

pub const BOLD: Style = Style::new().bold();
pub const WARN: Style = AnsiColor::Yellow.on_default().bold();
pub const BAD: Style = AnsiColor::Red.on_default().bold();
pub const GOOD: Style = AnsiColor::Green.on_default();
pub const DIM: Style = Style::new().dimmed();

static QUIET: AtomicBool = AtomicBool::new(false);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// `-q` was given: no warnings, no progress bar.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// One warning line on stderr, unless `-q`.
pub fn warn(message: &str) {
    if !quiet() {
        anstream::eprintln!("gpumemprof: {WARN}warning:{WARN:#} {message}");
    }
}

/// One progress line on stderr (what is about to happen), unless `-q`.
pub fn say(message: &str) {
    if !quiet() {
        anstream::eprintln!("gpumemprof: {message}");
    }
}

/// The one stderr line of a failed command (printed whatever `-q` says).
pub fn report_failure(e: &Error) {
    let style = match e {
        Error::Findings(_) | Error::Gate(_) => WARN,
        _ => BAD,
    };
    match e {
        Error::Interrupted => anstream::eprintln!("gpumemprof: {style}interrupted{style:#}"),
        _ => anstream::eprintln!("gpumemprof: {style}{}:{style:#} {e}", e.label()),
    }
}

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store and _exit: both are async-signal-safe.
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(130) };
    }
}

/// Catches Ctrl-C (see the module comment).
pub fn catch_interrupt() {
    let handler: extern "C" fn(libc::c_int) = on_sigint;
    // SAFETY: a zeroed sigaction with a valid handler and an empty mask is well-formed.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as libc::sighandler_t;
        // SA_RESTART: reads and writes in progress are not failed by the signal; the
        // flag is checked between them.
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
    }
}

/// Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Sleeps `ms` milliseconds in short steps; false if Ctrl-C came meanwhile.
pub fn sleep_unless_interrupted(ms: u64) -> bool {
    let mut left = ms;
    while left > 0 {
        if interrupted() {
            return false;
        }
        let step = left.min(50);
        std::thread::sleep(std::time::Duration::from_millis(step));
        left -= step;
    }
    !interrupted()
}

/// Whether reading `len` bytes deserves a progress bar.
pub fn progress_wanted(len: u64, stderr_is_terminal: bool, quiet: bool) -> bool {
    stderr_is_terminal && !quiet && len > PROGRESS_MIN_BYTES
}

/// A reader that counts what it reads into a progress bar (when one is wanted) and stops
/// with an error once Ctrl-C was pressed.
pub struct Progress<R> {
    inner: R,
    bar: Option<ProgressBar>,
}

impl<R: Read> Progress<R> {
    /// `len`: the file's size; `label`: what is read (the path).
    pub fn new(inner: R, len: u64, label: &str) -> Progress<R> {
        let bar = progress_wanted(len, io::stderr().is_terminal(), quiet()).then(|| {
            let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left)",
            ) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_message(format!("reading {label}"));
            bar
        });
        Progress { inner, bar }
    }
}

impl<R: Read> Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if interrupted() {
            // Not ErrorKind::Interrupted: readers retry that one.
            return Err(io::Error::other("interrupted"));
        }
        let n = self.inner.read(buf)?;
        if let Some(bar) = &self.bar {
            bar.inc(n as u64);
        }
        Ok(n)
    }
}

impl<R> Drop for Progress<R> {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Creates `path` for writing; an existing file is replaced only with `force` (`-f`).
pub fn create_output(path: &Path, force: bool) -> Result<File, Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    // Readable by the user only, as the trace is: a report carries the same command
    // line, paths and host; and never through a symbolic link (with `-f`, one planted
    // in a shared folder would have us overwrite whatever it points at).
    options
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    options.open(path).map_err(|source| {
        if source.kind() == io::ErrorKind::AlreadyExists {
            Error::Failed(format!(
                "{}: already exists; pass -f to overwrite it, or choose another path",
                path.display()
            ))
        } else if source.raw_os_error() == Some(libc::ELOOP) {
            Error::Failed(format!(
                "{}: is a symbolic link, which gpumemprof never writes through: remove it or \
                 choose another path",
                path.display()
            ))
        } else {
            Error::File {
                what: format!("creating {}", path.display()),
                source,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_only_for_large_traces_on_a_terminal_without_quiet() {
        assert!(progress_wanted(PROGRESS_MIN_BYTES + 1, true, false));
        assert!(!progress_wanted(PROGRESS_MIN_BYTES, true, false));
        assert!(!progress_wanted(1 << 40, false, false));
        assert!(!progress_wanted(1 << 40, true, true));
    }
}
