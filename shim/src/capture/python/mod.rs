//! Python frames in stacks (`GPUMEMPROF_STACKS=full`): the allocating thread's own Python
//! frames (file, function, line), merged into its native stack in place of the
//! interpreter's evaluation frames.
//!
//! ```text
//!  native:  cudaMalloc  ctypes_callproc  _PyEval_EvalFrameDefault  _PyEval_EvalFrameDefault  main
//!                                        └─ segment 0: step, alloc └─ segment 1: <module>
//!  merged:  cudaMalloc  ctypes_callproc  alloc@12  step@30         <module>@41               main
//! ```
//!
//! Rules, each for a reason:
//! - Nothing is linked: the interpreter's functions are found with `dlsym` at start (and
//!   again when libraries are loaded), and its structs are read at the offsets of
//!   `layout.rs`, checked against the headers of every version the tests can run.
//! - The GIL is never taken and no Python API that can allocate, run a finaliser or take a
//!   lock is called (PyTorch holds its allocator lock across `cudaMalloc`; a garbage
//!   collection run from here could free a tensor into that allocator and deadlock). The
//!   functions called are pure readers: `Py_IsInitialized`, `PyGILState_GetThisThreadState`
//!   (the thread's own state from thread-specific data), `PyCode_Addr2Line` and, on 3.9/3.10,
//!   `PyFrame_GetLineNumber` (line-table arithmetic).
//! - Only the calling thread's own frame chain is read. Only that thread changes it, and it
//!   is inside our hook, so the chain is stable whether the thread holds the GIL (PyTorch
//!   calls `cudaMalloc` with it) or released it around a foreign call (`ctypes` does).
//!   A thread with no Python thread state or no frames (autograd's backward threads, plain
//!   C threads) keeps its native stack.
//! - Frames are interned: a per-thread cache maps (code object, instruction) to the frame's
//!   word in the trace, so a repeated frame costs a lookup, not a string copy; code objects
//!   are defined once (`intern::intern_code`).

pub mod fingerprint;
mod layout;
mod words;

pub use layout::{for_version, table_text};

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use parking_lot::Mutex;

use crate::sys::dl as dlsym;
use layout::{Layout, OWNED_BY_CSTACK, OWNED_BY_GENERATOR};
pub use words::Caches;

/// Python frames read per stack at most (deeper ones are dropped, outermost first).
pub const MAX_PY_FRAMES: usize = 128;

/// What the walk needs of the running interpreter, found once.
struct Interp {
    /// The stack walk compiled for this version's layout.
    walker: Walker,
    is_initialized: unsafe extern "C" fn() -> c_int,
    this_thread_state: unsafe extern "C" fn() -> *mut c_void,
    addr2line: unsafe extern "C" fn(*mut c_void, c_int) -> c_int,
    /// `PyFrame_GetLineNumber` (3.9/3.10 frames are frame objects).
    frame_line: unsafe extern "C" fn(*mut c_void) -> c_int,
    code_type: usize,
    /// `_PyEval_EvalFrameDefault`'s address range: native frames in it are replaced.
    eval: (u64, u64),
}

/// Set once an interpreter is found (never freed: frames may be walked at any time).
static INTERP: AtomicPtr<Interp> = AtomicPtr::new(std::ptr::null_mut());
/// `GPUMEMPROF_STACKS=full`.
static WANTED: AtomicBool = AtomicBool::new(false);
/// The loader generation last searched, so a search runs once per change.
static SEARCHED: Mutex<Option<(u64, u64)>> = Mutex::new(None);

/// At start: Python frames are wanted; look for an interpreter now.
pub fn init(wanted: bool) {
    WANTED.store(wanted, Ordering::Relaxed);
    refresh();
}

/// Looks for an interpreter if none was found yet and libraries changed since the last
/// search (the writer calls this when it sees the loader's generation change).
pub fn refresh() {
    if !WANTED.load(Ordering::Relaxed) || !INTERP.load(Ordering::Acquire).is_null() {
        return;
    }
    let gen = crate::capture::modules::generation();
    {
        let mut last = SEARCHED.lock();
        if *last == Some(gen) {
            return;
        }
        *last = Some(gen);
    }
    match find() {
        Ok(Some(i)) => INTERP.store(Box::into_raw(Box::new(i)), Ordering::Release),
        Ok(None) => {}
        Err(why) => {
            // Never again: the interpreter found is one we cannot read.
            WANTED.store(false, Ordering::Relaxed);
            crate::sys::diag::warn(&format!("{why}; stacks have native frames only"));
        }
    }
}

/// Whether Python frames are being recorded (an interpreter was found).
pub fn active() -> bool {
    !INTERP.load(Ordering::Relaxed).is_null()
}

