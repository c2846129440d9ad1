//! Stack capture on the hot path: raw return addresses only, never symbols.
//!
//! Two unwinders give the same frames, and `GPUMEMPROF_UNWIND` chooses:
//! - `fast` (the default): `unwind`, CFI rules cached per return address applied to the
//!   stack, and a per-thread memo that turns a repeated stack into a comparison of the
//!   stack words the last walk read (about 100 ns for 30 frames). Where it cannot unwind
//!   a frame exactly it gives the whole stack to the slow one.
//! - `slow`: `backtrace::trace_unsynchronized`, libgcc's DWARF unwinder (several
//!   microseconds a stack). On glibc >= 2.35 it finds unwind tables through the
//!   lock-free `_dl_find_object` (no loader lock, no malloc).
//! - `check`: both, compared on every event; the slow one's frames are recorded, and a
//!   difference is reported on stderr (a diagnostic mode for tests and bug reports).
//!
//! Frames inside the shim itself (the hook, this module, the unwinders) are skipped by
//! address range, so the first recorded frame is the program's call site. Symbolization
//! happens in the analyzer, from the module map.

use crate::capture::{intern, unwind};
use crate::sys::config::{UnwindMode, MAX_STACK_DEPTH};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
pub use unwind::Found;

static SHIM_START: AtomicU64 = AtomicU64::new(0);
static SHIM_END: AtomicU64 = AtomicU64::new(0);

const FAST: u8 = 0;
const SLOW: u8 = 1;
const CHECK: u8 = 2;
/// The unwinder in use (`UnwindMode`); fast unless configured otherwise.
static MODE: AtomicU8 = AtomicU8::new(FAST);

/// Records the shim's own address range (from the module scan at init).
pub fn set_shim_range(start: u64, end: u64) {
    SHIM_START.store(start, Ordering::Relaxed);
    SHIM_END.store(end, Ordering::Relaxed);
}

/// Chooses the unwinder (from the configuration, at initialisation) and readies the
/// fast one (without glibc's `_dl_find_object` every stack takes the slow one).
pub fn set_mode(mode: UnwindMode) {
    let m = match mode {
        UnwindMode::Fast => FAST,
        UnwindMode::Slow => SLOW,
        UnwindMode::Check => CHECK,
    };
    if m != SLOW {
        unwind::init();
    }
    MODE.store(m, Ordering::Relaxed);
}

/// An address inside the shim, used to find the shim's own module.
pub fn shim_anchor() -> u64 {
    set_shim_range as *const () as u64
}

/// Fills `out` with up to `out.len()` return addresses of the caller's stack, innermost
/// first: `n` of them (those are initialised). With the fast unwinder it also gives the
/// memo slot whose frames these are when the walk met one at its first state
/// (`unwind::capture_memo`): the caller may then note the stack id it interns them as for
/// that memo; and the id noted for them with `with` merged in (`unwind::capture_noted`),
/// if any: then `out` is not written. `found` is told the frames of a walk before it is
/// stored (`unwind::Found`). Inlined into its two callers: a call of its own began one more
/// instruction line on every capture (BENCHMARKS.md, twentieth).
#[inline(always)]
pub fn capture_memo(
    out: &mut [MaybeUninit<u64>],
    with: Option<u64>,
    found: Option<&mut Found>,
) -> unwind::Captured {
    let lo = SHIM_START.load(Ordering::Relaxed);
    let hi = SHIM_END.load(Ordering::Relaxed);
    let bare = |n| unwind::Captured::new(n, None, None);
    match MODE.load(Ordering::Relaxed) {
        FAST => match unwind::capture_noted(out, lo, hi, with, found) {
            Some(c) => c,
            None => bare(capture_slow(out)),
        },
        SLOW => bare(capture_slow(out)),
        _ => bare(check::capture_both(out, lo, hi)),
    }
}

/// The stack id of what `capture_memo` found, `with` merged in: the id noted for the memo
/// met, if there is one (a loop's allocations: the same frames as the last time this memo
/// was met from its start, neither copied nor hashed; BENCHMARKS.md, "fourth session",
/// "2026-11-25, third" and "2026-11-26, tenth"), or for a walk of the same inputs
/// (`unwind/inputs.rs`), else `intern` of the frames, then noted for the memo met, if any,
/// and for the walk's inputs, if it was kept by them.
#[inline(always)]
pub fn id_of(
    c: unwind::Captured,
    frames: &[MaybeUninit<u64>],
    with: u64,
    intern: impl FnOnce(&[u64]) -> u32,
) -> u32 {
    if let Some(id) = c.noted() {
        return id;
    }
    // SAFETY: `capture_memo` initialised the first `n` entries (all but with a noted id).
    let frames = unsafe { std::slice::from_raw_parts(frames.as_ptr() as *const u64, c.n()) };
    let id = intern(frames);
    if let Some(slot) = c.hit() {
        unwind::set_memo_stack_id(slot, c.n(), id, with);
    }
    if c.waits_for_id() {
        unwind::note_walked_id(id);
    }
    id
}

