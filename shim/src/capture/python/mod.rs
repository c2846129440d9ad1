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

mod layout;

pub use layout::{for_version, table_text};

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use gpumemprof_format::{python_frame, MAX_PY_STRING};
use parking_lot::Mutex;

use crate::capture::intern;
use crate::sys::dl as dlsym;
use layout::{Layout, OWNED_BY_CSTACK, OWNED_BY_GENERATOR};

/// Python frames read per stack at most (deeper ones are dropped, outermost first).
pub const MAX_PY_FRAMES: usize = 128;

/// What the walk needs of the running interpreter, found once.
struct Interp {
    layout: &'static Layout,
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
            layout,
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

/// Per-thread cache slots of (code, instruction) -> frame word (a power of two).
const SLOTS: usize = 256;

#[derive(Clone, Copy)]
struct Slot {
    code: usize,
    instr: usize,
    /// The code's name string addresses when cached, to notice a reused code address.
    names: usize,
    word: u64,
}

/// A thread's caches of frame words: by (code, instruction) hash, and by position in the
/// last walk (innermost frame 0). Events made in a loop below Python meet the same Python
/// stack every time: by position, each frame finds its own slot, where hashed slots can
/// collide (two frames of one stack taking turns evicting each other, each event then
/// paying for the line lookup twice).
struct Caches {
    hashed: [Cell<Slot>; SLOTS],
    by_position: [Cell<Slot>; MAX_PY_FRAMES],
}

const EMPTY_SLOT: Slot = Slot {
    code: 0,
    instr: 0,
    names: 0,
    word: 0,
};

thread_local! {
    static CACHE: Caches = const {
        Caches {
            hashed: [const { Cell::new(EMPTY_SLOT) }; SLOTS],
            by_position: [const { Cell::new(EMPTY_SLOT) }; MAX_PY_FRAMES],
        }
    };
}

/// The Python frames of the calling thread, innermost first, in `words`; `ends[i]` is
/// one past the last frame of evaluator call `i` (innermost call first). Returns
/// (frames, calls); (0, 0) when the thread runs no Python.
///
/// # Safety
/// Only from the thread whose frames are read (it must be inside a call made from Python
/// or have no Python frames), with `interp` describing the running interpreter.
unsafe fn walk(interp: &Interp, words: &mut [u64], ends: &mut [usize]) -> (usize, usize) {
    if (interp.is_initialized)() == 0 {
        return (0, 0);
    }
    let ts = (interp.this_thread_state)() as usize;
    if ts == 0 {
        return (0, 0);
    }
    let l = interp.layout;
    let mut frame = rd_usize(ts, l.tstate_frame);
    if l.cframe_current >= 0 && frame != 0 {
        frame = rd_usize(frame, l.cframe_current);
    }
    let (mut n, mut calls) = (0usize, 0usize);
    // A cycle cannot happen in a consistent chain; the bound makes sure of termination.
    let mut steps = 0;
    while frame != 0 && n < words.len() && calls < ends.len() && steps < 4 * MAX_PY_FRAMES {
        steps += 1;
        let next = rd_usize(frame, l.frame_previous);
        if !l.interpreter_frames() {
            // 3.9/3.10: one frame object per evaluator call.
            let code = rd_usize(frame, l.frame_code);
            if code != 0 && rd_usize(code, l.ob_type) == interp.code_type {
                let lasti = rd_i32(frame, l.frame_instr) as usize;
                if let Some(w) = word(interp, code, lasti, n, || (interp.frame_line)(frame as _)) {
                    words[n] = w;
                    n += 1;
                    ends[calls] = n;
                    calls += 1;
                }
            }
            frame = next;
            continue;
        }
        let owner = rd_u8(frame, l.frame_owner);
        if owner == OWNED_BY_CSTACK {
            // 3.12+: the evaluator call's own entry frame, below the frames it runs.
            ends[calls] = n;
            calls += 1;
            frame = next;
            continue;
        }
        let code = rd_usize(frame, l.frame_code);
        if code != 0 && rd_usize(code, l.ob_type) == interp.code_type {
            let start = code + l.code_adaptive as usize;
            let instr = rd_usize(frame, l.frame_instr);
            let first = start + 2 * rd_i32(code, l.code_firsttraceable).max(0) as usize;
            // A frame still being set up has no line yet (CPython's _PyFrame_IsIncomplete).
            let incomplete = owner != OWNED_BY_GENERATOR && instr < first;
            if !incomplete && instr >= start {
                let offset = (instr - start) as c_int;
                if let Some(w) = word(interp, code, instr, n, || {
                    (interp.addr2line)(code as _, offset)
                }) {
                    words[n] = w;
                    n += 1;
                }
            }
        }
        if l.frame_is_entry >= 0 && rd_u8(frame, l.frame_is_entry) != 0 {
            // 3.11: the outermost frame its evaluator call runs.
            ends[calls] = n;
            calls += 1;
        }
        frame = next;
    }
    if calls < ends.len() && (calls == 0 || ends[calls - 1] < n) {
        // Frames after the last boundary (a chain cut short): one more call.
        ends[calls] = n;
        calls += 1;
    }
    (n, calls)
}

/// The frame word of `code` at `instr`, the frame at `position` of the walk (cached per
/// thread, see `Caches`); `line` computes the line on a miss. `None` when the code cannot
/// be interned.
#[inline]
unsafe fn word(
    interp: &Interp,
    code: usize,
    instr: usize,
    position: usize,
    line: impl FnOnce() -> c_int,
) -> Option<u64> {
    let l = interp.layout;
    let filename = rd_usize(code, l.code_filename);
    let name = rd_usize(code, l.code_name);
    let names = filename ^ name.rotate_left(17);
    let h = (code ^ instr.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let slot = (h >> 56) & (SLOTS - 1);
    let same = |s: Slot| s.code == code && s.instr == instr && s.names == names;
    let found = CACHE.try_with(|c| {
        let by_position = c.by_position.get(position)?;
        if same(by_position.get()) {
            return Some(by_position.get().word);
        }
        let hashed = c.hashed[slot].get();
        same(hashed).then(|| {
            by_position.set(hashed);
            hashed.word
        })
    });
    if let Ok(Some(w)) = found {
        return Some(w);
    }
    let first_line = rd_i32(code, l.code_firstlineno).max(0) as u32;
    let key = [code, filename, name, first_line as usize];
    let id = intern::intern_code(key, || (py_str(l, filename), py_str(l, name), first_line))?;
    let w = python_frame(id, line().max(0) as u32);
    let _ = CACHE.try_with(|c| {
        let new = Slot {
            code,
            instr,
            names,
            word: w,
        };
        c.hashed[slot].set(new);
        if let Some(p) = c.by_position.get(position) {
            p.set(new);
        }
    });
    Some(w)
}

/// A Python `str` object's text (compact strings: every code object's names are), cut to
/// `MAX_PY_STRING` bytes; `?` for anything else.
unsafe fn py_str(l: &Layout, obj: usize) -> String {
    if obj == 0 {
        return "?".into();
    }
    let state = rd_i32(obj, l.unicode_state) as u32;
    let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
    let len = (rd_usize(obj, l.unicode_length)).min(MAX_PY_STRING);
    if compact == 0 {
        return "?".into();
    }
    if ascii == 1 {
        let p = (obj as isize + l.unicode_ascii_data) as *const u8;
        return String::from_utf8_lossy(std::slice::from_raw_parts(p, len)).into_owned();
    }
    let data = (obj as isize + l.unicode_compact_data) as usize;
    let mut s = String::with_capacity(len);
    for i in 0..len {
        let cp = match kind {
            1 => u32::from(*((data + i) as *const u8)),
            2 => u32::from(*((data + 2 * i) as *const u16)),
            4 => *((data + 4 * i) as *const u32),
            _ => return "?".into(),
        };
        s.push(char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER));
        if s.len() >= MAX_PY_STRING {
            break;
        }
    }
    s
}

/// Merges the calling thread's Python frames into `native` (its native stack, innermost
/// first), writing the result to `out`: each native frame inside the evaluator is replaced
/// by the Python frames that evaluator call runs; Python frames left over (the native
/// stack was cut at its depth) go last. `None` when the thread runs no Python: the native
/// stack stands as it is.
pub fn merge(native: &[u64], out: &mut [MaybeUninit<u64>]) -> Option<usize> {
    let p = INTERP.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: set once from a leaked Box, never freed.
    let interp = unsafe { &*p };
    let mut words = [0u64; MAX_PY_FRAMES];
    let mut ends = [0usize; MAX_PY_FRAMES];
    // SAFETY: this thread's own frames (see the module comment).
    let (n, calls) = unsafe { walk(interp, &mut words, &mut ends) };
    if n == 0 {
        return None;
    }
    let (lo, hi) = interp.eval;
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
        if call < calls && addr > lo && addr <= hi {
            for &w in &words[from..ends[call]] {
                push(w, &mut o);
            }
            from = ends[call];
            call += 1;
        } else {
            push(addr, &mut o);
        }
    }
    for &w in &words[from..n] {
        push(w, &mut o);
    }
    Some(o)
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
