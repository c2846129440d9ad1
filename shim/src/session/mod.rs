//! The process's recording session: the global state, lazy start on the first recorded
//! event, and every way a process ends or splits (exit, `_exit`, fatal signals,
//! out-of-memory, fork). The layer above the writer; only the hooks sit above it.
//!
//! ```text
//!  UNINIT ──first event──► INITIALIZING ──ok──► ACTIVE ──exit/_exit/fatal signal: final flush──► (writer finished)
//!                                    └──no file / disabled──► DISABLED (pass-through)
//!  fork() child: ACTIVE ──GPUMEMPROF_FORK=trace──► UNINIT (its own trace on its first event)
//!                       └──GPUMEMPROF_FORK=off───► DISABLED
//! ```
//!
//! Whether the final flush has run is the pipeline's own `finished()` (the writer sets it
//! when it completes the trace); the session keeps no second copy of it.
//!
//! The constructor only registers the exit and fork handlers: it must stay cheap and
//! safe because it runs in every process that inherits LD_PRELOAD, most of which never
//! touch a GPU. The trace file, the writer thread and the signal handlers appear with
//! the first allocation (`start.rs`).
//!
//! Ends (`exit.rs`, `signals.rs`), each recorded in the trace before its End record (an
//! exit status or a signal): `exit` and return from `main` run the exit handler;
//! `_exit`/`_Exit` are hooked to complete the trace first; SIGTERM, SIGINT, SIGHUP,
//! SIGQUIT, SIGABRT (`abort`, an uncaught C++ exception), the faults (SIGSEGV, a stack
//! overflow included, SIGBUS, SIGFPE, SIGILL, SIGSYS) and every other signal whose default
//! action ends the process complete it in a handler and then run the program's handler or
//! the default action; `actions.rs` keeps the program's handlers, set before or after. SIGKILL cannot
//! be caught: the trace then holds every event older than the flush interval (blocks are
//! written whole), and an out-of-memory failure is flushed at once, so the evidence of an
//! OOM is on disk before anything can kill the process.

mod actions;
mod exit;
mod fork;
mod halt;
mod one_copy;
mod signals;
mod start;

pub use one_copy::standing_down;

use crate::writer::Pipeline;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const ACTIVE: u8 = 2;
const DISABLED: u8 = 3;
/// Recording stopped after a bug of the shim (`halt.rs`): hooks pass through, and the
/// trace is still completed at the end.
const STOPPED: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// The current pipeline (leaked: it lives until the process ends; a fork child that
/// records gets a new one and abandons its copy of the parent's).
static PIPELINE: AtomicPtr<Pipeline> = AtomicPtr::new(std::ptr::null_mut());
/// Frames to capture per event (0 = stacks off); read on the hot path.
static STACK_DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Frames to capture per free: `STACK_DEPTH`, or 0 where `GPUMEMPROF_FREE_STACKS=0`.
static FREE_STACK_DEPTH: AtomicUsize = AtomicUsize::new(0);
/// `ForkMode` of the running configuration (0 trace, 1 off).
static FORK_OFF: AtomicBool = AtomicBool::new(false);
/// The pid that started the pipeline: a vfork child shares our memory and must not
/// finish the parent's trace from its `_exit`.
static OWNER_PID: AtomicI32 = AtomicI32::new(0);
/// A failing allocation waits this long for its event to reach the file.
const OOM_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

fn current() -> Option<&'static Pipeline> {
    let p = PIPELINE.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked Box<Pipeline>, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The pipeline if events should be recorded now, starting the session on first use.
#[inline]
pub fn recording() -> Option<&'static Pipeline> {
    match STATE.load(Ordering::Acquire) {
        ACTIVE => current(),
        UNINIT | INITIALIZING => init_slow(),
        _ => None,
    }
}

/// Whether every hook is a pure pass-through: recording is off for good in this process
/// (`GPUMEMPROF_DISABLE`, no trace file, another copy of the shim records, a bug of the
/// shim stopped it). The hooks ask this before they stamp the time or ask the device (one
/// relaxed load).
#[inline(always)]
pub fn passing_through() -> bool {
    STATE.load(Ordering::Relaxed) >= DISABLED
}

/// The pipeline of a started session whose writer has not completed the trace yet: the
/// one the exit and signal handlers must finish.
fn unfinished() -> Option<&'static Pipeline> {
    if !matches!(STATE.load(Ordering::Acquire), ACTIVE | STOPPED) || !owner() {
        return None;
    }
    current().filter(|p| !p.finished())
}

#[inline]
pub fn stack_depth() -> usize {
    STACK_DEPTH.load(Ordering::Relaxed)
}

/// Frames to capture for a free (0 where `GPUMEMPROF_FREE_STACKS=0`).
#[inline]
pub fn free_stack_depth() -> usize {
    FREE_STACK_DEPTH.load(Ordering::Relaxed)
}

/// The trace file's path once a file exists.
pub fn trace_path() -> Option<&'static std::ffi::CStr> {
    match STATE.load(Ordering::Acquire) {
        ACTIVE | STOPPED => current().and_then(|p| p.path()),
        _ => None,
    }
}

/// After an out-of-memory failure was recorded: wait until it (and every event before
/// it) is in the file, so a crash right after loses nothing.
pub fn after_oom() {
    if let Some(p) = recording() {
        p.flush_after_oom(OOM_FLUSH_TIMEOUT);
    }
}

fn owner() -> bool {
    // SAFETY: getpid has no preconditions.
    OWNER_PID.load(Ordering::Relaxed) == unsafe { libc::getpid() }
}

#[cold]
fn init_slow() -> Option<&'static Pipeline> {
    if STATE
        .compare_exchange(UNINIT, INITIALIZING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // Another thread is initialising: wait for it (it holds none of our locks).
        loop {
            match STATE.load(Ordering::Acquire) {
                INITIALIZING => std::thread::yield_now(),
                ACTIVE => return current(),
                _ => return None,
            }
        }
    }
    if standing_down() {
        crate::sys::diag::warn(&one_copy::warning());
        STATE.store(DISABLED, Ordering::Release);
        return None;
    }
    // A panic in the start (a bug of the shim) must not leave the session initialising:
    // every other thread's hook would wait for it for ever.
    match std::panic::catch_unwind(start::start).ok().flatten() {
        Some(p) => {
            if let Some(w) = one_copy::others_warning() {
                crate::sys::diag::warn(&w);
            }
            STATE.store(ACTIVE, Ordering::Release);
            Some(p)
        }
        None => {
            STATE.store(DISABLED, Ordering::Release);
            None
        }
    }
}

extern "C" fn constructor() {
    // Find the real dlsym/dlvsym now, while nothing else runs: the overrides then
    // never take their slow path.
    let _ = std::panic::catch_unwind(crate::sys::dl::prime);
    let _ = std::panic::catch_unwind(actions::prime);
    let _ = std::panic::catch_unwind(one_copy::decide);
    exit::register();
    // SAFETY: registering plain extern "C" functions without captured state.
    unsafe {
        libc::pthread_atfork(Some(fork::prepare), Some(fork::parent), Some(fork::child));
    }
}

/// Runs when the library is loaded (LD_PRELOAD or dlopen), before the program's main.
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;
