//! The per-thread re-entrancy guard and cached thread id.
//!
//! Hooks can fire from anywhere: before `main`, inside another library's constructor,
//! in a thread the shim never saw, during TLS destruction at thread exit, and from the
//! shim's own code (the writer thread, the stack unwinder). The guard makes every hook
//! a pure pass-through while the thread is already inside the shim.
//!
//! The thread-locals are `const`-initialised `Cell`s with no `Drop`, so touching them
//! never allocates and never registers a TLS destructor (that would take the loader
//! lock); `try_with` makes them safe even while the thread's TLS is being torn down.

use std::cell::Cell;

thread_local! {
    /// > 0 while this thread runs shim code (a hook's bookkeeping, or the writer thread).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Kernel thread id, fetched once per thread (0 = not yet known).
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// Held while a hooked call records; releases the guard on drop.
pub struct Guard(());

impl Guard {
    /// Enters the shim on this thread. `None` if the thread is already inside the shim
    /// (or its TLS is gone): the caller must pass straight through.
    #[inline]
    pub fn enter() -> Option<Guard> {
        DEPTH
            .try_with(|d| {
                if d.get() == 0 {
                    d.set(1);
                    Some(Guard(()))
                } else {
                    None
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}

/// Marks the current thread as the shim's own for its whole life (the writer thread):
/// every hook it reaches passes through.
pub fn mark_internal_thread() {
    let _ = DEPTH.try_with(|d| d.set(u32::MAX / 2));
}

/// The caller's kernel thread id, cached per thread.
#[inline]
pub fn tid() -> u32 {
    TID.try_with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        let v = current_tid();
        t.set(v);
        v
    })
    .unwrap_or_else(|_| current_tid())
}

/// Forgets the cached thread id (the forked child's only thread has a new one).
pub fn reset_tid_after_fork() {
    let _ = TID.try_with(|t| t.set(0));
}

fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
