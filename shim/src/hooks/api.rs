//! The shim's public C API (declared in include/gpumemprof.h). Programs need not link
//! against the shim to use it: they look the functions up with `dlsym(RTLD_DEFAULT,
//! ...)` and skip them when the shim is not loaded.

use crate::capture::thread::Guard;
use crate::session;
use std::os::raw::{c_char, c_int};
use std::time::Duration;

/// How long `gpumemprof_flush` waits for the writer.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// 1 if this process is being recorded (initialising the shim if needed), else 0.
#[no_mangle]
pub extern "C" fn gpumemprof_is_active() -> c_int {
    std::panic::catch_unwind(|| {
        let _g = Guard::enter();
        session::recording().is_some() as c_int
    })
    .unwrap_or(0)
}

/// Writes every event recorded so far to the trace file and returns 0 once it is
/// there; -1 if the shim is not recording or the writer did not answer in 10 s.
#[no_mangle]
pub extern "C" fn gpumemprof_flush() -> c_int {
    std::panic::catch_unwind(|| {
        let _g = Guard::enter();
        match session::recording() {
            Some(p) if p.flush_now(FLUSH_TIMEOUT) => 0,
            _ => -1,
        }
    })
    .unwrap_or(-1)
}

/// The trace file's path (NUL-terminated, valid for the life of the process), or
/// NULL if the shim is not recording.
#[no_mangle]
pub extern "C" fn gpumemprof_trace_path() -> *const c_char {
    std::panic::catch_unwind(|| {
        let _g = Guard::enter();
        session::recording();
        session::trace_path().map_or(std::ptr::null(), |c| c.as_ptr())
    })
    .unwrap_or(std::ptr::null())
}

/// The shim's version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn gpumemprof_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}
