//! What every hook shares: pass straight through when recording is off for good or the
//! thread is already inside the shim, else enter the thread's guard, keep the
//! caller's `errno`, never unwind into C, and build the event, with its stack, that goes
//! to the writer. The allocation hooks (`hooked`, `hooked_free`) and the NVTX callbacks
//! (`in_shim`) all come through `after_call`.

use crate::capture::intern;
use crate::capture::thread::{Guard, ThreadState};
use crate::capture::{python, stack};
use crate::session;
use crate::sys::clock;
use crate::sys::config::MAX_STACK_DEPTH;
use crate::sys::event::{Event, EventKind, TENSOR_FREE};
use crate::sys::hooklist::Api;
use gpumemprof_format::MemKind;
use std::mem::MaybeUninit;

/// Runs `call` (the real function) and, unless this thread is already inside the
/// shim, `after(result, thread)` to record it.
#[inline(always)]
pub fn hooked<R: Copy>(call: impl FnOnce() -> R, after: impl FnOnce(R, &ThreadState)) -> R {
    if session::passing_through() {
        return call();
    }
    let Some(guard) = Guard::enter() else {
        return call();
    };
    let r = call();
    after_call(guard, |me| after(r, me));
    r
}

/// Like `hooked`, for frees: the time is stamped *before* the real call, because the
/// memory may belong to another thread's allocation from the instant the call starts.
#[inline(always)]
pub fn hooked_free<R: Copy>(
    call: impl FnOnce() -> R,
    after: impl FnOnce(R, u64, &ThreadState),
) -> R {
    if session::passing_through() {
        return call();
    }
    let Some(guard) = Guard::enter() else {
        return call();
    };
    let t0 = clock::now_before_release();
    let r = call();
    after_call(guard, |me| after(r, t0, me));
    r
}

/// Runs `f` inside the shim, unless this thread is already there (then nothing runs).
#[inline(always)]
pub fn in_shim(f: impl FnOnce(&ThreadState)) {
    if session::passing_through() {
        return;
    }
    if let Some(guard) = Guard::enter() {
        after_call(guard, f);
    }
}

/// The shim's bookkeeping after a real call: `f` runs with the thread's state, any panic
/// stops here, and the caller's `errno` is what the real function left (opening the
/// trace, a `dlsym`, a thread spawn on first use must not change what the program reads
/// afterwards). Then the guard is released.
#[inline(always)]
fn after_call(guard: Guard, f: impl FnOnce(&ThreadState)) {
    let slot = guard.thread().errno();
    // SAFETY: this thread's errno slot.
    let errno = unsafe { *slot };
    // A panic (a bug of the shim) stops here; the panic hook said so and stopped
    // recording for good (`session/halt.rs`).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(guard.thread())));
    // SAFETY: as above.
    unsafe { *slot = errno };
    drop(guard);
}

/// What one hooked call did, before the common fields are filled in.
pub struct Rec {
    pub kind: EventKind,
    pub api: Api,
    pub mem: MemKind,
    pub device: i32,
    pub time_ns: u64,
    pub address: u64,
    pub size: u64,
    pub stream: u64,
    pub pool: u64,
    pub result: u32,
    pub flags: u8,
    pub aux: u64,
}

impl Rec {
    pub fn new(kind: EventKind, api: Api, time_ns: u64) -> Rec {
        Rec {
            kind,
            api,
            mem: MemKind::Device,
            device: -1,
            time_ns,
            address: 0,
            size: 0,
            stream: 0,
            pool: 0,
            result: 0,
            flags: 0,
            aux: 0,
        }
    }
}

/// Interns `native` with Python frames `py` merged in (if there are any).
#[inline(never)]
fn intern_with_python(native: &[u64], py: &python::Frames) -> u32 {
    if py.is_empty() {
        return intern::intern(native);
    }
    const MERGED: usize = MAX_STACK_DEPTH + python::MAX_PY_FRAMES;
    let mut merged = [MaybeUninit::<u64>::uninit(); MERGED];
    let n = python::merge(py, native, &mut merged);
    // SAFETY: `merge` initialised the first `n` entries.
    intern::intern(unsafe { std::slice::from_raw_parts(merged.as_ptr() as *const u64, n) })
}

/// Captures and interns the stack of thread `me` (the calling one), with its Python
/// frames, if any.
#[inline(never)]
fn capture_stack(depth: usize, me: &ThreadState) -> u32 {
    if python::active() {
        return with_python(depth, me);
    }
    let mut frames = [MaybeUninit::<u64>::uninit(); MAX_STACK_DEPTH];
    // No Python frames are noted for any memo yet: an id noted here is of native frames
    // alone, noted with fingerprint 0, which is that of no Python frames once an
    // interpreter is found (it is never lost again).
    // A walk's frames are the stack interned: its id's slot is asked for while the walk
    // is stored (`unwind::Found`).
    // The hash `prefetch` makes is the one `intern` needs: kept, not made again (a walk
    // that tells `found` its frames returns them; one that walked nothing leaves it 0).
    let mut found = stack::Found::new(intern::prefetch);
    let c = stack::capture_memo(&mut frames[..depth], Some(0), Some(&mut found));
    stack::id_of(c, &frames, 0, |f| intern::intern_hashed(f, found.got))
}

/// `capture_stack` once an interpreter is found: the thread's Python frames read first,
/// and the id noted for the memo (or first-state cache entry) met reused only when it was
/// noted with these Python frames (their fingerprint); then the native frames are not
/// copied either. Its own function, so the Python frames' 1 KiB buffer is not in the
/// native path's stack frame.
#[inline(never)]
fn with_python(depth: usize, me: &ThreadState) -> u32 {
    let mut py = python::Frames::new();
    python::read(&mut py, me.python_caches());
    let with = python::fingerprint::of(&py);
    let mut frames = [MaybeUninit::<u64>::uninit(); MAX_STACK_DEPTH];
    // No prefetch: the stack interned is the merged one, known only after the walk.
    let c = stack::capture_memo(&mut frames[..depth], Some(with), None);
    stack::id_of(c, &frames, with, |native| intern_with_python(native, &py))
}

/// Captures and interns the stack, and hands the event of thread `me` to the writer.
/// Inlined into each handler, so the event is built in registers and stored once, into
/// its ring slot.
#[inline(always)]
pub fn record(me: &ThreadState, r: Rec) {
    let Some(p) = session::recording() else {
        return;
    };
    crate::sys::faults::event_panic_due();
    let free = r.kind == EventKind::Free || (r.kind == EventKind::Tensor && r.aux == TENSOR_FREE);
    let depth = if free {
        session::free_stack_depth()
    } else {
        session::stack_depth()
    };
    let stack = if depth > 0 {
        capture_stack(depth, me)
    } else {
        0
    };
    let ev = Event {
        time_ns: r.time_ns,
        address: r.address,
        size: r.size,
        stream: r.stream,
        pool: r.pool,
        aux: if r.kind == EventKind::Free {
            r.flags as u64
        } else {
            r.aux
        },
        stack,
        device: r.device,
        result: r.result,
        api: r.api.id(),
        kind: r.kind,
        mem: r.mem.to_u8(),
    };
    p.push(me, &ev);
}