fn sym(name: &CStr) -> *mut c_void {
    dlsym::lookup(libc::RTLD_DEFAULT, name)
}

/// `Ok(None)`: no Python in the process (yet). `Err`: a Python we cannot read.
fn find() -> Result<Option<Interp>, String> {
    let get_version = sym(c"Py_GetVersion");
    if get_version.is_null() {
        return Ok(None);
    }
    // SAFETY: Py_GetVersion returns a static NUL-terminated string; callable any time.
    let text = unsafe {
        let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(get_version);
        CStr::from_ptr(f()).to_string_lossy().into_owned()
    };
    let version = parse_version(&text)
        .ok_or_else(|| format!("cannot read the Python version from {text:?}; no Python frames"))?;
    let layout = for_version(version).ok_or_else(|| {
        format!(
            "Python {}.{} is not one this shim can read frames of (3.9 to 3.13)",
            version / 100,
            version % 100
        )
    })?;
    let need = |name: &CStr| {
        let p = sym(name);
        if p.is_null() {
            Err(format!(
                "Python {}.{} without {}",
                version / 100,
                version % 100,
                name.to_string_lossy()
            ))
        } else {
            Ok(p)
        }
    };
    let code_type = need(c"PyCode_Type")? as usize;
    let type_type = need(c"PyType_Type")? as usize;
    // SAFETY: PyCode_Type is a static type object; its header is at least ob_type + 8
    // bytes long in every build.
    let header_ok = unsafe { rd_usize(code_type, layout.ob_type) } == type_type;
    if !header_ok {
        return Err(format!(
            "Python {}.{} has a different object layout (a free-threaded or debug build?)",
            version / 100,
            version % 100
        ));
    }
    let eval_start = need(c"_PyEval_EvalFrameDefault")?;
    let eval = (
        eval_start as u64,
        eval_start as u64 + symbol_size(eval_start),
    );
    type NoArgs<T> = unsafe extern "C" fn() -> T;
    type OneArg = unsafe extern "C" fn(*mut c_void) -> c_int;
    type Addr2Line = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
    // SAFETY: each pointer is the named CPython function, with the C signature given.
    unsafe {
        Ok(Some(Interp {
            walker: walker(version).ok_or("no stack walk for this version")?,
            is_initialized: std::mem::transmute::<*mut c_void, NoArgs<c_int>>(need(
                c"Py_IsInitialized",
            )?),
            this_thread_state: std::mem::transmute::<*mut c_void, NoArgs<*mut c_void>>(need(
                c"PyGILState_GetThisThreadState",
            )?),
            addr2line: std::mem::transmute::<*mut c_void, Addr2Line>(need(c"PyCode_Addr2Line")?),
            frame_line: std::mem::transmute::<*mut c_void, OneArg>(need(c"PyFrame_GetLineNumber")?),
            code_type,
            eval,
        }))
    }
}

/// `3.11.7 (main, ...)` -> 311.
fn parse_version(text: &str) -> Option<u32> {
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    (minor < 100).then_some(major * 100 + minor)
}

/// The size of the function symbol at `addr` (`dladdr1`), or a generous 64 KiB if the
/// symbol table does not say (the evaluator is one large function; a return address
/// past its end would be in the next function, which is never on an allocation path).
fn symbol_size(addr: *mut c_void) -> u64 {
    const RTLD_DL_SYMENT: c_int = 1;
    let mut info = MaybeUninit::<libc::Dl_info>::zeroed();
    let mut sym: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers; dladdr1 fills `sym` with a `const Elf64_Sym *`.
    let ok = unsafe { libc::dladdr1(addr, info.as_mut_ptr(), &mut sym, RTLD_DL_SYMENT) };
    if ok != 0 && !sym.is_null() {
        // SAFETY: Elf64_Sym: st_size is the u64 at offset 16.
        let size = unsafe { *((sym as usize + 16) as *const u64) };
        if size > 0 {
            return size;
        }
    }
    64 << 10
}

#[inline(always)]
unsafe fn rd_usize(base: usize, off: isize) -> usize {
    *((base as isize + off) as *const usize)
}
#[inline(always)]
unsafe fn rd_i32(base: usize, off: isize) -> i32 {
    *((base as isize + off) as *const i32)
}
#[inline(always)]
unsafe fn rd_u8(base: usize, off: isize) -> u8 {
    *((base as isize + off) as *const u8)
}

