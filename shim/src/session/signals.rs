//! Fatal-signal handlers: complete the trace, then chain.
//!
//! Installed once, at the first allocation, for SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT,
//! SIGSEGV and SIGBUS, unless the signal is ignored (an ignored signal stays ignored, also across
//! `exec`). The handler runs on the alternate signal stack where the thread has one.
//! It only uses atomics, `clock_gettime`, `nanosleep`, a futex wake (the writer's unpark)
//! and one `write(2)` of a line built on the stack: if the previous action is the default
//! (the process dies), it records the signal as the process's ending, asks the writer to
//! complete the trace and says so on stderr; if the program handles the signal itself
//! (Python's SIGINT), it asks for a flush, since the program may go on. It waits at most 3 s, and
//! never on the writer thread itself. Then the previous handler runs, or the default
//! action is restored and the signal raised again.

use super::unfinished;
use crate::sys::diag::{quiet, FixedLine};
use crate::writer::Pipeline;
use gpumemprof_format::Ending;
use std::ffi::{c_int, c_void};
use std::fmt::Write;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A signal handler waits this long for the writer before the signal goes on.
const SIGNAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

const SIGNALS: [c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    // A closed terminal or a lost ssh session; Ctrl-\. `gpumemprof run` forwards both.
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGABRT,
    libc::SIGSEGV,
    libc::SIGBUS,
];
const MAX_SIGNAL: usize = 65;

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// One handler at a time completes the trace; others only chain.
static BUSY: AtomicBool = AtomicBool::new(false);
struct Previous(std::cell::UnsafeCell<[MaybeUninit<libc::sigaction>; MAX_SIGNAL]>);
// SAFETY: written once, by `install`, before the handlers that read it exist.
unsafe impl Sync for Previous {}
static PREVIOUS: Previous = Previous(std::cell::UnsafeCell::new(
    [MaybeUninit::uninit(); MAX_SIGNAL],
));

pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    for sig in SIGNALS {
        // SAFETY: sigaction with valid pointers; PREVIOUS[sig] is written before our
        // handler is installed for sig, and never again.
        unsafe {
            let slot = &mut (*PREVIOUS.0.get())[sig as usize];
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            slot.write(old);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = handler as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | (old.sa_flags & libc::SA_RESTART);
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}

extern "C" fn handler(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is this thread's; restored before chaining.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: PREVIOUS[sig] was written before this handler was installed for sig.
    let previous = unsafe { (*PREVIOUS.0.get())[sig as usize].assume_init() };
    if !BUSY.swap(true, Ordering::AcqRel) {
        if let Some(p) = unfinished() {
            if !p.on_writer_thread() {
                if previous.sa_sigaction == libc::SIG_DFL {
                    p.set_ending(Ending::Signal(sig as u32));
                    if p.shutdown_from_signal(SIGNAL_FLUSH_TIMEOUT) {
                        say_written(p, sig);
                    }
                } else {
                    p.flush_now(SIGNAL_FLUSH_TIMEOUT);
                }
            }
        }
        BUSY.store(false, Ordering::Release);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    chain(sig, info, ctx, &previous);
}

/// The "wrote ..." line of a process a signal ends, built without allocating.
fn say_written(p: &Pipeline, sig: c_int) {
    let Some(path) = p.path().and_then(|c| c.to_str().ok()) else {
        return;
    };
    if quiet() || path.is_empty() {
        return;
    }
    let mut line = FixedLine::new();
    let name = Ending::signal_name(sig as u32).unwrap_or("a signal");
    let _ = writeln!(
        line,
        "gpumemprof: wrote {} events to {path}; the process is ended by {name} (signal {sig}); \
         see what it held with: gpumemprof leaks {path}",
        p.events_written()
    );
    line.emit();
}

fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, previous: &libc::sigaction) {
    let h = previous.sa_sigaction;
    if h == libc::SIG_IGN {
        return;
    }
    if h == libc::SIG_DFL {
        // SAFETY: restore the default action and raise again: the signal is blocked
        // while this handler runs, so it is delivered (and acts) when we return; a
        // fault re-executes its instruction and faults again either way.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    // SAFETY: the program's own handler, called as the kernel would have.
    unsafe {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
}
