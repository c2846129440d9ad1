//! What the shim says on stderr: one prefixed line per message, written with one
//! `write(2)` so that the lines of a parent and its forked children never mix (a pipe
//! keeps each write of up to 4 KiB whole), and the quiet switch (`GPUMEMPROF_QUIET`) that
//! silences the progress lines (never the warnings).

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// One warning line on stderr.
pub fn warn(msg: &str) {
    line(&format!("gpumemprof: warning: {msg}\n"));
}

/// One progress line on stderr ("recording ...", "wrote ..."), unless quiet.
pub fn say(msg: &str) {
    if !quiet() {
        line(&format!("gpumemprof: {msg}\n"));
    }
}

/// Writes `text` (a whole line, newline included) to stderr with one `write(2)`; a short
/// write (a full pipe, a signal) goes on with the rest.
pub fn line(text: &str) {
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        // SAFETY: fd 2 and a buffer of `rest.len()` valid bytes.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n > 0 {
            rest = &rest[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {
            continue;
        } else {
            return;
        }
    }
}

/// A line built without allocating, for a signal handler (which may have interrupted
/// `malloc`): at most 512 bytes, the rest cut.
pub struct FixedLine {
    buf: [u8; 512],
    len: usize,
}

impl FixedLine {
    pub const fn new() -> FixedLine {
        FixedLine {
            buf: [0; 512],
            len: 0,
        }
    }

    /// Writes the line (with one `write(2)`, as every line).
    pub fn emit(&self) {
        line(std::str::from_utf8(&self.buf[..self.len]).unwrap_or(""));
    }
}

impl Default for FixedLine {
    fn default() -> FixedLine {
        FixedLine::new()
    }
}

impl std::fmt::Write for FixedLine {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.buf.len() - self.len;
        // Cut at a character boundary, so the line stays UTF-8.
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Progress lines ("recording ...", "wrote ...") are off (`GPUMEMPROF_QUIET=1`).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

pub fn set_quiet(q: bool) {
    QUIET.store(q, Ordering::Relaxed);
}