/// The calling thread's Python frames, as one event read them: `words` innermost first,
/// and `ends[i]` one past the last frame of evaluator call `i` (innermost call first).
/// Built uninitialised on the stack (2 KiB that no event should pay to clear); only the
/// first `n` words and `calls` ends are ever read.
pub struct Frames {
    words: [MaybeUninit<u64>; MAX_PY_FRAMES],
    ends: [MaybeUninit<u8>; MAX_PY_FRAMES],
    n: usize,
    calls: usize,
    /// `_PyEval_EvalFrameDefault`'s address range, when frames were read.
    eval: (u64, u64),
}

// Every end (at most MAX_PY_FRAMES) fits a byte.
const _: () = assert!(MAX_PY_FRAMES <= u8::MAX as usize);

impl Frames {
    /// No frames (until `read` finds some).
    #[inline(always)]
    pub fn new() -> Frames {
        Frames {
            words: [const { MaybeUninit::uninit() }; MAX_PY_FRAMES],
            ends: [const { MaybeUninit::uninit() }; MAX_PY_FRAMES],
            n: 0,
            calls: 0,
            eval: (0, 0),
        }
    }

    /// The frame words, innermost first.
    #[inline(always)]
    pub fn words(&self) -> &[u64] {
        // SAFETY: the first `n` were written by `walk`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u64, self.n) }
    }

    /// Where each evaluator call's frames end in `words`, innermost call first.
    #[inline(always)]
    pub fn ends(&self) -> &[u8] {
        // SAFETY: the first `calls` were written by `walk`.
        unsafe { std::slice::from_raw_parts(self.ends.as_ptr() as *const u8, self.calls) }
    }

    /// Whether the thread ran no Python (or none is being read).
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline(always)]
    fn push_word(&mut self, w: u64) {
        self.words[self.n] = MaybeUninit::new(w);
        self.n += 1;
    }

    #[inline(always)]
    fn end_call(&mut self) {
        self.ends[self.calls] = MaybeUninit::new(self.n as u8);
        self.calls += 1;
    }

    /// Frames as a walk would have read them: `calls` evaluator calls of these words each.
    #[cfg(test)]
    pub fn of_calls(calls: &[&[u64]]) -> Frames {
        let mut f = Frames::new();
        for c in calls {
            for &w in *c {
                f.push_word(w);
            }
            f.end_call();
        }
        f
    }
}

impl Default for Frames {
    fn default() -> Frames {
        Frames::new()
    }
}

/// Reads the calling thread's Python frames into `f` (none when no interpreter is being
/// read or the thread runs no Python), with the calling thread's frame-word `caches`.
pub fn read(f: &mut Frames, caches: &Caches) {
    let p = INTERP.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: set once from a leaked Box, never freed.
    let interp = unsafe { &*p };
    // SAFETY: this thread's own frames (see the module comment).
    unsafe { walk(interp, caches, f) };
}

/// A stack walk compiled for one version's layout (`walker`).
type Walker = unsafe fn(&Interp, &Caches, usize, &mut Frames);

/// The walk for CPython `version` (`major * 100 + minor`): each is compiled with that
/// version's offsets as constants, which keeps the loop's state in registers.
fn walker(version: u32) -> Option<Walker> {
    Some(match version {
        309 => walk_frame_objects::<309>,
        310 => walk_frame_objects::<310>,
        311 => walk_interpreter_frames::<311>,
        312 => walk_interpreter_frames::<312>,
        313 => walk_interpreter_frames::<313>,
        _ => return None,
    })
}

/// Fills `f` with the calling thread's Python frames.
///
/// # Safety
/// Only from the thread whose frames are read (it must be inside a call made from Python
/// or have no Python frames), with `interp` describing the running interpreter.
unsafe fn walk(interp: &Interp, caches: &Caches, f: &mut Frames) {
    f.n = 0;
    f.calls = 0;
    f.eval = interp.eval;
    if (interp.is_initialized)() == 0 {
        return;
    }
    let ts = (interp.this_thread_state)() as usize;
    if ts == 0 {
        return;
    }
    (interp.walker)(interp, caches, ts, f);
    let last_end = f.ends().last().map(|&e| e as usize);
    if f.calls < MAX_PY_FRAMES && last_end.is_none_or(|e| e < f.n) {
        // Frames after the last boundary (a chain cut short): one more call.
        f.end_call();
    }
}

/// The thread's innermost frame (`ts`: its thread state).
#[inline(always)]
unsafe fn first_frame(l: &Layout, ts: usize) -> usize {
    let frame = rd_usize(ts, l.tstate_frame);
    if l.cframe_current >= 0 && frame != 0 {
        return rd_usize(frame, l.cframe_current);
    }
    frame
}

