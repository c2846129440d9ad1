//! What the running shim knows of the process's memory at once, without waiting for the
//! writer: PyTorch's own figures from its tensor hook (allocated and reserved, summed over
//! devices), the highest of each, and the highest allocated inside each open scope
//! (`gpumemprof_range_push`). For the C API's `gpumemprof_memory` and Python's
//! `gpumemprof.live()`/`peak()`.
//!
//! On the tensor hook's path no read-modify-write but when a peak rises: PyTorch's figures
//! of the device are stored as it gives them (it calls the hook under its allocator's lock,
//! so the last store is its latest figure), then loads for the sum over devices, the
//! peaks and the open scopes' mask, all relaxed: about 4 ns an event, where two
//! read-modify-writes an event cost about 11 (BENCHMARKS.md). A scope takes
//! one of 64 slots, whose peak every tensor event raises while it is open; a thread's
//! scopes nest (a stack of slot indices in its thread-local state). A scope opened when
//! every slot is taken is not measured (its peak reads as the process's).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Devices whose reserved bytes are kept apart (a device past these is not counted).
const DEVICES: usize = 16;
/// Scopes measured at once, over all threads.
const SLOTS: usize = 64;
/// Nesting kept per thread; deeper scopes are not measured.
const DEPTH: usize = 32;
/// A scope that took no slot.
const NO_SLOT: u8 = u8::MAX;

static PEAK_ALLOCATED: AtomicU64 = AtomicU64::new(0);
static PEAK_RESERVED: AtomicU64 = AtomicU64::new(0);
/// Each device's allocated and reserved bytes, as its last tensor event gave them.
static DEVICE_ALLOCATED: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];
static DEVICE_RESERVED: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];
/// One past the highest device seen.
static DEVICES_SEEN: AtomicUsize = AtomicUsize::new(0);
/// Bit i: slot i belongs to an open scope.
static OPEN: AtomicU64 = AtomicU64::new(0);
static SLOT_PEAK: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

thread_local! {
    /// This thread's open scopes, innermost last: their slots, and how many.
    static STACK: Cell<([u8; DEPTH], usize)> = const { Cell::new(([NO_SLOT; DEPTH], 0)) };
}

fn raise(peak: &AtomicU64, value: u64) {
    if value > peak.load(Relaxed) {
        peak.fetch_max(value, Relaxed);
    }
}

/// The sum of `figures` over the devices seen.
fn total(figures: &[AtomicU64; DEVICES]) -> u64 {
    let n = DEVICES_SEEN.load(Relaxed).min(DEVICES);
    figures[..n]
        .iter()
        .map(|f| f.load(Relaxed))
        .fold(0, u64::wrapping_add)
}

/// A PyTorch tensor event on `device`: the allocator's allocated and reserved bytes on that
/// device after it.
#[inline]
pub fn tensor(device: i32, allocated: u64, reserved: u64) {
    let Some(d) = usize::try_from(device).ok().filter(|&d| d < DEVICES) else {
        return;
    };
    DEVICE_ALLOCATED[d].store(allocated, Relaxed);
    if DEVICE_RESERVED[d].load(Relaxed) != reserved {
        DEVICE_RESERVED[d].store(reserved, Relaxed);
    }
    if d >= DEVICES_SEEN.load(Relaxed) {
        DEVICES_SEEN.fetch_max(d + 1, Relaxed);
    }
    let (allocated, reserved) = if DEVICES_SEEN.load(Relaxed) == 1 {
        (allocated, reserved)
    } else {
        (total(&DEVICE_ALLOCATED), total(&DEVICE_RESERVED))
    };
    raise(&PEAK_ALLOCATED, allocated);
    raise(&PEAK_RESERVED, reserved);
    let mut open = OPEN.load(Relaxed);
    while open != 0 {
        raise(&SLOT_PEAK[open.trailing_zeros() as usize], allocated);
        open &= open - 1;
    }
}

