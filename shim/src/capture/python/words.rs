//! A Python frame's word in the trace (its interned code object and line), cached per
//! thread so that a frame met again costs a comparison, not a line lookup or a string copy.

use std::cell::Cell;
use std::ffi::c_int;

use gpumemprof_format::{python_frame, MAX_PY_STRING};

use super::layout::Layout;
use super::{rd_i32, rd_usize, MAX_PY_FRAMES};
use crate::capture::intern;

/// Per-thread cache slots of (code, instruction) -> frame word (a power of two), in sets
/// of two: with one slot a key, two (code, instruction) pairs of a training step's Python
/// stacks that hashed alike took turns evicting each other, each turn a line lookup
/// (`PyCode_Addr2Line`, about 1,300 instructions): from 800 to more than 3,800 in three
/// of four runs of 140 steps of `tests/bench/torch_step.py`, fewer than 100 with two ways
/// (BENCHMARKS.md, eighteenth).
const SLOTS: usize = 256;
const WAYS: usize = 2;

#[derive(Clone, Copy)]
struct Slot {
    code: usize,
    instr: usize,
    /// The code's name string addresses when cached, to notice a reused code address.
    names: usize,
    word: u64,
}

/// A thread's caches of frame words: by (code, instruction) hash (the most recent of a set
/// first), and by position in the last walk (innermost frame 0). Events made in a loop
/// below Python meet the same Python stack every time: by position, each frame finds its
/// own slot, where hashed slots can collide (two frames of one stack taking turns evicting
/// each other, each event then paying for the line lookup twice).
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

impl Caches {
    /// Empty caches. A thread's are part of its state (`capture/thread.rs`), which every
    /// hook reaches anyway: a thread-local of their own cost a third TLS lookup and a call
    /// to its accessor on every capture (BENCHMARKS.md, twenty-fourth).
    pub const fn new() -> Caches {
        Caches {
            hashed: [const { Cell::new(EMPTY_SLOT) }; SLOTS],
            by_position: [const { Cell::new(EMPTY_SLOT) }; MAX_PY_FRAMES],
        }
    }
}

impl Default for Caches {
    fn default() -> Caches {
        Caches::new()
    }
}

/// The set of the hashed cache that (code, instruction) pair `(code, instr)` is kept in.
#[inline(always)]
fn set_of(code: usize, instr: usize) -> usize {
    let h = (code ^ instr.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 56) & (SLOTS / WAYS - 1)
}

/// The frame word of `code` at `instr`, the frame at `position` of the walk (cached in
/// `caches`, see `Caches`); on a miss, `None` without a lookup when `skip` says so, else
/// `line` computes the line. `None` also when the code cannot be interned.
///
/// `skip` checks what a frame met before needs no check of again: that `code` is a code
/// object (its type, on a line of the object apart from its names) at one of its own
/// instructions, and that the frame is complete. A frame cached is a code object that
/// passed them at `instr`, and the names compared tell it from another code object made
/// at its address since: a frame met again reads the line of its code object that holds
/// the names, not also the one that holds the type (BENCHMARKS.md, eighteenth).
///
/// # Safety
/// `code` is the code (or, on 3.13, possibly `None`) a live frame of the interpreter `l`
/// describes holds: a live object, its names' offsets readable.
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
    let set = &caches.hashed[set_of(code, instr) * WAYS..][..WAYS];
    if let Some(hashed) = set.iter().map(Cell::get).find(|&s| same(s)) {
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
    for w in (1..WAYS).rev() {
        set[w].set(set[w - 1].get());
    }
    set[0].set(new);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::python::layout;

    /// Three frames whose (code, instruction) pairs share a set of the hashed cache, asked
    /// past the positions the by-position cache keeps: two of them asked in turn look
    /// their lines up once each (with one slot a key, every turn would), and a third
    /// evicts the one stored first.
    #[test]
    fn two_frames_of_one_set_in_turn_look_their_lines_up_once_and_a_third_evicts_the_first() {
        let l = layout::layout_of(311);
        // A code object's bytes: no names (0, read as "?"), first line 0.
        let code_obj = vec![0u8; 512];
        let code = code_obj.as_ptr() as usize;
        let a = code + 256;
        let mut same_set = (a + 2..a + 4096)
            .step_by(2)
            .filter(|&i| set_of(code, i) == set_of(code, a));
        let (b, c) = (same_set.next().unwrap(), same_set.next().unwrap());
        let caches = Caches::new();
        let (lookups, checks) = (Cell::new(0), Cell::new(0));
        // What `skip` checks (a code object's type, its instruction) is asked of frames
        // the caches do not know only: on a hit the code object's type is not read.
        let skip = || {
            checks.set(checks.get() + 1);
            false
        };
        let ask = |instr: usize| {
            let line = || {
                lookups.set(lookups.get() + 1);
                (instr - a) as c_int
            };
            // SAFETY: `code` is readable at every offset the layout names.
            unsafe { word_unless(&l, &caches, code, instr, MAX_PY_FRAMES, skip, line) }
        };
        let (wa, wb) = (ask(a).unwrap(), ask(b).unwrap());
        assert_ne!(wa, wb);
        assert_eq!(lookups.get(), 2);
        for _ in 0..10 {
            assert_eq!((ask(a), ask(b)), (Some(wa), Some(wb)));
        }
        assert_eq!(lookups.get(), 2);
        // `a` was asked before `b`: `c` takes its way.
        ask(c).unwrap();
        assert_eq!(lookups.get(), 3);
        assert_eq!(ask(b), Some(wb));
        assert_eq!(lookups.get(), 3);
        assert_eq!(ask(a), Some(wa));
        assert_eq!(lookups.get(), 4);
        assert_eq!(checks.get(), 4);
    }
}
