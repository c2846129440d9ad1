//! Faults the tests ask for, so that the shim's own failure paths run as a bug or a slow
//! disk would make them run: a panic in the N-th recorded event's bookkeeping, or in the
//! writer thread as it drains its first events (`GPUMEMPROF_TEST_PANIC_AT`); a writer that
//! takes its time to complete the trace once asked to (`GPUMEMPROF_TEST_STALL_WRITER_MS`).
//! Off, each check is one relaxed load.

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

/// Milliseconds the writer waits before it completes the trace it was asked to (0: none).
static STALL_MS: AtomicU64 = AtomicU64::new(0);

/// Arms `GPUMEMPROF_TEST_STALL_WRITER_MS` (at the session's start).
pub fn arm_writer_stall(ms: u64) {
    STALL_MS.store(ms, Ordering::Relaxed);
}

/// In the writer, once asked to complete the trace: waits as a write to a stalled disk
/// would, once, if it was asked to.
#[inline(always)]
pub fn writer_stall_due() {
    if STALL_MS.load(Ordering::Relaxed) != 0 {
        stall();
    }
}

#[cold]
#[inline(never)]
fn stall() {
    let ms = STALL_MS.swap(0, Ordering::Relaxed);
    std::thread::sleep(std::time::Duration::from_millis(ms));
}
