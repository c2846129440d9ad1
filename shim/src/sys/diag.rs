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

/// Progress lines ("recording ...", "wrote ...") are off (`GPUMEMPROF_QUIET=1`).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

pub fn set_quiet(q: bool) {
    QUIET.store(q, Ordering::Relaxed);
}
