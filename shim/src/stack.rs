//! Stack capture on the hot path: raw return addresses only, never symbols.
//!
//! `backtrace::trace_unsynchronized` walks the stack with libgcc's unwinder, which on
//! glibc >= 2.35 finds unwind tables through the lock-free `_dl_find_object` (no loader
//! lock, no malloc). Frames inside the shim itself (the hook, this module, the
//! backtrace crate) are skipped by address range, so the first recorded frame is the
//! program's call site. Symbolization happens in the analyzer, from the module map.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};

static SHIM_START: AtomicU64 = AtomicU64::new(0);
static SHIM_END: AtomicU64 = AtomicU64::new(0);

/// Records the shim's own address range (from the module scan at init).
pub fn set_shim_range(start: u64, end: u64) {
    SHIM_START.store(start, Ordering::Relaxed);
    SHIM_END.store(end, Ordering::Relaxed);
}

/// An address inside the shim, used to find the shim's own module.
pub fn shim_anchor() -> u64 {
    set_shim_range as *const () as u64
}

/// Fills `out` with up to `out.len()` return addresses of the caller's stack, innermost
/// first, and returns how many were written (those are initialised).
#[inline(never)]
pub fn capture(out: &mut [MaybeUninit<u64>]) -> usize {
    let lo = SHIM_START.load(Ordering::Relaxed);
    let hi = SHIM_END.load(Ordering::Relaxed);
    let known = lo < hi;
    let mut n = 0;
    // 0: before the first shim frame, 1: inside the shim, 2: in the program.
    let mut state = if known { 0u8 } else { 2u8 };
    // SAFETY: `trace_unsynchronized` requires that no other thread unwinds through the
    // backtrace crate's own global state at the same time; the closure touches only
    // locals, and the libgcc unwinder it uses is thread-safe.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as u64;
            if ip == 0 {
                return false;
            }
            if state < 2 {
                if ip >= lo && ip < hi {
                    state = 1;
                    return true;
                }
                if state == 0 {
                    // The unwinder's own frames, before it reaches the shim's.
                    return true;
                }
                state = 2;
            }
            out[n] = MaybeUninit::new(ip);
            n += 1;
            n < out.len()
        });
    }
    n
}
