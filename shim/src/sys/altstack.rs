//! An alternate signal stack for each thread that records, so that the shim's signal
//! handlers (`session::signals`) run even when the thread's own stack is exhausted: a stack overflow is a
//! SIGSEGV whose handler has no stack left to run on.
//!
//! A thread that has an alternate stack already (Rust's runtime gives its threads one;
//! Python's `faulthandler` gives the main thread one) keeps it. The shim's is 64 KiB of
//! anonymous memory, given when the thread records its first event (`give`) and taken back
//! when the thread exits (`take_back`, from the ring's thread-exit destructor) into a pool
//! the next thread takes it from, as rings are reused: memory stays bounded by the threads
//! alive at once, and a job that makes threads by the thousand pays no `mmap`/`munmap`
//! per thread (they cost 11% of such a job's time).

use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes of each stack: the handler, the writer handshake and the line it prints need a
/// few KiB; the rest is margin for the program's own handler, chained on the same stack.
const SIZE: usize = 64 << 10;

/// Whether threads get one (the signal handlers are installed).
static ON: AtomicBool = AtomicBool::new(false);

/// Stacks given back by exited threads (their addresses), for the next threads.
static POOL: parking_lot::Mutex<Vec<usize>> = parking_lot::Mutex::new(Vec::new());

/// From now on, threads that record get an alternate stack.
pub fn enable() {
    ON.store(true, Ordering::Release);
    give();
}

/// Gives the calling thread an alternate signal stack if it has none.
pub fn give() {
    if !ON.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: sigaltstack with valid pointers; the mapping is ours until `take_back`.
    unsafe {
        let mut old: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut old) != 0
            || old.ss_flags & libc::SS_DISABLE == 0
        {
            return;
        }
        let pooled = POOL.lock().pop();
        let p = match pooled {
            Some(p) => p as *mut libc::c_void,
            None => {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    SIZE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return;
                }
                p
            }
        };
        let stack = libc::stack_t {
            ss_sp: p,
            ss_flags: 0,
            ss_size: SIZE,
        };
        if libc::sigaltstack(&stack, std::ptr::null_mut()) != 0 {
            POOL.lock().push(p as usize);
            return;
        }
        let _ = OURS.try_with(|o| o.set(p as usize));
    }
}

/// At thread exit: takes the thread's alternate stack back into the pool if it is the
/// shim's (the one `give` set, still in place).
pub fn take_back() {
    if !ON.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: sigaltstack with valid pointers; only a stack of exactly our size that this
    // thread is not running on is disabled, and only then given to another thread.
    unsafe {
        let mut now: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut now) != 0
            || now.ss_flags != 0
            || now.ss_size != SIZE
            || OURS.try_with(|o| o.get()) != Ok(now.ss_sp as usize)
        {
            return;
        }
        let off = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        if libc::sigaltstack(&off, std::ptr::null_mut()) == 0 {
            let _ = OURS.try_with(|o| o.set(0));
            POOL.lock().push(now.ss_sp as usize);
        }
    }
}

thread_local! {
    /// The stack `give` mapped for this thread (0: none).
    static OURS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
