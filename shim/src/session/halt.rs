//! A bug of the shim met while the program runs: the panic hook that says so in one line,
//! once, and the halt that follows, after which every hook passes straight through and the
//! trace is completed as usual at the end, with a `Stopped` record that says why.
//!
//! ```text
//!  a hook's bookkeeping, the writer, the C API panics ─► the panic hook:
//!     (first panic only) "gpumemprof: warning: internal error at FILE:LINE: ..."
//!     `halt`: ACTIVE ─► STOPPED (hooks pass through), the pipeline notes the time
//!  ─► caught where it happened (`record::after_call`, the writer thread's body, each C API
//!     function): it never unwinds into C
//!  exit, signal: the trace completed, `Stopped { internal_error }` before its End record
//!     (the writer died: the exit handler drains what it left, `Pipeline::abandon_writer`)
//! ```
//!
//! Why stop rather than go on: the state the panic left is unknown (a half-updated cache,
//! a stack id never noted), and a bug that fires once tends to fire on every event: each
//! would unwind, and the standard hook would print a backtrace per event on the program's
//! stderr. The shim links its own copy of the standard library, so its hook is its own:
//! the program's panics (a Rust program's) are not touched.
//!
//! `GPUMEMPROF_TEST_PANIC_AT` (`sys/faults.rs`) makes an event's bookkeeping or the writer
//! panic, as such a bug would: the tests' way to see all of the above happen (README,
//! "Environment").

use super::{current, ACTIVE, STATE, STOPPED};
use crate::sys::diag::FixedLine;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a panic was told already.
static TOLD: AtomicBool = AtomicBool::new(false);

/// Installs the hook (at the session's start): any panic of the shim stops recording;
/// the first one's place and message are one warning line, later ones print nothing.
pub(super) fn install() {
    if cfg!(test) {
        // The shim's unit tests: the test harness's own panics (failed asserts) are told.
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        halt();
        if TOLD.swap(true, Ordering::AcqRel) {
            return;
        }
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(|s| s.as_str()))
            .unwrap_or("a panic");
        let mut line = FixedLine::new();
        let _ = write!(line, "gpumemprof: warning: internal error");
        if let Some(at) = info.location() {
            let _ = write!(line, " at {}:{}", at.file(), at.line());
        }
        let _ = writeln!(
            line,
            ": {}; recording stops here and the program goes on (a bug in gpumemprof: \
             please report it)",
            msg.replace('\n', " ")
        );
        line.emit();
    }));
}

/// After a panic of the shim: recording stops for good in this process (every hook
/// passes through), and the pipeline notes when, for the trace's `Stopped` record.
fn halt() {
    if STATE
        .compare_exchange(ACTIVE, STOPPED, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        if let Some(p) = current() {
            p.halt();
        }
    }
}