/// Opens a scope on this thread: a slot whose peak starts at what is allocated now.
pub fn open_scope() {
    let slot = take_slot();
    let _ = STACK.try_with(|s| {
        let (mut slots, depth) = s.get();
        if depth < DEPTH {
            slots[depth] = slot;
        } else if slot != NO_SLOT {
            free_slot(slot);
        }
        s.set((slots, depth + 1));
    });
}

/// Closes this thread's innermost scope (nothing when none is open).
pub fn close_scope() {
    let _ = STACK.try_with(|s| {
        let (slots, depth) = s.get();
        if depth == 0 {
            return;
        }
        if depth <= DEPTH && slots[depth - 1] != NO_SLOT {
            free_slot(slots[depth - 1]);
        }
        s.set((slots, depth - 1));
    });
}

fn take_slot() -> u8 {
    let mut open = OPEN.load(Relaxed);
    loop {
        if open == u64::MAX {
            return NO_SLOT;
        }
        let i = (!open).trailing_zeros();
        SLOT_PEAK[i as usize].store(total(&DEVICE_ALLOCATED), Relaxed);
        match OPEN.compare_exchange_weak(open, open | 1 << i, Relaxed, Relaxed) {
            Ok(_) => return i as u8,
            Err(now) => open = now,
        }
    }
}

fn free_slot(slot: u8) {
    OPEN.fetch_and(!(1u64 << slot), Relaxed);
}

/// The figures now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Figures {
    pub allocated: u64,
    pub reserved: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// The highest allocated since this thread's innermost open scope opened (the
    /// process's peak when none is open or it took no slot).
    pub scope_peak_allocated: u64,
}

pub fn now() -> Figures {
    let peak_allocated = PEAK_ALLOCATED.load(Relaxed);
    let scope = STACK
        .try_with(|s| {
            let (slots, depth) = s.get();
            (depth > 0 && depth <= DEPTH && slots[depth - 1] != NO_SLOT)
                .then(|| SLOT_PEAK[slots[depth - 1] as usize].load(Relaxed))
        })
        .ok()
        .flatten();
    Figures {
        allocated: total(&DEVICE_ALLOCATED),
        reserved: total(&DEVICE_RESERVED),
        peak_allocated,
        peak_reserved: PEAK_RESERVED.load(Relaxed),
        scope_peak_allocated: scope.unwrap_or(peak_allocated),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statics are the process's: one test drives them all, in order.
    #[test]
    fn figures_follow_pytorchs_and_scopes_keep_their_own_peaks() {
        const M: u64 = 1 << 20;
        tensor(0, 4 * M, 20 * M);
        tensor(0, 6 * M, 20 * M);
        let f = now();
        assert_eq!((f.allocated, f.reserved), (6 * M, 20 * M));
        assert_eq!(f.scope_peak_allocated, 6 * M);
        tensor(0, 2 * M, 20 * M);
        // A scope opened at 2 MiB allocated keeps its own peak: 5 MiB.
        open_scope();
        assert_eq!(now().scope_peak_allocated, 2 * M);
        tensor(0, 5 * M, 20 * M);
        tensor(0, 2 * M, 20 * M);
        // One inside it, opened at 2 MiB; a second device's tensor: the figures add up.
        open_scope();
        tensor(1, M, 2 * M);
        let f = now();
        assert_eq!((f.allocated, f.reserved), (3 * M, 22 * M));
        assert_eq!((f.peak_allocated, f.peak_reserved), (6 * M, 22 * M));
        assert_eq!(f.scope_peak_allocated, 3 * M);
        close_scope();
        assert_eq!(now().scope_peak_allocated, 5 * M);
        close_scope();
        close_scope(); // nothing open: nothing happens
        assert_eq!(now().scope_peak_allocated, 6 * M);
        // A device past those kept apart is not counted.
        tensor(99, 64 * M, 64 * M);
        assert_eq!(now().allocated, 3 * M);
        assert_eq!(OPEN.load(Relaxed), 0);
    }
}
