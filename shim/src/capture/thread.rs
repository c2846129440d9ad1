//! The per-thread re-entrancy guard, cached thread id, event ring (with the
//! `pthread_key` destructor that retires the ring, and takes the thread's alternate signal
//! stack back, when the thread exits) and Python frame-word caches.
//!
//! Hooks can fire from anywhere: before `main`, inside another library's constructor,
//! in a thread the shim never saw, during TLS destruction at thread exit, and from the
//! shim's own code (the writer thread, the stack unwinder). The guard makes every hook
//! a pure pass-through while the thread is already inside the shim.
//!
//! The thread-locals are `const`-initialised `Cell`s with no `Drop`, so touching them
//! never allocates and never registers a TLS destructor (that would take the loader
//! lock); `try_with` makes them safe even while the thread's TLS is being torn down.

use crate::capture::python::Caches;
use crate::capture::ring::Ring;
use std::cell::Cell;

/// What every hook keeps per thread, in one thread-local (one TLS lookup per hooked call:
/// in a preloaded library each lookup is a `__tls_get_addr` call). The unwinder's memos
/// and the stack-id cache are thread-locals of their own, looked up only when a stack is
/// captured.
pub struct ThreadState {
    /// > 0 while this thread runs shim code (a hook's bookkeeping, or the writer thread).
    depth: Cell<u32>,
    /// Kernel thread id, fetched once per thread (0 = not yet known).
    tid: Cell<u32>,
    /// This thread's event ring: null until its first event, `RING_GONE` once the thread
    /// is exiting or no ring could be had (events then go through the shared queue).
    ring: Cell<*const Ring>,
    /// This thread's `errno`, found once (null until then): every hook keeps the caller's
    /// `errno` (`hooks::record`), and `__errno_location` twice a call was 2 ns a pair.
    errno: Cell<*mut libc::c_int>,
    /// This thread's Python frame words (`python::read`), here so that a capture reaches
    /// them through the guard it holds, not through a TLS lookup of their own.
    python: Caches,
}

/// The `ring` of a thread that must use the shared queue (never a real ring's address:
/// those are heap blocks, never at the first aligned address).
pub const RING_GONE: *const Ring = std::ptr::dangling();

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            depth: Cell::new(0),
            tid: Cell::new(0),
            ring: Cell::new(std::ptr::null()),
            errno: Cell::new(std::ptr::null_mut()),
            python: Caches::new(),
        }
    };
}

/// Held while a hooked call records; releases the guard on drop.
pub struct Guard(*const ThreadState);

impl Guard {
    /// Enters the shim on this thread. `None` if the thread is already inside the shim
    /// (or its TLS is gone): the caller must pass straight through.
    #[inline]
    pub fn enter() -> Option<Guard> {
        STATE
            .try_with(|s| {
                if s.depth.get() == 0 {
                    s.depth.set(1);
                    Some(Guard(s as *const ThreadState))
                } else {
                    None
                }
            })
            .ok()
            .flatten()
    }

    /// The calling thread's state (the guard lives on this thread, inside its TLS's life).
    #[inline(always)]
    pub fn thread(&self) -> &ThreadState {
        // SAFETY: taken from this thread's live TLS by `enter`; a Guard is not Send.
        unsafe { &*self.0 }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        self.thread().depth.set(0);
    }
}

impl ThreadState {
    /// This thread's kernel thread id.
    #[inline]
    pub fn tid(&self) -> u32 {
        let v = self.tid.get();
        if v != 0 {
            return v;
        }
        let v = current_tid();
        self.tid.set(v);
        v
    }

    /// This thread's `errno` (the same place for the thread's whole life, and in a
    /// forked child's thread, whose TLS is a copy at the same addresses).
    #[inline(always)]
    pub fn errno(&self) -> *mut libc::c_int {
        let p = self.errno.get();
        if !p.is_null() {
            return p;
        }
        // SAFETY: __errno_location has no preconditions and returns this thread's slot.
        let p = unsafe { libc::__errno_location() };
        self.errno.set(p);
        p
    }

    /// This thread's Python frame-word caches.
    #[inline(always)]
    pub fn python_caches(&self) -> &Caches {
        &self.python
    }

    #[inline(always)]
    pub fn ring(&self) -> *const Ring {
        self.ring.get()
    }

    #[inline]
    pub fn set_ring(&self, r: *const Ring) {
        self.ring.set(r);
    }
}

/// Sets the calling thread's ring (`RING_GONE` at thread exit; null after fork).
pub fn set_ring(r: *const Ring) {
    let _ = STATE.try_with(|s| s.ring.set(r));
}

/// Marks the current thread as the shim's own for its whole life (the writer thread):
/// every hook it reaches passes through.
pub fn mark_internal_thread() {
    let _ = STATE.try_with(|s| s.depth.set(u32::MAX / 2));
}

/// The caller's kernel thread id, cached per thread.
#[inline]
pub fn tid() -> u32 {
    STATE
        .try_with(|s| s.tid())
        .unwrap_or_else(|_| current_tid())
}

/// Forgets the cached thread id and the ring (the forked child's only thread has a new
/// id, and the parent's pipeline is not the child's).
pub fn reset_after_fork() {
    let _ = STATE.try_with(|s| {
        s.tid.set(0);
        s.ring.set(std::ptr::null());
    });
}

/// The process-wide `pthread_key` whose destructor retires an exiting thread's ring.
static KEY: once_cell::sync::OnceCell<libc::pthread_key_t> = once_cell::sync::OnceCell::new();

extern "C" fn thread_exit(ring: *mut libc::c_void) {
    if ring.is_null() {
        return;
    }
    // SAFETY: the value was set by `note_owner` to a leaked, never-freed ring.
    let ring = unsafe { &*(ring as *const Ring) };
    // Later events of this thread (other keys' destructors) use the shared queue.
    set_ring(RING_GONE);
    ring.retire();
    crate::sys::altstack::take_back();
    crate::capture::unwind::thread_exit();
}

/// Arranges for `ring` to be retired when the calling thread exits; false if it cannot
/// be (the caller then uses the shared queue instead of a ring).
pub fn note_owner(ring: &'static Ring) -> bool {
    let key = KEY.get_or_try_init(|| {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: valid out-pointer; the destructor is an extern "C" fn that never unwinds.
        match unsafe { libc::pthread_key_create(&mut k, Some(thread_exit)) } {
            0 => Ok(k),
            _ => Err(()),
        }
    });
    let Ok(key) = key else { return false };
    // SAFETY: a key from pthread_key_create; the value outlives the thread.
    let owned =
        unsafe { libc::pthread_setspecific(*key, ring as *const Ring as *const libc::c_void) == 0 };
    if owned {
        // Taken back by `thread_exit`, with the ring.
        crate::sys::altstack::give();
    }
    owned
}

fn current_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