/// The slow unwinder (libgcc's), with the same frames skipped: the reference the fast
/// one is compared with, and its fallback.
#[inline(never)]
pub fn capture_slow(out: &mut [MaybeUninit<u64>]) -> usize {
    let lo = SHIM_START.load(Ordering::Relaxed);
    let hi = SHIM_END.load(Ordering::Relaxed);
    let known = lo < hi;
    let mut n = 0;
    if out.is_empty() {
        return 0;
    }
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

/// `GPUMEMPROF_UNWIND=check`: both unwinders on every event, and a count of differences.
mod check {
    use super::*;

    static COMPARED: AtomicU64 = AtomicU64::new(0);
    static DIFFERED: AtomicU64 = AtomicU64::new(0);
    /// Stacks whose fast frames came from the first-state cache (`unwind/first.rs`).
    static FIRST_MET: AtomicU64 = AtomicU64::new(0);
    /// Stacks whose id a walk of the same inputs gave (`unwind/inputs.rs`).
    static BY_INPUTS: AtomicU64 = AtomicU64::new(0);
    /// Differences printed in full at most (the count goes on).
    const PRINTED: u64 = 3;

    #[cold]
    #[inline(never)]
    pub fn capture_both(out: &mut [MaybeUninit<u64>], lo: u64, hi: u64) -> usize {
        let mut fast = [MaybeUninit::<u64>::uninit(); MAX_STACK_DEPTH];
        let len = out.len().min(MAX_STACK_DEPTH);
        // The fast path as the hooks take it (nothing merged: native frames alone): an id
        // reused from a memo, a first-state entry or a walk's inputs is checked by the
        // frames it was interned with, and each id is noted as the hooks note it.
        let fast_c = unwind::capture_noted(&mut fast[..len], lo, hi, Some(0), None);
        let n = capture_slow(out);
        // SAFETY: each unwinder initialised the frames it counted.
        let slow = unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u64, n) };
        COMPARED.fetch_add(1, Ordering::Relaxed);
        let Some(c) = fast_c else {
            return n;
        };
        if c.hit().is_some_and(unwind::is_first_state_entry) {
            FIRST_MET.fetch_add(1, Ordering::Relaxed);
        }
        if c.noted().is_some() && c.hit().is_none() {
            BY_INPUTS.fetch_add(1, Ordering::Relaxed);
        }
        let id = id_of(c, &fast, 0, intern::intern);
        let frames = intern::frames_of(id);
        let fast = frames.unwrap_or(&[]);
        if fast != slow && DIFFERED.fetch_add(1, Ordering::Relaxed) < PRINTED {
            crate::sys::diag::line(&format!(
                "gpumemprof: unwind check: the stacks differ\n  fast: {fast:x?}\n  slow: {slow:x?}\n"
            ));
        }
        n
    }

    /// At exit, in check mode: one line with the counts (read by the tests).
    extern "C" fn report() {
        if MODE.load(Ordering::Relaxed) != CHECK {
            return;
        }
        let mut buf = [0u8; 240];
        let mut w = &mut buf[..];
        let _ = std::io::Write::write_fmt(
            &mut w,
            format_args!(
                "gpumemprof: unwind check: {} stacks compared, {} differed, {} left to the slow unwinder, {} met in the first-state cache, {} given by their inputs\n",
                COMPARED.load(Ordering::Relaxed),
                DIFFERED.load(Ordering::Relaxed),
                unwind::FALLBACKS.load(Ordering::Relaxed),
                FIRST_MET.load(Ordering::Relaxed),
                BY_INPUTS.load(Ordering::Relaxed)
            ),
        );
        let len = 240 - w.len();
        // SAFETY: writes initialised bytes of a local buffer to stderr.
        unsafe { libc::write(2, buf.as_ptr() as *const libc::c_void, len) };
    }

    /// Runs `report` when the shim is unloaded at exit (after the program's atexit
    /// handlers; plain atomics and write(2) only).
    #[used]
    #[link_section = ".fini_array"]
    static REPORT: extern "C" fn() = report;
}
