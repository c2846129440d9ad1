//! Signal handlers for the endings a signal brings: complete the trace, then chain.
//!
//! Installed once, at the first allocation, unless the signal is ignored (an ignored
//! signal stays ignored, also across `exec`):
//! * **always** for SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGABRT, and the faults SIGSEGV,
//!   SIGBUS, SIGFPE, SIGILL and SIGSYS, whatever the program's action;
//! * **while default** for the other signals whose default action ends the process:
//!   SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGTRAP, SIGXCPU,
//!   SIGXFSZ, SIGSTKFLT (a program that handles one gets it without the shim, `actions`).
//!
//! `actions` keeps the program's own action for a held signal, set before or after the
//! install. The handler runs on the alternate signal stack (`altstack` gives each thread
//! that records one, so a stack overflow is caught too). It only uses atomics,
//! `clock_gettime`, `nanosleep`, a futex wake (the writer's unpark) and one `write(2)` of a
//! line built on the stack. When the program's action is the default (the process dies),
//! it records the signal as the process's ending, asks the writer to complete the trace
//! and says so on stderr; when the program handles an asynchronous signal itself (Python's
//! SIGINT), it asks for a flush, since the program may go on; a fault the program handles
//! goes straight to its handler (a runtime that handles faults as part of its work must not
//! pay a flush each; if the handler then resets the default and raises the fault again, the
//! shim sees that). It waits at most 3 s, and never on the writer thread itself; a trace not
//! complete by then is said to be so, in one line, quiet or not (`say_unfinished`). Then
//! the program's handler runs, or the default action is restored and the signal raised again.

use super::actions::{self, Hold};
use super::unfinished;
use crate::sys::diag::{quiet, FixedLine};
use crate::writer::Pipeline;
use gpumemprof_format::Ending;
use std::ffi::{c_int, c_void};
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A signal handler waits this long for the writer before the signal goes on.
const SIGNAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);

/// Asynchronous signals held whatever the program's action.
const ASYNC: [c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    // A closed terminal or a lost ssh session; Ctrl-\. `gpumemprof run` forwards both.
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGABRT,
];

/// Faults: raised by the instruction that ran, handled by runtimes as part of their work;
/// held whatever the program's action too.
const FAULTS: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGSYS,
];

const WHILE_DEFAULT: [c_int; 12] = [
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGIO,
    libc::SIGPWR,
    libc::SIGTRAP,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGSTKFLT,
];

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// One handler at a time completes the trace; others only chain.
static BUSY: AtomicBool = AtomicBool::new(false);

pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Some(real) = actions::real_sigaction() else {
        return;
    };
    crate::sys::altstack::enable();
    actions::claim();
    let held = ASYNC.iter().chain(&FAULTS).map(|&s| (s, Hold::Always));
    let held = held.chain(WHILE_DEFAULT.iter().map(|&s| (s, Hold::WhileDefault)));
    for (sig, how) in held {
        // SAFETY: sigaction with valid pointers; the program's action is recorded before
        // the shim's handler is installed for sig.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if real(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction == libc::SIG_IGN
                || (how == Hold::WhileDefault && old.sa_sigaction != libc::SIG_DFL)
            {
                continue;
            }
            actions::set(sig, &old, how);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = handler as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | (old.sa_flags & libc::SA_RESTART);
            libc::sigemptyset(&mut new.sa_mask);
            if real(sig, &new, std::ptr::null_mut()) != 0 {
                actions::set(sig, &old, Hold::No);
            }
        }
    }
}

extern "C" fn handler(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is this thread's; restored before chaining.
    let errno = unsafe { *libc::__errno_location() };
    let Some(previous) = actions::program_action(sig) else {
        return;
    };
    let default = previous.sa_sigaction == libc::SIG_DFL;
    if (default || !FAULTS.contains(&sig)) && !BUSY.swap(true, Ordering::AcqRel) {
        if let Some(p) = unfinished() {
            if !p.on_writer_thread() {
                if default {
                    p.set_ending(Ending::Signal(sig as u32));
                    if p.shutdown_from_signal(SIGNAL_FLUSH_TIMEOUT) {
                        say_written(p, sig);
                    } else {
                        say_unfinished(p, sig);
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

/// The line of a process a signal ends before the writer completed its trace (a stalled
/// disk, a writer that was busy for longer than the wait): what is in the file reads, but
/// its last events may be missing, and nothing else would say so.
fn say_unfinished(p: &Pipeline, sig: c_int) {
    let path = p.path().and_then(|c| c.to_str().ok()).unwrap_or("");
    if path.is_empty() {
        return;
    }
    let mut line = FixedLine::new();
    let name = Ending::signal_name(sig as u32).unwrap_or("a signal");
    let _ = writeln!(
        line,
        "gpumemprof: the process is ended by {name} (signal {sig}) before the trace was \
         complete: {path} may lack its last events"
    );
    line.emit();
}

fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, previous: &libc::sigaction) {
    let h = previous.sa_sigaction;
    if h == libc::SIG_IGN {
        return;
    }
    if h == libc::SIG_DFL {
        // SAFETY: restore the default action (in the kernel, not the program's view: the
        // process is ending) and raise again: the signal is blocked while this handler
        // runs, so it is delivered (and acts) when we return; a fault re-executes its
        // instruction and faults again either way.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            if let Some(real) = actions::real_sigaction() {
                real(sig, &dfl, std::ptr::null_mut());
            }
            libc::raise(sig);
        }
        return;
    }
    if previous.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: a zeroed action is SIG_DFL with an empty mask.
        let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        actions::set(sig, &dfl, actions::hold(sig));
    }
    // SAFETY: the program's own handler, called as the kernel would have, with its mask
    // (and the signal itself, unless SA_NODEFER) blocked while it runs.
    unsafe {
        let mut mask = previous.sa_mask;
        if previous.sa_flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut mask, sig);
        }
        let mut saved: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &mask, &mut saved);
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(c_int) = std::mem::transmute(h);
            f(sig);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut());
    }
}
