//! The ends a process chooses: `exit` (and return from `main`) through the atexit
//! handler, `_exit`/`_Exit` hooked to complete the trace first. Both drain the rings,
//! write the End record, stop the writer and say so on stderr.

use super::unfinished;
use crate::capture::thread::Guard;
use crate::sys::diag::{say, warn};
use crate::sys::dl;
use std::ffi::{c_int, CStr};
use std::time::Duration;

/// The exit handler waits this long for the writer's final flush.
const EXIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Completes the trace (drain, End record, stop the writer) and says so on stderr.
fn finish_trace() {
    let Some(p) = unfinished() else { return };
    let _g = Guard::enter();
    match p.shutdown(EXIT_FLUSH_TIMEOUT) {
        Some((events, path)) => {
            if !path.is_empty() {
                say(&format!(
                    "wrote {events} events to {path}; see what leaked with: gpumemprof leaks {path}"
                ));
            }
        }
        None => warn(
            "the writer did not finish its final flush in time; the trace may lack its last events",
        ),
    }
}

/// atexit: drain the queue and write the End record. Later events (other atexit
/// handlers freeing memory) are still written, by the threads that make them.
pub(super) extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(finish_trace);
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
    let _ = std::panic::catch_unwind(finish_trace);
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
