//! The writer thread's place in the scheduler: `SCHED_BATCH`, so that its wake-ups never
//! preempt the program's threads. The writer is a batch consumer: what it does can wait a
//! few milliseconds, and its share of the CPU stays as fair as before. Without it, on a
//! machine whose cores the program's threads keep busy (2 cores, PyTorch's main and autograd
//! threads handing a step to each other), each wake of the writer could push a program
//! thread off its core: 273 to 396 preemptions in 4,000 training steps against 31 without
//! the shim (BENCHMARKS.md, 2026-11-26, thirteenth).

/// Puts the calling thread in `SCHED_BATCH`; false where the kernel refuses (the thread
/// keeps its policy: nothing else changes).
pub fn as_batch() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for SCHED_BATCH,
    // whose priority must be 0.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calling_thread_alone_becomes_a_batch_thread() {
        // SAFETY: sched_getscheduler(0) reads the calling thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let before = policy();
        let (ok, after) = std::thread::spawn(move || (as_batch(), policy()))
            .join()
            .expect("thread");
        assert!(ok);
        assert_eq!(after, libc::SCHED_BATCH);
        assert_eq!(policy(), before);
    }
}