/// Whether the walk may take another step (a cycle cannot happen in a consistent chain;
/// the step bound makes sure of termination).
#[inline(always)]
fn more(frame: usize, f: &Frames, steps: usize) -> bool {
    frame != 0 && f.n < MAX_PY_FRAMES && f.calls < MAX_PY_FRAMES && steps < 4 * MAX_PY_FRAMES
}

/// 3.9/3.10: one frame object per evaluator call.
unsafe fn walk_frame_objects<const V: u32>(
    interp: &Interp,
    caches: &Caches,
    ts: usize,
    f: &mut Frames,
) {
    let l: &'static Layout = &const { layout::layout_of(V) };
    let mut frame = first_frame(l, ts);
    let mut steps = 0;
    while more(frame, f, steps) {
        steps += 1;
        let next = rd_usize(frame, l.frame_previous);
        let code = rd_usize(frame, l.frame_code);
        if code != 0 {
            let lasti = rd_i32(frame, l.frame_instr) as usize;
            // Asked only of a frame the caches do not know (see `words::word_unless`).
            let not_code = || rd_usize(code, l.ob_type) != interp.code_type;
            let line = || (interp.frame_line)(frame as _);
            if let Some(w) = words::word_unless(l, caches, code, lasti, f.n, not_code, line) {
                f.push_word(w);
                f.end_call();
            }
        }
        frame = next;
    }
}

/// 3.11+: interpreter frames, several per evaluator call.
unsafe fn walk_interpreter_frames<const V: u32>(
    interp: &Interp,
    caches: &Caches,
    ts: usize,
    f: &mut Frames,
) {
    let l: &'static Layout = &const { layout::layout_of(V) };
    let code_type = interp.code_type;
    let mut frame = first_frame(l, ts);
    let mut steps = 0;
    while more(frame, f, steps) {
        steps += 1;
        let next = rd_usize(frame, l.frame_previous);
        let owner = rd_u8(frame, l.frame_owner);
        if owner == OWNED_BY_CSTACK {
            // 3.12+: the evaluator call's own entry frame, below the frames it runs.
            f.end_call();
            frame = next;
            continue;
        }
        let code = rd_usize(frame, l.frame_code);
        if code != 0 {
            let start = code + l.code_adaptive as usize;
            let instr = rd_usize(frame, l.frame_instr);
            let line = || (interp.addr2line)(code as _, (instr - start) as c_int);
            // Asked only of a frame the caches do not know (`words::word_unless`): whether
            // it is a code object at one of its own instructions, and complete (a frame
            // still being set up has no line yet, CPython's _PyFrame_IsIncomplete; only
            // complete frames are cached).
            let skip = || {
                if rd_usize(code, l.ob_type) != code_type || instr < start {
                    return true;
                }
                let first = start + 2 * rd_i32(code, l.code_firsttraceable).max(0) as usize;
                owner != OWNED_BY_GENERATOR && instr < first
            };
            if let Some(w) = words::word_unless(l, caches, code, instr, f.n, skip, line) {
                f.push_word(w);
            }
        }
        if l.frame_is_entry >= 0 && rd_u8(frame, l.frame_is_entry) != 0 {
            // 3.11: the outermost frame its evaluator call runs.
            f.end_call();
        }
        frame = next;
    }
}

/// Merges Python frames `f` into `native` (the same thread's native stack, innermost
/// first), writing the result to `out` and returning its length: each native frame inside
/// the evaluator is replaced by the Python frames that evaluator call runs; Python frames
/// left over (the native stack was cut at its depth) go last.
pub fn merge(f: &Frames, native: &[u64], out: &mut [MaybeUninit<u64>]) -> usize {
    let (words, ends) = (f.words(), f.ends());
    let (lo, hi) = f.eval;
    let mut o = 0;
    let mut call = 0;
    let mut from = 0;
    let mut push = |w: u64, o: &mut usize| {
        if *o < out.len() {
            out[*o] = MaybeUninit::new(w);
            *o += 1;
        }
    };
    for &addr in native {
        if call < ends.len() && addr > lo && addr <= hi {
            let end = ends[call] as usize;
            for &w in &words[from..end] {
                push(w, &mut o);
            }
            from = end;
            call += 1;
        } else {
            push(addr, &mut o);
        }
    }
    for &w in &words[from..] {
        push(w, &mut o);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_py_getversion() {
        assert_eq!(
            parse_version("3.11.7 (main, Jan  1 2024, 00:00:00) [GCC 12.2.0]"),
            Some(311)
        );
        assert_eq!(parse_version("3.9.18"), Some(309));
        assert_eq!(parse_version("3.13.0rc1+"), Some(313));
        assert_eq!(parse_version("garbage"), None);
    }
}
