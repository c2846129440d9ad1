//! What the shim says on stderr: one prefixed line per message, and the quiet switch
//! (`GPUMEMPROF_QUIET`) that silences the progress lines (never the warnings).

use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// One line on stderr, prefixed so users know who speaks.
pub fn warn(msg: &str) {
    eprintln!("gpumemprof: warning: {msg}");
}

/// Progress lines ("recording ...", "wrote ...") are off (`GPUMEMPROF_QUIET=1`).
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

pub fn set_quiet(q: bool) {
    QUIET.store(q, Ordering::Relaxed);
}
