//! The shim's own threads take no asynchronous signal: one sent to the process (Ctrl-C,
//! `kill`, a terminal's hang-up) goes to one of the program's threads, as it would
//! without the shim.
//!
//! Why: the kernel may give a signal sent to a process to any thread that does not block
//! it. Given to the writer, Python's SIGINT handler runs there, and a main thread blocked
//! reading stdin is not woken: the likely cause of `e2e_launcher`'s
//! `sigint_sent_to_the_launcher_alone_reaches_the_program` waiting 60 s for it once, in a
//! clean-clone run of 2026-11-27 (not reproduced since). And a SIGTERM handled there
//! cannot wait for the writer to complete the trace, since the handler never waits on the
//! writer's own thread.
//! The faults a thread's own instruction raises (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
//! SIGSYS) stay unblocked, so that a bug of the shim's thread still meets the shim's
//! handler; glibc's own signals (thread cancellation, `setxid`) cannot be blocked by
//! `pthread_sigmask` at all.

use std::ffi::c_int;

/// Signals raised by the instruction that ran: left unblocked.
pub const FAULTS: [c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Runs `spawn` with every signal but `FAULTS` blocked on the calling thread, so that a
/// thread it starts begins with them blocked; then restores the caller's mask (a signal
/// that came meanwhile is delivered then, as it would have been).
pub fn spawn_blocking_async_signals<T>(spawn: impl FnOnce() -> T) -> T {
    // SAFETY: plain signal-set and mask calls on valid, initialised sets of our own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sig in FAULTS {
            libc::sigdelset(&mut set, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        let masked = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) == 0;
        let r = spawn();
        if masked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's signal mask.
    fn mask() -> libc::sigset_t {
        // SAFETY: a query of this thread's mask into a set of our own.
        unsafe {
            let mut m: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut m);
            m
        }
    }

    fn blocked(m: &libc::sigset_t, sig: c_int) -> bool {
        // SAFETY: a valid set.
        unsafe { libc::sigismember(m, sig) == 1 }
    }

    #[test]
    fn a_thread_started_inside_blocks_every_asynchronous_signal_and_no_fault_and_the_caller_keeps_its_mask(
    ) {
        std::thread::spawn(|| {
            let before = mask();
            let inside = spawn_blocking_async_signals(|| std::thread::spawn(mask))
                .join()
                .expect("the thread");
            for sig in [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGUSR1,
                libc::SIGALRM,
                libc::SIGPIPE,
                libc::SIGXFSZ,
                libc::SIGCHLD,
            ] {
                assert!(blocked(&inside, sig), "signal {sig}");
                assert!(!blocked(&before, sig), "signal {sig} before");
                assert!(!blocked(&mask(), sig), "signal {sig} after");
            }
            for sig in FAULTS {
                assert!(!blocked(&inside, sig), "fault {sig}");
            }
        })
        .join()
        .expect("the test's thread");
    }
}
