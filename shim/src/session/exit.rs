//! The ends a process chooses: `exit` (and return from `main`) through an `on_exit`
//! handler (glibc's `atexit` that is also told the exit status), `_exit`/`_Exit` hooked to
//! complete the trace first. Both record the exit status, drain the rings, write the End
//! record, stop the writer and say so on stderr.

use super::unfinished;
use crate::capture::thread::Guard;
use crate::sys::diag::{say, warn};
use crate::sys::dl;
use crate::writer::Written;
use gpumemprof_format::{Ending, StopReason};
use std::ffi::{c_int, c_void, CStr};
use std::time::Duration;

/// The exit handler waits this long for the writer's final flush.
const EXIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

extern "C" {
    /// glibc: like `atexit`, and the handler is passed `exit`'s status.
    fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// Registers the exit handler (from the constructor).
pub(super) fn register() {
    // SAFETY: a plain extern "C" function without captured state.
    unsafe { on_exit(at_exit, std::ptr::null_mut()) };
}

/// Completes the trace (the exit status, drain, End record, stop the writer) and says so
/// on stderr.
fn finish_trace(status: c_int) {
    let Some(p) = unfinished() else { return };
    let _g = Guard::enter();
    p.set_ending(Ending::Exit(status));
    match p.shutdown(EXIT_FLUSH_TIMEOUT) {
        Some(w) if w.path.is_empty() => {}
        Some(Written {
            stopped: Some((reason, at)),
            ref path,
            events,
            dropped,
            ..
        }) => say(&format!(
            "wrote {} events to {}, then recording stopped at {}.{:03} s: {}; {}",
            events,
            path,
            at / 1_000_000_000,
            at / 1_000_000 % 1000,
            reason.words(),
            match reason {
                // The hooks passed everything through from then on: nothing was counted.
                StopReason::InternalError =>
                    "what the program did after that is not in the trace".to_string(),
                _ => format!("{dropped} later events are not in the trace"),
            }
        )),
        Some(w) if w.out_of_memory > 0 => say(&format!(
            "wrote {} events to {}; {} failed for lack of memory: see why with: gpumemprof oom {}",
            w.events,
            w.path,
            if w.out_of_memory == 1 {
                "1 allocation".to_string()
            } else {
                format!("{} allocations", w.out_of_memory)
            },
            w.path
        )),
        Some(w) => say(&format!(
            "wrote {} events to {}; see what leaked with: gpumemprof leaks {}",
            w.events, w.path, w.path
        )),
        None => warn(
            "the writer did not finish its final flush in time; the trace may lack its last events",
        ),
    }
}

/// At exit: drain the queue and write the End record. Later events (other atexit
/// handlers freeing memory) are still written, by the threads that make them.
extern "C" fn at_exit(status: c_int, _arg: *mut c_void) {
    let _ = std::panic::catch_unwind(|| finish_trace(status));
}

/// `_exit` skips atexit handlers: complete the trace first, then leave as asked.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    leave(status, c"_exit")
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    leave(status, c"_Exit")
}

fn leave(status: c_int, name: &CStr) -> ! {
    let _ = std::panic::catch_unwind(|| finish_trace(status));
    let real = dl::lookup(libc::RTLD_NEXT, name);
    if !real.is_null() {
        // SAFETY: libc's _exit/_Exit: void(int), never returns.
        let f: extern "C" fn(c_int) -> ! = unsafe { std::mem::transmute(real) };
        f(status);
    }
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}
