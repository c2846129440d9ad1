//! The shim's public C API (declared in include/gpumemprof.h). Programs need not link
//! against the shim to use it: they look the functions up with `dlsym(RTLD_DEFAULT,
//! ...)` and skip them when the shim is not loaded.

use crate::capture::figures::{self, Figures};
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

/// Opens a range named `name` (NUL-terminated, or NULL for none) on this thread: an NVTX
/// range of the default domain, as `nvtxRangePushA` opens one, so every range report shows
/// it; also a scope whose peak `gpumemprof_memory` reads. Returns the range's level
/// (0-based), or -1 if it failed.
#[no_mangle]
pub extern "C" fn gpumemprof_range_push(name: *const c_char) -> c_int {
    std::panic::catch_unwind(|| {
        figures::open_scope();
        super::nvtx::api_push(name)
    })
    .unwrap_or(-1)
}

/// Closes this thread's innermost range opened by `gpumemprof_range_push`: the level it
/// closes, or -1 if none was open.
#[no_mangle]
pub extern "C" fn gpumemprof_range_pop() -> c_int {
    std::panic::catch_unwind(|| {
        figures::close_scope();
        super::nvtx::api_pop()
    })
    .unwrap_or(-1)
}

/// Fills `out` (`size` bytes of it: `sizeof(struct gpumemprof_memory)` of the caller's
/// header, so that a newer shim's longer struct never writes past an older caller's) with
/// PyTorch's figures as the shim saw them last, and returns 0; -1 (leaving `out` alone) if
/// the shim is not recording.
///
/// # Safety
/// `out` must point to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpumemprof_memory(out: *mut Figures, size: usize) -> c_int {
    std::panic::catch_unwind(|| {
        let _g = Guard::enter();
        if out.is_null() || session::recording().is_none() {
            return -1;
        }
        let figures = figures::now();
        let n = size.min(std::mem::size_of::<Figures>());
        // SAFETY: the caller gives `size` writable bytes at `out`; `n` is at most that.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&figures as *const Figures).cast::<u8>(),
                out.cast::<u8>(),
                n,
            )
        };
        0
    })
    .unwrap_or(-1)
}
