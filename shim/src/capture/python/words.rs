//! A Python frame's word in the trace (its interned code object and line), cached per
//! thread so that a frame met again costs a comparison, not a line lookup or a string copy.

use std::cell::Cell;
use std::ffi::c_int;

use gpumemprof_format::{python_frame, MAX_PY_STRING};

use super::layout::Layout;
use super::{rd_i32, rd_usize, MAX_PY_FRAMES};
use crate::capture::intern;

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
pub struct Caches {
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

/// Runs `f` with this thread's caches (const-initialised with no destructor, so they are
/// there for the whole life of the thread, its teardown included).
#[inline(always)]
pub fn with_caches<R>(f: impl FnOnce(&Caches) -> R) -> R {
    CACHE.with(f)
}

/// The frame word of `code` at `instr`, the frame at `position` of the walk (cached in
/// `caches`, see `Caches`); `line` computes the line on a miss. `None` when the code
/// cannot be interned.
///
/// # Safety
/// `code` is a live code object of the interpreter `l` describes.
#[inline(always)]
pub unsafe fn word(
    l: &Layout,
    caches: &Caches,
    code: usize,
    instr: usize,
    position: usize,
    line: impl FnOnce() -> c_int,
) -> Option<u64> {
    word_unless(l, caches, code, instr, position, || false, line)
}

/// `word`, or `None` without a lookup when `skip` says so on a cache miss (a frame met
/// before at this instruction was complete then, and is now: `skip` is only asked of
/// frames not cached).
///
/// # Safety
/// As `word`.
#[inline(always)]
pub unsafe fn word_unless(
    l: &Layout,
    caches: &Caches,
    code: usize,
    instr: usize,
    position: usize,
    skip: impl FnOnce() -> bool,
    line: impl FnOnce() -> c_int,
) -> Option<u64> {
    let filename = rd_usize(code, l.code_filename);
    let name = rd_usize(code, l.code_name);
    let names = filename ^ name.rotate_left(17);
    let same = |s: Slot| s.code == code && s.instr == instr && s.names == names;
    let by_position = caches.by_position.get(position);
    if let Some(p) = by_position {
        let s = p.get();
        if same(s) {
            return Some(s.word);
        }
    }
    let h = (code ^ instr.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let slot = (h >> 56) & (SLOTS - 1);
    let hashed = caches.hashed[slot].get();
    if same(hashed) {
        if let Some(p) = by_position {
            p.set(hashed);
        }
        return Some(hashed.word);
    }
    if skip() {
        return None;
    }
    let first_line = rd_i32(code, l.code_firstlineno).max(0) as u32;
    let key = [code, filename, name, first_line as usize];
    let id = intern::intern_code(key, || (py_str(l, filename), py_str(l, name), first_line))?;
    let w = python_frame(id, line().max(0) as u32);
    let new = Slot {
        code,
        instr,
        names,
        word: w,
    };
    caches.hashed[slot].set(new);
    if let Some(p) = by_position {
        p.set(new);
    }
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
