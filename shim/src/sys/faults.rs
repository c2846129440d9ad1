//! Faults the tests ask for (`GPUMEMPROF_TEST_PANIC_AT`), so that the shim's own failure
//! path runs as a bug would make it run: a panic in the N-th recorded event's bookkeeping,
//! or in the writer thread as it drains its first events. Off, each check is one relaxed
//! load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where `GPUMEMPROF_TEST_PANIC_AT` asks for a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestPanic {
    Never,
    /// The N-th recorded event's bookkeeping (from 1).
    Event(u64),
    /// The writer thread, as it drains events for the first time.
    Writer,
}

/// The event `Event` names (0: none), and recorded events counted for it.
static EVENT_AT: AtomicU64 = AtomicU64::new(0);
static SEEN: AtomicU64 = AtomicU64::new(0);
static WRITER: AtomicBool = AtomicBool::new(false);

/// Arms the fault the configuration asks for (at the session's start).
pub fn arm(p: TestPanic) {
    match p {
        TestPanic::Never => {}
        TestPanic::Event(n) => EVENT_AT.store(n, Ordering::Relaxed),
        TestPanic::Writer => WRITER.store(true, Ordering::Relaxed),
    }
}

/// Panics at the event `GPUMEMPROF_TEST_PANIC_AT` names.
#[inline(always)]
pub fn event_panic_due() {
    let at = EVENT_AT.load(Ordering::Relaxed);
    if at != 0 {
        count_event(at);
    }
}

#[cold]
#[inline(never)]
fn count_event(at: u64) {
    if SEEN.fetch_add(1, Ordering::Relaxed) + 1 == at {
        panic!("GPUMEMPROF_TEST_PANIC_AT={at} asked for this panic");
    }
}

/// Panics in the writer once it drained `drained` events, if it was asked to.
#[inline(always)]
pub fn writer_panic_due(drained: usize) {
    if drained > 0 && WRITER.load(Ordering::Relaxed) {
        panic!("GPUMEMPROF_TEST_PANIC_AT=writer asked for this panic");
    }
}
